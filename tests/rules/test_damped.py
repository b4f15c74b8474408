"""Damped rules are the exact solutions of their own problems, with bounds that hold for λ > 0."""

import numpy as np
import pytest

from derivations import damped as D

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def test_emitted_damped_formulas_are_the_derived_ones():
    assert D.matches_emission() == {"query": True, "key": True, "value": True}


def test_every_step_of_the_damped_derivations_is_certified():
    for der in D.derivations():
        assert [s.kind for s in der.steps][-2:] == ["solve", "back_substitute"]
        assert all(s.check.passed for s in der.steps)


def test_bounds_hold_for_positive_damping():
    rows = {label: value for label, value, _ in D.measurements(np.random.default_rng(0))}
    for label, value in rows.items():
        if "zero" in label:
            assert value < 1e-12, label  # ‖ΔW_Q C_K,λ‖_op = ε/2 exactly
        else:
            assert value <= 1 + 1e-12, label  # ‖ΔW_Q W_Kᵀ‖_op ≤ ε/2
    # the undamped note "‖ΔW_Q W_Kᵀ‖_op = ε/2" is false once λ > 0: the product norm is strictly smaller
    assert rows["damping 10: ‖ΔW_Q W_Kᵀ‖_op / (ε/2) (at most 1: the product bound)"] < 0.99


def test_wrong_budget_fails_the_certificate():
    """A solve that gives the damped query side the budget ε instead of ε/2 is caught by its certificate."""
    from dataclasses import replace

    from derivations import lemmas as L
    from derivations.engine.derivation import StepCheckFailed
    doubled = replace(L.LINEAR_STEEPEST_DESCENT, solution=lambda a, beta: L._lsd_solution(a, 2 * beta))
    with pytest.raises(StepCheckFailed, match="solve"):
        D.query_side(doubled)


def test_search_finds_the_damped_rule():
    from dataclasses import replace

    from sympy.matrices.expressions import MatrixSymbol

    from derivations import halfsplit as H
    from derivations.engine.derivation import Problem
    from derivations.engine.search import derive
    from derivations.vocabulary.algebra import product, transpose
    from derivations.vocabulary.nodes import GramSqrt, Inner, OpNorm
    dq = MatrixSymbol("dW_Q", H.d, H.d_h)
    problem = Problem(dq, Inner(H.G_M, product(dq, transpose(H.W_K))), OpNorm(product(dq, GramSqrt(H.W_K, D.lam))),
                      H.BUDGET)
    found = derive(problem, replace(D.context(H.GRADIENTS_QK), symbolic_dims={}), name="found.damped")
    assert found.formula == D.query_side().formula
