"""Isometries and transposition leave the operator norm (Lemma 2, Lemma T)."""

from __future__ import annotations

from sympy.matrices.expressions import MatMul, Transpose

from derivations.engine.algebra import product
from derivations.engine.evaluate import InstanceSampler
from derivations.engine.vocabulary import ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS, FactMatrix, Inner, OpNorm
from derivations.lemmas.base import (
    _SMALL,
    Case,
    Lemma,
    _fresh,
    _isometry_condition,
    _k,
    _m,
    _n,
    _orthonormal_cols,
    _orthonormal_rows,
    _tall,
    rewrite_nodes,
)


# ---- Lemma 2: orthonormal factors leave the operator norm ---------------------------------
def strip_isometries(norm_types):
    """The rule ``‖U Z Vᵀ‖ → ‖Z‖`` for the norms ``norm_types`` (unitarily invariant), ``U, V`` known to
    have orthonormal columns (a trailing wide factor with orthonormal rows, such as the left polar factor
    of a wide matrix, counts as ``Vᵀ``); ``None`` when no outer factor is an isometry."""
    def rule(e):
        if not isinstance(e, norm_types) or not isinstance(e.args[0], MatMul):
            return None
        coeff, mats = e.args[0].as_coeff_matrices()
        mats, conditions = list(mats), []
        while len(mats) > 1 and _orthonormal_rows(mats[-1]):  # Uᵀ, or a wide factor with orthonormal rows
            last = mats.pop()
            conditions.append(_isometry_condition(last.arg if isinstance(last, Transpose) else last))
        while len(mats) > 1 and _orthonormal_cols(mats[0]):
            conditions.append(_isometry_condition(mats.pop(0)))
        return (type(e)(product(coeff, *mats)), conditions) if conditions else None
    return rule


def _ortho_norm_rewrite(expr, **_):
    return rewrite_nodes(expr, strip_isometries((OpNorm,)),
                         "no operator norm with an outer factor known to have orthonormal columns")


def _ortho_norm_ids():
    u = _tall("U", ORTHONORMAL_COLUMNS)
    z1, z2 = _fresh("Z", _k, _n), _fresh("Y", _n, _k)
    v = FactMatrix("V", _k, _m, [ORTHONORMAL_ROWS])  # wide, orthonormal rows (a left polar factor)
    return ([(OpNorm(z1 * u.T), OpNorm(z1)), (OpNorm(u * z2), OpNorm(z2)), (OpNorm(z2 * v), OpNorm(z2))],
            InstanceSampler(_SMALL))


ORTHONORMAL_INVARIANCE = Lemma(
    key="orthonormal_invariance", number="2", title="Isometries leave the operator norm",
    statement=(r"U^{\top}U = I \;\Rightarrow\; \|Z U^{\top}\|_{\mathrm{op}} = \|Z\|_{\mathrm{op}},"
               r"\ \|U Z\|_{\mathrm{op}} = \|Z\|_{\mathrm{op}},"
               r"\ V V^{\top} = I \;\Rightarrow\; \|Z V\|_{\mathrm{op}} = \|Z\|_{\mathrm{op}}"),
    conditions=(r"U \text{ has orthonormal columns}", r"V \text{ has orthonormal rows}"),
    rewrite=_ortho_norm_rewrite, identities=_ortho_norm_ids,
)




# ---- transposition --------------------------------------------------------------------------
def drop_transpose(norm_types):
    """The rule ``‖Aᵀ‖ → ‖A‖`` for the norms ``norm_types`` (invariant under transposition)."""
    def rule(e):
        if isinstance(e, norm_types) and isinstance(e.args[0], Transpose):
            return type(e)(e.args[0].arg), []
        return None
    return rule


def _transpose_rewrite(expr, **_):
    return rewrite_nodes(expr, drop_transpose((OpNorm,)), "no operator norm of a transpose")


def _transpose_ids():
    a, b = _fresh("A", _k, _n), _fresh("B", _k, _n)
    return [(OpNorm(a.T), OpNorm(a)), Case(Inner(a.T, b.T), Inner(a, b), rewrites=False)], InstanceSampler(_SMALL)


TRANSPOSITION = Lemma(
    key="transposition", number="T", title="Transposition invariance",
    statement=(r"\|A^{\top}\|_{\mathrm{op}} = \|A\|_{\mathrm{op}},\quad"
               r"\langle A^{\top}, B^{\top}\rangle = \langle A, B\rangle"),
    rewrite=_transpose_rewrite, identities=_transpose_ids,
    not_modelled="invariance of the operator norm under transposition (a spectral fact)",
)
