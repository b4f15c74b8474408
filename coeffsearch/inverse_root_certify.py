"""Certificates of inverse-root schedules (:mod:`coeffsearch.inverse_roots`) by outward-rounded interval arithmetic.

Step ``k`` maps an eigenvalue by ``f_k(x) = x q_k(x)^p``. The image of ``[lo, hi]`` under a polynomial is
``[min, max]`` over the endpoints and the real critical points inside, so every step's image is
computed exactly up to outward rounding, without subdividing: the roots of ``f_k'`` and of ``q_k'``
(taken with their decimal coefficients as exact rationals) are isolated by FLINT's ball arithmetic
(python-flint ``fmpq_poly.complex_roots``, every root enclosed), and ``f_k`` and ``q_k`` are evaluated
over the endpoints and the enclosures with mpmath's ``iv``. The images of the intervals the steps
pass on cover every eigenvalue's trajectory from ``[l, u]``: each eigenvalue stays inside them.

What is proven, for every ``x ∈ [l, u]``: every intermediate ``x_k`` is positive, every factor
``q_k(x_k)`` is positive (the range of ``q_k`` over the step's input), and the final ``x_N`` lies in the
band. Then ``y_N^p x = x_N`` holds exactly (induction on ``x_{k+1} = q_k(x_k)^p x_k``) with ``y_N > 0``,
so ``|y_N x^{1/p} − 1| = |x_N^{1/p} − 1| ≤ max`` over the band, the certified root error ``δ'``: the
positivity makes the identity an enclosure of the ``Y`` factor on all of ``[l, u]`` at once. A factor
that reaches 0 is refused: the ``Y`` factor would change sign, whatever the band says.

:func:`coeffsearch.inverse_root_recheck.recheck` recomputes a certificate and proves its printed bounds again.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

import flint
import jsonschema
import mpmath
from mpmath import iv

from coeffsearch import inverse_root_registry
from coeffsearch.certify import CertificateError, decimal_down, decimal_up, iv_precision
from coeffsearch.inverse_roots import RootSchedule

DEFAULT_PREC = 200  # bits
#: the certificate's kind tag
CERT_KIND = "inverse-root-certificate"
#: "still converges": the final image of ``[l, u_max]`` stays inside ``(0, BOUNDED]`` with positive factors
BOUNDED = mpmath.mpf("1.5")
METHOD = ("outward-rounded interval arithmetic (mpmath iv) over endpoints and critical points of x q(x)^p and "
          "q(x) per step, critical points isolated by FLINT ball arithmetic (python-flint); root error from "
          "y^p x = x_N with every x_k and q_k(x_k) proven positive")


def exact(x) -> mpmath.mpf:
    """``x`` as an mpf, exactly (at the interval precision plus 10 bits: an iv end point needs no rounding)."""
    with mpmath.workprec(iv.prec + 10):
        return +mpmath.mpf(x)


def _from_arb(x) -> mpmath.mpf:
    man, exp = (int(v) for v in x.mid().man_exp())
    return mpmath.mp.make_mpf(mpmath.libmp.from_man_exp(man, exp))


def rational_poly(coeffs) -> flint.fmpq_poly:
    """The polynomial with the decimal ``coeffs`` (ascending) as exact rationals."""
    fractions = [Fraction(str(c)) for c in coeffs]
    return flint.fmpq_poly([flint.fmpq(c.numerator, c.denominator) for c in fractions])


@cache
def _real_roots(coeffs: tuple, prec: int) -> tuple:
    """Exact-binary enclosures ``(lo, hi)`` of every possibly real root of the polynomial with the rational
    coefficients ``coeffs`` (ascending, as FLINT takes them): a ball whose imaginary part may be 0 counts."""
    poly = flint.fmpq_poly([flint.fmpq(*c) for c in coeffs])
    if poly.degree() < 1:
        return ()
    old = flint.ctx.prec
    flint.ctx.prec = prec
    try:  # the parts are read at this precision too: acb.real rounds to the context's precision
        return tuple((_from_arb(r.real.lower()), _from_arb(r.real.upper()))
                     for r, _ in poly.complex_roots() if r.imag.contains(0))
    finally:
        flint.ctx.prec = old


def critical_points(poly: flint.fmpq_poly, prec: int) -> list:
    """Interval enclosures of the real roots of ``poly'``."""
    d = poly.derivative()
    coeffs = tuple((int(c.p), int(c.q)) for c in d.coeffs())
    return [iv.mpf([lo, hi]) for lo, hi in _real_roots(coeffs, prec)]


