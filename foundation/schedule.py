"""The one Newton–Schulz schedule type: coefficients, degree, provenance and an optional certificate.

A schedule is a tuple of steps; a step ``(c_0, c_1, …, c_k)`` is the odd polynomial
``p(σ) = c_0 σ + c_1 σ³ + … + c_k σ^{2k+1}`` applied to every singular value of the
Frobenius-normalized input. Coefficients are kept as decimal strings, exactly as published, so nothing
is lost before the interval arithmetic of the certifier reads them.

A :class:`Schedule` is validated once, when it is made (:func:`foundation.polynomial.validate_steps`:
at most 100 steps of at most 32 finite coefficients, positive slope ``c_0``; a name that may reach
generated code): everything downstream (the registry, the certifier, the printers of emitted code, the
optimizer) takes it as it is. Its provenance is a *literal* (published coefficients) or a *recipe*
(:class:`Recipe`: a function that computes the coefficients, run on first use and validated then).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from foundation.minimax import greedy_schedule
from foundation.polynomial import ScheduleError, check_name, validate_steps

#: a schedule's steps: one tuple of decimal strings per step
Steps = tuple[tuple[str, ...], ...]


def as_steps(steps: Any, source: str) -> Steps:
    """``steps`` validated (:func:`validate_steps`, and every coefficient finite in float64) and normalized to a tuple
    of tuples of decimal strings.

    Accepts lists or tuples of numbers or decimal strings, or an object with a ``steps`` attribute (what
    :func:`foundation.minimax.greedy_schedule` returns)."""
    steps = getattr(steps, "steps", steps)
    validate_steps(steps, source)
    for i, step in enumerate(steps):  # the emitted code and the validators run in floats
        for c in step:
            if not math.isfinite(float(c)):
                raise ScheduleError(f"{source}: step {i + 1} has coefficient {c} outside the float64 range "
                                    f"(|c| <= 1.8e308)")
    return tuple(tuple(str(c).strip() for c in step) for step in steps)


@dataclass(frozen=True)
class Recipe:
    """How a schedule published as a recipe is computed: ``function(**arguments)``.

    ``function`` returns the steps (coefficient lists) or an object with a ``steps`` attribute;
    the default is the greedy minimax of :func:`foundation.minimax.greedy_schedule`.
    """

    arguments: Mapping[str, Any]
    function: Callable[..., Any] = greedy_schedule

    def compute(self, source: str) -> Steps:
        """The validated steps (:func:`as_steps`)."""
        return as_steps(self.function(**self.arguments), source)

    @property
    def description(self) -> str:
        """``name(key=value, …)``: what the recipe runs."""
        args = ", ".join(f"{k}={v}" for k, v in self.arguments.items())
        return f"{getattr(self.function, '__name__', 'recipe')}({args})"


@dataclass(frozen=True)
class Schedule:
    """A named Newton–Schulz schedule: its steps, where they come from, what they were made for.

    Exactly one of ``published`` (the literal coefficients) and ``recipe`` (a :class:`Recipe`, or a
    dict of :func:`~foundation.minimax.greedy_schedule` keyword arguments) is given. ``lower`` is the
    smallest normalized singular value the schedule was designed for; ``certificate`` an optional
    certificate (the JSON object of :mod:`coeffsearch.certify`) that came with it.
    Raises :class:`~foundation.polynomial.ScheduleError` for a bad name or bad coefficients.

    Examples:
      A literal schedule (three steps of one cubic, coefficients as decimal strings):

      >>> from coeffsearch import Schedule
      >>> s = Schedule("my-cubic", [["1.5", "-0.5"]] * 3, "my notes", lower=0.1)
      >>> s.provenance, s.degree, s.matmuls
      ('literal', 3, 6)
      >>> s.as_floats()[0]
      (1.5, -0.5)

      A recipe runs the greedy minimax on first use:

      >>> r = Schedule("my-minimax", None, "computed", recipe={"lower": "1e-2", "steps": 3})
      >>> r.provenance, len(r.steps), r.degree
      ('recipe', 3, 5)
    """

    name: str
    published: Steps | None
    source: str
    lower: float | None = None
    recipe: Recipe | None = None
    certificate: Mapping[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if isinstance(self.recipe, Mapping):
            object.__setattr__(self, "recipe", Recipe(dict(self.recipe)))
        if (self.published is None) == (self.recipe is None):
            raise ScheduleError(f"schedule {self.name!r}: give its published steps or a recipe, exactly one")
        if self.published is not None:
            object.__setattr__(self, "published", as_steps(self.published, f"schedule {self.name!r}"))
        if self.lower is not None and not 0 < self.lower < 1:
            raise ScheduleError(f"schedule {self.name!r}: the design lower bound must be in (0, 1), got {self.lower}")

    @property
    def provenance(self) -> str:
        """``"literal"`` (published coefficients) or ``"recipe"`` (computed on first use)."""
        return "literal" if self.published is not None else "recipe"

    @cached_property
    def steps(self) -> Steps:
        """The coefficients: the published ones, or the recipe's (computed once, validated)."""
        if self.published is not None:
            return self.published
        assert self.recipe is not None  # __post_init__: exactly one of the two
        return self.recipe.compute(f"schedule {self.name!r} (recipe {self.recipe.description})")

    @property
    def degree(self) -> int:
        """The largest polynomial degree of a step: ``2k + 1`` for ``k + 1`` coefficients."""
        return 2 * max(len(step) for step in self.steps) - 1

    def as_floats(self) -> tuple[tuple[float, ...], ...]:
        """The steps as a tuple of float tuples (the static argument of the emitted code)."""
        return tuple(tuple(float(c) for c in step) for step in self.steps)

    @property
    def matmuls(self) -> int:
        """Matrix products per application: ``k + 1`` for a step of degree ``2k + 1``."""
        return sum(len(step) for step in self.steps)
