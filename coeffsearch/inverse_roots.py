"""Coupled Newton–Schulz iterations for the inverse p-th root of an SPD matrix, as data.

After ``X`` is normalized so that its eigenvalues lie in ``[l, 1]``, the iteration starts from
``M_0 = X``, ``Y_0 = I`` and takes, at step ``k``, the polynomial factor ``T_k = q_k(M_k)``:

    ``Y_{k+1} = Y_k T_k``,    ``M_{k+1} = T_k^p M_k``.

All the matrices are polynomials in ``X``, so they commute, and by induction ``M_k = Y_k^p X``: as
``M_k → I``, ``Y_k → X^{-1/p}``. On one eigenvalue ``x`` of ``X`` the iteration is the scalar map
``x_{k+1} = f_k(x_k) = q_k(x_k)^p x_k`` and ``y_N = Π_k q_k(x_k)``, so that ``y_N^p x = x_N``: whenever
every ``x_k`` and every ``q_k(x_k)`` is positive, ``y_N x^{1/p} = x_N^{1/p}``, and a band
``x_N ∈ [1 − δ, 1 + δ]`` bounds the root's relative error by ``max |x_N^{1/p} − 1|``. The classical
factor is Newton's, ``q(x) = ((p + 1) − x)/p`` (Higham, Functions of Matrices, 2008, chapter 7; the coupled
form: Guo & Higham 2006; Shampoo computes its inverse roots this way: Anil et al. 2020), whose map
``x ((p + 1) − x)^p / p^p`` fixes 1 with zero slope. A searched schedule
(:mod:`coeffsearch.inverse_root_search`) picks each ``q_k`` for the interval the previous steps left.

A step is ``(c_0, c_1, …, c_d)``: ``q(x) = c_0 + c_1 x + … + c_d x^d`` (ascending, decimal strings kept
exactly for the interval arithmetic of :mod:`coeffsearch.inverse_root_certify`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from fractions import Fraction

import mpmath

from foundation.polynomial import MAX_SCHEDULE_STEPS, MAX_STEP_COEFFICIENTS, ScheduleError, check_name

#: a coefficient or an interval end: an ASCII decimal, its exponent below 1000 (an exponent of a billion digits
#: would make its exact rational huge) and at most :data:`MAX_DIGITS` characters
DECIMAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d{1,3})?", re.ASCII)
MAX_DIGITS = 100


def is_decimal(text) -> bool:
    """``text`` is a :data:`DECIMAL` of at most :data:`MAX_DIGITS` characters."""
    return isinstance(text, str) and len(text) <= MAX_DIGITS and DECIMAL.fullmatch(text) is not None


#: the kind tag of an inverse-root schedule document
KIND = "inverse-root"
#: the roots a schedule may be made for (the runtime routines take any positive integer; these are certified)
MAX_P = 8


def power_matmuls(p: int) -> int:
    """Matrix products for ``T^p``: one per squaring, one per further binary digit (``p = 2``: 1, ``p = 4``: 2)."""
    return p.bit_length() - 1 + bin(p).count("1") - 1


def step_matmuls(degree: int, p: int, last: bool) -> int:
    """Products of one step: ``q(M)`` by Horner (``degree − 1``), ``Y T`` (1), and unless it is the last step
    ``T^p`` and ``T^p M`` (:func:`power_matmuls` + 1)."""
    return max(degree - 1, 0) + 1 + (0 if last else power_matmuls(p) + 1)


@dataclass(frozen=True)
class RootSchedule:
    """Per-step factors ``q_k`` (ascending decimal coefficients) of the coupled iteration for ``X^{-1/p}``,
    designed for normalized eigenvalues in ``interval = [l, 1]``."""

    name: str
    p: int
    interval: tuple[str, str]
    steps: tuple[tuple[str, ...], ...]
    source: str = ""

    def __post_init__(self):
        check_name(self.name)
        if isinstance(self.p, bool) or not isinstance(self.p, int) or not 1 <= self.p <= MAX_P:
            raise ScheduleError(f"{self.name}: p must be an integer in [1, {MAX_P}], got {self.p!r}")
        if not 1 <= len(self.steps) <= MAX_SCHEDULE_STEPS:
            raise ScheduleError(f"{self.name}: a schedule has 1 to {MAX_SCHEDULE_STEPS} steps, got {len(self.steps)}")
        for i, step in enumerate(self.steps):
            if not 1 <= len(step) <= MAX_STEP_COEFFICIENTS:
                raise ScheduleError(f"{self.name}: step {i + 1} has {len(step)} coefficients; 1 to "
                                    f"{MAX_STEP_COEFFICIENTS} allowed")
            for c in step:
                if not is_decimal(c):
                    raise ScheduleError(f"{self.name}: step {i + 1}: {ascii(c)[:80]} is not a decimal number of at "
                                        f"most {MAX_DIGITS} characters with an exponent below 1000")
        if not all(is_decimal(v) for v in self.interval):
            raise ScheduleError(f"{self.name}: the interval {ascii(list(self.interval))[:120]} must be two decimal "
                                f"numbers")
        lo, hi = (Fraction(str(v)) for v in self.interval)
        if not 0 < lo < hi:
            raise ScheduleError(f"{self.name}: need 0 < l < u, got interval {list(self.interval)}")

    @property
    def degree(self) -> int:
        """The largest degree of the factors ``q_k``."""
        return max(len(step) for step in self.steps) - 1

    @property
    def matmuls(self) -> int:
        """Matrix products of the whole iteration (:func:`step_matmuls`; the last step only updates ``Y``)."""
        n = len(self.steps)
        return sum(step_matmuls(len(s) - 1, self.p, i == n - 1) for i, s in enumerate(self.steps))

    def as_floats(self) -> tuple[tuple[float, ...], ...]:
        """The coefficients as floats, padded with zeros to one width (what the runtime routines take)."""
        width = self.degree + 1
        return tuple(tuple(float(c) for c in s) + (0.0,) * (width - len(s)) for s in self.steps)

    def to_dict(self) -> dict:
        return {"kind": KIND, "name": self.name, "p": self.p, "interval": list(self.interval),
                "steps": [list(s) for s in self.steps], "source": self.source}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict, source: str) -> RootSchedule:
        """From a parsed ``inverse-root`` document; :class:`ScheduleError` in one line otherwise."""
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise ScheduleError(f"{source}: not an {KIND!r} schedule document")
        missing = [k for k in ("p", "interval", "steps") if k not in data]
        if missing:
            raise ScheduleError(f"{source}: field {missing[0]!r} is missing")
        steps, interval = data["steps"], data["interval"]
        if (not isinstance(steps, list) or not all(isinstance(s, list) for s in steps)
                or not isinstance(interval, list) or len(interval) != 2):
            raise ScheduleError(f"{source}: 'steps' must be a list of coefficient lists and 'interval' a pair")
        if not all(isinstance(c, (str, int, float)) and not isinstance(c, bool) for s in steps for c in s):
            raise ScheduleError(f"{source}: every coefficient must be a decimal string or a number")
        return cls(str(data.get("name") or "schedule"), data["p"], (str(interval[0]), str(interval[1])),
                   tuple(tuple(str(c) for c in s) for s in steps), str(data.get("source", "")))


def newton_factor(p: int) -> tuple[str, str]:
    """Newton's factor ``q(x) = ((p + 1) − x)/p`` as exact decimals (``p = 2``: ``1.5 − 0.5 x``)."""
    def decimal(v: Fraction) -> str:
        text = f"{float(v)!r}"  # exact for p = 1, 2, 4, 5, 8; otherwise 25 significant digits
        if Fraction(text) == v:
            return text
        with mpmath.workdps(40):
            return mpmath.nstr(mpmath.mpf(v.numerator) / v.denominator, 25)
    return decimal(Fraction(p + 1, p)), decimal(Fraction(-1, p))


def classical(p: int, steps: int, lower: str = "1e-3", name: str = "newton") -> RootSchedule:
    """The coupled Newton iteration for ``X^{-1/p}``: Newton's factor at every step."""
    return RootSchedule(name, p, (str(lower), "1"), (newton_factor(p),) * steps,
                        f"coupled Newton iteration for the inverse {p}-th root (Higham 2008, chapter 7; "
                        f"Guo & Higham 2006), {steps} steps")


def scalar_trajectory(schedule: RootSchedule, x):
    """``(x_N, y_N)`` of the scalar iteration from eigenvalue ``x`` (floats or mpmath numbers)."""
    y = 1
    for step in schedule.steps:
        c = [type(x)(str(v)) if not isinstance(x, float) else float(v) for v in step]
        q = c[-1]
        for v in reversed(c[:-1]):
            q = q * x + v
        x, y = q ** schedule.p * x, y * q
    return x, y
