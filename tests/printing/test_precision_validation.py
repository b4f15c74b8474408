"""The mpmath comparison of translation validation: every emitted function (JAX and NumPy) in float64 against its
checked formula evaluated in mpmath at 50 digits, on partners of condition number 1e5, within ``100 u κ``.

It catches what the float64 comparison cannot: code that squares the partner's condition number (a Gram formed
and eigendecomposed) passes at well-conditioned sizes and fails here; a float64 reference itself would be off by
``u κ²``. Printer bugs planted for the float64 comparison are caught by this one too.
"""

from __future__ import annotations

import numpy as np
import pytest

from derivations import registry
from derivations.cli import adapters_of, format_table, render, torch_installed, translation_rows
from derivations.printing.jax_printer import JaxPrinter
from derivations.printing.numpy_printer import NumpyPrinter
from derivations.printing.validation import (
    CONDITION,
    MPMATH_TOLERANCE,
    ROUNDOFF,
    IllConditioned,
    check_sizes,
    instance,
    mpmath_value,
    relative_error,
    validate_source,
)
from derivations.vocabulary.numeric import evaluate
from foundation.compute.reference import NumpyBackend
from tests.printing.test_translation_validation import _partner_on_the_left, _transpose_dropped

TARGETS = ("numpy", "jax")


def _validate(rule, target):
    module = registry.rule_module(rule)
    return validate_source(render(module, target), module.functions(), module.scalars, target, rule,
                           adapters=adapters_of(module))


def _mpmath_failures(results) -> list[str]:
    return [v.message for v in results if v.reference == "mpmath" and not v.passed]


def test_the_limit_is_a_hundred_roundoffs_times_the_condition_number():
    assert MPMATH_TOLERANCE == 100 * 2.0 ** -53 * CONDITION and 1e4 <= CONDITION <= 1e6


def test_the_partners_are_ill_conditioned_and_a_float64_reference_loses_digits():
    """On the instance the comparison draws, the engine's float64 evaluation of half-split (through the Gram) is off
    by far more than the limit: the reference has to be mpmath."""
    fn = registry.rule_module("halfsplit").functions()[0]
    dims = check_sizes(fn, 1)[0]
    env, _, _ = instance(fn, dims, np.random.default_rng(0), {}, blocked=False, sampler_type=IllConditioned)
    partners = [env[s] for s in fn.inputs if s.name.startswith("W_")]
    assert all(0.5 * CONDITION < np.linalg.cond(w) < 2 * CONDITION for w in partners)
    lost = max(relative_error(np.asarray(evaluate(der.formula, env, NumpyBackend(), dims)),
                              mpmath_value(der.formula, env, dims)) for _, der in fn.outputs)
    assert lost > 100 * MPMATH_TOLERANCE and lost < 10 * ROUNDOFF * CONDITION ** 2


def test_the_mpmath_rows_are_reported_in_the_check_table():
    module = registry.rule_module("joint")
    rows = translation_rows(module)
    mp = [r for r in rows if r["reference"] == "mpmath"]
    targets = ["jax", "numpy", *(["torch"] if torch_installed() else [])]  # PyTorch: where it is installed
    assert sorted(r["target"] for r in mp) == targets
    assert all(r["limit"] == MPMATH_TOLERANCE and r["status"] == "ok" for r in mp)
    table = {"steps": [], "lemmas": [], "measurements": [], "translation": rows}
    assert "numpy joint_whitened (d=6, d_h=2, m=4, n=12) vs mpmath, κ=1e+05" in format_table(table)


# ---- planted bugs ----------------------------------------------------------------------------------------------

#: a Gram inverse root that forms the Gram and eigendecomposes it: ``eig(WᵀW + λI)``, the condition number squared
GRAM_SQUARED = '''

import numpy as np


def gram_squared(w, damping, side):
    a = w if side == "right" else np.swapaxes(w, -1, -2)
    e, v = np.linalg.eigh(np.swapaxes(a, -1, -2) @ a + damping * np.eye(a.shape[-1]))
    return np.sqrt(np.maximum(e, 0.0)), v, np.ones(a.shape[:-2] + (1, 1))
'''


def test_a_routine_that_squares_the_condition_number_fails_only_against_mpmath():
    """The printed module's Gram roots taken from a formed Gram (every ``gram_eigh(`` call redirected, a later
    definition winning over an inlined one): exact enough at well-conditioned sizes, not at κ = 1e5."""
    module = registry.rule_module("halfsplit")
    text = render(module, "numpy")
    assert "gram_eigh(W_K, damping, 'right')" in text
    planted = text.replace("gram_eigh(", "gram_squared(") + GRAM_SQUARED
    results = validate_source(planted, module.functions(), module.scalars, "numpy", "halfsplit")
    assert all(v.passed for v in results if v.reference == "float64")
    wrong = _mpmath_failures(results)
    assert wrong and all("against mpmath" in m and "limit 1.1e-09" in m for m in wrong)
    assert any(m.startswith("halfsplit: numpy function halfsplit_qk ") for m in wrong)


def test_a_partner_on_the_wrong_side_is_caught_against_mpmath(monkeypatch):
    monkeypatch.setattr(JaxPrinter, "_split_factors", _partner_on_the_left(JaxPrinter._split_factors))
    wrong = _mpmath_failures(_validate("halfsplit", "jax"))
    assert any(m.startswith("halfsplit: jax function halfsplit_qk ") for m in wrong)


@pytest.mark.parametrize("printer, target", [(JaxPrinter, "jax"), (NumpyPrinter, "numpy")])
def test_a_dropped_transpose_is_caught_against_mpmath(printer, target, monkeypatch):
    monkeypatch.setattr(printer, "_print_Transpose", _transpose_dropped)
    wrong = _mpmath_failures(_validate("gauge", target))
    assert any(m.startswith(f"gauge: {target} function horizontal_projection ") for m in wrong)
