"""Numerical evaluation of matrix expressions on random instances that satisfy their facts.

:func:`evaluate` interprets a SymPy expression made of the vocabulary's nodes with a backend
from :mod:`numerics.reference` (float64 NumPy, or mpmath at high precision).
:class:`InstanceSampler` draws values for the symbols of an expression that satisfy the
structural facts the symbols carry, and computes the defined symbols (factor gradients) from
their definitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sympy import Basic, Expr, MatAdd, MatMul, Symbol, Transpose
from sympy.matrices.expressions import Identity, Inverse, MatrixSymbol, ZeroMatrix

from numerics.reference import NumpyBackend
from numerics.spectra import random_orthonormal

from .vocabulary import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ISOTROPIC_COLUMNS,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
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
    RegularizedSylvester,
    facts_of,
)


class EvaluationError(ValueError):
    """An expression contains a node the evaluator does not know, or a free symbol with no value."""


def _size(dim, dims):
    try:
        return int(dim.xreplace(dims))
    except TypeError as exc:
        raise EvaluationError(f"dimension {dim} has no value in {dims}") from exc


def evaluate(expr: Basic, env: dict, backend=None, dims: dict | None = None, _memo=None):
    """Value of ``expr`` with symbols bound by ``env`` (matrices and scalars)."""
    backend = backend or NumpyBackend()
    memo = {} if _memo is None else _memo
    if expr in memo:
        return memo[expr]
    value = _evaluate(expr, env, backend, dims or {}, memo)
    memo[expr] = value
    return value


def _gram(node, env, backend, dims, memo):
    w = evaluate(node.base, env, backend, dims, memo)
    wt = backend.transpose(w)
    g = backend.matmul(wt, w) if node.side == "right" else backend.matmul(w, wt)
    lam = evaluate(node.damping, env, backend, dims, memo)
    n = _size(node.size, dims)
    return g + backend.eye(n) * lam


def _evaluate(expr, env, backend, dims, memo):
    rec = lambda e: evaluate(e, env, backend, dims, memo)
    if isinstance(expr, MatrixSymbol):
        if expr not in env:
            raise EvaluationError(f"no value for matrix {expr}")
        return env[expr]
    if isinstance(expr, Identity):
        return backend.eye(_size(expr.rows, dims))
    if isinstance(expr, ZeroMatrix):
        return backend.zeros((_size(expr.rows, dims), _size(expr.cols, dims)))
    if isinstance(expr, MatMul):
        coeff, mats = expr.as_coeff_matrices()
        out = rec(mats[0])
        for m in mats[1:]:
            out = backend.matmul(out, rec(m))
        return out * rec(coeff)
    if isinstance(expr, MatAdd):
        terms = [rec(t) for t in expr.args]
        out = terms[0]
        for t in terms[1:]:
            out = out + t
        return out
    if isinstance(expr, Transpose):
        return backend.transpose(rec(expr.arg))
    if isinstance(expr, Inverse):
        return backend.inverse(rec(expr.arg))
    if isinstance(expr, Msign):
        return backend.msign(rec(expr.arg))
    if isinstance(expr, (GramSqrt, GramInvSqrt)):
        return backend.psd_power(_gram(expr, env, backend, dims, memo), float(expr.exponent))
    if isinstance(expr, PolarFactor):
        w = rec(expr.base)
        c_inv = rec(expr.gram_inv_sqrt())
        return backend.matmul(w, c_inv) if expr.side == "right" else backend.matmul(c_inv, w)
    if isinstance(expr, HStack):
        return backend.hstack([rec(b) for b in expr.args])
    if isinstance(expr, BlockDiag):
        return backend.blockdiag([rec(b) for b in expr.args])
    if isinstance(expr, Projector):
        u = rec(PolarFactor(expr.base))
        return backend.matmul(u, backend.transpose(u))
    if isinstance(expr, RegularizedSylvester):
        a, b = expr.left, expr.right
        if expr.side == "inner":
            return backend.sylvester(rec(Transpose(a)), rec(Transpose(b)), rec(expr.damping), rec(expr.rhs))
        return backend.sylvester(rec(a), rec(b), rec(expr.damping), rec(expr.rhs))
    if isinstance(expr, IsotropicScale):
        w = rec(expr.base)
        cols = _size(expr.base.shape[1], dims)
        return (backend.inner(w, w) / cols + rec(expr.damping)) ** 0.5
    if isinstance(expr, Inner):
        return backend.inner(rec(expr.args[0]), rec(expr.args[1]))
    if isinstance(expr, OpNorm):
        return backend.op_norm(rec(expr.args[0]))
    if isinstance(expr, NuclearNorm):
        return backend.nuclear_norm(rec(expr.args[0]))
    if isinstance(expr, Expr) and not expr.is_Matrix:
        if expr.is_Number:
            return backend.scalar(expr)
        if isinstance(expr, Symbol):
            if expr not in env:
                raise EvaluationError(f"no value for scalar {expr}")
            return backend.scalar(env[expr])
        # scalar arithmetic (products, sums, powers of scalars and matrix scalars)
        values = [rec(a) for a in expr.args]
        if expr.is_Mul:
            out = values[0]
            for v in values[1:]:
                out = out * v
            return out
        if expr.is_Add:
            return sum(values[1:], values[0])
        if expr.is_Pow:
            return values[0] ** values[1]
    raise EvaluationError(f"cannot evaluate node {type(expr).__name__}: {expr}")


@dataclass
class InstanceSampler:
    """Draws random values for symbols consistent with their structural facts.

    ``dims`` gives concrete sizes to the dimension symbols; ``definitions`` maps a defined
    symbol (e.g. ``G_Q``) to its expression (``G_M W_K``), computed after the free symbols;
    ``scalars`` fixes scalar symbols (e.g. damping ``λ = 0``), others are drawn in ``[0.5, 2]``.
    """

    dims: dict
    definitions: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)

    def matrix(self, rng: np.random.Generator, sym: MatrixSymbol) -> np.ndarray:
        rows, cols = _size(sym.rows, self.dims), _size(sym.cols, self.dims)
        facts = facts_of(sym)
        if ORTHONORMAL_COLUMNS in facts:
            return random_orthonormal(rng, rows, cols)
        if ORTHONORMAL_ROWS in facts:
            return random_orthonormal(rng, cols, rows).T
        if ISOTROPIC_COLUMNS in facts:
            return rng.uniform(0.5, 2.0) * random_orthonormal(rng, rows, cols)
        if SPD in facts:
            a = rng.standard_normal((rows, rows))
            return a @ a.T + rows * np.eye(rows)
        if SYMMETRIC in facts:
            a = rng.standard_normal((rows, rows))
            return a + a.T
        if FULL_COLUMN_RANK in facts or FULL_ROW_RANK in facts:
            # Gaussian matrices have full rank almost surely; keep them well conditioned
            a = rng.standard_normal((rows, cols))
            u, s, vt = np.linalg.svd(a, full_matrices=False)
            return (u * np.clip(s, 0.3 * s.max(), None)) @ vt
        return rng.standard_normal((rows, cols))

    @staticmethod
    def _exact_facts(sym, value, backend):
        """Re-impose isometry facts at the backend's precision (float64 QR is not exact in mpmath)."""
        orth = getattr(backend, "orthonormalize", None)
        facts = facts_of(sym)
        if orth is None or not facts & {ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS, ISOTROPIC_COLUMNS}:
            return value
        if ORTHONORMAL_ROWS in facts:
            return orth(value.T).T
        if ISOTROPIC_COLUMNS in facts:
            scale = backend.op_norm(value)
            return orth(value) * scale
        return orth(value)

    def sample(self, rng: np.random.Generator, symbols, backend=None) -> dict:
        """Values for ``symbols`` (matrices and scalars) and every definition that uses them."""
        backend = backend or NumpyBackend()
        defined = set(self.definitions)
        base = (set(symbols) | free_symbols(*self.definitions.values())) - defined
        env = {}
        for sym in sorted(base, key=str):
            if isinstance(sym, MatrixSymbol):
                env[sym] = self._exact_facts(sym, backend.asarray(self.matrix(rng, sym)), backend)
            elif sym in self.scalars:
                env[sym] = self.scalars[sym]
            else:
                env[sym] = float(rng.uniform(0.5, 2.0))
        for sym, definition in self.definitions.items():
            env[sym] = evaluate(definition, env, backend, self.dims)
        return env


