"""Gram Newton–Schulz: the odd-polynomial iteration run on the small Gram matrix, with restarts.

Every odd step ``X ← c_0 X + c_1 (XXᵀ) X + … + c_k (XXᵀ)^k X`` is ``X ← q_t(R) X`` with
``R = XXᵀ`` and ``q_t(R) = c_0 I + c_1 R + … + c_k R^k``; the Gram matrix of the new iterate is
``q_t(R) R q_t(R)``. So ``X_T = Q X_0`` with ``Q = q_{T−1}(R_{T−1}) ⋯ q_0(R_0)`` and
``R_{t+1} = q_t(R_t) R_t q_t(R_t)``: after ``R_0 = X_0 X_0ᵀ`` every product is ``n × n`` for an
``n × m`` input (``n ≤ m``), and ``X`` is touched again only at the end (J. Zhang, N. Amsel, B. Chen,
T. Dao 2026, *Gram Newton–Schulz*; the derivation, with its checked lemmas and flop counts, is
``python -m derivations.gram_ns``). A *restart* before step ``s`` forms ``X_s = Q X_0``, recomputes
``R_s = X_s X_sᵀ`` and sets ``Q = I``: the same result in exact arithmetic, and in floating point it
discards what the recurrence of ``R`` and the product ``Q`` accumulated (a spurious negative
eigenvalue of ``R`` grows geometrically along the recurrence; ``python -m coeffsearch restarts``
certifies positions).

Orientation: for ``X`` of shape ``(…, n, m)`` with ``n ≤ m`` the Gram matrix is ``XXᵀ`` and
``X_T = Q X_0``; for ``n > m`` it is ``XᵀX`` and ``X_T = X_0 Q`` (``Q = q_0(R_0) ⋯ q_{T−1}(R_{T−1})``),
so the Gram matrix is always the small one and nothing is transposed.

The restart positions are data: a tuple of step indices ``s`` (``1 ≤ s ≤ T − 1``: restart after
iteration ``s``, before step ``s`` counted from 0) or a boolean array ``(T,)`` of flags. Each step
runs its restart, its first product of a fresh ``Q`` and its update of ``R`` under ``lax.cond``, so
the work skipped is not done (the first step of a segment sets ``Q = q`` without a product, the
last one does not update ``R``), and restart sets of one length share one compilation.
Like :func:`foundation.compute.jax_msign.newton_schulz` the input is scaled by ``1/max|x_ij|`` and
normalized by its Frobenius norm in the compute dtype (float32 for 16-bit inputs); the iteration
runs in the input dtype; a zero matrix stays zero. It batches over leading axes and works under
``jit``.
"""

import jax
import jax.numpy as jnp

from foundation.compute.jax_exact_scaling import pow2_normalize
from foundation.compute.jax_msign import schedule_array


def restart_flags(restarts, steps):
    """Restart positions as a boolean array ``(steps,)``: flag ``s`` is set for a restart before step ``s``.

    ``restarts``: a tuple or list of distinct integers in ``[1, steps − 1]`` (``ValueError`` otherwise,
    naming the bad position), or already an array of ``steps`` flags (returned as booleans; a traced
    array is taken as it is).
    """
    if hasattr(restarts, "shape"):
        if tuple(restarts.shape) != (steps,):
            raise ValueError(f"gram_newton_schulz: restarts as flags must have shape ({steps},) for a {steps}-step "
                             f"schedule, got {tuple(restarts.shape)}")
        return jnp.asarray(restarts).astype(bool)
    if isinstance(restarts, (str, bytes)) or not isinstance(restarts, (tuple, list)):
        raise TypeError(f"gram_newton_schulz: restarts must be a tuple of step indices or an array of {steps} "
                        f"flags, got {type(restarts).__name__}")
    for s in restarts:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= steps - 1:
            raise ValueError(f"gram_newton_schulz: restart position {s!r} is outside the schedule: a restart "
                             f"comes after iteration s with 1 <= s <= {steps - 1} for a {steps}-step schedule")
    if len(set(restarts)) != len(restarts):
        raise ValueError(f"gram_newton_schulz: restart positions {tuple(restarts)} repeat a position")
    return jnp.asarray([t in restarts for t in range(steps)], dtype=bool)


def gram_newton_schulz(x, schedule, restarts=()):
    """msign by the Gram form of the odd-polynomial iteration of ``schedule`` (see the module docstring).

    ``x``: ``(…, n, m)``; ``schedule``: a tuple of coefficient tuples or an array ``(steps, k+1)``
    (data, like :func:`foundation.compute.jax_msign.newton_schulz`); ``restarts``: step indices in
    ``[1, steps − 1]`` or ``steps`` boolean flags. Returns ``msign(x)`` approximated to the schedule's
    accuracy, in ``x``'s dtype.
    """
    return gram_newton_schulz_oriented(x, schedule, restarts, wide=x.shape[-2] <= x.shape[-1])


def gram_newton_schulz_oriented(x, schedule, restarts, wide):
    """:func:`gram_newton_schulz` with the Gram matrix ``XXᵀ`` (``wide``) or ``XᵀX``, whatever the shape."""
    coeffs = schedule_array(schedule)
    steps, degree = coeffs.shape
    flags = restart_flags(restarts, steps)
    xc = pow2_normalize(x)[0]  # max|x| in [1, 2), exact (no reciprocal that could flush to 0)
    norm = jnp.sqrt(jnp.sum(xc * xc, axis=(-2, -1), keepdims=True))
    x = (xc / jnp.where(norm > 0, norm, 1)).astype(x.dtype)
    side = x.shape[-2] if wide else x.shape[-1]
    eye = jnp.broadcast_to(jnp.eye(side, dtype=x.dtype), (*x.shape[:-2], side, side))

    def gram(x):
        return x @ x.mT if wide else x.mT @ x

    def apply(q, x):
        return q @ x if wide else x @ q

    def accumulate(acc, z, c0):
        """``q Q`` (wide) or ``Q q`` for ``q = c_0 I + z``."""
        return (z @ acc if wide else acc @ z) + c0 * acc

    def higher_terms(r, c):
        """``z = c_1 R + … + c_k R^k`` by Horner's rule (``k − 1`` products)."""
        z = c[degree - 1] * r
        for j in range(degree - 2, 0, -1):
            z = (z + c[j] * eye) @ r
        return z

    def step(carry, inputs):
        x, r, q = carry
        c, restart, fresh, last = inputs
        c = c.astype(x.dtype)

        def restarted():
            xs = apply(q, x)
            return xs, gram(xs)

        x, r = jax.lax.cond(restart, restarted, lambda: (x, r))
        z = jnp.zeros_like(r) if degree == 1 else higher_terms(r, c)
        q = jax.lax.cond(fresh, lambda: z + c[0] * eye, lambda: accumulate(q, z, c[0]))

        def updated():
            rz = r @ z + c[0] * r  # R q(R)
            return z @ rz + c[0] * rz  # q(R) R q(R)

        r = jax.lax.cond(last, lambda: r, updated)
        return (x, r, q), None

    fresh = flags.at[0].set(True)
    last = jnp.concatenate([flags[1:], jnp.ones((1,), dtype=bool)])
    carry = (x, gram(x), eye)
    (x, _, q), _ = jax.lax.scan(step, carry, (coeffs, flags, fresh, last))
    return apply(q, x)
