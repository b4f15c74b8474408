"""Certified restart positions for Gram Newton–Schulz (``python -m coeffsearch restarts``): the search.

A restart of Gram Newton–Schulz (:mod:`foundation.compute.gram_newton_schulz`) re-forms the iterate and its
Gram matrix, discarding the rounding that the Gram recurrence amplifies. Under a stated rounding model
(:mod:`coeffsearch.restart_model`, propagated by interval arithmetic over every ``σ ∈ [0, 1]``:
:mod:`coeffsearch.restart_arithmetic`) a set of positions is certified when (a) ``max |Q_t| < 1/u`` and
(b) ``max |x_T − 1| < 1`` on ``[l, 1]`` are proven (:mod:`coeffsearch.restart_bounds`). :func:`search`
tries every set of ``K`` positions (or the given ones, or the fewest restarts that certify) and keeps
the certified one with the smallest (b), then the smallest (a) among those within 1 % of it; the
chosen positions come with a re-checkable certificate (:mod:`coeffsearch.restart_certificate`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from coeffsearch.restart_arithmetic import make_step
from coeffsearch.restart_bounds import Estimate, estimate, point_text
from coeffsearch.restart_certificate import certificate
from coeffsearch.restart_model import (
    CRITERIA,
    MAX_DEVIATION,
    MODEL,
    UNIT_ROUNDOFF_BITS,
    RestartError,
    Uncertifiable,
    check_positions,
    describe,
)

TIE = 0.01  # deviations within 1 % of the best are a tie, decided by (a)
MAX_CANDIDATES = 64  # position sets one search tries (each takes up to seconds)


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


def evaluate(name, steps, positions, model) -> Candidate:
    """Estimate, then prove (when no model instance already fails a criterion)."""
    texts = tuple(tuple(str(c) for c in s) for s in steps)
    compiled = [make_step(s) for s in texts]
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is a failing instance: inf (NaN read as
        est = estimate(compiled, positions, model)      # inf) fails bound (a) or (b) below, in one line
    cap = 2 ** UNIT_ROUNDOFF_BITS[model.dtype]
    if not est.q_attained < cap:
        return Candidate(positions, est, reason=f"bound (a) fails: at σ = {est.q_attained_at:.6g} a model instance "
                                                f"reaches |Q| = {est.q_attained:.4g} >= 1/u = {cap}")
    if not est.deviation_attained < MAX_DEVIATION:
        return Candidate(positions, est, reason=f"bound (b) fails: at σ = {est.deviation_attained_at:.6g} a model "
                                                f"instance reaches |x_T − 1| = {est.deviation_attained:.4g} >= "
                                                f"{MAX_DEVIATION}")
    points = [point_text(p) for p in est.points]
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
    raise Uncertifiable(f"{describe(name, worst.positions, model)} cannot be certified: {worst.reason}"
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
