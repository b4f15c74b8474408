"""Identities of the spectral sign: isometries, scale, transposition, orthogonal factors, polar form, blocks
(Lemmas 5a–5e, O, B)."""

from __future__ import annotations

from sympy.matrices.expressions import Identity, MatMul, MatrixSymbol, Transpose

from derivations.lemmas.base import (
    _SMALL,
    Case,
    Lemma,
    NotApplicable,
    _fresh,
    _isometry_condition,
    _k,
    _m,
    _n,
    _orthonormal_cols,
    _tall,
    rewrite_nodes,
    stated_by,
)
from derivations.vocabulary.algebra import product, total, transpose
from derivations.vocabulary.evaluate import InstanceSampler
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    ORTHONORMAL_COLUMNS,
    BlockDiag,
    FactMatrix,
    GramInvSqrt,
    HStack,
    Msign,
    Projector,
    positive_symbol,
)


# ---- Lemma 5: msign identities ------------------------------------------------------------
def _msign_absorb_rewrite(expr, **_):
    """``msign(A) Uᵀ → msign(A Uᵀ)`` and ``U msign(A) → msign(U A)`` for isometric ``U``."""
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        mats, conditions = list(mats), []
        changed = True
        while changed:
            changed = False
            for i in range(len(mats) - 1):
                a, b = mats[i], mats[i + 1]
                if isinstance(a, Msign) and isinstance(b, Transpose) and _orthonormal_cols(b.arg):
                    conditions.append(_isometry_condition(b.arg))
                    mats[i:i + 2] = [Msign(product(a.arg, b))]
                    changed = True
                    break
                if isinstance(b, Msign) and _orthonormal_cols(a):
                    conditions.append(_isometry_condition(a))
                    mats[i:i + 2] = [Msign(product(a, b.arg))]
                    changed = True
                    break
        return (product(coeff, *mats), conditions) if conditions else None

    return rewrite_nodes(expr, rule, "no msign next to an isometric factor")


def _msign_extract_rewrite(expr, **_):
    """``msign(A O) → msign(A) O`` for a square ``O`` with orthonormal columns (an orthogonal matrix)."""
    def rule(e):
        if isinstance(e, Msign) and isinstance(e.arg, MatMul):
            coeff, mats = e.arg.as_coeff_matrices()
            last = mats[-1]
            if len(mats) > 1 and _orthonormal_cols(last) and last.shape[0] == last.shape[1]:
                return (product(Msign(product(coeff, *mats[:-1])), last),
                        [f"{last} is orthogonal (square, orthonormal columns)"])
        return None

    return rewrite_nodes(expr, rule, "no msign(A O) with a square orthogonal O")


def _msign_extract_ids():
    o = FactMatrix("O", _n, _n, [ORTHONORMAL_COLUMNS])
    a = _fresh("A", _k, _n)
    return [(Msign(product(a, o)), product(Msign(a), o))], InstanceSampler(_SMALL)


MSIGN_ORTHOGONAL = Lemma(
    key="msign_orthogonal", number="5e", title="msign commutes with an orthogonal right factor",
    statement=stated_by(_msign_extract_ids), rewrite=_msign_extract_rewrite, identities=_msign_extract_ids,
    algebraic=True,  # the symbolic model with facts takes an orthogonal factor out of msign
)


def _msign_absorb_ids():
    u = _tall("U", ORTHONORMAL_COLUMNS)
    a = _fresh("A", _k, _n)
    b = _fresh("B", _n, _k)
    return [(Msign(a) * u.T, Msign(a * u.T)), (u * Msign(b), Msign(u * b))], InstanceSampler(_SMALL)


MSIGN_ISOMETRY = Lemma(
    key="msign_isometry", number="5a", title="msign commutes with isometries",
    statement=stated_by(_msign_absorb_ids),
    rewrite=_msign_absorb_rewrite, identities=_msign_absorb_ids,
    algebraic=True,  # the symbolic model with facts takes isometries out of msign
)


def _msign_scale_rewrite(expr, **_):
    def rule(e):
        if isinstance(e, Msign) and isinstance(e.arg, MatMul):
            coeff, mats = e.arg.as_coeff_matrices()
            if coeff != 1:
                if not coeff.is_positive:
                    raise NotApplicable(f"msign(c A) = msign(A) needs c > 0; sign of {coeff} unknown")
                return Msign(product(*mats)), [f"{coeff} > 0"]
        return None

    return rewrite_nodes(expr, rule, "no msign of a positively scaled matrix")


def _msign_scale_ids():
    a = _fresh("A", _k, _n)
    c = positive_symbol("c")
    return [(Msign(c * a), Msign(a))], InstanceSampler(_SMALL)


MSIGN_SCALE = Lemma(
    key="msign_scale", number="5b", title="msign ignores positive scale",
    statement=stated_by(_msign_scale_ids), rewrite=_msign_scale_rewrite, identities=_msign_scale_ids,
    algebraic=True,  # the symbolic model with facts drops a positive scale inside msign
)


