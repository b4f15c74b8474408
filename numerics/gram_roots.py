"""Matmul-only Gram roots: ``(WᵀW + λI)^{∓1/2}`` by a coupled Newton–Schulz iteration.

For SPD ``A`` scaled to ``X = A/s`` (``s = ‖A‖_F``, so the eigenvalues ``x`` lie in ``(0, 1]``) and an
odd polynomial step ``p(σ) = σ q(σ²)``, the coupled iteration

    Y₀ = X,  Z₀ = I;   T = q(Z Y),  Y ← Y T,  Z ← T Z

keeps every iterate a function of ``X``; per eigenvalue, ``y/z = x`` stays fixed and ``u = √(zy)``
obeys ``u ← u q(u²) = p(u)`` from ``u₀ = √x``. So a schedule that maps singular values
``σ ∈ [l, 1]`` into ``[1 − δ, 1 + δ]`` (what :mod:`coeffsearch` certifies for Newton–Schulz)
gives ``Z = u/√x → X^{-1/2}`` and ``Y = u√x → X^{1/2}`` with relative error ``δ``, whenever
``λ_min(A)/s ≥ l²``. With damping, ``λ_min(A) ≥ λ`` and ``s ≤ tr A = ‖W‖_F² + nλ``, so the bound is
known before the iteration runs (:func:`certified_lower`). Only matrix products: no ``eigh``.
This is the coupled Newton–Schulz iteration of Higham (*Functions of Matrices*, 2008, §6.3) with
the cubic ``q(y) = (3 − y)/2`` replaced by any certified schedule.
"""

from __future__ import annotations

import jax.numpy as jnp

#: the default schedule: Polar Express, 8 steps (certified on [1e-3, 1] to a 1e-20 band)
DEFAULT_SCHEDULE = "polar-express"
CERTIFIED_LOWER = 1e-3


def coupled_newton_schulz(a, schedule):
    """``(A^{-1/2}, A^{1/2})`` of SPD ``a`` (``(..., n, n)``) by the coupled iteration, in ``a``'s dtype."""
    n = a.shape[-1]
    s = jnp.sqrt(jnp.sum(jnp.square(a.astype(jnp.float32)), axis=(-2, -1), keepdims=True)).astype(a.dtype)
    eye = jnp.eye(n, dtype=a.dtype)
    y, z = a / s, jnp.broadcast_to(eye, a.shape)
    for coeffs in schedule:
        m = z @ y
        t = coeffs[-1] * m
        for c in reversed(coeffs[1:-1]):
            t = (t + c * eye) @ m
        t = t + coeffs[0] * eye
        y, z = y @ t, t @ z
    root = jnp.sqrt(s)
    return z / root, y * root


def gram_inv_sqrt(w, damping, schedule, native=False):
    """``(WᵀW + λI)^{-1/2}`` by :func:`coupled_newton_schulz`, in ``w``'s dtype.

    16-bit inputs are computed in float32 (as ``eigh`` is) unless ``native``: in bfloat16 arithmetic
    rounding pushes ``u`` past the schedule's certified overshoot limit (about ``1 + 4e-6`` for
    Polar Express) and the iteration diverges (measured by ``python -m benchmarks.gram_roots``).
    """
    wc = w if native or jnp.dtype(w.dtype).itemsize >= 4 else w.astype(jnp.float32)
    g = wc.mT @ wc
    g = 0.5 * (g + g.mT) + damping * jnp.eye(g.shape[-1], dtype=g.dtype)
    return coupled_newton_schulz(g, schedule)[0].astype(w.dtype)


def certified_lower(w, damping):
    """A lower bound on ``√(λ_min(A)/‖A‖_F)`` for ``A = WᵀW + λI``: ``√(λ / (‖W‖_F² + nλ))``.

    The iteration is certified when this is at least the schedule's certified lower end.
    """
    n = w.shape[-1]
    sq = jnp.sum(jnp.square(w.astype(jnp.float32)), axis=(-2, -1))
    return jnp.sqrt(damping / (sq + n * damping))
