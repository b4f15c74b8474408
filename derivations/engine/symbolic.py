"""Symbolic verification of a step on explicit small matrices of symbols.

Every matrix symbol becomes an explicit matrix of fresh real symbols (symmetric when the
symbol carries that fact); Gram roots become generic symmetric matrices and their inverse
roots the exact inverses, polar factors ``W C⁻¹``; msign nodes and projectors become opaque
matrices of fresh symbols (one per distinct node). When the two sides of a step agree as rational
functions of these entries, the step holds for *every* value of them **at those sizes**: the
verdict says "verified symbolically at sizes (d=3, d_h=2)", never "proved" (no statement about
other sizes is made). When they disagree, the step is refuted at those sizes, provided the lemma
uses nothing the model leaves out (the engine only asks for lemmas marked ``algebraic``); a node
without an exact model (the spectral norms' values, Sylvester solutions) makes the verdict
"not modelled".
"""

from __future__ import annotations

from dataclasses import dataclass

from sympy import Matrix, S, Symbol, cancel, diag, symbols

from derivations.engine.algebra import is_symmetric
from derivations.engine.interpret import Interpreter, MissingRule
from derivations.engine.norms import FAMILIES, EntrywiseL1Norm
from derivations.engine.vocabulary import GramSqrt, PolarFactor


class Unsupported(MissingRule):
    """The expression holds a node that has no exact explicit model (a :class:`MissingRule`)."""

    def __init__(self, message: str, expr=None):
        TypeError.__init__(self, message)
        self.interpreter, self.node = "symbolic model", type(expr).__name__ if expr is not None else ""


class ExplicitModel(Interpreter):
    """Explicit symbolic matrices for the nodes of a set of expressions.

    One ``_eval_<Node>`` rule per node (or the node's own ``_symbolic``), dispatched along the class
    hierarchy like the numeric evaluator and the printers; a node without one is :class:`Unsupported`.
    """

    printmethod = "_symbolic"
    interpreter_name = "symbolic model"

    def __init__(self, sizes: dict, definitions: dict | None = None):
        super().__init__()
        self.sizes = sizes
        self.definitions = definitions or {}
        self.cache = {}
        self.counter = 0

    def _dim(self, d):
        return int(d.xreplace(self.sizes))

    def _fresh(self, rows, cols, symmetric=False):
        self.counter += 1
        tag = f"x{self.counter}_"
        entries = symbols(f"{tag}0:{rows * cols}", real=True)
        m = Matrix(rows, cols, entries)
        if symmetric:
            m = Matrix(rows, cols, lambda i, j: m[min(i, j), max(i, j)])
        return m

    def value(self, expr):
        if expr in self.cache:
            return self.cache[expr]
        out = self._print(expr)
        self.cache[expr] = out
        return out

    def emptyPrinter(self, expr):
        raise Unsupported(f"no explicit model for {type(expr).__name__}", expr)

    def _eval_MatrixSymbol(self, e):
        if e in self.definitions:
            return self.value(self.definitions[e])
        return self._fresh(self._dim(e.rows), self._dim(e.cols), is_symmetric(e))

    def _eval_Identity(self, e):
        return Matrix.eye(self._dim(e.rows))

    def _eval_ZeroMatrix(self, e):
        return Matrix.zeros(self._dim(e.rows), self._dim(e.cols))

    def _eval_MatMul(self, e):
        coeff, mats = e.as_coeff_matrices()
        out = self.value(mats[0])
        for m in mats[1:]:
            out = out * self.value(m)
        return self.value(coeff) * out

    def _eval_MatAdd(self, e):
        vals = [self.value(t) for t in e.args]
        return sum(vals[1:], vals[0])

    def _eval_Transpose(self, e):
        return self.value(e.arg).T

    def _eval_Inverse(self, e):
        return self.value(e.arg).inv()

    def _eval_GramSqrt(self, e):
        n = self._dim(e.size)
        return self._fresh(n, n, symmetric=True)

    def _eval_GramInvSqrt(self, e):
        return self.value(GramSqrt(*e.args)).inv()

    def _eval_PolarFactor(self, e):
        w, ci = self.value(e.base), self.value(e.gram_inv_sqrt())
        return w * ci if e.side == "right" else ci * w

    def _eval_HStack(self, e):
        return Matrix.hstack(*[self.value(b) for b in e.args])

    def _eval_BlockDiag(self, e):
        return diag(*[self.value(b) for b in e.args])

    def _eval_Projector(self, e):
        u = self.value(PolarFactor(e.base))
        return u * u.T

    def _eval_MatrixFunction(self, e):
        """msign and the sharp maps: opaque, one fresh matrix per function and (equal) argument."""
        arg = self.value(e.arg)
        key = (type(e).__name__, arg.shape, tuple(cancel(x) for x in arg))
        if key not in self.cache:
            self.cache[key] = self._fresh(*arg.shape)
        return self.cache[key]

    def _eval_Inner(self, e):
        a, b = self.value(e.args[0]), self.value(e.args[1])
        return sum((a[i] * b[i] for i in range(len(a))), S.Zero)

    def _eval_IsotropicScale(self, e):
        self.counter += 1
        return Symbol(f"c{self.counter}", positive=True)

    def _eval__MatrixScalar(self, e):  # norms (and any other matrix scalar without a rule of its own)
        raise Unsupported("norms have no polynomial model; compare their arguments instead", e)

    def _eval_Expr(self, e):  # scalar arithmetic; a matrix node without a rule is unsupported
        if getattr(e, "is_Matrix", False):
            return self.emptyPrinter(e)
        if e.is_Symbol or e.is_Number:
            return e
        return e.func(*[self.value(a) for a in e.args])


