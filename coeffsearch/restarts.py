"""Certified restart positions for Gram Newton–Schulz, by interval arithmetic over every σ ∈ [0, 1].

Gram Newton–Schulz (J. Zhang, N. Amsel, B. Chen, T. Dao 2026; ``python -m derivations.gram_ns``) runs
an odd-polynomial schedule on the Gram matrix: per singular value ``σ`` of the normalized input its
eigenvalue ``r_0 = σ²`` follows ``r_{t+1} = r_t q_t(r_t)²`` and ``Q`` accumulates ``Q_{t+1} = Q_t q_t(r_t)``
(``q_t(r) = c_0 + c_1 r + … + c_k r^k``); the result is ``x_T = Q_T σ``. A restart before step ``s``
forms ``x_s = Q_s x``, recomputes ``r_s = x_s²`` and resets ``Q = 1``. The authors choose the positions
with a scalar model evaluated on a grid with one fixed negative eigenvalue; here they are certified.

The perturbation model (:data:`MODEL`), for a dtype of unit roundoff ``u`` (float16 ``2⁻¹¹``, bfloat16
``2⁻⁸``, float32 ``2⁻²⁴``) and a stated growth factor ``g`` (default 1):

* every formation of the Gram matrix from ``x`` (at the start and at each restart) rounds relatively and
  adds a spurious eigenvalue: ``r = x²(1 + θ) + e`` with ``|θ| ≤ u`` and ``e ∈ [−δ, 0]``, ``δ = g·u``
  (``‖X‖_F = 1``, so ``u`` is one unit roundoff of the largest possible eigenvalue);
* every matrix product rounds relatively by a factor ``1 + θ``, ``|θ| ≤ u``: the ``k − 1`` products of
  Horner's rule for ``q`` (for a quintic step ``q̃ = c_0 + (c_1 r + c_2 r²)(1 + θ)``), ``Q ← Q q``,
  both products of ``r ← q (r q)``, ``x_s = Q x`` and the final ``Q x``.

Every ``θ`` and ``e`` is independent and arbitrary within its interval. For each piece of a partition of
``[0, 1]`` (no grid: the pieces cover the interval) the state is propagated as intervals with mpmath's
``iv`` (outward rounding). The state is the segment's start ``x``, the virtual iterate ``y = Q x`` and the
drift ``d = r − y²`` of the Gram eigenvalue, so that the step ``y ← y q(y² + d)`` is enclosed by the exact
image of the odd polynomial ``p(y) = y q(y²)`` (endpoints and real critical points, isolated by FLINT
ball arithmetic) plus a mean-value term in ``d``; ``Q`` is the product of the ``q`` intersected with
``y / x``. The certified bounds are

* (a) ``max |Q_t|`` over every step and every ``σ ∈ [0, 1]``, and
* (b) ``max |x_T − 1|`` over ``σ ∈ [l, 1]`` (``l``: the schedule's design lower bound, else ``1e-3``),

with the final image of ``[0, 1]``. A placement is *certified* when (a) ``< 1/u`` (beyond, the rounding
of the final ``Q X`` alone, about ``u ‖Q‖``, exceeds the result) and (b) ``< 1`` (every singular value in
``[l, 1]`` ends in ``(0, 2)``: right sign, within a factor 2). The search tries every set of ``K``
positions and keeps the certified one with the smallest (b), then the smallest (a) among those within
1 % of it. The partition comes from a float64 pass of the same interval model (bisecting where a
piece's bound exceeds what model instances attain by more than 1 %, until bisection stops paying); its
points are exact binary numbers, so it is the same on every platform. Model instances (every product
of a kind rounded alike, and seeded random roundings per step) give the values actually attained and,
when one already breaks a criterion, the σ named in the refusal. A certificate (:func:`certificate`)
states the inputs, the partition and the bounds; :func:`recheck` recomputes the partition and the
proof and rejects any difference.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import flint
import jsonschema
import mpmath
import numpy as np
from mpmath import iv

from coeffsearch import registry
from coeffsearch.certify import CertificateError, CertificateFormatError, decimal_down, decimal_up, iv_precision
from coeffsearch.polynomial import MAX_SCHEDULE_STEPS, MAX_STEP_COEFFICIENTS, NAME_PATTERN
from derivations.commandline import FileRefused, read_regular_file

#: unit roundoff ``u = 2^-p`` of each dtype (round to nearest)
UNIT_ROUNDOFF_BITS = {"float16": 11, "bfloat16": 8, "float32": 24}
DTYPES = tuple(UNIT_ROUNDOFF_BITS)
DEFAULT_GROWTH = "1"
MAX_DEVIATION = 1  # criterion (b): every σ in [l, 1] ends in (0, 2)
PRECISION_BITS = 64
DIGITS = 8  # significant digits of the stated bounds (outward)
TIE = 0.01  # deviations within 1 % of the best are a tie, decided by (a)
RTOL = 0.01  # refine a piece while its bound exceeds the attained value by more than this
STALL = 0.005  # ... unless the last round of bisection lowered the largest bounds by less than this
MAX_PIECES = 4000
MAX_ROUNDS = 40
MAX_CANDIDATES = 64  # position sets one search tries (each takes up to seconds)
MODEL = ("Gram formation r = x²(1+θ) + e, e ∈ [−δ, 0], δ = g·u; every matrix product rounds relatively, "
         "|θ| ≤ u (Horner for q, Q ← Q q, r ← q (r q), x_s = Q x, final Q x); all θ, e independent")
CRITERIA = "(a) max |Q_t| over σ ∈ [0, 1] < 1/u; (b) max |x_T − 1| over σ ∈ [l, 1] < 1"


class RestartError(ValueError):
    """Bad input for the restart search (a usage error: one line, exit 2)."""


class Uncertifiable(RestartError):
    """No restart positions (of those tried) can be certified; the message names σ and the bound."""


# ---- polynomials with their critical points -------------------------------------------------------------
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


class _Float:
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


class _Interval:
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


def _run(ar, steps, flags, sigma, theta_q, theta_r, theta_h, spurious, instance=False):
    """The model on ``sigma`` (an interval per piece): ``(max |Q_t| per piece, step of that max, x_T)``.

    Per step ``t``: ``theta_q[t]`` is the relative rounding ``θ`` of the products that form ``Q`` (and
    ``x_s = Q x`` at a restart before ``t``; ``theta_q[T]`` that of the final ``Q x``), ``theta_r[t]`` that
    of the products forming the Gram eigenvalue (its formation, and ``r ← q (r q)``), ``theta_h[t]`` that
    of Horner's products for ``q``, ``spurious[t]`` the eigenvalue ``e`` added at a formation: intervals
    (``[−u, u]``, ``[−δ, 0]``), or points when ``instance`` (a model instance, evaluated as such).

    The state is the segment's start ``x``, the virtual iterate ``y = Q x`` and the drift ``d = r − y²``
    of the Gram eigenvalue: ``y ← y q(y² + d)`` is enclosed as ``p(y) + y d q'(ξ)`` (``p(y) = y q(y²)``,
    ``ξ`` between ``y²`` and ``y² + d``) with the exact image of ``p``, so the dependence of ``r`` on
    ``y`` costs nothing; ``d ← q² (d (1+θ_r)² + y² ((1+θ_r)² − (1+θ_q)²))``; ``Q`` is the product of
    the ``q`` intersected with ``y / x``.
    """
    x = sigma
    y = x
    d = ar.square(x) * theta_r[0] + spurious[0]
    q_acc, q_max, q_step = None, None, None
    last = [t == len(steps) - 1 or flags[t + 1] for t in range(len(steps))]
    for t, step in enumerate(steps):
        grow_q, grow_r = theta_q[t] + 1, theta_r[t] + 1
        if flags[t]:
            x = y * grow_q
            y = x
            d = ar.square(x) * theta_r[t] + spurious[t]
            q_acc = None
        y2 = ar.square(y)
        r = y2 + d
        eta = ar.horner_term(step, r, theta_h[t], instance)
        qt = ar.q_image(step, r) + eta
        moved = ar.p_image(step, y) + y * d * ar.q_prime(step, ar.hull(y2, r)) + y * eta
        if q_acc is None:
            q_acc, factor = qt, 1
        else:
            q_acc, factor = q_acc * qt * grow_q, grow_q
            moved = moved * grow_q
        q_acc = ar.narrow(q_acc, moved, x)
        size = ar.upper_abs(q_acc)
        if q_max is None:
            q_max, q_step = size, np.zeros_like(size, dtype=int) if isinstance(size, np.ndarray) else 0
        elif isinstance(size, np.ndarray):
            q_step = np.where(size > q_max, t, q_step)
            q_max = np.maximum(q_max, size)
        elif size > q_max:
            q_max, q_step = size, t
        if not last[t]:
            d = ar.square(qt) * (d * grow_r * grow_r + y2 * (grow_r * grow_r + (-1) * factor * factor))
        y = moved
    return q_max, q_step, y * (theta_q[len(steps)] + 1)


# ---- the model's parameters -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Model:
    """The dtype (its unit roundoff ``u``), the growth factor ``g`` (``δ = g·u``) and the lower end ``l`` of (b)."""

    dtype: str
    growth: str = DEFAULT_GROWTH
    lower: str = "1e-3"

    def __post_init__(self):
        if self.dtype not in UNIT_ROUNDOFF_BITS:
            raise RestartError(f"argument --dtype: unknown dtype {self.dtype!r}; one of {', '.join(DTYPES)}")
        g, lo = _decimal(self.growth, "--growth"), _decimal(self.lower, "--lower")
        if not 0 <= g <= 2 ** UNIT_ROUNDOFF_BITS[self.dtype]:
            raise RestartError(f"argument --growth: must be in [0, 1/u] = [0, {2 ** UNIT_ROUNDOFF_BITS[self.dtype]}] "
                               f"for {self.dtype} (δ = g·u is at most 1), got {self.growth}")
        if not 0 < lo < 1:
            raise RestartError(f"argument --lower: must be in (0, 1), got {self.lower}")
        object.__setattr__(self, "lower", repr(lo))  # the binary number the partition holds exactly

    @property
    def u(self) -> mpmath.mpf:
        return mpmath.ldexp(1, -UNIT_ROUNDOFF_BITS[self.dtype])

    def delta(self):
        """``δ = g·u`` as an interval enclosure."""
        return iv.mpf(self.growth) * iv.mpf(self.u)


def _decimal(text, what) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise RestartError(f"argument {what}: not a number: {text!r}") from None
    if not math.isfinite(v):
        raise RestartError(f"argument {what}: must be finite, got {text}")
    return v


def check_positions(positions, steps: int) -> tuple:
    """Restart positions as a sorted tuple; :class:`RestartError` for one outside ``[1, steps − 1]``."""
    out = []
    for s in positions:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= steps - 1:
            raise RestartError(f"restart position {s} is outside the schedule: a restart comes after iteration s "
                               f"with 1 <= s <= {steps - 1} for a {steps}-step schedule")
        out.append(s)
    if len(set(out)) != len(out):
        raise RestartError(f"restart positions {tuple(positions)} repeat a position")
    return tuple(sorted(out))


def _flags(positions, steps):
    return [t in positions for t in range(steps)]


# ---- the partition (float pass) and the proof (iv pass) -------------------------------------------------
def _initial_points(lower: float) -> list:
    """``0``, ``l·2^j`` for ``j = −12 … ⌊log₂(1/l)⌋`` and ``1``: exact binary numbers (so are the midpoints
    bisection adds), so the partition is the same on every platform."""
    above = [lower]
    while above[-1] * 2 < 1:
        above.append(above[-1] * 2)
    return sorted({0.0, *(lower * 2.0 ** -j for j in range(12, 0, -1)), *above, 1.0})


def _float_bounds(steps, flags, model, lo, hi):
    u, delta = float(model.u), float(model.delta().b)
    ar = _Float()
    theta, count = ar.interval(-u, u), len(steps) + 1
    return _run(ar, steps, flags, Box(lo, hi), [theta] * count, [theta] * count, [theta] * count,
                [ar.interval(-delta, 0)] * count)


#: the model instances tried at each point: every product of a kind rounded alike (e ∈ {−δ, 0}, θ = ±u for
#: the Q products, the Gram ones and Horner's), and RANDOM_INSTANCES with independent random θ = ±u per step
CORNERS = tuple(itertools.product((-1.0, 0.0), (-1.0, 1.0), (-1.0, 1.0), (-1.0, 1.0)))
RANDOM_INSTANCES = 48


def _attained(steps, flags, model, sigma, seed=0):
    """Model instances at the points ``sigma``: ``(max |Q|, max |x_T − 1|)`` per point over the instances
    of :data:`CORNERS` and :data:`RANDOM_INSTANCES` (seeded: the partition is reproducible), all run at
    once (one row per instance)."""
    u, delta = float(model.u), float(model.delta().b)
    count, size = len(steps) + 1, (len(CORNERS) + RANDOM_INSTANCES, len(sigma))
    rng = np.random.default_rng(seed)
    corners = np.array(CORNERS)  # columns: e, θ_q, θ_r, θ_h

    def draw(column, values):
        fixed = np.broadcast_to(corners[:, column:column + 1] * values[1], (len(CORNERS), size[1]))
        return Box(np.concatenate([fixed, rng.choice(values, (RANDOM_INSTANCES, size[1]))]))

    theta_q, theta_r, theta_h = ([draw(c, (-u, u)) for _ in range(count)] for c in (1, 2, 3))
    spurious = [draw(0, (-delta, delta)) for _ in range(count)]
    spurious = [Box(np.minimum(e.lo, 0.0)) for e in spurious]  # e ∈ {−δ, 0}
    q_max, _, x_t = _run(_Float(), steps, flags, Box(np.broadcast_to(sigma, size)), theta_q, theta_r, theta_h,
                         spurious, instance=True)
    return np.max(q_max, axis=0), np.max(np.abs(x_t.lo - 1), axis=0)


@dataclass
class Estimate:
    """The float pass: the partition, the bounds it suggests and what model instances attain."""

    points: list
    q_bound: float
    deviation_bound: float
    q_attained: float
    q_attained_at: float
    deviation_attained: float
    deviation_attained_at: float


def estimate(steps, positions, model) -> Estimate:
    """Choose the partition: bisect pieces whose float bound exceeds the attained value by more than RTOL
    (each piece is evaluated once: its bounds and the instances at its midpoint are kept)."""
    flags = _flags(positions, len(steps))
    lower = float(model.lower)
    points = _initial_points(lower)
    known = {}  # (lo, hi) -> (q bound, x_T lower, x_T upper, attained |Q|, attained deviation)
    history = []
    for _ in range(MAX_ROUNDS):
        pieces = list(zip(points[:-1], points[1:], strict=True))
        new = [p for p in pieces if p not in known]
        if new:
            lo_n, hi_n = (np.array(v) for v in zip(*new, strict=True))
            q_up_n, _, x_n = _float_bounds(steps, flags, model, lo_n, hi_n)
            q_att_n, dev_att_n = _attained(steps, flags, model, (lo_n + hi_n) / 2)
            q_up_n = np.broadcast_to(q_up_n, lo_n.shape)
            for i, p in enumerate(new):
                known[p] = (q_up_n[i], x_n.lo[i], x_n.hi[i], q_att_n[i], dev_att_n[i])
        lo, hi = (np.array(v) for v in zip(*pieces, strict=True))
        q_up, x_lo, x_hi, q_att, dev_att = (np.array(v, dtype=float) for v in zip(*(known[p] for p in pieces),
                                                                                   strict=True))
        inside = lo >= lower
        dev_up = np.where(inside, np.maximum(np.abs(x_lo - 1), np.abs(x_hi - 1)), 0.0)
        mid = (lo + hi) / 2
        q_att, dev_att = np.nan_to_num(q_att, nan=np.inf), np.nan_to_num(dev_att, nan=np.inf)
        dev_att = np.where(inside, dev_att, 0.0)
        q_target, dev_target = float(np.max(q_att)), float(np.max(dev_att))
        failing = not q_target < 2 ** UNIT_ROUNDOFF_BITS[model.dtype] or not dev_target < MAX_DEVIATION
        refine = (q_up > q_target * (1 + RTOL)) | (dev_up > dev_target * (1 + RTOL) + 1e-6)
        history.append((float(np.max(q_up)), float(np.max(dev_up))))
        stalled = len(history) > 2 and all(  # two rounds of bisection gained under STALL each: the model's spread
            now >= before * (1 - STALL) for k in (1, 2) for now, before in zip(history[-k], history[-k - 1], strict=True))
        if failing or stalled or not refine.any():
            break
        wanted = np.flatnonzero(refine)
        if len(points) + len(wanted) > MAX_PIECES:
            order = np.argsort(-np.maximum(q_up / max(q_target, 1e-300), dev_up / max(dev_target, 1e-300))[wanted])
            wanted = wanted[order[:MAX_PIECES - len(points)]]
            if not len(wanted):
                break
        points = sorted(set(points) | {float(x) for x in mid[wanted]})
        if len(points) >= MAX_PIECES:
            break
    return Estimate(points, float(np.max(q_up)), float(np.max(dev_up)), q_target, float(mid[np.argmax(q_att)]),
                    dev_target, float(mid[np.argmax(dev_att)]))


def _point_text(x: float) -> str:
    return repr(float(x))


def prove(steps, positions, model, points, prec: int = PRECISION_BITS) -> dict:
    """The bounds of the model on the partition ``points`` (decimal strings, each piece enclosed outward),
    proven with ``iv``: ``{"max_abs_q", "deviation", "final_image"}`` with where each is attained."""
    flags = _flags(positions, len(steps))
    lower_text = model.lower
    with iv_precision(prec), mpmath.workprec(prec + 10):  # endpoints convert to mpf exactly
        lower = iv.mpf(lower_text)
        u = mpmath.mpf(model.u)
        theta = iv.mpf([-u, u])
        delta = model.delta()
        spurious = iv.mpf([-delta.b, 0])
        ar = _Interval()
        q_best, dev_best, image = None, None, None
        for a, b in zip(points[:-1], points[1:], strict=True):
            sigma = iv.mpf([a, b])
            q_max, q_step, x_t = _run(ar, steps, flags, sigma, *([item] * (len(steps) + 1) for item in
                                                                 (theta, theta, theta, spurious)))
            if q_best is None or q_max > q_best[0]:
                q_best = (q_max, (a, b), q_step)
            if mpmath.mpf(sigma.a) >= mpmath.mpf(lower.a):  # the pieces from l on cover [l, 1]
                dev = max(abs(iv.mpf(x_t.a) - 1).b, abs(iv.mpf(x_t.b) - 1).b)
                dev = mpmath.mpf(dev)
                if dev_best is None or dev > dev_best[0]:
                    dev_best = (dev, (a, b))
            elif mpmath.mpf(sigma.b) > mpmath.mpf(lower.b):
                raise RestartError(f"piece [{a}, {b}] straddles the lower end {lower_text} of bound (b)")
            lo_b, hi_b = mpmath.mpf(x_t.a), mpmath.mpf(x_t.b)
            image = (lo_b, hi_b) if image is None else (min(image[0], lo_b), max(image[1], hi_b))
        return {"max_abs_q": {"bound": decimal_up(q_best[0], DIGITS), "sigma": list(q_best[1]),
                              "step": int(q_best[2]) + 1},
                "deviation": {"bound": decimal_up(dev_best[0], DIGITS) if dev_best else "0",
                              "sigma": list(dev_best[1]) if dev_best else None},
                "final_image": [decimal_down(image[0], DIGITS), decimal_up(image[1], DIGITS)]}


def failures(bounds: dict, model) -> list:
    """Which certification criterion each proven bound does not meet (empty: certified). The enclosure
    is an upper bound: failing it proves nothing about the model, it only leaves the bound unproven."""
    out = []
    cap = 2 ** UNIT_ROUNDOFF_BITS[model.dtype]
    q = bounds["max_abs_q"]
    if not mpmath.mpf(q["bound"]) < cap:
        out.append(f"bound (a) max |Q| < 1/u = {cap} is not proven: the enclosure of |Q_{q['step']}| reaches "
                   f"{q['bound']} for σ in [{q['sigma'][0]}, {q['sigma'][1]}]")
    d = bounds["deviation"]
    if not mpmath.mpf(d["bound"]) < MAX_DEVIATION:
        out.append(f"bound (b) max |x_T − 1| < {MAX_DEVIATION} on [{model.lower}, 1] is not proven: the enclosure "
                   f"reaches {d['bound']} for σ in [{d['sigma'][0]}, {d['sigma'][1]}]")
    return out


# ---- certificates -------------------------------------------------------------------------------------------
_DEC = {"type": "string", "pattern": r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$"}
_PAIR = {"type": "array", "items": _DEC, "minItems": 2, "maxItems": 2}
SCHEMA = {
    "type": "object",
    "required": ["kind", "name", "schedule", "dtype", "unit_roundoff", "growth", "spurious_eigenvalue", "lower",
                 "restarts", "precision_bits", "model", "criteria", "partition", "max_abs_q", "deviation",
                 "final_image"],
    "additionalProperties": False,
    "properties": {
        "kind": {"const": "restart-certificate"},
        "name": {"type": "string", "pattern": f"^$|^(?:{NAME_PATTERN.pattern})$"},
        "schedule": {"type": "array", "minItems": 1, "maxItems": MAX_SCHEDULE_STEPS,
                     "items": {"type": "array", "minItems": 1, "maxItems": MAX_STEP_COEFFICIENTS, "items": _DEC}},
        "dtype": {"enum": list(DTYPES)},
        "unit_roundoff": _DEC,
        "growth": _DEC,
        "spurious_eigenvalue": _DEC,
        "lower": _DEC,
        "restarts": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": MAX_SCHEDULE_STEPS},
        "precision_bits": {"type": "integer", "minimum": 53, "maximum": 1024},
        "model": {"type": "string"},
        "criteria": {"type": "string"},
        "partition": {"type": "array", "items": _DEC, "minItems": 2, "maxItems": MAX_PIECES + 1},
        "max_abs_q": {"type": "object", "required": ["bound", "sigma", "step"], "additionalProperties": False,
                      "properties": {"bound": _DEC, "sigma": _PAIR, "step": {"type": "integer", "minimum": 1}}},
        "deviation": {"type": "object", "required": ["bound", "sigma"], "additionalProperties": False,
                      "properties": {"bound": _DEC, "sigma": {"anyOf": [_PAIR, {"type": "null"}]}}},
        "final_image": _PAIR,
    },
}


def certificate(name, steps, positions, model, points, prec: int = PRECISION_BITS) -> dict:
    """The certificate of ``steps`` with ``positions`` under ``model`` on the partition ``points``
    (:class:`Uncertifiable` when a criterion fails)."""
    texts = tuple(tuple(str(c) for c in s) for s in steps)
    _check_partition(points, model.lower)
    bounds = prove([make_step(s) for s in texts], positions, model, points, prec)
    bad = failures(bounds, model)
    if bad:
        raise Uncertifiable(f"{_describe(name, positions, model)} cannot be certified: {bad[0]}")
    with iv_precision(prec), mpmath.workprec(prec + 10):
        delta = decimal_up(mpmath.mpf(model.delta().b), DIGITS)
    return {"kind": "restart-certificate", "name": name, "schedule": [list(s) for s in texts], "dtype": model.dtype,
            "unit_roundoff": mpmath.nstr(model.u, 30), "growth": model.growth, "spurious_eigenvalue": delta,
            "lower": model.lower, "restarts": list(positions), "precision_bits": prec, "model": MODEL,
            "criteria": CRITERIA, "partition": list(points), **bounds}


def _check_partition(points, lower):
    try:
        values = [mpmath.mpf(p) for p in points]
    except (TypeError, ValueError):
        raise CertificateError("field 'partition': not a list of decimal numbers") from None
    if values[0] != 0 or values[-1] != 1:
        raise CertificateError(f"field 'partition': must run from 0 to 1, got {points[0]} … {points[-1]}")
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise CertificateError("field 'partition': the points must increase strictly")
    if mpmath.mpf(lower) not in values:
        raise CertificateError(f"field 'partition': must contain the lower end {lower} of bound (b)")


def _describe(name, positions, model) -> str:
    where = ("restarts after iterations " + ", ".join(map(str, positions))) if positions else "no restart"
    return f"{name or 'the schedule'} with {where} in {model.dtype} (δ = {model.growth}·u)"


def _differences(old, new, where=""):
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new))
                for d in _differences(old.get(k), new.get(k), f"{where}/{k}" if where else k)]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _differences(a, b, f"{where}/{i}")]
    return [] if old == new else [(where, old, new)]


def parse(data, source: str = "certificate") -> dict:
    """A restart certificate from JSON text or a parsed object; :class:`CertificateFormatError` lists every bad field."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise CertificateFormatError(source, [f"not valid JSON ({exc.msg} at line {exc.lineno})"]) from None
    validator = jsonschema.Draft202012Validator(SCHEMA)
    lines = []
    for err in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        message = err.message if len(err.message) <= 200 else err.message[:200] + " …"
        lines.append(f"field '{where}': {message}")
    if lines:
        raise CertificateFormatError(source, lines)
    return data


