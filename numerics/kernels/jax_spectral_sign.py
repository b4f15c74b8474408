"""``msign`` by a named method: the dispatch the emitted modules and the optimizer call. Inlined verbatim.

Methods (:data:`numerics.kernels.jax_msign.MSIGN_METHODS`): ``"svd"``, ``"newton_schulz"`` (the standard
iteration), ``"gram_newton_schulz"`` (the same schedule run on the small Gram matrix with restarts,
:mod:`numerics.kernels.gram_newton_schulz`; J. Zhang, N. Amsel, B. Chen, T. Dao 2026) and ``"auto"``
(the Gram form where the flop model says it is cheaper, else the standard one; decided statically from
the matrix shape).

Flop model (``python -m derivations.gram_ns``, Lemma GK): ``T`` quintic steps with ``K`` restarts on an
``n × m`` matrix (``n ≤ m``) cost ``T (4n²m + 2n³)`` in the standard form and
``4(K + 1) n²m + 2n³ (4T − 3K − 3)`` in the Gram form. Their difference is
``(T − K − 1)(4n²m − 6n³)``: for ``K < T − 1`` the Gram form is cheaper exactly when ``m > 1.5 n``,
whatever ``T`` and ``K`` are, so ``"auto"`` compares the aspect ratio with :data:`GRAM_ASPECT` (1.5;
another threshold can be passed as ``gram_aspect``).

Restarts: a tuple of positions ``s`` (restart after iteration ``s``, ``1 ≤ s ≤ T − 1``), or ``None`` for
:func:`default_restarts`: one restart after iteration 2 (:data:`GRAM_RESTARTS`), the published choice for
Polar Express with 5 steps (``python -m coeffsearch restarts SCHEDULE --dtype …`` certifies positions
for a schedule and dtype); a schedule of at most 2 steps gets none.
"""

import jax.numpy as jnp

from numerics.kernels.gram_newton_schulz import gram_newton_schulz, restart_flags
from numerics.kernels.jax_msign import msign_svd, newton_schulz, schedule_array

GRAM_ASPECT = 1.5  # "auto" runs Gram Newton–Schulz when long side > this * short side (the flop model's break-even)
GRAM_RESTARTS = (2,)  # default restart positions: after iteration 2 (published for polar-express-5)
GRAM_METHODS = ("gram_newton_schulz", "auto")


def default_restarts(steps):
    """:data:`GRAM_RESTARTS` within a ``steps``-step schedule (positions ``<= steps − 1``)."""
    return tuple(s for s in GRAM_RESTARTS if s <= steps - 1)


def gram_chosen(shape, gram_aspect=None):
    """``"auto"``'s static choice for a matrix of ``shape`` (``(…, n, m)``): long side > ``gram_aspect`` · short."""
    short, long_ = sorted(shape[-2:])
    return long_ > (GRAM_ASPECT if gram_aspect is None else gram_aspect) * short


def gram_flags(method, schedule, restarts):
    """The restart flags a Gram method runs with (``None`` for the other methods), as data for the jitted core."""
    if method not in GRAM_METHODS:
        return None
    steps = schedule.shape[0] if hasattr(schedule, "shape") else len(schedule)
    return restart_flags(default_restarts(steps) if restarts is None else restarts, steps)


def spectral_sign(a, method, schedule, restarts=None, gram_aspect=None):
    """``msign(A)`` by ``method`` (``"svd"``, ``"newton_schulz"``, ``"gram_newton_schulz"`` or ``"auto"``).

    ``schedule``: the Newton–Schulz steps; ``restarts``: the Gram form's restart positions (a tuple, or
    flags from :func:`gram_flags`; ``None``: :func:`default_restarts`); ``gram_aspect``: ``"auto"``'s
    threshold (``None``: :data:`GRAM_ASPECT`).
    """
    if method == "svd":
        return msign_svd(a)
    if method == "newton_schulz" or (method == "auto" and not gram_chosen(a.shape, gram_aspect)):
        return newton_schulz(a, schedule)
    if restarts is None:
        restarts = default_restarts(schedule_array(schedule).shape[0])
    return gram_newton_schulz(a, schedule, restarts)


def spectral_sign_stacked(arrays, method, schedule, restarts=None, gram_aspect=None):
    """:func:`spectral_sign` of several same-shape matrices in one batched call."""
    out = spectral_sign(jnp.stack(arrays), method, schedule, restarts, gram_aspect)
    return tuple(out[i] for i in range(len(arrays)))
