"""Expression nodes the formula language adds to the vocabulary for hand notation: the Kronecker product and
``vec``, ``min``/``max`` of scalars, the rank, singular values of any matrix and sums of their powers.

Each node carries its own rules (:mod:`derivations.vocabulary.interpret`): ``_numeric`` (float64 and mpmath),
``_symbolic`` (an explicit model for the Kronecker product and ``vec``; the others have none, so a verdict on
them stays numeric), and ``_sympystr`` text that the parser reads back as the same node.

* ``Kron(A, B)``: ``A ⊗ B``, ``(mp) × (nq)`` for ``A`` ``m × n`` and ``B`` ``p × q``.
* ``Vec(X)``: the columns of ``X`` stacked into one column (column-major, as in ``vec(A X B) = (Bᵀ ⊗ A) vec(X)``).
* ``MinOf``/``MaxOf``: SymPy's ``Min``/``Max`` (so ``min(3, 2)`` is ``2`` and ``min(d, n)`` stays symbolic)
  with a numeric rule.
* ``MatrixRank(X)``: the rank, from the singular values at the working precision (:class:`Rank`).
* ``SingularValueOf(X, k)``: ``σ_k(X)``, the ``k``-th largest singular value (zero beyond ``min(m, n)``), for a
  tall or a wide ``X``.
* ``SingularSum(X, lo, hi, p)``: ``Σ_{lo < i ≤ hi} σ_i(X)^p`` (``hi = ∞``: to the last singular value).
"""

from __future__ import annotations

import mpmath
import numpy as np
from sympy import Basic, Expr, Max, Min, S, sympify
from sympy.matrices import Matrix
from sympy.matrices.expressions import MatrixExpr, Transpose

from derivations.engine.symbolic import Unsupported
from derivations.vocabulary.evaluate import EvaluationError
from derivations.vocabulary.spectral_nodes import Rank, SingularValue, thin_svd


def _no_model(node, model=None):
    raise Unsupported(f"{type(node).__name__} has no polynomial model", node)


def _rows_cols(ev, value):
    return (value.rows, value.cols) if ev.backend.name == "mpmath" else np.shape(value)


