"""Inverse p-th roots ``X^{-1/p}`` of symmetric positive definite matrices in PyTorch: the routines of
:mod:`foundation.compute.jax_inverse_root`, one to one.

:func:`inverse_root` runs the coupled iteration (``T = q_k(M)``, ``Y ← Y T``, ``M ← T^p M``) from the
normalized ``X`` (an exact power of two ``2^{p j}``, then its Frobenius norm ``s``; the result is
``Y s^{-1/p} 2^{j}``), matrix products only, in at least float32; :func:`inverse_root_eigh` is the
eigendecomposition reference. A NaN or Inf input is refused with one error.
"""

import torch

from foundation.compute.torch_exact_scaling import compute_dtype, pow2_normalize, pow2_scale
from foundation.compute.torch_input_checks import check_schedule
from foundation.compute.torch_lapack_calls import lapack_guard, per_matrix_on_cpu
from foundation.compute.torch_msign import schedule_array


def check_root_input(function, x, p):
    """A real floating square matrix (or a batch of them) of finite entries, and a whole root ``p ≥ 1``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{function}: x must be a torch.Tensor, got {type(x).__name__}; convert it with "
                        f"torch.as_tensor(x)")
    if not x.dtype.is_floating_point:
        raise TypeError(f"{function}: x must be real floating point, got dtype {x.dtype}")
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] == 0:
        raise ValueError(f"{function}: x must be a square matrix or a batch of them (..., n, n), got shape "
                         f"{tuple(x.shape)}")
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"{function}: p must be a whole number >= 1 (the root X^(-1/p)), got {p!r}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{function}: x contains NaN or Inf")


def root_scale(x, p):
    """``(A, j)``: ``X = A · 2^{-p j}`` exactly, ``A`` in the compute dtype with ``max|a_ik| ∈ [2^{1−p}, 2)``."""
    a, k = pow2_normalize(x)
    j = torch.div(k, p, rounding_mode="floor")
    return pow2_scale(a, p * j - k), j


def matrix_power(t, p):
    """``T^p`` by repeated squaring (``p = 2``: one product, ``p = 4``: two)."""
    out, base = None, t
    while p:
        if p & 1:
            out = base if out is None else out @ base
        p >>= 1
        if p:
            base = base @ base
    return out


def inverse_root(x, p, schedule):
    """``X^{-1/p}`` of symmetric positive definite ``X`` (``..., n, n``) by the coupled iteration, products only;
    ``schedule``: one row ``(c_0, …, c_d)`` of ascending coefficients of ``q_k`` per step."""
    check_root_input("inverse_root", x, p)
    check_schedule("inverse_root", schedule)
    ct = compute_dtype(x.dtype)
    coeffs = schedule_array(schedule).to(device=x.device, dtype=ct)
    a, j = root_scale(x, p)
    s = torch.sqrt((a * a).sum(dim=(-2, -1), keepdim=True))  # ‖A‖_F ≥ λ_max(A)
    ok = s > 0
    s = torch.where(ok, s, torch.ones_like(s))
    m = a / s
    eye = torch.eye(x.shape[-1], dtype=ct, device=x.device).expand(m.shape)
    d = coeffs.shape[-1] - 1

    def factor(m, c):
        """``q(M) = c_0 I + c_1 M + … + c_d M^d`` by Horner's rule (``d − 1`` products)."""
        if d == 0:
            return c[0] * eye
        t = c[d] * m + c[d - 1] * eye
        for k in range(d - 2, -1, -1):
            t = t @ m + c[k] * eye
        return t

    y = eye
    for c in coeffs[:-1]:
        t = factor(m, c)
        m = matrix_power(t, p) @ m
        m, y = (m + m.mT) / 2, y @ t
    y = y @ factor(m, coeffs[-1])
    y = (y + y.mT) / 2 * s ** (-1.0 / p)
    out = pow2_scale(y, j)
    return torch.where(ok, out, torch.full_like(out, float("nan"))).to(x.dtype)


def inverse_root_eigh(x, p):
    """``X^{-1/p} = V diag(λ^{-1/p}) Vᵀ`` from the eigendecomposition (the reference); NaN where an eigenvalue
    is not positive. Batched over leading axes; computed in at least float32."""
    check_root_input("inverse_root_eigh", x, p)
    a, j = root_scale(x, p)
    a, ok = lapack_guard((a + a.mT) / 2)
    e, v = per_matrix_on_cpu(torch.linalg.eigh, a)
    positive = e > 0
    powered = torch.where(positive, torch.where(positive, e, torch.ones_like(e)) ** (-1.0 / p),
                          torch.full_like(e, float("nan")))
    out = pow2_scale((v * powered[..., None, :]) @ v.mT, j)
    return torch.where(ok, out, torch.full_like(out, float("nan"))).to(x.dtype)


def spd_power(x, p, root="eigh", schedule=None):
    """``X^p`` of symmetric positive definite ``X`` (``..., n, n``) for a real ``p``, in ``x``'s dtype: ``root="eigh"``
    by the eigendecomposition (eigenvalues floored at ``n·eps·λ_max``), ``"newton_schulz"`` for ``p = −1/q`` by
    :func:`inverse_root` with ``schedule``; a NaN or Inf ``X`` gives NaN."""
    q = round(1.0 / abs(p)) if p else 0
    reciprocal = q >= 1 and abs(abs(p) - 1.0 / q) <= 1e-12  # p = ±1/q for a whole q ≥ 1
    if root == "newton_schulz":
        if not (reciprocal and p < 0) or schedule is None:
            raise ValueError(f"spd_power: root='newton_schulz' computes X^(-1/q) for a whole q with a certified "
                             f"schedule, not X^({p}); use root='eigh'")
        if not bool(torch.isfinite(x).all()):
            return torch.full_like(x, float("nan"))
        return inverse_root(x, q, schedule)
    if root != "eigh":
        raise ValueError(f"spd_power: root must be 'eigh' or 'newton_schulz', got {root!r}")
    if reciprocal:  # X = A·2^{-qj}, so X^p = A^p·2^{∓j} exactly
        a, j = root_scale(x, q)
        shift, half = (-j if p > 0 else j), None
    else:  # X = A·2^{-k}: X^p = A^p·2^{-kp}, in two factors that stay in range
        a, k = pow2_normalize(x)
        shift, half = None, torch.exp2(-0.5 * p * k.to(a.dtype))
    a, ok = lapack_guard(0.5 * (a + a.mT))  # a NaN/Inf matrix never reaches LAPACK: its power is NaN
    e, v = per_matrix_on_cpu(torch.linalg.eigh, a)
    e = torch.maximum(e, (e.shape[-1] * torch.finfo(e.dtype).eps * e[..., -1:]).clamp_min(torch.finfo(e.dtype).tiny))
    out = (v * e[..., None, :] ** p) @ v.mT
    out = pow2_scale(out, shift) if half is None else out * half * half
    return torch.where(ok, out, torch.full_like(out, float("nan"))).to(x.dtype)
