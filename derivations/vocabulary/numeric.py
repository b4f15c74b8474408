"""The numeric evaluator: the value of a vocabulary expression in float64 (NumPy) or mpmath.

One ``_eval_<Node>`` rule per node on :class:`NumericEvaluator` (or a ``_numeric`` method on the
node itself), dispatched along the class hierarchy by :mod:`derivations.vocabulary.interpret`. The backend
(:mod:`foundation.compute.reference`) supplies the operations, so one set of rules serves both precisions.
"""

from __future__ import annotations

from sympy import Transpose

from derivations.vocabulary.interpret import Interpreter, MissingRule
from derivations.vocabulary.nodes import PolarFactor
from foundation.compute.reference import NumpyBackend


class EvaluationError(ValueError):
    """A free symbol or a dimension has no value, or a node has no evaluation rule."""


class NoEvaluationRule(MissingRule, EvaluationError):
    """The numeric evaluator has no rule for a node (a :class:`MissingRule` like every interpreter's)."""


class NumericEvaluator(Interpreter):
    """Value of an expression with symbols bound by ``env`` and dimensions by ``dims``.

    Results are memoized per node, so a shared subexpression (a Gram root) is computed once.
    """

    printmethod = "_numeric"
    interpreter_name = "numeric evaluator"

    def __init__(self, env: dict, backend=None, dims: dict | None = None, memo: dict | None = None):
        super().__init__()
        self.env, self.backend, self.dims = env, backend or NumpyBackend(), dims or {}
        self.memo = {} if memo is None else memo

    def _print(self, expr, **kwargs):
        if expr in self.memo:
            return self.memo[expr]
        value = super()._print(expr, **kwargs)
        self.memo[expr] = value
        return value

    __call__ = _print

    def emptyPrinter(self, expr):
        raise NoEvaluationRule(self.interpreter_name, expr)

    def size(self, dim) -> int:
        """A dimension (symbol or expression) as an integer."""
        try:
            return int(dim.xreplace(self.dims))
        except TypeError:
            raise EvaluationError(f"dimension {dim} has no value in {self.dims}") from None

    def shape(self, expr) -> tuple:
        return tuple(self.size(s) for s in expr.shape)

    # ---- matrices -------------------------------------------------------------------------
    def _eval_MatrixSymbol(self, expr):
        if expr not in self.env:
            raise EvaluationError(f"no value for matrix {expr}")
        return self.env[expr]

    def _eval_Identity(self, expr):
        return self.backend.eye(self.size(expr.rows))

    def _eval_ZeroMatrix(self, expr):
        return self.backend.zeros(self.shape(expr))

    def _eval_MatMul(self, expr):
        coeff, mats = expr.as_coeff_matrices()
        out = self(mats[0])
        for m in mats[1:]:
            out = self.backend.matmul(out, self(m))
        return out * self(coeff)

    def _eval_MatAdd(self, expr):
        terms = [self(t) for t in expr.args]
        return sum(terms[1:], terms[0])

    def _eval_Transpose(self, expr):
        return self.backend.transpose(self(expr.arg))

    def _eval_Inverse(self, expr):
        return self.backend.inverse(self(expr.arg))

    def _eval_Msign(self, expr):
        return self.backend.msign(self(expr.arg))

    def gram(self, node):
        """``WᵀW + λI`` (right) or ``WWᵀ + λI`` (left) of a Gram-root node."""
        w = self(node.base)
        wt = self.backend.transpose(w)
        g = self.backend.matmul(wt, w) if node.side == "right" else self.backend.matmul(w, wt)
        return g + self.backend.eye(self.size(node.size)) * self(node.damping)

    def _eval__GramNode(self, expr):
        return self.backend.psd_power(self.gram(expr), float(expr.exponent))

    def _eval_PolarFactor(self, expr):
        w, c_inv = self(expr.base), self(expr.gram_inv_sqrt())
        return self.backend.matmul(w, c_inv) if expr.side == "right" else self.backend.matmul(c_inv, w)

    def _eval_HStack(self, expr):
        return self.backend.hstack([self(b) for b in expr.args])

    def _eval_BlockDiag(self, expr):
        return self.backend.blockdiag([self(b) for b in expr.args])

    def _eval_Projector(self, expr):
        u = self(PolarFactor(expr.base))
        return self.backend.matmul(u, self.backend.transpose(u))

    def _eval_RegularizedSylvester(self, expr):
        a, b = expr.left, expr.right
        if expr.side == "inner":
            a, b = Transpose(a), Transpose(b)
        return self.backend.sylvester(self(a), self(b), self(expr.damping), self(expr.rhs))

    # ---- scalars --------------------------------------------------------------------------
    def _eval_IsotropicScale(self, expr):
        w = self(expr.base)
        return (self.backend.inner(w, w) / self.size(expr.base.shape[1]) + self(expr.damping)) ** 0.5

    def _eval_Inner(self, expr):
        return self.backend.inner(self(expr.args[0]), self(expr.args[1]))

    def _eval_OpNorm(self, expr):
        return self.backend.op_norm(self(expr.args[0]))

    def _eval_NuclearNorm(self, expr):
        return self.backend.nuclear_norm(self(expr.args[0]))

    def _eval_Number(self, expr):
        return self.backend.scalar(expr)

    def _eval_Symbol(self, expr):
        if expr.is_integer and expr in self.dims:
            return self.backend.scalar(self.dims[expr])
        if expr not in self.env:
            raise EvaluationError(f"no value for scalar {expr}")
        return self.backend.scalar(self.env[expr])

    def _eval_Mul(self, expr):
        values = [self(a) for a in expr.args]
        out = values[0]
        for v in values[1:]:
            out = out * v
        return out

    def _eval_Add(self, expr):
        values = [self(a) for a in expr.args]
        return sum(values[1:], values[0])

    def _eval_Pow(self, expr):
        return self(expr.base) ** self(expr.exp)


def evaluate(expr, env: dict, backend=None, dims: dict | None = None):
    """Value of ``expr`` with symbols bound by ``env`` (matrices and scalars); to share computed subexpressions
    between several expressions, call one :class:`NumericEvaluator` on each."""
    return NumericEvaluator(env, backend, dims)(expr)


__all__ = ["EvaluationError", "NumericEvaluator", "evaluate"]