def free_symbols(*exprs) -> set:
    """Matrix and scalar symbols of ``exprs``, looking inside derived nodes, without dimensions."""
    out = set()
    for e in exprs:
        for atom in e.atoms(MatrixSymbol, Symbol):
            out.add(atom)
    dims = {s for e in exprs for m in e.atoms(MatrixSymbol) for s in m.shape if isinstance(s, Symbol)}
    return {s for s in out if s not in dims and not (isinstance(s, Symbol) and s.is_integer)}


def relative_error(a, b, backend) -> float:
    """``max|a − b| / max(1, max|b|)`` as a float."""
    diff = backend.max_abs(a - b)
    scale = max(1.0, float(backend.max_abs(b)))
    return float(diff) / scale


def evaluate_on(expr: Basic, values: dict, backend=None):
    """``expr`` with its symbols bound by name (``{"W_K": array, "epsilon": 0.1}``).

    Dimension symbols are read off the arrays' shapes, so a derived formula can be evaluated
    directly on concrete matrices (measurements, cross-checks).
    """
    env, dims = {}, {}
    for sym in free_symbols(expr):
        if str(sym) not in values:
            raise EvaluationError(f"no value for {sym}")
        env[sym] = values[str(sym)]
        if isinstance(sym, MatrixSymbol):
            for dim, size in zip(sym.shape, np.shape(env[sym])):
                if isinstance(dim, Symbol):
                    dims[dim] = size
    return evaluate(expr, env, backend, dims)

