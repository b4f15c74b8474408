"""Powers of a partner's damped Gram matrix ``WᵀW + λI`` in JAX: roots, inverse roots, polar factor.

The rules whiten a gradient by a partner's Gram roots ``C = (WᵀW + λI)^{1/2}`` and ``C⁻¹``. They come
from :func:`gram_eigh`: ``r``, the singular values of ``[W; √λ I]``, and ``V``, so that
``WᵀW + λI = V diag(r²) Vᵀ`` and any power is ``V diag(r^{2p}) Vᵀ`` (:func:`psd_power`). Ill-conditioned
partners: whenever a batch holds a partner with condition number above 10 the decomposition comes
from the SVD of ``W`` itself, not from eigenvalues of a formed ``WᵀW`` (error about ``eps·κ(W)``, not
``eps·κ(W)²``), and the pseudo-inverse cut is at the numerical rank of ``[W; √λ I]`` (``r`` at or below
``max(d, d_h)·eps·max(r)``), not at ``eps·σ_max²``. ``W`` is scaled by an exact power of two first
(:func:`scale_with_damping`), which the roots carry apart and apply last. Also here:
``U_W = W (WᵀW + λI)^{-1/2}`` from the SVD (:func:`polar_factor`) and the isotropic scale
``(‖W‖_F²/d_h + λ)^{1/2}`` (:func:`isotropic_scale`). Inlined verbatim into the emitted modules.
"""

import jax
import jax.numpy as jnp

from foundation.compute.jax_exact_scaling import compute_dtype, pow2_normalize, pow2_scale
from foundation.compute.jax_lapack_calls import lapack_guard, per_matrix_on_cpu

#: the Gram route (eigh of ``WᵀW + λI``) is taken while every matrix of a batch has
#: ``e_min ≥ GRAM_ROUTE_RATIO · e_max`` (condition number of ``W`` at most 10); otherwise the roots
#: come from the SVD of ``W`` itself, which does not square the condition number
GRAM_ROUTE_RATIO = 1e-2


def scale_with_damping(w, damping):
    """``(W · 2**k, √λ · 2**k, k)`` in the compute dtype: ``2**-k`` is about ``max(max|w_ij|, √λ)``.

    Exact (:func:`pow2_normalize`: subnormal entries included), so ``[W; √λ I]`` keeps its singular
    vectors and its singular values scale by exactly ``2**k``; ``k`` is int32 of shape ``(..., 1, 1)``.
    A negative ``λ`` gives a NaN root (and NaN results).
    """
    a, k_w = pow2_normalize(w)
    root = jnp.sqrt(jnp.asarray(damping, a.dtype))
    _, k_root = pow2_normalize(root, axes=())
    k = jnp.where(root > 0, jnp.minimum(k_w, k_root), k_w)
    return pow2_scale(a, k - k_w), pow2_scale(root, k), k


def right_singular(a):
    """``(σ, V)``: singular values (padded with zeros to ``n``) and right singular vectors of ``a`` (``m × n``).

    ``m ≥ n``: the SVD of ``R`` from ``a = QR`` (``n × n``; ``Q`` is never formed). ``σ`` is accurate to
    ``eps·σ_max`` absolute, so small singular values keep ``eps·κ`` relative accuracy.
    """
    m, n = a.shape[-2:]
    if m >= n:
        _, sv, vt = jnp.linalg.svd(jnp.linalg.qr(a, mode="r"), full_matrices=False)
    else:
        _, sv, vt = jnp.linalg.svd(a, full_matrices=True)
        sv = jnp.concatenate([sv, jnp.zeros((*sv.shape[:-1], n - m), sv.dtype)], axis=-1)
    return sv, vt.mT


