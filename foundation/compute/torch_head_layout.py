"""Attention heads in the stored weight layouts, in PyTorch (:mod:`foundation.compute.jax_head_layout`, one to one).

A projection of ``H`` heads is stored as ``(..., d, H·d_h)`` with each head a contiguous block of ``d_h``
columns; :func:`split_heads` and :func:`merge_heads` move between that and ``(..., H, d, d_h)``, and
:func:`block_right` multiplies by a block-diagonal partner ``blockdiag(C_1, …, C_k)`` kept as its stacked
blocks. Inlined verbatim into standalone emitted modules.
"""

import torch


def split_heads(w, head_dim):
    """``(..., d, H·d_h) → (..., H, d, d_h)`` (heads are contiguous column blocks)."""
    d, width = w.shape[-2], w.shape[-1]
    return torch.movedim(w.reshape(*w.shape[:-2], d, width // head_dim, head_dim), -2, -3)


def merge_heads(w):
    """``(..., H, d, d_h) → (..., d, H·d_h)``, the inverse of :func:`split_heads`."""
    w = torch.movedim(w, -3, -2)
    return w.reshape(*w.shape[:-2], w.shape[-2] * w.shape[-1])


def block_right(x, blocks):
    """``X · blockdiag(C_1, …, C_k)`` for ``X: (..., d, k·c)`` and ``blocks: (..., k, c, c)``."""
    k, c = blocks.shape[-3], blocks.shape[-1]
    xb = x.reshape(*x.shape[:-1], k, c)
    out = torch.einsum("...dkc,...kcj->...dkj", xb, blocks.to(x.dtype))
    return out.reshape(x.shape)
