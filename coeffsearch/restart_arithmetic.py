"""Interval arithmetic for the restart model: odd-polynomial steps with their critical points, two arithmetics.

A Newton–Schulz step is ``q(r) = c_0 + c_1 r + … + c_k r^k`` on the Gram eigenvalue and ``p(y) = y q(y²)``
on the iterate (:class:`Step`, coefficients taken as exact rationals). The image of an interval under
``q`` or ``p`` is enclosed exactly by the values at its endpoints and at the real critical points
inside it, which FLINT ball arithmetic isolates (:func:`make_step`); the rounding of Horner's rule
is bounded by :func:`_horner_bound` (``e_j ≤ e_{j+1} ρ (1 + u) + u max|w_j|``). The restart model
(:func:`coeffsearch.restart_model.propagate`) runs on either arithmetic: :class:`FloatBoxes`, float64
intervals vectorized over the pieces of a partition (fast, not rigorous: it chooses the partition
and evaluates model instances), and :class:`Intervals`, mpmath ``iv`` with outward rounding (the proof).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import flint
import mpmath
import numpy as np
from mpmath import iv


# ---- polynomials with their critical points ---------------------------------------------------------
def _from_arb(x) -> mpmath.mpf:
    man, exp = (int(v) for v in x.mid().man_exp())
    return mpmath.mp.make_mpf(mpmath.libmp.from_man_exp(man, exp))


def _real_critical_points(poly) -> tuple:
    """Enclosures ``(lo, hi)`` (exact binary) of every possibly real root of ``poly'`` (FLINT balls)."""
    derivative = poly.derivative()
    if derivative.degree() < 1:
        return ()
    old = flint.ctx.prec
    flint.ctx.prec = 200
    try:
        roots = derivative.complex_roots()
    finally:
        flint.ctx.prec = old
    return tuple((_from_arb(z.real.lower()), _from_arb(z.real.upper())) for z, _ in roots if z.imag.contains(0))


@dataclass(frozen=True)
class Step:
    """One step ``q(r) = Σ c_j r^j`` (decimal strings taken as exact rationals), with the critical points
    of ``q`` and of the odd polynomial ``p(y) = y q(y²)``."""

    text: tuple
    q_critical: tuple
    p_critical: tuple

    @property
    def floats(self) -> tuple:
        return tuple(float(c) for c in self.text)

    @property
    def products(self) -> int:
        """Matrix products of Horner's rule for ``q(R) − c_0 I``."""
        return max(len(self.text) - 2, 0)


@cache
def make_step(text: tuple) -> Step:
    coeffs = [flint.fmpq(f.numerator, f.denominator) for f in (Fraction(c) for c in text)]
    q = flint.fmpq_poly(coeffs)
    p = flint.fmpq_poly([v for c in coeffs for v in (0, c)])
    return Step(text, _real_critical_points(q), _real_critical_points(p))


# ---- two arithmetics for one model: float64 boxes (partition) and mpmath iv (proof) ----------------------
class Box:
    """Float64 intervals, one per piece (numpy arrays ``lo ≤ hi``): the fast pass, not rigorous."""

    __slots__ = ("hi", "lo")

    def __init__(self, lo, hi=None):
        self.lo = np.asarray(lo, dtype=float)
        self.hi = self.lo if hi is None else np.asarray(hi, dtype=float)

    def __add__(self, other):
        other = _box(other)
        return Box(self.lo + other.lo, self.hi + other.hi)

    def __mul__(self, other):
        other = _box(other)
        with np.errstate(invalid="ignore", over="ignore"):
            products = np.stack([self.lo * other.lo, self.lo * other.hi, self.hi * other.lo, self.hi * other.hi])
        products = np.where(np.isnan(products), np.inf, products)
        return Box(products.min(axis=0), products.max(axis=0))

    __radd__ = __add__
    __rmul__ = __mul__


def _box(x):
    return x if isinstance(x, Box) else Box(x)


