"""Translation validation of the LaTeX printer: each printed result is parsed back and shown equal.

The result of every derivation is printed by the workbench's LaTeX printer
(:func:`derivations.engine.latex.latex`, what ``--emit latex`` and the proof pages show as the final
state), read back by the cross-checker's own formula parser (:func:`derivations.parsing.formula.parse`,
which reads LaTeX, never evaluates Python) in the derivation's names
(:func:`derivations.parsing.targets.target_of`), and compared with the checked expression: symbolically
(the parsed expression is the same SymPy tree) where it is, and always numerically on random instances at
two or more sizes with all dimensions distinct (float64 evaluator of the engine). A printer that writes
``(V/d)^{1}`` for ``(V/d)^{1/2}`` or drops a transpose then fails, naming the derivation. A result with no
check size whose dimensions are all distinct is shown equal only when it reads back as the identical tree.

``python -m derivations.<rule> --check`` runs it over the rule's derivations (a section of its report, one row
each: ``ok``, ``unreadable`` with the reason, or ``FAIL`` with the counterexample) and exits 1 on a ``FAIL``.
:data:`UNREADABLE` names the results known not to read back, with why; they are reported as such, never as
equal, and a result outside it that does not read back is a ``FAIL``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from derivations.engine.latex import latex
from derivations.parsing.formula import parse
from derivations.parsing.formula_syntax import FormulaError
from derivations.parsing.targets import target_of
from derivations.printing.validation import SIZES, distinct_sizes
from derivations.vocabulary.evaluate import InstanceSampler, free_symbols
from derivations.vocabulary.numeric import EvaluationError, evaluate
from foundation.compute.reference import NumpyBackend

#: largest accepted ``max|parsed − formula| / max(1, max|formula|)`` (float64)
TOLERANCE = 1e-9
#: printed results known not to read back, with why (``--check`` reports them as unreadable, never as equal;
#: the suite fails once one reads back, so that the entry is removed)
UNREADABLE: dict[str, str] = {}


@dataclass
class RoundTrip:
    """One derivation's printed result read back: the text, the worst error over the sizes, the verdict."""

    derivation: str
    text: str
    error: float
    symbolic: bool
    message: str = ""
    #: why the result is known not to read back (:data:`UNREADABLE`), when it does not
    unreadable: str = ""

    @property
    def passed(self) -> bool:
        """Read back and shown equal (an unreadable result has not passed, nor failed)."""
        return not self.message

    @property
    def status(self) -> str:
        """``ok`` (read back and equal), ``unreadable`` (known, with a reason) or ``FAIL``."""
        return "ok" if self.passed else "unreadable" if self.unreadable else "FAIL"

    def row(self) -> dict:
        return {"derivation": self.derivation, "latex": self.text, "error": self.error,
                "symbolic": "identical" if self.symbolic else "numeric", "status": self.status,
                "failure": self.message if self.status == "FAIL" else "", "unreadable": self.unreadable,
                "detail": self.message}


def round_trip(der, rule: str = "", seed: int = 0, sizes: int = SIZES) -> RoundTrip:
    """Print ``der.formula`` as LaTeX, parse it back and compare it with ``der.formula``; a failure of a result
    named in :data:`UNREADABLE` carries its reason (status ``unreadable``)."""
    result = _round_trip(der, rule, seed, sizes)
    if not result.passed and der.name in UNREADABLE:
        result.unreadable = UNREADABLE[der.name]
    return result


def _round_trip(der, rule: str, seed: int, sizes: int) -> RoundTrip:
    text = latex(der.formula)
    where = f"{rule}: LaTeX of {der.name}"
    target = target_of(der)
    try:
        parsed = parse(text, target.namespace)
    except FormulaError as exc:
        return RoundTrip(der.name, text, float("inf"), False, f"{where}: the printed formula does not parse back "
                                                               f"({exc})")
    zero = parsed == 0 and der.formula.is_ZeroMatrix  # a zero matrix prints as 0
    symbolic = parsed == der.formula or bool(zero)
    worst, backend = 0.0, NumpyBackend()
    try:
        size_list = distinct_sizes(der, sizes)
    except ValueError as exc:  # no sizes to compare at: the identical tree is the same formula, nothing else is
        return RoundTrip(der.name, text, 0.0, True) if symbolic else RoundTrip(der.name, text, float("inf"), False,
                                                                                f"{where}: {exc}")
    for k, dims in enumerate(size_list):
        sampler = InstanceSampler(dims, definitions=target.definitions, scalars=target.scalars)
        rng = np.random.default_rng([seed, k])
        env = sampler.sample(rng, free_symbols(der.formula, parsed), backend)
        try:
            want = np.asarray(evaluate(der.formula, env, backend, dims), dtype=np.float64)
            got = np.asarray(evaluate(parsed, env, backend, dims), dtype=np.float64)
        except (EvaluationError, ValueError, TypeError) as exc:
            return RoundTrip(der.name, text, float("inf"), symbolic, f"{where}: {text!r} does not evaluate ({exc})")
        if zero:
            got = np.zeros_like(want)
        if got.shape != want.shape:
            return RoundTrip(der.name, text, float("inf"), symbolic,
                             f"{where}: {text!r} has shape {got.shape}, the checked formula {want.shape}")
        error = float(np.max(np.abs(got - want), initial=0.0) / max(1.0, float(np.max(np.abs(want), initial=0.0))))
        worst = max(worst, error) if np.isfinite(error) else float("inf")
    if not worst <= TOLERANCE:
        return RoundTrip(der.name, text, worst, symbolic, f"{where}: {text!r} reads back as {parsed}, which differs "
                                                          f"from the checked formula {der.formula} by {worst:.1e}")
    return RoundTrip(der.name, text, worst, symbolic)


def round_trips(rule_module, seed: int = 0, derivations=None) -> list[RoundTrip]:
    """:func:`round_trip` of every derivation of a rule module (``registry.rule_module(name)``), or of the
    ``derivations`` it has already built."""
    ders = rule_module.derivations() if derivations is None else derivations
    return [round_trip(der, rule_module.name, seed) for der in ders]


__all__ = ["TOLERANCE", "UNREADABLE", "RoundTrip", "round_trip", "round_trips"]
