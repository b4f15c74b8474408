"""The optimizer as optax users use it: inject_hyperparams without static_args, mixed
precision, declarations as data, pairs found from parameter names, optax.contrib.muon's options and
presets, checkpoints by pickle.

Each test fails on the behaviour it replaces: a traced damping refused, bf16 weights computed in
bf16 from float32 gradients (and a momentum whose dtype changes between steps), the guard checking
the update in its own dtype rather than the one written into the parameters, pairs only as a
function, and the options optax has and this optimizer lacked.
"""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optax.contrib import MuonDimensionNumbers

from numerics import optimizer
from numerics.optimizer import AutoPairs, OVPair, QKPair, compositional_muon, describe_pairs

D, H, DH = 16, 2, 4
PAIRS = [{"query": "attn/wq", "key": "attn/wk", "heads": H}, {"output": "attn/wo", "value": "attn/wv", "heads": H}]


def model(seed=0, dtype=jnp.float32, kv=H):
    rng = np.random.default_rng(seed)
    shapes = {"wq": (D, H * DH), "wk": (D, kv * DH), "wo": (D, H * DH), "wv": (kv * DH, D)}
    attn = {k: jnp.asarray(rng.standard_normal(s), dtype) for k, s in shapes.items()}
    return {"attn": attn, "mlp": jnp.asarray(rng.standard_normal((D, 3 * D)), dtype),
            "embed": jnp.asarray(rng.standard_normal((5, D)), dtype),
            "bias": jnp.asarray(rng.standard_normal(D), dtype)}


def grads(params, seed=1, dtype=None):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), dtype or x.dtype), params)


def assert_trees_close(a, b, **tol):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), **tol)


def finite(tree):
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree))


# ---- inject_hyperparams ------------------------------------------------------------------------
def test_inject_hyperparams_without_static_args():
    """Learning rate (a schedule), momentum, weight decay, eps and damping injected; declarations as data."""
    params, g = model(), grads(model())
    opt = optax.inject_hyperparams(compositional_muon)(
        learning_rate=optax.linear_schedule(0.1, 0.01, 10), pairs=PAIRS, adamw_params=["embed"], damping=1e-2,
        weight_decay=0.1)
    assert {"learning_rate", "beta", "eps", "weight_decay", "damping"} <= set(opt.init(params).hyperparams)
    update = jax.jit(opt.update)
    for hyper in ({}, {"damping": 0.5}, {"beta": 0.5, "weight_decay": 0.0, "eps": 1e-3}):
        state = opt.init(params)
        state.hyperparams.update({k: jnp.asarray(v, jnp.float32) for k, v in hyper.items()})
        got, _ = update(g, state, params)
        kwargs = {"damping": 1e-2, "weight_decay": 0.1, **hyper}
        ref = compositional_muon(0.1, pairs=PAIRS, adamw_params="embed", **kwargs)
        want, _ = ref.update(g, ref.init(params), params)
        assert_trees_close(got, want, rtol=2e-5, atol=1e-6)
    u0, _ = update(g, opt.init(params), params)
    changed, _ = update(g, state, params)  # the injected values do change the step
    assert not np.allclose(np.asarray(u0["attn"]["wq"]), np.asarray(changed["attn"]["wq"]))


def test_injected_damping_out_of_range_is_refused_when_the_step_runs():
    params, g = model(), grads(model())
    opt = optax.inject_hyperparams(compositional_muon)(0.1, pairs=PAIRS)
    state = opt.init(params)
    for bad in (-0.5, float("nan"), float("inf")):  # (a subnormal one is 0 to XLA on the CPU: refused eagerly only)
        state.hyperparams["damping"] = jnp.asarray(bad, jnp.float32)
        with pytest.raises(ValueError, match=r"^compositional_muon.update: the injected damping is not a finite "
                                             r"number >= 0 that is 0 or normal"):
            optimizer.checked_jit(opt.update)(g, state, params)
        with pytest.raises(ValueError, match=r"compositional_muon: damping must be finite and >= 0"):
            opt.update(g, state, params)  # eagerly the injected value is concrete: refused at once


