"""Compositional Muon as an optax optimizer: the derived rules on declared pairs, errors, gauge options."""

import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg

from derivations import regenerate
from numerics import emitted
from numerics.optimizer import OVPair, QKPair, compositional_muon
from numerics.optimizer.gauge_balance import balance
from tests.inprocess import run_case

D, H, DH = 16, 2, 4


def heads(w, d_h):
    return [w[..., :, i * d_h:(i + 1) * d_h] for i in range(w.shape[-1] // d_h)]


def op(x):
    return float(np.linalg.norm(np.asarray(x, np.float64), 2))


def model(rng, kv=H, dtype=np.float64):
    return {"attn": {"wq": rng.standard_normal((D, H * DH)), "wk": rng.standard_normal((D, kv * DH)),
                     "wo": rng.standard_normal((D, H * DH)), "wv": rng.standard_normal((kv * DH, D))},
            "mlp": rng.standard_normal((D, 3 * D)), "bias": rng.standard_normal(D)}


def pairs_of(kv=H):
    return lambda params: [QKPair("attn/wq", "attn/wk", H, kv), OVPair("attn/wo", "attn/wv", H, kv)]


def grads(rng, params):
    return jax.tree.map(lambda x: rng.standard_normal(x.shape), params)


def step(opt, params, g):
    state = opt.init(params)
    return opt.update(g, state, params)[0]


def test_shipped_emitted_modules_are_fresh():
    assert regenerate.stale() == []


def test_stale_shipped_copy_is_detected(tmp_path, monkeypatch):
    """Planted mistake: a shipped copy edited by hand."""
    for target in regenerate.targets():  # every shipped copy fresh (PyTorch's where it is installed) but one
        edit = "# edited\n" if target == "jax" else ""
        regenerate.path_of("gauge", tmp_path, target).write_text(regenerate.emit("gauge", target) + edit)
    assert regenerate.stale(("gauge",), tmp_path) == ["gauge"]
    (tmp_path / "nosuchrule.py").write_text("")  # a shipped copy that no rule module emits
    assert regenerate.stale(("gauge",), tmp_path) == ["gauge", "nosuchrule"]
    out = run_case("derivations.regenerate", ["--rule", "nope", "--check"])  # its main, in this process
    assert out["rc"] == 2 and out["stderr"].count("\n") == 1, out


def test_half_split_step_is_the_derived_rule_with_per_head_bounds():
    rng = np.random.default_rng(0)
    params, lr = model(rng), 0.05
    g = grads(rng, params)
    u = step(compositional_muon(lr, pairs=pairs_of(), msign="svd", damping=0.0), params, g)
    a = params["attn"]
    dq, dk = emitted.halfsplit.halfsplit_qk(*(np.stack(heads(x, DH)) for x in (a["wq"], a["wk"], g["attn"]["wq"],
                                                                                g["attn"]["wk"])),
                                             eps=2 * lr, msign="svd")
    np.testing.assert_allclose(np.concatenate(list(dq), axis=-1), u["attn"]["wq"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(list(dk), axis=-1), u["attn"]["wk"], rtol=1e-10, atol=1e-12)
    for q, k, uq, uk in zip(heads(a["wq"], DH), heads(a["wk"], DH), heads(u["attn"]["wq"], DH),
                            heads(u["attn"]["wk"], DH), strict=False):
        assert op(uq @ k.T) == pytest.approx(lr, rel=1e-9)  # each half of ΔM has operator norm lr
        assert op(q @ uk.T) == pytest.approx(lr, rel=1e-9)
    # all heads' O-side product changes ΔW_O,h W_V,h side by side
    stacked = np.concatenate([uo @ v.T for uo, v in zip(heads(u["attn"]["wo"], DH), heads(a["wv"].T, DH),
                                                        strict=False)], axis=1)
    assert op(stacked) == pytest.approx(lr, rel=1e-9)
    for o, uv in zip(heads(a["wo"], DH), heads(u["attn"]["wv"].T, DH), strict=False):
        assert op(o @ uv.T) == pytest.approx(lr, rel=1e-9)


def test_wrong_budget_is_caught():
    """Planted mistake: a step with the whole budget ε = lr per half instead of η gives 2× the bound."""
    rng = np.random.default_rng(1)
    params, lr = model(rng), 0.05
    u = step(compositional_muon(2 * lr, pairs=pairs_of(), msign="svd", damping=0.0), params, grads(rng, params))
    q_k = [op(uq @ k.T) for uq, k in zip(heads(u["attn"]["wq"], DH), heads(params["attn"]["wk"], DH), strict=False)]
    assert not np.allclose(q_k, lr, rtol=1e-6)


def test_other_matrices_are_muon_and_vectors_adamw():
    rng = np.random.default_rng(2)
    params = model(rng)
    g = grads(rng, params)
    sched = tuple(tuple(s) for s in np.asarray([(3.4445, -4.7750, 2.0315)] * 5))
    u = step(compositional_muon(0.1, sched, pairs=pairs_of()), params, g)
    ref = step(optax.contrib.muon(0.1, ns_coeffs=sched), {"mlp": params["mlp"], "bias": params["bias"]},
               {"mlp": g["mlp"], "bias": g["bias"]})
    np.testing.assert_allclose(u["mlp"], ref["mlp"], rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(u["bias"], ref["bias"], rtol=1e-6)


def test_gqa_pairs_keep_every_per_product_bound():
    rng = np.random.default_rng(3)
    kv, lr = 1, 0.02
    params = model(rng, kv=kv)
    u = step(compositional_muon(lr, pairs=pairs_of(kv), msign="svd", damping=0.0), params, grads(rng, params))
    a, group = params["attn"], H // kv
    (uk,), (uv,) = heads(u["attn"]["wk"], DH), heads(u["attn"]["wv"].T, DH)
    for q, o in zip(heads(a["wq"], DH), heads(a["wo"], DH), strict=False):
        assert op(q @ uk.T) <= lr / group * (1 + 1e-9)
        assert op(o @ uv.T) <= lr / group * (1 + 1e-9)
    bar_o = np.concatenate(heads(a["wo"], DH), axis=0)
    assert op(bar_o @ uv.T) == pytest.approx(lr / group, rel=1e-9)  # the stacked bound is attained


def test_gqa_value_matches_hand_formula():
    """ΔW_V,g = −(ε/2G) C̄⁻¹ msign(C̄⁻¹ G_V), C̄² = Σ_h W_O,hᵀW_O,h (independent NumPy formula)."""
    rng = np.random.default_rng(4)
    d, h, kv, dh, eps = 12, 4, 2, 3, 0.3
    w_o, w_v = rng.standard_normal((d, h * dh)), rng.standard_normal((kv * dh, d))
    g_o, g_v = rng.standard_normal(w_o.shape), rng.standard_normal(w_v.shape)
    _, d_v = emitted.hybrid_ov.hybrid_ov(w_o, w_v, g_o, g_v, head_dim=dh, eps=eps, msign="svd")
    group = h // kv
    for gi in range(kv):
        os_ = heads(w_o, dh)[gi * group:(gi + 1) * group]
        evals, evecs = np.linalg.eigh(sum(o.T @ o for o in os_))
        c_inv = evecs @ np.diag(evals ** -0.5) @ evecs.T
        u, _, vt = np.linalg.svd(c_inv @ g_v[gi * dh:(gi + 1) * dh], full_matrices=False)
        np.testing.assert_allclose(d_v[gi * dh:(gi + 1) * dh], -eps / (2 * group) * c_inv @ u @ vt, rtol=1e-9)


def test_kernel_layout_and_flax_style_params():
    """Flax Dense kernels: O stored (H·d_h, d), V stored (d, H·d_h); same step as the stored layouts."""
    rng = np.random.default_rng(5)
    params = model(rng)
    g = grads(rng, params)
    flax = {"params": {"o": {"kernel": params["attn"]["wo"].T}, "v": {"kernel": params["attn"]["wv"].T}}}
    gflax = {"params": {"o": {"kernel": g["attn"]["wo"].T}, "v": {"kernel": g["attn"]["wv"].T}}}
    def decl(p):
        return [OVPair("params/o/kernel", "params/v/kernel", H, kernels=True)]
    u = step(compositional_muon(0.1, pairs=decl), flax, gflax)
    ref = step(compositional_muon(0.1, pairs=lambda p: [OVPair("attn/wo", "attn/wv", H)]), params, g)
    np.testing.assert_allclose(u["params"]["o"]["kernel"], ref["attn"]["wo"].T, rtol=1e-9)
    np.testing.assert_allclose(u["params"]["v"]["kernel"], ref["attn"]["wv"].T, rtol=1e-9)


@pytest.mark.parametrize("decl, message", [
    (lambda p: [QKPair("attn/wq", "attn/nope", H)], "'attn/nope', which is not a parameter"),
    (lambda p: [QKPair("attn/wq", "attn/wk", 3)], "not divisible into heads = 3"),
    (lambda p: [QKPair("attn/wq", "attn/wk", H, 3)], "kv_heads = 3 must be a positive int dividing heads"),
    (lambda p: [OVPair("attn/wo", "attn/wq", H)], "attn/wq"),
    (lambda p: [QKPair("attn/wq", "attn/wk", H), QKPair("attn/wq", "attn/wo", H)], "declared in two pairs"),
    (lambda p: [QKPair("attn/wq", "bias", H)], "'bias' must be a matrix"),
])
def test_bad_declarations_fail_at_init_naming_the_parameter(decl, message):
    params = model(np.random.default_rng(6))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compositional_muon(0.1, pairs=decl).init(params)


def test_bad_options_fail_at_construction():
    with pytest.raises(ValueError, match="qk_rule must be one of"):
        compositional_muon(0.1, qk_rule="sylvster")
    with pytest.raises(ValueError, match="gauge must be one of"):
        compositional_muon(0.1, gauge="balance")
    with pytest.raises(ValueError, match="ns_coeffs"):
        compositional_muon(0.1, ns_coeffs="no-such-schedule")
    with pytest.raises(ValueError, match="qk_rule='joint' has no grouped-query form"):
        params = model(np.random.default_rng(7), kv=1)
        step(compositional_muon(0.1, pairs=pairs_of(1), qk_rule="joint"), params, params)


def test_non_finite_gradient_is_named_eagerly_and_under_jit():
    rng = np.random.default_rng(8)
    params = model(rng)
    g = grads(rng, params)
    g["attn"]["wk"][0, 0] = np.nan
    opt = compositional_muon(0.1, pairs=pairs_of())
    state = opt.init(params)
    with pytest.raises(ValueError, match="gradient of 'attn/wk' contains NaN or Inf"):
        opt.update(g, state, params)
    with pytest.raises(Exception, match="gradient of 'attn/wk' contains NaN or Inf"):
        jax.block_until_ready(jax.jit(opt.update)(g, state, params))
    g["attn"]["wk"][0, 0] = 0.0  # finite again: no error under jit
    jax.block_until_ready(jax.jit(opt.update)(g, state, params))


@pytest.mark.parametrize("rule", ["joint", "isotropic"])
def test_other_qk_rules_run_and_keep_the_budget(rule):
    rng = np.random.default_rng(9)
    params, lr = model(rng), 0.05
    u = step(compositional_muon(lr, pairs=pairs_of(), qk_rule=rule, msign="svd", damping=0.0), params,
             grads(rng, params))
    bounds = [op(uq @ k.T) for uq, k in zip(heads(u["attn"]["wq"], DH), heads(params["attn"]["wk"], DH), strict=False)]
    assert max(bounds) <= lr * (1 + 1e-9) if rule == "joint" else min(bounds) > 0


def visible(g_m, q, k):
    """``G_M P_K + P_Q G_M − P_Q G_M P_K``: the part of ``G_M`` the factor gradients determine."""
    p_q, p_k = (w @ np.linalg.solve(w.T @ w, w.T) for w in (q, k))
    return g_m @ p_k + p_q @ g_m - p_q @ g_m @ p_k


def sylvester_setup(seed):
    """Params, and factor gradients of per-head product gradients with no invisible part."""
    rng = np.random.default_rng(seed)
    params = model(rng)
    g = grads(rng, params)
    a = params["attn"]
    g_ms = [visible(rng.standard_normal((D, D)), q, k)
            for q, k in zip(heads(a["wq"], DH), heads(a["wk"], DH), strict=False)]
    g["attn"]["wq"] = np.concatenate([g_m @ k for g_m, k in zip(g_ms, heads(a["wk"], DH), strict=False)], axis=-1)
    g["attn"]["wk"] = np.concatenate([g_m.T @ q for g_m, q in zip(g_ms, heads(a["wq"], DH), strict=False)], axis=-1)
    return params, g, g_ms


def test_product_gradient_recovers_the_visible_part():
    from numerics.optimizer import product_gradient
    params, g, g_ms = sylvester_setup(20)
    a = params["attn"]
    gradient = jax.jit(product_gradient)  # one program for every head, not one per operation
    for q, k, gq, gk, g_m in zip(*(heads(x, DH) for x in (a["wq"], a["wk"], g["attn"]["wq"], g["attn"]["wk"])), g_ms,
                                 strict=False):
        got = np.asarray(gradient(jnp.asarray(q), jnp.asarray(k), jnp.asarray(gq), jnp.asarray(gk), 0.0))
        np.testing.assert_allclose(got, g_m, atol=1e-10 * np.abs(g_m).max())
        wrong = np.asarray(gradient(jnp.asarray(q), jnp.asarray(k), jnp.asarray(gk), jnp.asarray(gq), 0.0))
        assert not np.allclose(wrong, g_m, atol=1e-3)  # planted mistake: the factor gradients swapped


def test_sylvester_step_is_the_emitted_rule_per_head():
    """Planted mistakes: the transposed product gradient, another regularization, the whole budget."""
    params, g, g_ms = sylvester_setup(21)
    lr, lam = 0.05, 1e-9  # λ → 0: the step's Ĝ_M is the visible part of G_M to ~λ/σ²
    u = step(compositional_muon(lr, pairs=pairs_of(), qk_rule="sylvester", msign="svd", damping=lam), params, g)
    a = params["attn"]
    qs, ks = heads(a["wq"], DH), heads(a["wk"], DH)

    def rule(g_m, damping=lam, eps=lr):
        dq, dk = emitted.sylvester.sylvester_qk(np.stack(qs), np.stack(ks), np.stack(g_m), eps=eps, damping=damping,
                                                 msign="svd")
        return np.concatenate(list(dq), axis=-1), np.concatenate(list(dk), axis=-1)

    ref_q, ref_k = rule(g_ms)
    np.testing.assert_allclose(u["attn"]["wq"], ref_q, rtol=1e-6, atol=1e-8 * np.abs(ref_q).max())
    np.testing.assert_allclose(u["attn"]["wk"], ref_k, rtol=1e-6, atol=1e-8 * np.abs(ref_k).max())
    for planted in (rule([x.T for x in g_ms]), rule(g_ms, eps=2 * lr)):
        assert not np.allclose(u["attn"]["wq"], planted[0], atol=1e-3 * np.abs(ref_q).max())
    # the product change is at most 2η (the two halves of the other rules: η + η)
    for q, k, uq, uk in zip(qs, ks, heads(u["attn"]["wq"], DH), heads(u["attn"]["wk"], DH), strict=False):
        assert 0.5 * lr < op(uq @ k.T + q @ uk.T) <= 2 * lr * (1 + 1e-9)


def test_sylvester_regularization_is_the_damping():
    from numerics.optimizer import product_gradient
    params, g, _ = sylvester_setup(22)
    lr, lam = 0.05, 0.3
    u = step(compositional_muon(lr, pairs=pairs_of(), qk_rule="sylvester", msign="svd", damping=lam), params, g)
    a = params["attn"]
    qs, ks, gqs, gks = (np.stack(heads(x, DH)) for x in (a["wq"], a["wk"], g["attn"]["wq"], g["attn"]["wk"]))
    g_m = product_gradient(*(jnp.asarray(x) for x in (qs, ks, gqs, gks)), lam)
    dq = [emitted.sylvester.sylvester_qk(qs, ks, g_m, eps=lr, damping=x, msign="svd")[0] for x in (lam, 2 * lam)]
    np.testing.assert_allclose(u["attn"]["wq"], np.concatenate(list(dq[0]), axis=-1), rtol=1e-8, atol=1e-12)
    # planted mistake: the regularization weight 2λ passed as λ
    assert not np.allclose(u["attn"]["wq"], np.concatenate(list(dq[1]), axis=-1), rtol=1e-3)
    for q, k, uq, uk in zip(*(heads(x, DH) for x in (a["wq"], a["wk"], u["attn"]["wq"], u["attn"]["wk"])),
                            strict=False):
        assert op(uq @ k.T + q @ uk.T) <= 2 * lr * (1 + 1e-9)
    with pytest.raises(ValueError, match="qk_rule='sylvester' needs damping > 0"):
        compositional_muon(lr, qk_rule="sylvester", damping=0.0)
    with pytest.raises(ValueError, match="qk_rule='sylvester' has no grouped-query form"):
        params = model(np.random.default_rng(7), kv=1)
        step(compositional_muon(0.1, pairs=pairs_of(1), qk_rule="sylvester"), params, params)


def test_momentum_projection_is_horizontal_and_keeps_the_product_change():
    rng = np.random.default_rng(10)
    params = model(rng)
    opt = compositional_muon(0.01, pairs=pairs_of(), gauge="horizontal_projection", damping=0.0)
    state = opt.init(params)
    for _ in range(3):  # momentum of changing factors drifts off the horizontal space, unless projected
        u, state = opt.update(grads(rng, params), state, params)
        params, before = optax.apply_updates(params, u), params
    mu = state[1].inner_states["cm"].inner_state[0].mu["attn"]  # projected at the factors before the step
    for q, k, mq, mk in zip(*(heads(before["attn"][n], DH) for n in ("wq", "wk")),
                            *(heads(mu[n], DH) for n in ("wq", "wk")), strict=False):
        np.testing.assert_allclose(q.T @ mq, mk.T @ k, atol=1e-8 * np.abs(q.T @ mq).max())


def test_rebalance_equalizes_grams_and_keeps_the_product():
    rng = np.random.default_rng(11)
    params = model(rng)
    params["attn"]["wq"] *= 5.0  # unbalanced: W_Q much larger than W_K
    g = grads(rng, params)
    plain = optax.apply_updates(params, step(compositional_muon(0.01, pairs=pairs_of()), params, g))
    bal = optax.apply_updates(params, step(compositional_muon(0.01, pairs=pairs_of(), gauge="rebalance"), params, g))
    for n_a, n_b, tr in (("wq", "wk", False), ("wo", "wv", True)):
        for a, b, pa, pb in zip(heads(bal["attn"][n_a], DH), heads(bal["attn"][n_b].T if tr else bal["attn"][n_b], DH),
                                heads(plain["attn"][n_a], DH),
                                heads(plain["attn"][n_b].T if tr else plain["attn"][n_b], DH), strict=False):
            np.testing.assert_allclose(a.T @ a, b.T @ b, rtol=1e-8, atol=1e-8)
            np.testing.assert_allclose(a @ b.T, pa @ pb.T, rtol=1e-8, atol=1e-10)


def test_balance_planted_mistake_is_caught():
    """Planted mistake: swapping the quarter powers keeps the product but not the Gram equality."""
    rng = np.random.default_rng(12)
    q, k = 3 * rng.standard_normal((10, 3)), rng.standard_normal((10, 3))
    bq, bk = (np.asarray(x) for x in balance(jnp.asarray(q), jnp.asarray(k)))
    np.testing.assert_allclose(bq.T @ bq, bk.T @ bk, rtol=1e-9)
    wrong_q, wrong_k = bq @ np.diag([2.0, 1, 1]), bk @ np.diag([0.5, 1, 1])  # still a gauge move
    np.testing.assert_allclose(wrong_q @ wrong_k.T, q @ k.T, rtol=1e-9)
    assert not np.allclose(wrong_q.T @ wrong_q, wrong_k.T @ wrong_k, rtol=1e-3)


def gqa_model(rng, h=4, kv=2):
    params = {"attn": {"wq": rng.standard_normal((D, h * DH)), "wk": rng.standard_normal((D, kv * DH)),
                       "wo": rng.standard_normal((D, h * DH)), "wv": rng.standard_normal((kv * DH, D))}}
    def decl(p):
        return [QKPair("attn/wq", "attn/wk", h, kv), OVPair("attn/wo", "attn/wv", h, kv)]
    return params, decl


def gqa_sides(params, h=4, kv=2):
    """Per side, per group: (the group's query-like heads, the shared key-like head); M_h = A_h B_gᵀ."""
    a = params["attn"]
    out = []
    for n_a, n_b, tr in (("wq", "wk", False), ("wo", "wv", True)):
        qs, ks = heads(a[n_a], DH), heads(a[n_b].T if tr else a[n_b], DH)
        out.append([(qs[g * (h // kv):(g + 1) * (h // kv)], ks[g]) for g in range(kv)])
    return out


def test_gqa_momentum_projection_is_horizontal_for_the_stacked_group():
    """Horizontal for (Q̄_g, K_g): Σ_h W_{Q,h}ᵀ m_{Q,h} = m_Kᵀ W_K, so the Sylvester-defined vertical part
    X of the stacked pair vanishes; every head's first-order product change is kept.

    Planted mistake: projecting each query head with the shared key alone (the non-GQA projection
    per head) is horizontal per head but neither horizontal for the group nor product-preserving.
    """
    rng = np.random.default_rng(14)
    params, decl = gqa_model(rng)
    opt = compositional_muon(0.01, pairs=decl, gauge="horizontal_projection", damping=0.0)
    state = opt.init(params)
    for _ in range(3):
        u, state = opt.update(grads(rng, params), state, params)
        params, before = optax.apply_updates(params, u), params
    mu = {"attn": state[1].inner_states["cm"].inner_state[0].mu["attn"]}
    for side_w, side_m in zip(gqa_sides(before), gqa_sides(mu), strict=False):
        for (qs, k), (mqs, mk) in zip(side_w, side_m, strict=False):
            bar_q, bar_m = np.concatenate(qs), np.concatenate(mqs)
            gap = bar_q.T @ bar_m - mk.T @ k
            assert np.abs(gap).max() <= 1e-9 * np.abs(mk.T @ k).max()
            # the vertical part (Q̄ X, −K Xᵀ) of the stacked momentum: X from its Sylvester equation
            x = scipy.linalg.solve_sylvester(bar_q.T @ bar_q, k.T @ k, mk.T @ k - bar_q.T @ bar_m)
            assert np.abs(x).max() <= 1e-9 * np.abs(bar_m).max()
    # projection keeps each head's change; the per-head (non-GQA) projection does not keep the group horizontal
    rng = np.random.default_rng(15)
    qs, k = [rng.standard_normal((D, DH)) for _ in range(2)], rng.standard_normal((D, DH))
    mqs, mk = [rng.standard_normal((D, DH)) for _ in range(2)], rng.standard_normal((D, DH))
    w = {"attn": {"wq": np.concatenate(qs, axis=-1), "wk": k}}
    m = {"attn": {"wq": np.concatenate(mqs, axis=-1), "wk": mk}}
    from numerics.optimizer import _project_pair
    pq, pk = (np.asarray(x) for x in _project_pair("qk", w["attn"]["wq"], k, m["attn"]["wq"], mk, 2, 1, DH, False, 0.0))
    gap = sum(q.T @ x for q, x in zip(qs, heads(pq, DH), strict=False)) - pk.T @ k
    assert np.abs(gap).max() <= 1e-9 * np.abs(pk.T @ k).max()
    for q, mq, x in zip(qs, mqs, heads(pq, DH), strict=False):
        np.testing.assert_allclose(x @ k.T + q @ pk.T, mq @ k.T + q @ mk.T, atol=1e-10)
    per_head = [emitted.gauge.horizontal_projection(q, k, mq, mk) for q, mq in zip(qs, mqs, strict=False)]
    gap = sum(q.T @ np.asarray(x) for q, (x, _) in zip(qs, per_head, strict=False)) - np.asarray(per_head[0][1]).T @ k
    assert np.abs(gap).max() > 1e-3


def test_gqa_rebalance_keeps_every_product_and_balances_each_group():
    """After the step, Σ_{h∈g} W_{Q,h}ᵀW_{Q,h} = W_{K,g}ᵀW_{K,g} and every W_{Q,h}W_{K,g}ᵀ is the plain step's.

    Planted mistake: balancing one query head of a group with the shared key (the non-GQA rule)
    changes the products of the group's other heads.
    """
    rng = np.random.default_rng(16)
    params, decl = gqa_model(rng)
    params["attn"]["wq"] *= 4.0
    g = grads(rng, params)
    plain = optax.apply_updates(params, step(compositional_muon(0.01, pairs=decl), params, g))
    bal = optax.apply_updates(params, step(compositional_muon(0.01, pairs=decl, gauge="rebalance"), params, g))
    for side_b, side_p in zip(gqa_sides(bal), gqa_sides(plain), strict=False):
        for (qs, k), (pqs, pk) in zip(side_b, side_p, strict=False):
            np.testing.assert_allclose(sum(q.T @ q for q in qs), k.T @ k, rtol=1e-8, atol=1e-8)
            for q, pq in zip(qs, pqs, strict=False):
                np.testing.assert_allclose(q @ k.T, pq @ pk.T, rtol=1e-8, atol=1e-10)
    (pqs, pk), _ = gqa_sides(plain)[0]
    wrong_q, wrong_k = (np.asarray(x) for x in balance(jnp.asarray(pqs[0]), jnp.asarray(pk)))
    np.testing.assert_allclose(wrong_q @ wrong_k.T, pqs[0] @ pk.T, rtol=1e-8, atol=1e-10)
    assert not np.allclose(pqs[1] @ wrong_k.T, pqs[1] @ pk.T, atol=1e-3)


def test_schedule_and_weight_decay_and_jit():
    rng = np.random.default_rng(13)
    params = jax.tree.map(jnp.asarray, model(rng))
    sched = optax.linear_schedule(0.1, 0.0, 4)
    opt = compositional_muon(sched, pairs=pairs_of(), weight_decay=0.1)
    state = opt.init(params)
    update = jax.jit(opt.update)
    norms = []
    for _ in range(5):
        u, state = update(grads(rng, params), state, params)
        norms.append(float(optax.tree.norm(u["mlp"])))
    assert norms[0] > norms[2] > 0 and norms[-1] == 0.0  # the schedule reaches 0 at step 4



_GQA_LAYER = """
import jax, jax.numpy as jnp, numpy as np
from numerics.emitted import gqa, hybrid_ov
from numerics.optimizer import OVPair, QKPair, compositional_muon
d, heads, kv, hd = 256, 16, 4, 128
rng = np.random.default_rng(0)
shapes = {"wq": (d, heads * hd), "wk": (d, kv * hd), "wo": (d, heads * hd), "wv": (kv * hd, d)}
p = {k: jnp.asarray(rng.standard_normal(s) / np.sqrt(d), jnp.float32) for k, s in shapes.items()}
g = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), jnp.float32), p)
if "{which}" == "emitted":
    kw = dict(head_dim=hd, eps=2.0, damping=1e-2, check_finite=False)
    u = jax.jit(lambda p, g: (gqa.gqa_qk(p["wq"], p["wk"], g["wq"], g["wk"], **kw),
                              hybrid_ov.hybrid_ov(p["wo"], p["wv"], g["wo"], g["wv"], **kw)))(p, g)
else:
    opt = compositional_muon(0.02, pairs=lambda p: [QKPair("wq", "wk", heads, kv), OVPair("wo", "wv", heads, kv)])
    u, _ = jax.jit(opt.update)(g, opt.init(p), p)
print(all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(u)))
"""


@pytest.mark.e2e  # a Python process per case, with a time limit
@pytest.mark.parametrize("which", ["emitted", "optimizer"])
def test_grouped_query_layer_update_does_not_deadlock_the_cpu_pool(which):
    """Two batched eighs at once (QK key side, OV side) deadlocked jaxlib's 2-worker CPU pool.

    Planted mistake: batched ``jnp.linalg.eigh`` on the CPU in the routines hung here forever (the
    emitted case; the optimizer case hung with it even when it chained the OV pair after the QK
    pair's ``ΔW_Q``). A subprocess with a time limit turns a regression into a failure instead of
    a hung suite.
    """
    try:
        out = subprocess.run([sys.executable, "-c", _GQA_LAYER.replace("{which}", which)],
                             check=False, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the jitted GQA layer update ({which}) hung: concurrent LAPACK calls deadlocked the pool")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize(("rule", "reason"), [("joint", "cannot sit side by side"), ("sylvester", "stacked pair")])
def test_rules_without_a_grouped_form_give_the_mathematical_reason(rule, reason):
    params = model(np.random.default_rng(7), kv=1)
    with pytest.raises(ValueError, match=f"qk_rule='{rule}' has no grouped-query form.*{reason}.*use "
                                         f"qk_rule='half_split'"):
        step(compositional_muon(0.1, pairs=pairs_of(1), qk_rule=rule, damping=1e-2), params, params)


def test_the_lapack_calls_of_the_gram_roots_are_compiled_once_per_call_site_not_per_head():
    # 12 heads: the Gram eighs and the SVD fallback that runs only for ill-conditioned partners loop over the
    # heads on the CPU, one traced LAPACK call per gram_eigh call site, not one per matrix (unrolled, 48 eighs
    # on a GPT-2 layer, which made about a third of the first step's compile time)
    heads_, d, d_h = 12, 48, 4
    rng = np.random.default_rng(3)
    shapes = {"wq": (d, heads_ * d_h), "wk": (d, heads_ * d_h), "wo": (d, heads_ * d_h), "wv": (heads_ * d_h, d)}
    params = {k: jnp.asarray(rng.standard_normal(s), jnp.float32) for k, s in shapes.items()}
    opt = compositional_muon(0.02, pairs=[QKPair("wq", "wk", heads_), OVPair("wo", "wv", heads_)])
    text = jax.jit(opt.update).lower(params, opt.init(params), params).as_text()
    calls = {name: len(re.findall(rf"call @{name}(?:_\d+)?\(", text)) for name in ("eigh", "svd", "qr")}
    assert 1 <= calls["eigh"] <= 4 and 1 <= calls["svd"] <= 4 and 1 <= calls["qr"] <= 4, calls


def test_isotropic_gqa_matches_hand_formula():
    """Grouped isotropic (``derivations.gqa.isotropic_key``): ``ΔW_{Q,h} = −η c_{K,g}⁻¹ msign(G_{Q,h})`` and
    ``ΔW_{K,g} = −(η/G) c̄_g⁻¹ msign(G_{K,g})``, ``c̄_g² = Σ_{h∈g} ‖W_{Q,h}‖_F²/d_h + λ`` (independent NumPy).

    Planted mistakes: the shared key head at the whole budget (no ``1/G``), its scale from one query head.
    """
    rng = np.random.default_rng(23)
    kv, lr, lam = 1, 0.05, 1e-2
    params = model(rng, kv=kv)
    g = grads(rng, params)
    u = step(compositional_muon(lr, pairs=pairs_of(kv), qk_rule="isotropic", msign="svd", damping=lam), params, g)
    a, group = params["attn"], H // kv

    def msign(x):
        left, _, right = np.linalg.svd(x, full_matrices=False)
        return left @ right

    def scale(*ws):
        return np.sqrt(sum(np.sum(w * w) for w in ws) / DH + lam)

    qs, (k,) = heads(a["wq"], DH), heads(a["wk"], DH)
    (g_k,) = heads(g["attn"]["wk"], DH)
    for uq, gq in zip(heads(u["attn"]["wq"], DH), heads(g["attn"]["wq"], DH), strict=True):
        np.testing.assert_allclose(uq, -lr / scale(k) * msign(gq), rtol=1e-6)
    want = -lr / group / scale(*qs) * msign(g_k)
    np.testing.assert_allclose(u["attn"]["wk"], want, rtol=1e-6)
    for planted in (-lr / scale(*qs) * msign(g_k), -lr / group / scale(qs[0]) * msign(g_k)):
        assert not np.allclose(u["attn"]["wk"], planted, rtol=1e-3)
