"""Powers of a partner's damped Gram matrix ``WᵀW + λI`` in PyTorch (:mod:`foundation.compute.jax_damped_gram`).

The same mathematics, routine by routine: :func:`gram_eigh` gives ``r``, the singular values of
``[W; √λ I]``, and ``V``, so that ``WᵀW + λI = V diag(r²) Vᵀ`` and any power is ``V diag(r^{2p}) Vᵀ``
(:func:`psd_power`); whenever a batch holds a partner with condition number above 10 the decomposition
comes from the SVD of ``W`` itself (error about ``eps·κ(W)``, not ``eps·κ(W)²``), and the pseudo-inverse
cut is at the numerical rank of ``[W; √λ I]``. ``W`` is scaled by an exact power of two first
(:func:`scale_with_damping`), which the roots carry apart and apply last. Also ``U_W = W (WᵀW + λI)^{-1/2}``
from the SVD (:func:`polar_factor`) and the isotropic scale ``(‖W‖_F²/d_h + λ)^{1/2}``. Inlined verbatim
into the emitted modules.
"""

import torch

from foundation.compute.jax_damped_gram import GRAM_ROUTE_RATIO
from foundation.compute.torch_exact_scaling import compute_dtype, pow2_normalize, pow2_scale
from foundation.compute.torch_lapack_calls import lapack_guard, per_matrix_on_cpu


def scale_with_damping(w, damping):
    """``(W · 2**k, √λ · 2**k, k)`` in the compute dtype: ``2**-k`` is about ``max(max|w_ij|, √λ)``.

    Exact, so ``[W; √λ I]`` keeps its singular vectors and its singular values scale by exactly ``2**k``;
    ``k`` is int32 of shape ``(..., 1, 1)``. A negative ``λ`` gives a NaN root (and NaN results).
    """
    a, k_w = pow2_normalize(w)
    root = torch.sqrt(torch.as_tensor(damping, dtype=a.dtype))
    _, k_root = pow2_normalize(root, axes=())
    k = torch.where(root > 0, torch.minimum(k_w, k_root), k_w)
    return pow2_scale(a, k - k_w), pow2_scale(root, k), k


def right_singular(a):
    """``(σ, V)``: singular values (padded with zeros to ``n``) and right singular vectors of ``a`` (``m × n``).

    ``m ≥ n``: the SVD of ``R`` from ``a = QR`` (``n × n``; ``Q`` is never formed).
    """
    m, n = a.shape[-2:]
    if m >= n:
        _, sv, vt = torch.linalg.svd(torch.linalg.qr(a, mode="r")[1], full_matrices=False)
    else:
        _, sv, vt = torch.linalg.svd(a, full_matrices=True)
        sv = torch.cat([sv, sv.new_zeros((*sv.shape[:-1], n - m))], dim=-1)
    return sv, vt.mT


def gram_eigh(w, damping, side):
    """``WᵀW + λI`` (``side="right"``) or ``WWᵀ + λI`` (``"left"``) as ``(r, V, k)``, ``= V diag(r²) Vᵀ · 4**-k``.

    ``r`` are the singular values of ``[W; √λ I] · 2**k``, cut to 0 where ``r_i ≤ max(m, n)·eps·max(r)``
    (pseudo-inverse roots). Two routes, same result: while every finite matrix of the batch has
    ``e_min ≥ GRAM_ROUTE_RATIO · e_max``, the eigendecomposition of the Gram matrix; otherwise the QR and
    SVD of ``W`` itself (:func:`right_singular`), for the whole batch. A matrix with NaN/Inf gives NaN.
    """
    ct = compute_dtype(w.dtype)
    a = w.to(ct)
    if side == "left":
        a = a.mT
    a, root, k = scale_with_damping(a, damping)
    lam = root * root
    tol = max(a.shape[-2:]) * torch.finfo(ct).eps
    g = a.mT @ a
    g = 0.5 * (g + g.mT) + lam * torch.eye(g.shape[-1], dtype=ct, device=g.device)
    g, ok = lapack_guard(g)
    evals, evecs = per_matrix_on_cpu(torch.linalg.eigh, g)
    well = (evals[..., :1] >= GRAM_ROUTE_RATIO * evals[..., -1:]) | ~ok[..., 0]
    if bool(torch.all(well)):
        r, v = torch.sqrt(evals.clamp(min=0)), evecs
    else:  # ``a`` is all NaN or finite with |a_ij| < 2, so ``g`` is finite exactly when it and λ are
        sv, v = per_matrix_on_cpu(right_singular, torch.where(ok, a, torch.zeros_like(a)))
        r = torch.sqrt(sv * sv + lam[..., 0])
    r = torch.where(r > tol * r.amax(dim=-1, keepdim=True), r, torch.zeros_like(r))
    return (torch.where(ok[..., 0], r, torch.full_like(r, float("nan"))),
            torch.where(ok, v, torch.full_like(v, float("nan"))), k)