def test_injected_ns_steps_with_a_repeated_step_is_refused_clearly():
    """inject_hyperparams makes ns_steps an array; it sets the number of steps of an (a, b, c) schedule."""
    params, g = model(), grads(model())
    opt = optax.inject_hyperparams(compositional_muon)(0.1, (3.4445, -4.775, 2.0315), 5, pairs=PAIRS)
    state = opt.init(params)  # concrete at init: accepted
    opt.update(g, state, params)  # eagerly concrete too
    with pytest.raises(TypeError, match=r"ns_steps is a traced value \(optax.inject_hyperparams injects every "
                                        r"number\).*static_args=\('ns_steps',\)"):
        jax.jit(opt.update)(g, state, params)
    fixed = optax.inject_hyperparams(compositional_muon, static_args=("ns_steps",))(
        0.1, (3.4445, -4.775, 2.0315), 5, pairs=PAIRS)
    u, _ = jax.jit(fixed.update)(g, fixed.init(params), params)
    assert finite(u)


def test_callable_declarations_need_static_args_as_optax_documents():
    params, g = model(), grads(model())
    declare = lambda p: [QKPair("attn/wq", "attn/wk", H)]  # noqa: E731
    opt = optax.inject_hyperparams(compositional_muon, static_args=("pairs", "adamw_params"))(
        0.1, pairs=declare, adamw_params=lambda path, x: path == "embed")
    u, _ = jax.jit(opt.update)(g, opt.init(params), params)
    ref = compositional_muon(0.1, pairs=declare, adamw_params="embed")
    assert_trees_close(u, ref.update(g, ref.init(params), params)[0], rtol=2e-5, atol=1e-6)


# ---- mixed precision ---------------------------------------------------------------------------
@pytest.mark.parametrize("kv", [H, 1])
def test_bf16_weights_with_float32_gradients_compute_in_float32(kv):
    """As optax.contrib.muon: the direction in the momentum's float32, not in the weights' bfloat16."""
    p16 = model(dtype=jnp.bfloat16, kv=kv)
    p32 = jax.tree.map(lambda x: x.astype(jnp.float32), p16)
    g = grads(p32)
    pairs = [QKPair("attn/wq", "attn/wk", H, kv), OVPair("attn/wo", "attn/wv", H, kv)]
    opt = compositional_muon(0.01, pairs=pairs, mu_dtype=jnp.float32)
    got, _ = opt.update(g, opt.init(p16), p16)
    want, _ = opt.update(g, opt.init(p32), p32)
    for name in ("wq", "wk", "wo", "wv"):  # the float32 computation in the weights' bfloat16 (scaled by η in
        assert got["attn"][name].dtype == jnp.bfloat16  # bfloat16: within two roundings, 2·2⁻⁸)
        np.testing.assert_allclose(np.asarray(got["attn"][name], np.float32), np.asarray(want["attn"][name]),
                                   rtol=2 ** -7, atol=0)
    update = jax.jit(opt.update)
    got, state = update(g, opt.init(p16), p16)
    new = optax.apply_updates(p16, got)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(new))
    _, state2 = update(g, state, new)  # the state keeps its dtypes: no retrace on the second step
    assert jax.tree.map(lambda x: x.dtype, state) == jax.tree.map(lambda x: x.dtype, state2)
    assert update._cache_size() == 1


def test_momentum_keeps_its_dtype_between_steps():
    params = model(dtype=jnp.bfloat16)
    opt = compositional_muon(0.01, pairs=PAIRS)
    state = opt.init(params)
    _, new = opt.update(grads(params, dtype=jnp.float32), state, params)
    cm = lambda s: s[1].inner_states["cm"].inner_state[0]  # noqa: E731 - the Compositional Muon part (optax's
    assert jax.tree.map(lambda x: x.dtype, cm(state)) == jax.tree.map(lambda x: x.dtype, cm(new))  # adamw promotes)
    assert cm(new).mu["attn"]["wq"].dtype == jnp.bfloat16


def _moment_dtypes(state):
    """``(Compositional Muon momentum dtypes, AdamW first-moment dtypes)`` of compositional_muon's state."""
    parts = state[1].inner_states
    cm, adam = parts["cm"].inner_state[0].mu, parts["adam"].inner_state[0].mu
    return {x.dtype for x in jax.tree.leaves(cm)}, {x.dtype for x in jax.tree.leaves(adam)}