class Step:
    """One factor ``q`` with its interval coefficients and the critical points of ``q`` and ``x q^p``."""

    def __init__(self, text, p, prec):
        self.text, self.p = tuple(text), p
        self.coeffs = [iv.mpf(c) for c in self.text]
        q = rational_poly(self.text)
        self.q_critical = critical_points(q, prec)
        self.f_critical = critical_points(q ** p * flint.fmpq_poly([0, 1]), prec)

        self.slopes = [j * c for j, c in enumerate(self.coeffs) if j] or [iv.mpf(0)]

    @staticmethod
    def _horner(coeffs, x):
        acc = coeffs[-1]
        for c in reversed(coeffs[:-1]):
            acc = acc * x + c
        return acc

    def q(self, x):
        return self._horner(self.coeffs, x)

    def dq(self, x):
        return self._horner(self.slopes, x)

    def f(self, x):
        return self.q(x) ** self.p * x

    def df(self, x):
        """``f'(x) = q^{p−1} (q + p x q')``."""
        q = self.q(x)
        return q ** (self.p - 1) * (q + self.p * x * self.dq(x))


def _over_box(fn, dfn, box):
    """Enclosure of ``fn`` over a critical point's box: the direct evaluation intersected with the mean-value
    form ``fn(m) + dfn(box)(box − m)`` (both enclose it; the mean-value form's width is ``O(w²)`` at a critical
    point, the direct evaluation's ``O(w)``)."""
    m = exact((exact(box.a) + exact(box.b)) / 2)
    direct, mean_value = fn(box), fn(iv.mpf(m)) + dfn(box) * (box - m)
    return max(exact(direct.a), exact(mean_value.a)), min(exact(direct.b), exact(mean_value.b))


def _hull(fn, dfn, critical, lo, hi):
    """Proven enclosure ``(min, max)`` of ``fn`` over ``[lo, hi]`` (endpoints and the critical points inside)."""
    ends = [fn(iv.mpf(lo)), fn(iv.mpf(hi))]
    values = [(exact(v.a), exact(v.b)) for v in ends]
    for x in critical:
        if x.b >= lo and x.a <= hi:
            values.append(_over_box(fn, dfn, iv.mpf([max(exact(x.a), lo), min(exact(x.b), hi)])))
    return min(v[0] for v in values), max(v[1] for v in values)


def propagate(steps, lo, hi):
    """Rows ``{"input", "factor", "output"}`` per step (exact binary bounds); stops at the first step whose
    factor or image is not certainly positive."""
    rows = []
    for step in steps:
        factor = _hull(step.q, step.dq, step.q_critical, lo, hi)
        out = _hull(step.f, step.df, step.f_critical, lo, hi)
        rows.append({"input": (lo, hi), "factor": factor, "output": out})
        if factor[0] <= 0 or out[0] <= 0:
            break
        lo, hi = out
    return rows


def _positive(rows, n) -> bool:
    return len(rows) == n and all(r["factor"][0] > 0 and r["output"][0] > 0 for r in rows)


