"""Inverse p-th roots ``X^{-1/p}`` of symmetric positive definite matrices in JAX: matrix products only, or eigh.

:func:`inverse_root` runs the coupled iteration of :mod:`coeffsearch.inverse_roots`: with ``M_0`` the
normalized ``X`` and ``Y_0 = I``, each step forms ``T = q_k(M)`` and sets ``Y ← Y T``, ``M ← T^p M``; all
of them are polynomials in ``X``, so ``M_k = Y_k^p M_0`` and ``Y → M_0^{-1/p}`` as ``M → I``. The
factors ``q_k`` are a schedule (an array ``(steps, d+1)`` of ascending coefficients, or a tuple of
tuples) scanned by ``jax.lax.scan``, so one compilation serves every schedule of a shape. A schedule
certified on ``[l, 1]`` (``python -m coeffsearch certify``) bounds ``‖X^{1/p} Y − I‖₂`` by its root error
for every ``X`` whose normalized eigenvalues lie in ``[l, 1]``.

Normalization: ``X`` is scaled by an exact power of two ``2^{p j}`` (a multiple of ``p``, so that the
root's scale ``2^{j}`` is exact too; :func:`root_scale`), then divided by its Frobenius norm ``s``,
which bounds ``λ_max`` (``λ_max ≤ ‖X‖_F ≤ tr X`` for a positive semidefinite ``X``, so it wastes less
than the trace); the result is ``Y s^{-1/p} 2^{j}``. 16-bit inputs are computed in float32
(:func:`compute_dtype`): ``M_k`` near ``I`` would lose its eigenvalues to 16-bit rounding. The
iteration's ``M`` and the result are symmetrized (``(A + Aᵀ)/2``), which rounding would otherwise
drift from. :func:`inverse_root_eigh` is the eigendecomposition reference. A NaN or Inf input is
refused with one error outside ``jit`` and gives an all-NaN result under it.
"""

import jax
import jax.numpy as jnp

from foundation.compute.jax_exact_scaling import compute_dtype, pow2_normalize, pow2_scale
from foundation.compute.jax_input_checks import check_schedule
from foundation.compute.jax_lapack_calls import lapack_guard, per_matrix_on_cpu
from foundation.compute.jax_msign import schedule_array


def check_root_input(function, x, p):
    """A real floating square matrix (or a batch of them) of finite entries, and a whole root ``p ≥ 1``.

    Shapes, dtypes and ``p`` are checked under ``jit`` too; finiteness only outside it."""
    if not all(hasattr(x, a) for a in ("shape", "dtype", "ndim")):
        raise TypeError(f"{function}: x must be an array, got {type(x).__name__}; convert it with jnp.asarray(x)")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{function}: x must be real floating point, got dtype {x.dtype}")
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] == 0:
        raise ValueError(f"{function}: x must be a square matrix or a batch of them (..., n, n), got shape "
                         f"{tuple(x.shape)}")
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"{function}: p must be a whole number >= 1 (the root X^(-1/p)), got {p!r}")
    if not isinstance(x, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(x))):
        raise ValueError(f"{function}: x contains NaN or Inf")


def root_scale(x, p):
    """``(A, j)``: ``X = A · 2^{-p j}`` exactly, ``A`` in the compute dtype with ``max|a_ik| ∈ [2^{1−p}, 2)``,
    ``j`` int32 ``(..., 1, 1)``; then ``X^{-1/p} = A^{-1/p} · 2^{j}`` (NaN/Inf entries: ``A`` all NaN)."""
    a, k = pow2_normalize(x)
    j = jnp.floor_divide(k, p)
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
    """``X^{-1/p}`` of symmetric positive definite ``X`` (``..., n, n``) by the coupled iteration, products only.

    ``p``: a whole number (static under ``jit``); ``schedule``: the factors ``q_k``, one row
    ``(c_0, …, c_d)`` per step, ``q(x) = c_0 + c_1 x + … + c_d x^d`` (:mod:`coeffsearch.inverse_root_registry`
    holds certified ones). ``M`` is updated at every step but the last. Batched over leading axes.
    """
    check_root_input("inverse_root", x, p)
    check_schedule("inverse_root", schedule)
    ct = compute_dtype(x.dtype)
    coeffs = schedule_array(schedule).astype(ct)
    a, j = root_scale(x, p)
    s = jnp.sqrt(jnp.sum(a * a, axis=(-2, -1), keepdims=True))  # ‖A‖_F ≥ λ_max(A)
    ok = s > 0
    m = a / jnp.where(ok, s, 1)
    eye = jnp.broadcast_to(jnp.eye(x.shape[-1], dtype=ct), m.shape)

    def factor(m, c):
        """``q(M) = c_0 I + c_1 M + … + c_d M^d`` by Horner's rule (``d − 1`` products)."""
        d = coeffs.shape[-1] - 1
        if d == 0:
            return c[0] * eye
        t = c[d] * m + c[d - 1] * eye
        for k in range(d - 2, -1, -1):
            t = t @ m + c[k] * eye
        return t

    def step(carry, c):
        m, y = carry
        t = factor(m, c)
        m = matrix_power(t, p) @ m
        return ((m + m.mT) / 2, y @ t), None

    (m, y), _ = jax.lax.scan(step, (m, eye), coeffs[:-1])
    y = y @ factor(m, coeffs[-1])
    y = (y + y.mT) / 2 * jnp.where(ok, s, 1) ** (-1.0 / p)
    return jnp.where(ok, pow2_scale(y, j), jnp.nan).astype(x.dtype)


