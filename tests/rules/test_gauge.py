"""Gauge module: derivations end in the stated facts; the emitted projection is horizontal."""

import numpy as np
import pytest
import scipy.linalg

from derivations import gauge
from derivations.cli import render
from tests.conftest import load_module

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    path = tmp_path_factory.mktemp("emitted") / "gauge_jax.py"
    path.write_text(render(gauge.rule_module(), "jax"))
    return load_module(path, "gauge_jax")


def test_derivations_reach_zero_and_the_condition():
    from sympy.matrices.expressions import ZeroMatrix
    for der in (gauge.vertical_invisible(), gauge.gradients_horizontal(), gauge.projection_horizontal()):
        assert isinstance(der.formula, ZeroMatrix), der.name
    assert str(gauge.horizontality().formula) == "<W_Q.T*Delta_Q, A> + <-Delta_K.T*W_K, A>"
    assert set(gauge.projection_same_change().formula.args) == set(
        gauge.tangent(gauge.m_Q, gauge.m_K).args)
    for der in gauge.derivations():
        assert all(r.passed for r in der.check(trials=1))


def test_projection_matches_hand_formula_and_is_horizontal(mod):
    rng = np.random.default_rng(0)
    W_Q, W_K, m_Q, m_K = (rng.standard_normal((20, 4)) for _ in range(4))
    mq, mk = (np.asarray(x) for x in mod.horizontal_projection(W_Q, W_K, m_Q, m_K))
    X = scipy.linalg.solve_sylvester(W_Q.T @ W_Q, W_K.T @ W_K, m_K.T @ W_K - W_Q.T @ m_Q)  # hand formula
    assert np.allclose(mq, m_Q + W_Q @ X, atol=1e-12) and np.allclose(mk, m_K - W_K @ X.T, atol=1e-12)
    assert np.allclose(W_Q.T @ mq, mk.T @ W_K, atol=1e-11)
    assert np.allclose(mq @ W_K.T + W_Q @ mk.T, m_Q @ W_K.T + W_Q @ m_K.T, atol=1e-11)


def test_projection_batched_float32_and_idempotent(mod):
    rng = np.random.default_rng(1)
    W_Q, W_K, m_Q, m_K = (rng.standard_normal((2, 3, 16, 4)).astype(np.float32) for _ in range(4))
    mq, mk = mod.horizontal_projection(W_Q, W_K, m_Q, m_K)
    assert mq.dtype == np.float32 and mq.shape == (2, 3, 16, 4)
    mq2, _ = mod.horizontal_projection(W_Q, W_K, mq, mk)
    assert np.max(np.abs(np.asarray(mq2) - np.asarray(mq))) < 1e-4


def test_rank_deficient_with_damping_is_finite(mod):
    W_Q = np.zeros((10, 3))
    W_K = np.random.default_rng(2).standard_normal((10, 3))
    mq, mk = mod.horizontal_projection(W_Q, W_K, np.ones((10, 3)), np.zeros((10, 3)), damping=1e-3)
    assert np.all(np.isfinite(mq)) and np.all(np.isfinite(mk))


def test_bad_shapes(mod):
    with pytest.raises(ValueError, match="m_K has d_h = 2"):
        mod.horizontal_projection(np.ones((8, 3)), np.ones((8, 3)), np.ones((8, 3)), np.ones((8, 2)))


def test_equivariance_break_grows_with_damping():
    vals = [v for _, v, _ in gauge.measurements(np.random.default_rng(0))]
    assert vals[0] < 1e-10 and all(a < b for a, b in zip(vals[1:], vals[2:], strict=False))


def test_equivariance_is_derived_by_the_engine():
    from sympy.matrices.expressions import Inverse, Transpose

    from derivations import halfsplit
    from derivations.vocabulary.algebra import product
    der = gauge.equivariance()
    assert der.formula == product(halfsplit.query_side().formula, Transpose(Inverse(gauge.S)))
    assert [s.lemma.key for s in der.steps] == ["gauge_polar", "msign_orthogonal", "gauge_polar"]
    assert all(r.passed for r in der.check(trials=2))
