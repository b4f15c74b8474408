"""Direction rules of one attention pair, by name: ``{rule name: function}`` registries.

Each rule returns ``(ΔW_A, ΔW_B)`` at the budget ``ε`` of its :class:`DirectionOptions` (the
optimizer passes ``ε = 2``, so each half of the product change has operator norm 1), through the
emitted modules of :mod:`numerics.emitted`. Query/key rules (:data:`QK_DIRECTIONS`) act head by head
on ``(..., H, d, d_h)`` factors: ``"half_split"`` ``ΔW_Q = −(ε/2) msign(G_Q C_K⁻¹) C_K⁻¹``,
``"joint"`` one sign over ``[G_Q C_K⁻¹ | G_K C_Q⁻¹]``, ``"isotropic"`` ``ΔW_Q = −(ε/2) c_K⁻¹ msign(G_Q)``,
``"sylvester"`` the minimum-norm factor step towards ``D = −(ε/2) msign(Ĝ_M)`` on the product
(:func:`product_gradient` gives ``Ĝ_M``). With ``kv_heads < heads`` only the rules in
:data:`GROUPED_QK_DIRECTIONS` apply (half-split's and isotropic's grouped-query forms, shared key budget
``ε/(2G)``; :data:`UNGROUPED_REASONS` says why joint and sylvester have none).
Output/value rules (:data:`OV_DIRECTIONS`): ``"hybrid"``, head-local V side and one global sign on O.
LoRA rules (:data:`LORA_DIRECTIONS`, ``W = W₀ + B A``): ``"half_split"``
``ΔB = −(ε/2) msign(G_B C_A⁻¹) C_A⁻¹``, ``ΔA = −(ε/2) C_B⁻¹ msign(C_B⁻¹ G_A)``, and ``"joint"`` for square
adapters (the joint QK rule on ``(B, Aᵀ)``). An MLA block takes the six rules of ``derivations.mla``
(:func:`mla_direction`), its partners formed here in JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import jax
import jax.numpy as jnp

from foundation.compute import jax_damped_gram
from numerics.emitted import gqa as _gqa
from numerics.emitted import halfsplit as _halfsplit
from numerics.emitted import hybrid_ov as _hybrid_ov
from numerics.emitted import joint as _joint
from numerics.emitted import lora as _lora
from numerics.emitted import mla as _mla
from numerics.emitted import sylvester as _sylvester

from .framework_pairs import on_merged_heads
from .groups import LoRAPlan, MLAPlan
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
    eig_q, eig_k = jax_damped_gram.gram_eigh_stacked((w_q, w_k), damping, "right")
    r_q, r_k = (jax_damped_gram.psd_power(e, -1.0, ct) for e in (eig_q, eig_k))
    wq, wk, gq, gk = (x.astype(ct) for x in (w_q, w_k, g_q, g_k))
    s = 0.5 * (wq.mT @ gq + gk.mT @ wk)
    left, right = wq @ r_q, r_k @ wk.mT  # (d, d_h), (d_h, d)
    return (gq @ right + left @ gk.mT - left @ s @ right).astype(w_q.dtype)


# ---- query/key rules, head by head ----------------------------------------------------------
def half_split_heads(q: jax.Array, k: jax.Array, gq: jax.Array, gk: jax.Array,
                     options: DirectionOptions) -> Factors:
    """Half-split: ``ΔW_Q = −(ε/2) msign(G_Q C_K⁻¹) C_K⁻¹``, the key side likewise.

    Each half is the transpose of the whitened sign ``−(ε/2) C_K⁻¹ msign(C_K⁻¹ G_Qᵀ)`` (``msign(Aᵀ) = msign(A)ᵀ``,
    ``C_K`` symmetric), the hybrid OV rule's V side with one head per group, so both halves run through that one
    emitted function (``gqa_value``, group size 1). With ``kv_heads = heads`` the two halves and the V side of the
    layer's OV pair then have the same shapes, and XLA compiles their ops once for the three (49 compiled ops
    fewer in the first training step of a GPT-2-small layer, :mod:`benchmarks.step`), the update being equal
    to ``halfsplit_qk``'s to rounding.
    """
    kw = options.kwargs(_hybrid_ov)
    dq, dk = (_hybrid_ov.gqa_value(partner, g.mT, group_size=1.0, **kw).mT for partner, g in ((k, gq), (q, gk)))
    return dq, dk


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


def grouped_isotropic(w_q: jax.Array, w_k: jax.Array, m_q: jax.Array, m_k: jax.Array, pair: PairPlan,
                      options: DirectionOptions) -> Factors:
    """Isotropic with shared key heads: ``ΔW_{Q,h} = −(ε/2) c_{K,g}⁻¹ msign(G_{Q,h})`` and
    ``ΔW_{K,g} = −(ε/2G) c̄_g⁻¹ msign(G_{K,g})``, ``c̄_g² = Σ_{h∈g} ‖W_{Q,h}‖_F²/d_h + λ`` (``derivations.gqa``:
    the isotropic corollary of the shared key update)."""
    return _gqa.gqa_layout(_gqa.gqa_isotropic_query, _gqa.gqa_isotropic_key, w_q, w_k, m_q, m_k, pair.head_dim,
                           options.kwargs(_gqa))


#: query/key rules on stored layouts, by ``qk_rule`` name (the order of :data:`QK_RULES`)
QK_DIRECTIONS: dict[str, PairRule] = {
    "half_split": _per_head(half_split_heads),
    "joint": _per_head(joint_heads),
    "isotropic": _per_head(isotropic_heads),
    "sylvester": _per_head(sylvester_heads),
}
#: the query/key rules that have a grouped-query form, used when ``kv_heads < heads``
GROUPED_QK_DIRECTIONS: dict[str, PairRule] = {"half_split": grouped_half_split, "isotropic": grouped_isotropic}
#: why each other query/key rule has no grouped-query form (a shared key head ``K_g`` of ``G`` query heads)
UNGROUPED_REASONS: dict[str, str] = {
    "joint": "its budget bounds the two halves side by side, ||[dW_Q,h K_g^T | dK_g W_Q,h^T]||_op, and with a shared "
             "key head the G heads' constraints all hold the one dK_g: an intersection of G spectral-norm balls, whose "
             "linear minimization has no single-msign solution; stacking the group instead (as the grouped half-split "
             "rule does) gives halves of G*d and d rows, which cannot sit side by side (as for a non-square LoRA "
             "adapter)",
    "sylvester": "with a shared key head the minimum-norm factor step towards the group's targets is the Sylvester "
                 "step of the stacked pair (W_Qbar_g, K_g), whose one target -(eps/2) msign(G_Mbar) bounds the G "
                 "products W_Q,h K_g^T together rather than each by eps/2; which budget that target takes is not "
                 "derived yet",
}


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

    A pair stored as ``W @ x`` weights (``pair.kernels``) is transposed to the default layout and back; one with
    head axes (flax ``DenseGeneral`` kernels, ``pair.head_axes``) is reshaped to its 2-D layout and back.
    """
    if pair.head_axes:
        return on_merged_heads(qk_direction, rule, w_q, w_k, m_q, m_k, pair, options)
    if pair.kernels:
        dq, dk = qk_direction(rule, w_q.mT, w_k.mT, m_q.mT, m_k.mT, replace(pair, kernels=False), options)
        return dq.mT, dk.mT
    if pair.kv_heads != pair.heads:
        if rule not in GROUPED_QK_DIRECTIONS:
            use = " or ".join(f"qk_rule={name!r}" for name in GROUPED_QK_DIRECTIONS)
            why = f": {UNGROUPED_REASONS[rule]}" if rule in UNGROUPED_REASONS else ""
            raise ValueError(f"compositional_muon: qk_rule={rule!r} has no grouped-query form (kv_heads = "
                             f"{pair.kv_heads} < heads = {pair.heads}){why}; use {use}")
        return GROUPED_QK_DIRECTIONS[rule](w_q, w_k, m_q, m_k, pair, options)
    return QK_DIRECTIONS[rule](w_q, w_k, m_q, m_k, pair, options)


