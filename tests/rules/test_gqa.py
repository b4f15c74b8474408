"""GQA: stored layouts, per-product bounds, reduction to half-split with one query head per group."""

import numpy as np
import pytest

from derivations import gqa
from derivations.cli import render
from tests import hand_formulas as hand
from tests.conftest import load_module

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    path = tmp_path_factory.mktemp("emitted") / "gqa_jax.py"
    path.write_text(render(gqa.rule_module(), "jax"))
    return load_module(path, "gqa_jax")


def heads(w, d_h):
    return [w[..., :, i * d_h:(i + 1) * d_h] for i in range(w.shape[-1] // d_h)]


def instance(rng, layers, d, H, H_kv, d_h):
    W_Q = rng.standard_normal((layers, d, H * d_h))
    W_K = rng.standard_normal((layers, d, H_kv * d_h))
    G_M = rng.standard_normal((layers, H, d, d))  # one product gradient per query head
    group = H // H_kv
    qs, ks = heads(W_Q, d_h), heads(W_K, d_h)
    G_Q = np.concatenate([G_M[:, h] @ ks[h // group] for h in range(H)], axis=-1)
    G_K = np.concatenate([sum(np.swapaxes(G_M[:, h], -1, -2) @ qs[h] for h in range(g * group, (g + 1) * group))
                          for g in range(H_kv)], axis=-1)
    return W_Q, W_K, G_Q, G_K


def test_matches_hand_formula_and_bounds(mod):
    rng = np.random.default_rng(0)
    d, H, H_kv, d_h, eps = 24, 4, 2, 3, 0.2
    W_Q, W_K, G_Q, G_K = instance(rng, 2, d, H, H_kv, d_h)
    dQ, dK = (np.asarray(x) for x in mod.gqa_qk(W_Q, W_K, G_Q, G_K, head_dim=d_h, eps=eps, msign="svd"))
    assert dQ.shape == W_Q.shape and dK.shape == W_K.shape
    group = H // H_kv
    qs, ks, gqs, gks = heads(W_Q, d_h), heads(W_K, d_h), heads(G_Q, d_h), heads(G_K, d_h)
    dqs, dks = heads(dQ, d_h), heads(dK, d_h)
    for h in range(H):  # hand formula: query side head-local
        k = ks[h // group]
        Ci = hand.inv_sqrt(np.swapaxes(k, -1, -2) @ k)
        ref = -(eps / 2) * hand.msign(gqs[h] @ Ci) @ Ci
        assert np.max(np.abs(dqs[h] - ref)) < 1e-10
    for g in range(H_kv):  # shared side: group-summed Gram, budget ε/(2G)
        members = qs[g * group:(g + 1) * group]
        Cg = hand.inv_sqrt(sum(np.swapaxes(q, -1, -2) @ q for q in members))
        ref = -(eps / (2 * group)) * hand.msign(gks[g] @ Cg) @ Cg
        assert np.max(np.abs(dks[g] - ref)) < 1e-10
        stacked = np.concatenate(members, axis=-2)  # the group's stacked product: the bound is tight
        for layer in range(2):
            assert np.linalg.norm(stacked[layer] @ dks[g][layer].T, 2) == pytest.approx(eps / (2 * group), rel=1e-10)
        for q in members:  # every per-product bound
            for layer in range(2):
                assert np.linalg.norm(q[layer] @ dks[g][layer].T, 2) <= eps / (2 * group) * (1 + 1e-10)


def test_one_query_head_per_group_is_halfsplit(mod, halfsplit_jax):
    rng = np.random.default_rng(1)
    d_h = 4
    W_Q, W_K, G_Q, G_K = instance(rng, 1, 20, 3, 3, d_h)
    dQ, dK = mod.gqa_qk(W_Q, W_K, G_Q, G_K, head_dim=d_h, eps=0.1, msign="svd")
    def split(w):
        return np.stack(heads(w, d_h), axis=-3)
    hQ, hK = halfsplit_jax.halfsplit_qk(split(W_Q), split(W_K), split(G_Q), split(G_K), eps=0.1, msign="svd")
    assert np.allclose(split(np.asarray(dQ)), hQ, atol=1e-12) and np.allclose(split(np.asarray(dK)), hK, atol=1e-12)


def test_bad_layouts(mod):
    W = np.ones((8, 12))
    with pytest.raises(ValueError, match="not a multiple of head_dim"):
        mod.gqa_qk(W, np.ones((8, 6)), W, np.ones((8, 6)), head_dim=5, eps=0.1)
    with pytest.raises(ValueError, match="cannot be grouped"):
        mod.gqa_qk(np.ones((8, 9)), np.ones((8, 6)), np.ones((8, 9)), np.ones((8, 6)), head_dim=3, eps=0.1)
    with pytest.raises(ValueError, match="G_K must have the shape"):
        mod.gqa_qk(W, np.ones((8, 6)), W, np.ones((8, 3)), head_dim=3, eps=0.1)


def test_damped_rank_deficient_and_zero_gradient_finite(mod):
    W_Q = np.zeros((16, 8))
    W_K = np.random.default_rng(2).standard_normal((16, 4))
    dQ, dK = mod.gqa_qk(W_Q, W_K, np.zeros((16, 8)), np.zeros((16, 4)), head_dim=2, eps=0.1, damping=1e-3)
    assert np.all(np.isfinite(dQ)) and np.all(np.isfinite(dK))
