"""Greedy per-step search of inverse-root factors ``q_k`` (:mod:`coeffsearch.inverse_roots`).

Like the greedy minimax of the msign schedules (Amsel et al. 2025, Polar Express), each step is chosen
for the interval ``[a, b]`` the previous steps left: ``q_k`` (degree ``d``, positive on ``[a, b]``)
minimizes ``max |x q(x)^p − 1|`` over ``[a, b]``. The objective is not linear in the coefficients, so it
is minimized numerically (Nelder–Mead from Newton's factor and two stretched copies of it, on a
geometric grid of ``[a, b]`` with its end points, in float64); Newton's factor is kept whenever it does
at least as well. The next interval is the certified image (:func:`coeffsearch.inverse_root_certify.propagate`),
not the grid's, so the search never steers by a rounded interval. The coefficients are stored as the
floats' shortest decimals (exactly those floats), which is what the certificate then reads.
"""

from __future__ import annotations

import mpmath
import numpy as np
import scipy.optimize
from mpmath import iv

from coeffsearch.certify import iv_precision
from coeffsearch.inverse_root_certify import DEFAULT_PREC, Step, propagate
from coeffsearch.inverse_roots import RootSchedule, newton_factor

GRID = 4001  # points of the geometric grid the objective is measured on


def _objective(coeffs, p, xs):
    """``max |x q(x)^p − 1|`` over ``xs``; ``inf`` where ``q`` is not positive on the grid."""
    q = np.polyval(coeffs[::-1], xs)
    if np.any(q <= 0):
        return np.inf
    return float(np.max(np.abs(xs * q**p - 1)))


def best_factor(p: int, a: float, b: float, degree: int) -> tuple[str, ...]:
    """The factor of ``degree`` that minimizes ``max |x q(x)^p − 1|`` on ``[a, b]`` (Newton's unless beaten)."""
    xs = np.geomspace(a, b, GRID)
    newton = np.zeros(degree + 1)
    newton[:2] = [float(c) for c in newton_factor(p)]
    best, best_value = newton, _objective(newton, p, xs)
    for stretch in (1.0, 1.5, 2.0):
        res = scipy.optimize.minimize(_objective, newton * stretch, args=(p, xs), method="Nelder-Mead",
                                      options={"xatol": 1e-15, "fatol": 1e-17, "maxiter": 4000, "maxfev": 4000})
        if np.isfinite(res.fun) and res.fun < best_value:
            best, best_value = res.x, res.fun
    if best is newton:
        return tuple(newton_factor(p)) + ("0",) * (degree - 1)
    return tuple(repr(float(c)) for c in best)


def greedy(p: int, lower: str, steps: int, degree: int = 1, name: str = "searched", progress=None) -> RootSchedule:
    """``steps`` greedy factors of ``degree`` for ``X^{-1/p}`` on ``[lower, 1]``; ``progress``: a bar updated per
    step."""
    chosen: list[tuple[str, ...]] = []
    with iv_precision(DEFAULT_PREC):
        a = b = None
        for _ in range(steps):
            lo, hi = (float(lower), 1.0) if a is None else (float(a), float(b))
            step = best_factor(p, lo, hi, degree) if hi > lo else tuple(newton_factor(p)) + ("0",) * (degree - 1)
            chosen.append(step)
            rows = propagate([Step(s, p, DEFAULT_PREC) for s in chosen], *_start(lower))
            if len(rows) < len(chosen) or rows[-1]["output"][0] <= 0:
                raise ValueError(f"step {len(chosen)}: the searched factor is not positive on its interval")
            a, b = rows[-1]["output"]
            if progress is not None:
                progress.update(1)
    return RootSchedule(name, p, (str(lower), "1"), tuple(chosen),
                        f"greedy per-step search (coeffsearch.inverse_root_search), degree {degree}, {steps} steps, "
                        f"l = {lower}")


def _start(lower):
    """``[l, 1]`` as exact binary bounds, ``l`` rounded down (the decimal interval's enclosure)."""
    return mpmath.mpf(iv.mpf(str(lower)).a), mpmath.mpf(1)