def ov_direction(rule: str, w_o: jax.Array, w_v: jax.Array, m_o: jax.Array, m_v: jax.Array, pair: PairPlan,
                 options: DirectionOptions) -> Factors:
    """``(ΔW_O, ΔW_V)`` of an output/value pair by the rule named ``rule`` (head axes merged, as above)."""
    if pair.head_axes:
        return on_merged_heads(ov_direction, rule, w_o, w_v, m_o, m_v, pair, options)
    return OV_DIRECTIONS[rule](w_o, w_v, m_o, m_v, pair, options)


# ---- LoRA pairs -------------------------------------------------------------------------------
#: a LoRA rule: ``(B, A, G_B, G_A, options)`` with ``B (..., d_out, r)``, ``A (..., r, d_in)`` → ``(ΔB, ΔA)``
LoRARule = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, DirectionOptions], Factors]


def lora_half_split(b: jax.Array, a: jax.Array, g_b: jax.Array, g_a: jax.Array,
                    options: DirectionOptions) -> Factors:
    """Half-split LoRA (``lora.B``, ``lora.A``): ``ΔB = −(ε/2) msign(G_B C_A⁻¹) C_A⁻¹``,
    ``ΔA = −(ε/2) C_B⁻¹ msign(C_B⁻¹ G_A)``, ``C_A = (A Aᵀ + λI)^{1/2}``, ``C_B = (BᵀB + λI)^{1/2}``."""
    return _lora.lora_halfsplit(b, a, g_b, g_a, **options.kwargs(_lora))