def gram_eigh(w, damping, side):
    """``WᵀW + λI`` (``side="right"``) or ``WWᵀ + λI`` (``"left"``) as ``(r, V, k)``, ``= V diag(r²) Vᵀ · 4**-k``.

    ``r`` are the singular values of ``[W; √λ I] · 2**k`` (:func:`scale_with_damping`; nothing over-
    or underflows, whatever the scale of ``W``), and the numerical rank cut is applied to them, not
    to their squares: ``r_i ≤ max(m, n)·eps·max(r)`` (``W`` of shape ``m × n``, eps of the compute
    dtype) is set to 0, which :func:`psd_power` maps to 0 for negative powers (pseudo-inverse roots).
    With ``λ ≥ (max(m, n)·eps)²·‖W‖²`` the cut is never active.

    Two routes, same result: while every finite matrix of the batch has eigenvalues
    ``e_min ≥ GRAM_ROUTE_RATIO · e_max`` (condition number of ``[W; √λ I]`` at most 10), the
    eigendecomposition of the Gram matrix (error about ``eps·κ²``, at most ``100·eps``); otherwise
    the QR and SVD of ``W`` itself (:func:`right_singular`, error about ``eps·κ``: the condition
    number is not squared), for the whole batch (a ``lax.cond``: only one route runs). A matrix
    with NaN/Inf gives NaN.
    """
    ct = compute_dtype(w.dtype)
    a = w.astype(ct)
    if side == "left":
        a = a.mT
    a, root, k = scale_with_damping(a, damping)
    lam = root * root
    tol = max(a.shape[-2:]) * jnp.finfo(ct).eps
    g = a.mT @ a
    # exact symmetry matters: jax 0.10's CPU eigh never returned on a float32 Gram matrix
    # formed as Wᵀ W without it (seen in benchmarks/halfsplit.py)
    g = 0.5 * (g + g.mT) + lam * jnp.eye(g.shape[-1], dtype=ct)
    g, ok = lapack_guard(g)
    evals, evecs = per_matrix_on_cpu(jnp.linalg.eigh, g)
    well = (evals[..., :1] >= GRAM_ROUTE_RATIO * evals[..., -1:]) | ~ok[..., 0]

    def by_gram(_):
        return jnp.sqrt(jnp.maximum(evals, 0)), evecs

    def by_svd(_):  # ``a`` is all NaN or finite with |a_ij| < 2, so ``g`` is finite exactly when it and λ are
        sv, v = per_matrix_on_cpu(right_singular, jnp.where(ok, a, 0))
        return jnp.sqrt(sv * sv + lam[..., 0]), v

    r, v = jax.lax.cond(jnp.all(well), by_gram, by_svd, None)
    r = jnp.where(r > tol * jnp.max(r, axis=-1, keepdims=True), r, 0)
    nan = jnp.asarray(jnp.nan, ct)
    return jnp.where(ok[..., 0], r, nan), jnp.where(ok, v, nan), k


def gram_eigh_stacked(ws, damping, side):
    """:func:`gram_eigh` of several same-shape matrices in one batched call.

    One LAPACK call instead of several (fewer compiled ops; see :func:`per_matrix_on_cpu`); matrices of
    different shapes (a LoRA pair's ``B`` and ``Aᵀ``) get one call each.
    """
    if len({tuple(w.shape) for w in ws}) > 1:
        return tuple(gram_eigh(w, damping, side) for w in ws)
    r, v, k = gram_eigh(jnp.stack(ws), damping, side)
    return tuple((r[i], v[i], k[i]) for i in range(len(ws)))


def psd_power(eig, p, dtype):
    """``V diag(r²)^p Vᵀ · 4**(-p k)`` from :func:`gram_eigh`: a power of the damped Gram matrix.

    Negative powers are pseudo-inverse powers: the ``r`` that :func:`gram_eigh` cut to 0 (at the
    numerical rank of ``[W; √λ I]``, ``r_i ≤ max(m, n)·eps·max(r)``) map to 0. For an undamped
    rank-deficient partner this gives the minimum-norm solution of the derived problem (an update
    along the partner's null space leaves the product unchanged); a zero partner gives a zero
    update. The scale ``4**(-p k)`` is applied last, exactly for ``2p`` whole (the roots and
    inverses), so the result is right whenever it is representable.
    """
    r, v, k = eig
    if p < 0:
        kept = r > 0
        powered = jnp.where(kept, jnp.where(kept, r, 1) ** (2 * p), 0)
    else:
        powered = r ** (2 * p)
    out = (v * powered[..., None, :]) @ v.mT
    if float(2 * p).is_integer():
        out = pow2_scale(out, -int(2 * p) * k)
    else:
        half = jnp.exp2(-p * k.astype(out.dtype))  # 2**(-2pk) in two factors that stay in range
        out = out * half * half
    return out.astype(dtype)


