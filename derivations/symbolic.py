"""Symbolic verification of a step on explicit small matrices of symbols.

Every matrix symbol becomes an explicit matrix of fresh real symbols (symmetric when the
symbol carries that fact); Gram roots become generic symmetric matrices and their inverse
roots the exact inverses, polar factors ``W C⁻¹``; msign nodes and projectors become opaque
matrices of fresh symbols (one per distinct node). A step whose two sides agree as rational
functions of these entries holds for every value of them, hence is *proved*. Steps that need a
fact the explicit model does not encode (orthonormality, the spectral identities of msign)
come out as "numeric only": that is never a failure, only a weaker kind of evidence.
"""

from __future__ import annotations

from sympy import MatAdd, MatMul, Matrix, S, Symbol, Transpose, cancel, symbols
from sympy.matrices.expressions import Identity, Inverse, MatrixSymbol, ZeroMatrix

from .algebra import is_symmetric
from .vocabulary import (
    BlockDiag,
    GramInvSqrt,
    GramSqrt,
    HStack,
    Inner,
    IsotropicScale,
    Msign,
    NuclearNorm,
    OpNorm,
    PolarFactor,
    Projector,
)


class Unsupported(Exception):
    """The expression holds a node that has no exact explicit model."""


class ExplicitModel:
    """Explicit symbolic matrices for the nodes of a set of expressions."""

    def __init__(self, sizes: dict, definitions: dict | None = None):
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
        out = self._value(expr)
        self.cache[expr] = out
        return out

    def _value(self, e):
        if isinstance(e, MatrixSymbol):
            if e in self.definitions:
                return self.value(self.definitions[e])
            return self._fresh(self._dim(e.rows), self._dim(e.cols), is_symmetric(e))
        if isinstance(e, Identity):
            return Matrix.eye(self._dim(e.rows))
        if isinstance(e, ZeroMatrix):
            return Matrix.zeros(self._dim(e.rows), self._dim(e.cols))
        if isinstance(e, MatMul):
            coeff, mats = e.as_coeff_matrices()
            out = self.value(mats[0])
            for m in mats[1:]:
                out = out * self.value(m)
            return self.value(coeff) * out
        if isinstance(e, MatAdd):
            vals = [self.value(t) for t in e.args]
            out = vals[0]
            for v in vals[1:]:
                out = out + v
            return out
        if isinstance(e, Transpose):
            return self.value(e.arg).T
        if isinstance(e, Inverse):
            return self.value(e.arg).inv()
        if isinstance(e, GramSqrt):
            n = self._dim(e.size)
            return self._fresh(n, n, symmetric=True)
        if isinstance(e, GramInvSqrt):
            return self.value(GramSqrt(*e.args)).inv()
        if isinstance(e, PolarFactor):
            w, ci = self.value(e.base), self.value(e.gram_inv_sqrt())
            return w * ci if e.side == "right" else ci * w
        if isinstance(e, HStack):
            return Matrix.hstack(*[self.value(b) for b in e.args])
        if isinstance(e, BlockDiag):
            from sympy import diag
            return diag(*[self.value(b) for b in e.args])
        if isinstance(e, Projector):
            u = self.value(PolarFactor(e.base))
            return u * u.T
        if isinstance(e, Msign):
            # msign of equal arguments is the same matrix: key the opaque value by the argument
            arg = self.value(e.arg)
            key = ("msign", arg.shape, tuple(cancel(x) for x in arg))
            if key not in self.cache:
                self.cache[key] = self._fresh(*arg.shape)
            return self.cache[key]
        if isinstance(e, Inner):
            a, b = self.value(e.args[0]), self.value(e.args[1])
            return sum((a[i] * b[i] for i in range(len(a))), S.Zero)
        if isinstance(e, IsotropicScale):
            self.counter += 1
            return Symbol(f"c{self.counter}", positive=True)
        if isinstance(e, (OpNorm, NuclearNorm)):
            raise Unsupported("norms have no polynomial model; compare their arguments instead")
        if not getattr(e, "is_Matrix", False):
            if e.is_Symbol or e.is_Number:
                return e
            return e.func(*[self.value(a) for a in e.args])
        raise Unsupported(f"no explicit model for {type(e).__name__}")


def _equal(a, b) -> bool:
    if hasattr(a, "shape") != hasattr(b, "shape"):
        return False
    if hasattr(a, "shape"):
        if a.shape != b.shape:
            return False
        return all(cancel(x - y) == 0 for x, y in zip(a, b))
    return cancel(a - b) == 0


def _pair_value(model, expr):
    if isinstance(expr, (OpNorm, NuclearNorm)):
        return (type(expr).__name__, model.value(expr.args[0]))
    return (None, model.value(expr))


def prove_equal(pairs, sizes: dict, definitions: dict | None = None,
                substitution: tuple | None = None) -> str:
    """``"proved"`` when every ``(before, after)`` pair agrees as rational functions of the
    explicit entries (norms: their arguments agree), else ``"numeric only"``.

    ``substitution = (X, expr)`` models a change of variables: ``X`` is replaced by ``expr``
    in the ``before`` side.
    """
    model = ExplicitModel(sizes, definitions)
    try:
        if substitution is not None:
            old, new = substitution
            model.cache[old] = model.value(new)
        for before, after in pairs:
            kb, vb = _pair_value(model, before)
            ka, va = _pair_value(model, after)
            if kb != ka or not _equal(vb, va):
                return "numeric only"
    except (Unsupported, ValueError, ZeroDivisionError):
        return "numeric only"
    return "proved"
