"""Rigorous images of intervals under a schedule, by outward-rounded interval arithmetic.

The image of ``[lo, hi]`` under an odd polynomial is ``[min, max]`` of ``p`` over the endpoints
and the interior critical points. For degree 3 the critical point solves a linear equation in
``y = x²``, for degree 5 a quadratic; both are enclosed with mpmath's ``iv`` (outward rounding),
and ``p`` is evaluated over the enclosures, so every stated bound is proven. Propagating the image
step by step needs no subdivision of the composed polynomial. A comparison that cannot be decided
(an enclosure straddling an endpoint) widens the result rather than guessing: certificates fail
closed.
"""

from __future__ import annotations

import contextlib

import mpmath
from mpmath import iv

from .polynomial import odd_eval


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
    with mpmath.workprec(iv.prec + 40):
        x = mpmath.mpf(x)
        s = mpmath.nstr(x, digits, min_fixed=-4, max_fixed=6)
        v = mpmath.mpf(s)
        if (v - x) * direction >= 0:
            return s
        if x == 0:
            return "0"
        exp = int(mpmath.floor(mpmath.log10(abs(x))))
        step = mpmath.mpf(10) ** (exp - digits + 1)
        return mpmath.nstr(v + direction * step, digits + 1, min_fixed=-4, max_fixed=6)


def _critical_enclosures(coeffs):
    """Enclosures of the positive critical points of ``p`` (degree 3 or 5)."""
    if len(coeffs) == 1:
        return []
    if len(coeffs) == 2:  # c0 + 3 c1 y = 0
        ys = [-coeffs[0] / (3 * coeffs[1])]
    elif len(coeffs) == 3:  # 5 c2 y² + 3 c1 y + c0 = 0
        c0, c1, c2 = coeffs
        disc = 9 * c1 * c1 - 20 * c0 * c2
        if disc.b < 0:
            return []
        root = iv.sqrt(iv.mpf([max(_exact(disc.a), 0), _exact(disc.b)]))
        ys = [(-3 * c1 - root) / (10 * c2), (-3 * c1 + root) / (10 * c2)]
    else:
        raise CertificateError(f"certification covers degrees 3 and 5; got degree {2 * len(coeffs) - 1}")
    out = []
    for y in ys:
        if y.b <= 0:
            continue
        out.append(iv.sqrt(iv.mpf([max(_exact(y.a), 0), _exact(y.b)])))
    return out


def step_image(coeffs, lo, hi):
    """Proven enclosure ``[a, b]`` of ``p([lo, hi])`` and the critical points that entered it."""
    lo_i, hi_i = iv.mpf(lo), iv.mpf(hi)
    values = [odd_eval(coeffs, lo_i), odd_eval(coeffs, hi_i)]
    used = []
    for x in _critical_enclosures(coeffs):
        if x.b < lo_i.a or x.a > hi_i.b:
            continue
        clipped = iv.mpf([max(_exact(x.a), _exact(lo_i.a)), min(_exact(x.b), _exact(hi_i.b))])
        values.append(odd_eval(coeffs, clipped))
        used.append(x)
    a = min(_exact(v.a) for v in values)
    b = max(_exact(v.b) for v in values)
    return a, b, used


def propagate(coeffs_list, lo, hi):
    """Per-step enclosures of the images of ``[lo, hi]``."""
    rows = []
    for i, coeffs in enumerate(coeffs_list):
        a, b, used = step_image(coeffs, lo, hi)
        rows.append({"step": i + 1, "input": (lo, hi), "critical_points": used, "output": (a, b)})
        lo, hi = a, b
    return rows


def _iv_coeffs(steps):
    return [[iv.mpf(str(c)) for c in step] for step in steps]


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


def certify(steps, lower, upper=1, name: str = "", prec: int = DEFAULT_PREC, digits: int = 20) -> dict:
    """A re-checkable certificate for ``steps`` on ``[lower, upper]`` (decimal strings, outward)."""
    lower_text, upper_text = str(lower), str(upper)
    with mpmath.workprec(prec):
        if not 0 < mpmath.mpf(lower_text) < mpmath.mpf(upper_text):
            raise CertificateError(f"need 0 < lower < upper, got lower = {lower_text}, upper = {upper_text}")
    with iv_precision(prec):
        lower = _exact(iv.mpf(lower_text).a)  # outward: the decimal interval's enclosure
        upper = _exact(iv.mpf(upper_text).b)
        cs = _iv_coeffs(steps)
        rows = propagate(cs, lower, upper)
        below = propagate(cs, mpmath.mpf(0), lower)
        u_max = overshoot_limit(cs, lower, upper)
        band = rows[-1]["output"]
        worst = max(abs(1 - band[0]), abs(1 - band[1]))
        fmt = lambda ab: [decimal_down(ab[0], digits), decimal_up(ab[1], digits)]
        return {
            "kind": "certificate",
            "name": name,
            "schedule": [[str(c) for c in s] for s in steps],
            "interval": [lower_text, upper_text],
            "precision_bits": prec,
            "method": "outward-rounded interval arithmetic (mpmath iv): endpoints and critical points per step",
            "steps": [{"step": r["step"], "input": fmt(r["input"]),
                       "critical_points": [fmt((x.a, x.b)) for x in r["critical_points"]],
                       "output": fmt(r["output"])} for r in rows],
            "band": fmt(band),
            "worst_error": decimal_up(worst, digits),
            "below_lower": {"input": ["0", lower_text], "output": fmt(below[-1]["output"])},
            "overshoot": {"criterion": f"final image of [lower, u] inside (0, {BOUNDED}]",
                          "u_max": None if u_max is None else decimal_down(u_max, 8)},
        }


def recheck(cert: dict, prec: int | None = None) -> dict:
    """Recompute a certificate; raise :class:`CertificateError` unless every stated bound holds."""
    for key in ("schedule", "interval", "steps", "band"):
        if key not in cert:
            raise CertificateError(f"certificate lacks '{key}'")
    lower, upper = cert["interval"]
    fresh = certify(cert["schedule"], lower, upper, cert.get("name", ""), prec or cert.get("precision_bits",
                                                                                             DEFAULT_PREC))
    with mpmath.workprec(400):
        for old, new in zip(cert["steps"], fresh["steps"]):
            if mpmath.mpf(new["output"][0]) < mpmath.mpf(old["output"][0]) or \
                    mpmath.mpf(new["output"][1]) > mpmath.mpf(old["output"][1]):
                raise CertificateError(f"step {old['step']}: stated image {old['output']} does not contain "
                                       f"the recomputed enclosure {new['output']}")
    return fresh