def inverse_root_eigh(x, p):
    """``X^{-1/p} = V diag(λ^{-1/p}) Vᵀ`` from the eigendecomposition (the reference); NaN where an eigenvalue
    is not positive. Batched over leading axes; computed in at least float32."""
    check_root_input("inverse_root_eigh", x, p)
    a, j = root_scale(x, p)
    a, ok = lapack_guard((a + a.mT) / 2)
    e, v = per_matrix_on_cpu(jnp.linalg.eigh, a)
    positive = e > 0
    powered = jnp.where(positive, jnp.where(positive, e, 1) ** (-1.0 / p), jnp.nan)
    out = pow2_scale((v * powered[..., None, :]) @ v.mT, j)
    return jnp.where(ok, out, jnp.nan).astype(x.dtype)


def spd_power(x, p, root="eigh", schedule=None):
    """``X^p`` of symmetric positive definite ``X`` (``..., n, n``) for a real ``p``, in ``x``'s dtype.

    ``root="eigh"``: ``V diag(λ^p) Vᵀ`` of the symmetrized ``X`` in at least float32, after an exact power-of-two
    scaling (folded back exactly for ``p = ±1/q``), eigenvalues floored at ``n·eps·λ_max`` (a singular ``X`` gives
    finite powers). ``root="newton_schulz"``: for ``p = −1/q`` the coupled
    iteration :func:`inverse_root` with ``schedule`` (matrix products only; certified ones are in
    ``coeffsearch.inverse_root_registry``); any other ``p``, or no schedule, is refused when traced.
    """
    q = round(1.0 / abs(p)) if p else 0
    reciprocal = q >= 1 and abs(abs(p) - 1.0 / q) <= 1e-12  # p = ±1/q for a whole q ≥ 1
    if root == "newton_schulz":
        if not (reciprocal and p < 0) or schedule is None:
            raise ValueError(f"spd_power: root='newton_schulz' computes X^(-1/q) for a whole q with a certified "
                             f"schedule, not X^({p}); use root='eigh'")
        return inverse_root(x, q, schedule)
    if root != "eigh":
        raise ValueError(f"spd_power: root must be 'eigh' or 'newton_schulz', got {root!r}")
    if reciprocal:  # X = A·2^{-qj}, so X^p = A^p·2^{∓j} exactly
        a, j = root_scale(x, q)
        shift, half = (-j if p > 0 else j), None
    else:  # X = A·2^{-k}: X^p = A^p·2^{-kp}, in two factors that stay in range
        a, k = pow2_normalize(x)
        shift, half = None, jnp.exp2(-0.5 * p * k.astype(a.dtype))
    a, ok = lapack_guard(0.5 * (a + a.mT))  # a NaN/Inf matrix never reaches LAPACK: its power is NaN
    e, v = per_matrix_on_cpu(jnp.linalg.eigh, a)
    e = jnp.maximum(e, jnp.maximum(e.shape[-1] * jnp.finfo(e.dtype).eps * e[..., -1:], jnp.finfo(e.dtype).tiny))
    out = (v * e[..., None, :] ** p) @ v.mT
    out = pow2_scale(out, shift) if half is None else out * half * half
    return jnp.where(ok, out, jnp.nan).astype(x.dtype)
