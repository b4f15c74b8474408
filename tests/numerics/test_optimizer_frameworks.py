"""The optimizer on flax linen, flax nnx and equinox parameter trees, and its state in orbax checkpoints.

Each framework's attention is checked twice against this project's plain layout (``q = x @ W_Q``,
``k = x @ W_K``, ``v = x @ W_Vᵀ``, ``y = o @ W_Oᵀ``, query head ``h`` on key head ``h // G``): the framework's
own forward pass equals the plain one on the converted weights (so the conversion is the framework's
meaning), and ``pairs="auto"`` on the framework's tree gives the update that an explicit declaration gives
on the converted weights. A wrong reshape or transpose fails the second check (planted below). flax,
equinox and orbax are the ``frameworks`` extra: each test skips without the library it needs.
"""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optax.contrib import MuonDimensionNumbers

from numerics import optimizer
from numerics.optimizer import (
    AutoPairs,
    OVPair,
    QKPair,
    compositional_muon,
    describe_pairs,
    framework_pairs,
    parameter_roles,
)
from numerics.optimizer import auto_pairs as find_pairs

D, T = 16, 5


def plain_attention(p, x, heads, kv_heads):
    """Multi-head attention (no mask, no bias) on this project's plain layouts, ``x (T, d)``."""
    d_h = p["wq"].shape[1] // heads
    q = (x @ p["wq"]).reshape(len(x), heads, d_h)
    k = (x @ p["wk"]).reshape(len(x), kv_heads, d_h)
    v = (x @ p["wv"].T).reshape(len(x), kv_heads, -1)
    k, v = (jnp.repeat(t, heads // kv_heads, axis=1) for t in (k, v))  # query head h uses kv head h // G
    s = jax.nn.softmax(jnp.einsum("thd,shd->hts", q, k) / np.sqrt(d_h), axis=-1)
    return jnp.einsum("hts,shd->thd", s, v).reshape(len(x), -1) @ p["wo"].T


def plain_from_head_axes(q, k, v, o):
    """flax DenseGeneral kernels q, k, v (d, H, d_h) and o (H, d_h, d) as the plain layouts."""
    return {"wq": q.reshape(D, -1), "wk": k.reshape(D, -1), "wv": v.reshape(D, -1).T, "wo": o.reshape(-1, D).T}


def reference_updates(plain, plain_grads, heads, kv_heads, steps=2, **options):
    """``steps`` updates of the explicitly declared plain pairs (the second uses the momentum)."""
    opt = compositional_muon(0.02, pairs=[QKPair("wq", "wk", heads, kv_heads), OVPair("wo", "wv", heads, kv_heads)],
                             **options)
    return _run(opt, plain, plain_grads, steps)


def _run(opt, params, grads, steps):
    update, state, out = opt.update, opt.init(params), []  # eagerly: the compiled ops are shared by every test
    for step in range(steps):
        u, state = update(jax.tree.map(lambda g, s=step: g * (1 + s) ** 0.5 - 0.1 * s, grads), state, params)
        out.append(u)
    return out


def random_like(tree, seed):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), x.dtype), tree)


def assert_close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-7)


# ---- flax linen ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def linen_block():
    nn = pytest.importorskip("flax.linen")
    module = nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=D, use_bias=False)
    x = jax.random.normal(jax.random.key(0), (T, D))
    return module, x, module.init(jax.random.key(1), x)


def linen_plain(tree):
    p = tree["params"]
    return plain_from_head_axes(*(p[n]["kernel"] for n in ("query", "key", "value", "out")))


def test_linen_attention_is_paired_by_its_head_axes(linen_block):
    module, x, params = linen_block
    assert_close(module.apply(params, x), plain_attention(linen_plain(params), x, 4, 4))
    assert find_pairs(params) == [QKPair("params/query/kernel", "params/key/kernel", 4, 4, head_axes=True),
                                  OVPair("params/out/kernel", "params/value/kernel", 4, 4, head_axes=True)]
    grads = random_like(params, 2)
    got = _run(compositional_muon(0.02, pairs="auto"), params, grads, 2)
    want = reference_updates(linen_plain(params), linen_plain(grads), 4, 4)
    for u, w in zip(got, want, strict=True):
        for name, ref in linen_plain(u).items():
            assert_close(ref, w[name])


