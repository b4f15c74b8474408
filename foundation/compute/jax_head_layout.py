"""Attention heads in the stored weight layouts, in JAX: split, merged, and block-diagonal products.

A projection of ``H`` heads is stored as ``(..., d, H·d_h)`` with each head a contiguous block of
``d_h`` columns; :func:`split_heads` and :func:`merge_heads` move between that and ``(..., H, d, d_h)``,
and :func:`block_right` multiplies by a block-diagonal partner ``blockdiag(C_1, …, C_k)`` kept as its
stacked blocks. The layout adapters printed from the derivations (:mod:`derivations.printing.layout`)
and the JAX printer call these functions (inlined verbatim into standalone emitted modules).
"""

import jax.numpy as jnp


def split_heads(w, head_dim):
    """``(..., d, H·d_h) → (..., H, d, d_h)`` (heads are contiguous column blocks)."""
    d, width = w.shape[-2], w.shape[-1]
    return jnp.moveaxis(w.reshape(*w.shape[:-2], d, width // head_dim, head_dim), -2, -3)


def merge_heads(w):
    """``(..., H, d, d_h) → (..., d, H·d_h)``, the inverse of :func:`split_heads`."""
    w = jnp.moveaxis(w, -3, -2)
    return w.reshape(*w.shape[:-2], w.shape[-2] * w.shape[-1])


def block_right(x, blocks):
    """``X · blockdiag(C_1, …, C_k)`` for ``X: (..., d, k·c)`` and ``blocks: (..., k, c, c)``."""
    k, c = blocks.shape[-3], blocks.shape[-1]
    xb = x.reshape(*x.shape[:-1], k, c)
    out = jnp.einsum("...dkc,...kcj->...dkj", xb, blocks.astype(x.dtype))
    return out.reshape(x.shape)
