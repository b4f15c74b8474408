"""Gram Newton–Schulz in PyTorch: :mod:`foundation.compute.gram_newton_schulz`, one to one.

Every odd step ``X ← q_t(R) X`` with ``R = XXᵀ`` and ``q_t(R) = c_0 I + c_1 R + … + c_k R^k``; the Gram
matrix of the new iterate is ``q_t(R) R q_t(R)``, so after ``R_0 = X_0 X_0ᵀ`` every product is ``n × n``
for an ``n × m`` input (``n ≤ m``) and ``X`` is touched again only at the end (J. Zhang, N. Amsel, B. Chen,
T. Dao 2026, *Gram Newton–Schulz*; ``python -m derivations.gram_ns``). A restart before step ``s`` forms
``X_s = Q X_0``, recomputes ``R_s`` and sets ``Q = I``. Restart positions are step indices ``s``
(``1 ≤ s ≤ T − 1``) or a boolean tensor ``(T,)`` of flags; the loop skips the work a flag makes needless
(the first step of a segment sets ``Q = q`` without a product, the last one does not update ``R``).
"""

import torch

from foundation.compute.torch_exact_scaling import pow2_normalize
from foundation.compute.torch_msign import schedule_array


def restart_flags(restarts, steps):
    """Restart positions as a boolean tensor ``(steps,)``: flag ``s`` is set for a restart before step ``s``.

    ``restarts``: distinct integers in ``[1, steps − 1]`` (``ValueError`` otherwise, naming the bad position),
    or already ``steps`` flags (returned as booleans).
    """
    if hasattr(restarts, "shape"):
        if tuple(restarts.shape) != (steps,):
            raise ValueError(f"gram_newton_schulz: restarts as flags must have shape ({steps},) for a {steps}-step "
                             f"schedule, got {tuple(restarts.shape)}")
        return torch.as_tensor(restarts).to(torch.bool)
    if isinstance(restarts, (str, bytes)) or not isinstance(restarts, (tuple, list)):
        raise TypeError(f"gram_newton_schulz: restarts must be a tuple of step indices or a tensor of {steps} "
                        f"flags, got {type(restarts).__name__}")
    for s in restarts:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= steps - 1:
            raise ValueError(f"gram_newton_schulz: restart position {s!r} is outside the schedule: a restart "
                             f"comes after iteration s with 1 <= s <= {steps - 1} for a {steps}-step schedule")
    if len(set(restarts)) != len(restarts):
        raise ValueError(f"gram_newton_schulz: restart positions {tuple(restarts)} repeat a position")
    return torch.tensor([t in restarts for t in range(steps)], dtype=torch.bool)


def gram_newton_schulz(x, schedule, restarts=()):
    """msign by the Gram form of the odd-polynomial iteration of ``schedule`` (see the module docstring);
    ``x``: ``(…, n, m)``. Returns ``msign(x)`` to the schedule's accuracy, in ``x``'s dtype."""
    return gram_newton_schulz_oriented(x, schedule, restarts, wide=x.shape[-2] <= x.shape[-1])


def gram_newton_schulz_oriented(x, schedule, restarts, wide):
    """:func:`gram_newton_schulz` with the Gram matrix ``XXᵀ`` (``wide``) or ``XᵀX``, whatever the shape."""
    coeffs = schedule_array(schedule)
    steps, degree = coeffs.shape
    flags = restart_flags(restarts, steps).tolist()
    xc = pow2_normalize(x)[0]  # max|x| in [1, 2), exact
    norm = torch.sqrt((xc * xc).sum(dim=(-2, -1), keepdim=True))
    x = (xc / torch.where(norm > 0, norm, torch.ones_like(norm))).to(x.dtype)
    side = x.shape[-2] if wide else x.shape[-1]
    eye = torch.eye(side, dtype=x.dtype, device=x.device).expand(*x.shape[:-2], side, side)

    def gram(x):
        return x @ x.mT if wide else x.mT @ x

    def apply(q, x):
        return q @ x if wide else x @ q

    def higher_terms(r, c):
        """``z = c_1 R + … + c_k R^k`` by Horner's rule (``k − 1`` products)."""
        z = c[degree - 1] * r
        for j in range(degree - 2, 0, -1):
            z = (z + c[j] * eye) @ r
        return z

    r, q = gram(x), eye
    for t in range(steps):
        c = coeffs[t].to(x.dtype)
        if flags[t]:
            x = apply(q, x)
            r = gram(x)
        z = torch.zeros_like(r) if degree == 1 else higher_terms(r, c)
        fresh = t == 0 or flags[t]  # a fresh segment: Q = q, without a product
        q = z + c[0] * eye if fresh else (z @ q if wide else q @ z) + c[0] * q
        if t < steps - 1 and not flags[t + 1]:  # the last step of a segment does not update R
            rz = r @ z + c[0] * r  # R q(R)
            r = z @ rz + c[0] * rz  # q(R) R q(R)
    return apply(q, x)
