"""One fixed odd polynomial used at every step (Muon's style), searched globally, certified.

Two objectives over ``p(x) = a x + b x³ + c x⁵`` applied ``k`` times to ``[l, u]``:

* ``max a`` subject to ``p^{∘k}([l, u]) ⊆ [lo, hi]`` (the seed's challenge);
* the narrowest band for a given slope ``a``: ``min (hi − lo)`` of ``p^{∘k}([l, u])`` over ``(b, c)``,
  among bands that contain 1.

The global search is SciPy's differential evolution (a population-based multistart that needs no
gradients: the image endpoints are only piecewise smooth in the coefficients) on an exact float64
image (endpoints and critical points per step), followed by a local polish. The answer is then
certified with interval arithmetic; if rounding puts it a hair outside the band, ``a`` is shrunk
until the certificate holds. When no polynomial satisfies the constraints the result says so,
with the smallest violation found and the smallest ``l`` for which the search becomes feasible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import differential_evolution, minimize

from coeffsearch.certify import certify
from foundation.polynomial import odd_eval

BOUNDS = ((1.0, 9.0), (-30.0, 0.0), (0.0, 25.0))  # a, b, c


@dataclass
class BandResult:
    objective: str
    feasible: bool
    coeffs: tuple | None
    band: tuple | None
    violation: float
    certificate: dict | None = None
    feasible_from_lower: float | None = None
    notes: list = field(default_factory=list)


def image(coeffs, lo: float, hi: float, steps: int, survived: list | None = None) -> tuple:
    """Exact (float64) image of ``[lo, hi]`` under ``p^{∘steps}``, via endpoints and critical points.

    A diverging image is returned as ``(-1e6, 1e6)``; ``survived`` (if given) gets the number of
    steps completed before that.
    """
    a, b, c = coeffs
    crit = []
    if c != 0:
        disc = 9 * b * b - 20 * a * c
        if disc >= 0:
            r = math.sqrt(disc)
            crit = [y for y in ((-3 * b - r) / (10 * c), (-3 * b + r) / (10 * c)) if y > 0]
    elif b != 0 and -a / (3 * b) > 0:
        crit = [-a / (3 * b)]
    xs = [math.sqrt(y) for y in crit]
    def p(x):
        return odd_eval((a, b, c), x)
    for k in range(steps):
        vals = [p(lo), p(hi)] + [p(x) for x in xs if lo < x < hi]
        lo, hi = min(vals), max(vals)
        if not (abs(lo) < 1e3 and abs(hi) < 1e3):
            if survived is not None:
                survived.append(k)
            return -1e6, 1e6
    return lo, hi


def _violation(coeffs, lower, upper, steps, band):
    """Distance of the image from the band; diverging images rank by how early they blew up."""
    survived = []
    lo, hi = image(coeffs, lower, upper, steps, survived)
    if survived:
        return 1e3 * (steps - survived[0])
    return max(0.0, band[0] - lo) + max(0.0, hi - band[1])


#: known good fixed polynomials seed the population (Muon's triple, the fixed-point quintic)
SEEDS = ((3.4445, -4.7750, 2.0315), (1.875, -1.25, 0.375), (3.0, -3.2, 1.2), (4.0, -6.0, 3.0))


def _search(fun, bounds, seed, maxiter, progress):
    rng = np.random.default_rng(seed)
    lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    pop = lo + (hi - lo) * rng.random((30 * len(bounds), len(bounds)))
    seeds = [s[-len(bounds):] for s in SEEDS]
    pop[:len(seeds)] = np.clip(seeds, lo, hi)
    cb = (lambda *a, **k: progress.update(1)) if progress is not None else None
    res = differential_evolution(fun, bounds, seed=seed, maxiter=maxiter, init=pop, tol=1e-12,
                                 polish=False, callback=cb)
    return res.x, res.fun


def max_slope(lower, upper, steps, band, seed=0, maxiter=300, progress=None) -> BandResult:
    """``max a`` s.t. ``steps`` applications map ``[lower, upper]`` into ``band``."""
    lower, upper = float(lower), float(upper)
    def penalty(v):
        return -v[0] + 1e3 * _violation(v, lower, upper, steps, band)
    x, _ = _search(penalty, BOUNDS, seed, maxiter, progress)
    viol = _violation(x, lower, upper, steps, band)
    if viol > 1e-9:
        # minimise the violation alone: is anything feasible at all?
        x2, v2 = _search(lambda v: _violation(v, lower, upper, steps, band), BOUNDS, seed + 1, maxiter, progress)
        if v2 > 1e-12:
            return BandResult("max_slope", False, tuple(x2), image(x2, lower, upper, steps), float(v2),
                              feasible_from_lower=_smallest_feasible_lower(lower, upper, steps, band, seed))
        x = x2
    cons = [{"type": "ineq", "fun": lambda v: image(v, lower, upper, steps)[0] - band[0]},
            {"type": "ineq", "fun": lambda v: band[1] - image(v, lower, upper, steps)[1]}]
    pol = minimize(lambda v: -v[0], x, method="SLSQP", constraints=cons, bounds=BOUNDS,
                   options={"ftol": 1e-14, "maxiter": 500})
    if pol.success and _violation(pol.x, lower, upper, steps, band) <= 1e-12 and pol.x[0] >= x[0]:
        x = pol.x
    return _certified(x, lower, upper, steps, band, "max_slope")


def _certified(x, lower, upper, steps, band, objective):
    """Round to 16 digits and certify; shrink ``a`` until the certified image is inside ``band``."""
    a, b, c = (float(f"{v:.16g}") for v in x)
    for _ in range(60):
        cert = certify([[repr(a), repr(b), repr(c)]] * steps, repr(lower), repr(upper), "band")
        lo, hi = float(cert["band"][0]), float(cert["band"][1])
        if lo >= band[0] and hi <= band[1]:
            return BandResult(objective, True, (a, b, c), (lo, hi), 0.0, cert)
        a = float(f"{a * (1 - 1e-12):.16g}") if hi <= band[1] else a
        if hi > band[1]:
            c = float(f"{c * (1 - 1e-12):.16g}")
    return BandResult(objective, False, (a, b, c), (lo, hi), max(band[0] - lo, hi - band[1], 0.0), cert,
                      notes=["the float64 optimum could not be certified inside the band"])


def _smallest_feasible_lower(lower, upper, steps, band, seed, iterations=12):
    """Bisection on ``l`` (log scale) for the smallest interval start the search can satisfy."""
    def feasible(low):
        _, v = _search(lambda z: _violation(z, low, upper, steps, band), BOUNDS, seed, 150, None)
        return v <= 1e-12

    lo, hi = math.log(lower), math.log(upper * 0.999)
    if not feasible(math.exp(hi)):
        return None
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if feasible(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


def narrowest_band(slope, lower, upper, steps, seed=0, maxiter=300, progress=None) -> BandResult:
    """Over ``(b, c)`` with ``a = slope`` fixed: the narrowest ``p^{∘steps}([lower, upper])``."""
    lower, upper, slope = float(lower), float(upper), float(slope)

    def width(v):
        lo, hi = image((slope, v[0], v[1]), lower, upper, steps)
        return (hi - lo) + 1e3 * (max(0.0, -lo) + max(0.0, 1.0 - hi) + max(0.0, lo - 1.0))  # band holds 1

    x, w = _search(width, BOUNDS[1:], seed, maxiter, progress)
    pol = minimize(width, x, method="Nelder-Mead", options={"xatol": 1e-13, "fatol": 1e-15, "maxiter": 4000})
    if pol.fun < w:
        x = pol.x
    coeffs = (slope, float(f"{x[0]:.16g}"), float(f"{x[1]:.16g}"))
    cert = certify([[repr(v) for v in coeffs]] * steps, repr(lower), repr(upper), "band")
    band = (float(cert["band"][0]), float(cert["band"][1]))
    # feasible: a finite certified image inside (0, ∞) that contains 1; a diverged image is not
    feasible = math.isfinite(band[0]) and math.isfinite(band[1]) and 0 < band[0] <= 1 <= band[1]
    notes = [] if feasible else [(f"the certified image {list(band)} is not a band around 1 in (0, ∞): slope {slope} "
                                  f"diverges or collapses within {steps} steps")]
    return BandResult("narrowest_band", feasible, coeffs, band, 0.0, cert, notes=notes)
