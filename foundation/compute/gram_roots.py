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

Accuracy and where it differs from the emitted roots: this path works on the formed Gram matrix
``A = WᵀW + λI``, so its condition number is ``κ(W)²`` (damped: ``(σ_max² + λ)/(σ_min² + λ)``) and
its relative error is about ``eps·κ(A)``, not the ``eps·κ(W)`` of the emitted routines
(:func:`foundation.compute.jax_damped_gram.gram_eigh` takes the roots from the SVD of ``W`` when ``W`` is
ill-conditioned). It has no rank cut: it is only meant for damped partners, certified when
:func:`certified_lower` is at least the schedule's lower end (``λ`` then bounds ``κ(A)``); below that
the iteration is not certified and a rank-deficient partner diverges. A schedule runs as a loop
(``lax.scan``), and one longer than ``MAX_SCHEDULE_STEPS`` is refused, as for the Newton–Schulz msign.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from foundation.compute.jax_msign import MAX_SCHEDULE_STEPS

#: the default schedule: Polar Express, 8 steps (certified on [1e-3, 1] to a 1e-20 band)
DEFAULT_SCHEDULE = "polar-express"
CERTIFIED_LOWER = 1e-3


def coupled_newton_schulz(a, schedule):
    """``(A^{-1/2}, A^{1/2})`` of SPD ``a`` (``(..., n, n)``) by the coupled iteration, in ``a``'s dtype.

    ``schedule``: a tuple of coefficient tuples ``(c_0, c_1, …)`` (``q(y) = c_0 + c_1 y + …``), at most
    ``MAX_SCHEDULE_STEPS`` of them; shorter steps are padded with zero high-order coefficients.
    """
    if len(schedule) > MAX_SCHEDULE_STEPS:
        raise ValueError(f"coupled_newton_schulz: schedule has {len(schedule)} steps, more than "
                         f"MAX_SCHEDULE_STEPS = {MAX_SCHEDULE_STEPS}")
    n = a.shape[-1]
    s = jnp.sqrt(jnp.sum(jnp.square(a.astype(jnp.float32)), axis=(-2, -1), keepdims=True)).astype(a.dtype)
    eye = jnp.eye(n, dtype=a.dtype)
    width = max(len(step) for step in schedule)
    coeffs = jnp.asarray([list(step) + [0.0] * (width - len(step)) for step in schedule], a.dtype)

    def step(carry, c):
        y, z = carry
        m = z @ y
        if width == 1:
            t = c[0] * jnp.broadcast_to(eye, m.shape)
        else:
            t = c[-1] * m
            for j in range(width - 2, 0, -1):
                t = (t + c[j] * eye) @ m
            t = t + c[0] * eye
        return (y @ t, t @ z), None

    y, z = a / s, jnp.broadcast_to(eye, a.shape)
    (y, z), _ = jax.lax.scan(step, (y, z), coeffs)
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
