"""Progress of the long commands: one helper (:func:`foundation.commandline.progress`), a bar on stderr only
when stderr is a terminal, and none with ``--json`` or on a pipe.

The helper is checked on a fake terminal (a text stream whose ``isatty`` is true) and on a pipe-like stream
(a plain one); a planted bar that ignores the terminal check must fail the same check. Two commands are run
in this process with a fake terminal as stderr: their bar shows, and with ``--json`` it does not. No module
but the helper's builds a tqdm bar itself (an AST scan of the project's sources; a planted one is found).
"""

from __future__ import annotations

import ast
import contextlib
import io
import sys

import pytest
from tqdm import tqdm

import coeffsearch.__main__ as coeffsearch_main
from derivations.crosscheck import cli as crosscheck_cli
from foundation import commandline
from foundation.commandline import progress
from tests.project.test_commandline import module_files

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def shown(make_bar, stream: io.StringIO, **options) -> str:
    """What ``make_bar(range(3), desc="work", **options)`` writes, run to the end with ``stream`` as stderr."""
    saved, sys.stderr = sys.stderr, stream
    try:
        for _ in make_bar(range(3), desc="work", **options):
            pass
    finally:
        sys.stderr = saved
    return stream.getvalue()


def progress_problems(make_bar) -> list[str]:
    """How ``make_bar`` breaks the rule: no bar on a terminal, or any output on a pipe or when quiet."""
    problems = []
    if "work" not in shown(make_bar, FakeTerminal()):
        problems.append("no bar on a terminal")
    if shown(make_bar, io.StringIO()):
        problems.append("output on a pipe")
    if shown(make_bar, FakeTerminal(), quiet=True):
        problems.append("output when quiet (--json)")
    return problems


@pytest.fixture
def no_delay(monkeypatch):
    monkeypatch.setattr(commandline, "PROGRESS_DELAY", 0.0)  # the bar shows at once, however fast the work


def test_the_helper_shows_a_bar_only_on_a_terminal_and_not_when_quiet(no_delay):
    assert progress_problems(progress) == []
    assert "0/3" in shown(progress, FakeTerminal())  # on stderr, with its total


def test_a_planted_bar_that_ignores_the_terminal_check_is_found(no_delay):
    def ignores_terminal(iterable, *, desc, quiet=False):
        return tqdm(iterable, desc=desc, file=sys.stderr, disable=quiet)

    assert progress_problems(ignores_terminal) == ["output on a pipe"]


def command_stderr(main, argv: list[str]) -> str:
    """The stderr of ``main(argv)`` run with a fake terminal as stderr (stdout captured and dropped)."""
    err = FakeTerminal()
    with contextlib.redirect_stdout(io.StringIO()):
        saved, sys.stderr = sys.stderr, err
        try:
            assert main(argv) == 0
        finally:
            sys.stderr = saved
    return err.getvalue()


@pytest.mark.parametrize("main, argv, desc", [
    (coeffsearch_main.main, ["minimax", "--steps", "2", "--lower", "0.1"], "minimax"),
    (crosscheck_cli.main, ["identity", "A+B", "B+A"], "evaluating"),
], ids=["coeffsearch-minimax", "crosscheck-identity"])
def test_a_command_shows_its_bar_on_a_terminal_and_none_with_json(main, argv, desc, no_delay):
    assert desc in command_stderr(main, argv)
    assert command_stderr(main, [*argv, "--json"]) == ""


def tqdm_users(sources: dict[str, str]) -> list[str]:
    """The modules (name -> source) that import tqdm themselves."""
    found = []
    for name, source in sources.items():
        if "tqdm" not in source:  # nothing to parse
            continue
        for node in ast.walk(ast.parse(source)):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(m == "tqdm" or m.startswith("tqdm.") for m in modules):
                found.append(name)
                break
    return found


def test_only_the_helper_builds_a_progress_bar():
    sources = {name: path.read_text(encoding="utf-8") for name, path in module_files().items()}
    assert tqdm_users(sources) == ["foundation.commandline"]
    planted = {**sources, "numerics.planted": "from tqdm.auto import tqdm\nbar = tqdm(range(3))\n"}
    assert tqdm_users(planted) == ["foundation.commandline", "numerics.planted"]