def test_mu_dtype_through_inject_hyperparams():
    """``mu_dtype=jnp.bfloat16`` as an optax user passes it: ``inject_hyperparams`` takes a scalar type (callable)
    for a schedule and hands the factory ``jnp.bfloat16(count)``, an array (optax.adamw then fails with
    'unhashable type'); its dtype is the one meant. The momentum is stored in bfloat16, under jit too, and the step
    is the float32-momentum one within bfloat16 rounding."""
    params, g = model(), grads(model())
    bf16 = ({jnp.dtype(jnp.bfloat16)}, {jnp.dtype(jnp.bfloat16)})
    for mu_dtype in (jnp.bfloat16, "bfloat16", jnp.dtype(jnp.bfloat16)):
        opt = optax.inject_hyperparams(compositional_muon)(0.01, pairs=PAIRS, mu_dtype=mu_dtype)
        assert _moment_dtypes(opt.init(params).inner_state) == bf16
    ref = compositional_muon(0.01, pairs=PAIRS)
    want, _ = ref.update(g, ref.init(params), params)
    got, state = opt.update(g, opt.init(params), params)  # eagerly: the compiled ops of the other tests are reused
    assert _moment_dtypes(state.inner_state) == bf16
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert x.dtype == y.dtype == jnp.float32
        assert float(jnp.linalg.norm(x - y)) <= 2 ** -7 * float(jnp.linalg.norm(y))  # bf16 momentum: 2⁻⁹
    small = {"mlp": params["mlp"], "bias": params["bias"]}  # under jit the injected jnp.bfloat16(count) is traced
    opt = optax.inject_hyperparams(compositional_muon)(0.01, mu_dtype=jnp.bfloat16)
    _, state = jax.jit(opt.update)({k: g[k] for k in small}, opt.init(small), small)
    assert _moment_dtypes(state.inner_state) == bf16
    plain = compositional_muon(0.01, pairs=PAIRS, mu_dtype=jnp.bfloat16)  # the same dtype given directly
    assert _moment_dtypes(plain.init(params)) == ({jnp.dtype(jnp.bfloat16)}, {jnp.dtype(jnp.bfloat16)})
    for bad, why in ((jnp.int8, "int8 is not a floating dtype"), ("bfloat61", "'bfloat61', which is not a dtype")):
        with pytest.raises(TypeError, match=rf"^compositional_muon: mu_dtype must be a floating dtype.*{why}"):
            compositional_muon(0.01, mu_dtype=bad)


def test_update_that_overflows_the_weights_dtype_is_skipped():
    """AdamW's float32 update of float16 weights: finite in float32, Inf once written into the weights."""
    params = {"bias": jnp.ones(D, jnp.float16)}
    opt = compositional_muon(1e6)  # |step| ~ 1e6 > float16's 65504
    updates, state = opt.update(grads(params, dtype=jnp.float32), opt.init(params), params)
    assert updates["bias"].dtype == jnp.float32 and finite(updates)  # optax's adamw: the gradients' dtype
    assert finite(optax.apply_updates(params, updates))
    assert (int(state[-1].notfinite_count), bool(state[-1].last_finite)) == (1, False)


# ---- declarations as data, pairs found from names ----------------------------------------------
def test_pairs_as_dicts_and_data_adamw_selection():
    params, g = model(), grads(model())
    ref = compositional_muon(0.01, pairs=[QKPair("attn/wq", "attn/wk", H), OVPair("attn/wo", "attn/wv", H)],
                             adamw_params=lambda path, x: path == "embed")
    want, _ = ref.update(g, ref.init(params), params)
    for adamw in ("embed", ["emb*"], ("embed", "nothing/*")):
        opt = compositional_muon(0.01, pairs=PAIRS, adamw_params=adamw)
        got, _ = opt.update(g, opt.init(params), params)
        assert_trees_close(got, want, rtol=0, atol=0)
    with pytest.raises(TypeError, match=r"QKPair declaration \{'query': 'a', 'key': 'b'\} needs the fields "
                                        r"\('query', 'key', 'heads'\)"):
        compositional_muon(0.01, pairs=[{"query": "a", "key": "b"}])
    with pytest.raises(TypeError, match=r"has unknown fields \['head'\]"):
        compositional_muon(0.01, pairs={"query": "a", "key": "b", "head": 2})
    with pytest.raises(TypeError, match=r"adamw_params must be a function \(path, array\) -> bool, a path pattern"):
        compositional_muon(0.01, adamw_params=[3])


