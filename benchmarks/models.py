"""The models the step benchmarks update: one attention layer's matrices, a full pre-norm layer (attention and a
gated MLP), models of several such layers stored as separate leaves, and a two-layer flax linen decoder.

The plain-JAX layouts are those :func:`attention_pairs` declares: ``W_Q, W_K, W_O`` stored ``d × H·d_h``
(``W_K``: ``d × H_kv·d_h``), ``W_V`` stored ``H_kv·d_h × d``; entries ``N(0, 1/fan_in)``. The flax model
(:func:`flax_decoder`) stores its attention as ``nn.MultiHeadDotProductAttention`` does (kernels with head axes,
``query (d, H, d_h)``, ``out (H, d_h, d)``), so ``pairs="auto"`` finds its pairs; its MLP is two ``nn.Dense``
layers with biases (``d → 4d → d``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from numerics.optimizer import OVPair, QKPair

try:
    import flax.linen as nn
except ImportError:  # flax is an optional dependency (the "frameworks" extra): its rows are then left out
    nn = None


def layer(rng, d, heads, kv_heads, head_dim, dtype):
    """The four attention matrices of one layer."""
    shapes = {"wq": (d, heads * head_dim), "wk": (d, kv_heads * head_dim), "wo": (d, heads * head_dim),
              "wv": (kv_heads * head_dim, d)}
    return {k: jnp.asarray(rng.standard_normal(s) / np.sqrt(d), dtype) for k, s in shapes.items()}


def mlp_shapes(d, f):
    """The gated MLP's matrices: ``W_gate, W_up`` (``d × f``) and ``W_down`` (``f × d``)."""
    return {"w_gate": (d, f), "w_up": (d, f), "w_down": (f, d)}


def full_layer(rng, d, heads, kv_heads, head_dim, f, dtype):
    """:func:`layer` plus the gated MLP of width ``f``."""
    params = layer(rng, d, heads, kv_heads, head_dim, dtype)
    params.update({k: jnp.asarray(rng.standard_normal(s) / np.sqrt(s[0]), dtype) for k, s in mlp_shapes(d, f).items()})
    return params


def stacked_model(make, layers):
    """``make()`` (one layer's params) for one layer, else ``{"layer0": make(), …}``: ``layers`` separate layers."""
    return make() if layers == 1 else {f"layer{i}": make() for i in range(layers)}


def attention_pairs(heads, kv_heads, layers):
    """The pairing function of :func:`stacked_model`'s params: each layer's QK and OV pair."""
    prefixes = [""] if layers == 1 else [f"layer{i}/" for i in range(layers)]
    return lambda params: [p for x in prefixes for p in (QKPair(f"{x}wq", f"{x}wk", heads, kv_heads),
                                                         OVPair(f"{x}wo", f"{x}wv", heads, kv_heads))]


def flax_available() -> bool:
    """Whether flax (the optional ``frameworks`` extra) is installed."""
    return nn is not None


def flax_decoder(d, heads, layers, dtype, seed=0):
    """The params of a flax linen decoder of ``layers`` pre-norm blocks of width ``d``: self-attention with
    ``heads`` heads (``nn.MultiHeadDotProductAttention``, no biases), then an MLP ``d → 4d → d`` (``nn.Dense``
    with biases, gelu), each on a ``nn.RMSNorm`` of its input and added to it. The tree is flax's
    (``Decoder().init``'s shapes); flax kernels are ``N(0, 1/fan_in)`` (``fan_in``: the first axis, ``H·d_h`` for
    ``out``), biases 0, gains 1."""

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.RMSNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=heads, qkv_features=d, use_bias=False)(h, h)
            h = nn.RMSNorm()(x)
            return x + nn.Dense(d)(jax.nn.gelu(nn.Dense(4 * d)(h)))

    class Decoder(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(layers):
                x = Block()(x)
            return x

    shapes = jax.eval_shape(Decoder().init, jax.random.key(seed), jnp.zeros((1, 4, d), dtype))
    rng = np.random.default_rng(seed)  # filled here: flax's own init runs op by op, seconds at these sizes

    def fill(path, x):
        name = jax.tree_util.keystr(path[-1:])
        if "scale" in name:
            return jnp.ones(x.shape, dtype)
        if "bias" in name:
            return jnp.zeros(x.shape, dtype)
        fan_in = np.prod(x.shape[:-1]) if "'out'" in jax.tree_util.keystr(path) else x.shape[0]  # (H, d_h, d)
        return jnp.asarray(rng.standard_normal(x.shape) / np.sqrt(fan_in), dtype)

    return jax.tree_util.tree_map_with_path(fill, shapes)
