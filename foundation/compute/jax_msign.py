"""The matrix sign ``msign(A) = U Vᵀ`` (``A = U Σ Vᵀ``, zero singular values dropped) in JAX.

Two routines: the SVD (:func:`msign_svd`, singular values at or below ``max(m, n)·eps·σ_max`` count
as zero), and the one Newton–Schulz iteration of the project (:func:`newton_schulz`).
:data:`MSIGN_METHODS` also names its Gram form and the automatic choice between the two, dispatched by
:mod:`foundation.compute.jax_spectral_sign`. The iteration: each step of a schedule applies an odd polynomial
``p(σ) = c_0 σ + c_1 σ³ + … + c_k σ^{2k+1}`` to every singular value of ``X / ‖X‖_F``, so a schedule
that maps ``[l, 1]`` into ``[1 − δ, 1 + δ]`` (what :mod:`coeffsearch` certifies) approximates ``msign``
to ``δ`` on singular values down to ``l·‖X‖_F``. Schedules are data (an array scanned by
``lax.scan`` as a loop, whose body compiles once whatever the schedule's length) and refused beyond
:data:`MAX_SCHEDULE_STEPS`. Inlined verbatim into the emitted modules.
"""

import jax
import jax.numpy as jnp

from foundation.compute.jax_exact_scaling import compute_dtype, pow2_normalize
from foundation.compute.jax_lapack_calls import lapack_guard, per_matrix_on_cpu

MSIGN_METHODS = ("newton_schulz", "svd", "gram_newton_schulz", "auto")


def msign_svd(a):
    """``U Vᵀ`` over the singular values above ``max(m, n)·eps·σ_max`` (zero ones map to 0).

    ``A`` is scaled by an exact power of two to ``max|a_ij|`` in ``[1, 2)`` first (msign ignores positive
    scale; dividing by ``max|a_ij|`` would flush for entries above ``2**126`` in float32, where XLA's
    reciprocal is subnormal); a matrix with NaN/Inf gives NaN.
    """
    ac = a.astype(compute_dtype(a.dtype))
    ac, ok = lapack_guard(pow2_normalize(ac)[0])
    u, s, vt = per_matrix_on_cpu(lambda x: jnp.linalg.svd(x, full_matrices=False), ac)
    tol = max(a.shape[-2:]) * jnp.finfo(ac.dtype).eps * s[..., :1]
    keep = (s > tol).astype(ac.dtype)
    out = jnp.where(ok, (u * keep[..., None, :]) @ vt, jnp.nan)
    return out.astype(a.dtype)


def schedule_array(schedule):
    """A schedule as an array ``(steps, k+1)``; a tuple of coefficient tuples is padded with zeros.

    A shorter step padded with zero high-order coefficients is the same polynomial.
    """
    if hasattr(schedule, "shape"):
        return jnp.asarray(schedule)
    width = max(len(step) for step in schedule)
    return jnp.asarray([list(step) + [0.0] * (width - len(step)) for step in schedule])


MAX_SCHEDULE_STEPS = 100  # longer schedules are refused (coeffsearch uses the same bound)


