"""Greedy per-step minimax schedules (Polar Express's objective) by a Remez exchange in mpmath.

Each step is the odd polynomial of degree ``2k+1`` minimising ``max_{x∈[l,u]} |1 − p(x)|``. By
the alternation theorem the optimum equioscillates at ``k+2`` points: both ends and the ``k``
interior critical points of ``p``. The exchange solves the levelled system on a reference, moves
the reference to the new interior critical points (roots of ``p'`` as a polynomial in ``x²``),
and stops when the levelled error matches the true maximum error (relative gap below ``tol``).

The greedy composition (Amsel, Persson, Musco, Gower 2025) then maps ``l ← p(l)``, ``u ← 2 − l``.
Options, as in Polar Express's practical variants: a *cushion* (solve on ``[max(l, cushion·u), u]``, then rescale
so ``p(l) + p(u) = 2``) and a *safety factor* ``s = 1 + δ`` (divide coefficient ``j`` of every step
but the last by ``s^{2j+1}``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import mpmath

from foundation.polynomial import DEFAULT_DPS, ScheduleDoc, odd_derivative, odd_eval, to_decimal

#: above this l/u the levelled system is singular to working precision; PE uses the limit polynomial
NEAR_ONE = mpmath.mpf("5e-6")


class RemezNotConverged(UserWarning):
    """The exchange hit its iteration cap or lost alternation; the best iterate is returned."""


@dataclass
class StepResult:
    """One minimax solve: coefficients, levelled error, reference, iterations, success flag."""

    coeffs: list
    error: object
    reference: list
    iterations: int
    converged: bool


def limit_polynomial(k: int, u=1):
    """``x Σ_{j≤k} binom(2j, j) 4^{-j} (1 − x²)^j`` rescaled to ``[.., u]``: the ``l → u`` limit.

    ``k = 1`` gives ``(3/2, −1/2)``, ``k = 2`` gives ``(15/8, −10/8, 3/8)``.
    """
    coeffs = [mpmath.mpf(0)] * (k + 1)
    for j in range(k + 1):
        w = mpmath.binomial(2 * j, j) / mpmath.mpf(4) ** j
        for i in range(j + 1):  # (1 − x²)^j = Σ_i binom(j, i) (−x²)^i
            coeffs[i] += w * mpmath.binomial(j, i) * (-1) ** i
    u = mpmath.mpf(u)
    return [c / u ** (2 * i + 1) for i, c in enumerate(coeffs)]


def cubic_closed_form(low, u):
    """Degree-3 minimax of 1 on ``[l, u]``: equal values at ``l`` and ``u``, peak at ``x*² = (u²+ul+l²)/3``."""
    low, u = mpmath.mpf(low), mpmath.mpf(u)
    xs = mpmath.sqrt((u * u + u * low + low * low) / 3)
    a = 2 / (low - low ** 3 / (3 * xs * xs) + 2 * xs / 3)
    b = -a / (3 * xs * xs)
    return [a, b]


def _critical_points(coeffs, low, u):
    d = odd_derivative(coeffs)  # p'(x) = Σ d_j y^j with y = x²
    if len(d) == 1:
        return []
    roots = mpmath.polyroots(list(reversed(d)), maxsteps=200, extraprec=2 * mpmath.mp.prec)
    xs = []
    for y in roots:
        if abs(mpmath.im(y)) <= mpmath.mpf(10) ** (-mpmath.mp.dps // 2) * (1 + abs(y)):
            y = mpmath.re(y)
            if y > 0:
                x = mpmath.sqrt(y)
                if low < x < u:
                    xs.append(x)
    return sorted(xs)


def remez_step(low, u, degree: int = 5, tol=None, max_iter: int = 100) -> StepResult:
    """Minimax odd polynomial of ``degree`` for ``1`` on ``[l, u]`` (``0 < l < u``).

    Runs at twice the working precision: on short intervals the monomial levelled system is
    ill-conditioned, and the stopping test needs the error to ``tol`` relative accuracy.
    """
    tol = tol or mpmath.mpf(10) ** (-(mpmath.mp.dps - 5))
    with mpmath.workdps(2 * mpmath.mp.dps):
        res = _remez(low, u, degree, tol, max_iter)
    res.coeffs = [+c for c in res.coeffs]
    return res


def _remez(low, u, degree, tol, max_iter):
    if degree < 1 or degree % 2 == 0:
        raise ValueError(f"degree must be odd and >= 1, got {degree}")
    k = (degree - 1) // 2
    low, u = mpmath.mpf(low), mpmath.mpf(u)
    if not 0 < low < u:
        raise ValueError(f"need 0 < l < u, got l = {low}, u = {u}")
    if low / u >= 1 - NEAR_ONE:  # limit of the minimax polynomial as l/u → 1: full contact at the midpoint
        coeffs = limit_polynomial(k, (low + u) / 2)
        return StepResult(coeffs, max(abs(1 - odd_eval(coeffs, low)), abs(1 - odd_eval(coeffs, u))), [low, u], 0, True)
    n = k + 1
    ref = [(low + u) / 2 - (u - low) / 2 * mpmath.cos(mpmath.pi * i / n) for i in range(n + 1)]
    best = None
    for it in range(1, max_iter + 1):
        rows = [[x ** (2 * j + 1) for j in range(n)] + [(-1) ** i] for i, x in enumerate(ref)]
        sol = mpmath.lu_solve(mpmath.matrix(rows), mpmath.matrix([1] * (n + 1)))
        coeffs, lev = [sol[j] for j in range(n)], sol[n]
        crit = _critical_points(coeffs, low, u)
        cand = [low] + crit + [u]
        errs = [abs(1 - odd_eval(coeffs, x)) for x in cand]
        emax = max(errs)
        if best is None or emax < best.error:
            best = StepResult(coeffs, emax, cand, it, False)
        if emax - abs(lev) <= tol * emax:
            return StepResult(coeffs, emax, cand, it, True)
        if len(crit) != k:
            break
        ref = cand
    warnings.warn(f"Remez on [{mpmath.nstr(low, 8)}, {mpmath.nstr(u, 8)}] degree {degree} did not converge "
                  f"(max error {mpmath.nstr(best.error, 8)}); returning the best iterate", RemezNotConverged,
                  stacklevel=2)
    return best


def greedy_schedule(lower, steps: int, degree: int = 5, cushion=0, safety=0, upper=1,
                    dps: int = DEFAULT_DPS, progress=None) -> ScheduleDoc:
    """Polar Express's greedy composition; returns the schedule with a per-step report.

    Once the interval has converged to 1 at working precision (``l ≥ u`` after rounding), the
    remaining steps are the limit polynomial (:func:`limit_polynomial`, which maps 1 to 1 with
    ``p'(1) = 0``, so it only corrects rounding); their report rows say ``interval_collapsed``.

    Examples:
      Five quintic steps for singular values in ``[10⁻³, 1]``; each report row gives the step's
      worst ``|p(σ) − 1|`` on its interval:

      >>> from foundation.minimax import greedy_schedule
      >>> doc = greedy_schedule("1e-3", 5)
      >>> len(doc.steps), [round(float(c), 2) for c in doc.steps[0]]
      (5, [8.47, -25.11, 18.63])
      >>> [row["error"][:6] for row in doc.report]
      ['0.9915', '0.9645', '0.8597', '0.5458', '0.1134']
    """
    with mpmath.workdps(dps):
        low, u = mpmath.mpf(lower), mpmath.mpf(upper)
        cushion, s = mpmath.mpf(cushion), 1 + mpmath.mpf(safety)
        out, report = [], []
        k = (degree - 1) // 2
        for i in range(steps):
            lo = max(low, cushion * u)
            collapsed = lo >= u  # the interval has converged to 1 at working precision: a result, not an error
            if collapsed:  # every singular value is 1: keep the limit polynomial, which fixes 1 (p'(1) = 0)
                coeffs = limit_polynomial(k, (lo + u) / 2)
                res = StepResult(coeffs, abs(1 - odd_eval(coeffs, lo)), [lo, u], 0, True)
            else:
                res = remez_step(lo, u, degree)
            coeffs = res.coeffs
            if cushion > 0 or lo != low:
                scale = 2 / (odd_eval(coeffs, low) + odd_eval(coeffs, u))
                coeffs = [c * scale for c in coeffs]
            if safety and i < steps - 1:
                coeffs = [c / s ** (2 * j + 1) for j, c in enumerate(coeffs)]
            new_l = odd_eval(coeffs, low)
            out.append([to_decimal(c, dps) for c in coeffs])
            report.append({"step": i + 1, "interval": [to_decimal(lo, dps), to_decimal(u, dps)],
                           "true_lower": to_decimal(low, dps), "error": to_decimal(res.error, 12),
                           "iterations": res.iterations, "converged": res.converged,
                           "interval_collapsed": bool(collapsed)})
            low, u = new_l, 2 - new_l
            if progress is not None:
                progress.update(1)
        params = {"method": "minimax", "lower": str(lower), "steps": steps, "degree": degree,
                  "cushion": str(cushion), "safety": str(safety), "upper": str(upper), "dps": dps}
        return ScheduleDoc(out, "schedule", f"minimax-d{degree}-k{steps}", params, report)