def _msign_transpose_rewrite(expr, **_):
    def rule(e):
        if isinstance(e, Transpose) and isinstance(e.arg, Msign):
            return Msign(transpose(e.arg.arg)), []
        return None

    return rewrite_nodes(expr, rule, "no transposed msign")


def _msign_transpose_ids():
    a = _fresh("A", _k, _n)
    return [(Transpose(Msign(a)), Msign(a.T))], InstanceSampler(_SMALL)


MSIGN_TRANSPOSE = Lemma(
    key="msign_transpose", number="5c", title="msign commutes with transposition",
    statement=stated_by(_msign_transpose_ids),
    rewrite=_msign_transpose_rewrite, identities=_msign_transpose_ids,
    algebraic=True,  # the symbolic model with facts has msign(Aᵀ) = msign(A)ᵀ
)




# ---- msign in polar form and orthogonal blocks ------------------------------------------------
def _polar_form_rewrite(expr, *, targets, reverse=False, **_):
    """``msign(X) → X C_X⁻¹`` (or back) for the ``targets`` asserted to have full column rank."""
    def rule(e):
        if not reverse and isinstance(e, Msign) and e.arg in targets:
            return product(e.arg, GramInvSqrt(e.arg)), [f"{e.arg} has full column rank"]
        if reverse and isinstance(e, MatMul):
            coeff, mats = e.as_coeff_matrices()
            for i in range(len(mats) - 1):
                if mats[i] in targets and mats[i + 1] == GramInvSqrt(mats[i]):
                    return (product(coeff, *mats[:i], Msign(mats[i]), *mats[i + 2:]),
                            [f"{mats[i]} has full column rank"])
        return None

    return rewrite_nodes(expr, rule, "no msign (or X C_X⁻¹) of a full-column-rank target")


def _polar_form_ids():
    x = _tall("X", FULL_COLUMN_RANK)
    return ([Case(Msign(x), product(x, GramInvSqrt(x)), {"targets": [x]}),
             Case(product(x, GramInvSqrt(x)), Msign(x), {"targets": [x], "reverse": True})], InstanceSampler(_SMALL))


MSIGN_POLAR_FORM = Lemma(
    key="msign_polar_form", number="5d", title="msign of a full-column-rank matrix",
    statement=stated_by(_polar_form_ids), rewrite=_polar_form_rewrite, identities=_polar_form_ids,
)


def _orthogonal_gram_rewrite(expr, *, pair, **_):
    a, b = pair
    target = GramInvSqrt(HStack(a, b))

    def rule(e):
        if e == target:
            return BlockDiag(GramInvSqrt(a), GramInvSqrt(b)), [f"{a}ᵀ{b} = 0 (orthogonal column spaces)"]
        return None

    return rewrite_nodes(expr, rule, f"no Gram root of [{a} | {b}]")


def _orthogonal_ids():
    a = _tall("A", FULL_COLUMN_RANK)
    r = _fresh("R", _m, _n)
    b = MatrixSymbol("B", _m, _n)
    sampler = InstanceSampler(_SMALL, {b: product(total(Identity(_m), product(-1, Projector(a))), r)})
    return [Case(GramInvSqrt(HStack(a, b)), BlockDiag(GramInvSqrt(a), GramInvSqrt(b)), {"pair": (a, b)})], sampler


ORTHOGONAL_BLOCKS = Lemma(
    key="orthogonal_blocks", number="O", title="Gram root of orthogonal blocks",
    statement=stated_by(_orthogonal_ids),
    conditions=(r"A^{\top}B = 0",), rewrite=_orthogonal_gram_rewrite, identities=_orthogonal_ids,
)


def _block_product_rewrite(expr, **_):
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        for i in range(len(mats) - 1):
            h, bd = mats[i], mats[i + 1]
            if isinstance(h, HStack) and isinstance(bd, BlockDiag) and len(h.args) == len(bd.args):
                merged = HStack(*[product(x, y) for x, y in zip(h.args, bd.args, strict=False)])
                return product(coeff, *mats[:i], merged, *mats[i + 2:]), []
        return None

    return rewrite_nodes(expr, rule, "no [A | B] blockdiag(C, D) product")


def _block_product_ids():
    a, b = _fresh("A", _m, _n), _fresh("B", _m, _k)
    c, dd = _fresh("C", _n, _n), _fresh("D", _k, _k)
    return [(product(HStack(a, b), BlockDiag(c, dd)), HStack(product(a, c), product(b, dd)))], InstanceSampler(_SMALL)


BLOCK_PRODUCT = Lemma(
    key="block_product", number="B", title="Concatenation times block diagonal",
    statement=stated_by(_block_product_ids),
    rewrite=_block_product_rewrite, identities=_block_product_ids, algebraic=True,
)
