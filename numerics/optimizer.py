"""Compositional Muon as an optax optimizer.

``compositional_muon(learning_rate, pairs=...)`` returns an :class:`optax.GradientTransformation`.
Attention factors are updated as pairs by the derived rules of :mod:`derivations` (through the
emitted modules shipped in :mod:`numerics.emitted`), the other matrices by Muon with the project's
one Newton–Schulz, vectors by AdamW:

* a query/key pair ``M_h = W_{Q,h} W_{K,h}ᵀ`` by ``qk_rule``: ``"half_split"``
  (``ΔW_Q = −(ε/2) msign(G_Q C_K⁻¹) C_K⁻¹``, the key side likewise; with ``kv_heads < heads`` the
  grouped-query rule, whose shared key side has budget ``ε/(2G)``), ``"joint"`` (one sign over
  ``[G_Q C_K⁻¹ | G_K C_Q⁻¹]``), ``"isotropic"`` (``ΔW_Q = −(ε/2) c_K⁻¹ msign(G_Q)``),
  ``"sylvester"`` (the minimum-norm step ``(H W_K, Hᵀ W_Q)`` towards the Muon step ``D = −msign(Ĝ_M)``
  on the product, ``(W_QW_Qᵀ + λI) H + H (W_KW_Kᵀ + λI) = D``; :func:`product_gradient` gives ``Ĝ_M``);
* an output/value pair ``M_h = W_{O,h} W_{V,h}`` by the hybrid OV rule (head-local V side, one
  global sign on the O side; shared value heads when ``kv_heads < heads``);
* every other matrix by Muon, ``ΔW = −η √max(1, fan_out/fan_in) msign(m)`` (as
  ``optax.contrib.muon``), and vectors (or what ``adamw_params`` selects) by ``optax.adamw``.

``G`` above is the momentum, not the raw gradient: ``m ← β m + (1 − β) g`` with bias correction and
Nesterov's look-ahead, exactly as ``optax.contrib.scale_by_muon`` forms it. The rules are positively
homogeneous of degree 0 in ``G`` and linear in ``ε``; the learning rate ``η`` is the budget of each
half, ``ε = 2η``: ``‖ΔW_Q W_Kᵀ‖_op = ‖W_Q ΔW_Kᵀ‖_op = η``, so at partners with orthonormal columns the
half-split step is Muon's step with the same ``η``. The Sylvester rule has no halves; it is called with
target ``D = −η msign(Ĝ_M)`` (``‖D‖_op = η``) and its first-order product change
``T(ΔW_Q, ΔW_K) = D − 2λH`` satisfies ``‖T(ΔW_Q, ΔW_K)‖_op ≤ 2η``, the bound ``η + η`` of the other rules'
two halves: ``H = ∫₀^∞ e^{−t(W_QW_Qᵀ+λI)} D e^{−t(W_KW_Kᵀ+λI)} dt`` gives ``‖2λH‖_op ≤ ‖D‖_op``. Learning-rate schedules and decoupled weight
decay work as in optax (``scale_by_learning_rate``, ``add_decayed_weights``).

Gauge (``M = W_Q W_Kᵀ`` is unchanged by ``(W_Q R, W_K R⁻ᵀ)``): ``gauge="horizontal_projection"``
projects the stored momentum of every pair onto the horizontal space each step (derived in
``derivations.gauge``: ``(m_Q + W_Q X, m_K − W_K Xᵀ)`` with ``X`` from a ``d_h × d_h`` Sylvester
equation); ``gauge="rebalance"`` moves the factors along the gauge after every step so that both
factors of each head have the same Gram matrix (:func:`numerics.gauge_balance.balance`). A shared
key (value) head ``K_g`` of a grouped-query pair carries one gauge for its whole group,
``(W_{Q,h} R⁻ᵀ for every h in g, K_g R)``: both options act on the stacked pair
``(Q̄_g = [W_{Q,h}]_{h∈g} stacked row-wise, K_g)`` exactly as on a single head.

Reference: Compositional Muon (per-head whitened steepest descent on the attention products);
Muon: Jordan et al. 2024; optax: ``optax.contrib.muon``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

import coeffsearch
from numerics.emitted import gauge as _gauge
from numerics.emitted import gqa as _gqa
from numerics.emitted import halfsplit as _halfsplit
from numerics.emitted import hybrid_ov as _hybrid_ov
from numerics.emitted import joint as _joint
from numerics.emitted import sylvester as _sylvester
from numerics.gauge_balance import balance
from numerics.kernels import jax_kernels

QK_RULES = ("half_split", "joint", "isotropic", "sylvester")
OV_RULES = ("hybrid",)
GAUGES = ("none", "horizontal_projection", "rebalance")
GRAM_ROOTS = ("eigh",)
MSIGN_METHODS = jax_kernels.MSIGN_METHODS
NONFINITE_POLICIES = ("skip", "raise")
SCHEDULE_BOUND = 100.0  # the largest |σ| a Newton–Schulz step may reach from σ ∈ [0, 1] (see check_schedule_bounded)


class QKPair(NamedTuple):
    """A query/key pair: ``query`` and ``key`` are parameter paths (``"layers/0/attn/wq"``).

    Stored layouts ``W_Q (..., d, heads·d_h)`` and ``W_K (..., d, kv_heads·d_h)`` (``q = x @ W_Q``,
    which is also a flax ``Dense`` kernel); leading axes (stacked layers) are batched.
    """

    query: str
    key: str
    heads: int
    kv_heads: int | None = None


class OVPair(NamedTuple):
    """An output/value pair of parameter paths.

    Stored layouts ``W_O (..., d, heads·d_h)`` and ``W_V (..., kv_heads·d_h, d)`` (``v = x @ W_Vᵀ``,
    ``y = o @ W_Oᵀ``). With ``kernels=True`` both are stored as ``x @ W`` kernels (flax ``Dense``):
    ``W_O (..., heads·d_h, d)`` and ``W_V (..., d, kv_heads·d_h)``.
    """

    output: str
    value: str
    heads: int
    kv_heads: int | None = None
    kernels: bool = False


Pairs = Callable[[Any], list]


class CompositionalMuonState(NamedTuple):
    """``count``: steps taken; ``mu``: momentum of every matrix the transformation updates."""

    count: jax.Array
    mu: Any


def path_name(path) -> str:
    """``"a/b/0/c"`` for a pytree key path (dict keys, sequence indices, attribute names)."""
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def named_leaves(tree) -> dict:
    """``{path name: leaf}`` of a pytree (masked leaves of ``optax.partition`` have none).

    Raises ``ValueError`` naming both leaves when two paths join to one name (``{"a/b": x}`` and
    ``{"a": {"b": y}}`` are both ``"a/b"``; so are the keys ``0`` and ``"0"``).
    """
    out, paths = {}, {}
    for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = path_name(p)
        if name in out:
            raise ValueError(f"compositional_muon: the parameters at {jax.tree_util.keystr(paths[name])} and "
                             f"{jax.tree_util.keystr(p)} have the same path name {name!r} (paths are '/'-joined "
                             f"keys); rename one of the keys")
        out[name], paths[name] = x, p
    return out


def resolve_schedule(ns_coeffs, ns_steps):
    """A Newton–Schulz schedule as a tuple of coefficient tuples.

    ``ns_coeffs``: a name in :mod:`coeffsearch`'s registry, one tuple ``(a, b, c)`` repeated
    ``ns_steps`` times, or a tuple of tuples (then ``ns_steps`` is ignored, as in optax).
    """
    if isinstance(ns_coeffs, str):
        try:
            return tuple(tuple(float(c) for c in step) for step in coeffsearch.resolve(ns_coeffs).as_floats())
        except (KeyError, ValueError) as exc:
            raise ValueError(f"compositional_muon: ns_coeffs {ns_coeffs!r} is not a schedule: {exc}") from None
    try:
        arr = [[float(c) for c in step] for step in ns_coeffs] if hasattr(ns_coeffs[0], "__len__") else None
    except (TypeError, IndexError):
        raise ValueError(f"compositional_muon: ns_coeffs must be a registry name, (a, b, c) or a tuple of "
                         f"tuples, got {ns_coeffs!r}") from None
    if arr is None:
        if len(ns_coeffs) < 2 or not isinstance(ns_steps, int) or ns_steps < 1:
            raise ValueError(f"compositional_muon: ns_coeffs must have shape (k,) or (n, k) with k >= 2 and "
                             f"ns_steps >= 1, got {ns_coeffs!r} and ns_steps={ns_steps!r}")
        arr = [[float(c) for c in ns_coeffs]] * ns_steps
    if not arr or any(len(s) < 2 or not all(math.isfinite(c) for c in s) for s in arr):
        raise ValueError(f"compositional_muon: every Newton–Schulz step needs >= 2 finite coefficients, "
                         f"got {ns_coeffs!r}")
    return tuple(tuple(s) for s in arr)


def _schedule_for(module, schedule):
    """The schedule in the form the emitted ``module`` takes (its ``NS_SCHEDULE``'s type)."""
    return schedule if isinstance(module.NS_SCHEDULE, tuple) else jnp.asarray(schedule)


def check_schedule_bounded(schedule, bound: float = SCHEDULE_BOUND, points: int = 4097):
    """Refuse a Newton–Schulz schedule whose iterates leave ``[−bound, bound]``.

    Newton–Schulz starts from ``X/‖X‖_F``, so every singular value starts in ``[0, 1]`` and step
    ``(c_0, …, c_k)`` maps it to ``c_0 σ + c_1 σ³ + … + c_k σ^{2k+1}``. The scalar iteration runs here
    in float64 on ``points`` equally spaced ``σ ∈ [0, 1]``; a schedule that approximates ``msign``
    keeps them near ``[0, 1]`` (every schedule in :mod:`coeffsearch`'s registry stays below 2), and
    one that passes ``bound`` either diverges (the next step raises it to a higher odd power, which
    overflows to NaN/Inf in the update) or makes steps ``bound`` times the budget. A sampled check:
    the optimizer still skips (or refuses) any update that comes out NaN/Inf.
    """
    sigma0 = np.linspace(0.0, 1.0, points)
    x = sigma0.copy()
    with np.errstate(all="ignore"):
        for i, step in enumerate(schedule):
            a, p = x * x, np.zeros_like(x)
            for c in reversed(step[1:]):
                p = (p + c) * a  # c_1 a + c_2 a² + … by Horner's rule
            x = step[0] * x + p * x
            bad = ~(np.abs(x) <= bound)  # NaN counts as out of bounds
            if bad.any():
                j = int(np.argmax(bad))
                raise ValueError(f"compositional_muon: ns_coeffs diverge: Newton–Schulz step {i + 1} of "
                                 f"{len(schedule)} maps the singular value {sigma0[j]:.4g} of the normalized "
                                 f"input to {x[j]:.4g}; a schedule that approximates msign keeps its iterates "
                                 f"within [-{bound:g}, {bound:g}] on [0, 1] (the registry's stay below 2)")
    return schedule


def real_scalar(name: str, value) -> float:
    """``value`` as a float: any real scalar (``int``, ``float``, ``Fraction``, NumPy or JAX 0-d).

    ``TypeError`` for bool, complex, strings, arrays with axes and traced values; ``ValueError``
    for NaN, Inf and negative values. The messages name ``name``.
    """
    where = f"compositional_muon: {name}"
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{where} must be a concrete real number, got a traced value; build the optimizer "
                        f"outside jit")
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "shape"):
        if tuple(value.shape) != ():
            raise TypeError(f"{where} must be a real scalar, got an array of shape {tuple(value.shape)}")
        if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
            raise TypeError(f"{where} must be a real number, got {value!r} of dtype {dtype}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where} must be a real number, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v >= 0.0):
        raise ValueError(f"{where} must be finite and >= 0, got {value!r}")
    return v


# ---- the pair declaration -------------------------------------------------------------------
class _Plan(NamedTuple):
    """Resolved pairs: per pair its kind, member paths, heads, kv heads and head dimension."""

    pairs: tuple  # (kind, (path_a, path_b), heads, kv_heads, head_dim, kernels)
    members: frozenset


def _check_pair_shapes(kind, a_name, b_name, a, b, heads, kv_heads, kernels):
    """Shapes of one declared pair; returns the head dimension. Raises naming the parameter."""
    where = f"compositional_muon: {kind} pair ({a_name!r}, {b_name!r})"
    for name, x in ((a_name, a), (b_name, b)):
        if getattr(x, "ndim", 0) < 2:
            raise ValueError(f"{where}: {name!r} must be a matrix (..., rows, cols), got shape "
                             f"{tuple(getattr(x, 'shape', ()))}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{where}: {name!r} must be real floating point, got dtype {x.dtype}")
    if a.dtype != b.dtype:
        raise TypeError(f"{where}: {a_name!r} is {a.dtype} but {b_name!r} is {b.dtype}; store both factors of a "
                        f"pair in one dtype")
    if not isinstance(heads, int) or heads < 1:
        raise ValueError(f"{where}: heads must be a positive int, got {heads!r}")
    if not isinstance(kv_heads, int) or kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"{where}: kv_heads = {kv_heads!r} must be a positive int dividing heads = {heads}")
    if kind == "qk":
        d_a, width_a, d_b, width_b = a.shape[-2], a.shape[-1], b.shape[-2], b.shape[-1]
    else:  # o: (d, H·d_h) and v: (H_kv·d_h, d); transposed as kernels
        (width_a, d_a), (d_b, width_b) = (a.shape[-2:], b.shape[-2:]) if kernels else (a.shape[-2:][::-1],
                                                                                          b.shape[-2:][::-1])
    if width_a % heads:
        raise ValueError(f"{where}: {a_name!r} has {width_a} head columns, not divisible into heads = {heads}")
    head_dim = width_a // heads
    if width_b != kv_heads * head_dim:
        raise ValueError(f"{where}: {b_name!r} has {width_b} head columns, expected kv_heads·d_h = "
                         f"{kv_heads}·{head_dim} = {kv_heads * head_dim}")
    if d_a != d_b:
        raise ValueError(f"{where}: model widths differ: {a_name!r} has d = {d_a}, {b_name!r} has d = {d_b}")
    if a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"{where}: leading (layer) axes differ: {a.shape[:-2]} and {b.shape[:-2]}")
    if head_dim > d_a:
        raise ValueError(f"{where}: head dimension {head_dim} exceeds the model width {d_a}")
    return head_dim


