"""Stored-layout adapter of the hybrid OV rule with shared value heads (inlined into emitted code).

Imports nothing but ``jax.numpy`` (the emitted module inlines this source next to
``split_heads``/``merge_heads``).
"""

import jax.numpy as jnp

from .jax_kernels import merge_heads, require_arrays, split_heads


def gqa_ov_layout(o_core, v_core, W_O, W_V, G_O, G_V, head_dim, options):
    """Stored OV layouts with ``H_kv`` value heads → O side (one global sign) and shared V side.

    ``W_O, G_O: (..., d, H·d_h)``; ``W_V, G_V: (..., H_kv·d_h, d)``; output head ``h`` reads value
    head ``h // (H / H_kv)`` (consecutive grouping). The O side whitens head ``h`` by its value head,
    ``P = blockdiag(W_{V,g(h)}ᵀ)``; each value head sees its group's output heads stacked row-wise,
    with budget ``ε/(2G)``. With ``H_kv = H`` this is the head-local hybrid rule.
    """
    require_arrays("hybrid_ov", {"W_O": W_O, "W_V": W_V, "G_O": G_O, "G_V": G_V})
    for name, x, ref in (("G_O", G_O, W_O), ("G_V", G_V, W_V)):
        if getattr(x, "shape", None) != getattr(ref, "shape", None):
            raise ValueError(f"hybrid_ov: {name} must have the shape of its weight {tuple(ref.shape)}, "
                             f"got {tuple(getattr(x, 'shape', ()))}")
    if not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"hybrid_ov: head_dim must be a positive int, got {head_dim!r}")
    if W_O.ndim < 2 or W_V.ndim < 2 or W_O.shape[-1] % head_dim or W_V.shape[-2] % head_dim:
        raise ValueError(f"hybrid_ov: W_O width {W_O.shape[-1]} and W_V height {W_V.shape[-2]} must be "
                         f"multiples of head_dim = {head_dim}")
    if W_V.shape[-1] != W_O.shape[-2] or W_V.shape[:-2] != W_O.shape[:-2]:
        raise ValueError(f"hybrid_ov: W_V must have shape (..., H_kv·d_h, {W_O.shape[-2]}) with the leading "
                         f"axes of W_O {tuple(W_O.shape)}, got {tuple(W_V.shape)}")
    heads, kv_heads = W_O.shape[-1] // head_dim, W_V.shape[-2] // head_dim
    if heads % kv_heads:
        raise ValueError(f"hybrid_ov: {heads} output heads cannot be grouped over {kv_heads} value heads")
    group = heads // kv_heads
    v_heads = split_heads(jnp.asarray(W_V).mT, head_dim)  # (..., H_kv, d, d_h): W_{V,g}ᵀ
    d_o = o_core(jnp.repeat(v_heads, group, axis=-3), jnp.asarray(G_O), **options)
    # 0·ΔW_O makes the V side wait for the O side: two LAPACK kernels (eigh) running at once can
    # deadlock jaxlib's CPU pool
    o_heads = split_heads(jnp.asarray(W_O) + 0 * d_o[..., :1, :1], head_dim)
    stacked = o_heads.reshape(*o_heads.shape[:-3], kv_heads, group * o_heads.shape[-2], head_dim)
    gv_heads = split_heads(jnp.asarray(G_V).mT, head_dim).mT  # (..., H_kv, d_h, d)
    d_v = v_core(stacked, gv_heads, group_size=float(group), **options)
    return d_o, merge_heads(d_v.mT).mT
