"""The restart rounding model against measured runs (``python -m coeffsearch validate-model``).

Sound: at a tiny size (8 x 8, one matrix per spectrum) no measured deviation or norm of the shipped
searched Gram schedules (float32, float16, bfloat16) and of the standard iteration exceeds its
certificate; a planted certificate 10 % below the measured worst is caught. The model's parameters:
both signs of the spurious eigenvalue, ``γ_n`` for the accumulation length, the rounded input; a
certificate whose stated accumulation length was edited fails its re-check.
"""

import copy
import dataclasses
import io
from contextlib import redirect_stderr, redirect_stdout
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import coeffsearch
from coeffsearch.__main__ import main
from coeffsearch.certify import CertificateError, decimal_down, decimal_up
from coeffsearch.restart_arithmetic import Box, FloatBoxes, make_step
from coeffsearch.restart_bounds import CORNERS
from coeffsearch.restart_certificate import certify_positions, recheck
from coeffsearch.restart_model import Model, RestartError, positions_to_flags, propagate
from coeffsearch.validate_model import measure_one, shipped, shipped_steps, validate_model

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

TINY = ((8, 8),)  # square: one compilation per dtype and method serves both orientations


@pytest.fixture(scope="module")
def measured():
    """The shipped searched Gram schedules against their shipped certificates (stated: no proof redone),
    and the standard iteration of Muon's quintic where it is certified quickly (float32, float16)."""
    searched = shipped_steps()
    rows, bounds = [], {}
    for name, steps in searched.items():
        dtype = shipped()[name]["dtype"]
        r, b = validate_model({name: steps}, (dtype,), ("gram",), TINY, count=1)
        rows, bounds = rows + r, {**bounds, **b}
    r, b = validate_model({"muon": coeffsearch.get("muon").steps}, ("float32", "float16"), ("standard",), TINY,
                          count=1)
    return rows + r, {**bounds, **b}


def test_no_measured_value_exceeds_its_certificate(measured):
    rows, _ = measured
    assert not [r for r in rows if r.exceeds]
    certified = {(r.dtype, r.method) for r in rows if r.certified_deviation is not None}
    assert {d for d, _ in certified} == {"float32", "float16", "bfloat16"}
    assert all(r.ratio >= 1 for r in rows if r.ratio is not None)


def test_a_planted_too_small_certificate_is_caught(measured):
    rows, bounds = measured
    key = ("bfloat16", "searched-bfloat16", "gram")
    measured_row = next(r for r in rows if (r.dtype, r.schedule, r.method) == key)
    planted = dataclasses.replace(bounds[key], deviation=0.9 * measured_row.deviation)  # 10 % below the measured
    row = measure_one(planted, shipped_steps()["searched-bfloat16"], TINY, 1, 0)
    assert row.exceeds and row.verdict == "EXCEEDS"
    assert not next(r for r in rows if (r.dtype, r.schedule, r.method) == key).exceeds


def test_gamma_n_and_its_limit():
    with mpmath.workprec(80):
        u = mpmath.ldexp(1, -11)
        assert Model("float16").rounding().b >= u / (1 - u)
        assert Model("float16", accumulation=4).rounding().b >= 4 * u / (1 - 4 * u)
    with pytest.raises(RestartError, match="n·u must be below 1"):
        Model("bfloat16", accumulation=256)
    with pytest.raises(RestartError, match="argument --accumulation"):
        Model("float16", accumulation=0)


def test_the_spurious_eigenvalue_takes_both_signs():
    """At σ = l a model instance with e = +δ ends outside an enclosure that allowed only e ≤ 0 (the old
    model, planted), and inside the model's own."""
    assert {c[0] for c in CORNERS} == {-1.0, 0.0, 1.0}
    steps = [make_step(tuple(s)) for s in coeffsearch.get("muon").steps]
    model, count = Model("float16"), len(steps) + 1
    flags = positions_to_flags((2,), len(steps))
    u, delta = float(model.rounding().b), float(model.delta().b)
    ar, sigma = FloatBoxes(), Box(np.array([1e-3]))
    theta = [ar.interval(-u, u)] * count

    def enclosure(e_lo, e_hi):
        return propagate(ar, steps, flags, sigma, theta, theta, theta, [ar.interval(e_lo, e_hi)] * count)[2]

    zero = [Box(np.array([0.0]))] * count
    positive = propagate(ar, steps, flags, sigma, zero, zero, zero, [Box(np.array([delta]))] * count,
                         instance=True)[2].lo[0]
    old, new = enclosure(-delta, 0.0), enclosure(-delta, delta)
    assert not old.lo[0] <= positive <= old.hi[0]
    assert new.lo[0] <= positive <= new.hi[0]


def test_a_certificate_with_an_edited_accumulation_fails_its_recheck():
    cert = certify_positions("muon", coeffsearch.get("muon").steps, (2,), Model("float16"))
    assert cert["accumulation"] == 1
    recheck(cert)
    edited = copy.deepcopy(cert)
    edited["accumulation"] = 8
    with pytest.raises(CertificateError, match="rounding|deviation|partition|max_abs_q"):
        recheck(edited)


@pytest.mark.parametrize("argv, message", [
    (["--shape", "3x9"], "argument --shape: both sides must be >= 4"),
    (["--accumulation", "255", "--dtype", "bfloat16"], "the standard iteration is certified at n + 1"),
    (["no-such-schedule"], "unknown schedule"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message):
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        assert main(["validate-model", *argv]) == 2
    assert message in err.getvalue() and err.getvalue().count("\n") == 1


def test_outward_decimals_of_negative_numbers_are_outward():
    """A negative final-image end (the shift reaches below 0) is printed below it, not toward zero."""
    x = mpmath.mpf("-0.28636684452525")
    assert Fraction(decimal_down(x, 8)) <= Fraction(-0.28636684452525) <= Fraction(decimal_up(x, 8))
    assert decimal_down(x, 8) == "-0.28636685" and decimal_up(x, 8) == "-0.28636684"
