"""Isometries and transposition leave the operator norm (Lemma 2, Lemma T); isometries scale the RMS→RMS norm
by their aspect (Lemma 2r)."""

from __future__ import annotations

from sympy import Mul, Symbol
from sympy.matrices.expressions import MatMul, Transpose

from derivations.lemmas.base import (
    _LARGE,
    _SMALL,
    Applies,
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
    everywhere,
    rewrite_nodes,
    stated_by,
)
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.evaluate import InstanceSampler
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    FactMatrix,
    Inner,
    OpNorm,
    PolarFactor,
    dimension,
)
from derivations.vocabulary.norm_nodes import AspectScale, RmsOpNorm


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


def isometry_statement(norm_types) -> Statement:
    """``‖c U Z V‖ = ‖c Z‖`` in each of ``norm_types`` (unitarily invariant: functions of the singular values
    alone), ``U`` with orthonormal columns and ``V`` with orthonormal rows (either may be absent): Lemma 2 for
    the operator norm, Lemma 2u (:mod:`derivations.engine.norms`) for the Frobenius and nuclear norms."""
    p = dimension("p")
    u, v = _tall("U", ORTHONORMAL_COLUMNS), FactMatrix("V", _k, p, [ORTHONORMAL_ROWS])
    z, c = _fresh("Z", _n, _k), Symbol("c", real=True)
    return Statement(tuple(Clause(norm(c * u * z * v), norm(c * z)) for norm in norm_types),
                     optional=frozenset({u, v}), sizes=({**_SMALL, p: 6}, {**_LARGE, p: 30}))


ORTHONORMAL_INVARIANCE = Lemma(
    key="orthonormal_invariance", number="2", title="Isometries leave the operator norm",
    statement=isometry_statement((OpNorm,)),
    rewrite=_ortho_norm_rewrite, identities=_ortho_norm_ids, applies=Applies(everywhere, order=30),
)


# ---- Lemma 2r: isometries scale the RMS→RMS norm by their aspect ----------------------------
def _shape_carrier(u):
    """A matrix of ``u``'s shape that the emitted code holds: a polar factor's partner (same shape), else ``u``."""
    if isinstance(u, PolarFactor):
        return u.base
    if isinstance(u, Transpose) and isinstance(u.arg, PolarFactor):
        return transpose(u.arg.base)
    return u


def _strip_rms_isometries(e):
    """``‖U Z V‖_rms → ‖Z‖_rms / (√(a/b) √(c/e))`` for ``U`` (``a × b``) with orthonormal columns and ``V``
    (``c × e``) with orthonormal rows: the RMS→RMS norm is ``√(cols/rows) ‖·‖_op`` and the isometries keep
    ``‖Z‖_op``, so only the aspect changes (:class:`AspectScale` of each isometry)."""
    if not isinstance(e, RmsOpNorm) or not isinstance(e.args[0], MatMul):
        return None
    coeff, mats = e.args[0].as_coeff_matrices()
    mats, conditions, scales = list(mats), [], []
    while len(mats) > 1 and _orthonormal_rows(mats[-1]):
        last = mats.pop()
        conditions.append(_isometry_condition(last.arg if isinstance(last, Transpose) else last))
        scales.append(AspectScale(_shape_carrier(last)))
    while len(mats) > 1 and _orthonormal_cols(mats[0]):
        first = mats.pop(0)
        conditions.append(_isometry_condition(first))
        scales.append(AspectScale(_shape_carrier(first)))
    if not conditions:
        return None
    return RmsOpNorm(product(coeff, *mats)) / Mul(*scales), conditions


def _rms_isometry_rewrite(expr, **_):
    return rewrite_nodes(expr, _strip_rms_isometries,
                         "no RMS→RMS norm with an outer factor known to have orthonormal columns or rows")


def _rms_isometry_ids():
    u, w = _tall("U", ORTHONORMAL_COLUMNS), _tall("W", FULL_COLUMN_RANK)
    z1, z2 = _fresh("Z", _k, _n), _fresh("Y", _n, _k)
    v = FactMatrix("V", _k, _m, [ORTHONORMAL_ROWS])  # wide, orthonormal rows (a left polar factor)
    uw = PolarFactor(w)
    return ([(RmsOpNorm(z1 * u.T), RmsOpNorm(z1) / AspectScale(u.T)),
             (RmsOpNorm(u * z2), RmsOpNorm(z2) / AspectScale(u)),
             (RmsOpNorm(z2 * v), RmsOpNorm(z2) / AspectScale(v)),
             (RmsOpNorm(uw * z2 * v), RmsOpNorm(z2) / (AspectScale(w) * AspectScale(v))),
             (RmsOpNorm(z1 * uw.T), RmsOpNorm(z1) / AspectScale(w.T))],
            InstanceSampler(_SMALL))


def _rms_isometry_statement() -> Statement:
    """``‖c U Z V‖_{RMS→RMS} = ‖c Z‖_{RMS→RMS} / (√(m/n) √(k/p))`` for ``U`` (``m × n``) with orthonormal columns and
    ``V`` (``k × p``) with orthonormal rows, either absent (its scale is then 1): the RMS→RMS norm is
    ``√(cols/rows) ‖·‖_op`` and the isometries keep ``‖Z‖_op``. A polar factor's scale is its partner's (the same
    shape: :class:`~derivations.vocabulary.norm_nodes.AspectScale`)."""
    p = dimension("p")
    u, v = _tall("U", ORTHONORMAL_COLUMNS), FactMatrix("V", _k, p, [ORTHONORMAL_ROWS])
    z, c = _fresh("Z", _n, _k), Symbol("c", real=True)
    return Statement((Clause(RmsOpNorm(c * u * z * v), RmsOpNorm(c * z) / (AspectScale(u) * AspectScale(v))),),
                     optional=frozenset({u, v}), sizes=({**_SMALL, p: 6}, {**_LARGE, p: 30}))


RMS_ISOMETRY = Lemma(
    key="rms_isometry", number="2r", title="Isometries scale the RMS→RMS norm by their aspect",
    statement=_rms_isometry_statement(),
    rewrite=_rms_isometry_rewrite, identities=_rms_isometry_ids, applies=Applies(everywhere, order=34),
    not_modelled="a spectral fact (isometries keep the singular values), with the RMS→RMS aspect scale",
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
    statement=stated_by(_transpose_ids),
    rewrite=_transpose_rewrite, identities=_transpose_ids, applies=Applies(everywhere, order=31),
    not_modelled="invariance of the operator norm under transposition (a spectral fact)",
)