class Kron(MatrixExpr):
    """``A ⊗ B``: the Kronecker product of two matrices."""

    def __new__(cls, a, b):
        return Basic.__new__(cls, sympify(a), sympify(b))

    @property
    def shape(self):
        a, b = self.args
        return (a.shape[0] * b.shape[0], a.shape[1] * b.shape[1])

    def _numeric(self, ev):
        a, b = ev(self.args[0]), ev(self.args[1])
        if ev.backend.name != "mpmath":
            return np.kron(a, b)
        (m, n), (p, q) = _rows_cols(ev, a), _rows_cols(ev, b)
        out = mpmath.zeros(m * p, n * q)
        for i in range(m):
            for j in range(n):
                for k in range(p):
                    for t in range(q):
                        out[i * p + k, j * q + t] = a[i, j] * b[k, t]
        return out

    def _symbolic(self, model):
        a, b = model.value(self.args[0]), model.value(self.args[1])
        return Matrix(a.rows * b.rows, a.cols * b.cols,
                      lambda i, j: a[i // b.rows, j // b.cols] * b[i % b.rows, j % b.cols])

    def _sympystr(self, printer):
        return "kron(" + ", ".join(printer._print(x) for x in self.args) + ")"

    def _latex(self, printer):
        return r" \otimes ".join(rf"\left({printer._print(x)}\right)" for x in self.args)


class Vec(MatrixExpr):
    """``vec(X)``: the columns of ``X`` stacked, an ``(mn) × 1`` matrix."""

    def __new__(cls, x):
        return Basic.__new__(cls, sympify(x))

    @property
    def shape(self):
        x = self.args[0]
        return (x.shape[0] * x.shape[1], S.One)

    def _numeric(self, ev):
        x = ev(self.args[0])
        if ev.backend.name != "mpmath":
            return np.reshape(x, (-1, 1), order="F")
        m, n = _rows_cols(ev, x)
        return mpmath.matrix([[x[i, j]] for j in range(n) for i in range(m)])

    def _symbolic(self, model):
        x = model.value(self.args[0])
        return Matrix([x[i, j] for j in range(x.cols) for i in range(x.rows)])

    def _sympystr(self, printer):
        return f"vec({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\operatorname{{vec}}\left({printer._print(self.args[0])}\right)"


class MinOf(Min):
    """``min(a, b, …)`` of scalars (SymPy's ``Min``, with a numeric rule)."""

    def _numeric(self, ev):
        return min(ev(a) for a in self.args)

    _symbolic = _no_model

    def _sympystr(self, printer):
        return "min(" + ", ".join(printer._print(a) for a in self.args) + ")"


class MaxOf(Max):
    """``max(a, b, …)`` of scalars (SymPy's ``Max``, with a numeric rule)."""

    def _numeric(self, ev):
        return max(ev(a) for a in self.args)

    _symbolic = _no_model

    def _sympystr(self, printer):
        return "max(" + ", ".join(printer._print(a) for a in self.args) + ")"


class MatrixRank(Rank):
    """``rank(X)`` read from a formula (:class:`Rank`, with no symbolic model: its verdicts are numeric)."""

    _symbolic = _no_model


def _singular_values(ev, x) -> list:
    """The singular values of ``x``, descending, for a tall or a wide matrix."""
    rows, cols = ev.shape(x)
    return thin_svd(ev, x if rows >= cols else Transpose(x))[1]


class SingularValueOf(SingularValue):
    """``σ_k(X)`` of any matrix (tall or wide); printed with its matrix, ``sigma_(k)(X)``."""

    def _numeric(self, ev):
        s = _singular_values(ev, self.args[0])
        k = ev.size(self.args[1])
        if k < 1:
            raise EvaluationError(f"σ_{k}: singular values count from 1")
        return s[k - 1] if k <= len(s) else ev.backend.scalar(0)

    _symbolic = _no_model

    def _sympystr(self, printer):
        return f"sigma_({printer._print(self.args[1])})({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\sigma_{{{printer._print(self.args[1])}}}\left({printer._print(self.args[0])}\right)"


class SingularSum(Expr):
    """``Σ_{lo < i ≤ hi} σ_i(X)^p``; ``hi`` is ``oo`` for every singular value after ``lo``."""

    is_commutative = True
    is_real = True

    def __new__(cls, x, lo, hi, power):
        return Expr.__new__(cls, sympify(x), sympify(lo), sympify(hi), sympify(power))

    def _numeric(self, ev):
        x, lo, hi, p = self.args
        s = _singular_values(ev, x)
        first = ev.size(lo)
        last = len(s) if hi is S.Infinity else min(ev.size(hi), len(s))
        if first < 0:
            raise EvaluationError(f"a sum over singular values from i = {first + 1}: they count from 1")
        exponent = mpmath.mpf(p.p) / p.q if ev.backend.name == "mpmath" else float(p.p) / p.q
        return sum((s[i] ** exponent for i in range(first, last)), ev.backend.scalar(0))

    _symbolic = _no_model

    def _bounds(self, printer) -> str:
        _, lo, hi, _ = self.args
        if hi is S.Infinity:
            return f"(i>{printer._print(lo)})"
        return f"(i={printer._print(lo + 1)})^({printer._print(hi)})"

    def _sympystr(self, printer):
        x, _, _, p = self.args
        power = "" if p == 1 else f"^({printer._print(p)})"
        return f"sum_{self._bounds(printer)} sigma_i({printer._print(x)}){power}"

    def _latex(self, printer):
        x, lo, hi, p = self.args
        upper = "" if hi is S.Infinity else f"^{{{printer._print(hi)}}}"
        return (rf"\sum_{{i > {printer._print(lo)}}}{upper} \sigma_i\left({printer._print(x)}\right)"
                + ("" if p == 1 else f"^{{{printer._print(p)}}}"))


__all__ = ["Kron", "MatrixRank", "MaxOf", "MinOf", "SingularSum", "SingularValueOf", "Vec"]
