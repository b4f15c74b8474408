"""Joint-whitened and hybrid OV rules against independent hand formulas."""

import numpy as np
import pytest

from derivations import hybrid_ov, joint
from derivations.cli import render
from foundation.compute.spectra import with_singular_values
from tests import hand_formulas as hand
from tests.conftest import load_module


def emitted(tmp_path_factory, rule, name):
    path = tmp_path_factory.mktemp("emitted") / f"{name}.py"
    path.write_text(render(rule.rule_module(), "jax"))
    return load_module(path, name)


@pytest.fixture(scope="module")
def jmod(tmp_path_factory):
    return emitted(tmp_path_factory, joint, "joint_jax")


@pytest.fixture(scope="module")
def hmod(tmp_path_factory):
    return emitted(tmp_path_factory, hybrid_ov, "hybrid_ov_jax")


def gram_inv(w):
    return hand.inv_sqrt(np.swapaxes(w, -1, -2) @ w)


def test_joint_matches_hand_formula_bound_and_value(jmod):
    rng = np.random.default_rng(0)
    d, d_h, eps = 20, 4, 0.3
    W_Q, W_K, G_M = rng.standard_normal((d, d_h)), rng.standard_normal((d, d_h)), rng.standard_normal((d, d))
    G_Q, G_K = G_M @ W_K, G_M.T @ W_Q
    dQ, dK = (np.asarray(x) for x in jmod.joint_qk(W_Q, W_K, G_Q, G_K, eps=eps, msign="svd"))
    CKi, CQi = gram_inv(W_K), gram_inv(W_Q)
    Gt = np.concatenate([G_Q @ CKi, G_K @ CQi], axis=1)
    Z = -(eps / 2) * hand.msign(Gt)
    assert np.allclose(dQ, Z[:, :d_h] @ CKi, atol=1e-12) and np.allclose(dK, Z[:, d_h:] @ CQi, atol=1e-12)
    halves = np.concatenate([dQ @ W_K.T, dK @ W_Q.T], axis=1)
    assert np.linalg.norm(halves, 2) == pytest.approx(eps / 2, rel=1e-12)  # the budget convention, tight
    assert np.linalg.norm(dQ @ W_K.T + W_Q @ dK.T, 2) <= eps * (1 + 1e-12)  # worst-case product bound
    value = np.sum(G_M * (dQ @ W_K.T + W_Q @ dK.T))
    assert value == pytest.approx(-(eps / 2) * np.linalg.norm(Gt, "nuc"), rel=1e-12)


def test_joint_reduces_to_halfsplit_for_orthogonal_whitened_gradients(jmod, halfsplit_jax):
    rng = np.random.default_rng(1)
    d, d_h = 24, 3
    W_Q, W_K = rng.standard_normal((d, d_h)), rng.standard_normal((d, d_h))
    q, _ = np.linalg.qr(rng.standard_normal((d, 2 * d_h)))
    A, B = q[:, :d_h] @ rng.standard_normal((d_h, d_h)), q[:, d_h:] @ rng.standard_normal((d_h, d_h))
    G_Q, G_K = A @ np.linalg.inv(gram_inv(W_K)), B @ np.linalg.inv(gram_inv(W_Q))  # whitened: A ⊥ B
    j = jmod.joint_qk(W_Q, W_K, G_Q, G_K, eps=0.2, msign="svd")
    h = halfsplit_jax.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=0.2, msign="svd")
    assert np.allclose(j[0], h[0], atol=1e-10) and np.allclose(j[1], h[1], atol=1e-10)