def _equal(a, b) -> bool:
    if hasattr(a, "shape") != hasattr(b, "shape"):
        return False
    if hasattr(a, "shape"):
        if a.shape != b.shape:
            return False
        return all(cancel(x - y) == 0 for x, y in zip(a, b, strict=False))
    return cancel(a - b) == 0


def _norm_types() -> tuple:
    return (EntrywiseL1Norm, *(f.norm for f in FAMILIES))


def _pair_value(model, expr):
    if isinstance(expr, _norm_types()):
        return (type(expr).__name__, model.value(expr.args[0]))
    return (None, model.value(expr))


@dataclass(frozen=True)
class Verdict:
    """Outcome of :func:`verify_equal`: ``status`` is ``verified``, ``refuted`` or ``not modelled``."""

    status: str
    sizes: str
    detail: str = ""

    def __str__(self):
        if self.status == "verified":
            return f"verified symbolically at sizes {self.sizes}"
        if self.status == "refuted":
            return f"refuted symbolically at sizes {self.sizes}: {self.detail}"
        return f"not modelled: {self.detail}"


def size_label(sizes: dict) -> str:
    """``(d=3, d_h=2)``."""
    return "(" + ", ".join(f"{k}={v}" for k, v in sorted(sizes.items(), key=lambda kv: str(kv[0]))) + ")"


def verify_equal(pairs, sizes: dict, definitions: dict | None = None,
                 substitution: tuple | None = None) -> Verdict:
    """Compare every ``(before, after)`` pair as rational functions of the explicit entries.

    Norms compare their arguments (equal arguments give equal norms; unequal arguments refute
    nothing about the norms, so they give "not modelled"). ``substitution = (X, expr)`` models a
    change of variables: ``X`` is replaced by ``expr`` in the ``before`` side.
    """
    label = size_label(sizes)
    model = ExplicitModel(sizes, definitions)
    try:
        if substitution is not None:
            old, new = substitution
            model.cache[old] = model.value(new)
        for before, after in pairs:
            kb, vb = _pair_value(model, before)
            ka, va = _pair_value(model, after)
            if kb != ka or not _equal(vb, va):
                if kb or ka:
                    return Verdict("not modelled", label, f"the arguments of {before} and {after} differ as "
                                                          "matrices; the norm values have no polynomial model")
                return Verdict("refuted", label, f"{before} and {after} differ as rational functions of the entries")
    except Unsupported as exc:
        return Verdict("not modelled", label, str(exc))
    except (ValueError, ZeroDivisionError) as exc:
        return Verdict("not modelled", label, f"the explicit model failed: {exc}")
    return Verdict("verified", label)


def prove_equal(pairs, sizes: dict, definitions: dict | None = None,
                substitution: tuple | None = None) -> str:
    """Compatibility wrapper of :func:`verify_equal`: ``"proved"`` when verified at these sizes, else
    ``"numeric only"`` (a refutation included). New code should call :func:`verify_equal`."""
    return "proved" if verify_equal(pairs, sizes, definitions, substitution).status == "verified" else "numeric only"
