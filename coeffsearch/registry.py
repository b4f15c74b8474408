"""Registry of published Newton–Schulz coefficient schedules (:class:`foundation.schedule.Schedule`),
with their sources, and :func:`resolve`: a registered name or a schedule / certificate JSON file.

Literal and recipe schedules register alike: ``register(Schedule("mine", None, "my notes",
recipe=Recipe({"lower": "1e-2", "steps": 6})))`` computes its steps on first use.
"""

from __future__ import annotations

import json
import os

import jsonschema

from foundation.commandline import FileRefused, parse_json, read_regular_file
from foundation.polynomial import MAX_SCHEDULE_STEPS, MAX_STEP_COEFFICIENTS, ScheduleDoc, ScheduleError, check_name
from foundation.schedule import Recipe, Schedule


def safety_divided(rows, safety: str):
    """``p(x/s)`` for each odd step: coefficient ``c_j`` (of ``x^{2j+1}``) divided by ``s^{2j+1}`` in float64,
    as ``c / s**k`` computes it, stored as the float's shortest decimal (exactly that float)."""
    s = float(safety)
    return tuple(tuple(repr(float(c) / s ** (2 * j + 1)) for j, c in enumerate(row)) for row in rows)


def _scaled(rows, unit):
    return tuple(tuple(str(c / unit) if isinstance(c, int) else c for c in row) for row in rows)


_REGISTRY: dict[str, Schedule] = {}


def register(schedule: Schedule) -> Schedule:
    """Add ``schedule`` to the registry (names are unique and match
    :data:`foundation.polynomial.NAME_PATTERN`).

    Examples:
      >>> from coeffsearch import Schedule, get, register
      >>> register(get("muon"))
      Traceback (most recent call last):
      ...
      ValueError: schedule 'muon' is already registered
    """
    check_name(schedule.name)
    if schedule.name in _REGISTRY:
        raise ValueError(f"schedule {schedule.name!r} is already registered")
    _REGISTRY[schedule.name] = schedule
    return schedule


