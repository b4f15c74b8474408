"""Command-line I/O shared by every command: the one parser (:class:`OneLineParser`, usage errors raised as
:class:`UsageError`), one-line usage errors (:func:`usage_error`: ``PROG: error: MESSAGE`` and exit 2), and the
one writer (:func:`write_result`: stdout or ``--out FILE``; a closed pipe ends quietly, a failed write is one line,
a closed stdout (``>&-``) is one line and exit 2), the bounded file reader and writer of every input and
output file (:func:`read_regular_file`, :func:`write_text_file`: a FIFO nobody reads, a device or a
directory is refused in one line, never waited on), the one JSON reader of every file the project reads
(:func:`parse_json`, :func:`read_json_file`: size, nesting depth and integer-literal length bounded, one line
naming the file and what is wrong), the one integer option type (:func:`int_option`: a documented range,
bools and out-of-range values refused in one line), and the one progress bar of every long command
(:func:`progress`: on stderr when it is a terminal, silent otherwise and with ``--json``).

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
import json
import os
import re
import stat
import sys
from itertools import accumulate
from typing import TYPE_CHECKING, NoReturn

from tqdm import tqdm

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

#: the one line a command prints when it was started with stdout closed (``sys.stdout is None``)
STDOUT_CLOSED = "stdout is closed (the command was started with >&-); redirect it to a file or /dev/null instead"


#: seconds before a progress bar appears: a command that finishes sooner shows none
PROGRESS_DELAY = 1.0


def is_terminal(stream) -> bool:
    """Whether ``stream`` is open and a terminal (a pipe, a file, a capture or a closed stream is not)."""
    try:
        return stream is not None and bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or closed
        return False


def progress(iterable=None, *, total: int | None = None, desc: str | None = None, quiet: bool = False,
             **options) -> tqdm:
    """The progress bar of every command that can run for more than a few seconds: :class:`tqdm.tqdm` on
    stderr, shown after :data:`PROGRESS_DELAY` seconds only when stderr is a terminal and ``quiet`` is false
    (a command passes ``quiet=args.json``: a script reading JSON wants no bar). Otherwise the bar is disabled:
    it writes nothing, and ``update`` costs nothing. ``options``: more of tqdm's (``unit``, ...)."""
    stream = sys.stderr
    return tqdm(iterable, total=total, desc=desc, file=stream, delay=PROGRESS_DELAY, leave=False,
                disable=quiet or not is_terminal(stream), **options)


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


#: the deepest nesting of arrays and objects a JSON input may have (the project's own files nest at most 4
#: deep); deeper input is refused before parsing, so it never reaches Python's recursion limit
MAX_JSON_DEPTH = 64
#: the most digits an integer literal in a JSON input may have (a 64-bit integer has 20); a longer one is
#: refused before Python's ``int`` conversion limit (4,300 digits) raises its multi-line ``ValueError``
MAX_JSON_INT_DIGITS = 100

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


