"""Command lines called in the test's own process: ``main(argv)`` with stdout and stderr captured.

A fresh ``python -m ...`` imports the project and re-derives its rules (about 10-40 s of CPU before the first
case); the tests that check what a command does with its arguments call its ``main(argv)`` here instead and
keep a real subprocess only where the process is what is tested (exit status of ``python -m``, closed stdout,
FIFOs, hangs in C code, bounds on the work that must not take the test process down).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from types import SimpleNamespace

import benchmarks.coeffsearch as bench_coeffsearch
import coeffsearch.__main__ as coeffsearch_main
import derivations.cli as rule_cli

#: the emit gate's verdict per ``(rule, seed)``: ``emit_gate(rule)`` runs every cited lemma's self-check with a
#: fixed seed (about 1 s of CPU), the same checks with the same verdict for every ``--emit`` of the rule
_GATE_VERDICTS: dict[tuple[str, int], list[str]] = {}


def _gate_once(rule, seed=0, _real=rule_cli.emit_gate):
    key = (rule.name, seed)
    if key not in _GATE_VERDICTS:
        _GATE_VERDICTS[key] = _real(rule, seed)
    return list(_GATE_VERDICTS[key])


def share_emit_gate(monkeypatch):
    """For one test: ``--emit`` runs each rule's gate once per process, not once per call (the same verdict)."""
    monkeypatch.setattr(rule_cli, "emit_gate", _gate_once)


def main_of(kind):
    """The ``main(argv)`` of a command: ``coeffsearch``, ``bench-coeffsearch``, a rule module's name, or a dotted
    module name (``benchmarks.gram``, ``derivations.regenerate``: what ``python -m`` would run)."""
    if "." in kind:
        return importlib.import_module(kind).main
    if kind == "coeffsearch":
        return coeffsearch_main.main
    if kind == "bench-coeffsearch":
        return bench_coeffsearch.main
    module = importlib.import_module("derivations." + kind).rule_module()
    return lambda argv: rule_cli.main(module, argv)


def run_case(kind, argv, catch=Exception) -> dict:
    """One command line called in this process: ``{argv, rc, stderr, stdout, escaped}`` (``escaped``: the repr
    of an exception of class ``catch`` that left ``main``; ``rc`` is then None). The subprocess runner of
    ``tests/project/test_hostile_cli.py`` passes ``BaseException``; here a pytest-timeout stop must pass through."""
    out, err = io.StringIO(), io.StringIO()
    saved, escaped = sys.stdout, ""
    try:
        sys.stdout = out
        with contextlib.redirect_stderr(err):
            try:
                rc = main_of(kind)(argv)
            except SystemExit as e:
                rc = e.code
    except catch as e:  # what escaped is the finding
        rc, escaped = None, repr(e)[:400]
    finally:
        sys.stdout = saved
    return {"argv": argv, "rc": rc, "stderr": err.getvalue(), "stdout": out.getvalue(), "escaped": escaped}


def run_command(kind, *argv):
    """``python -m KIND ARGV`` as a finished process looks (``returncode``, ``stdout``, ``stderr``), its ``main``
    called in this process by :func:`run_case`; an exception that escapes ``main`` fails the test."""
    row = run_case(kind, list(argv))
    assert not row["escaped"], f"{kind} {' '.join(map(str, argv))}: {row['escaped']}"
    return SimpleNamespace(returncode=row["rc"], stdout=row["stdout"], stderr=row["stderr"])


def call_mains(cases, tmp_path, monkeypatch):
    """``[(kind, argv)]`` → one :func:`run_case` row per case, run in this process with ``tmp_path`` as the
    working directory and the emit gate shared (:func:`share_emit_gate`)."""
    share_emit_gate(monkeypatch)
    monkeypatch.chdir(tmp_path)
    return [run_case(kind, argv) for kind, argv in cases]
