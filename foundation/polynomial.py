"""Odd polynomials and schedules in mpmath, with JSON in and out.

A step ``(c_0, …, c_k)`` is ``p(x) = Σ_j c_j x^{2j+1}`` (degree ``2k+1``); a schedule is a tuple
of steps applied in order. Coefficients travel as exact decimal strings (``mpmath.nstr`` at the
working precision), together with the parameters that produced them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import mpmath

from foundation.commandline import FileRefused, parse_json

DEFAULT_DPS = 30

#: the longest Newton–Schulz schedule anything here accepts (files, ``--steps``, the emitted code's routines)
MAX_SCHEDULE_STEPS = 100
#: the most coefficients in one step (odd degree ``2·32 − 1 = 63``); ``minimax --degree`` stops at 15
MAX_STEP_COEFFICIENTS = 32
#: what a schedule name, a schedule file's ``name`` field and a schedule file path may be: letters,
#: digits, ``_``, spaces and ``. / ~ , : + = @ -`` (no quotes, backslashes, line breaks, control or
#: format characters, shell metacharacters), starting with a letter, digit, ``_``, ``.``, ``/`` or ``~``,
#: at most 255 characters. Names reach emitted modules' docstrings, plots and terminals.
NAME_PATTERN = re.compile(r"[\w./~][\w./~,:+=@ -]{0,254}")
NAME_RULE = ("letters, digits, spaces and _ . / ~ , : + = @ - only (starting with a letter, digit, _ . / or ~), "
             "at most 255 characters")


class ScheduleError(ValueError):
    """A malformed schedule or schedule document."""


def odd_eval(coeffs, x):
    """``Σ_j c_j x^{2j+1}`` by Horner in ``x²`` (works for mpf, iv and float ``x``)."""
    x2 = x * x
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = acc * x2 + c
    return acc * x


def odd_derivative(coeffs):
    """Coefficients ``d_j`` of ``p'(x) = Σ_j d_j x^{2j}`` (an even polynomial)."""
    return [c * (2 * j + 1) for j, c in enumerate(coeffs)]


def to_decimal(x, dps: int) -> str:
    """``x`` as a decimal string with ``dps`` significant digits."""
    return mpmath.nstr(mpmath.mpf(x), dps)


@dataclass
class ScheduleDoc:
    """A schedule with its provenance: what a JSON file holds."""

    steps: list  # list of lists of decimal strings
    kind: str = "schedule"
    name: str = ""
    parameters: dict = field(default_factory=dict)
    report: list = field(default_factory=list)

    def mp_steps(self):
        return [[mpmath.mpf(c) for c in step] for step in self.steps]

    def float_steps(self):
        return tuple(tuple(float(c) for c in step) for step in self.steps)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "name": self.name, "parameters": self.parameters,
                           "steps": self.steps, "report": self.report}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "<json>") -> ScheduleDoc:
        try:
            data = parse_json(text, source)
        except FileRefused as exc:
            raise ScheduleError(str(exc)) from None
        if not isinstance(data, dict) or "steps" not in data:
            raise ScheduleError(f"{source}: expected an object with a 'steps' list")
        steps = data["steps"]
        validate_steps(steps, source)
        return cls([[str(c) for c in s] for s in steps], data.get("kind", "schedule"), data.get("name", source),
                   data.get("parameters", {}), data.get("report", []))


def check_name(name, what: str = "schedule name") -> str:
    """``name`` if it matches :data:`NAME_PATTERN`, else :class:`ScheduleError` (one line, the value
    shown with escapes)."""
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise ScheduleError(f"{what} {ascii(name)[:120]} is not allowed: use {NAME_RULE}")
    return name


def validate_steps(steps, source: str = "schedule"):
    """Every step a non-empty list of finite decimal numbers with a positive slope ``c_0``; at most
    :data:`MAX_SCHEDULE_STEPS` steps of at most :data:`MAX_STEP_COEFFICIENTS` coefficients."""
    if not isinstance(steps, (list, tuple)) or not steps:
        raise ScheduleError(f"{source}: 'steps' must be a non-empty list of coefficient lists")
    if len(steps) > MAX_SCHEDULE_STEPS:
        raise ScheduleError(f"{source}: {len(steps)} steps; a schedule has at most {MAX_SCHEDULE_STEPS}")
    for i, step in enumerate(steps):
        if not isinstance(step, (list, tuple)) or not step:
            raise ScheduleError(f"{source}: step {i + 1} must be a non-empty list of coefficients")
        if len(step) > MAX_STEP_COEFFICIENTS:
            raise ScheduleError(f"{source}: step {i + 1} has {len(step)} coefficients; a step has at most "
                                f"{MAX_STEP_COEFFICIENTS} (degree {2 * MAX_STEP_COEFFICIENTS - 1})")
        for c in step:
            try:
                v = mpmath.mpf(str(c)) if not isinstance(c, bool) else None
            except (ValueError, TypeError):
                v = None
            if v is None or not mpmath.isfinite(v):
                raise ScheduleError(f"{source}: step {i + 1} has a coefficient that is not a finite number: {c!r}")
        if mpmath.mpf(str(step[0])) <= 0:
            raise ScheduleError(f"{source}: step {i + 1} has slope c_0 = {step[0]} <= 0")
