"""Rigorous images of intervals under a schedule, by outward-rounded interval arithmetic.

The image of ``[lo, hi]`` under an odd polynomial ``p`` is ``[min, max]`` of ``p`` over the
endpoints and the interior critical points. The critical points are the positive square roots
of the positive real roots of ``q(y) = Σ_j (2j+1) c_j y^j`` (``p'(x) = q(x²)``), for any degree:
the roots of ``q``, with its coefficients taken as the exact rationals the decimal strings state,
are isolated rigorously by FLINT's ball arithmetic (python-flint ``fmpq_poly.complex_roots``, which
returns disjoint enclosures of *all* roots); every enclosure that may be real enters. ``p`` is then
evaluated over the enclosures with mpmath's ``iv`` (outward rounding), so every stated bound is
proven. Propagating the image step by step needs no subdivision of the composed polynomial. A
comparison that cannot be decided (an enclosure straddling an endpoint) widens the result rather
than guessing: certificates fail closed.

A :class:`Certificate` is a typed object with ``to_json``/``from_json`` (validated against a JSON
schema); :func:`recheck` recomputes every stated field from the coefficients and rejects any
difference.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import cache

import flint
import jsonschema
import mpmath
from mpmath import iv

from coeffsearch import registry
from foundation.commandline import FileRefused, parse_json
from foundation.polynomial import MAX_SCHEDULE_STEPS, MAX_STEP_COEFFICIENTS, NAME_PATTERN, odd_eval

DEFAULT_PREC = 200  # bits (about 60 digits)
BOUNDED = mpmath.mpf("1.5")  # "still converges": the final image stays inside (0, BOUNDED]


class CertificateError(ValueError):
    """A certificate that does not re-check, or a schedule that cannot be certified."""


@contextlib.contextmanager
def iv_precision(bits: int):
    """Scope ``iv.prec`` (mpmath's interval context keeps a global precision of its own)."""
    old = iv.prec
    iv.prec = bits
    try:
        yield
    finally:
        iv.prec = old


def _exact(x) -> mpmath.mpf:
    with mpmath.workprec(iv.prec + 10):
        return +mpmath.mpf(x)


def decimal_down(x, digits: int) -> str:
    """A decimal string ``≤ x`` with ``digits`` significant digits."""
    return _decimal(x, digits, -1)


def decimal_up(x, digits: int) -> str:
    """A decimal string ``≥ x`` with ``digits`` significant digits."""
    return _decimal(x, digits, +1)


def _decimal(x, digits, direction):
    """The nearest ``digits``-digit decimal, moved one unit outward when it lies on the wrong side of
    ``x``; the side is decided exactly (the decimal and the binary ``x`` compared as rationals)."""
    with mpmath.workprec(max(iv.prec, mpmath.mp.prec) + 40):
        x = mpmath.mpf(x)
        exact = _fraction(x)
        s = mpmath.nstr(x, digits, min_fixed=-4, max_fixed=6)
        if (Fraction(s) - exact) * direction >= 0:
            return s
        exp = int(mpmath.floor(mpmath.log10(abs(x))))
        step = Fraction(10) ** (exp - digits + 1)
        for k in range(1, 4):  # one unit of the last digit suffices; the loop only guards nstr's rounding
            moved = Fraction(s) + direction * k * step
            t = mpmath.nstr(mpmath.mpf(moved.numerator) / moved.denominator, digits + 1, min_fixed=-4, max_fixed=6)
            if (Fraction(t) - exact) * direction >= 0:
                return t
        raise CertificateError(f"no outward decimal found for {x}")  # unreachable


def _fraction(x) -> Fraction:
    """The exact rational value of a binary ``mpf`` (not rounded to the working precision first)."""
    sign, man, exp, _ = (x if isinstance(x, mpmath.mpf) else _exact(x))._mpf_  # man_exp drops the sign
    value = Fraction(int(man)) * Fraction(2) ** int(exp)
    return -value if sign else value


def _from_arb(x) -> mpmath.mpf:
    """The exact binary value of an arb point (no rounding)."""
    man, exp = (int(v) for v in x.mid().man_exp())
    return mpmath.mp.make_mpf(mpmath.libmp.from_man_exp(man, exp))


@cache
def _critical_ys(step: tuple, prec: int) -> tuple:
    """Exact-binary enclosures ``(lo, hi)`` of the positive real roots of ``q(y) = Σ (2j+1) c_j y^j``.

    ``step`` holds the coefficients as decimal strings (taken as exact rationals). FLINT isolates
    every complex root in a ball; a root whose imaginary part is not certainly nonzero is kept as
    possibly real (its real part enters), so no critical point can be missed.
    """
    if len(step) < 2:
        return ()
    q = [Fraction(str(c)) * (2 * j + 1) for j, c in enumerate(step)]
    poly = flint.fmpq_poly([flint.fmpq(c.numerator, c.denominator) for c in q])
    old = flint.ctx.prec
    flint.ctx.prec = prec
    try:
        roots = poly.complex_roots()
    finally:
        flint.ctx.prec = old
    out = []
    for root, _ in roots:
        if not root.imag.contains(0):
            continue
        lo, hi = (_from_arb(x) for x in (root.real.lower(), root.real.upper()))
        if hi > 0:
            out.append((max(lo, mpmath.mpf(0)), hi))
    return tuple(out)


def _critical_enclosures(step, prec):
    """Interval enclosures of the positive critical points ``x = √y`` of ``p`` (any odd degree)."""
    return [iv.sqrt(iv.mpf([lo, hi])) for lo, hi in _critical_ys(tuple(str(c) for c in step), prec)]


@dataclass(frozen=True)
class _Step:
    """One step: its decimal coefficients, their interval enclosures, and its critical points."""

    text: tuple
    coeffs: list = field(compare=False)
    critical: list = field(compare=False)


def _steps(steps, prec) -> list:
    out = []
    for step in steps:
        text = tuple(str(c) for c in step)
        out.append(_Step(text, [iv.mpf(c) for c in text], _critical_enclosures(text, prec)))
    return out


def step_image(step: _Step, lo, hi):
    """Proven enclosure ``[a, b]`` of ``p([lo, hi])`` and the critical points that entered it."""
    lo_i, hi_i = iv.mpf(lo), iv.mpf(hi)
    values = [odd_eval(step.coeffs, lo_i), odd_eval(step.coeffs, hi_i)]
    used = []
    for x in step.critical:
        if x.b < lo_i.a or x.a > hi_i.b:
            continue
        clipped = iv.mpf([max(_exact(x.a), _exact(lo_i.a)), min(_exact(x.b), _exact(hi_i.b))])
        values.append(odd_eval(step.coeffs, clipped))
        used.append(x)
    a = min(_exact(v.a) for v in values)
    b = max(_exact(v.b) for v in values)
    return a, b, used


def propagate(steps, lo, hi, progress=None):
    """Per-step enclosures of the images of ``[lo, hi]`` (``steps`` from :func:`_steps`); ``progress``: a bar
    updated once per step (:func:`foundation.commandline.progress`)."""
    rows = []
    for i, step in enumerate(steps):
        a, b, used = step_image(step, lo, hi)
        rows.append({"step": i + 1, "input": (lo, hi), "critical_points": used, "output": (a, b)})
        lo, hi = a, b
        if progress is not None:
            progress.update(1)
    return rows


def _worst(band) -> mpmath.mpf:
    """Upper end of the enclosure of ``max |1 − x|`` over ``x ∈ [band[0], band[1]]`` (``iv``, outward at
    ``iv.prec``; a subtraction in mpmath's default 53-bit context would round it to nearest, possibly down)."""
    return max(_exact(abs(1 - iv.mpf(band[0])).b), _exact(abs(iv.mpf(band[1]) - 1).b))


def overshoot_limit(coeffs_list, lower, start, iterations: int = 40):
    """Largest ``u ∈ [start, 2]`` (bisection) whose final image of ``[lower, u]`` stays in ``(0, 1.5]``."""
    def bounded(u):
        a, b = lower, u
        for coeffs in coeffs_list:
            a, b, _ = step_image(coeffs, a, b)
            if b > 10:  # clearly diverging
                return False
        return a > 0 and b <= BOUNDED

    lo, hi = mpmath.mpf(start), mpmath.mpf(2)
    if not bounded(lo):
        return None
    if bounded(hi):
        return hi
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if bounded(mid) else (lo, mid)
    return lo


METHOD = ("outward-rounded interval arithmetic (mpmath iv): endpoints and critical points per step; "
          "critical points isolated as roots of p' by FLINT ball arithmetic (python-flint)")
_DEC = {"type": "string", "pattern": r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$"}
_PAIR = {"type": "array", "items": _DEC, "minItems": 2, "maxItems": 2}
SCHEMA = {
    "type": "object",
    "required": ["kind", "name", "schedule", "interval", "precision_bits", "method", "steps", "band",
                 "worst_error", "below_lower", "overshoot"],
    "properties": {
        "kind": {"const": "certificate"},
        "name": {"type": "string", "pattern": f"^$|^(?:{NAME_PATTERN.pattern})$"},
        "schedule": {"type": "array", "minItems": 1, "maxItems": MAX_SCHEDULE_STEPS,
                     "items": {"type": "array", "minItems": 1, "maxItems": MAX_STEP_COEFFICIENTS, "items": _DEC}},
        "interval": _PAIR,
        "precision_bits": {"type": "integer", "minimum": 53, "maximum": 4096},
        "digits": {"type": "integer", "minimum": 5, "maximum": 200},
        "method": {"type": "string"},
        "steps": {"type": "array", "items": {
            "type": "object", "required": ["step", "input", "critical_points", "output"],
            "properties": {"step": {"type": "integer", "minimum": 1}, "input": _PAIR,
                           "critical_points": {"type": "array", "items": _PAIR}, "output": _PAIR}}},
        "band": _PAIR,
        "worst_error": _DEC,
        "below_lower": {"type": "object", "required": ["input", "output"],
                        "properties": {"input": _PAIR, "output": _PAIR}},
        "overshoot": {"type": "object", "required": ["criterion", "u_max"],
                      "properties": {"criterion": {"type": "string"},
                                     "u_max": {"anyOf": [_DEC, {"type": "null"}]}}},
    },
}


class CertificateFormatError(CertificateError):
    """A certificate file that does not have the certificate's shape: one line per bad field."""

    def __init__(self, source: str, lines: list):
        self.lines = [f"{source}: {line}" for line in lines]
        super().__init__("; ".join(self.lines))

    @property
    def line(self) -> str:
        """The one line a command prints: the first bad field and how many more there are."""
        more = len(self.lines) - 1
        return self.lines[0] + (f" ({more} more bad field(s))" if more else "")


def parse_certificate_json(text: str | bytes, source: str) -> object:
    """JSON text parsed by the one reader (:func:`foundation.commandline.parse_json`: nesting depth and
    integer length bounded); :class:`CertificateFormatError` in one line otherwise."""
    try:
        return parse_json(text, source)
    except FileRefused as exc:
        raise CertificateFormatError(source, [str(exc).removeprefix(f"{source}: ")]) from None


def _schema_lines(data) -> list:
    lines = []
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for err in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        if err.validator == "pattern" and where == "name":
            why = f"{ascii(err.instance)[:120]} is not allowed as a name (see foundation.polynomial.NAME_PATTERN)"
        elif err.validator == "pattern":
            why = f"{err.instance!r} is not a decimal number"
        elif err.validator == "const":
            why = f"must be {err.validator_value!r}, got {err.instance!r}"
        elif (err.validator in ("minItems", "maxItems")
              and err.schema.get("minItems") == 2 == err.schema.get("maxItems")):
            why = f"must be a pair [lower, upper], got {err.instance!r}"[:240]
        elif err.validator == "maxItems":
            why = f"{len(err.instance)} items; at most {err.validator_value}"
        else:
            why = err.message if len(err.message) <= 200 else err.message[:200] + " …"
        lines.append(f"field '{where}': {why}")
    return lines


@dataclass(frozen=True)
class Certificate:
    """A re-checkable certificate of a schedule's images on ``[lower, upper]`` (decimal strings, outward)."""

    name: str
    schedule: list  # [[coefficient strings]] per step
    interval: list  # [lower, upper] as given
    precision_bits: int
    method: str
    steps: list  # [{"step", "input", "critical_points", "output"}]
    band: list
    worst_error: str
    below_lower: dict
    overshoot: dict
    digits: int = 20
    kind: str = "certificate"

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_json(cls, data, source: str = "certificate") -> Certificate:
        """From JSON text or a parsed object; :class:`CertificateFormatError` lists every bad field."""
        if isinstance(data, (str, bytes)):
            data = parse_certificate_json(data, source)
        lines = _schema_lines(data)
        if lines:
            raise CertificateFormatError(source, lines)
        known = set(cls.__dataclass_fields__)
        extra = sorted(set(data) - known)
        if extra:
            raise CertificateFormatError(source, [f"field '{k}': not a certificate field" for k in extra])
        return cls(**data)

    # read-only mapping access, so readers of the JSON layout (cert["band"]) keep working
    def __getitem__(self, key):
        return self.to_dict()[key]

    def get(self, key, default=None):
        return self.to_dict().get(key, default)


def certify(steps, lower, upper=1, name: str = "", prec: int = DEFAULT_PREC, digits: int = 20,
            progress=None) -> Certificate:
    """A re-checkable certificate for ``steps`` on ``[lower, upper]`` (any odd degree); ``progress``: a bar
    updated once per step of the two propagations (``2 len(steps)`` in all).

    Every bound is rounded outward: the schedule maps every singular value in ``[lower, upper]``
    into ``band``, and :func:`recheck` recomputes the certificate from its JSON.

    Examples:
      >>> from coeffsearch import get
      >>> from coeffsearch.certify import certify, recheck
      >>> cert = certify(get("polar-express-5").steps, "1e-3", digits=6)
      >>> cert.band, cert.worst_error
      (['0.858872', '1.14113'], '0.141128')
      >>> recheck(cert.to_json()).band
      ['0.858872', '1.14113']
    """
    lower_text, upper_text = str(lower), str(upper)
    if len(steps) > MAX_SCHEDULE_STEPS or any(len(s) > MAX_STEP_COEFFICIENTS for s in steps):
        raise CertificateError(f"a schedule has at most {MAX_SCHEDULE_STEPS} steps of at most "
                               f"{MAX_STEP_COEFFICIENTS} coefficients, got {len(steps)} steps")
    with mpmath.workprec(prec):
        if not 0 < mpmath.mpf(lower_text) < mpmath.mpf(upper_text):
            raise CertificateError(f"need 0 < lower < upper, got lower = {lower_text}, upper = {upper_text}")
    with iv_precision(prec):
        lower = _exact(iv.mpf(lower_text).a)  # outward: the decimal interval's enclosure
        upper = _exact(iv.mpf(upper_text).b)
        cs = _steps(steps, prec)
        rows = propagate(cs, lower, upper, progress)
        below = propagate(cs, mpmath.mpf(0), lower, progress)
        u_max = overshoot_limit(cs, lower, upper)
        band = rows[-1]["output"]
        worst = _worst(band)
        def fmt(ab):
            return [decimal_down(ab[0], digits), decimal_up(ab[1], digits)]
        return Certificate(
            name=name, schedule=[[str(c) for c in s] for s in steps], interval=[lower_text, upper_text],
            precision_bits=prec, method=METHOD,
            steps=[{"step": r["step"], "input": fmt(r["input"]),
                    "critical_points": [fmt((x.a, x.b)) for x in r["critical_points"]],
                    "output": fmt(r["output"])} for r in rows],
            band=fmt(band), worst_error=decimal_up(worst, digits),
            below_lower={"input": ["0", lower_text], "output": fmt(below[-1]["output"])},
            overshoot={"criterion": f"final image of [lower, u] inside (0, {BOUNDED}]",
                       "u_max": None if u_max is None else decimal_down(u_max, 8)},
            digits=digits)


def _differences(old, new, where=""):
    """Paths at which two JSON values differ (every leaf compared exactly)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            out += _differences(old.get(k), new.get(k), f"{where}/{k}" if where else k)
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [(where, old, new)]
        return [d for i, (a, b) in enumerate(zip(old, new, strict=False)) for d in _differences(a, b, f"{where}/{i}")]
    return [] if old == new else [(where, old, new)]


def _check_name(cert: Certificate):
    """A certificate named after a registered schedule (literal or recipe) must state that schedule's
    coefficients (its first steps, or one polynomial repeated): a label cannot be moved to other
    coefficients."""
    try:
        published = registry.get(cert.name).steps  # a recipe schedule's computed steps too
    except KeyError:
        return  # a file's own name: a free label
    stated = [tuple(step) for step in cert.schedule]
    n = len(stated)
    prefix = [tuple(step) for step in published[:n]]
    repeated = len(set(published)) == 1 and set(stated) == {tuple(published[0])}
    if stated != prefix and not repeated:
        raise CertificateError(f"field 'name': {cert.name!r} is a published schedule with other coefficients "
                               f"than the stated ones")


RECHECK_PREC = 300  # bits: the independent re-check's precision, at least 100 bits above the certificate's


def _power_eval(coeffs, x):
    """``Σ_j c_j x^{2j+1}`` by explicit powers summed from the highest degree (another order than
    :func:`odd_eval`'s Horner scheme, so one evaluation's mistake is not repeated by the other)."""
    terms = [c * x ** (2 * j + 1) for j, c in enumerate(coeffs)]
    acc = terms[-1]
    for t in reversed(terms[:-1]):
        acc = acc + t
    return acc


def _mean_value_eval(coeffs, x):
    """``p(X) ⊆ p(m) + p'(X)(X − m)`` (``m`` the midpoint of ``X``): the mean-value form, whose width near a
    critical point is ``O(w²)`` where a direct evaluation's is ``O(w)``."""
    m = _exact((_exact(x.a) + _exact(x.b)) / 2)
    slope = sum((c * (2 * j + 1) * x ** (2 * j) for j, c in enumerate(coeffs)), iv.mpf(0))  # p'(X)
    return _power_eval(coeffs, iv.mpf(m)) + slope * (x - m)


def _independent_image(coeffs, critical, lo, hi):
    """Enclosure of ``p([lo, hi])``: :func:`_power_eval` at the endpoints, :func:`_mean_value_eval` over the
    critical points inside."""
    values = [_power_eval(coeffs, iv.mpf(lo)), _power_eval(coeffs, iv.mpf(hi))]
    for x in critical:
        if x.b >= lo and x.a <= hi:
            values.append(_mean_value_eval(coeffs, iv.mpf([max(_exact(x.a), lo), min(_exact(x.b), hi)])))
    return min(_exact(v.a) for v in values), max(_exact(v.b) for v in values)


def check_upper_bounds(cert: Certificate, prec: int | None = None) -> list:
    """Every printed bound of ``cert`` against an independent enclosure: ``prec`` bits (default 300, or 100
    above the certificate's), powers instead of Horner, the stated interval propagated afresh. A printed
    interval must contain the enclosure (its lower end ``≤``, its upper end ``≥``), the worst error must be
    ``≥`` the enclosure of ``max |1 − x|`` over the final image, and ``[l, u_max]`` must map into
    ``(0, 1.5]``. Returns one line per bound not proven (empty: every printed digit is on the safe side)."""
    prec = max(RECHECK_PREC, cert.precision_bits + 100) if prec is None else prec  # finer than the certificate
    problems = []

    def contains(stated, a, b, where):
        if Fraction(stated[0]) > _fraction(a):
            problems.append(f"{where}: stated lower bound {stated[0]} is above the {prec}-bit enclosure "
                            f"{mpmath.nstr(a, 25)}")
        if Fraction(stated[1]) < _fraction(b):
            problems.append(f"{where}: stated upper bound {stated[1]} is below the {prec}-bit enclosure "
                            f"{mpmath.nstr(b, 25)}")

    with iv_precision(prec), mpmath.workprec(prec):
        steps = [([iv.mpf(c) for c in step], [iv.sqrt(iv.mpf([a, b])) for a, b in _critical_ys(tuple(step), prec)])
                 for step in cert.schedule]
        lo, hi = _exact(iv.mpf(cert.interval[0]).a), _exact(iv.mpf(cert.interval[1]).b)
        a, b = lo, hi
        if len(cert.steps) != len(steps):
            return [f"field 'steps': {len(cert.steps)} step images for {len(steps)} steps"]
        for i, ((coeffs, critical), row) in enumerate(zip(steps, cert.steps, strict=True)):
            contains(row["input"], a, b, f"step {i + 1} input")
            for x in critical:
                if x.a > a and x.b < b and not any(Fraction(p[0]) <= _fraction(x.a) and _fraction(x.b) <= Fraction(p[1])
                                                   for p in row["critical_points"]):
                    problems.append(f"step {i + 1}: the critical point near {mpmath.nstr(x.a, 20)} is in no stated "
                                    f"enclosure")
            a, b = _independent_image(coeffs, critical, a, b)
            contains(row["output"], a, b, f"step {i + 1} output")
        contains(cert.band, a, b, "field 'band'")
        worst = max(_exact(abs(iv.mpf(a) - 1).b), _exact(abs(iv.mpf(b) - 1).b))
        if Fraction(cert.worst_error) < _fraction(worst):
            problems.append(f"field 'worst_error': stated {cert.worst_error} is below the {prec}-bit enclosure of "
                            f"max |1 - p|, {mpmath.nstr(worst, 25)}: not an upper bound")
        a, b = mpmath.mpf(0), lo
        for coeffs, critical in steps:
            a, b = _independent_image(coeffs, critical, a, b)
        contains(cert.below_lower["output"], a, b, "field 'below_lower/output'")
        u_max = cert.overshoot.get("u_max")
        if u_max is not None:
            a, b = lo, _exact(iv.mpf(u_max).b)
            for coeffs, critical in steps:
                a, b = _independent_image(coeffs, critical, a, b)
            if not (a > 0 and b <= BOUNDED):
                problems.append(f"field 'overshoot/u_max': the {prec}-bit image of [lower, {u_max}] is "
                                f"[{mpmath.nstr(a, 12)}, {mpmath.nstr(b, 12)}], not inside (0, {BOUNDED}]")
    return problems


def recheck(cert, source: str = "certificate") -> Certificate:
    """Recompute a certificate from its schedule, interval, precision and digits, then check every printed
    bound against an independent enclosure (:func:`check_upper_bounds`: 300 bits, another evaluation
    order); raise :class:`CertificateError` on any stated field that differs from the recomputed one or a
    bound the independent enclosure does not prove (fail closed).

    ``cert``: a :class:`Certificate`, its JSON text or the parsed object (malformed input raises
    :class:`CertificateFormatError`).
    """
    if not isinstance(cert, Certificate):
        cert = Certificate.from_json(cert, source)
    _check_name(cert)
    try:
        fresh = certify(cert.schedule, *cert.interval, cert.name, cert.precision_bits, cert.digits)
    except (ValueError, ZeroDivisionError) as exc:
        raise CertificateError(f"the stated schedule and interval cannot be certified: {exc}") from None
    diffs = _differences(cert.to_dict(), fresh.to_dict())
    if diffs:
        where, old, new = diffs[0]
        parts = where.split("/")
        if parts[0] == "steps" and len(parts) > 1:
            label = f"step {int(parts[1]) + 1}" + (f" {'/'.join(parts[2:])}" if len(parts) > 2 else "")
        else:
            label = f"field '{where}'"
        others = sorted({d[0].split("/")[0] for d in diffs[1:]} - {parts[0]})
        more = (f" ({len(diffs) - 1} more difference(s)" + (f", in {', '.join(others)}" if others else "") + ")"
                if len(diffs) > 1 else "")
        raise CertificateError(f"{label}: stated {json.dumps(old)} but the recomputation gives {json.dumps(new)}{more}")
    problems = check_upper_bounds(cert)  # the recomputation agrees; now prove its bounds independently
    if problems:
        more = f" ({len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CertificateError(f"{problems[0]}{more}")
    return fresh