def pair_declaration(pairs) -> Pairs | None:
    """``pairs`` as a function ``params -> [QKPair | OVPair, ...]`` (or ``None``: no pairs).

    Takes that function, or the pairs themselves: a list or tuple of ``QKPair``/``OVPair``, or one.
    Anything else raises ``TypeError`` saying what ``pairs`` must be.
    """
    if pairs is None or callable(pairs):
        return pairs
    fixed = [pairs] if isinstance(pairs, (QKPair, OVPair)) else pairs
    if isinstance(fixed, (list, tuple)) and all(isinstance(p, (QKPair, OVPair)) for p in fixed):
        fixed = list(fixed)
        return lambda params: fixed
    raise TypeError(f"compositional_muon: pairs must be a function params -> [QKPair | OVPair, ...], a list of "
                    f"QKPair/OVPair, or None (no attention pairs), got {pairs!r}")


def plan_pairs(pairs: Pairs | None, params) -> _Plan:
    """Call the user's declaration on ``params`` and check every pair against the params."""
    leaves = named_leaves(params)  # also refuses two parameters with one path name
    pairs = pair_declaration(pairs)
    if pairs is None:
        return _Plan((), frozenset())
    declared = pairs(params)
    if isinstance(declared, (QKPair, OVPair)):
        declared = [declared]
    if not isinstance(declared, (list, tuple)):
        raise TypeError(f"compositional_muon: pairs(params) must return a list of QKPair/OVPair, got {declared!r}")
    out, members = [], set()
    for p in declared:
        if isinstance(p, QKPair):
            kind, names, kernels = "qk", (p.query, p.key), False
        elif isinstance(p, OVPair):
            kind, names, kernels = "ov", (p.output, p.value), p.kernels
        else:
            raise TypeError(f"compositional_muon: pairs must return QKPair/OVPair items, got {p!r}")
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"compositional_muon: the {kind} pair {p!r} names {name!r}; parameters are named "
                                f"by '/'-joined path strings like {next(iter(leaves), '')!r}")
            if name not in leaves:
                near = sorted(n for n in leaves if n.split("/")[-1] == str(name).split("/")[-1])[:3]
                hint = f"; parameters with that last name: {near}" if near else \
                    f"; parameters are named like {next(iter(leaves), '')!r}"
                raise ValueError(f"compositional_muon: the {kind} pair names {name!r}, which is not a parameter"
                                 f"{hint}")
            if name in members:
                raise ValueError(f"compositional_muon: parameter {name!r} is declared in two pairs")
            members.add(name)
        kv = p.heads if p.kv_heads is None else p.kv_heads
        head_dim = _check_pair_shapes(kind, *names, leaves[names[0]], leaves[names[1]], p.heads, kv, kernels)
        out.append((kind, names, p.heads, kv, head_dim, kernels))
    return _Plan(tuple(out), frozenset(members))


