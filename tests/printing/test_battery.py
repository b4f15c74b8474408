"""One hostile battery over every function of every registered rule, for both targets, from the declaration alone.

Every public function of every rule's emitted JAX and NumPy modules (the adapters, the ``mla_*`` functions and
``gqa_value`` with shared value heads included) goes through :mod:`derivations.printing.battery`: the example its
rule declares with leading batch axes, the scale ladder on every argument and scalar, NaN/±Inf in each argument,
rank-deficient and ill-conditioned partners, bool/int/complex arguments and 0-size axes. Each result agrees with
the checked formulas within the stated tolerance, or is one clear line. Argument roles come from the declaration
(facts, stored weight names), never from a table here, so a new rule gets the battery with nothing added
(tests/rules/test_rule_declaration.py runs this file on a toy rule in a copy of the repository).

The suite runs a slice, grouped by promise: the declared example shapes without batch axes, the NumPy target in
every dtype, the JAX target in float64 (one compilation per function, every case through it;
tests/printing/test_hostile_routines.py runs the JAX float32 and float16 planted mistakes through the battery);
the whole battery (every dtype, batch axes ``(2, 3)``, a fresh seed, mpmath references) is ``@pytest.mark.e2e``,
and so is ``python -m derivations.hostile --run``.
Planted mistakes: a NumPy runtime without its exponent handling, a NumPy check that takes bool arrays, a result
off by 1e-6, a traceback, and a refusal of a representable result are each caught.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from derivations import registry
from derivations.hostile import report, rule_subjects
from derivations.printing.battery import judge, pair_of, run, size, tolerance
from derivations.printing.battery_cases import DTYPES, PROMISES, Case, cases
from foundation.compute import numpy_exact_scaling, numpy_routines

ROOT = Path(__file__).resolve().parents[2]
RULES = [r for r in registry.rule_names() if registry.rule_module(r).functions()]
#: the dtypes the suite runs per target (the e2e battery: every one of :data:`DTYPES`)
SUITE = {"jax": ("float64",), "numpy": DTYPES["numpy"]}
#: at least this many cases per function and dtype (the declaration drives how many: arguments, partners)
MIN_CASES = 30


def findings(rule, target, promises, dtypes, seed=0, batch=(), exact=False):
    """The battery's findings (one line each) for ``rule``'s ``target`` module. The suite calls the declared example
    shapes (compiled once per function and shared with the other tests of the emitted functions) and compares
    scaled outputs that are not homogeneous with the other target (``exact=False``); the e2e battery adds batch
    axes and compares with mpmath."""
    subs = rule_subjects(rule)
    return [f.line() for s in subs if s.target == target for d in dtypes
            for f in run(s, d, seed, batch, pair_of(s, subs), promises, exact) if f.status != "ok"]


@pytest.mark.parametrize("target", ["jax", "numpy"])
@pytest.mark.parametrize("rule", RULES)
def test_every_result_is_the_checked_value_at_every_scale(rule, target):
    """The example with batch axes, and every argument, eps, damping and all arrays at 2^±k (float64: 1e±30,
    1e±150, 1e±300): the reference exactly, or the documented under/overflow line where the result is not
    representable."""
    assert findings(rule, target, ("value", "scale"), SUITE[target]) == []


@pytest.mark.parametrize("target", ["jax", "numpy"])
@pytest.mark.parametrize("rule", RULES)
def test_bad_arguments_are_refused_naming_them(rule, target):
    """NaN/±Inf in each argument, bool/int/complex arguments, a boolean eps or damping, 0-size axes: one line
    naming the argument (an int array may be taken as its real values, and must then be right); an empty batch
    gives empty outputs of the right shapes."""
    assert findings(rule, target, ("nonfinite", "dtype", "empty"), SUITE[target]) == []


@pytest.mark.parametrize("target", ["jax", "numpy"])
@pytest.mark.parametrize("rule", RULES)
def test_rank_deficient_and_ill_conditioned_partners(rule, target):
    """Each partner (declared full rank) rank-deficient: the minimum-norm update, as the other target gives it;
    ill-conditioned (κ = 1e6 in float64, against mpmath): right to ``64 u κ``."""
    assert findings(rule, target, ("partner",), SUITE[target][:1]) == []


#: functions with no full-rank argument: the tied table alone, and the Shampoo steps, whose only other arguments are
#: symmetric positive definite preconditioners (drawn well conditioned; their inverse roots are floored at n·eps·λ_max)
WITHOUT_PARTNERS = ("tied_embedding", "shampoo_two_sided", "shampoo_one_sided")


def test_the_battery_covers_every_function_of_every_rule():
    """Every public function of every emitted module is a subject, with at least :data:`MIN_CASES` cases per
    dtype; the roles are the declaration's (partners: full-rank facts or a stored weight)."""
    for rule in RULES:
        module = registry.rule_module(rule)
        subs = rule_subjects(rule)
        names = {fn.name for fn in module.functions()}
        adapters = {a.entry for a in module.adapters()} if module.adapters else set()
        assert {s.name for s in subs if s.target == "numpy"} == names, rule
        assert {s.name for s in subs if s.target == "jax"} == names | adapters, rule
        for s in subs:
            assert s.partners and set(s.partners) <= set(s.arguments) or s.name in WITHOUT_PARTNERS, s.case_id
            assert size(s, "float64") >= MIN_CASES, (s.case_id, size(s, "float64"))
    gqa_value = next(s for s in rule_subjects("gqa") if s.name == "gqa_value" and s.target == "jax")
    assert gqa_value.partners == ["W_Obar"] and gqa_value.draw(np.random.default_rng(0))[1]["group_size"] > 1


