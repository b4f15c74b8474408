"""Command-line I/O shared by every command: the one parser (:class:`OneLineParser`, usage errors raised as
:class:`UsageError`), one-line usage errors (:func:`usage_error`: ``PROG: error: MESSAGE`` and exit 2), and the
one writer (:func:`write_result`: stdout or ``--out FILE``; a closed pipe ends quietly, a failed write is one line,
a closed stdout (``>&-``) is one line and exit 2), and the bounded file reader and writer of every input and
output file (:func:`read_regular_file`, :func:`write_text_file`: a FIFO nobody reads, a device or a
directory is refused in one line, never waited on).

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
import errno
import fcntl
import os
import stat
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

#: the one line a command prints when it was started with stdout closed (``sys.stdout is None``)
STDOUT_CLOSED = "stdout is closed (the command was started with >&-); redirect it to a file or /dev/null instead"


class UsageError(Exception):
    """Bad command-line input: reported on one line (:func:`usage_error`), exit status 2."""


class FileRefused(ValueError):
    """An input or output file that cannot be used: the one-line reason, naming the option and the path.
    Each command re-raises it as its own error type (a usage error, a bad schedule, a bad chain file)."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words: ``a directory``, ``a FIFO (named pipe)``, ``a device``, ..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def read_regular_file(path: str, limit: int, what: str) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes; :class:`FileRefused`
    (one line naming ``what``, the path and the fix) otherwise. Opened without blocking and checked on the
    open descriptor, so a FIFO, a device or a directory is refused, never waited on or read without end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise FileRefused(f"{what} {path!a}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{what} {path!a} is {file_kind(info.st_mode)}: give a regular file")
        if info.st_size > limit:
            raise FileRefused(f"{what} {path!a} is {info.st_size:,} bytes, over the limit of {limit:,}: "
                              f"give a smaller file")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:  # grew while being read
            raise FileRefused(f"{what} {path!a} is over the limit of {limit:,} bytes: give a smaller file")
        return b"".join(chunks)
    except OSError as exc:
        raise FileRefused(f"{what} {path!a}: cannot read it: {exc.strerror}") from None
    finally:
        os.close(fd)


def write_text_file(path: str, text: str, what: str) -> None:
    """Write ``text`` (UTF-8) to ``path``; :class:`FileRefused` in one line when it cannot be written.

    Opened without blocking: a FIFO that no process reads is refused at once (``ENXIO``) instead of
    waiting for a reader forever; one being read (``--out >(gzip > f.gz)``) is written normally. A
    directory is refused; a full device (``/dev/full``) is refused when the write fails.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_NOCTTY, 0o666)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        if getattr(exc, "errno", None) == errno.ENXIO:
            raise FileRefused(f"{what} {path!a} is a FIFO (named pipe) that no process is reading: "
                              f"start the reader first, or give a regular file") from None
        raise FileRefused(f"{what} {path!a}: cannot write it: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # a reader exists now
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(fd, data):]
    except OSError as exc:
        raise FileRefused(f"{what} {path!a}: cannot write it: {exc.strerror}") from None
    finally:
        os.close(fd)


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
            write_text_file(out, text, "--out")
        except FileRefused as exc:
            return usage_error(prog, exc)
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

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """argparse's, except that an unknown option is named before a missing required one
        (``--bogus`` alone says "unrecognized arguments: --bogus", not "--emit is required")."""
        try:
            return super().parse_args(args, namespace)
        except UsageError as exc:
            unknown = self.unrecognized(args) if "required" in str(exc) else []
            if unknown:
                raise UsageError(f"unrecognized arguments: {' '.join(unknown)}") from None
            raise

    def unrecognized(self, args) -> list[str]:
        """The arguments this parser does not know, found with every requirement switched off."""
        candidates: list[argparse.Action | argparse._MutuallyExclusiveGroup] = [*self._actions,
                                                                             *self._mutually_exclusive_groups]
        switched = [a for a in candidates if a.required]
        for item in switched:
            item.required = False
        try:
            return self.parse_known_args(args)[1]
        except UsageError:
            return []
        finally:
            for item in switched:
                item.required = True

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        """argparse's, except that a closed or full stdout is a usage error (exit 2): argparse drops the
        ``OSError`` of the write and exits 0."""
        if file is not None:
            super().print_help(file)
            return
        if sys.stdout is None:
            raise UsageError(STDOUT_CLOSED)
        try:
            sys.stdout.write(self.format_help())
            sys.stdout.flush()
        except OSError as exc:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (nothing more can be written there)
            if not isinstance(exc, BrokenPipeError):
                raise UsageError(f"cannot write to stdout: {exc.strerror or exc}") from None