def check_damping_range(plan: _Plan, params, damping: float):
    """``λ`` must be 0 or a normal number of the dtype each pair computes its Gram roots in.

    That dtype is float32 for 16-bit and float32 weights, float64 for float64. ``damping = 1e300``
    is a float64 number but infinite in float32, where it would turn every root of the pair into
    NaN; a subnormal ``λ`` (``1e-40`` in float32) is flushed to 0 by XLA on the CPU, so the step
    would silently be the undamped one. Refused naming the pair and the usable range.
    """
    leaves = named_leaves(params)
    for kind, (a, b), *_ in plan.pairs:
        dtype = jnp.dtype(leaves[a].dtype)
        ct = jnp.dtype(jax_kernels.compute_dtype(dtype))
        info = jnp.finfo(ct)
        if damping > float(info.max) or 0.0 < damping < float(info.tiny):
            raise ValueError(f"compositional_muon: damping = {damping:g} is {'infinite' if damping > 1 else 'subnormal'}"
                             f" in {ct.name}, the dtype in which the {kind} pair ({a!r}, {b!r}) of {dtype.name} "
                             f"weights computes (WᵀW + λI)^(1/2); use 0 or a damping in [{float(info.tiny):.3g}, "
                             f"{float(info.max):.3g}] (λ is in the units of the squared weights)")


