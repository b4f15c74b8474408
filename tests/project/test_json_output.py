"""``--json`` means one thing in every command: one JSON document on stdout and nothing else there.

Every command that has the option is run with it in this process (:func:`tests.inprocess.run_command`) and its
stdout must parse as exactly one JSON document: a line printed before or after it (a report line, a
progress message) fails. The commands are found, not listed: every module whose source adds ``"--json"``
must have its cases here, and so must every ``coeffsearch`` subcommand whose parser has the option. The
planted command prints a line before its JSON and must fail the check.

The cases are the cheapest inputs of each command: what is checked is the shape of stdout, not the
computation (``compare`` and ``crosscheck --list`` get their rows and names from stubs: each would spend
10-30 s computing what this test does not read). The cases that compile JAX or build derivations run end to end.
"""

from __future__ import annotations

import argparse
import json

import pytest

import coeffsearch.__main__ as coeffsearch_main
from derivations.cli import torch_installed
from derivations.crosscheck import rule_lookup
from tests import inprocess
from tests.inprocess import run_command
from tests.project.test_commandline import ROOT, module_files

#: the module that adds ``--json`` -> the command that runs it (a rule module's name for the rule command line)
COMMANDS = {"coeffsearch.__main__": "coeffsearch", "derivations.cli": "damped",
            "derivations.crosscheck.cli": "derivations.crosscheck.cli", "paramcount.count": "paramcount.count",
            "benchmarks.torch_step": "benchmarks.torch_step", "benchmarks.step": "benchmarks.step"}
CROSSCHECK = "derivations.crosscheck.cli"
e2e = pytest.mark.e2e
#: (command, argv without --json, exit status); the coeffsearch cases are named by their subcommand
CASES = [
    pytest.param("coeffsearch", ["minimax", "--steps", "2", "--lower", "0.1"], 0, id="minimax"),
    pytest.param("coeffsearch", ["band", "--steps", "2", "--lower", "0.1", "--slope", "2"], 0, id="band"),
    pytest.param("coeffsearch", ["certify", "muon", "--steps", "1", "--lower", "1e-2"], 0, id="certify"),
    pytest.param("coeffsearch", ["restarts", "muon", "--dtype", "float16", "--restarts", "1"], 0, id="restarts"),
    pytest.param("coeffsearch", ["sources", "muon"], 0, id="sources"),
    pytest.param("coeffsearch", ["compare", "muon"], 0, id="compare"),
    pytest.param("coeffsearch", ["inverse-root-search", "--p", "2", "--lower", "0.1", "--steps", "1"], 0,
                 id="inverse-root-search"),
    pytest.param("coeffsearch", ["validate", "muon", "--shape", "8x16", "--dtype", "float32", "--batch", "1"], 0,
                 id="validate", marks=e2e),
    pytest.param("coeffsearch", ["validate", "muon", "--gram", "--shape", "8x16", "--dtype", "float32",
                                 "--batch", "1"], 0, id="validate-gram", marks=e2e),
    pytest.param("coeffsearch", ["validate-model", "muon", "--dtype", "float32", "--method", "standard",
                                 "--shape", "8x16", "--batch", "1"], 0, id="validate-model", marks=e2e),
    pytest.param("paramcount.count", ["--config", str(ROOT / "docs" / "examples" / "config.json")], 0,
                 id="paramcount"),
    pytest.param(CROSSCHECK, ["identity", "A+B", "B+A"], 0, id="crosscheck-identity"),
    pytest.param(CROSSCHECK, ["identity", "A+B", "B-A"], 1, id="crosscheck-different"),
    pytest.param(CROSSCHECK, ["--list"], 0, id="crosscheck-list"),
    pytest.param(CROSSCHECK, ["halfsplit.query", "-(eps/2)*msign(G_Q*C_K^-1)*C_K^-1"], 0, id="crosscheck-derivation",
                 marks=e2e),
    pytest.param("damped", ["--check", "--trials", "1"], 0, id="rule-check", marks=e2e),
    pytest.param("benchmarks.step", ["--rows", "rules", "--shapes", "gpt2", "--small", "--repeats", "1"], 0,
                 id="step-rules", marks=e2e),
    pytest.param("benchmarks.torch_step", ["--small", "--repeats", "1"], 0, id="torch-step",
                 marks=pytest.mark.skipif(not torch_installed(), reason="torch is not installed")),
]


def json_stdout_problem(kind: str, argv: list[str], status: int = 0) -> str | None:
    """Why ``KIND ARGV --json`` does not print exactly one JSON document on stdout (None when it does)."""
    r = run_command(kind, *argv, "--json")
    if r.returncode != status:
        return f"{kind} {' '.join(argv)} --json: exit status {r.returncode}, expected {status}: {r.stderr[-300:]}"
    try:
        json.loads(r.stdout)
    except json.JSONDecodeError as exc:
        return (f"{kind} {' '.join(argv)} --json: stdout is not one JSON document ({exc.msg}, line {exc.lineno}): "
                f"{r.stdout[:120]!r}")
    return None


@pytest.fixture
def stubbed(monkeypatch):
    """The computations whose results the cases do not read, replaced (their printing code is the command's)."""
    row = {"schedule": "muon", "steps": 5, "matmuls": 15, "certified_band": [0.7, 1.2], "worst_error": 0.3,
           "bf16_observed_band": [0.7, 1.2], "u_max": "1.1"}
    monkeypatch.setattr(coeffsearch_main, "compare_rows", lambda named, lower, upper, progress=None: [row] * len(named))
    monkeypatch.setattr(rule_lookup, "derivation_names", lambda use_cache=True, progress=None: ["halfsplit.key",
                                                                                      "halfsplit.query"])


@pytest.mark.parametrize("kind, argv, status", CASES)
def test_json_prints_one_document_on_stdout(kind, argv, status, stubbed):
    assert json_stdout_problem(kind, argv, status) is None


def test_a_planted_line_before_the_json_is_found(monkeypatch):
    def chatty(argv):
        print("searching ...")  # the line a command must not print with --json
        print(json.dumps({"verdict": "equal"}))
        return 0

    real = inprocess.main_of
    monkeypatch.setattr(inprocess, "main_of", lambda kind: chatty if kind == "chatty" else real(kind))
    problem = json_stdout_problem("chatty", [])
    assert problem is not None and "not one JSON document" in problem and "searching" in problem


def test_every_command_with_json_has_its_cases():
    """A new ``--json`` (a module, or a coeffsearch subcommand) must be added to :data:`CASES`."""
    found = {name for name, path in module_files().items() if '"--json"' in path.read_text(encoding="utf-8")}
    assert found == set(COMMANDS), f"modules adding --json: {sorted(found)}; COMMANDS knows {sorted(COMMANDS)}"
    cases = {(p.values[0], p.values[1][0]) for p in CASES}
    assert all(kind in {k for k, _ in cases} for kind in COMMANDS.values()), cases
    subparsers = next(a for a in coeffsearch_main.parser()._actions if isinstance(a, argparse._SubParsersAction))
    with_json = {name for name, sub in subparsers.choices.items() if "--json" in sub._option_string_actions}
    assert with_json == set(subparsers.choices)  # every subcommand offers it
    assert with_json <= {first for kind, first in cases if kind == "coeffsearch"}, with_json


def test_json_where_it_does_not_apply_is_a_usage_error():
    r = run_command("damped", "--emit", "text", "--json")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r
    assert "argument --json: only with --check" in r.stderr
