"""The horizontal projection derived as an orthogonal projection (normal equations), not stated."""

import numpy as np
import pytest

from derivations import gauge
from derivations import gauge_directions as G
from derivations import projection as P
from derivations.vocabulary.algebra import product, total, transpose
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import RegularizedSylvester

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def test_normal_equations_give_the_inner_sylvester_solve():
    rhs = total(product(transpose(G.m_K), G.W_K), product(-1, transpose(G.W_Q), G.m_Q))
    assert P.coefficient() == RegularizedSylvester(G.W_Q, G.W_K, 0, rhs, "inner")
    assert gauge.projection_solution() == P.coefficient()


def _projection_error(vertical):
    rng = np.random.default_rng(3)
    w_q, w_k, m_q, m_k = (rng.standard_normal((7, 3)) for _ in range(4))
    values = {"W_Q": w_q, "W_K": w_k, "m_Q": m_q, "m_K": m_k}
    x = P.coefficient()
    got = [evaluate_on(total(m, v), values) for m, v in zip((G.m_Q, G.m_K), vertical(x), strict=False)]
    ref = P.least_squares_projection(w_q, w_k, m_q, m_k)
    return max(np.max(np.abs(a - b)) for a, b in zip(got, ref, strict=False))


def test_projection_is_the_least_squares_projection():
    assert _projection_error(G.vertical) < 1e-10
    assert P.measurements(np.random.default_rng(0))[0][1] < 1e-10


def test_wrong_vertical_direction_is_detected():
    """(W_Q A, +W_K Aᵀ) is not the gauge direction: the projection it gives is not the least-squares one."""
    assert _projection_error(lambda a: (product(G.W_Q, a), product(G.W_K, transpose(a)))) > 1e-3