def _check_options(qk_rule, ov_rule, gauge, gram_roots, msign):
    if qk_rule not in QK_RULES:
        raise ValueError(f"compositional_muon: qk_rule must be one of {QK_RULES}, got {qk_rule!r}")
    if ov_rule not in OV_RULES:
        raise ValueError(f"compositional_muon: ov_rule must be one of {OV_RULES}, got {ov_rule!r}")
    if gauge not in GAUGES:
        raise ValueError(f"compositional_muon: gauge must be one of {GAUGES}, got {gauge!r}")
    if gram_roots not in GRAM_ROOTS:
        raise ValueError(f"compositional_muon: gram_roots must be one of {GRAM_ROOTS}, got {gram_roots!r}")
    if not isinstance(msign, str) or msign not in MSIGN_METHODS:
        raise ValueError(f"compositional_muon: msign must be one of {MSIGN_METHODS}, got {msign!r}")


# ---- the rules on one pair ------------------------------------------------------------------
def _split(w, head_dim):
    return _gqa.split_heads(w, head_dim)


def _merge(w):
    return _gqa.merge_heads(w)


def _qk_direction(rule, w_q, w_k, m_q, m_k, heads, kv_heads, head_dim, opts):
    """``(ΔW_Q, ΔW_K)`` at budget ``ε = 2`` (so that each half has operator norm 1)."""
    if kv_heads != heads:
        if rule != "half_split":
            raise ValueError(f"compositional_muon: qk_rule={rule!r} has no grouped-query form (kv_heads = "
                             f"{kv_heads} < heads = {heads}); use qk_rule='half_split'")
        return _gqa.gqa_layout(_gqa.gqa_query, _gqa.gqa_key, w_q, w_k, m_q, m_k, head_dim, opts(_gqa))
    q, k, gq, gk = (_split(x, head_dim) for x in (w_q, w_k, m_q, m_k))
    if rule == "sylvester":
        kw = opts(_sylvester)
        kw["eps"] = kw["eps"] / 2  # target D = −msign(Ĝ_M): ‖D‖_op = 1, achieved change ≤ 2‖D‖_op
        g_m = product_gradient(q, k, gq, gk, kw["damping"])
        dq, dk = _sylvester.sylvester_qk(q, k, g_m, solver="structured", **kw)
        return _merge(dq), _merge(dk)
    if rule == "half_split":
        dq, dk = _halfsplit.halfsplit_qk(q, k, gq, gk, **opts(_halfsplit))
    elif rule == "isotropic":
        dq, dk = _halfsplit.isotropic_qk(q, k, gq, gk, **opts(_halfsplit))
    else:
        dq, dk = _joint.joint_qk(q, k, gq, gk, **opts(_joint))
    return _merge(dq), _merge(dk)


def product_gradient(w_q, w_k, g_q, g_k, damping):
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


def _ov_direction(w_o, w_v, m_o, m_v, head_dim, kernels, opts):
    if kernels:  # flax kernels (H·d_h, d) and (d, H_kv·d_h): the stored layouts transposed
        d_o, d_v = _hybrid_ov.hybrid_ov(w_o.mT, w_v.mT, m_o.mT, m_v.mT, head_dim=head_dim, **opts(_hybrid_ov))
        return d_o.mT, d_v.mT
    return _hybrid_ov.hybrid_ov(w_o, w_v, m_o, m_v, head_dim=head_dim, **opts(_hybrid_ov))


def _as_qk(kind, a, b, kernels):
    """The pair as ``(W_Q-like, W_K-like)`` factors of ``M = A Bᵀ``, both ``(..., d, ·)``.

    An involution: applied to the result it gives back the stored layouts.
    """
    if kind == "qk":
        return a, b
    return (a.mT, b) if kernels else (a, b.mT)


