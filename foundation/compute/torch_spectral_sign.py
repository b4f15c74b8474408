"""``msign`` by a named method in PyTorch: the dispatch of :mod:`foundation.compute.jax_spectral_sign`, one to one.

Methods: ``"svd"``, ``"newton_schulz"``, ``"gram_newton_schulz"`` (the same schedule on the small Gram
matrix with restarts) and ``"auto"`` (the Gram form where the flop model says it is cheaper: long side >
``gram_aspect`` · short side). The constants, the flop-model choice (``gram_chosen``) and the table of
certified restart positions (``certified_restarts``) are the JAX module's own plain-Python objects, so both
targets choose alike; ``restarts=None`` takes the positions certified for the schedule in the dtype the
iteration runs in. Inlined verbatim into the emitted modules.
"""

import torch

from foundation.compute.jax_spectral_sign import GRAM_METHODS, certified_restarts, gram_chosen
from foundation.compute.torch_gram_newton_schulz import gram_newton_schulz, restart_flags
from foundation.compute.torch_msign import msign_svd, newton_schulz


def msign_choice(shape, dtype, method, schedule, restarts=None, gram_aspect=None):
    """``(chosen, restarts, why)``: what ``method`` runs for a ``shape``/``dtype`` input.

    ``"auto"`` runs the Gram form only where the flop model prefers it and restart positions are given or
    certified for ``dtype``; else the standard iteration. ``"gram_newton_schulz"`` without ``restarts`` and
    with none certified raises ``ValueError``. ``restarts``: positions, flags, or the ``{dtype: flags}`` of
    :func:`gram_flags`.
    """
    name = str(dtype).removeprefix("torch.")
    if method in ("svd", "newton_schulz"):
        return method, None, f"msign={method!r}"
    if method == "auto" and not gram_chosen(shape, gram_aspect):
        return "newton_schulz", None, "the flop model prefers the standard iteration at this shape"
    if isinstance(restarts, dict) or restarts is None:
        table = certified_restarts(schedule) if restarts is None else restarts
        restarts = table.get(name)
        if restarts is None:
            if method == "gram_newton_schulz":
                raise ValueError(f"msign='gram_newton_schulz': no restart positions are certified for this schedule "
                                 f"in {name} (python -m coeffsearch restarts SCHEDULE --dtype {name}); pass "
                                 f"restarts=... or use msign='auto', which then runs the standard iteration")
            return "newton_schulz", None, f"no Gram restart positions certified for this schedule in {name}"
        why = f"restart positions certified in {name}"
    else:
        why = "restart positions as given"
    return "gram_newton_schulz", restarts, why


def gram_flags(method, schedule, restarts):
    """The restarts a Gram method runs with: flags of the given positions, or (``restarts=None``)
    ``{dtype name: flags}`` of the certified ones; ``None`` for the other methods."""
    if method not in GRAM_METHODS:
        return None
    steps = schedule.shape[0] if hasattr(schedule, "shape") else len(schedule)
    if restarts is None:
        return {name: restart_flags(p, steps) for name, p in certified_restarts(schedule).items()}
    return restart_flags(restarts, steps)


def spectral_sign(a, method, schedule, restarts=None, gram_aspect=None):
    """``msign(A)`` by ``method`` (``"svd"``, ``"newton_schulz"``, ``"gram_newton_schulz"`` or ``"auto"``)."""
    chosen, restarts, _ = msign_choice(a.shape, a.dtype, method, schedule, restarts, gram_aspect)
    if chosen == "svd":
        return msign_svd(a)
    if chosen == "newton_schulz":
        return newton_schulz(a, schedule)
    return gram_newton_schulz(a, schedule, restarts)


def spectral_sign_stacked(arrays, method, schedule, restarts=None, gram_aspect=None):
    """:func:`spectral_sign` of several same-shape matrices in one batched call."""
    out = spectral_sign(torch.stack(arrays), method, schedule, restarts, gram_aspect)
    return tuple(out[i] for i in range(len(arrays)))