def test_a_wrong_head_axes_reshape_fails_the_comparison(linen_block, monkeypatch):
    """Planted: the head axes merged head-minor (a transpose of (H, d_h)) instead of head-major."""
    _, _, params = linen_block
    grads = random_like(params, 2)
    want = reference_updates(linen_plain(params), linen_plain(grads), 4, 4, steps=1)[0]
    right = framework_pairs.merge_head_axes

    def head_minor(kind, a, b):
        a = a.swapaxes(-3, -2) if kind == "ov" else a.swapaxes(-2, -1)
        a2, b2 = right(kind, a, b.swapaxes(-2, -1))
        return a2, b2

    monkeypatch.setattr(framework_pairs, "merge_head_axes", head_minor)
    got = linen_plain(_run(compositional_muon(0.02, pairs="auto"), params, grads, 1)[0])
    assert not np.allclose(np.asarray(got["wq"]), np.asarray(want["wq"]), rtol=1e-3)


def test_unpaired_head_axes_kernels_are_orthogonalized_as_whole_matrices(linen_block):
    """A flax kernel with head axes in no pair once got Muon per head slice (``(H, d_h)`` slices of
    ``d`` rows); it is one ``d → H·d_h`` map, which optax.contrib.muon orthogonalizes whole given its dimension
    numbers. Here ``pairs=None`` sends all four kernels of the linen block to Muon."""
    _, _, params = linen_block
    grads = random_like(params, 3)
    dims = {"params": {n: {"kernel": MuonDimensionNumbers(0, (1, 2))} for n in ("query", "key", "value")}
            | {"out": {"kernel": MuonDimensionNumbers((0, 1), 2)}}}
    want = optax.contrib.muon(0.02, muon_weight_dimension_numbers=dims)
    want = want.update(grads, want.init(params), params)[0]
    got = _run(compositional_muon(0.02, "standard", pairs=None), params, grads, 1)[0]
    for n in ("query", "key", "value", "out"):
        np.testing.assert_allclose(got["params"][n]["kernel"], want["params"][n]["kernel"], rtol=2e-4, atol=1e-6)
    assert describe_pairs(params, pairs=None).count("muon (head axes merged: one matrix)") == 4
    # stacked layers (nn.scan, nnx's tree alike): the leading axis stays batched, each layer one (d, H·d_h) matrix
    layers = jax.tree.map(lambda x: jnp.stack([x, -2 * x]), params["params"])
    got = _run(compositional_muon(0.02, "standard", pairs=None), layers, layers, 1)[0]["query"]["kernel"]
    flat = {"w": layers["query"]["kernel"].reshape(2, D, -1)}  # (layers, d, H·d_h): Muon on the last two axes
    direction = optimizer.scale_by_compositional_muon(None, "standard")
    want = -0.02 * direction.update(flat, direction.init(flat), flat)[0]["w"]
    np.testing.assert_allclose(got.reshape(2, D, -1), want, rtol=2e-4, atol=1e-6)


# ---- flax nnx -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nnx_block():
    nnx = pytest.importorskip("flax.nnx")
    module = nnx.MultiHeadAttention(num_heads=4, in_features=D, qkv_features=D, use_bias=False, decode=False,
                                    rngs=nnx.Rngs(0))
    return nnx, module, jax.random.normal(jax.random.key(0), (T, D))


def nnx_plain(tree):
    return plain_from_head_axes(*(tree[n]["kernel"] for n in ("query", "key", "value", "out")))