def recheck(data, source: str = "certificate") -> dict:
    """Recompute a restart certificate from its inputs (schedule, dtype, growth, lower end, positions,
    precision): the partition, then the proof; :class:`CertificateError` unless every stated field equals
    the recomputation."""
    cert = parse(data, source)
    name = cert["name"]
    published = registry.get(name).published if name in registry.names() else None
    if published is not None and [tuple(s) for s in cert["schedule"]] != [tuple(s) for s in published]:
        raise CertificateError(f"field 'name': {name!r} is a published schedule with other coefficients than the "
                               f"stated ones")
    try:
        model = Model(cert["dtype"], cert["growth"], cert["lower"])
        positions = check_positions(cert["restarts"], len(cert["schedule"]))
        fresh = certify_positions(name, cert["schedule"], positions, model, cert["precision_bits"])
    except Uncertifiable as exc:
        raise CertificateError(f"the stated inputs cannot be certified: {exc}") from None
    except RestartError as exc:
        raise CertificateError(str(exc)) from None
    diffs = _differences(cert, fresh)
    if diffs:
        where, old, new = diffs[0]
        more = f" ({len(diffs) - 1} more difference(s))" if len(diffs) > 1 else ""
        raise CertificateError(f"field '{where}': stated {json.dumps(old)} but the recomputation gives "
                               f"{json.dumps(new)}{more}")
    return fresh


