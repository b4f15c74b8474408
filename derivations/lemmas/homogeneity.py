"""Absolute homogeneity of every norm of the vocabulary (Lemma Hn): ``‖c Z‖ = |c| ‖Z‖``.

A scalar inside a norm constraint, such as a temperature ``τ > 0`` in ``‖τ ΔW_Q W_Kᵀ‖_op ≤ ε/2``, comes out as
``τ ‖ΔW_Q W_Kᵀ‖_op ≤ ε/2``; the solve step then reads the ball ``‖·‖ ≤ ε/(2τ)``. Every norm is absolutely
homogeneous; the lemma states it for the norm nodes of the vocabulary (operator, Frobenius, nuclear, max-abs,
entrywise-1, RMS→RMS, ℓ1→ℓ2 and its dual ℓ2,1), with ``|c| = c`` for ``c`` known to be positive and ``|c| = −c`` for
``c`` known to be negative.
"""

from __future__ import annotations

from sympy.matrices.expressions import MatMul, MatrixSymbol

from derivations.lemmas.base import Applies, Lemma, everywhere, rewrite_nodes
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product
from derivations.vocabulary.evaluate import InstanceSampler
from derivations.vocabulary.nodes import NuclearNorm, OpNorm, dimension, positive_symbol
from derivations.vocabulary.norm_nodes import (
    ColumnNormSum,
    EntrywiseL1Norm,
    FrobeniusNorm,
    MaxAbsNorm,
    MaxColumnNorm,
    RmsOpNorm,
)

#: the norm nodes of the vocabulary (the norms and dual norms of the registered norm families)
NORM_NODES = (OpNorm, FrobeniusNorm, NuclearNorm, MaxAbsNorm, EntrywiseL1Norm, RmsOpNorm, MaxColumnNorm, ColumnNormSum)

_p, _q = dimension("p"), dimension("q")
_A, _C = MatrixSymbol("A", _p, _q), positive_symbol("c")


def _absolute(coeff):
    """``|c|`` for a scalar ``c`` whose sign is known, else ``None``."""
    if coeff.is_positive:
        return coeff
    if coeff.is_negative:
        return -coeff
    return None


def _rewrite(expr, **_):
    def rule(node):
        if not isinstance(node, NORM_NODES) or not isinstance(node.args[0], MatMul):
            return None
        coeff, mats = node.args[0].as_coeff_matrices()
        size = _absolute(coeff)
        if coeff == 1 or size is None:
            return None
        return size * type(node)(product(*mats)), [f"|{coeff}| = {size}: a norm is absolutely homogeneous"]

    return rewrite_nodes(expr, rule, "no norm of a matrix times a scalar of known sign")


def _statement() -> Statement:
    """``‖c A‖ = c ‖A‖`` and ``‖−c A‖ = c ‖A‖`` (``c > 0``) for every norm node."""
    return Statement(tuple(Clause(lhs, rhs) for lhs, rhs in _pairs()), sizes=({_p: 5, _q: 3}, {_p: 19, _q: 16}))


def _pairs() -> list:
    return [(norm(product(sign * _C, _A)), _C * norm(_A)) for norm in NORM_NODES for sign in (1, -1)]


def _ids():
    return _pairs(), InstanceSampler({_p: 5, _q: 3})


HOMOGENEITY = Lemma(
    key="norm_homogeneity", number="Hn", title="Norms are absolutely homogeneous",
    statement=_statement(), rewrite=_rewrite, identities=_ids,
    not_modelled="norms are not polynomial in the entries",
    applies=Applies(everywhere, order=34),
)