def _torch_style(kv=1):
    """PyTorch/equinox layout: W @ x weights, q_proj (H·d_h, d), k_proj (H_kv·d_h, d), o_proj (d, H·d_h)."""
    rng = np.random.default_rng(3)
    w = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    return {"layers": [{"self_attn": {"q_proj": {"weight": w(H * DH, D)}, "k_proj": {"weight": w(kv * DH, D)},
                                      "v_proj": {"weight": w(kv * DH, D)}, "o_proj": {"weight": w(D, H * DH)}},
                        "mlp": {"weight": w(3 * D, D)}}]}


def test_auto_pairs_torch_style_weights_match_the_declared_transposed_layout():
    params = _torch_style(kv=1)
    found = optimizer.auto_pairs(params, heads=H)
    prefix = "layers/0/self_attn"
    assert found == [QKPair(f"{prefix}/q_proj/weight", f"{prefix}/k_proj/weight", H, 1, transposed=True),
                     OVPair(f"{prefix}/o_proj/weight", f"{prefix}/v_proj/weight", H, 1, kernels=False)]
    g = grads(params)
    auto = compositional_muon(0.01, pairs=AutoPairs(heads=H))
    got, _ = auto.update(g, auto.init(params), params)
    # the transposed pair is the x @ W pair of the transposed weights
    flat = {"wq": params["layers"][0]["self_attn"]["q_proj"]["weight"].T,
            "wk": params["layers"][0]["self_attn"]["k_proj"]["weight"].T}
    gflat = {"wq": g["layers"][0]["self_attn"]["q_proj"]["weight"].T,
             "wk": g["layers"][0]["self_attn"]["k_proj"]["weight"].T}
    ref = compositional_muon(0.01, pairs=[QKPair("wq", "wk", H, 1)])
    want, _ = ref.update(gflat, ref.init(flat), flat)
    np.testing.assert_allclose(np.asarray(got["layers"][0]["self_attn"]["q_proj"]["weight"]),
                               np.asarray(want["wq"].T), rtol=1e-5, atol=1e-7)
    table = describe_pairs(params, AutoPairs(heads=H))
    assert "qk pair: heads=2 kv_heads=1 d_h=4 (x @ Wᵀ)" in table and "layers/0/mlp/weight" in table
    assert "ov pair: heads=2 kv_heads=1 d_h=4 (x @ Wᵀ)" in table
    assert table.splitlines()[-1] == "2 pairs, 1 Muon matrices, 0 AdamW parameters"


def test_auto_pairs_flax_kernels_and_plain_dicts():
    rng = np.random.default_rng(4)
    w = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    flax_like = {"params": {"Block_0": {n: {"kernel": w(D, H * DH)} for n in ("query", "key", "value")}}}
    flax_like["params"]["Block_0"]["out"] = {"kernel": w(H * DH, D)}
    b = "params/Block_0"
    assert optimizer.auto_pairs(flax_like, heads=H) == [
        QKPair(f"{b}/query/kernel", f"{b}/key/kernel", H, H), OVPair(f"{b}/out/kernel", f"{b}/value/kernel", H, H,
                                                                    kernels=True)]
    plain = {"attn": model()["attn"]}  # this project's layout: W_O (d, H·d_h), W_V (H·d_h, d)
    assert optimizer.auto_pairs(plain, heads=H) == [QKPair("attn/wq", "attn/wk", H, H),
                                                    OVPair("attn/wo", "attn/wv", H, H, kernels=False)]
    with pytest.raises(ValueError, match=r"pairs='auto' found the attention block 'params/Block_0' "
                                         r"\(query/key/value/out, width 8\) but its head count is not in its 2-D "
                                         r"layout; pass pairs=numerics.optimizer.AutoPairs\(heads=H\)"):
        compositional_muon(0.01, pairs="auto").init(flax_like)
    head_axes = {"query": {"kernel": w(D, H, DH)}, "key": {"kernel": w(D, H, DH)}, "value": {"kernel": w(D, H, DH)},
                 "out": {"kernel": w(H, DH, D)}}
    # head axes: flax (tests/numerics/test_optimizer_frameworks.py)
    assert optimizer.auto_pairs(head_axes, heads=H) == [
        QKPair("query/kernel", "key/kernel", H, H, head_axes=True), OVPair("out/kernel", "value/kernel", H, H,
                                                                          head_axes=True)]


# ---- parity with optax.contrib.muon ------------------------------------------------------------
def _muon_matrix():
    rng = np.random.default_rng(5)
    p = {"w": jnp.asarray(rng.standard_normal((24, 40)), jnp.float32)}
    return p, grads(p)