# ---- the search ---------------------------------------------------------------------------------------------
@dataclass
class Candidate:
    """One set of restart positions: the float estimate, and the certificate or why there is none."""

    positions: tuple
    estimate: Estimate
    certificate: dict | None = None
    reason: str = ""

    @property
    def deviation(self) -> float:
        return float(self.certificate["deviation"]["bound"]) if self.certificate else math.inf

    @property
    def max_q(self) -> float:
        return float(self.certificate["max_abs_q"]["bound"]) if self.certificate else math.inf


def certify_positions(name, steps, positions, model, prec: int = PRECISION_BITS) -> dict:
    """The certificate of ``positions``: the partition of :func:`estimate` (float64 additions and
    multiplications of exact binary numbers: the same everywhere), proven by :func:`certificate`."""
    texts = tuple(tuple(str(c) for c in s) for s in steps)
    est = estimate([make_step(s) for s in texts], positions, model)
    return certificate(name, texts, positions, model, [_point_text(p) for p in est.points], prec)


def evaluate(name, steps, positions, model) -> Candidate:
    """Estimate, then prove (when no model instance already fails a criterion)."""
    texts = tuple(tuple(str(c) for c in s) for s in steps)
    compiled = [make_step(s) for s in texts]
    est = estimate(compiled, positions, model)
    cap = 2 ** UNIT_ROUNDOFF_BITS[model.dtype]
    if not est.q_attained < cap:
        return Candidate(positions, est, reason=f"bound (a) fails: at σ = {est.q_attained_at:.6g} a model instance "
                                                f"reaches |Q| = {est.q_attained:.4g} >= 1/u = {cap}")
    if not est.deviation_attained < MAX_DEVIATION:
        return Candidate(positions, est, reason=f"bound (b) fails: at σ = {est.deviation_attained_at:.6g} a model "
                                                f"instance reaches |x_T − 1| = {est.deviation_attained:.4g} >= "
                                                f"{MAX_DEVIATION}")
    points = [_point_text(p) for p in est.points]
    try:
        cert = certificate(name, texts, positions, model, points)
    except Uncertifiable as exc:
        return Candidate(positions, est, reason=str(exc).split(": ", 1)[-1] + f" (model instances reach |Q| = "
                                                f"{est.q_attained:.4g}, |x_T − 1| = {est.deviation_attained:.4g})")
    return Candidate(positions, est, cert)


