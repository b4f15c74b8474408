"""Direction rules of one attention pair, by name: ``{rule name: function}`` registries.

Each rule returns ``(ΔW_A, ΔW_B)`` at the budget ``ε`` of its :class:`DirectionOptions` (the
optimizer passes ``ε = 2``, so each half of the product change has operator norm 1), through the
emitted modules of :mod:`numerics.emitted`. Query/key rules (:data:`QK_DIRECTIONS`) act head by head
on ``(..., H, d, d_h)`` factors: ``"half_split"`` ``ΔW_Q = −(ε/2) msign(G_Q C_K⁻¹) C_K⁻¹``,
``"joint"`` one sign over ``[G_Q C_K⁻¹ | G_K C_Q⁻¹]``, ``"isotropic"`` ``ΔW_Q = −(ε/2) c_K⁻¹ msign(G_Q)``,
``"sylvester"`` the minimum-norm factor step towards ``D = −(ε/2) msign(Ĝ_M)`` on the product
(:func:`product_gradient` gives ``Ĝ_M``). With ``kv_heads < heads`` only the rules in
:data:`GROUPED_QK_DIRECTIONS` apply (half-split's grouped-query form, shared key budget ``ε/(2G)``).
Output/value rules (:data:`OV_DIRECTIONS`): ``"hybrid"``, head-local V side and one global sign on O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import jax
import jax.numpy as jnp

from numerics.emitted import gqa as _gqa
from numerics.emitted import halfsplit as _halfsplit
from numerics.emitted import hybrid_ov as _hybrid_ov
from numerics.emitted import joint as _joint
from numerics.emitted import sylvester as _sylvester
from numerics.kernels import jax_kernels

from .options import DirectionOptions
from .pairs import PairPlan, merge_heads, split_heads

Factors = tuple[jax.Array, jax.Array]
#: a per-head QK rule: ``(W_Q, W_K, G_Q, G_K)`` as ``(..., H, d, d_h)`` factors → ``(ΔW_Q, ΔW_K)``
HeadRule = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, DirectionOptions], Factors]
#: a rule on stored layouts: ``(W_A, W_B, G_A, G_B, pair, options)`` → ``(ΔW_A, ΔW_B)``
PairRule = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, PairPlan, DirectionOptions], Factors]


def product_gradient(w_q: jax.Array, w_k: jax.Array, g_q: jax.Array, g_k: jax.Array,
                     damping: float) -> jax.Array:
    """``Ĝ_M``: the product gradient of one head seen through its factor gradients (batched).

    The optimizer has ``G_Q = G_M W_K`` and ``G_K = G_Mᵀ W_Q`` (momentum of them), never ``G_M``.
    They determine exactly the part of ``G_M`` that touches the factors' column spaces,
    ``G_M P_K + P_Q G_M − P_Q G_M P_K`` (``P_W = W (WᵀW)⁻¹ Wᵀ``); the rest,
    ``(I − P_Q) G_M (I − P_K)``, is invisible to both and is taken to be 0 (the minimum-Frobenius-norm
    ``G_M`` consistent with the factor gradients):

        Ĝ_M = G_Q R_K W_Kᵀ + W_Q R_Q G_Kᵀ − W_Q R_Q S R_K W_Kᵀ,   R_W = (WᵀW + λI)⁻¹,
        S = ½ (W_QᵀG_Q + G_KᵀW_K)

    (``W_QᵀG_Q = G_KᵀW_K = W_QᵀG_M W_K`` for horizontal gradients; ``S`` averages the two when
    momentum has drifted). Exact for ``λ = 0`` and ``G_M`` with no invisible part. Shapes
    ``(..., d, d_h)``; the result is ``(..., d, d)``. One stacked eigh for both Grams.
    """
    ct = jnp.promote_types(w_q.dtype, jnp.float32)
    eig_q, eig_k = jax_kernels.gram_eigh_stacked((w_q, w_k), damping, "right")
    r_q, r_k = (jax_kernels.psd_power(e, -1.0, ct) for e in (eig_q, eig_k))
    wq, wk, gq, gk = (x.astype(ct) for x in (w_q, w_k, g_q, g_k))
    s = 0.5 * (wq.mT @ gq + gk.mT @ wk)
    left, right = wq @ r_q, r_k @ wk.mT  # (d, d_h), (d_h, d)
    return (gq @ right + left @ gk.mT - left @ s @ right).astype(w_q.dtype)


# ---- query/key rules, head by head ----------------------------------------------------------
def half_split_heads(q: jax.Array, k: jax.Array, gq: jax.Array, gk: jax.Array,
                     options: DirectionOptions) -> Factors:
    """Half-split: ``ΔW_Q = −(ε/2) msign(G_Q C_K⁻¹) C_K⁻¹``, the key side likewise."""
    return _halfsplit.halfsplit_qk(q, k, gq, gk, **options.kwargs(_halfsplit))


def joint_heads(q: jax.Array, k: jax.Array, gq: jax.Array, gk: jax.Array, options: DirectionOptions) -> Factors:
    """Joint: one sign over ``[G_Q C_K⁻¹ | G_K C_Q⁻¹]``."""
    return _joint.joint_qk(q, k, gq, gk, **options.kwargs(_joint))


def isotropic_heads(q: jax.Array, k: jax.Array, gq: jax.Array, gk: jax.Array,
                    options: DirectionOptions) -> Factors:
    """Isotropic: ``ΔW_Q = −(ε/2) c_K⁻¹ msign(G_Q)``, the key side likewise."""
    return _halfsplit.isotropic_qk(q, k, gq, gk, **options.kwargs(_halfsplit))


def sylvester_heads(q: jax.Array, k: jax.Array, gq: jax.Array, gk: jax.Array,
                    options: DirectionOptions) -> Factors:
    """Sylvester: ``(H W_K, Hᵀ W_Q)`` with ``(W_QW_Qᵀ + λI) H + H (W_KW_Kᵀ + λI) = D = −(ε/2) msign(Ĝ_M)``.

    The target has ``‖D‖_op = ε/2`` and the achieved change ``D − 2λH`` at most ``ε`` (the two halves'
    bound of the other rules).
    """
    kw = replace(options, eps=options.eps / 2).kwargs(_sylvester)
    g_m = product_gradient(q, k, gq, gk, kw["damping"])
    return _sylvester.sylvester_qk(q, k, g_m, solver="structured", **kw)


def _per_head(rule: HeadRule) -> PairRule:
    """A rule on stored layouts ``(..., d, H·d_h)`` from a rule on per-head factors."""

    def on_layouts(w_q, w_k, m_q, m_k, pair, options):
        q, k, gq, gk = (split_heads(x, pair.head_dim) for x in (w_q, w_k, m_q, m_k))
        dq, dk = rule(q, k, gq, gk, options)
        return merge_heads(dq), merge_heads(dk)

    on_layouts.__doc__ = rule.__doc__
    return on_layouts


def grouped_half_split(w_q: jax.Array, w_k: jax.Array, m_q: jax.Array, m_k: jax.Array, pair: PairPlan,
                       options: DirectionOptions) -> Factors:
    """Half-split with shared key heads (``kv_heads < heads``): the emitted grouped-query rule."""
    return _gqa.gqa_layout(_gqa.gqa_query, _gqa.gqa_key, w_q, w_k, m_q, m_k, pair.head_dim,
                           options.kwargs(_gqa))


#: query/key rules on stored layouts, by ``qk_rule`` name (the order of :data:`QK_RULES`)
QK_DIRECTIONS: dict[str, PairRule] = {
    "half_split": _per_head(half_split_heads),
    "joint": _per_head(joint_heads),
    "isotropic": _per_head(isotropic_heads),
    "sylvester": _per_head(sylvester_heads),
}
#: the query/key rules that have a grouped-query form, used when ``kv_heads < heads``
GROUPED_QK_DIRECTIONS: dict[str, PairRule] = {"half_split": grouped_half_split}


# ---- output/value rules ---------------------------------------------------------------------
def hybrid_ov(w_o: jax.Array, w_v: jax.Array, m_o: jax.Array, m_v: jax.Array, pair: PairPlan,
              options: DirectionOptions) -> Factors:
    """Hybrid OV: head-local V side, one global sign on the O side (shared value heads with GQA)."""
    if pair.kernels:  # flax kernels (H·d_h, d) and (d, H_kv·d_h): the stored layouts transposed
        d_o, d_v = _hybrid_ov.hybrid_ov(w_o.mT, w_v.mT, m_o.mT, m_v.mT, head_dim=pair.head_dim,
                                        **options.kwargs(_hybrid_ov))
        return d_o.mT, d_v.mT
    return _hybrid_ov.hybrid_ov(w_o, w_v, m_o, m_v, head_dim=pair.head_dim, **options.kwargs(_hybrid_ov))


#: output/value rules on stored layouts, by ``ov_rule`` name
OV_DIRECTIONS: dict[str, PairRule] = {"hybrid": hybrid_ov}

QK_RULES = tuple(QK_DIRECTIONS)
OV_RULES = tuple(OV_DIRECTIONS)


def qk_direction(rule: str, w_q: jax.Array, w_k: jax.Array, m_q: jax.Array, m_k: jax.Array, pair: PairPlan,
                 options: DirectionOptions) -> Factors:
    """``(ΔW_Q, ΔW_K)`` of a query/key pair by the rule named ``rule`` (grouped form when ``kv_heads < heads``).

    A pair stored as ``W @ x`` weights (``pair.kernels``) is transposed to the default layout and back.
    """
    if pair.kernels:
        dq, dk = qk_direction(rule, w_q.mT, w_k.mT, m_q.mT, m_k.mT, replace(pair, kernels=False), options)
        return dq.mT, dk.mT
    if pair.kv_heads != pair.heads:
        if rule not in GROUPED_QK_DIRECTIONS:
            use = " or ".join(f"qk_rule={name!r}" for name in GROUPED_QK_DIRECTIONS)
            raise ValueError(f"compositional_muon: qk_rule={rule!r} has no grouped-query form (kv_heads = "
                             f"{pair.kv_heads} < heads = {pair.heads}); use {use}")
        return GROUPED_QK_DIRECTIONS[rule](w_q, w_k, m_q, m_k, pair, options)
    return QK_DIRECTIONS[rule](w_q, w_k, m_q, m_k, pair, options)


def ov_direction(rule: str, w_o: jax.Array, w_v: jax.Array, m_o: jax.Array, m_v: jax.Array, pair: PairPlan,
                 options: DirectionOptions) -> Factors:
    """``(ΔW_O, ΔW_V)`` of an output/value pair by the rule named ``rule``."""
    return OV_DIRECTIONS[rule](w_o, w_v, m_o, m_v, pair, options)