def heads_cols(w, d_h):
    return [w[..., :, i * d_h:(i + 1) * d_h] for i in range(w.shape[-1] // d_h)]


def test_hybrid_ov_matches_hand_formulas_and_bounds(hmod):
    rng = np.random.default_rng(2)
    d, H, d_h, eps = 16, 3, 4, 0.4
    W_O = np.concatenate([with_singular_values(rng, d, d_h, [2.0, 1.0, 0.5, 0.2]) for _ in range(H)], axis=1)
    W_V = np.concatenate([with_singular_values(rng, d_h, d, [1.5, 1.0, 0.7, 0.3]) for _ in range(H)], axis=0)
    G_M = [rng.standard_normal((d, d)) for _ in range(H)]  # per-head product gradients
    O, V = heads_cols(W_O, d_h), [W_V[h * d_h:(h + 1) * d_h] for h in range(H)]  # noqa: E741 (W_O's heads)
    G_O = np.concatenate([G_M[h] @ V[h].T for h in range(H)], axis=1)
    G_V = np.concatenate([O[h].T @ G_M[h] for h in range(H)], axis=0)
    dO, dV = (np.asarray(x) for x in hmod.hybrid_ov(W_O, W_V, G_O, G_V, head_dim=d_h, eps=eps, msign="svd"))
    assert dO.shape == W_O.shape and dV.shape == W_V.shape
    CVi = [hand.inv_sqrt(V[h] @ V[h].T) for h in range(H)]  # hand formula, O side
    S = hand.msign(np.concatenate([heads_cols(G_O, d_h)[h] @ CVi[h] for h in range(H)], axis=1))
    dO_ref = np.concatenate([-(eps / 2) * S[:, h * d_h:(h + 1) * d_h] @ CVi[h] for h in range(H)], axis=1)
    assert np.max(np.abs(dO - dO_ref)) < 1e-10
    C_V = [np.linalg.inv(c) for c in CVi]
    stacked = np.concatenate([heads_cols(dO, d_h)[h] @ C_V[h] for h in range(H)], axis=1)
    assert np.linalg.norm(stacked, 2) == pytest.approx(eps / 2, rel=1e-10)
    for h in range(H):  # V side, head-local, tight per head
        dVh = dV[h * d_h:(h + 1) * d_h]
        assert np.max(np.abs(dVh - hand.hybrid_v(O[h], G_V[h * d_h:(h + 1) * d_h], eps))) < 1e-10
        assert np.linalg.norm(O[h] @ dVh, 2) == pytest.approx(eps / 2, rel=1e-10)
    value = np.sum(G_O * dO)
    assert value == pytest.approx(-(eps / 2) * np.linalg.norm(np.concatenate(
        [heads_cols(G_O, d_h)[h] @ CVi[h] for h in range(H)], axis=1), "nuc"), rel=1e-10)


def test_hybrid_batched_layers_damped_and_bad_shapes(hmod):
    rng = np.random.default_rng(3)
    W_O, W_V = rng.standard_normal((2, 12, 6)), np.zeros((2, 6, 12))  # rank-deficient partner
    dO, dV = hmod.hybrid_ov(W_O, W_V, rng.standard_normal((2, 12, 6)), np.zeros((2, 6, 12)), head_dim=3,
                            eps=0.1, damping=1e-3)
    assert np.all(np.isfinite(dO)) and np.all(np.asarray(dV) == 0)
    with pytest.raises(ValueError, match="W_V must have shape"):
        hmod.hybrid_ov(W_O, np.zeros((2, 12, 6)), W_O, np.zeros((2, 12, 6)), head_dim=3, eps=0.1)
    with pytest.raises(ValueError, match="must be multiples of head_dim"):
        hmod.hybrid_ov(W_O, W_V, W_O, W_V, head_dim=4, eps=0.1)


def test_derivations_check():
    for der in joint.derivations() + hybrid_ov.derivations():
        assert all(r.passed for r in der.check(trials=1))
    vals = [v for _, v, _ in joint.measurements(np.random.default_rng(0))]
    assert vals[0] > 1e-3 and vals[1] < 1e-10


def test_orthogonal_reduction_is_derived_by_the_engine():
    from derivations.vocabulary.nodes import HStack, Msign
    der = joint.orthogonal_reduction()
    assert der.formula == HStack(Msign(joint.A), Msign(joint.B))
    assert [s.lemma.key for s in der.steps] == ["msign_polar_form", "orthogonal_blocks", "block_product",
                                                "msign_polar_form"]
    assert any("AᵀB = 0" in c for s in der.steps for c in s.conditions)


def test_joint_damped_rank_deficient_zero_gradient_and_bad_shapes(jmod):
    rng = np.random.default_rng(4)
    W_Q, W_K = np.zeros((2, 12, 3)), rng.standard_normal((2, 12, 3))
    dQ, dK = jmod.joint_qk(W_Q, W_K, np.zeros((2, 12, 3)), np.zeros((2, 12, 3)), eps=0.1, damping=1e-3)
    assert np.all(np.isfinite(dQ)) and np.all(np.asarray(dK) == 0)
    with pytest.raises(ValueError, match="G_K must have the shape of W_Q"):
        jmod.joint_qk(W_Q, W_K, np.zeros((2, 12, 3)), np.zeros((2, 12, 4)), eps=0.1)