def search(name, steps, model, restarts: int | None = None, at: tuple | None = None, progress=None) -> tuple:
    """``(chosen Candidate, every Candidate tried)``: the given positions ``at``, every set of ``restarts``
    positions, or (neither) the fewest restarts that certify. :class:`Uncertifiable` when none does."""
    count = len(steps)
    if at is not None:
        sets = [check_positions(at, count)]
    elif restarts is not None:
        if restarts < 0:
            raise RestartError(f"argument --restarts: must be >= 0, got {restarts}")
        if restarts > count - 1:
            raise RestartError(f"argument --restarts: {restarts} restarts but a {count}-step schedule has room for at "
                               f"most {count - 1} (one after each iteration but the last)")
        sets = list(itertools.combinations(range(1, count), restarts))
    else:
        sets = None
    tried = []
    for k in ([None] if sets is not None else range(count)):
        size = len(sets) if sets is not None else math.comb(count - 1, k)
        if size > MAX_CANDIDATES:
            raise RestartError(f"argument --restarts: {k if k is not None else restarts} restart(s) in a {count}-step "
                               f"schedule make {size} position sets, more than the {MAX_CANDIDATES} searched; "
                               "name the positions with --at")
        batch = sets if sets is not None else list(itertools.combinations(range(1, count), k))
        found = []
        for p in batch:
            found.append(evaluate(name, steps, p, model))
            if progress is not None:
                progress.update(1)
        tried += found
        good = [c for c in found if c.certificate]
        if good:
            best_dev = min(c.deviation for c in good)
            ties = [c for c in good if c.deviation <= best_dev * (1 + TIE)]
            return min(ties, key=lambda c: (c.max_q, c.deviation)), tried
    worst = min(tried, key=lambda c: (c.estimate.deviation_attained, c.estimate.q_attained))
    raise Uncertifiable(f"{_describe(name, worst.positions, model)} cannot be certified: {worst.reason}"
                        + (f" (and {len(tried) - 1} other position set(s) fail too)" if len(tried) > 1 else ""))


