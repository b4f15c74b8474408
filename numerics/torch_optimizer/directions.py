"""Directions of Compositional Muon on PyTorch weights, through the emitted PyTorch modules.

Pairs take the derived rule at budget ``ε = 2`` with the sign flipped (each half of the product change has
operator norm 1; the step is ``−η ·`` direction), as :mod:`numerics.optimizer.transform` does. A query/key pair
``(W_Q, W_K)`` stored ``(H·d_h, d)`` is transposed to the ``(d, H·d_h)`` layout and split into per-head factors
``(H, d, d_h)`` for :func:`~numerics.emitted.halfsplit_torch.halfsplit_qk`
(``ΔW_Q = −msign(m̂_Q C_K⁻¹) C_K⁻¹``, ``C_K = (W_KᵀW_K + λI)^{1/2}``), or handed to
:func:`~numerics.emitted.gqa_torch.gqa_qk` when ``H_kv < H``; an output/value pair is already in
:func:`~numerics.emitted.hybrid_ov_torch.hybrid_ov`'s layout (``W_O (d, H·d_h)``, ``W_V (H_kv·d_h, d)``).
A matrix outside the pairs takes Muon's ``√max(1, fan_out/fan_in) msign(m̂)`` (``fan_out`` its rows).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from foundation.compute.torch_head_layout import merge_heads, split_heads
from numerics.emitted import gqa_torch, halfsplit_torch, hybrid_ov_torch

from .pairs import TorchPair, head_dim

#: the budget of a pair's rule: each half of the product change has operator norm ``ε/2 = 1``
PAIR_BUDGET = 2.0


def rule_options(damping: float, msign: str, schedule: Any) -> dict[str, Any]:
    """Keyword arguments of an emitted rule (NaN/Inf results come back as they are: the optimizer checks them)."""
    return {"eps": PAIR_BUDGET, "damping": damping, "msign": msign, "schedule": schedule, "check_finite": False}


def qk_direction(w_q: torch.Tensor, w_k: torch.Tensor, m_q: torch.Tensor, m_k: torch.Tensor, pair: TorchPair,
                 options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(D_Q, D_K)`` of a query/key pair of ``(out, in)`` weights: the half-split rule, sign flipped."""
    d_h = head_dim(pair, w_q)
    q, k, g_q, g_k = (x.mT for x in (w_q, w_k, m_q, m_k))  # (d, H·d_h): q = x @ W_Q
    if pair.kv_heads == pair.heads:
        dq, dk = halfsplit_torch.halfsplit_qk(*(split_heads(x, d_h) for x in (q, k, g_q, g_k)), **options)
        dq, dk = merge_heads(dq), merge_heads(dk)
    else:
        dq, dk = gqa_torch.gqa_qk(q, k, g_q, g_k, head_dim=d_h, **options)
    return -dq.mT, -dk.mT


def ov_direction(w_o: torch.Tensor, w_v: torch.Tensor, m_o: torch.Tensor, m_v: torch.Tensor, pair: TorchPair,
                 options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(D_O, D_V)`` of an output/value pair of ``(out, in)`` weights: the hybrid rule, sign flipped."""
    do, dv = hybrid_ov_torch.hybrid_ov(w_o, w_v, m_o, m_v, head_dim=head_dim(pair, w_o), **options)
    return -do, -dv


def pair_direction(pair: TorchPair, w: tuple[torch.Tensor, torch.Tensor], m: tuple[torch.Tensor, torch.Tensor],
                   options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The direction of either kind of pair, computed in float32 for 16-bit weights, in their dtype otherwise."""
    ct = compute_dtype(w[0].dtype)
    rule = qk_direction if pair.kind == "qk" else ov_direction
    da, db = rule(*(x.to(ct) for x in (*w, *m)), pair, options)
    return da.to(w[0].dtype), db.to(w[1].dtype)


def muon_direction(m: torch.Tensor, msign: str, schedule: Any) -> torch.Tensor:
    """``√max(1, fan_out/fan_in) msign(m)`` of an ``(out, in)`` matrix (the emitted Newton–Schulz by default)."""
    if m.numel() == 0:
        return torch.zeros_like(m)
    ct = compute_dtype(m.dtype)
    sign = halfsplit_torch.spectral_sign(m.to(ct), msign, schedule)
    fan_out, fan_in = m.shape
    return (math.sqrt(max(1.0, fan_out / fan_in)) * sign).to(m.dtype)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a direction is computed in: the weight's own when it has 32 or 64 bits, else float32."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32