class FloatBoxes:
    """The model's operations on :class:`Box` (vectorized over pieces)."""

    @staticmethod
    def interval(lo, hi):
        return Box(float(lo), float(hi))

    @staticmethod
    def square(a):
        lo2, hi2 = a.lo * a.lo, a.hi * a.hi
        low = np.where((a.lo <= 0) & (a.hi >= 0), 0.0, np.minimum(lo2, hi2))
        return Box(low, np.maximum(lo2, hi2))

    @staticmethod
    def upper_abs(a):
        return np.maximum(np.abs(a.lo), np.abs(a.hi))

    @staticmethod
    def symmetric(e):
        return Box(-e, e)

    @staticmethod
    def hull(a, b):
        return Box(np.minimum(a.lo, b.lo), np.maximum(a.hi, b.hi))

    @staticmethod
    def positive(a):
        """Where every value of ``a`` is > 0."""
        return a.lo > 0

    @staticmethod
    def narrow(q, y, x):
        """``q`` intersected with ``y / x`` where ``x > 0`` (``Q = y / x`` exactly: the iterate over the start)."""
        pos = x.lo > 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratios = np.stack([y.lo / x.lo, y.lo / x.hi, y.hi / x.lo, y.hi / x.hi])
        lo = np.where(pos, np.maximum(q.lo, ratios.min(axis=0)), q.lo)
        hi = np.where(pos, np.minimum(q.hi, ratios.max(axis=0)), q.hi)
        return Box(lo, np.maximum(lo, hi))

    @staticmethod
    def image(values, critical, a):
        """``[min, max]`` of a polynomial over ``a``: endpoints and the critical points inside."""
        with np.errstate(over="ignore", invalid="ignore"):
            lo, hi = values(a.lo), values(a.hi)
            low, high = np.minimum(lo, hi), np.maximum(lo, hi)
            for c_lo, c_hi in critical:
                c = float((c_lo + c_hi) / 2)
                inside = (a.lo <= c) & (c <= a.hi)
                v = values(np.asarray(c))
                low = np.where(inside, np.minimum(low, v), low)
                high = np.where(inside, np.maximum(high, v), high)
        return Box(low, high)

    @staticmethod
    def _horner(coeffs):
        def value(r):
            out = np.zeros_like(np.asarray(r, dtype=float)) + coeffs[-1]
            for c in reversed(coeffs[:-1]):
                out = out * r + c
            return out
        return value

    def q_image(self, step, r):
        return self.image(self._horner(step.floats), step.q_critical, r)

    def p_image(self, step, y):
        q = self._horner(step.floats)
        return self.image(lambda v: v * q(v * v), step.p_critical, y)

    @staticmethod
    def q_prime(step, r):
        """``q'`` over the interval ``r`` (Horner in interval arithmetic: an enclosure)."""
        c = [j * v for j, v in enumerate(step.floats)][1:] or [0.0]
        out = Box(c[-1])
        for v in reversed(c[:-1]):
            out = out * r + v
        return out

    def horner_term(self, step, r, theta, instance):
        """Where Horner's rounding puts ``q̃(r) − q(r)``: the value for a model instance (``r`` a point,
        every product rounded by ``1 + θ``), else the symmetric bound of :func:`_horner_bound`."""
        if not instance:
            return self.symmetric(_horner_bound(self, step, r, self.upper_abs(theta)))
        c, v, th = step.floats, r.lo, theta.lo
        z = c[-1] * v if len(c) > 1 else 0.0 * v
        for j in range(len(c) - 2, 0, -1):
            z = (z + c[j]) * v * (1 + th)
        exact = self._horner(c)(v)
        return Box(z + c[0] - exact)

    @staticmethod
    def partial_upper(step, j, r):
        """``max |w_j|`` over ``r`` for ``w_j(r) = Σ_{i≥j} c_i r^{i−j+1}`` (interval Horner)."""
        c = step.floats
        w = Box(c[-1])
        for i in range(len(c) - 2, j - 1, -1):
            w = w * r + c[i]
        w = w * r
        return np.maximum(np.abs(w.lo), np.abs(w.hi))