def format_table(name, model, tried, chosen) -> str:
    """The candidates tried: certified bounds (a) and (b), or why not; the chosen one marked."""
    lines = [f"{name}: {model.dtype}, u = 2^-{UNIT_ROUNDOFF_BITS[model.dtype]}, δ = {model.growth}·u, "
             f"(b) on [{model.lower}, 1]",
             f"  model: {MODEL}", f"  certified when {CRITERIA}",
             f"  {'restarts after':<16} {'(a) max |Q|':>14} {'(b) max |x_T-1|':>16} {'final image of [0, 1]':>26} "
             f"{'pieces':>7}  attained (a), (b)"]
    for c in tried:
        where = ", ".join(map(str, c.positions)) or "none"
        att = f"{c.estimate.q_attained:.4g}, {c.estimate.deviation_attained:.4g}"
        mark = "  <- chosen" if c is chosen else ""
        if c.certificate:
            img = c.certificate["final_image"]
            lines.append(f"  {where:<16} {float(c.certificate['max_abs_q']['bound']):>14.6g} "
                         f"{float(c.certificate['deviation']['bound']):>16.6g} "
                         f"{'[' + f'{float(img[0]):.4g}, {float(img[1]):.4g}' + ']':>26} "
                         f"{len(c.certificate['partition']) - 1:>7}  {att}{mark}")
        else:
            lines.append(f"  {where:<16} {'not certified':>14}  {c.reason}")
    return "\n".join(lines) + "\n"


