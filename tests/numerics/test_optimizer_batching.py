"""Same-shape work of one step stacked into one call (``numerics.optimizer.batching``): the layers of a model
share one copy of each rule in the compiled step, and each layer still gets its own update."""

import re
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numerics.optimizer import LoRAPair, OVPair, QKPair, compositional_muon, transform
from numerics.optimizer import batching as batching_module
from numerics.optimizer.batching import same_key_batches, stacked_call
from numerics.optimizer.pairs import named_leaves, pair_declaration, plan_pairs
from numerics.optimizer.transform import CompositionalMuonState

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


def _with_slots(state, change):
    """``state`` with ``change(slots)`` as the slots of its Compositional Muon state."""
    def swap(x):
        return x._replace(slots=change(x.slots)) if isinstance(x, CompositionalMuonState) else x
    return jax.tree.map(swap, state, is_leaf=lambda x: isinstance(x, CompositionalMuonState))


def _slots(state):
    found = [x.slots for x in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, CompositionalMuonState))
             if isinstance(x, CompositionalMuonState)]
    assert len(found) == 1
    return found[0]


def _distinct_fusions(hlo: str) -> int:
    """How many different fused computations an optimized HLO module runs (names and metadata aside):
    what XLA compiles once each (identical fusions share one compiled op)."""
    blocks, cur = {}, None
    for line in hlo.splitlines():
        m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if m and not line.startswith(" "):
            cur = blocks.setdefault(m.group(1), [])
        elif cur is not None and line.startswith("  "):
            cur.append(line)
    bodies = set()
    for lines in blocks.values():
        for line in lines:
            m = re.match(r"\s+(?:ROOT )?%\S+ = (\S+) fusion\(.*calls=%([\w.\-]+)", line)
            if m:
                body = "\n".join(re.sub(r"%[\w.\-]+|, metadata=\{[^}]*\}", "", x) for x in blocks[m.group(2)])
                bodies.add(m.group(1) + body)
    return len(bodies)


def _compiled_ops(layers: int) -> int:
    params, grads = _model(layers), _model(layers, 1)
    opt = _optimizer(layers, "isotropic", full=False)
    return _distinct_fusions(jax.jit(opt.update).lower(grads, opt.init(params), params).compile().as_text())


def test_stacked_results_are_split_at_runtime_positions_so_layers_share_compiled_ops(monkeypatch):
    """Split at the state's slots (runtime values under jit), every layer's slice feeds identical compiled ops: the
    compiled step has as many different ops for 6 layers as for 3. Planted: static slices (``x[i]``), which
    XLA fuses with each layer's offset baked in, so each layer adds compiled ops of its own."""
    assert _compiled_ops(6) == _compiled_ops(3)
    monkeypatch.setattr(batching_module, "_take", lambda x, i, slots: x[i])
    assert _compiled_ops(6) > _compiled_ops(3)


def test_slots_hold_the_largest_stack_and_change_no_value():
    """``init`` holds ``0 … n − 1`` for the most same-shape matrices (a tall one counted as its transpose); a
    state without slots (split by static slices) gives the same update bit for bit, stacked or not."""
    params, grads = _model(3), _model(3, seed=1)
    opt = _optimizer(3)
    state = opt.init(params)
    assert [int(x) for x in _slots(state)] == list(range(12))  # wq, wk, wo, wv of 3 layers: 12 matrices 8 × 8
    assert all(x.dtype == jnp.int32 and x.shape == () for x in _slots(state))
    update = jax.jit(opt.update)
    got, new_state = update(grads, state, params)
    static, _ = update(grads, _with_slots(state, lambda slots: ()), params)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(static), strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert [int(x) for x in _slots(new_state)] == list(range(12))
    single = compositional_muon(0.02, pairs=None)
    assert _slots(single.init({"w": jnp.ones((4, 6)), "b": jnp.ones(6)})) == ()  # nothing to stack


def test_changed_slots_are_refused_eagerly_and_skip_the_step_under_jit():
    """Slots that are not ``0 … n − 1`` (a state rebuilt by hand, a tree-map over it) would hand one layer's
    update to another: refused with one clear error outside jit; under jit the stacked results are NaN and the
    non-finite guard skips the step (every update zero, the skip counted)."""
    params, grads = _model(2), _model(2, seed=1)
    opt = _optimizer(2)
    swapped = _with_slots(opt.init(params), lambda slots: tuple(reversed(slots)))
    with pytest.raises(ValueError, match=r"slots must be 0, 1, \.\.\., 7 as opt\.init made them, got \[7, 6"):
        opt.update(grads, swapped, params)
    updates, state = jax.jit(opt.update)(grads, swapped, params)
    assert all(not np.any(np.asarray(u)) for u in jax.tree.leaves(updates))
    assert int(state[-1].total_notfinite) == 1
    with pytest.raises(TypeError, match="slots must be int32 scalars"):
        opt.update(grads, _with_slots(opt.init(params), lambda slots: tuple(x.astype(jnp.float32) for x in slots)),
                   params)


def test_vmap_over_states_gives_each_member_its_own_update():
    """An ensemble (``jax.vmap`` of ``update`` over stacked states, gradients and params) gives each member the
    update it gets alone, the slots batched with the rest; a NaN gradient in one member is still refused naming
    the parameter. Under vmap the guard's ``lax.cond`` becomes a select and its failure callback runs for every
    member, the finite ones included (which found nothing to report)."""
    params, grads = _model(2), _model(2, seed=1)
    opt = _optimizer(2)
    state = opt.init(params)
    members = [grads, jax.tree.map(lambda g: 1e3 * g, grads)]
    stack = lambda *trees: jax.tree.map(lambda *x: jnp.stack(x), *trees)  # noqa: E731
    ensemble = jax.jit(jax.vmap(opt.update))  # one program for both calls below
    got, _ = ensemble(stack(*members), stack(state, state), stack(params, params))
    update = jax.jit(opt.update)
    for i, g in enumerate(members):
        want, _ = update(g, state, params)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(b))))
    bad = jax.tree.map(lambda g: g, grads)
    bad["layer1"]["wq"] = bad["layer1"]["wq"].at[0, 0].set(jnp.nan)
    with pytest.raises(Exception, match=r"the gradient of 'layer1/wq' contains NaN or Inf"):
        jax.block_until_ready(ensemble(stack(grads, bad), stack(state, state), stack(params, params)))