class Intervals:
    """The model's operations on mpmath ``iv`` intervals (outward rounding): the proof."""

    @staticmethod
    def interval(lo, hi):
        return iv.mpf([lo, hi])

    @staticmethod
    def square(a):
        return a ** 2

    @staticmethod
    def upper_abs(a):
        return max(abs(mpmath.mpf(a.a)), abs(mpmath.mpf(a.b)))

    @staticmethod
    def symmetric(e):
        e = mpmath.mpf(e)
        return iv.mpf([-e, e])

    @staticmethod
    def hull(a, b):
        return iv.mpf([min(mpmath.mpf(a.a), mpmath.mpf(b.a)), max(mpmath.mpf(a.b), mpmath.mpf(b.b))])

    @staticmethod
    def positive(a):
        return mpmath.mpf(a.a) > 0

    @staticmethod
    def narrow(q, y, x):
        if not mpmath.mpf(x.a) > 0:
            return q
        ratio = y / x
        lo, hi = max(mpmath.mpf(q.a), mpmath.mpf(ratio.a)), min(mpmath.mpf(q.b), mpmath.mpf(ratio.b))
        return iv.mpf([lo, max(lo, hi)])

    def __init__(self):
        self._coeffs = {}

    def coeffs(self, step):
        """The step's coefficients as intervals (parsed once)."""
        if step.text not in self._coeffs:
            self._coeffs[step.text] = [iv.mpf(c) for c in step.text]
        return self._coeffs[step.text]

    @staticmethod
    def _q(coeffs, x):
        out = coeffs[-1]
        for c in reversed(coeffs[:-1]):
            out = out * x + c
        return out

    @staticmethod
    def _image(fn, critical, a):
        lo, hi = mpmath.mpf(a.a), mpmath.mpf(a.b)
        values = [fn(iv.mpf(lo)), fn(iv.mpf(hi))]
        for c_lo, c_hi in critical:
            if c_hi < lo or c_lo > hi:
                continue
            values.append(fn(iv.mpf([max(c_lo, lo), min(c_hi, hi)])))
        return iv.mpf([min(mpmath.mpf(v.a) for v in values), max(mpmath.mpf(v.b) for v in values)])

    def q_image(self, step, r):
        c = self.coeffs(step)
        return self._image(lambda x: self._q(c, x), step.q_critical, r)

    def p_image(self, step, y):
        c = self.coeffs(step)
        return self._image(lambda v: v * self._q(c, v * v), step.p_critical, y)

    def q_prime(self, step, r):
        coeffs = [c * j for j, c in enumerate(self.coeffs(step))][1:] or [iv.mpf(0)]
        return self._q(coeffs, r)

    def horner_term(self, step, r, theta, instance):
        del instance  # the proof always takes the bound
        return self.symmetric(_horner_bound(self, step, r, self.upper_abs(theta)))

    def partial_upper(self, step, j, r):
        c = self.coeffs(step)
        w = c[-1]
        for i in range(len(c) - 2, j - 1, -1):
            w = w * r + c[i]
        w = w * r
        return mpmath.mpf(abs(w).b)


def _horner_bound(ar, step, r, u):
    """Bound on ``|q̃(r) − q(r)|`` when each of Horner's products ``z_j = (z_{j+1} + c_j) r`` rounds by
    ``1 + θ``, ``|θ| ≤ u``: ``e_j ≤ e_{j+1} ρ (1 + u) + u max|w_j|`` (``w_j`` the exact partial value,
    ``ρ = max|r|``); for a quintic step ``u max|c_1 r + c_2 r²|``."""
    k = len(step.text) - 1
    if k < 2:
        return 0 * u
    rho = ar.upper_abs(r)
    if isinstance(rho, np.ndarray) or isinstance(u, (np.ndarray, float)):  # float pass: only + and ×
        e = 0.0
        for j in range(k - 1, 0, -1):
            with np.errstate(over="ignore", invalid="ignore"):
                e = e * rho * (1 + u) + u * ar.partial_upper(step, j, r)
        return e
    e, rho_i, u_i = iv.mpf(0), iv.mpf(rho), iv.mpf(u)
    for j in range(k - 1, 0, -1):
        e = e * rho_i * (1 + u_i) + u_i * iv.mpf(ar.partial_upper(step, j, r))
    return mpmath.mpf(e.b)
