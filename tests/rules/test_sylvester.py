"""Sylvester-regularized rule: derivation, emitted solvers, hand formulas."""

import numpy as np
import pytest
import scipy.linalg

from derivations import sylvester
from derivations.cli import render
from tests.conftest import load_module

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    path = tmp_path_factory.mktemp("emitted") / "sylvester_jax.py"
    path.write_text(render(sylvester.rule_module(), "jax"))
    return load_module(path, "sylvester_jax")


def hand(W_Q, W_K, G_M, eps, lam):
    """Hand formula: (W_QW_Qᵀ + λI) H + H (W_KW_Kᵀ + λI) = D, D = −ε msign(G_M); ΔQ = H W_K, ΔK = Hᵀ W_Q."""
    u, _, vt = np.linalg.svd(G_M)
    D = -eps * u @ vt
    n = G_M.shape[0]
    H = scipy.linalg.solve_sylvester(W_Q @ W_Q.T + lam * np.eye(n), W_K @ W_K.T + lam * np.eye(n), D)
    return H @ W_K, H.T @ W_Q, H, D


@pytest.mark.parametrize("solver", ["structured", "dense"])
def test_matches_hand_formula_and_achieved_change(mod, solver):
    rng = np.random.default_rng(0)
    d, d_h, eps, lam = 24, 4, 0.1, 0.05
    W_Q, W_K, G_M = rng.standard_normal((d, d_h)), rng.standard_normal((d, d_h)), rng.standard_normal((d, d))
    dQ, dK = (np.asarray(x) for x in mod.sylvester_qk(W_Q, W_K, G_M, eps=eps, damping=lam, msign="svd",
                                                        solver=solver))
    hQ, hK, H, D = hand(W_Q, W_K, G_M, eps, lam)
    assert np.max(np.abs(dQ - hQ)) / np.max(np.abs(hQ)) < 1e-10
    assert np.max(np.abs(dK - hK)) / np.max(np.abs(hK)) < 1e-10
    assert np.allclose(dQ @ W_K.T + W_Q @ dK.T, D - 2 * lam * H, atol=1e-12)


def test_structured_equals_dense_batched(mod):
    rng = np.random.default_rng(1)
    W_Q, W_K = rng.standard_normal((3, 40, 5)), rng.standard_normal((3, 40, 5))
    G_M = rng.standard_normal((3, 40, 40))
    a = mod.sylvester_qk(W_Q, W_K, G_M, eps=0.2, damping=1e-2, msign="svd", solver="structured")
    b = mod.sylvester_qk(W_Q, W_K, G_M, eps=0.2, damping=1e-2, msign="svd", solver="dense")
    assert np.max(np.abs(np.asarray(a[0]) - np.asarray(b[0]))) < 1e-8


def test_zero_gradient_and_rank_deficient_partner_are_finite(mod):
    W_Q = np.zeros((16, 4))
    W_K = np.random.default_rng(2).standard_normal((16, 4))
    dQ, dK = mod.sylvester_qk(W_Q, W_K, np.zeros((16, 16)), eps=0.1, damping=1e-3)
    assert np.all(np.isfinite(dQ)) and np.all(np.asarray(dK) == 0)


@pytest.mark.parametrize("kwargs,message", [
    (dict(damping=0.0), "damping must be > 0"),
    (dict(damping=0.1, solver="lu"), "solver must be one of"),
])
def test_bad_options(mod, kwargs, message):
    with pytest.raises(ValueError, match=message):
        mod.sylvester_qk(np.ones((8, 2)), np.ones((8, 2)), np.ones((8, 8)), eps=0.1, **kwargs)


def test_bad_shape(mod):
    with pytest.raises(ValueError, match="G_M has d = 7"):
        mod.sylvester_qk(np.ones((8, 2)), np.ones((8, 2)), np.ones((7, 8)), eps=0.1, damping=0.1)


def test_derivation_reads_adjoint_off_the_engine():
    q, k = sylvester.adjoint_components(sylvester.H)
    assert str(q) == "H*W_K" and str(k) == "H.T*W_Q"
    assert all(r.passed for r in sylvester.achieved_change().check(trials=2))
    assert str(sylvester.achieved_change().formula) == "(-epsilon)*msign(G_M) + (-2*lambda)*H"
