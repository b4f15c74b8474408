"""Command-line I/O shared by the commands: one-line usage errors, and writing the result to stdout
(a closed pipe ends quietly, a failed write is one line)."""

from __future__ import annotations

import argparse
import os
import sys


def write_result(prog: str, text: str, status: int) -> int:
    """Write ``text`` and return the exit status: ``status``, or 2 when stdout cannot be written.

    A reader that closed the pipe (``| head``) is not an error; a full disk is (one line on stderr).
    """
    try:
        sys.stdout.write(text)
        sys.stdout.flush()  # a full disk shows here, not at interpreter exit
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (nothing more can be written there)
        return status
    except OSError as exc:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        sys.stderr.write(f"{prog}: error: cannot write to stdout: {exc.strerror or exc}\n")
        return 2
    return status


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line, ``PROG: error: MESSAGE``, and exit 2."""

    def error(self, message):
        sys.stderr.write(f"{self.prog.removeprefix('python -m ')}: error: {message}\n")
        sys.exit(2)
