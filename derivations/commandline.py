"""Command-line I/O shared by every command: the one parser (:class:`OneLineParser`, usage errors raised as
:class:`UsageError`), one-line usage errors (:func:`usage_error`: ``PROG: error: MESSAGE`` and exit 2), and the
one writer (:func:`write_result`: stdout or ``--out FILE``; a closed pipe ends quietly, a failed write is one line,
a closed stdout (``>&-``) is one line and exit 2).

A command's ``main(argv)`` parses with :class:`OneLineParser`, raises :class:`UsageError` for input it refuses
after parsing, and turns either into its exit status::

    try:
        args = parser.parse_args(argv)
        ...
    except UsageError as exc:
        return usage_error(prog, exc)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import IO, NoReturn

#: the one line a command prints when it was started with stdout closed (``sys.stdout is None``)
STDOUT_CLOSED = "stdout is closed (the command was started with >&-); redirect it to a file or /dev/null instead"


class UsageError(Exception):
    """Bad command-line input: reported on one line (:func:`usage_error`), exit status 2."""


def error_line(prog: str, message: str) -> None:
    """``PROG: error: MESSAGE`` on stderr (nothing when stderr is closed too)."""
    if sys.stderr is not None:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"{prog}: error: {message}\n")


def usage_error(prog: str, exc: Exception | str) -> int:
    """Report a usage error on one line, ``PROG: error: MESSAGE``, and return the exit status 2."""
    error_line(prog, str(exc))
    return 2


def stdout_closed(prog: str) -> bool:
    """True, after one line on stderr, when stdout is closed: Python sets ``sys.stdout`` to None when
    file descriptor 1 is not open at startup, and ``print`` then discards everything silently.
    A command calls it before doing any work: ``if stdout_closed(prog): return 2``."""
    if sys.stdout is not None:
        return False
    error_line(prog, STDOUT_CLOSED)
    return True


def stdout_failed(prog: str, exc: OSError, status: int) -> int:
    """The exit status after writing to stdout raised ``exc``: a reader that closed the pipe (``| head``)
    is not an error (``status``); anything else (a full disk) is one line on stderr and 2. Later writes
    go to /dev/null, so the interpreter's final flush stays quiet."""
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (nothing more can be written there)
    if isinstance(exc, BrokenPipeError):
        return status
    error_line(prog, f"cannot write to stdout: {exc.strerror or exc}")
    return 2


def write_result(prog: str, text: str, status: int, out: str | None = None) -> int:
    """Write ``text`` to stdout, or to the file ``out`` (``--out FILE``), and return the exit status:
    ``status``, or 2 (after one line on stderr) when it cannot be written.

    A reader that closed the pipe (``| head``) is not an error; a full disk is, and so is a closed
    stdout (``>&-``) and a file that cannot be written.
    """
    if out is not None:
        try:
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(text)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path (possible through main(argv))
            return usage_error(prog, f"cannot write --out {out!a}: {getattr(exc, 'strerror', None) or exc}")
        return status
    if stdout_closed(prog):
        return 2
    try:
        sys.stdout.write(text)
        sys.stdout.flush()  # a full disk shows here, not at interpreter exit
    except OSError as exc:
        return stdout_failed(prog, exc, status)
    return status


class OneLineParser(argparse.ArgumentParser):
    """The ``ArgumentParser`` of every command: a usage error raises :class:`UsageError` (the command
    reports it on one line and exits 2; argparse would print the usage block), and so does ``--help``
    with stdout closed (argparse would print the help on stderr). Subcommands:
    ``add_subparsers(parser_class=OneLineParser)``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def print_help(self, file: IO[str] | None = None) -> None:
        if file is None and sys.stdout is None:
            raise UsageError(STDOUT_CLOSED)
        super().print_help(file)
