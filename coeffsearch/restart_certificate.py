"""Restart certificates: JSON that states a schedule's restart positions, the partition and the bounds.

A certificate (:func:`certificate`, printed by ``python -m coeffsearch restarts --json``) states the inputs
(schedule, dtype and unit roundoff, growth factor, the lower end ``l`` of bound (b), the accumulation
length ``n`` and the rounding bound ``γ_n``, the shift factor ``s``, the restart positions, the working
precision), the model and criteria in words, the partition of ``[0, 1]`` and the proven bounds of
:mod:`coeffsearch.restart_bounds`. :func:`parse` checks its form against :data:`SCHEMA` (every bad field
listed); :func:`recheck` (``python -m coeffsearch certify FILE``) recomputes the partition and the proof
from the stated inputs and rejects any difference.
"""

from __future__ import annotations

import json
from fractions import Fraction

import jsonschema
import mpmath

from coeffsearch import registry
from coeffsearch.certify import (
    CertificateError,
    CertificateFormatError,
    decimal_up,
    iv_precision,
    parse_certificate_json,
)
from coeffsearch.restart_arithmetic import make_step
from coeffsearch.restart_bounds import DIGITS, MAX_PIECES, PRECISION_BITS, estimate, failures, point_text, prove
from coeffsearch.restart_model import (
    CRITERIA,
    DTYPES,
    MAX_ACCUMULATION,
    MODEL,
    Model,
    RestartError,
    Uncertifiable,
    check_positions,
    describe,
)
from foundation.commandline import FileRefused, read_json_file
from foundation.polynomial import MAX_SCHEDULE_STEPS, MAX_STEP_COEFFICIENTS, NAME_PATTERN

_DEC = {"type": "string", "pattern": r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$"}


_PAIR = {"type": "array", "items": _DEC, "minItems": 2, "maxItems": 2}


SCHEMA = {
    "type": "object",
    "required": ["kind", "name", "schedule", "dtype", "unit_roundoff", "growth", "spurious_eigenvalue", "lower",
                 "accumulation", "rounding", "shift", "restarts", "precision_bits", "model", "criteria", "partition",
                 "max_abs_q", "deviation", "final_image"],
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
        "accumulation": {"type": "integer", "minimum": 1, "maximum": MAX_ACCUMULATION},
        "rounding": _DEC,
        "shift": _DEC,
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
        raise Uncertifiable(f"{describe(name, positions, model)} cannot be certified: {bad[0]}")
    with iv_precision(prec), mpmath.workprec(prec + 10):
        delta = decimal_up(mpmath.mpf(model.delta().b), DIGITS)
        gamma = decimal_up(mpmath.mpf(model.rounding().b), DIGITS)
    return {"kind": "restart-certificate", "name": name, "schedule": [list(s) for s in texts], "dtype": model.dtype,
            "unit_roundoff": mpmath.nstr(model.u, 30), "growth": model.growth, "spurious_eigenvalue": delta,
            "lower": model.lower, "accumulation": model.accumulation, "rounding": gamma,
            "shift": model.shift,
            "restarts": list(positions), "precision_bits": prec, "model": MODEL,
            "criteria": CRITERIA, "partition": list(points), **bounds}


def certify_positions(name, steps, positions, model, prec: int = PRECISION_BITS) -> dict:
    """The certificate of ``positions``: the partition of :func:`estimate` (float64 additions and
    multiplications of exact binary numbers: the same everywhere), proven by :func:`certificate`."""
    texts = tuple(tuple(str(c) for c in s) for s in steps)
    est = estimate([make_step(s) for s in texts], positions, model)
    return certificate(name, texts, positions, model, [point_text(p) for p in est.points], prec)


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


def _differences(old, new, where=""):
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new))
                for d in _differences(old.get(k), new.get(k), f"{where}/{k}" if where else k)]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _differences(a, b, f"{where}/{i}")]
    return [] if old == new else [(where, old, new)]


