"""The optimizer update sharded over devices with ``jax.sharding`` (layers and heads across a mesh).

Nothing in :mod:`numerics.optimizer` is device-specific: the update is one ``jit`` program, so
placing the parameters, gradients and optimizer state on a :class:`jax.sharding.Mesh` with
:class:`~jax.sharding.NamedSharding` makes XLA partition it (GSPMD). :func:`compare` runs the same
update once on one device and once sharded, stacked layers over the ``"layers"`` axis and heads
(contiguous column blocks of ``W_Q, W_K, W_O``, row blocks of ``W_V``) over the ``"heads"`` axis.
On several GPUs or hosts the code is the same: call ``jax.distributed.initialize()`` on every host
first, then build the mesh from ``jax.devices()`` (all hosts' devices); :mod:`numerics.distributed` does
that, and runs the update head-parallel under ``shard_map`` too (``examples/launch_multihost.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from numerics.optimizer import OVPair, QKPair, compositional_muon


def attention_block(rng, layers, d, heads, kv_heads, head_dim, dtype=np.float32):
    """Parameters of stacked attention layers plus an MLP matrix and a gain vector."""
    shapes = {"wq": (layers, d, heads * head_dim), "wk": (layers, d, kv_heads * head_dim),
              "wo": (layers, d, heads * head_dim), "wv": (layers, kv_heads * head_dim, d),
              "w1": (layers, d, 2 * d), "gain": (layers, d)}
    return {k: jnp.asarray(rng.standard_normal(s) / np.sqrt(s[-2] if len(s) > 2 else 1), dtype)
            for k, s in shapes.items()}


def specs():
    """Partition specs: layers over ``"layers"``, heads over ``"heads"``."""
    return {"wq": P("layers", None, "heads"), "wk": P("layers", None, "heads"), "wo": P("layers", None, "heads"),
            "wv": P("layers", "heads", None), "w1": P("layers", None, "heads"), "gain": P("layers", None)}


def block_pairs(heads, kv_heads):
    """Pair declaration of one attention block stored as ``wq, wk, wo, wv`` (``H`` heads, ``H_kv`` kv heads)."""
    return lambda params: [QKPair("wq", "wk", heads, kv_heads), OVPair("wo", "wv", heads, kv_heads)]


def mesh(layers_axis: int, heads_axis: int) -> Mesh:
    """A ``(layers, heads)`` device mesh of ``layers_axis × heads_axis`` of the visible devices."""
    devices = np.array(jax.devices()[:layers_axis * heads_axis]).reshape(layers_axis, heads_axis)
    return Mesh(devices, ("layers", "heads"))


def compare(layers=2, d=64, heads=4, kv_heads=4, head_dim=16, steps=2, mesh_shape=(2, 4), seed=0, **options):
    """Max relative difference between the sharded and the unsharded update over ``steps`` steps.

    Returns ``(max_relative_difference, shardings of the sharded update)``.
    """
    rng = np.random.default_rng(seed)
    params = attention_block(rng, layers, d, heads, kv_heads, head_dim)
    grads = [jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), x.dtype), params) for _ in range(steps)]
    opt = compositional_muon(0.02, pairs=block_pairs(heads, kv_heads), **options)
    update = jax.jit(opt.update)
    m = mesh(*mesh_shape)
    shard = {k: NamedSharding(m, s) for k, s in specs().items()}

    def run(put):
        p = put(params)
        state = opt.init(p)
        outs = []
        for g in grads:
            u, state = update(put(g), state, p)
            outs.append(u)
        return outs

    plain = run(lambda t: t)
    sharded = run(lambda t: {k: jax.device_put(v, shard[k]) for k, v in t.items()})
    worst = 0.0
    for a, b in zip(plain, sharded, strict=False):
        for k in a:
            x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
            worst = max(worst, float(np.max(np.abs(x - y)) / (np.max(np.abs(x)) + 1e-30)))
    return worst, {k: v.sharding for k, v in sharded[-1].items()}
