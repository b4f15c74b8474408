"""Input the cross-checker refuses (:class:`BadInput`: one line, exit status 2) and reading a user's
file within a size limit."""

from __future__ import annotations

from foundation.commandline import FileRefused, read_regular_file

CHAIN_MAX_BYTES = 1_000_000  # a --chain file over this, or not a regular file, is refused


class BadInput(ValueError):
    """Input the cross-checker cannot use: reported on one line, exit status 2."""


def read_input(path: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); ``BadInput`` in one line otherwise
    (:func:`foundation.commandline.read_regular_file`: a FIFO, a device or a directory is refused)."""
    try:
        return read_regular_file(path, limit, what)
    except FileRefused as exc:
        raise BadInput(str(exc)) from None


__all__ = ["CHAIN_MAX_BYTES", "BadInput", "read_input"]
