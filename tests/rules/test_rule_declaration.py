"""A rule is one declaration: a new rule file is emitted, shipped and tested with nothing else written by hand.

The example inputs of every emitted function come from the rule's declaration
(:mod:`derivations.printing.examples`), not from a table in the tests. End to end: in a copy of the repository
one file, ``derivations/toy.py`` (the one-sided query update ``−ε msign(G_Q C_K⁻¹) C_K⁻¹``, no declared sizes),
is regenerated into ``numerics/emitted/``, its golden copies are written by its own ``--emit``, and the tests
driven by the registry and the shipped modules pass for it (command line, golden copy, translation validation,
non-finite inputs, hostile inputs, the docs' worker round trip, the LaTeX round trip); ``git status`` then shows
the rule file, the regenerated module and the two golden copies only. The plants: the same toy with example
sizes that break its full-column-rank partner, without a size, or with two equal sizes is refused by ``--emit``,
``--check`` and ``python -m derivations.regenerate`` in one line naming the rule, the function and the argument.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from derivations import registry
from derivations.cli import check_table, failures, main
from derivations.printing.examples import (
    ExampleError,
    adapter_size_problems,
    example_call,
    example_names,
    example_problems,
)
from derivations.regenerate import SUFFIXES, shipped, targets
from tests.conftest import load_module

ROOT = Path(__file__).resolve().parents[2]

#: the toy rule module; ``{sizes}`` is where a declaration of example sizes goes (empty: the check sizes)
TOY = '''"""Toy rule: the one-sided query update, whole budget ε on ΔW_Q W_Kᵀ (written by test_rule_declaration.py)."""
from functools import cache

from sympy.matrices.expressions import MatrixSymbol

from derivations import (FULL_COLUMN_RANK, Context, EmittedFunction, FactMatrix, Inner, OpNorm, Problem, RuleModule,
                         derive, dimension, positive_symbol, product, transpose)

d, d_h, eps = dimension("d"), dimension("d_h"), positive_symbol("epsilon")
W_K = FactMatrix("W_K", d, d_h, [FULL_COLUMN_RANK])
G_M, G_Q, dW_Q = MatrixSymbol("G_M", d, d), MatrixSymbol("G_Q", d, d_h), MatrixSymbol("dW_Q", d, d_h)


@cache
def query():
    change = product(dW_Q, transpose(W_K))
    context = Context(definitions={G_Q: product(G_M, W_K)}, check_dims=[{d: 6, d_h: 2}, {d: 4, d_h: 4}],
                      mpmath_dims={d: 4, d_h: 2})
    return derive(Problem(dW_Q, Inner(G_M, change), OpNorm(change), eps), context, name="toy.query",
                  title="Toy: one-sided query update")


def derivations():
    return [query()]


def emitted_functions():
    return [EmittedFunction("toy_query", "One-sided query update", [W_K, G_Q], [("dW_Q", query())])]


def rule_module():
    return RuleModule(name="toy", title="Toy one-sided rule", derivations=derivations, functions=emitted_functions,
                      scalars={eps: "eps"}{sizes})


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
'''

#: wrong declarations and the line each must give
PLANTS = {
    "tall partner made wide": (", example_sizes={d: 2, d_h: 6}",
                               "toy: the example of toy_query: argument W_K (d × d_h = 2 × 6) has full column rank: "
                               "needs rows >= columns"),
    "a size missing": (", example_sizes={d: 6}",
                       "toy: the example of toy_query: argument W_K (d × d_h) has no example size for d_h "
                       "(example_sizes gives d)"),
    "equal sizes": (', example_sizes={"d": 4, "d_h": 4}',
                    "toy: the example of toy_query: sizes d = d_h = 4 are equal"),
}


def toy(tmp_path, sizes=""):
    """The toy rule module, ``sizes`` spliced into its declaration."""
    path = tmp_path / f"toy_{abs(hash(sizes))}.py"
    path.write_text(TOY.replace("{sizes}", sizes))
    return load_module(path, path.stem).rule_module()


def test_the_toy_draws_its_example_from_its_declaration(tmp_path):
    rule = toy(tmp_path)
    assert example_names(rule) == ["toy_query"] and example_problems(rule) == []
    args, kwargs = example_call(rule, "toy_query", np.random.default_rng(0))
    assert [a.shape for a in args] == [(6, 2), (6, 2)] and set(kwargs) == {"eps"}  # the first distinct check size
    assert np.linalg.matrix_rank(args[0]) == 2  # the partner has full column rank, as declared
    args, _ = example_call(toy(tmp_path, ", example_sizes={d: 9, d_h: 4}"), "toy_query", np.random.default_rng(0))
    assert [a.shape for a in args] == [(9, 4), (9, 4)]


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_wrong_example_declaration_is_refused_in_one_line(plant, tmp_path, capsys):
    sizes, message = PLANTS[plant]
    rule = toy(tmp_path, sizes)
    with pytest.raises(ExampleError) as info:
        example_call(rule, "toy_query", np.random.default_rng(0))
    assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)
    assert main(rule, ["--emit", "jax"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"derivations.toy: not emitted: {message}") and err.count("\n") == 1, err
    table = check_table(rule, trials=1, seed=0)
    assert not table["ok"] and any(f.startswith(message) for f in failures(table))


def test_adapter_and_block_declarations_are_checked():
    joint = registry.rule_module("joint")
    adapter = joint.adapters()[0]
    assert adapter_size_problems(adapter, {"d": 3, "d_h": 5}) == [
        "stored weights W_Q, W_K have heads of d × d_h = 3 × 5 of full column rank: needs d > d_h (d = d_h would "
        "hide a transposed head)"]
    gqa = registry.rule_module("gqa").adapters()[0]
    assert adapter_size_problems(gqa, {"d": 7, "d_h": 3, "H": 5, "H_kv": 2}) == [
        "H_kv = 2 shared heads do not divide H = 5 heads"]
    assert adapter_size_problems(gqa, {"d": 7, "d_h": 3}) == [
        "stored arguments W_Q, W_K, G_Q, G_K have no example size for H, H_kv"]
    split = dataclasses.replace(joint, example_sizes={"d": 6, "m": 4, "n": 13, "d_h": 2})  # 13 rows: no two blocks
    with pytest.raises(ExampleError, match=r"^joint: the example of joint_whitened: argument P \(n × m = 13 × 4\) "
                                           r"does not split into diagonal blocks of d = 6 rows"):
        example_call(split, "joint_whitened", np.random.default_rng(0))


def test_every_shipped_function_has_a_declared_example():
    """Each public name of each shipped module (functions and adapters) has an example call, and it runs."""
    for rule in shipped():
        module = registry.rule_module(rule)
        emitted = importlib.import_module(f"numerics.emitted.{rule}")
        assert set(emitted.__all__) == set(example_names(module)), rule
        assert example_problems(module) == [], rule


# ---- end to end: the toy in a copy of the repository ----------------------------------------------------------

COPIED = ("foundation", "derivations", "coeffsearch", "paramcount", "numerics", "benchmarks", "tests", "docs")
#: the tests the registry or the shipped modules drive (restricted to the toy with ``-k toy``)
RULE_DRIVEN = ("tests/rules/test_cli.py", "tests/rules/test_golden.py", "tests/printing/test_translation_validation.py",
               "tests/printing/test_battery.py",
               "tests/printing/test_nonfinite.py", "tests/printing/test_hostile_routines.py",
               "tests/project/test_docs_pages.py", "tests/parsing/test_latex_roundtrip.py")


def _copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name in COPIED:
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__", "_build"))
    for name in ("pyproject.toml", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    for argv in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "copy"]):
        subprocess.run(["git", *argv], cwd=repo, check=True, capture_output=True)
    return repo


@pytest.mark.e2e
def test_a_new_rule_is_one_file(tmp_path):
    repo = _copy(tmp_path)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, "PYTHONPATH": str(repo)}

    def run(*argv, timeout=600):
        return subprocess.run([sys.executable, *argv], cwd=repo, capture_output=True, text=True, timeout=timeout,
                              env=env, check=False)

    rule_file = repo / "derivations" / "toy.py"
    sizes, message = PLANTS["tall partner made wide"]
    rule_file.write_text(TOY.replace("{sizes}", sizes))
    for argv, prefix in ((["-m", "derivations.regenerate", "--regenerate", "--rule", "toy"],
                          "derivations.regenerate: not regenerated: "),
                         (["-m", "derivations.toy", "--emit", "jax"], "derivations.toy: not emitted: ")):
        r = run(*argv)
        assert r.returncode == 1 and r.stdout == "" and r.stderr.startswith(prefix + message), r.stderr[-2000:]
        assert r.stderr.count("\n") == 1, r.stderr
    shipped_copies = [f"numerics/emitted/toy{SUFFIXES[target]}.py" for target in targets()]  # PyTorch's if installed
    assert not any((repo / path).exists() for path in shipped_copies)

    rule_file.write_text(TOY.replace("{sizes}", ""))  # the rule as it should be: nothing declared
    r = run("-m", "derivations.regenerate", "--regenerate", "--rule", "toy")
    assert r.returncode == 0 and "changed: toy" in r.stdout, r.stdout + r.stderr[-2000:]
    for target in ("jax", "numpy"):  # the golden test wants frozen copies: written by the rule's own --emit
        r = run("-m", "derivations.toy", "--emit", target, "--out", f"tests/golden/toy_{target}.py")
        assert r.returncode == 0, r.stderr[-2000:]

    # both tiers: the rule's whole command line (tests/rules/test_cli.py) and its full battery are e2e
    r = run("-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-rA", "-m", "e2e or not e2e", "-k",
            "toy or every_emitting_rule_has_golden_copies", *RULE_DRIVEN)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    passed = [line for line in r.stdout.splitlines() if line.startswith("PASSED")]  # -rA: one line per test
    for path in RULE_DRIVEN + ("test_every_emitting_rule_has_golden_copies",):
        assert any(path in line for line in passed), (path, r.stdout[-6000:])

    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True,
                            text=True, check=True).stdout
    assert sorted(line[3:] for line in status.splitlines()) == sorted([
        "derivations/toy.py", *shipped_copies, "tests/golden/toy_jax.py", "tests/golden/toy_numpy.py"]), status