def gram_eigh_stacked(ws, damping, side):
    """:func:`gram_eigh` of several same-shape matrices in one batched call (different shapes: one call each)."""
    if len({tuple(w.shape) for w in ws}) > 1:
        return tuple(gram_eigh(w, damping, side) for w in ws)
    r, v, k = gram_eigh(torch.stack(ws), damping, side)
    return tuple((r[i], v[i], k[i]) for i in range(len(ws)))


def _powered(r, p):
    """``r^{2p}``, with 0 for the cut ``r = 0`` where ``p < 0`` (pseudo-inverse powers)."""
    if p < 0:
        kept = r > 0
        return torch.where(kept, torch.where(kept, r, torch.ones_like(r)) ** (2 * p), torch.zeros_like(r))
    return r ** (2 * p)


def psd_power(eig, p, dtype):
    """``V diag(r²)^p Vᵀ · 4**(-p k)`` from :func:`gram_eigh`: a power of the damped Gram matrix.

    Negative powers are pseudo-inverse powers (the cut ``r`` map to 0). The scale ``4**(-p k)`` is applied
    last, exactly for ``2p`` whole, so the result is right whenever it is representable.
    """
    r, v, k = eig
    out = (v * _powered(r, p)[..., None, :]) @ v.mT
    if float(2 * p).is_integer():
        out = pow2_scale(out, -int(2 * p) * k)
    else:
        half = torch.exp2(-p * k.to(out.dtype))  # 2**(-2pk) in two factors that stay in range
        out = out * half * half
    return out.to(dtype)


def psd_power_split(eig, p, blocks=False):
    """``(X, e)`` with ``X · 2**e`` the power :func:`psd_power` returns, ``2p`` whole (the roots and inverses).

    ``X`` in the compute dtype with ``max|X| ∈ [1, 2)``, ``e`` int32 ``(..., 1, 1)``. ``blocks``: ``eig`` holds
    the blocks ``(..., k, c, c)`` of one block-diagonal partner; they share one ``e``.
    """
    if not float(2 * p).is_integer():
        raise ValueError(f"psd_power_split: 2p must be whole, got p = {p}")
    r, v, k = eig
    out, k_out = pow2_normalize((v * _powered(r, p)[..., None, :]) @ v.mT)
    e = -int(2 * p) * k - k_out
    if blocks:
        nonzero = (out != 0).any(dim=-1, keepdim=True).any(dim=-2, keepdim=True)
        low = torch.iinfo(torch.int32).min // 4
        top = torch.where(nonzero, e, low).amax(dim=-3, keepdim=True)
        top = torch.where(top == low, 0, top)
        out = pow2_scale(out, torch.where(nonzero, e - top, 0))
        e = top[..., 0, :, :]
    return out, e


def polar_factor(w, damping):
    """``U_W = W (WᵀW + λI)^{-1/2}`` from the SVD of ``W`` itself: ``U diag(s / (s² + λ)^{1/2}) Vᵀ``.

    Pseudo-inverse cut as in :func:`gram_eigh`; ``W`` is scaled by a power of two first (exact); a matrix
    with NaN/Inf gives NaN.
    """
    ct = compute_dtype(w.dtype)
    a, root, _ = scale_with_damping(w.to(ct), damping)
    a, ok = lapack_guard(a)
    u, s, vt = per_matrix_on_cpu(lambda x: torch.linalg.svd(x, full_matrices=False), a)
    r = torch.sqrt(s * s + root[..., 0] * root[..., 0])
    kept = r > max(a.shape[-2:]) * torch.finfo(ct).eps * r.amax(dim=-1, keepdim=True)
    ratio = torch.where(kept, s / torch.where(kept, r, torch.ones_like(r)), torch.zeros_like(r))
    out = (u * ratio[..., None, :]) @ vt
    return torch.where(ok, out, torch.full_like(out, float("nan"))).to(w.dtype)


def isotropic_scale(w, damping):
    """``c_W = (‖W‖_F² / d_h + λ)^{1/2}`` per matrix, shape ``(..., 1, 1)``, with the scale taken out exactly."""
    c, e = isotropic_scale_split(w, damping)
    return pow2_scale(c, e).to(w.dtype)


def isotropic_scale_split(w, damping):
    """``(c, e)`` with ``c_W = c · 2**e`` (:func:`isotropic_scale`); ``c`` in the compute dtype, near 1."""
    a, root, k = scale_with_damping(w.to(compute_dtype(w.dtype)), damping)
    sq = (a * a).sum(dim=(-2, -1), keepdim=True)
    return torch.sqrt(sq / w.shape[-1] + root * root), -k
