"""A cross-check's :class:`Verdict`, its counterexample and its text.

``--json`` prints the verdict, the method, ``symbolic_sizes`` (for a symbolic verdict, the sizes of the
explicit symbolic matrices it was shown at, or ``"all"`` when it holds for all sizes), the number of instances, ``scale`` (``c`` when the
candidate is ``c ×`` the derived result), the diagnosis and a ``counterexample``: the instance's
sizes and inputs, the derived and candidate values, and ``relative_difference``, defined as
``‖candidate − derived‖_F / ‖derived‖_F`` on that instance (1.0 for twice the derived result, 0.5
for half of it, 2.0 for its negative; null when the derived value is zero and the candidate is not).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mpmath
import numpy as np
from sympy import sstr

from derivations.crosscheck.evaluation import DPS, _flat, relative_difference
from derivations.engine.evaluate import free_symbols


@dataclass
class Verdict:
    verdict: str  # "equal" | "different"
    method: str  # "symbolic" | "numeric"
    instances: int
    scale: str | None = None
    diagnosis: list = field(default_factory=list)
    counterexample: dict | None = None
    reference: str = ""
    candidate: str = ""
    #: for a symbolic verdict, the sizes of the explicit symbolic matrices it was shown at; None when it holds
    #: for all sizes (an identity in the dimension symbols themselves)
    sizes: dict | None = None

    @property
    def method_text(self) -> str:
        """``numeric``, ``symbolic at d = 3, d_h = 2`` or ``symbolic, for all sizes``: how far the verdict reaches."""
        if self.method != "symbolic":
            return self.method
        if self.sizes is None:
            return "symbolic, for all sizes"
        return "symbolic at " + ", ".join(f"{k} = {n}" for k, n in self.sizes.items())

    def as_json(self) -> dict:
        sizes = None if self.method != "symbolic" else "all" if self.sizes is None else self.sizes
        return {"verdict": self.verdict, "method": self.method, "symbolic_sizes": sizes,
                "instances": self.instances, "scale": self.scale, "diagnosis": self.diagnosis,
                "counterexample": self.counterexample, "reference": self.reference, "candidate": self.candidate}


def _show(v):
    """A value for the counterexample: floats (8 digits; 12 for a scalar), or strings of the same digits
    when a nonzero entry is outside float64's range (it would read as 0 or inf)."""
    if v is None:
        return None
    if isinstance(v, np.ndarray):
        v = mpmath.matrix(v.astype(float).tolist()) if v.ndim == 2 else v.astype(float).ravel()[0]
    entries = _flat(v)
    as_float = all(x == 0 or mpmath.mpf(10) ** -300 < abs(x) < mpmath.mpf(10) ** 300 for x in entries)
    digits = 8 if isinstance(v, mpmath.matrix) else 12
    conv = (lambda x: float(mpmath.nstr(x, digits))) if as_float else (lambda x: mpmath.nstr(x, digits))
    if isinstance(v, mpmath.matrix):
        return [[conv(v[i, j]) for j in range(v.cols)] for i in range(v.rows)]
    return conv(v)


def _counterexample(bad, ref, cand, target) -> dict:
    inst, a, b = min(bad, key=lambda t: sum(t[0].sizes.values()))
    shown = free_symbols(ref, cand)
    shown |= free_symbols(*[target.definitions[k] for k in shown if k in target.definitions])
    inputs = {str(k): _show(v) for k, v in sorted(inst.envmp.items(), key=lambda kv: str(kv[0])) if k in shown}
    defined = {str(k): sstr(v) for k, v in target.definitions.items() if str(k) in inputs}
    return {"sizes": {str(k): v for k, v in inst.sizes.items()}, "inputs": inputs, "defined": defined,
            "derived": _show(a), "candidate": _show(b),
            "relative_difference": relative_difference(b, a)}


def format_verdict(v: Verdict, what: str) -> str:
    head = f"{what}: {v.verdict.upper()} ({v.method_text}, {v.instances} random instances at {DPS} digits)"
    lines = [head, f"  derived:   {v.reference}", f"  candidate: {v.candidate}"]
    if v.verdict == "different":
        lines += [f"  diagnosis: {d}" for d in v.diagnosis]
        ce = v.counterexample
        if ce:
            sizes = ", ".join(f"{k} = {n}" for k, n in ce["sizes"].items())
            lines.append(f"  counterexample ({sizes}):")
            for name, value in ce["inputs"].items():
                how = f"  (= {ce['defined'][name]})" if name in ce["defined"] else ""
                lines.append(f"    {name}{how} =\n" + _indent(_array_text(value)))
            lines.append("    derived value =\n" + _indent(_array_text(ce["derived"])))
            cand = "could not be evaluated" if ce["candidate"] is None else _indent(_array_text(ce["candidate"]))
            lines.append("    candidate value =\n" + cand)
    return "\n".join(lines) + "\n"


def _array_text(value) -> str:
    """A counterexample value as text: fixed-point when its nonzero entries are of moderate size, else
    scientific (a value of 1e-40 must not print as 0); entries kept as strings are printed as they are."""
    if isinstance(value, str):
        return value
    flat = np.ravel(np.array(value, dtype=object))
    if any(isinstance(x, str) for x in flat):
        rows = value
        return "\n".join("[" + "  ".join(str(x) for x in row) + "]" for row in rows)
    arr = np.array(value, dtype=float)
    nonzero = np.abs(arr[arr != 0])
    moderate = nonzero.size == 0 or (nonzero.min() >= 1e-4 and nonzero.max() < 1e8)
    with np.printoptions(precision=6, suppress=moderate, linewidth=110):
        return str(arr)


def _indent(a) -> str:
    return "\n".join("      " + line for line in str(a).splitlines())

__all__ = ["Verdict", "format_verdict"]