def psd_power_split(eig, p, blocks=False):
    """``(X, e)`` with ``X · 2**e`` the power :func:`psd_power` returns, ``2p`` whole (the roots and inverses).

    ``X`` is in the compute dtype with ``max|X| ∈ [1, 2)`` (``e`` int32, ``(..., 1, 1)``): the scale is carried
    apart, so a root of a huge or tiny partner never under- or overflows before the output's last step
    (:func:`pow2_unscale`, which also flags an output below the dtype's range). ``blocks``: ``eig`` holds the
    blocks ``(..., k, c, c)`` of one block-diagonal partner; they share one ``e`` (blocks far below the
    largest lose what lies below the dtype's range, which is negligible next to it).
    """
    if not float(2 * p).is_integer():
        raise ValueError(f"psd_power_split: 2p must be whole, got p = {p}")
    r, v, k = eig
    if p < 0:
        kept = r > 0
        powered = jnp.where(kept, jnp.where(kept, r, 1) ** (2 * p), 0)
    else:
        powered = r ** (2 * p)
    out, k_out = pow2_normalize((v * powered[..., None, :]) @ v.mT)
    e = -int(2 * p) * k - k_out
    if blocks:
        nonzero = jnp.any(out != 0, axis=(-2, -1), keepdims=True)
        low = jnp.iinfo(jnp.int32).min // 4
        top = jnp.max(jnp.where(nonzero, e, low), axis=-3, keepdims=True)
        top = jnp.where(top == low, 0, top)
        out = pow2_scale(out, jnp.where(nonzero, e - top, 0))
        e = top[..., 0, :, :]
    return out, e


def polar_factor(w, damping):
    """``U_W = W (WᵀW + λI)^{-1/2}`` from the SVD of ``W`` itself: ``U diag(s / (s² + λ)^{1/2}) Vᵀ``.

    Formed from singular vectors, not as the product ``W C_W⁻¹`` (whose small directions would carry an
    error of ``eps·κ(W)``); pseudo-inverse cut as in :func:`gram_eigh` (``(s² + λ)^{1/2}`` at or below
    ``max(m, n)·eps`` of its largest gives 0). ``W`` is scaled by a power of two first (exact), so its
    size does not matter; a matrix with NaN/Inf gives NaN.
    """
    ct = compute_dtype(w.dtype)
    a, root, _ = scale_with_damping(w.astype(ct), damping)
    a, ok = lapack_guard(a)
    u, s, vt = per_matrix_on_cpu(lambda x: jnp.linalg.svd(x, full_matrices=False), a)
    r = jnp.sqrt(s * s + root[..., 0] * root[..., 0])
    kept = r > max(a.shape[-2:]) * jnp.finfo(ct).eps * jnp.max(r, axis=-1, keepdims=True)
    ratio = jnp.where(kept, s / jnp.where(kept, r, 1), 0)
    return jnp.where(ok, (u * ratio[..., None, :]) @ vt, jnp.nan).astype(w.dtype)


def isotropic_scale(w, damping):
    """``c_W = (‖W‖_F² / d_h + λ)^{1/2}`` per matrix, shape ``(..., 1, 1)``, with the scale taken out exactly.

    ``c = 2**-k (‖W 2**k‖_F² / d_h + λ 4**k)^{1/2}`` (:func:`scale_with_damping`), so the squares stay in range.
    """
    c, e = isotropic_scale_split(w, damping)
    return pow2_scale(c, e).astype(w.dtype)


def isotropic_scale_split(w, damping):
    """``(c, e)`` with ``c_W = c · 2**e`` (:func:`isotropic_scale`); ``c`` in the compute dtype, near 1."""
    a, root, k = scale_with_damping(w.astype(compute_dtype(w.dtype)), damping)
    sq = jnp.sum(a * a, axis=(-2, -1), keepdims=True)
    return jnp.sqrt(sq / w.shape[-1] + root * root), -k