def test_the_battery_size_is_printed_per_rule_and_target():
    text, found = report(["gqa", "halfsplit"], False, 0, (2,), None)
    lines = text.splitlines()
    assert found == 0 and lines[0].startswith("gqa jax: 6 functions, ") and lines[-1].startswith("total: ")
    assert int(lines[-1].split()[1]) >= 2000, text


# ---- the planted mistakes ---------------------------------------------------------------------------------------

def _numpy(rule, name):
    return next(s for s in rule_subjects(rule) if s.name == name and s.target == "numpy")


def test_planted_numpy_without_exponent_handling_is_caught(monkeypatch):
    """Every exponent read as 0 in the NumPy runtime: right at unit scale, wrong or refused on the ladder."""
    monkeypatch.setattr(numpy_exact_scaling, "pow2_exponent", lambda m: np.zeros(np.shape(m), dtype=np.int64))
    monkeypatch.setattr(numpy_routines, "pow2_exponent", lambda m: np.zeros(np.shape(m), dtype=np.int64))
    subject = _numpy("gauge", "horizontal_projection")
    got = run(subject, "float64", promises=("value", "scale"))
    assert got[0].status == "ok"
    assert sum(f.status in ("wrong", "refused") for f in got) >= 3, [f.line() for f in got]


def test_planted_numpy_taking_bool_arrays_is_caught(monkeypatch):
    """The NumPy check once took bool arrays as 0/1 (the JAX target refuses them): the dtype cases catch it."""
    check = numpy_routines.validate_arrays

    def taking_bools(function, shapes, arrays, scalars, positive=()):
        return check(function, shapes, {k: np.asarray(v, dtype=np.float64) if np.asarray(v).dtype == bool else v
                                        for k, v in arrays.items()}, scalars, positive)
    subject = _numpy("halfsplit", "halfsplit_v")
    assert all(f.status == "ok" for f in run(subject, "float64", promises=("dtype",)))
    monkeypatch.setitem(subject.call.__globals__, "validate_arrays", taking_bools)
    got = [f.line() for f in run(subject, "float64", promises=("dtype",)) if f.status != "ok"]
    assert len(got) == 2 and all("as bool: wrong returned instead of refusing" in g for g in got), got


def _first_case(subject, promise):
    return next(cases(subject, "float64", 0, (2,), None, (promise,)))


def test_planted_silent_errors_are_judged():
    """A result off by 1e-6, an unexpected exception, and an underflow refusal of a result of size 1."""
    subject = _numpy("halfsplit", "halfsplit_qk")
    case = _first_case(subject, "value")
    right = subject.call(*subject.to_target(case.args), **case.kwargs)
    assert judge(case, right, "float64", "numpy")[0] == "ok"
    off = tuple(r * (1 + 1e-6) for r in right)
    assert tolerance("float64", "numpy") < 1e-6 and judge(case, off, "float64", "numpy")[0] == "wrong"
    assert judge(case, tuple(np.where(r == r.max(), np.inf, r) for r in right), "float64", "numpy")[0] == "wrong"
    assert judge(case, RuntimeError("boom"), "float64", "numpy")[0] == "traceback"
    assert judge(case, ValueError("two\nlines"), "float64", "numpy")[0] == "traceback"
    refused = ValueError("halfsplit_qk: the result underflows float64 (…) with max|W_Q| = 1")
    assert judge(case, refused, "float64", "numpy")[0] == "refused"
    tiny = dataclasses.replace(case, expect=lambda: ([np.ones((2, 2))], (-1070,)))
    assert judge(tiny, refused, "float64", "numpy")[0] == "ok"
    nan_case = next(cases(subject, "float64", 0, (2,), None, ("nonfinite",)))
    assert judge(nan_case, right, "float64", "numpy")[0] == "wrong"
    assert judge(nan_case, ValueError("halfsplit_qk: G_K contains NaN or Inf"), "float64", "numpy")[0] == "refused"
    assert isinstance(case, Case)


# ---- the whole battery, with fresh variants ----------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.parametrize("target", ["jax", "numpy"])
@pytest.mark.parametrize("rule", RULES)
def test_the_whole_battery_with_fresh_variants(rule, target):
    assert findings(rule, target, PROMISES, DTYPES[target], seed=7, batch=(2, 3), exact=True) == []


@pytest.mark.e2e
def test_the_battery_command_line():
    r = subprocess.run([sys.executable, "-m", "derivations.hostile", "--run", "--rule", "tied_embeddings", "--seed",
                        "3"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0 and r.stdout.splitlines()[-1].endswith(", 0 findings"), r.stdout + r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "derivations.hostile", "--batch", "0"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--batch" in r.stderr, r.stderr