def lora_joint(b: jax.Array, a: jax.Array, g_b: jax.Array, g_a: jax.Array, options: DirectionOptions) -> Factors:
    """Joint LoRA of a square adapter (``d_out = d_in``): the joint QK rule on ``(B, Aᵀ)``, one sign over
    ``[G_B C_A⁻¹ | G_Aᵀ C_B⁻¹]`` (``derivations.lora``: the block-whitened problem of ``[ΔB | ΔAᵀ]``)."""
    d_b, d_at = _joint.joint_qk(b, a.mT, g_b, g_a.mT, **options.kwargs(_joint))
    return d_b, d_at.mT


#: LoRA rules by ``lora_rule`` name
LORA_DIRECTIONS: dict[str, LoRARule] = {"half_split": lora_half_split, "joint": lora_joint}
LORA_RULES = tuple(LORA_DIRECTIONS)


def lora_direction(rule: str, w: dict, g: dict, pair: LoRAPlan, options: DirectionOptions) -> dict[str, jax.Array]:
    """``{path: Δ}`` of a LoRA pair by the rule named ``rule``, at the pair's own ``damping`` when it has one.

    Flax kernels (``pair.kernels``: ``A (d_in, r)``, ``B (r, d_out)``) are transposed to ``B (d_out, r)``,
    ``A (r, d_in)`` and back. ``joint`` needs ``d_out = d_in`` (refused naming the pair otherwise).
    """
    if rule == "joint" and pair.d_out != pair.d_in:
        raise ValueError(f"compositional_muon: lora_rule='joint' needs a square adapter, but the {pair.label} has "
                         f"d_out = {pair.d_out} and d_in = {pair.d_in}: the halves ΔB A and (B ΔA)ᵀ sit side by side "
                         f"only when d_out = d_in (derivations.lora); use lora_rule='half_split'")
    if pair.damping is not None:
        options = replace(options, damping=pair.damping)
    b, a, g_b, g_a = w[pair.b], w[pair.a], g[pair.b], g[pair.a]
    if pair.kernels:
        b, a, g_b, g_a = b.mT, a.mT, g_b.mT, g_a.mT
    d_b, d_a = LORA_DIRECTIONS[rule](b, a, g_b, g_a, options)
    if pair.kernels:
        d_b, d_a = d_b.mT, d_a.mT
    return {pair.b: d_b, pair.a: d_a}