def get(name: str) -> Schedule:
    """The registered schedule called ``name``; the error lists the known names.

    Examples:
      >>> from coeffsearch import get
      >>> get("muon").steps[0]
      ('3.4445', '-4.7750', '2.0315')
      >>> get("polar-express-5").degree, len(get("polar-express-5").steps)
      (5, 5)
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown schedule {name!r}; known: {', '.join(names())}") from None


def names() -> list[str]:
    """The registered schedule names, sorted.

    Examples:
      >>> from coeffsearch import names
      >>> "polar-express-5" in names()
      True
    """
    return sorted(_REGISTRY)


#: a coefficient: a JSON number or a decimal string (kept exactly for the interval arithmetic)
_COEFF = {"anyOf": [{"type": "number"},
                    {"type": "string", "pattern": r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"}]}
_STEPS = {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": _COEFF}}

#: what ``python -m coeffsearch minimax --json`` prints and ``--schedule FILE`` reads
SCHEDULE_SCHEMA = {
    "type": "object",
    "required": ["steps"],
    "properties": {
        "kind": {"const": "schedule"},
        "name": {"type": "string"},
        "parameters": {"type": "object", "properties": {"lower": _COEFF}},
        "steps": _STEPS,
        "report": {"type": "array", "items": {"type": "object"}},
    },
}

#: the fields of a certificate that a schedule is read from (the certifier checks the rest)
CERTIFICATE_SCHEDULE_SCHEMA = {
    "type": "object",
    "required": ["kind", "schedule"],
    "properties": {
        "kind": {"const": "certificate"},
        "name": {"type": "string"},
        "schedule": _STEPS,
        "interval": {"type": "array", "minItems": 2, "maxItems": 2, "items": _COEFF},
    },
}


def _check_schema(data, schema, spec):
    """One line naming the first bad field (JSON pointer style) or nothing."""

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        message = error.message if len(error.message) <= 200 else error.message[:200] + " …"
        raise ScheduleError(f"{spec}: field {where}: {message}")


#: the largest schedule or certificate file read (far above any 100-step schedule or its certificate)
MAX_FILE_BYTES = 4 * 2**20


def _check_sizes(data, key, spec):
    """At most ``MAX_SCHEDULE_STEPS`` steps of at most ``MAX_STEP_COEFFICIENTS`` coefficients, checked
    before the schema (whose messages would quote a huge list)."""
    steps = data.get(key) if isinstance(data, dict) else None
    if isinstance(steps, list):
        if len(steps) > MAX_SCHEDULE_STEPS:
            raise ScheduleError(f"{spec}: field {key}: {len(steps)} steps; a schedule has at most "
                                f"{MAX_SCHEDULE_STEPS} (MAX_SCHEDULE_STEPS)")
        for i, step in enumerate(steps):
            if isinstance(step, list) and len(step) > MAX_STEP_COEFFICIENTS:
                raise ScheduleError(f"{spec}: field {key}/{i}: {len(step)} coefficients; a step has at most "
                                    f"{MAX_STEP_COEFFICIENTS} (degree {2 * MAX_STEP_COEFFICIENTS - 1})")


def resolve(spec: str) -> Schedule:
    """A registered name, or a schedule / certificate JSON file, as a :class:`Schedule`.

    Files are validated against :data:`SCHEDULE_SCHEMA` (or, for certificates, the fields
    :data:`CERTIFICATE_SCHEDULE_SCHEMA` names) and every coefficient must be finite in float64.
    The path and a file's ``name`` must match :data:`foundation.polynomial.NAME_PATTERN` (they reach
    emitted code), a file is at most :data:`MAX_FILE_BYTES`, and a schedule has at most
    :data:`foundation.polynomial.MAX_SCHEDULE_STEPS` steps.
    Raises ``KeyError`` for an unknown name that is not a file, and
    :class:`foundation.polynomial.ScheduleError` for a malformed file or a refused name.

    Examples:
      >>> from coeffsearch import resolve
      >>> resolve("muon").name
      'muon'
      >>> resolve("no-such-schedule")
      Traceback (most recent call last):
      ...
      KeyError: "unknown schedule 'no-such-schedule': not a registered name (...) and not a file"
    """

    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if isinstance(spec, str) and spec in _REGISTRY:
        return _REGISTRY[spec]
    check_name(spec, "schedule")
    if not os.path.isfile(spec):
        raise KeyError(f"unknown schedule {spec!r}: not a registered name ({', '.join(names())}) and not a file")
    try:
        raw = read_regular_file(spec, MAX_FILE_BYTES, "schedule file")
        data = parse_json(raw, spec, parse_constant=lambda c: float("nan"))
    except FileRefused as exc:
        raise ScheduleError(str(exc)) from None
    text = raw.decode("utf-8-sig")
    if isinstance(data, dict) and data.get("kind") == "certificate":
        _check_sizes(data, "schedule", spec)
        _check_schema(data, CERTIFICATE_SCHEDULE_SCHEMA, spec)
        doc = ScheduleDoc.from_json(json.dumps({"steps": data["schedule"], "name": data.get("name", spec)}), spec)
        lower = data.get("interval", [None])[0]
        certificate = data
    else:
        _check_sizes(data, "steps", spec)
        _check_schema(data, SCHEDULE_SCHEMA, spec)
        doc = ScheduleDoc.from_json(text, spec)
        lower = doc.parameters.get("lower")
        certificate = None
    if doc.name:
        check_name(doc.name, f"{spec}: field name:")
    lower = float(lower) if lower is not None else None
    try:
        return Schedule(doc.name or spec, tuple(tuple(st) for st in doc.steps), f"file {spec}", lower,
                        certificate=certificate)
    except ScheduleError as exc:
        raise ScheduleError(f"{spec}: {exc}") from None


register(Schedule(
    "muon", (("3.4445", "-4.7750", "2.0315"),) * 5,
    "Jordan et al. 2024, Muon reference implementation (github.com/KellerJordan/Muon): "
    "one quintic, 5 steps, bf16"))
register(Schedule(
    "cubic", (("1.5", "-0.5"),) * 12,
    "classical Newton–Schulz cubic (Higham, Functions of Matrices, 2008, §8.3); 12 steps"))
register(Schedule(
    "quintic", (("1.875", "-1.25", "0.375"),) * 8,
    "fixed-point quintic (15/8, -10/8, 3/8), the last step of Polar Express; 8 steps"))
register(Schedule(
    "polar-express-5", (
        ("8.156554524902461", "-22.48329292557795", "15.878769915207462"),
        ("4.042929935166739", "-2.808917465908714", "0.5000178451051316"),
        ("3.8916678022926607", "-2.772484153217685", "0.5060648178503393"),
        ("3.285753657755655", "-2.3681294933425376", "0.46449024233003106"),
        ("2.3465413258596377", "-1.7097828382687081", "0.42323551169305323"),
    ),
    "Amsel, Persson, Musco, Gower 2025 (Polar Express), 5 steps as shipped by modded-nanogpt: "
    "l = 1e-3, cushion 0.02, safety 1.02", lower=1e-3))
register(Schedule(
    "you", _scaled(((3955, -8306, 5008), (3735, -6681, 3463), (3799, -6499, 3211),
                    (4019, -6385, 2906), (2677, -3029, 1162), (2172, -1833, 682)), 1024),
    "You Jiacheng 2025, 6 steps published in units of 1/1024"))
register(Schedule(
    "cesista", (("4.0848", "-6.8946", "2.9270"), ("3.9505", "-6.3029", "2.6377"),
                ("3.7418", "-5.5913", "2.3037"), ("2.8769", "-3.1427", "1.2046"),
                ("2.8366", "-3.0525", "1.2012")),
    "Cesista 2025, 5 steps tuned by gradient descent"))
register(Schedule(
    "polar-express", None,
    "Amsel, Persson, Musco, Gower 2025 (Polar Express), greedy minimax: l = 1e-3, 8 steps, "
    "cushion 0.02407327424182761, no safety factor; the paper's Algorithm 1 prints all 8 tuples in full "
    "(computed here, reproducing all 8 printed tuples, checked in coeffsearch.provenance; Algorithm 1 also "
    "divides by a safety factor 1.01 at run time, which the registry does not)",
    lower=1e-3, recipe=Recipe({"lower": "1e-3", "steps": 8, "cushion": "0.02407327424182761"})))
register(Schedule(
    "cans", None,
    "CANS coefficients as shipped in code by NVIDIA-NeMo/Emerging-Optimizers (5 tuples, 4 decimals), which "
    "credits Grishina, Smirnov, Rakhuba 2025; that paper's table was not reached and is not cited. Computed here "
    "as the greedy minimax with l = 1e-3, 5 steps, no cushion or safety (this project's reading), whose tuples "
    "rounded to 4 decimals are all 5 of NeMo's (checked in coeffsearch.provenance)",
    lower=1e-3, recipe=Recipe({"lower": "1e-3", "steps": 5})))

#: the five tuples Zhang, Amsel, Chen, Dao 2026 start from (Polar Express Algorithm 1's first five, as they print them)
GRAM_PE_PRINTED = (
    ("8.28721201814563", "-23.595886519098837", "17.300387312530933"),
    ("4.107059111542203", "-2.9478499167379106", "0.5448431082926601"),
    ("3.9486908534822946", "-2.908902115962949", "0.5518191394370137"),
    ("3.3184196573706015", "-2.488488024314874", "0.51004894012372"),
    ("2.300652019954817", "-1.6689039845747493", "0.4188073119525673"),
)
GRAM_PE_SAFETY = "1.05"
#: their Gram Newton–Schulz default: a restart after iteration 2, run in float16
GRAM_PE_RESTARTS = (2,)
register(Schedule(
    "gram-polar-express", safety_divided(GRAM_PE_PRINTED, GRAM_PE_SAFETY),
    "Zhang, Amsel, Chen, Dao 2026, Gram Newton-Schulz (github.com/Dao-AILab/gram-newton-schulz; the coefficient "
    "preset as in github.com/NoahAmsel/gram-newton-schulz, gram_newton_schulz/coefficients.py): Polar Express's "
    "first five tuples with a safety factor 1.05 (c_j / 1.05^(2j+1)), restart after iteration 2, float16",
    lower=1e-3))

DEFAULT = "polar-express-5"
