"""Command-line I/O shared by the commands: one-line usage errors, and writing the result to stdout
(a closed pipe ends quietly, a failed write is one line, a closed stdout (``>&-``) is one line and exit 2)."""

from __future__ import annotations

import argparse
import os
import sys

#: the one line a command prints when it was started with stdout closed (``sys.stdout is None``)
STDOUT_CLOSED = "stdout is closed (the command was started with >&-); redirect it to a file or /dev/null instead"


def error_line(prog: str, message: str) -> None:
    """``PROG: error: MESSAGE`` on stderr (nothing when stderr is closed too)."""
    if sys.stderr is not None:
        try:
            sys.stderr.write(f"{prog}: error: {message}\n")
        except OSError:
            pass


def stdout_closed(prog: str) -> bool:
    """True, after one line on stderr, when stdout is closed: Python sets ``sys.stdout`` to None when
    file descriptor 1 is not open at startup, and ``print`` then discards everything silently.
    A command calls it before doing any work: ``if stdout_closed(prog): return 2``."""
    if sys.stdout is not None:
        return False
    error_line(prog, STDOUT_CLOSED)
    return True


def write_result(prog: str, text: str, status: int) -> int:
    """Write ``text`` and return the exit status: ``status``, or 2 when stdout cannot be written.

    A reader that closed the pipe (``| head``) is not an error; a full disk is (one line on stderr),
    and so is a closed stdout (``>&-``).
    """
    if stdout_closed(prog):
        return 2
    try:
        sys.stdout.write(text)
        sys.stdout.flush()  # a full disk shows here, not at interpreter exit
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (nothing more can be written there)
        return status
    except OSError as exc:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        error_line(prog, f"cannot write to stdout: {exc.strerror or exc}")
        return 2
    return status


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line, ``PROG: error: MESSAGE``, and exit 2;
    ``--help`` with stdout closed is one line and exit 2 too (argparse would print the help on stderr)."""

    def error(self, message):
        error_line(self.prog.removeprefix('python -m '), message)
        sys.exit(2)

    def print_help(self, file=None):
        if file is None and stdout_closed(self.prog.removeprefix("python -m ")):
            sys.exit(2)
        super().print_help(file)
