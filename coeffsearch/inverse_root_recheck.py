"""Re-checking an inverse-root certificate: recomputed field by field, then every printed bound proven again.

:func:`recheck` first recomputes the certificate (:func:`coeffsearch.inverse_root_certify.certify`) and
refuses the first field that differs, so one changed digit anywhere fails. :func:`check_bounds` then proves
each printed bound with an independent enclosure: 300 bits (or 100 above the certificate's precision),
the critical points isolated afresh at that precision, ``q`` summed from explicit powers instead of
Horner's rule, the mean-value form ``g(m) + g'(X)(X − m)`` over each critical point's enclosure, and the
root error checked without a root: ``|x^{1/p} − 1| ≤ δ'`` on ``[a, b]`` is ``(1 − δ')^p ≤ a`` and
``b ≤ (1 + δ')^p``. A printed pair must contain its enclosure, so a bound a hair on the wrong side fails.
"""

from __future__ import annotations

import json
from fractions import Fraction

import flint
import mpmath
from mpmath import iv

from coeffsearch.certify import CertificateError, iv_precision
from coeffsearch.inverse_root_certify import (
    BOUNDED,
    certify,
    check_registered_name,
    critical_points,
    differences,
    exact,
    rational_poly,
    schema_problem,
)
from coeffsearch.inverse_roots import KIND, RootSchedule
from foundation.polynomial import ScheduleError

RECHECK_PREC = 300  # bits: at least 100 above the certificate's


def _fraction(x) -> Fraction:
    sign, man, exp, _ = mpmath.mpf(x)._mpf_
    value = Fraction(int(man)) * Fraction(2) ** int(exp)
    return -value if sign else value


class _Independent:
    """One step evaluated another way: explicit powers, the mean-value form at critical points."""

    def __init__(self, text, p, prec):
        self.p = p
        self.coeffs = [iv.mpf(c) for c in text]
        q = rational_poly(text)
        self.q_critical = critical_points(q, prec)
        self.f_critical = critical_points(q ** p * flint.fmpq_poly([0, 1]), prec)

    def q(self, x):
        terms = [c * x ** j for j, c in enumerate(self.coeffs)]
        acc = terms[-1]
        for t in reversed(terms[:-1]):
            acc = acc + t
        return acc

    def dq(self, x):
        return sum((j * c * x ** (j - 1) for j, c in enumerate(self.coeffs) if j), iv.mpf(0))

    def f(self, x):
        return x * self.q(x) ** self.p

    def df(self, x):
        q = self.q(x)
        return q ** (self.p - 1) * (q + self.p * x * self.dq(x))

    def image(self, fn, dfn, critical, lo, hi):
        """Enclosure of ``fn([lo, hi])``: endpoints, and the mean-value form over each critical point inside."""
        values = [fn(iv.mpf(lo)), fn(iv.mpf(hi))]
        for x in critical:
            if x.b >= lo and x.a <= hi:
                box = iv.mpf([max(exact(x.a), lo), min(exact(x.b), hi)])
                m = exact((exact(box.a) + exact(box.b)) / 2)
                values.append(fn(iv.mpf(m)) + dfn(box) * (box - m))
        return min(exact(v.a) for v in values), max(exact(v.b) for v in values)


def check_bounds(cert: dict, prec: int | None = None) -> list[str]:
    """One line per printed bound of ``cert`` that the independent enclosure does not prove (empty: all hold)."""
    prec = max(RECHECK_PREC, cert["precision_bits"] + 100) if prec is None else prec
    problems: list[str] = []

    def contains(stated, a, b, where):
        if Fraction(stated[0]) > _fraction(a) or Fraction(stated[1]) < _fraction(b):
            problems.append(f"{where}: stated [{stated[0]}, {stated[1]}] does not contain the {prec}-bit enclosure "
                            f"[{mpmath.nstr(a, 25)}, {mpmath.nstr(b, 25)}]")

    p = cert["p"]
    with iv_precision(prec), mpmath.workprec(prec):
        steps = [_Independent(tuple(s), p, prec) for s in cert["schedule"]]
        if len(cert["steps"]) != len(steps):
            return [f"field 'steps': {len(cert['steps'])} rows for {len(steps)} steps"]
        lower = exact(iv.mpf(cert["interval"][0]).a)
        a, b = lower, exact(iv.mpf(cert["interval"][1]).b)
        for i, (step, row) in enumerate(zip(steps, cert["steps"], strict=True)):
            contains(row["input"], a, b, f"step {i + 1} input")
            contains(row["factor"], *step.image(step.q, step.dq, step.q_critical, a, b), f"step {i + 1} factor")
            a, b = step.image(step.f, step.df, step.f_critical, a, b)
            contains(row["output"], a, b, f"step {i + 1} output")
        contains(cert["band"], a, b, "field 'band'")
        delta = iv.mpf(cert["root_error"])
        if not (exact(((1 - delta) ** p).b) <= a and exact(((1 + delta) ** p).a) >= b):
            problems.append(f"field 'root_error': (1 ∓ {cert['root_error']})^{p} does not enclose the {prec}-bit band "
                            f"[{mpmath.nstr(a, 25)}, {mpmath.nstr(b, 25)}]: not an upper bound")
        if cert["u_max"] is not None:
            a, b = lower, exact(iv.mpf(cert["u_max"]).b)
            for step in steps:
                factor = step.image(step.q, step.dq, step.q_critical, a, b)
                a, b = step.image(step.f, step.df, step.f_critical, a, b)
                if factor[0] <= 0 or a <= 0:
                    break
            if not (factor[0] > 0 and a > 0 and b <= BOUNDED):
                problems.append(f"field 'u_max': [l, {cert['u_max']}] is not proven to keep every factor positive "
                                f"and end inside (0, {BOUNDED}]")
    return problems


def recheck(data: dict, source: str = "certificate") -> dict:
    """Recompute the certificate ``data`` states, refuse the first field that differs, then prove every printed
    bound again (:func:`check_bounds`): :class:`CertificateError` in one line (fail closed); a malformed
    certificate raises :class:`ScheduleError`."""
    problem = schema_problem(data)
    if problem is not None:
        raise ScheduleError(f"{source}: {problem}")
    schedule = RootSchedule.from_dict({**data, "kind": KIND, "steps": data["schedule"]}, source)
    check_registered_name(schedule)
    fresh = certify(schedule, data["precision_bits"], data["digits"])
    diffs = differences(data, fresh)
    if diffs:
        where, old, new = diffs[0]
        more = f" ({len(diffs) - 1} more difference(s))" if len(diffs) > 1 else ""
        raise CertificateError(f"field '{where}': stated {json.dumps(old)} but the recomputation gives "
                               f"{json.dumps(new)}{more}")
    problems = check_bounds(fresh)
    if problems:
        more = f" ({len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CertificateError(f"{problems[0]}{more}")
    return fresh
