"""Same-shape work of one step stacked into one call (``numerics.optimizer.batching``): the layers of a model
share one copy of each rule in the compiled step, and each layer still gets its own update."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numerics.optimizer import LoRAPair, OVPair, QKPair, compositional_muon, transform
from numerics.optimizer.batching import same_key_batches, stacked_call
from numerics.optimizer.pairs import named_leaves, pair_declaration, plan_pairs

D, HEADS, D_H = 8, 2, 4


def _model(layers, seed=0):
    rng = np.random.default_rng(seed)
    w = lambda *s: jnp.asarray(rng.standard_normal(s) / np.sqrt(s[0]), jnp.float32)  # noqa: E731
    return {f"layer{i}": {"wq": w(D, HEADS * D_H), "wk": w(D, HEADS * D_H), "wo": w(D, HEADS * D_H),
                          "wv": w(HEADS * D_H, D), "mlp": w(D, 3 * D), "lora_B": w(D, 2), "lora_A": w(2, 3 * D)}
            for i in range(layers)}


def _lora_pairs(layers):
    return [LoRAPair(f"layer{i}/lora_B", f"layer{i}/lora_A") for i in range(layers)]


def _optimizer(layers, qk_rule="half_split", full=True):
    """Every layer's QK pair, with its OV and LoRA pairs when ``full`` (else those matrices go to AdamW)."""
    pairs = [QKPair(f"layer{i}/wq", f"layer{i}/wk", HEADS) for i in range(layers)]
    if not full:
        return compositional_muon(0.02, pairs=pairs, qk_rule=qk_rule, adamw_params=["*/wo", "*/wv", "*/lora_?"])
    pairs += [OVPair(f"layer{i}/wo", f"layer{i}/wv", HEADS) for i in range(layers)] + _lora_pairs(layers)
    return compositional_muon(0.02, pairs=pairs, qk_rule=qk_rule, msign="auto")


def _products(layers):
    """How many matrix products the traced step holds (nested jits included), for ``layers`` layers."""
    params, opt = _model(layers), _optimizer(layers)
    return str(jax.make_jaxpr(opt.update)(_model(layers, 1), opt.init(params), params)).count("dot_general[")


def test_the_step_holds_each_rule_once_whatever_the_layer_count():
    """Three layers of one shape trace to as many matrix products as two: every pair rule, the LoRA rule and the
    Muon matrices run as one stacked call each (unstacked, each layer adds its own copy of each)."""
    assert _products(3) == _products(2) > 0


def test_each_layer_gets_the_update_it_gets_alone():
    """Stacked, each layer's QK pair and Muon matrix get what they get in a one-layer model (the isotropic QK
    rule alone keeps the two compiles small; every pair rule is stacked by the same code)."""
    params, grads = _model(2), _model(2, seed=1)
    grads["layer1"] = jax.tree.map(lambda g: 1e3 * g, grads["layer1"])  # scales differ between the layers
    two, one = _optimizer(2, "isotropic", full=False), _optimizer(1, "isotropic", full=False)
    got, _ = jax.jit(two.update)(grads, two.init(params), params)
    alone = jax.jit(one.update)
    for i in range(2):
        p, g = {"layer0": params[f"layer{i}"]}, {"layer0": grads[f"layer{i}"]}
        want, _ = alone(g, one.init(p), p)
        for name, u in want["layer0"].items():
            np.testing.assert_allclose(got[f"layer{i}"][name], u, rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(u))),
                                       err_msg=f"layer{i}/{name}")


def test_groups_of_one_layout_run_as_one_call_member_by_member(monkeypatch):
    """LoRA pairs (and MLA blocks) are stacked as the pairs are: one call, run as the first group, whose result
    goes back to each group's own members (a stand-in rule keeps this free of compiles)."""
    params, grads = named_leaves(_model(3)), named_leaves(_model(3, seed=1))
    plan = plan_pairs(pair_declaration(_lora_pairs(3)), _model(3))
    calls = []

    def rule(lora_rule, w, g, group, options):
        calls.append((group.members, {m: x.shape for m, x in w.items()}))
        return {m: w[m] * jnp.sum(g[m], axis=(-2, -1), keepdims=True) for m in group.members}

    monkeypatch.setattr(transform, "group_direction", rule)
    out = transform._group_directions(plan, params, grads, SimpleNamespace(lora_rule="half_split"), None)
    assert calls == [(("layer0/lora_B", "layer0/lora_A"), {"layer0/lora_B": (3, D, 2), "layer0/lora_A": (3, 2, 3 * D)})]
    assert set(out) == {f"layer{i}/lora_{x}" for i in range(3) for x in "AB"}
    for name, u in out.items():
        np.testing.assert_allclose(u, -params[name] * jnp.sum(grads[name]), rtol=1e-6, err_msg=name)


def test_batches_keep_first_appearance_order_and_one_operand_is_not_stacked():
    assert same_key_batches([3, 1, 4, 1, 5, 9, 2, 6], lambda n: n % 3) == [[3, 9, 6], [1, 4, 1], [5, 2]]
    x, y = jnp.arange(6.0).reshape(2, 3), jnp.ones((2, 3))
    calls = []

    def fn(a, b):
        calls.append(a.shape)
        return a + b, a * b

    assert [tuple(np.asarray(o).tolist() for o in out) for out in stacked_call(fn, [(x, y), (y, x)])] == [
        tuple(np.asarray(o).tolist() for o in fn(x, y)), tuple(np.asarray(o).tolist() for o in fn(y, x))]
    assert calls[0] == (2, 2, 3)  # one stacked call for both
    assert stacked_call(fn, [(x, y)])[0][0].shape == (2, 3) and calls[-1] == (2, 3)
    with pytest.raises(ValueError):
        stacked_call(fn, [(x, y), (x,)])  # operands of different arity cannot be stacked


def test_tall_muon_matrices_join_the_wide_ones_of_the_same_sides(monkeypatch):
    """An MLP's ``W_down`` (``f × d``) runs in the one msign call of ``W_gate, W_up`` (``d × f``) as its transpose
    (``msign(Yᵀ) = msign(Y)ᵀ``): the step makes one msign call, and each matrix gets
    ``√max(1, fan_out/fan_in) msign(m)`` in its own orientation (the SVD's, to Newton–Schulz accuracy)."""
    rng = np.random.default_rng(5)
    params = {"w_gate": jnp.asarray(rng.standard_normal((6, 15)), jnp.float32),
              "w_down": jnp.asarray(rng.standard_normal((15, 6)), jnp.float32)}
    grads = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), jnp.float32), params)
    opt = compositional_muon(1.0, pairs=None, msign="newton_schulz", beta=0.0, nesterov=False)
    calls, sign = [], transform._halfsplit.spectral_sign
    monkeypatch.setattr(transform._halfsplit, "spectral_sign", lambda y, *a: calls.append(y.shape) or sign(y, *a))
    got, _ = jax.jit(opt.update)(grads, opt.init(params), params)
    assert calls == [(2, 6, 15)]
    for name, g in grads.items():
        u, _, vt = np.linalg.svd(np.asarray(g, np.float64), full_matrices=False)
        want = -np.sqrt(max(1.0, g.shape[1] / g.shape[0])) * (u @ vt)
        assert got[name].shape == g.shape
        np.testing.assert_allclose(got[name], want, atol=0.35 * np.abs(want).max(), err_msg=name)
        cosine = np.sum(np.asarray(got[name]) * want) / (np.linalg.norm(got[name]) * np.linalg.norm(want))
        assert cosine > 0.98, (name, cosine)