@pytest.mark.parametrize("kwargs", [{}, {"adaptive": True}, {"consistent_rms": 0.2}, {"ns_coeffs": "dion"},
                                    {"nesterov": False, "beta": 0.9}])
def test_muon_matrices_match_optax_contrib_muon(kwargs):
    """A matrix outside any pair gets optax.contrib.muon's step (its Newton–Schulz, presets and options)."""
    params, g = _muon_matrix()
    ours = compositional_muon(0.1, **{"ns_coeffs": "standard", **kwargs})
    theirs = optax.contrib.muon(0.1, **{"ns_coeffs": "standard", **kwargs})
    state_a, state_b = ours.init(params), theirs.init(params)
    for step in range(2):
        a, state_a = ours.update(grads(params, step), state_a, params)
        b, state_b = theirs.update(grads(params, step), state_b, params)
        np.testing.assert_allclose(np.asarray(a["w"]), np.asarray(b["w"]), rtol=2e-4,
                                   atol=1e-5 * float(jnp.abs(b["w"]).max()))  # float32 rounding of two iterations


def test_presets_are_optax_schedules():
    assert optimizer.resolve_schedule("standard", 5) == ((3.4445, -4.775, 2.0315),) * 5
    assert optimizer.resolve_schedule("standard", 3) == ((3.4445, -4.775, 2.0315),) * 3
    assert len(optimizer.resolve_schedule("dion", 5)) == 5
    with pytest.raises(ValueError, match="ns_coeffs 'dio' is not a schedule"):
        compositional_muon(0.1, "dio")


def test_optax_arguments_as_optax_users_pass_them():
    """Arguments an optax user passes: optax.contrib.muon's ``preconditioning`` (a TypeError before), its
    ``ns_coeffs`` as a JAX array (refused as not a schedule before: a 0-d JAX array has ``len``), and momentum rates
    of 1 or NaN, which made every step NaN and skipped, silently, or strings, which failed inside optax."""
    step = [3.4445, -4.775, 2.0315]
    assert optimizer.resolve_schedule(jnp.asarray(step, jnp.float32), 2) == optimizer.resolve_schedule(
        np.asarray(step, np.float32), 2)
    params, g = _muon_matrix()
    opt = compositional_muon(0.1, jnp.asarray([3.4445, -4.775, 2.0315]), preconditioning="frobenius")
    want = optax.contrib.muon(0.1, preconditioning="frobenius")
    assert_trees_close(opt.update(g, opt.init(params), params)[0], want.update(g, want.init(params), params)[0],
                       rtol=2e-4, atol=1e-6)
    with pytest.raises(ValueError, match=r"^compositional_muon: preconditioning must be 'frobenius', got 'aol'"):
        compositional_muon(0.1, preconditioning="aol")
    # the direction alone takes it too, as optax.contrib.scale_by_muon does, with the same check
    direction = optimizer.scale_by_compositional_muon(None, "standard", preconditioning="frobenius")
    muon_direction = optax.contrib.scale_by_muon(preconditioning="frobenius",
                                                 weight_dimension_numbers={"w": MuonDimensionNumbers()})
    shape_scale = np.sqrt(40 / 24)  # optax.contrib.muon applies √max(1, fan_out/fan_in) after scale_by_muon
    assert_trees_close(direction.update(g, direction.init(params), params)[0],
                       jax.tree.map(lambda u: shape_scale * u,
                                    muon_direction.update(g, muon_direction.init(params), params)[0]),
                       rtol=2e-4, atol=1e-6)
    for bad in ("spectral", "Frobenius", None):
        with pytest.raises(ValueError, match=rf"^compositional_muon: preconditioning must be 'frobenius', got {bad!r}"):
            optimizer.scale_by_compositional_muon(preconditioning=bad)
    for kwargs, error, message in [
            ({"beta": 1.0}, ValueError, r"beta must be in \[0, 1\), got 1.0; at 1 the bias correction"),
            ({"adam_b2": 1}, ValueError, r"adam_b2 must be in \[0, 1\), got 1"),
            ({"beta": float("nan")}, ValueError, r"beta must be finite and >= 0, got nan"),
            ({"adam_b1": "0.9"}, TypeError, r"adam_b1 must be a real number, got '0.9'"),
            ({"eps": -1e-8}, ValueError, r"eps must be finite and >= 0"),
            ({"weight_decay": "0.1"}, TypeError, r"weight_decay must be a real number"),
            ({"learning_rate": "0.01"}, TypeError, r"learning_rate must be a real number or a schedule"),
            ({"adam_learning_rate": float("inf")}, ValueError, r"adam_learning_rate must be finite")]:
        with pytest.raises(error, match=rf"^compositional_muon: {message}"):
            compositional_muon(**{"learning_rate": 0.1, **kwargs})
    compositional_muon(-0.1, weight_decay=optax.constant_schedule(0.1), beta=jnp.asarray(0.9))  # as optax takes them


