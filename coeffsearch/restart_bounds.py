"""The certified bounds of the restart model: a partition of ``[0, 1]`` (float pass), then the proof (``iv``).

Two bounds are certified for a schedule with restart positions under the model of
:mod:`coeffsearch.restart_model`:

* (a) ``max |Q_t|`` over every step and every ``σ ∈ [0, 1]``, and
* (b) ``max |x_T − 1|`` over ``σ ∈ [l, 1]`` (``l``: the schedule's design lower bound, else ``1e-3``),

with the final image of ``[0, 1]``. A placement is *certified* when (a) ``< 1/u`` (beyond, the rounding
of the final ``Q X`` alone, about ``u ‖Q‖``, exceeds the result) and (b) ``< 1`` (every singular value in
``[l, 1]`` ends in ``(0, 2)``: right sign, within a factor 2): :func:`failures`. There is no grid: the
pieces of a partition cover ``[0, 1]``, and :func:`prove` encloses the model on each with mpmath's ``iv``
(outward rounding). The partition comes from a float64 pass of the same interval model
(:func:`estimate`: bisecting where a piece's bound exceeds what model instances attain by more than 1 %,
until bisection stops paying); its points are exact binary numbers, so it is the same on every
platform. Model instances (every product of a kind rounded alike, and seeded random roundings per step)
give the values actually attained and, when one already breaks a criterion, the σ named in the refusal.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import mpmath
import numpy as np
from mpmath import iv

from coeffsearch.certify import decimal_down, decimal_up, iv_precision
from coeffsearch.restart_arithmetic import Box, FloatBoxes, Intervals
from coeffsearch.restart_model import MAX_DEVIATION, UNIT_ROUNDOFF_BITS, RestartError, positions_to_flags, propagate

PRECISION_BITS = 64
DIGITS = 8  # significant digits of the stated bounds (outward)
RTOL = 0.01  # refine a piece while its bound exceeds the attained value by more than this
STALL = 0.005  # ... unless the last round of bisection lowered the largest bounds by less than this
MAX_PIECES = 4000
MAX_ROUNDS = 40


def _initial_points(lower: float) -> list:
    """``0``, ``l·2^j`` for ``j = −12 … ⌊log₂(1/l)⌋`` and ``1``: exact binary numbers (so are the midpoints
    bisection adds), so the partition is the same on every platform."""
    above = [lower]
    while above[-1] * 2 < 1:
        above.append(above[-1] * 2)
    return sorted({0.0, *(lower * 2.0 ** -j for j in range(12, 0, -1)), *above, 1.0})


def _float_bounds(steps, flags, model, lo, hi):
    u, delta, nu = float(model.rounding().b), float(model.delta().b), float(model.nu().b)
    ar = FloatBoxes()
    theta, count = ar.interval(-u, u), len(steps) + 1
    return propagate(ar, steps, flags, Box(lo, hi), [theta] * count, [theta] * count, [theta] * count,
                     [ar.interval(-delta, delta)] * count, shift=[ar.interval(-nu, nu)] * count)


#: the model instances tried at each point: every product of a kind rounded alike (e ∈ {−δ, 0, δ}, θ = ±γ_n for
#: the Q products, the Gram ones and Horner's, η = ±ν), and RANDOM_INSTANCES with independent random ones per step
CORNERS = tuple(itertools.product((-1.0, 0.0, 1.0), (-1.0, 1.0), (-1.0, 1.0), (-1.0, 1.0), (-1.0, 1.0)))


RANDOM_INSTANCES = 48


def _attained(steps, flags, model, sigma, seed=0):
    """Model instances at the points ``sigma``: ``(max |Q|, max |x_T − 1|)`` per point over the instances
    of :data:`CORNERS` and :data:`RANDOM_INSTANCES` (seeded: the partition is reproducible), all run at
    once (one row per instance)."""
    u, delta, nu = float(model.rounding().b), float(model.delta().b), float(model.nu().b)
    count, size = len(steps) + 1, (len(CORNERS) + RANDOM_INSTANCES, len(sigma))
    rng = np.random.default_rng(seed)
    corners = np.array(CORNERS)  # columns: e, θ_q, θ_r, θ_h, η

    def draw(column, values):
        fixed = np.broadcast_to(corners[:, column:column + 1] * values[-1], (len(CORNERS), size[1]))
        return Box(np.concatenate([fixed, rng.choice(values, (RANDOM_INSTANCES, size[1]))]))

    theta_q, theta_r, theta_h = ([draw(c, (-u, u)) for _ in range(count)] for c in (1, 2, 3))
    spurious = [draw(0, (-delta, 0.0, delta)) for _ in range(count)]  # e ∈ {−δ, 0, δ}
    shift = [draw(4, (-nu, nu)) for _ in range(count)]
    q_max, _, x_t = propagate(FloatBoxes(), steps, flags, Box(np.broadcast_to(sigma, size)), theta_q, theta_r, theta_h,
                         spurious, instance=True, shift=shift)
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
    flags = positions_to_flags(positions, len(steps))
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
            now >= before * (1 - STALL)
            for k in (1, 2) for now, before in zip(history[-k], history[-k - 1], strict=True))
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


def point_text(x: float) -> str:
    """A partition point as certificates state it: the shortest decimal that reads back as the same float64."""
    return repr(float(x))


def prove(steps, positions, model, points, prec: int = PRECISION_BITS, digits: int = DIGITS) -> dict:
    """The bounds of the model on the partition ``points`` (decimal strings, each piece enclosed outward),
    proven with ``iv``: ``{"max_abs_q", "deviation", "final_image"}`` with where each is attained."""
    flags = positions_to_flags(positions, len(steps))
    lower_text = model.lower
    with iv_precision(prec), mpmath.workprec(prec + 10):  # endpoints convert to mpf exactly
        lower = iv.mpf(lower_text)
        gamma = mpmath.mpf(model.rounding().b)
        theta = iv.mpf([-gamma, gamma])
        delta = model.delta()
        spurious = iv.mpf([-delta.b, delta.b])
        nu = model.nu()
        shift = [iv.mpf([-nu.b, nu.b])] * (len(steps) + 1)
        ar = Intervals()
        q_best, dev_best, image = None, None, None
        for a, b in zip(points[:-1], points[1:], strict=True):
            sigma = iv.mpf([a, b])
            q_max, q_step, x_t = propagate(ar, steps, flags, sigma, *([item] * (len(steps) + 1) for item in
                                                                 (theta, theta, theta, spurious)), shift=shift)
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
        return {"max_abs_q": {"bound": decimal_up(q_best[0], digits), "sigma": list(q_best[1]),
                              "step": int(q_best[2]) + 1},
                "deviation": {"bound": decimal_up(dev_best[0], digits) if dev_best else "0",
                              "sigma": list(dev_best[1]) if dev_best else None},
                "final_image": [decimal_down(image[0], digits), decimal_up(image[1], digits)]}


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
