"""The matrix sign ``msign(A) = U Vᵀ`` in PyTorch: the routines of :mod:`foundation.compute.jax_msign`, one to one.

:func:`msign_svd` (singular values at or below ``max(m, n)·eps·σ_max`` count as zero) and the one
Newton–Schulz iteration of the project (:func:`newton_schulz`): each step of a schedule applies an odd
polynomial ``p(σ) = c_0 σ + c_1 σ³ + … + c_k σ^{2k+1}`` to every singular value of ``X / ‖X‖_F``. The
schedule is data (a tensor ``(steps, k+1)``, or a tuple of coefficient tuples) run as a loop over its rows.
Inlined verbatim into the emitted modules.
"""

import torch

from foundation.compute.torch_exact_scaling import compute_dtype, pow2_normalize
from foundation.compute.torch_lapack_calls import lapack_guard, per_matrix_on_cpu


def msign_svd(a):
    """``U Vᵀ`` over the singular values above ``max(m, n)·eps·σ_max`` (zero ones map to 0).

    ``A`` is scaled by an exact power of two to ``max|a_ij|`` in ``[1, 2)`` first (msign ignores positive
    scale); a matrix with NaN/Inf gives NaN.
    """
    ac = a.to(compute_dtype(a.dtype))
    ac, ok = lapack_guard(pow2_normalize(ac)[0])
    u, s, vt = per_matrix_on_cpu(lambda x: torch.linalg.svd(x, full_matrices=False), ac)
    tol = max(a.shape[-2:]) * torch.finfo(ac.dtype).eps * s[..., :1]
    keep = (s > tol).to(ac.dtype)
    out = (u * keep[..., None, :]) @ vt
    return torch.where(ok, out, torch.full_like(out, float("nan"))).to(a.dtype)


def schedule_array(schedule):
    """A schedule as a float64 tensor ``(steps, k+1)``; a tuple of coefficient tuples is padded with zeros
    (a shorter step padded with zero high-order coefficients is the same polynomial)."""
    if hasattr(schedule, "shape"):
        return torch.as_tensor(schedule, dtype=torch.float64)
    width = max(len(step) for step in schedule)
    return torch.tensor([list(step) + [0.0] * (width - len(step)) for step in schedule], dtype=torch.float64)


def newton_schulz(x, schedule):
    """msign by odd-polynomial iterations, one polynomial per row of ``schedule``.

    Step ``(c_0, c_1, …, c_k)`` maps ``X ← c_0 X + (c_1 A + c_2 A² + … + c_k A^k) X`` with ``A = X Xᵀ`` formed
    on the short side, so each singular value goes to ``p(σ)``. The iteration starts from ``X / ‖X‖_F``
    (``σ ≤ 1``; a zero matrix stays zero), ``X`` first scaled exactly to ``max|x_ij| ∈ [1, 2)``; the
    Frobenius division is folded into the first step (``‖X‖_F² = tr A``; 16-bit inputs keep an explicit
    float32 normalisation). Runs in the input dtype. Orientation as the JAX routine's: a batch on the CPU
    runs tall (``A = XᵀX``), a single matrix and other devices wide.
    """
    wide = x.ndim == 2 or x.device.type != "cpu"
    return _newton_schulz_oriented(x, schedule, wide=wide)


def _newton_schulz_oriented(x, schedule, wide):
    """:func:`newton_schulz` with the short side first (``wide``) or last."""
    coeffs = schedule_array(schedule)
    flip = x.shape[-2] > x.shape[-1] if wide else x.shape[-2] < x.shape[-1]
    if flip:
        x = x.mT
    xc = pow2_normalize(x)[0]  # max|x| in [1, 2), exact (no reciprocal that could flush to 0)
    short = x.shape[-2] if wide else x.shape[-1]
    eye = torch.eye(short, dtype=x.dtype, device=x.device)
    degree = coeffs.shape[-1]

    def gram(x):
        return x @ x.mT if wide else x.mT @ x

    def times(b, x):
        return b @ x if wide else x @ b

    def gram_polynomial(a, c):
        """``c_1 A + c_2 A² + … + c_k A^k`` by Horner's rule."""
        b = c[-1] * a
        for j in range(degree - 2, 0, -1):
            b = (b + c[j] * eye) @ a
        return b

    def step(x, c, first):
        """One step; the first on ``X/ν``, ``ν = ‖X‖_F``: ``c_0 X/ν + B(A/ν²) X/ν``, ``ν² = tr A``."""
        c = c.to(x.dtype)
        if degree == 1:
            return c[0] * x
        a = gram(x)
        s = 1
        if first:
            sq = a.diagonal(dim1=-2, dim2=-1).sum(-1)[..., None, None]  # ‖X‖_F² ∈ [1, 4mn), or 0
            s = (1 / torch.sqrt(torch.where(sq > 0, sq, torch.ones_like(sq)))).to(x.dtype)
        return (c[0] * s) * x + times(gram_polynomial(a * (s * s), c) * s, x)

    if degree == 1 or xc.dtype != x.dtype:
        norm = torch.sqrt((xc * xc).sum(dim=(-2, -1), keepdim=True))
        x = (xc / torch.where(norm > 0, norm, torch.ones_like(norm))).to(x.dtype)
        first = [False] * coeffs.shape[0]
    else:  # the Frobenius division folded into the first step
        x = xc
        first = [t == 0 for t in range(coeffs.shape[0])]
    for c, f in zip(coeffs, first, strict=True):
        x = step(x, c, f)
    return x.mT if flip else x
