"""A cross-check's :class:`Verdict`, its counterexample and its text.

``--json`` prints the verdict, the method, ``symbolic_sizes`` (for a symbolic verdict, the sizes of the
explicit symbolic matrices it was shown at, or ``"all"`` when it holds for all sizes), the number of
instances, ``scale`` (``c`` when the candidate is ``c ×`` the derived result), the diagnosis and a
``counterexample``: the instance's sizes and inputs, the derived and candidate values, and
``relative_difference``, defined as
``‖candidate − derived‖_F / ‖derived‖_F`` on that instance (1.0 for twice the derived result, 0.5
for half of it, 2.0 for its negative; null when the derived value is zero and the candidate is not).
It also prints ``shapes``, the shape of every matrix on each size the instances were drawn at (an identity
is checked on tall, wide and square matrices where its formulas allow), ``skipped``, the number of
instances left out because the derived side is not defined there (or an SVD did not converge), and for
an identity or a chain ``scalars``, the names read as scalars (a name is a matrix when declared or used
as one, see :mod:`derivations.crosscheck.identities`); null for a derivation, whose names carry their kind.

Expressions are printed as :func:`sympy.sstr` prints them, except that a Gram root is printed as its
name (``C_W``, ``C_W^-1``, ``U_W``) only when that name reads back as it: ``C_W`` is ``(WᵀW)^{1/2}``, so
``(W Wᵀ)^{1/2}`` prints as ``(W*W.T)^(1/2)`` (:func:`show`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import mpmath
import numpy as np
from sympy import S, sstr
from sympy.core.mul import _keep_coeff
from sympy.matrices.expressions import Identity, MatAdd, MatMul
from sympy.printing.precedence import precedence
from sympy.printing.str import StrPrinter

from derivations.crosscheck.evaluation import DPS, _flat, relative_difference
from derivations.lemmas.base import markdown_text
from derivations.vocabulary.evaluate import free_symbols
from derivations.vocabulary.nodes import GramInvSqrt, GramSqrt, PolarFactor, short_name


@dataclass
class Verdict:
    verdict: str  # "equal" | "different" | "refused" (a chain's change of variables that misses feasible points)
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
    #: the shape of every matrix of both sides, one dict per size drawn (``{"A": "5x2"}``)
    shapes: list = field(default_factory=list)
    skipped: int = 0  # instances where the derived side is not defined or an SVD did not converge (not counted)
    #: for an identity or a chain, the names read as scalars; None for a derivation
    scalars: list | None = None

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
                "counterexample": self.counterexample, "reference": self.reference, "candidate": self.candidate,
                "shapes": self.shapes, "skipped": self.skipped, "scalars": self.scalars}

    def _repr_markdown_(self) -> str:
        """Jupyter: the verdict and how far it reaches, both sides, and for a difference the diagnosis and the
        counterexample (sizes, relative difference, inputs and both values), as :func:`format_verdict` prints."""
        drawn = f"; {self.instances} random instances at {DPS} digits" if self.instances else ""
        lines = [f"**Cross-check: {self.verdict.upper()}** ({markdown_text(self.method_text + drawn)})", "",
                 f"- derived: {_code(self.reference)}", f"- candidate: {_code(self.candidate)}"]
        if self.verdict == "equal":
            return "\n".join(lines) + "\n"
        lines += [f"- diagnosis: {markdown_text(d)}" for d in self.diagnosis]
        ce = self.counterexample
        if ce:
            sizes = ", ".join(f"{k} = {n}" for k, n in ce["sizes"].items())
            diff = ce.get("relative_difference")
            rel = "" if diff is None else f", relative difference {diff:.3g} (‖candidate − derived‖_F / ‖derived‖_F)"
            defined = ce.get("defined", {})
            values = [f"{name}{f' (= {defined[name]})' if name in defined else ''} =\n{_array_text(value)}"
                      for name, value in ce["inputs"].items()]
            values.append(f"derived value =\n{_array_text(ce['derived'])}")
            values.append("candidate value = could not be evaluated" if ce["candidate"] is None else
                          f"candidate value =\n{_array_text(ce['candidate'])}")
            lines += ["", f"Counterexample at {markdown_text(sizes + rel)}:", "", "```text", *values, "```"]
        return "\n".join(lines) + "\n"


class _Printer(StrPrinter):
    """``sstr`` with Gram roots printed by name only when the name reads back as the root (see the module
    docstring): ``namespace`` maps the names the candidate is read with to their expressions."""

    def __init__(self, namespace=None):
        super().__init__()
        self.namespace = namespace or {}

    def _print(self, expr, **kwargs):
        if type(expr) in (GramSqrt, GramInvSqrt, PolarFactor) and not self._named(expr):
            return self._explicit(expr)
        return super()._print(expr, **kwargs)

    def _print_MatMul(self, expr):
        """As SymPy's, with the product's precedence computed once, not once per factor (SymPy's finds it by
        negating the whole product for every factor: quadratic in the number of factors)."""
        c, m = expr.as_coeff_mmul()
        sign = ""
        if c.is_number:
            re, im = c.as_real_imag()
            if (im.is_zero and re.is_negative) or (re.is_zero and im.is_negative):
                expr, sign = _keep_coeff(-c, m), "-"
        prec = precedence(expr)
        return sign + "*".join(self.parenthesize(arg, prec) for arg in expr.args)

    def _named(self, node) -> bool:
        if not hasattr(node.base, "name"):
            return False  # C_[A*B] names nothing
        label = ("U_" if isinstance(node, PolarFactor) else "C_") + short_name(node.base)
        named = self.namespace.get(label)
        if node.side == "right" and node.damping == 0 and named is None:
            return True  # C_W, C_W^-1 and U_W are (WᵀW)^{±1/2} and W (WᵀW)^{-1/2} unless C_W names another root
        return named is not None and named.args[:3] == node.args[:3]

    def _explicit(self, node) -> str:
        w = node.base
        gram = MatMul(w.T, w) if node.side == "right" else MatMul(w, w.T)
        if node.damping != 0:
            gram = MatAdd(gram, MatMul(node.damping, Identity(gram.shape[0])))
        if isinstance(node, GramSqrt):
            return f"({self._print(gram)})^(1/2)"
        root = f"({self._print(gram)})^(-1/2)"
        if isinstance(node, GramInvSqrt):
            return root
        factor = self.parenthesize(w, 50)  # a product's precedence: a sum is bracketed
        return f"{factor}*{root}" if node.side == "right" else f"{root}*{factor}"


def show(expr, namespace=None) -> str:
    """``expr`` as text that reads back as it (see the module docstring)."""
    return _Printer(namespace).doprint(expr) if expr is not S.NaN else "nan"


def shapes_of(exprs, sizes_list) -> list:
    """The shape of every matrix of ``exprs`` at each of ``sizes_list``, as ``{"A": "5x2"}``."""
    mats = sorted({m for e in exprs for m in free_symbols(e) if getattr(m, "is_Matrix", False)}, key=str)
    out = []
    for sizes in sizes_list:
        entry = {str(m): "x".join(str(k.xreplace(sizes)) for k in m.shape) for m in mats}
        if entry not in out:
            out.append(entry)
    return out


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
    drawn = f", {v.instances} random instances at {DPS} digits" if v.instances else ""
    if v.skipped:
        drawn += f"; {v.skipped} more skipped: the derived side is not defined there, or an SVD did not converge"
    head = f"{what}: {v.verdict.upper()} ({v.method_text}{drawn})"
    # a refused change of variables (a chain) shows its map and the variable it does not reach
    first, second = ("map:      ", "onto:     ") if v.verdict == "refused" else ("derived:  ", "candidate:")
    lines = [head, f"  {first} {v.reference}", f"  {second} {v.candidate}"]
    if v.scalars is not None:  # an identity or a chain: say which names were read as what
        if v.shapes and v.shapes[0]:
            lines.append("  shapes:    " + "; ".join(", ".join(f"{k} {n.replace('x', '×')}" for k, n in entry.items())
                                                     for entry in v.shapes))
        if v.scalars:
            lines.append(f"  scalars:   {', '.join(v.scalars)} (read as scalars; --assume 'NAME: matrix' "
                         "declares a matrix)")
    if v.verdict != "equal":
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


def _code(text: str) -> str:
    """``text`` as a Markdown code span that no backtick inside it can end."""
    ticks = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{ticks} {text} {ticks}"

__all__ = ["Verdict", "format_verdict", "shapes_of", "show"]
