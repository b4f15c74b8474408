"""The Sylvester rule derived from its regularized least-squares problem (not stated and verified)."""

import numpy as np
import pytest
from sympy.matrices.expressions import MatrixSymbol

from derivations import sylvester as S
from derivations.engine.derivation import DerivationError
from derivations.vocabulary.algebra import product, total
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import RegularizedSylvester

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def test_operator_read_off_the_engine_is_the_regularized_sylvester_operator():
    assert S.solution() == RegularizedSylvester(S.W_Q, S.W_K, S.lam, S.TARGET)


def _step_error(mu_factor):
    rng = np.random.default_rng(5)
    w_q, w_k, g_m = rng.standard_normal((6, 2)), rng.standard_normal((6, 2)), rng.standard_normal((6, 6))
    values = {"W_Q": w_q, "W_K": w_k, "G_M": g_m, "epsilon": 0.5, "lambda": 0.2}
    q, k = S.adjoint_components(S.solution())
    ref = S.least_squares_step(w_q, w_k, evaluate_on(S.TARGET, values), mu_factor * 0.2)
    return max(np.max(np.abs(evaluate_on(x, values) - r)) for x, r in zip((q, k), ref, strict=False))


def test_derived_step_is_the_least_squares_minimizer():
    assert _step_error(2.0) < 1e-10  # μ = 2λ: the problem the rule solves


def test_wrong_weight_is_detected():
    assert _step_error(1.0) > 1e-3  # μ = λ is a different problem: the independent solve disagrees


def test_reading_off_refuses_other_operators():
    h = S.H
    with pytest.raises(DerivationError, match="is not A Aᵀ"):
        S.sylvester_operator(total(product(S.W_Q, S.W_Q.T, h), h), h)
    with pytest.raises(DerivationError):
        S.sylvester_operator(product(MatrixSymbol("B", S.d, S.d), h), h)