def test_adaptive_scales_pairs_by_the_inner_product_with_the_momentum():
    params, g = model(), grads(model())
    del params["bias"], params["embed"], g["bias"], g["embed"]
    plain = optimizer.scale_by_compositional_muon(PAIRS, nesterov=False)  # first step: the momentum is g
    adaptive = optimizer.scale_by_compositional_muon(PAIRS, nesterov=False, adaptive=True)
    d, _ = plain.update(g, plain.init(params), params)
    a, _ = adaptive.update(g, adaptive.init(params), params)
    for name in ("wq", "wo"):
        scale = float(jnp.sum(g["attn"][name] * d["attn"][name]))
        assert scale > 0
        np.testing.assert_allclose(np.asarray(a["attn"][name]), scale * np.asarray(d["attn"][name]), rtol=1e-5)


def test_weight_dimension_numbers_select_and_reshape():
    rng = np.random.default_rng(6)
    params = {"heads": jnp.asarray(rng.standard_normal((D, H, DH)), jnp.float32),
              "table": jnp.asarray(rng.standard_normal((7, D)), jnp.float32)}
    g = grads(params)
    dims = {"heads": MuonDimensionNumbers(reduction_axis=0, output_axis=(1, 2)), "table": None}
    ours = compositional_muon(0.1, ns_coeffs="standard", muon_weight_dimension_numbers=dims)
    theirs = optax.contrib.muon(0.1, ns_coeffs="standard", muon_weight_dimension_numbers=dims)
    a, _ = ours.update(g, ours.init(params), params)
    b, _ = theirs.update(g, theirs.init(params), params)
    assert_trees_close(a, b, rtol=2e-4, atol=1e-6)
    roles = optimizer.parameter_roles(params, muon_weight_dimension_numbers=dims)
    assert roles == {"heads": "cm", "table": "adam"}


# ---- checkpoints -------------------------------------------------------------------------------
def test_state_pickles_and_training_resumes_bit_identically():
    params = model()
    opt = compositional_muon(optax.linear_schedule(0.05, 0.01, 5), pairs=AutoPairs(heads=H), adamw_params="embed")
    update = jax.jit(opt.update)
    state = opt.init(params)
    for step in range(2):
        u, state = update(grads(params, step), state, params)
        params = optax.apply_updates(params, u)
    restored_params, restored_state = pickle.loads(pickle.dumps((params, state)))
    for source in ((params, state), (restored_params, restored_state)):
        p, s = source
        for step in range(2, 4):
            u, s = update(grads(p, step), s, p)
            p = optax.apply_updates(p, u)
        if source[0] is params:
            want = (p, s)
        else:
            for x, y in zip(jax.tree.leaves(want), jax.tree.leaves((p, s)), strict=True):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_rates_cast_to_bfloat16_by_inject_hyperparams_are_refused_naming_the_fix():
    """Planted by optax itself: without hyperparam_dtype, bf16 weights make adam_b2 = 0.999 exactly 1, every
    AdamW step NaN and (skipped by default) nothing trains, silently. Refused at init; float32 works."""
    params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), model())
    g = jax.tree.map(lambda x: x.astype(jnp.float32), grads(model()))
    assert jnp.asarray(0.999, jnp.bfloat16) == 1  # the rounding the check exists for
    opt = optax.inject_hyperparams(compositional_muon)(0.01, pairs=PAIRS)
    with pytest.raises(ValueError, match=r"^compositional_muon: beta arrived as bfloat16.*hyperparam_dtype"):
        opt.init(params)
    fixed = optax.inject_hyperparams(compositional_muon, hyperparam_dtype=jnp.float32)(0.01, pairs=PAIRS)
    state = fixed.init(params)
    for _ in range(2):
        u, state = fixed.update(g, state, params)
    assert finite(u) and int(state.inner_state[-1].total_notfinite) == 0
    assert float(jnp.max(jnp.abs(u["embed"].astype(jnp.float32)))) > 0  # the AdamW part moves