def test_nnx_grouped_query_attention_is_paired_with_shared_kv_heads(nnx_block):
    nnx, _, x = nnx_block
    module = nnx.MultiHeadAttention(num_heads=4, num_kv_heads=2, in_features=D, qkv_features=D, use_bias=False,
                                    decode=False, rngs=nnx.Rngs(0))
    state = nnx.state(module, nnx.Param)
    pure = nnx.to_pure_dict(state)
    assert_close(module(x), plain_attention(nnx_plain(pure), x, 4, 2))  # query head h on kv head h // 2
    # nnx.state holds Variables (leaf paths end in .value) and nnx.Optimizer updates with pure arrays: one name
    assert find_pairs(state) == find_pairs(pure) == [QKPair("query/kernel", "key/kernel", 4, 2, head_axes=True),
                                                     OVPair("out/kernel", "value/kernel", 4, 2, head_axes=True)]


@pytest.mark.parametrize("gauge", ["none", "horizontal_projection", "rebalance"])
def test_nnx_state_updates_as_declared_in_the_plain_layout(nnx_block, gauge):
    """The linen block's shapes (H = H_kv = 4, d_h = 4): the compiled ops of its updates are reused."""
    nnx, module, x = nnx_block
    pure = nnx.to_pure_dict(nnx.state(module, nnx.Param))
    assert_close(module(x), plain_attention(nnx_plain(pure), x, 4, 4))
    grads = random_like(pure, 3)
    got = _run(compositional_muon(0.02, pairs="auto", gauge=gauge), pure, grads, 2)
    want = reference_updates(nnx_plain(pure), nnx_plain(grads), 4, 4, gauge=gauge)
    for u, w in zip(got, want, strict=True):
        for name, ref in nnx_plain(u).items():
            assert_close(ref, w[name])


def test_nnx_optimizer_trains_with_auto_pairs(nnx_block):
    nnx, module, x = nnx_block
    model = nnx.clone(module)
    optimizer = nnx.Optimizer(model, compositional_muon(0.05, pairs="auto"), wrt=nnx.Param)
    target = jax.random.normal(jax.random.key(5), (T, D))

    def loss(m):
        return jnp.mean((m(x) - target) ** 2)

    losses = []
    for _ in range(3):
        value, grads = nnx.value_and_grad(loss)(model)
        optimizer.update(model, grads)
        losses.append(float(value))
    assert losses[-1] < losses[0]
    table = describe_pairs(nnx.state(model, nnx.Param))
    assert "query/kernel  (16, 4, 4)          qk pair: heads=4 kv_heads=4 d_h=4 (head axes)" in table


@pytest.mark.parametrize("framework", ["linen", "nnx"])
def test_attention_biases_go_to_adamw(framework):
    """flax's query/key/value biases are 2-D, (heads, d_h): not weight matrices. Planted before the fix: the default
    (AdamW for fewer than 2 axes, as optax.contrib.muon's) gave them Muon, orthogonalized across the heads."""
    x = jax.random.normal(jax.random.key(0), (T, D))
    if framework == "linen":
        nn = pytest.importorskip("flax.linen")
        params = nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=D, use_bias=True).init(jax.random.key(1), x)
        prefix = "params/"
    else:
        nnx = pytest.importorskip("flax.nnx")
        params = nnx.to_pure_dict(nnx.state(nnx.MultiHeadAttention(
            num_heads=4, in_features=D, qkv_features=D, use_bias=True, decode=False, rngs=nnx.Rngs(0)), nnx.Param))
        prefix = ""
    biases = [f"{prefix}{n}/bias" for n in ("key", "out", "query", "value")]
    roles = parameter_roles(params, "auto")
    assert {n: roles[n] for n in biases} == dict.fromkeys(biases, "adam")
    assert [roles[f"{prefix}{n}/kernel"] for n in ("key", "out", "query", "value")] == ["cm"] * 4  # the pairs
    table = [" ".join(line.split()) for line in describe_pairs(params).splitlines()]  # columns: one space
    assert f"{prefix}query/bias (4, 4) adamw (a bias)" in table and f"{prefix}out/bias (16,) adamw" in table
    assert table[-1] == "2 pairs, 0 Muon matrices, 4 AdamW parameters"
    grads = random_like(params, 6)
    opt = compositional_muon(0.02, pairs="auto")
    got, _ = opt.update(grads, opt.init(params), params)
    adamw = optax.adamw(0.02, weight_decay=0.0, nesterov=True)  # compositional_muon's AdamW part
    sub = lambda tree: {n: tree[n] for n in biases}  # noqa: E731
    named = lambda tree: optimizer.named_leaves(tree)  # noqa: E731
    want, _ = adamw.update(sub(named(grads)), adamw.init(sub(named(params))), sub(named(params)))
    for n in biases:
        assert_close(named(got)[n], want[n])