def _u_max(steps, lower, iterations=30):
    """Largest ``u ∈ [1, 2]`` (bisection) for which ``[l, u]`` keeps every factor and image positive and ends
    inside ``(0, 1.5]``: how far above 1 a normalization may leave an eigenvalue."""
    def holds(u):
        rows = propagate(steps, lower, u)
        return _positive(rows, len(steps)) and rows[-1]["output"][1] <= BOUNDED
    lo, hi = mpmath.mpf(1), mpmath.mpf(2)
    if not holds(lo):
        return None
    if holds(hi):
        return hi
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def certify(schedule: RootSchedule, prec: int = DEFAULT_PREC, digits: int = 20) -> dict:
    """The certificate of ``schedule`` on its interval (a JSON-ready dict); :class:`CertificateError` when a factor
    or an image is not proven positive.

    Examples:
      >>> from coeffsearch.inverse_roots import classical
      >>> cert = certify(classical(2, 12), digits=6)
      >>> cert["band"], cert["root_error"]
      (['0.999997', '1.0'], '1.15868e-6')
    """
    with iv_precision(prec), mpmath.workprec(prec):
        steps = [Step(s, schedule.p, prec) for s in schedule.steps]
        lower = exact(iv.mpf(schedule.interval[0]).a)
        upper = exact(iv.mpf(schedule.interval[1]).b)
        rows = propagate(steps, lower, upper)
        if not _positive(rows, len(steps)):
            bad = rows[-1]
            what = (f"the factor q_{len(rows)} reaches {mpmath.nstr(bad['factor'][0], 8)}"
                    if bad["factor"][0] <= 0 else f"the image reaches {mpmath.nstr(bad['output'][0], 8)}")
            raise CertificateError(f"step {len(rows)}: {what} on the step's input [{mpmath.nstr(bad['input'][0], 8)}, "
                                   f"{mpmath.nstr(bad['input'][1], 8)}], not proven positive: the Y factor "
                                   f"could change sign")
        a, b = rows[-1]["output"]
        worst = max(exact(abs(1 - iv.mpf(a)).b), exact(abs(iv.mpf(b) - 1).b))
        roots = [iv.exp(iv.log(iv.mpf(v)) / schedule.p) for v in (a, b)]
        root_error = max(exact(abs(1 - roots[0]).b), exact(abs(roots[1] - 1).b))
        u_max = _u_max(steps, lower)

        def fmt(pair):
            return [decimal_down(pair[0], digits), decimal_up(pair[1], digits)]
        return {
            "kind": CERT_KIND, "name": schedule.name, "p": schedule.p, "interval": list(schedule.interval),
            "schedule": [list(s) for s in schedule.steps], "precision_bits": prec, "digits": digits,
            "method": METHOD, "matmuls": schedule.matmuls,
            "steps": [{"step": i + 1, "input": fmt(r["input"]), "factor": fmt(r["factor"]),
                       "output": fmt(r["output"])} for i, r in enumerate(rows)],
            "band": fmt((a, b)), "worst_error": decimal_up(worst, digits),
            "root_error": decimal_up(root_error, digits),
            "u_max": None if u_max is None else decimal_down(u_max, 8),
        }


_DEC = {"type": "string", "pattern": r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$"}
_PAIR = {"type": "array", "items": _DEC, "minItems": 2, "maxItems": 2}
SCHEMA = {
    "type": "object",
    "required": ["kind", "name", "p", "interval", "schedule", "precision_bits", "digits", "method", "matmuls",
                 "steps", "band", "worst_error", "root_error", "u_max"],
    "additionalProperties": False,
    "properties": {
        "kind": {"const": CERT_KIND}, "name": {"type": "string"}, "p": {"type": "integer"},
        "interval": _PAIR, "schedule": {"type": "array", "items": {"type": "array", "items": _DEC}},
        "precision_bits": {"type": "integer", "minimum": 53, "maximum": 4096},
        "digits": {"type": "integer", "minimum": 5, "maximum": 200}, "method": {"type": "string"},
        "matmuls": {"type": "integer"}, "steps": {"type": "array", "items": {"type": "object"}},
        "band": _PAIR, "worst_error": _DEC, "root_error": _DEC, "u_max": {"anyOf": [_DEC, {"type": "null"}]},
    },
}


def schema_problem(data) -> str | None:
    """The first field of ``data`` that does not have the certificate's shape, in one line (None: well formed)."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMA).iter_errors(data))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"field {where}: {error.message[:200]}"


def differences(old, new, where=""):
    """Paths at which two JSON values differ, every leaf compared exactly: ``[(path, old, new)]``."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new))
                for d in differences(old.get(k), new.get(k), f"{where}/{k}" if where else k)]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in differences(a, b, f"{where}/{i}")]
    return [] if old == new else [(where, old, new)]


def check_registered_name(schedule: RootSchedule):
    """A certificate named after a registered inverse-root schedule must state that schedule's coefficients."""
    try:
        published = inverse_root_registry.get(schedule.name, schedule.p)
    except KeyError:
        return
    if published.steps != schedule.steps or published.interval != schedule.interval:
        raise CertificateError(f"field 'name': {schedule.name!r} (p = {schedule.p}) is a registered schedule with "
                               f"other coefficients or another interval than the stated ones")