def newton_schulz(x, schedule):
    """msign by odd-polynomial iterations, one polynomial per row of ``schedule``.

    Step ``(c_0, c_1, …, c_k)`` maps ``X ← c_0 X + (c_1 A + c_2 A² + … + c_k A^k) X`` with
    ``A = X Xᵀ`` formed on the short side, i.e. each singular value goes to
    ``p(σ) = c_0 σ + c_1 σ³ + … + c_k σ^{2k+1}``. The iteration starts from ``X / ‖X‖_F`` (so
    ``σ ≤ 1``; a zero matrix stays zero). ``X`` is first divided by ``max|x_ij|``, so ``‖X‖_F²``
    lies in ``[1, mn]`` and nothing overflows or underflows; the Frobenius division is then folded
    into the first step: ``‖X‖_F² = tr(A)`` comes from that step's own Gram matrix, and
    ``c_0 X/ν + (B/ν) X`` scales a ``k × k`` matrix instead of the whole ``X`` (one pass over ``X``
    fewer; 16-bit inputs keep an explicit float32 normalisation). The first step runs in the loop
    with the others (a flag selects the scale ``1/ν``, 1 elsewhere), so no step compiles apart.
    ``schedule`` is data: an array ``(steps, k+1)`` (or a tuple of coefficient tuples) scanned by
    ``jax.lax.scan``, so schedules of one shape share one compilation; the scan runs as a loop, so its
    body compiles once whatever the schedule's length (at most ``MAX_SCHEDULE_STEPS``, see
    :func:`check_schedule`): unrolled, every step compiled ops of its own (with the first step
    apart, 30 more for the first training step of a GPT-2-small layer, about a sixth of its compile
    time), for no measurable gain in step time on the CPU. Runs in the input dtype.

    Orientation: the same polynomial is applied as ``X (c_1 A + …)`` with ``A = XᵀX`` when ``X`` is
    held tall. On the CPU a batch of matrices runs tall (XLA's batched ``X Xᵀ`` is slow there: 24 ×
    (64, 768), 5 steps, 37 ms tall against 67 ms wide on 2 cores); a single matrix and every other
    platform run wide (one 1024 × 4096: 0.80 s wide against 1.02 s tall).
    """
    if x.ndim == 2:
        return _newton_schulz_oriented(x, schedule, wide=True)
    return jax.lax.platform_dependent(x, cpu=lambda x: _newton_schulz_oriented(x, schedule, wide=False),
                                      default=lambda x: _newton_schulz_oriented(x, schedule, wide=True))


def _newton_schulz_oriented(x, schedule, wide):
    """:func:`newton_schulz` with the short side first (``wide``) or last."""
    coeffs = schedule_array(schedule)
    flip = x.shape[-2] > x.shape[-1] if wide else x.shape[-2] < x.shape[-1]
    if flip:
        x = x.mT
    xc = pow2_normalize(x)[0]  # max|x| in [1, 2), exact (no reciprocal that could flush to 0)
    short = x.shape[-2] if wide else x.shape[-1]
    eye = jnp.eye(short, dtype=x.dtype)
    degree = coeffs.shape[-1]
    gram = (lambda x: x @ x.mT) if wide else (lambda x: x.mT @ x)
    times = (lambda b, x: b @ x) if wide else (lambda b, x: x @ b)

    def gram_polynomial(a, c):
        """``c_1 A + c_2 A² + … + c_k A^k`` by Horner's rule."""
        b = c[-1] * a
        for j in range(degree - 2, 0, -1):
            b = (b + c[j] * eye) @ a
        return b

    def step(x, c_first):
        """One step; the first (``first``) on ``X/ν``, ``ν = ‖X‖_F``: ``c_0 X/ν + B(A/ν²) X/ν``, ``ν² = tr A``."""
        c, first = c_first
        c = c.astype(x.dtype)
        if degree == 1:
            return c[0] * x, None
        a = gram(x)
        sq = jnp.trace(a, axis1=-2, axis2=-1)[..., None, None]  # ‖X‖_F² ∈ [1, 4mn) on the first step, or 0
        s = jnp.where(first, 1 / jnp.sqrt(jnp.where(sq > 0, sq, 1)), 1).astype(x.dtype)
        return (c[0] * s) * x + times(gram_polynomial(a * (s * s), c) * s, x), None

    if degree == 1 or xc.dtype != x.dtype:
        norm = jnp.sqrt(jnp.sum(xc * xc, axis=(-2, -1), keepdims=True))
        x = (xc / jnp.where(norm > 0, norm, 1)).astype(x.dtype)
        first = jnp.zeros(coeffs.shape[0], dtype=bool)
    else:  # the Frobenius division folded into the first step, inside the loop: no step compiles apart
        x = xc
        first = jnp.arange(coeffs.shape[0]) == 0
    x, _ = jax.lax.scan(step, x, (coeffs, first))
    return x.mT if flip else x