# ---- multi-head latent attention ----------------------------------------------------------------
def _rows_per_head(x: jax.Array, heads: int) -> jax.Array:
    """``(..., H·k, c)`` → ``(..., H, k, c)`` (heads are contiguous row blocks)."""
    return x.reshape(*x.shape[:-2], heads, x.shape[-2] // heads, x.shape[-1])


def _merge_rows(x: jax.Array) -> jax.Array:
    """Inverse of :func:`_rows_per_head`: ``(..., H, k, c)`` → ``(..., H·k, c)``."""
    return x.reshape(*x.shape[:-3], x.shape[-3] * x.shape[-2], x.shape[-1])


def _shared(x: jax.Array, heads: int) -> jax.Array:
    """A matrix shared by every head, ``(..., a, b)`` → ``(..., H, a, b)``."""
    return jnp.broadcast_to(x[..., None, :, :], (*x.shape[:-2], heads, *x.shape[-2:]))


def _gram_factor(x: jax.Array) -> jax.Array:
    """``R`` with ``RᵀR = xᵀx``, ``(..., m, n)`` → ``(..., min(m, n), n)``: the triangular factor of ``x = QR``."""
    return jnp.linalg.qr(x, mode="r")


def mla_partners(wq_a: jax.Array | None, wq_b: jax.Array, wkv_a: jax.Array, wkv_b: jax.Array, wo: jax.Array,
                 block: MLAPlan) -> dict[str, jax.Array]:
    """The partners the emitted MLA functions take, from the stored weights (``W @ x`` layouts), in JAX.

    ``K_hat (..., H, d_h + d_R, d)`` (``[W_UK W_DKV; W_KR]``), ``E_Q (..., H, d_h, d)`` (``W_UQ W_DQ``), ``W_DKV
    (..., c_kv, d)``, ``E_V (..., H, d_v, d)`` (``W_UV W_DKV``), ``W_O (..., H, d, d_v)``, and the stacked
    partners of the shared down-projections in compact form: ``P_Q`` rows ``R_h Û_{Q,h}`` with ``R_hᵀR_h =
    K̂_h K̂_hᵀ`` (``(..., H·(d_h + d_R), c_q)`` when ``d ≥ d_h + d_R``), ``P_KV`` the score rows ``R_h
    blockdiag(W_UK,h, I)`` (``R_hᵀR_h = Q̂_h Q̂_hᵀ``) and the value rows ``R_h [W_UV,h 0]`` (``R_hᵀR_h =
    W_O,hᵀW_O,h``). The shared rules depend on their partner only through its Gram, so these give the update
    of the ``H·d``-row stacks of ``derivations.mla`` (whose ``partners`` forms them with Gram roots, in NumPy);
    here the ``R`` factors of QR decompositions, jittable and batched. ``wq_a=None`` (no query compression):
    ``wq_b`` is the dense ``wq``, ``Q̂_h`` its head blocks, and there is no ``P_Q``.
    """
    h, d_h = block.heads, block.d_h
    c_kv = wkv_b.shape[-1]
    u_q = _rows_per_head(wq_b, h)  # (..., H, d_h + d_R, c_q)
    kv = _rows_per_head(wkv_b, h)
    w_uk, w_uv = kv[..., :d_h, :], kv[..., d_h:, :]
    w_o = split_heads(wo, block.d_v)  # (..., H, d, d_v)
    w_dkv, w_kr = wkv_a[..., :c_kv, :], wkv_a[..., c_kv:, :]
    k_hat = jnp.concatenate([w_uk @ w_dkv[..., None, :, :], _shared(w_kr, h)], axis=-2)
    q_hat = u_q if wq_a is None else u_q @ wq_a[..., None, :, :]  # (..., H, d_h + d_R, d)
    r_q = _gram_factor(q_hat.mT)
    score_rows = jnp.concatenate([r_q[..., :d_h] @ w_uk, r_q[..., d_h:]], axis=-1)  # R_h blockdiag(W_UK,h, I)
    value = _gram_factor(w_o) @ w_uv
    value_rows = jnp.concatenate([value, jnp.zeros((*value.shape[:-1], block.d_rope), value.dtype)], axis=-1)
    out = {"K_hat": k_hat, "E_Q": q_hat[..., :d_h, :], "W_DKV": w_dkv, "E_V": w_uv @ w_dkv[..., None, :, :],
           "W_O": w_o, "P_KV": jnp.concatenate([_merge_rows(score_rows), _merge_rows(value_rows)], axis=-2)}
    if wq_a is not None:
        out["P_Q"] = _merge_rows(_gram_factor(k_hat.mT) @ u_q)
    return out


def mla_direction(w: dict, g: dict, block: MLAPlan, options: DirectionOptions) -> dict[str, jax.Array]:
    """``{path: Δ}`` of an MLA block: the six emitted rules of ``derivations.mla``, each at budget ``ε``.

    Per head ``ΔÛ_Q`` (``wq_b``, content and RoPE rows together), ``ΔW_UK`` and ``ΔW_UV`` (``wkv_b``),
    ``ΔW_O`` (``wo``); shared ``ΔW_DQ`` (``wq_a``) and ``ΔD̂`` (``wkv_a``, the RoPE key rows included). Each
    of the four score factors' terms has operator norm ``ε/4``, each of the three value–output factors'
    ``ε/3`` (the shared ``wkv_a`` gives its value terms ``ε/4``), so each head's score and value–output
    circuits change by at most ``ε`` to first order, at RoPE position 0 (``derivations.mla`` states what
    RoPE positions ``τ ≠ 0`` and the latent RMSNorms do to that bound). Without query compression
    (``wq_a=None``) the score circuit has three factors: ``ΔW_Q`` (``wq``), ``ΔW_UK`` and ``ΔD̂`` each within
    ``ε/3`` (the ``_uncompressed`` rules).
    """
    ws, gs = [w[n] for n in block.members], [g[n] for n in block.members]
    if block.kernels:  # flax kernels: the W @ x layouts transposed
        ws, gs = [x.mT for x in ws], [x.mT for x in gs]
    if not block.compressed:
        ws, gs = [None, *ws], [None, *gs]
    g_dq, g_uq, g_dkv, g_kv, g_o = gs
    p = mla_partners(*ws, block)
    h, d_h, kw = block.heads, block.d_h, options.kwargs(_mla)
    g_kv, g_uq = _rows_per_head(g_kv, h), _rows_per_head(g_uq, h)
    w_dkv = _shared(p["W_DKV"], h)
    if block.compressed:
        d_uq = _mla.mla_query_up(p["K_hat"], _shared(ws[0], h), g_uq, **kw)
        d_uk = _mla.mla_key_up(p["E_Q"], w_dkv, g_kv[..., :d_h, :], **kw)
        d_dkv = _mla.mla_kv_down(p["P_KV"], g_dkv, **kw)
    else:
        d_uq = _mla.mla_query_uncompressed(p["K_hat"], g_uq, **kw)
        d_uk = _mla.mla_key_up_uncompressed(p["E_Q"], w_dkv, g_kv[..., :d_h, :], **kw)
        d_dkv = _mla.mla_kv_down_uncompressed(p["P_KV"], g_dkv, **kw)
    d_uv = _mla.mla_value_up(p["W_O"], w_dkv, g_kv[..., d_h:, :], **kw)
    d_o = _mla.mla_output(p["E_V"], split_heads(g_o, block.d_v), **kw)
    out = [_merge_rows(d_uq), d_dkv, _merge_rows(jnp.concatenate([d_uk, d_uv], axis=-2)), merge_heads(d_o)]
    if block.compressed:
        out = [_mla.mla_query_down(p["P_Q"], g_dq, **kw), *out]
    if block.kernels:
        out = [x.mT for x in out]
    return dict(zip(block.members, out, strict=True))


def group_direction(lora_rule: str, w: dict, g: dict, group: LoRAPlan | MLAPlan,
                    options: DirectionOptions) -> dict[str, jax.Array]:
    """``{path: Δ}`` of a LoRA pair (by ``lora_rule``) or an MLA block."""
    if isinstance(group, LoRAPlan):
        return lora_direction(lora_rule, w, g, group, options)
    return mla_direction(w, g, group, options)