def parse(data, source: str = "certificate") -> dict:
    """A restart certificate from JSON text or a parsed object; :class:`CertificateFormatError` lists every bad
    field."""
    if isinstance(data, (str, bytes)):
        data = parse_certificate_json(data, source)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    lines = []
    for err in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        message = err.message if len(err.message) <= 200 else err.message[:200] + " …"
        lines.append(f"field '{where}': {message}")
    if lines:
        raise CertificateFormatError(source, lines)
    return data


RECHECK_PREC = 300  # bits: the independent re-check, at least 100 bits above the certificate's


def check_upper_bounds(cert: dict, prec: int | None = None) -> list:
    """The stated bounds against the proof redone on the stated partition at ``prec`` bits (default 300, or
    100 above the certificate's), printed to 40 digits: (a) and (b) must be ``≥`` their enclosures and the
    final image must contain its enclosure. One line per bound not proven (empty: every printed digit is on
    the safe side)."""
    prec = max(RECHECK_PREC, cert["precision_bits"] + 100) if prec is None else prec  # finer than the certificate
    model = Model(cert["dtype"], cert["growth"], cert["lower"], cert["accumulation"], cert["shift"])
    positions = check_positions(cert["restarts"], len(cert["schedule"]))
    texts = tuple(tuple(str(c) for c in s) for s in cert["schedule"])
    _check_partition(cert["partition"], model.lower)
    fresh = prove([make_step(s) for s in texts], positions, model, cert["partition"], prec, digits=40)
    out = []
    for key, label in (("max_abs_q", "bound (a) max |Q|"), ("deviation", "bound (b) max |x_T - 1|")):
        if Fraction(cert[key]["bound"]) < Fraction(fresh[key]["bound"]):
            out.append(f"field '{key}/bound': stated {cert[key]['bound']} is below the {prec}-bit enclosure of "
                       f"{label}, {fresh[key]['bound']}: not an upper bound")
    (lo, hi), (lo_f, hi_f) = cert["final_image"], fresh["final_image"]
    if Fraction(lo) > Fraction(lo_f) or Fraction(hi) < Fraction(hi_f):
        out.append(f"field 'final_image': stated [{lo}, {hi}] does not contain the {prec}-bit enclosure "
                   f"[{lo_f}, {hi_f}]")
    return out


def recheck(data, source: str = "certificate") -> dict:
    """Recompute a restart certificate from its inputs (schedule, dtype, growth, lower end, positions,
    precision): the partition, then the proof; then check the stated bounds against an independent proof at
    300 bits (:func:`check_upper_bounds`). :class:`CertificateError` unless every stated field equals the
    recomputation and every bound is proven by the independent one."""
    cert = parse(data, source)
    name = cert["name"]
    published = registry.get(name).published if name in registry.names() else None
    if published is not None and [tuple(s) for s in cert["schedule"]] != [tuple(s) for s in published]:
        raise CertificateError(f"field 'name': {name!r} is a published schedule with other coefficients than the "
                               f"stated ones")
    try:
        model = Model(cert["dtype"], cert["growth"], cert["lower"], cert["accumulation"], cert["shift"])
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
    problems = check_upper_bounds(cert)  # the recomputation agrees; now prove its bounds independently
    if problems:
        raise CertificateError(problems[0] + (f" ({len(problems) - 1} more)" if len(problems) > 1 else ""))
    return fresh


def read_certificate(path: str) -> dict | None:
    """The parsed JSON of ``path`` when it is a restart certificate (``"kind": "restart-certificate"``),
    else None (not a file, not JSON, or another kind: the caller treats it as a schedule)."""
    try:
        data = read_json_file(path, registry.MAX_FILE_BYTES, "certificate file")
    except FileRefused:  # reported in one line when the caller reads it as a schedule
        return None
    return data if isinstance(data, dict) and data.get("kind") == "restart-certificate" else None
