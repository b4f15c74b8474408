"""The page "Cross-checking your derivation" (docs/crosscheck.rst): every command on it runs, in this process and
the way the docs build runs it, and exits with the status the page claims (``:returncode:``, 0 when absent); the
files it shows exist. Each command runs once per test session (one module fixture), so this stays cheap.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the docs extra is not installed (pip install -e '.[docs]')")

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "crosscheck.rst"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

from workbench_sphinx import commands  # noqa: E402 (found through the sys.path entry)

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

#: a command-output directive and its options (indented lines right after it)
DIRECTIVE = re.compile(r"^\.\. command-output:: (?P<command>.+)\n(?P<options>(?: {3}:\w+:.*\n)*)", re.MULTILINE)


def page_commands(text: str) -> list[tuple[str, int]]:
    """``(command, expected exit status)`` for every ``.. command-output::`` of a page."""
    out = []
    for m in DIRECTIVE.finditer(text):
        status = re.search(r":returncode: *(-?\d+)", m.group("options"))
        out.append((m.group("command").strip(), int(status.group(1)) if status else 0))
    return out


def mismatches(claims: list[tuple[str, int]], ran: dict[str, tuple[int, str]]) -> list[str]:
    """The commands whose exit status is not the one claimed."""
    return [f"{command}: exited {ran[command][0]}, the page says {expected}"
            for command, expected in claims if ran[command][0] != expected]


@pytest.fixture(scope="module")
def ran() -> dict[str, tuple[int, str]]:
    """Every command of the page run once, as the docs build runs it: ``{command: (status, output)}``."""
    out = {}
    for command, _ in page_commands(PAGE.read_text(encoding="utf-8")):
        words = shlex.split(command)
        assert words[:2] == ["python", "-m"], command
        out[command] = commands.run(words[2], words[3:])
    return out


def test_every_command_exits_as_the_page_claims(ran):
    claims = page_commands(PAGE.read_text(encoding="utf-8"))
    assert not mismatches(claims, ran)
    kinds = " ".join(command for command, _ in claims)
    for needed in ("--chain docs/examples/halfsplit_query.md", "--chain docs/examples/halfsplit_key.tex",
                   "--chain docs/examples/rank_obstruction.md", "--chain docs/examples/optimality_unchecked.md",
                   "identity", "--assume", "--config docs/examples/config.json", "--compare", "--compare-active"):
        assert needed in kinds, needed
    assert sorted({status for _, status in claims}) == [0, 1, 3]  # 3: a chain not proven


def test_the_planted_wrong_step_is_found_and_the_diagnoses_are_shown(ran):
    status, text = ran["python -m derivations.crosscheck --chain docs/examples/halfsplit_key.tex"]
    assert status == 1 and "FIRST FAILURE at step 3 (equality); 2 of 2 earlier steps held" in text
    assert "diagnosis:" in text and "counterexample" in text
    # a scalar-valued step: the diagnosis names the transpose, and no "scale" that is just candidate / derived
    assert "diagnosis: the candidate equals the derived result with G_M.T transposed" in text
    assert "× the derived result" not in text
    assert "all 3 steps hold" in ran["python -m derivations.crosscheck --chain docs/examples/halfsplit_query.md"][1]
    compare = next(t for c, (s, t) in ran.items() if "--config docs/examples/config.json --compare" in c)
    assert "the Q, K and V biases left out + untied input and output embeddings" in compare


def test_a_page_claiming_another_status_is_caught(ran):
    """The planted mistake: the page without its ``:returncode: 1`` lines claims 0 for the failing examples."""
    text = PAGE.read_text(encoding="utf-8")
    planted = re.sub(r"^ {3}:returncode: 1\n", "", text, flags=re.MULTILINE)
    failing = [command for command, status in page_commands(text) if status == 1]
    assert len(failing) >= 3
    found = mismatches(page_commands(planted), ran)
    assert [line.split(": exited")[0] for line in found] == failing


def test_commands_run_in_the_repository_root_wherever_the_build_starts(tmp_path, monkeypatch):
    """``sphinx-build`` started in docs/ (or anywhere) still finds docs/examples/config.json."""
    monkeypatch.chdir(tmp_path)
    status, text = commands.run("paramcount", ["--config", "docs/examples/config.json"])
    assert status == 0 and "total: 494,032,768" in text, text
    assert Path.cwd() == tmp_path


def test_the_files_the_page_shows_exist():
    text = PAGE.read_text(encoding="utf-8")
    shown = re.findall(r"^\.\. literalinclude:: (\S+)", text, re.MULTILINE)
    named = set(re.findall(r"docs/examples/[\w.-]+", text))
    assert shown and named
    for path in [PAGE.parent / p for p in shown] + [ROOT / p for p in named]:
        assert path.is_file(), path