#: the published choice this command compares with (J. Zhang, N. Amsel, B. Chen, T. Dao 2026: one restart
#: after iteration 2 for Polar Express with 5 steps)
PUBLISHED = {"polar-express-5": (2,)}


def read_certificate(path: str) -> dict | None:
    """The parsed JSON of ``path`` when it is a restart certificate (``"kind": "restart-certificate"``),
    else None (not a file, not JSON, or another kind: the caller treats it as a schedule)."""
    try:
        text = read_regular_file(path, registry.MAX_FILE_BYTES, "certificate file").decode("utf-8")
        data = json.loads(text)
    except (FileRefused, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("kind") == "restart-certificate" else None


def parse_positions(text: str) -> tuple:
    """``"2"`` or ``"1,3"`` as a tuple of integers (``RestartError`` naming ``--at`` otherwise)."""
    try:
        return tuple(int(part) for part in text.split(",")) if text.strip() else ()
    except ValueError:
        raise RestartError(f"argument --at: expected step indices separated by commas (e.g. 2 or 1,3), "
                           f"got {text!r}") from None


def summary(chosen: Candidate) -> str:
    """Two lines on the chosen positions' certified bounds."""
    cert = chosen.certificate
    where = ("restarts after iterations " + ", ".join(map(str, chosen.positions))) if chosen.positions else "no restart"
    return (f"certified: {where}: (a) max |Q| <= {cert['max_abs_q']['bound']} "
            f"(step {cert['max_abs_q']['step']}, σ in [{cert['max_abs_q']['sigma'][0]}, "
            f"{cert['max_abs_q']['sigma'][1]}]); (b) max |x_T - 1| <= {cert['deviation']['bound']} on "
            f"[{cert['lower']}, 1]; final image of [0, 1] in [{cert['final_image'][0]}, {cert['final_image'][1]}]\n")
