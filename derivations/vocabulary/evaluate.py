"""Numerical evaluation of matrix expressions on random instances that satisfy their facts.

:func:`evaluate` interprets a SymPy expression made of the vocabulary's nodes with a backend
from :mod:`foundation.compute.reference` (float64 NumPy, or mpmath at high precision); its rules are the
``_eval_<Node>`` methods of :class:`derivations.vocabulary.numeric.NumericEvaluator` (or a node's own
``_numeric``), dispatched along the class hierarchy like every other interpreter.
:class:`InstanceSampler` draws values for the symbols of an expression that satisfy the
structural facts the symbols carry, and computes the defined symbols (factor gradients) from
their definitions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sympy import Basic, Symbol
from sympy.matrices.expressions import MatrixSymbol

from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ISOTROPIC_COLUMNS,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    facts_of,
)
from derivations.vocabulary.numeric import EvaluationError, NumericEvaluator, evaluate
from foundation.compute.reference import NumpyBackend
from foundation.compute.spectra import random_orthonormal


def _size(dim, dims) -> int:
    """A dimension as an integer (``dims`` gives the sizes of the dimension symbols)."""
    return NumericEvaluator({}, dims=dims).size(dim)


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

    def sample(self, rng: np.random.Generator, symbols: Iterable[Basic], backend: Any = None) -> dict:
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


__all__ = ["EvaluationError", "InstanceSampler", "NumericEvaluator", "evaluate", "evaluate_on", "free_symbols",
           "relative_error"]


def evaluate_on(expr: Basic, values: dict, backend: Any = None) -> Any:
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
            for dim, size in zip(sym.shape, np.shape(env[sym]), strict=False):
                if isinstance(dim, Symbol):
                    dims[dim] = size
    return evaluate(expr, env, backend, dims)