def group_stack(x, kv_heads):
    """Per-head factors ``(..., H, d, d_h)`` → the groups' stacked factors ``(..., H_kv, G·d, d_h)``.

    Query head ``h`` belongs to group ``h // G`` (consecutive grouping, as in ``gqa_layout``); the
    group's heads are stacked row-wise, ``Q̄_g = [W_{Q,gG}; …; W_{Q,gG+G−1}]``.
    """
    *lead, heads, d, d_h = x.shape
    return x.reshape(*lead, kv_heads, (heads // kv_heads) * d, d_h)


def group_unstack(x, heads):
    """Inverse of :func:`group_stack`: ``(..., H_kv, G·d, d_h)`` → ``(..., H, d, d_h)``."""
    *lead, kv_heads, rows, d_h = x.shape
    return x.reshape(*lead, heads, rows * kv_heads // heads, d_h)


def _grouped_pair(kind, w_a, w_b, heads, kv_heads, head_dim, kernels):
    """``(Q̄, K)``: the pair's gauge-sharing factors, ``(..., H_kv, G·d, d_h)`` and ``(..., H_kv, d, d_h)``.

    A shared head ``K_g`` is gauged with its whole group: ``(W_{Q,h} R⁻ᵀ for h in g, K_g R)`` keeps
    every ``W_{Q,h} K_gᵀ``, which is the single-head gauge of the stacked pair ``(Q̄_g, K_g)``
    (``Q̄_g K_gᵀ`` stacks the group's products). With ``kv_heads = heads`` it is head by head.
    """
    wa, wb = _as_qk(kind, w_a, w_b, kernels)
    return group_stack(_split(wa, head_dim), kv_heads), _split(wb, head_dim)


def _ungrouped_pair(kind, bar_a, b, heads, kernels):
    """The stored layouts of a pair given as stacked groups (inverse of :func:`_grouped_pair`)."""
    return _as_qk(kind, _merge(group_unstack(bar_a, heads)), _merge(b), kernels)


def _project_pair(kind, w_a, w_b, m_a, m_b, heads, kv_heads, head_dim, kernels, damping):
    """The momentum of one pair projected onto the horizontal space of its gauge, group by group.

    For shared heads the projection is the emitted single-head projection of the stacked pair
    ``(Q̄_g, K_g)`` with momentum ``(m̄_Q,g, m_K,g)`` (:func:`_grouped_pair`). The emitted function takes
    equal row counts, so ``K_g`` and ``m_K,g`` enter zero-padded to ``G·d`` rows: the projection sees
    them only through ``K_gᵀK_g`` and ``m_K,gᵀK_g``, which padding leaves unchanged, and the padded
    rows of the result are ``0 − 0·Xᵀ = 0``.
    """
    bar_w, wk = _grouped_pair(kind, w_a, w_b, heads, kv_heads, head_dim, kernels)
    bar_m, mk = _grouped_pair(kind, m_a, m_b, heads, kv_heads, head_dim, kernels)
    d = wk.shape[-2]
    pad = [(0, 0)] * (wk.ndim - 2) + [(0, bar_w.shape[-2] - d), (0, 0)]
    hq, hk = _gauge.horizontal_projection(bar_w, jnp.pad(wk, pad), bar_m, jnp.pad(mk, pad), damping=damping,
                                          check_finite=False)
    return _ungrouped_pair(kind, hq, hk[..., :d, :], heads, kernels)


def scale_by_compositional_muon(
    pairs: Pairs | None = None,
    ns_coeffs="polar-express-5",
    ns_steps: int = 5,
    beta: float = 0.95,
    mu_dtype=None,
    *,
    nesterov: bool = True,
    qk_rule: Literal["half_split", "joint", "isotropic", "sylvester"] = "half_split",
    ov_rule: Literal["hybrid"] = "hybrid",
    damping: float = 1e-2,
    gauge: Literal["none", "horizontal_projection", "rebalance"] = "none",
    msign: Literal["newton_schulz", "svd"] = "newton_schulz",
    gram_roots: Literal["eigh"] = "eigh",
) -> optax.GradientTransformation:
    """The direction of Compositional Muon (before weight decay and the learning rate).

    Pairs get the derived rule at budget ``ε = 2`` with the sign flipped, i.e. a direction whose
    halves have operator norm 1; other matrices get ``√max(1, fan_out/fan_in) msign(m)``.
    ``optax.scale_by_learning_rate(η)`` then makes the step ``−η ·`` direction. Expects
    ``update(updates, state, params)`` with ``params``. The direction of each matrix is computed
    and returned in its parameter's dtype (gradients and momentum of another dtype, e.g. float64
    gradients of float32 weights, are cast to it first); the momentum keeps optax's dtype rules.
    Nothing here skips a NaN/Inf direction: :func:`compositional_muon` does (``on_nonfinite``).
    """
    schedule = check_schedule_bounded(resolve_schedule(ns_coeffs, ns_steps))
    _check_options(qk_rule, ov_rule, gauge, gram_roots, msign)
    pairs = pair_declaration(pairs)
    damping = real_scalar("damping", damping)
    if qk_rule == "sylvester" and not damping > 0:
        raise ValueError("compositional_muon: qk_rule='sylvester' needs damping > 0 (the regularization "
                         f"weight 2λ of its least-squares problem), got {damping!r}")

    def opts(module):
        return {"eps": 2.0, "damping": damping, "msign": msign,
                "schedule": _schedule_for(module, schedule), "check_finite": False}

    def init_fn(params):
        check_damping_range(plan_pairs(pairs, params), params, damping)  # errors at init, naming the parameter
        mu = jax.tree.map(lambda x: jnp.zeros_like(x, dtype=mu_dtype or x.dtype), params)
        return CompositionalMuonState(count=jnp.zeros([], jnp.int32), mu=mu)

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("compositional_muon: update needs the params: call update(grads, state, params)")
        plan = plan_pairs(pairs, params)
        check_damping_range(plan, params, damping)
        mu = optax.tree.update_moment(updates, state.mu, beta, 1)
        count = optax.safe_increment(state.count)
        p = named_leaves(params)
        if gauge == "horizontal_projection":
            m = named_leaves(mu)
            for kind, (a, b), heads, kv, hd, kernels in plan.pairs:
                ha, hb = _project_pair(kind, p[a], p[b], m[a].astype(p[a].dtype), m[b].astype(p[b].dtype), heads,
                                       kv, hd, kernels, damping)
                m[a], m[b] = ha.astype(m[a].dtype), hb.astype(m[b].dtype)
            mu = jax.tree_util.tree_unflatten(jax.tree.structure(mu), [m[k] for k in named_leaves(mu)])
        if nesterov:
            mu_hat = jax.tree.map(lambda m, g: beta * m + (1 - beta) * g,
                                  optax.tree.bias_correction(mu, beta, optax.safe_increment(count)),
                                  optax.tree.bias_correction(updates, beta, count))
        else:
            mu_hat = optax.tree.bias_correction(mu, beta, count)
        g = {k: x.astype(p[k].dtype) for k, x in named_leaves(mu_hat).items()}  # the rules take one dtype
        out = {}
        for kind, (a, b), heads, kv, hd, kernels in plan.pairs:
            if kind == "qk":
                da, db = _qk_direction(qk_rule, p[a], p[b], g[a], g[b], heads, kv, hd, opts)
            else:
                da, db = _ov_direction(p[a], p[b], g[a], g[b], hd, kernels, opts)
            out[a], out[b] = -da, -db
        for name, x in g.items():
            if name not in out:
                if x.ndim < 2:
                    raise ValueError(f"scale_by_compositional_muon: {name!r} has shape {tuple(x.shape)}, not a "
                                     f"matrix; compositional_muon gives vectors to AdamW, this transformation "
                                     f"takes matrices only")
                fan_in, fan_out = x.shape[-2], x.shape[-1]
                sign = _halfsplit.spectral_sign(x, msign, _schedule_for(_halfsplit, schedule))
                out[name] = math.sqrt(max(1.0, fan_out / fan_in)) * sign
        treedef = jax.tree.structure(mu_hat)
        new = jax.tree_util.tree_unflatten(treedef, [out[k].astype(p[k].dtype) for k in g])
        mu = optax.tree.cast(mu, mu_dtype)
        return new, CompositionalMuonState(count=count, mu=mu)

    return optax.GradientTransformation(init_fn, update_fn)


def rebalance_pairs(pairs: Pairs | None) -> optax.GradientTransformation:
    """Final step of ``gauge="rebalance"``: ``u ← balance(W + u) − W`` on every pair.

    Head by head; a shared key (value) head is balanced against its group's stacked query (output)
    heads ``Q̄_g`` (:func:`_grouped_pair`): ``Q̄_gᵀQ̄_g = Σ_{h∈g} W_{Q,h}ᵀW_{Q,h}`` equals ``K_gᵀK_g`` after
    the step, and every product ``W_{Q,h} K_gᵀ`` is unchanged.
    """

    pairs = pair_declaration(pairs)

    def update_fn(updates, state, params=None):
        plan = plan_pairs(pairs, params)
        p, u = named_leaves(params), named_leaves(updates)
        for kind, (a, b), heads, kv, hd, kernels in plan.pairs:
            bar_q, k = _grouped_pair(kind, p[a] + u[a], p[b] + u[b], heads, kv, hd, kernels)
            bar_q, k = balance(bar_q, k)  # shared heads: balanced with their stacked group
            na, nb = _ungrouped_pair(kind, bar_q, k, heads, kernels)
            u[a], u[b] = na - p[a], nb - p[b]
        return jax.tree_util.tree_unflatten(jax.tree.structure(updates), list(u.values())), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def check_finite_gradients() -> optax.GradientTransformation:
    """Raise ``ValueError`` naming the first parameter whose gradient has a NaN or Inf.

    Eagerly the error is a ``ValueError``; under ``jit`` it is raised from a host callback that runs
    only when a gradient is non-finite (one fused reduction per leaf on the hot path), and JAX
    reports it as a runtime error carrying the same message. Either way no NaN reaches the params.
    """

    def fail(flags, names):
        bad = [n for n, ok in zip(names, flags) if not ok]
        raise ValueError(f"compositional_muon.update: the gradient of {bad[0]!r} contains NaN or Inf"
                         + (f" (also {len(bad) - 1} more)" if len(bad) > 1 else ""))

    def update_fn(updates, state, params=None):
        del params
        named = named_leaves(updates)
        _fail_unless_all(_finite_flags(named), tuple(named), fail)
        return updates, state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def _finite_flags(named: dict):
    """One boolean per leaf of ``{name: array}``: every entry finite (one fused reduction per leaf)."""
    return jnp.stack([jnp.all(jnp.isfinite(x)) for x in named.values()]) if named else jnp.ones(0, bool)


def _fail_unless_all(flags, names, fail):
    """Call ``fail(per-leaf bools, names)`` (which raises) unless every flag holds.

    Eagerly at once; under ``jit`` from a host callback inside a ``lax.cond``, so it runs only on
    failure and JAX reports its ``ValueError`` as a runtime error carrying the same message.
    """
    if not isinstance(flags, jax.core.Tracer):
        if not bool(jnp.all(flags)):
            fail([bool(f) for f in flags], names)
        return
    jax.lax.cond(jnp.all(flags), lambda f: None,
                 lambda f: jax.debug.callback(lambda v: fail(list(v), names), f), flags)


class SkipNonFiniteState(NamedTuple):
    """Skipped steps, with the fields of ``optax.ApplyIfFiniteState``.

    ``notfinite_count``: consecutive steps skipped up to now (0 after an applied step);
    ``last_finite``: whether the last step's update was finite, i.e. applied; ``total_notfinite``:
    steps skipped in all.
    """

    notfinite_count: jax.Array
    last_finite: jax.Array
    total_notfinite: jax.Array


def skip_nonfinite_updates(*transforms: optax.GradientTransformation, on_nonfinite: str = "skip",
                           hint: str = "") -> optax.GradientTransformation:
    """``optax.chain(*transforms)`` whose NaN/Inf updates never reach the parameters.

    The chain's final update is checked leaf by leaf (one fused reduction per leaf, under ``jit``
    too). A step with a NaN or Inf anywhere is skipped as a whole, as ``optax.apply_if_finite``
    skips one: every update is zero and every state of the chain stays as it was (momentum,
    counts, schedules), and the step is counted in a :class:`SkipNonFiniteState`, the state's last
    element (so ``state[i]`` is still the state of ``transforms[i]``). Unlike ``apply_if_finite``
    there is no count after which a non-finite update goes through. With ``on_nonfinite="raise"``
    the step is skipped and a ``ValueError`` names the first parameter whose update is NaN/Inf
    (eagerly; under ``jit`` from a host callback that runs only on failure, as
    :func:`check_finite_gradients`); ``hint`` ends that message.
    """
    if on_nonfinite not in NONFINITE_POLICIES:
        raise ValueError(f"compositional_muon: on_nonfinite must be one of {NONFINITE_POLICIES}, got {on_nonfinite!r}")

    def init_fn(params):
        zero = jnp.zeros([], jnp.int32)
        return (*(t.init(params) for t in transforms),
                SkipNonFiniteState(notfinite_count=zero, last_finite=jnp.array(True), total_notfinite=zero))

    def update_fn(updates, state, params=None):
        *inner, guard = state
        new_inner = []
        for t, s in zip(transforms, inner):
            updates, s = t.update(updates, s, params)
            new_inner.append(s)
        named = named_leaves(updates)
        flags = _finite_flags(named)
        if on_nonfinite == "raise":
            dtypes = {n: jnp.dtype(x.dtype).name for n, x in named.items()}

            def fail(ok, names):
                bad = [n for n, f in zip(names, ok) if not f]
                raise ValueError(f"compositional_muon.update: the update of {bad[0]!r} ({dtypes[bad[0]]}) contains "
                                 f"NaN or Inf" + (f" (also {len(bad) - 1} more)" if len(bad) > 1 else "")
                                 + f"; the step was not applied{hint}")

            _fail_unless_all(flags, tuple(named), fail)
        ok = jnp.all(flags)
        if isinstance(ok, jax.core.Tracer) or not bool(ok):
            updates = jax.tree.map(lambda u: jnp.where(ok, u, jnp.zeros_like(u)), updates)
            new_inner = jax.tree.map(lambda new, old: jnp.where(ok, new, old), tuple(new_inner), tuple(inner))
        guard = SkipNonFiniteState(
            notfinite_count=jnp.where(ok, jnp.zeros([], jnp.int32), optax.safe_increment(guard.notfinite_count)),
            last_finite=ok,
            total_notfinite=jnp.where(ok, guard.total_notfinite, optax.safe_increment(guard.total_notfinite)))
        return updates, (*new_inner, guard)

    return optax.GradientTransformation(init_fn, update_fn)


def compositional_muon(
    learning_rate: optax.ScalarOrSchedule,
    ns_coeffs="polar-express-5",
    ns_steps: int = 5,
    beta: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_decay_mask=None,
    mu_dtype=None,
    *,
    pairs: Pairs | None = None,
    nesterov: bool = True,
    qk_rule: Literal["half_split", "joint", "isotropic", "sylvester"] = "half_split",
    ov_rule: Literal["hybrid"] = "hybrid",
    damping: float = 1e-2,
    gauge: Literal["none", "horizontal_projection", "rebalance"] = "none",
    msign: Literal["newton_schulz", "svd"] = "newton_schulz",
    gram_roots: Literal["eigh"] = "eigh",
    adam_b1: float = 0.9,
    adam_b2: float = 0.999,
    adam_eps_root: float = 0.0,
    adam_weight_decay: float = 0.0,
    adam_learning_rate: optax.ScalarOrSchedule | None = None,
    adamw_params: Callable[[str, Any], bool] | None = None,
    check_finite: bool = True,
    on_nonfinite: Literal["skip", "raise"] = "skip",
) -> optax.GradientTransformation:
    r"""Compositional Muon: derived per-head rules on attention pairs, Muon and AdamW elsewhere.

    Arguments shared with ``optax.contrib.muon`` mean the same: ``learning_rate`` (float or
    schedule), ``ns_coeffs`` (here also a :mod:`coeffsearch` registry name, default
    ``"polar-express-5"``) and ``ns_steps``, ``beta`` and ``nesterov`` (momentum), ``eps`` (AdamW),
    ``weight_decay`` and ``weight_decay_mask`` (decoupled, on the matrices), ``mu_dtype``, and the
    ``adam_*`` arguments of the AdamW part (``adam_learning_rate`` defaults to ``learning_rate``).

    Args:
      pairs: ``params -> [QKPair | OVPair, ...]`` (or that list itself): which parameters form
        attention pairs, with their heads and kv heads; paths are ``"/"``-joined pytree keys
        (``"params/Block_0/q/kernel"`` for flax; two leaves whose paths join to one name are refused).
        Checked at ``init`` and ``update``; bad names, shapes or dtypes raise an error naming the
        parameter.
      qk_rule: ``"half_split"`` (GQA when ``kv_heads < heads``), ``"joint"``, ``"isotropic"``,
        ``"sylvester"`` (per head, ``O(d³)`` per head for the sign of the ``d × d`` product gradient;
        no grouped-query form).
      ov_rule: ``"hybrid"`` (head-local V, global O; shared value heads with GQA).
      damping: ``λ`` in every Gram root ``(WᵀW + λI)^{1/2}`` (default ``1e-2``): any real scalar
        (Python, NumPy or JAX) that is finite and ``>= 0``, and 0 or a normal number of the dtype
        the roots are computed in (float32 for 16-bit weights; refused at ``init`` otherwise). For
        ``qk_rule="sylvester"`` it is also the derivation's ``λ``: the step minimizes
        ``‖T(ΔW_Q, ΔW_K) − D‖_F² + 2λ‖(ΔW_Q, ΔW_K)‖_F²``, so ``(W_QW_Qᵀ + λI) H + H (W_KW_Kᵀ + λI) = D``;
        it must be ``> 0`` there (the achieved change is ``D − 2λH``).
      gauge: ``"none"``, ``"horizontal_projection"`` (project the momentum of every pair onto the
        horizontal space), ``"rebalance"`` (equal Grams of both factors after every step, the gauge
        derived in :mod:`derivations.balance`). A shared kv head is projected and balanced with its
        group's query (output) heads stacked row-wise.
      msign: ``"newton_schulz"`` or ``"svd"``. A Newton–Schulz ``ns_coeffs`` whose scalar iteration
        leaves ``[−100, 100]`` on ``[0, 1]`` (it diverges) is refused here.
      gram_roots: ``"eigh"`` (the emitted code's Gram roots).
      adamw_params: ``(path, array) -> bool`` selecting matrices for AdamW (embeddings, heads);
        default: AdamW exactly for the parameters with fewer than 2 axes.
      check_finite: raise (naming the parameter) when a gradient has a NaN or Inf.
      on_nonfinite: what happens to a step whose update has a NaN or Inf although the gradients
        are finite (an overflow: float16 weights near 0 with ``damping=0``, a schedule that
        diverges). Default ``"skip"``: the step is not applied (every update is zero, momentum and
        counts stay as they were, as ``optax.apply_if_finite`` does) and it is counted in the
        state's last element, a :class:`SkipNonFiniteState` (``notfinite_count``, ``last_finite``,
        ``total_notfinite``); under ``jit`` too. ``"raise"``: skipped as well, and a ``ValueError``
        names the first parameter whose update is NaN/Inf (under ``jit`` from a host callback that
        runs only on failure). Either way no NaN/Inf reaches the parameters.

    The update of a pair is ``−η·`` the derived rule at ``ε = 2``: each half of the product change
    has operator norm ``η``, e.g. for half-split

    .. math:: \Delta W_Q = -\eta\,\mathrm{msign}(\hat m_Q C_K^{-1}) C_K^{-1},\quad
              C_K = (W_K^\top W_K + \lambda I)^{1/2},

    with ``\hat m`` the (Nesterov) momentum, computed in the parameter's dtype (float64 gradients of
    float32 weights are cast to float32). Matrices of more than two axes are batched over the
    leading axes (stacked layers). The state is a tuple: the gradient check's, the partition's (the
    ``"cm"`` and ``"adam"`` parts) and the :class:`SkipNonFiniteState`.
    """
    _check_options(qk_rule, ov_rule, gauge, gram_roots, msign)
    pairs = pair_declaration(pairs)
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate

    def labels(params):
        plan = plan_pairs(pairs, params)

        def label(path, x):
            name = path_name(path)
            if name in plan.members:
                return "cm"
            if getattr(x, "ndim", 0) < 2 or (adamw_params is not None and adamw_params(name, x)):
                return "adam"
            return "cm"

        return jax.tree_util.tree_map_with_path(label, params)

    core = [scale_by_compositional_muon(pairs, ns_coeffs, ns_steps, beta, mu_dtype, nesterov=nesterov,
                                        qk_rule=qk_rule, ov_rule=ov_rule, damping=damping, gauge=gauge,
                                        msign=msign, gram_roots=gram_roots),
            optax.add_decayed_weights(weight_decay, weight_decay_mask),
            optax.scale_by_learning_rate(learning_rate)]
    if gauge == "rebalance":
        core.append(rebalance_pairs(pairs))
    parts = optax.partition(
        {"cm": optax.chain(*core),
         "adam": optax.adamw(adam_learning_rate, b1=adam_b1, b2=adam_b2, eps=eps, eps_root=adam_eps_root,
                             weight_decay=adam_weight_decay, mu_dtype=mu_dtype, nesterov=nesterov)},
        labels)
    hint = ("; the gradients are finite, so the update overflowed in its dtype: use a wider dtype, damping > 0 "
            "or another ns_coeffs" if check_finite else
            "; a gradient was NaN/Inf (check_finite=False) or the update overflowed in its dtype")
    return skip_nonfinite_updates(check_finite_gradients() if check_finite else optax.identity(), parts,
                                  on_nonfinite=on_nonfinite, hint=hint)