class _LongInteger(Exception):
    """Raised by the integer hook of :func:`parse_json` for a literal over the digit limit."""


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of the JSON ``text`` nest (0 for a bare value), counted on the
    brackets outside string literals, without parsing (so without recursion)."""
    brackets = _JSON_BRACKET.findall(_JSON_STRING.sub('""', text))
    return max(accumulate(1 if b in "[{" else -1 for b in brackets), default=0)


def parse_json(text: str | bytes, source: str, *, max_depth: int = MAX_JSON_DEPTH,
               max_int_digits: int = MAX_JSON_INT_DIGITS, parse_constant=None) -> object:
    """The parsed JSON ``text`` (bytes are read as UTF-8, a byte-order mark allowed); :class:`FileRefused`
    in one line ``SOURCE: WHAT IS WRONG`` for text that is not UTF-8, not JSON, nested deeper than
    ``max_depth`` or holding an integer literal of more than ``max_int_digits`` digits.

    ``parse_constant`` is :func:`json.loads`'s (``NaN``, ``Infinity``); the caller checks the values.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise FileRefused(f"{source}: not UTF-8 text (byte {exc.start})") from None
    depth = json_depth(text)
    if depth > max_depth:
        raise FileRefused(f"{source}: JSON nested too deeply ({depth:,} levels of arrays and objects; the limit "
                          f"is {max_depth})")

    def integer(literal: str) -> int:
        if len(literal.lstrip("-")) > max_int_digits:
            raise _LongInteger(literal)
        return int(literal)

    try:
        return json.loads(text, parse_int=integer, parse_constant=parse_constant)
    except json.JSONDecodeError as exc:
        raise FileRefused(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except _LongInteger as exc:
        digits = len(exc.args[0].lstrip("-"))
        raise FileRefused(f"{source}: JSON integer too long ({digits:,} digits; the limit is {max_int_digits})"
                          ) from None
    except RecursionError:  # only reachable with a max_depth near the interpreter's recursion limit
        raise FileRefused(f"{source}: JSON nested too deeply") from None


def read_json_file(path: str, limit: int, what: str, **limits) -> object:
    """The parsed JSON of the regular file ``path`` (at most ``limit`` bytes): :func:`read_regular_file`
    then :func:`parse_json`; :class:`FileRefused` in one line naming ``what`` and the path otherwise.
    ``limits``: :func:`parse_json`'s keyword arguments."""
    return parse_json(read_regular_file(path, limit, what), f"{what} {path!a}", **limits)


def int_option(low: int, high: int, what: str = "an integer"):
    """The one argparse ``type=`` of every integer option: a whole number from ``low`` to ``high`` (inclusive),
    written in decimal digits with an optional sign and ``,`` or ``_`` between digit groups (``1,024``,
    ``1_024``). Anything else (``True``, ``1.5``, ``2**63``, ``1e3``) and any value outside the range is refused
    with the range in the message, which argparse reports as ``argument --steps: ...`` (one line and exit 2
    under :class:`OneLineParser`); a literal longer than ``high`` is refused before ``int`` converts it.
    ``what`` names the value in argparse's own messages."""
    limit_digits = len(str(max(abs(low), abs(high))))

    def parse(text: str) -> int:
        raw = text.strip() if isinstance(text, str) else ""
        if not re.fullmatch(r"[+-]?[0-9]+(?:[,_][0-9]+)*", raw):
            shown = ascii(text)[:60]
            raise argparse.ArgumentTypeError(f"must be a whole number >= {low} and <= {high}, got {shown}")
        raw = raw.replace(",", "").replace("_", "")
        digits = raw.lstrip("+-").lstrip("0") or "0"
        if len(digits) > limit_digits or not low <= int(raw) <= high:
            shown = raw if len(raw) <= 40 else f"{raw[:20]}... ({len(digits):,} digits)"
            raise argparse.ArgumentTypeError(f"must be >= {low} and <= {high}, got {shown}")
        return int(raw)

    parse.__name__ = what  # argparse names the type in its fallback messages
    return parse


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


#: reST markup a description written for the docs may carry: a role (``:mod:`x```, ``:func:`~a.b```) or a literal
_RST_MARKUP = re.compile(r":[a-z]+:`~?([^`]*)`|``([^`]*)``")


def plain_text(text: str) -> str:
    """``text`` with its reST roles and double-backtick literals replaced by what they name (a terminal shows
    markup as typed): ``:mod:`a.b``` → ``a.b``."""
    return _RST_MARKUP.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), text)


class OneLineParser(argparse.ArgumentParser):
    """The ``ArgumentParser`` of every command: a usage error raises :class:`UsageError` (the command
    reports it on one line and exits 2; argparse would print the usage block), and so does ``--help``
    with stdout closed (argparse would print the help on stderr). Subcommands:
    ``add_subparsers(parser_class=OneLineParser)``. The help text is plain: reST markup in a description
    or an option's help is shown as what it names (:func:`plain_text`)."""

    def format_help(self) -> str:
        return plain_text(super().format_help())

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