# ---- equinox ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def equinox_block():
    eqx = pytest.importorskip("equinox")
    module = eqx.nn.MultiheadAttention(num_heads=4, query_size=D, qk_size=4, vo_size=4, dtype=jnp.float32,
                                       key=jax.random.key(0))  # float32 also when x64 is on (conftest)
    return eqx, module, jax.random.normal(jax.random.key(1), (T, D))


def equinox_plain(tree):
    """equinox Linear weights are (out, in), W @ x: W_Q = query_proj.weightᵀ, W_V and W_O as stored."""
    return {"wq": tree.query_proj.weight.T, "wk": tree.key_proj.weight.T, "wv": tree.value_proj.weight,
            "wo": tree.output_proj.weight}


def test_equinox_attention_takes_its_head_count_from_the_module(equinox_block):
    eqx, module, x = equinox_block
    params = eqx.filter(module, eqx.is_array)
    plain = equinox_plain(params)  # the linen block's shapes (16, 16): its compiled ops are reused
    assert_close(module(x, x, x), plain_attention(plain, x, 4, 4))
    assert find_pairs(params) == [QKPair("query_proj/weight", "key_proj/weight", 4, 4, transposed=True),
                                  OVPair("output_proj/weight", "value_proj/weight", 4, 4)]
    grads = random_like(params, 4)
    got = _run(compositional_muon(0.02, pairs="auto"), params, grads, 2)
    want = reference_updates(plain, equinox_plain(grads), 4, 4)
    for u, w in zip(got, want, strict=True):
        for name, ref in equinox_plain(u).items():
            assert_close(ref, w[name])
    # planted: the W @ x weights declared as x @ W kernels (a missing transpose) give another update; the
    # square weights make the shapes the same, so only the orientation can tell
    wrong = _run(compositional_muon(0.02, pairs=[QKPair("query_proj/weight", "key_proj/weight", 4),
                                                 OVPair("output_proj/weight", "value_proj/weight", 4)]),
                 params, grads, 1)[0]
    assert not np.allclose(np.asarray(equinox_plain(wrong)["wq"]), np.asarray(want[0]["wq"]), rtol=1e-3)
    with pytest.raises(ValueError, match=r"the attention module '' has num_heads = 4, but heads=2 was given"):
        find_pairs(params, heads=2)


# ---- declarations and refusals ------------------------------------------------------------------
def _kernels(d, heads, kv, d_h, lead=()):
    rng = np.random.default_rng(7)
    w = lambda *s: jnp.asarray(rng.standard_normal((*lead, *s)), jnp.float32)  # noqa: E731
    return {"query": {"kernel": w(d, heads, d_h)}, "key": {"kernel": w(d, kv, d_h)},
            "value": {"kernel": w(d, kv, d_h)}, "out": {"kernel": w(heads, d_h, d)}}


def test_head_axes_declarations_and_refusals():
    params = _kernels(D, 4, 2, 8, lead=(3,))  # three stacked layers
    assert find_pairs(params) == [QKPair("query/kernel", "key/kernel", 4, 2, head_axes=True),
                                  OVPair("out/kernel", "value/kernel", 4, 2, head_axes=True)]
    assert find_pairs(params, heads=4, kv_heads=2) == find_pairs(params)
    with pytest.raises(ValueError, match=r"block '' with 2 kv_heads on its head axes, but kv_heads=1 was given"):
        find_pairs(params, kv_heads=1)
    with pytest.raises(ValueError, match=r"head_axes=True takes 'key/kernel' as \(\.\.\., d, kv_heads, d_h\) "
                                         r"\(flax DenseGeneral kernels\) with 4 heads on axis -2, got shape"):
        compositional_muon(0.1, pairs=[QKPair("query/kernel", "key/kernel", 4, head_axes=True)]).init(params)
    with pytest.raises(ValueError, match="transposed=True does not apply"):
        compositional_muon(0.1, pairs=[QKPair("query/kernel", "key/kernel", 4, 2, True, True)]).init(params)
    with pytest.raises(TypeError, match="head_axes must be True or False, got 'yes'"):
        compositional_muon(0.1, pairs=[{"query": "query/kernel", "key": "key/kernel", "heads": 4,
                                        "head_axes": "yes"}]).init(params)
    # out_features != in_features: Q/K paired, O and V left to Muon
    wide = {**_kernels(D, 4, 4, 8), "out": {"kernel": jnp.ones((4, 8, 24))}}
    assert find_pairs(wide) == [QKPair("query/kernel", "key/kernel", 4, 4, head_axes=True)]
    # d = H = d_h = layers: the shapes read both as head axes and as stacked 2-D matrices
    with pytest.raises(ValueError, match=r"cannot tell how the attention block '' is stored"):
        find_pairs(_kernels(4, 4, 4, 4, lead=()) | {"out": {"kernel": jnp.ones((4, 4, 4))}})
    with pytest.raises(ValueError, match="AutoPairs"):  # a 2-D block still needs its head count
        find_pairs({n: {"kernel": jnp.ones((D, 8))} for n in ("query", "key", "value", "out")})
    assert AutoPairs().declare(params) == find_pairs(params)


# ---- checkpoints --------------------------------------------------------------------------------
def test_orbax_and_pickle_checkpoints_resume_bit_identically(tmp_path):
    """Train N steps straight against N/2, save (orbax; pickle), restore, N/2: the same bits (the user script,
    examples/optax_user_script.py, does this with bfloat16 weights; tests/project/test_user_script.py runs it)."""
    ocp = pytest.importorskip("orbax.checkpoint")
    params = {**_kernels(D, 4, 4, 4), "norm": jnp.ones(D, jnp.float32)}  # the linen block's shapes
    opt = compositional_muon(optax.warmup_cosine_decay_schedule(0.0, 0.05, 2, 8), pairs="auto")
    update = opt.update  # eagerly, as the other tests (their compiled ops are reused)

    def train(p, state, start, stop):
        for step in range(start, stop):
            grads = random_like(p, 10 + step)
            u, state = update(grads, state, p)
            p = optax.apply_updates(p, u)
        return p, state

    half = train(params, opt.init(params), 0, 2)
    straight = train(*half, 2, 4)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "step_2", {"params": half[0], "opt_state": half[1]})
    checkpointer.wait_until_finished()
    # restored into NumPy arrays: device arrays restored by orbax are committed to the device, a new jit cache
    # key that would compile the step again (the user script restores those: tests/project/test_user_script.py)
    restored = checkpointer.restore(tmp_path / "step_2", jax.tree.map(np.asarray, {"params": half[0],
                                                                                  "opt_state": half[1]}))
    pickled = pickle.loads(pickle.dumps(half))
    for p, s in ((restored["params"], restored["opt_state"]), pickled):
        resumed = train(p, s, 2, 4)
        assert jax.tree.structure(resumed) == jax.tree.structure(straight)
        for a, b in zip(jax.tree.leaves(resumed), jax.tree.leaves(straight), strict=True):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(np.atleast_1d(a).view(np.uint8), np.atleast_1d(b).view(np.uint8))
    assert int(straight[1][1].inner_states["cm"].inner_state[0].count) == 4
