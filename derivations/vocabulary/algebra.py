"""Tree surgery on matrix expressions, written so that SymPy simplifies nothing behind our back.

SymPy's ``doit`` merges equal neighbours into powers (``C C → C²``) and some of its
canonicalizations are unsound for this work (``X X⁻¹ → I`` with no invertibility fact). The
derivation engine uses only the operations here, which are sound for all matrices:
flattening of products and sums, moving scalar factors to the front, dropping identity
factors, pushing a transpose through a product (``(AB)ᵀ = BᵀAᵀ``) and through a sum,
``(Aᵀ)ᵀ = A``, and ``Aᵀ = A`` for nodes that are symmetric by construction.
"""

from __future__ import annotations

from collections.abc import Callable

from sympy import Basic, Mul, S
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixExpr, Transpose, ZeroMatrix

from derivations.vocabulary.nodes import (
    SPD,
    SYMMETRIC,
    GramInvSqrt,
    GramSqrt,
    IsotropicScale,
    PolarFactor,
    _Derived,
    facts_of,
)


def is_symmetric(expr: Basic) -> bool:
    """True when ``expr`` is symmetric by construction (a fact it carries)."""
    return bool({SYMMETRIC, SPD} & facts_of(expr))


def transpose(expr: MatrixExpr) -> MatrixExpr:
    """``exprᵀ`` pushed through products and sums, with ``(Aᵀ)ᵀ = A`` and symmetric nodes kept."""
    if isinstance(expr, Transpose):
        return expr.arg
    if isinstance(expr, MatMul):
        coeff, mats = expr.as_coeff_matrices()
        return product(coeff, *[transpose(m) for m in reversed(mats)])
    if isinstance(expr, MatAdd):
        return total(*[transpose(t) for t in expr.args])
    if isinstance(expr, (Identity, ZeroMatrix)):
        return expr if expr.rows == expr.cols else ZeroMatrix(expr.cols, expr.rows)
    if is_symmetric(expr):
        return expr
    return Transpose(expr)


def product(*factors: Basic) -> Basic:
    """Flattened product with one scalar coefficient in front and no identity factors."""
    coeff = S.One
    mats = []
    for f in factors:
        if isinstance(f, MatMul):
            c, ms = f.as_coeff_matrices()
            coeff *= c
            mats.extend(ms)
        elif getattr(f, "is_Matrix", False):
            mats.append(f)
        else:
            coeff *= f
    if any(isinstance(m, ZeroMatrix) for m in mats):
        return ZeroMatrix(mats[0].rows, mats[-1].cols)
    kept = [m for m in mats if not isinstance(m, Identity)]
    if not kept:
        if not mats:
            return coeff
        kept = [mats[0]]
    if coeff == 1 and len(kept) == 1:
        return kept[0]
    args = ([coeff] if coeff != 1 else []) + kept
    return MatMul(*args)


def total(*terms: Basic) -> Basic:
    """Flattened sum without zero terms."""
    flat: list[Basic] = []
    for t in terms:
        flat.extend(t.args if isinstance(t, MatAdd) else [t])
    flat = [t for t in flat if not isinstance(t, ZeroMatrix)]
    if not flat:
        return terms[0]
    return flat[0] if len(flat) == 1 else MatAdd(*flat)


def rebuild(expr: Basic, args) -> Basic:
    """``expr`` with new arguments, tidied the way :func:`tidy` would."""
    if isinstance(expr, MatMul):
        return product(*args)
    if isinstance(expr, MatAdd):
        return total(*args)
    if isinstance(expr, Transpose):
        return transpose(args[0])
    if isinstance(expr, Mul):
        return Mul(*args)
    return expr.func(*args)


def map_bottom_up(expr: Basic, fn: Callable[[Basic], Basic], *, enter_derived: bool = False) -> Basic:
    """Apply ``fn`` to every node, children first; derived nodes are leaves unless asked."""
    if not expr.args or (isinstance(expr, _Derived) and not enter_derived):
        return fn(expr)
    if not isinstance(expr, Basic) or isinstance(expr, (Identity, ZeroMatrix)):
        return fn(expr)
    new_args = [map_bottom_up(a, fn, enter_derived=enter_derived) if isinstance(a, Basic) else a
                for a in expr.args]
    if all(n is o for n, o in zip(new_args, expr.args, strict=True)):
        return fn(expr)
    return fn(rebuild(expr, new_args))


def tidy(expr: Basic) -> Basic:
    """Sound normal form: flatten products and sums, push transposes inward, drop identities."""
    return map_bottom_up(expr, lambda e: rebuild(e, e.args) if isinstance(e, (MatMul, MatAdd, Transpose)) else e)


def replace_free(expr: Basic, old: Basic, new: Basic) -> Basic:
    """Replace ``old`` by ``new`` outside derived nodes (``C_K`` keeps its own ``W_K``)."""
    return tidy(map_bottom_up(expr, lambda e: new if e == old else e))


def rewrite_adjacent(expr: Basic, pattern: list, replacement: list) -> tuple[Basic, int]:
    """Replace each run of adjacent product factors equal to ``pattern`` by ``replacement``.

    Returns the new expression and the number of replacements. An empty replacement of a
    square run becomes the identity.
    """
    count = 0
    k = len(pattern)

    def visit(e):
        nonlocal count
        if not isinstance(e, MatMul):
            return e
        coeff, mats = e.as_coeff_matrices()
        out, i, changed = [], 0, False
        while i < len(mats):
            if list(mats[i:i + k]) == list(pattern):
                out.extend(replacement)
                i += k
                count += 1
                changed = True
            else:
                out.append(mats[i])
                i += 1
        if not changed:
            return e
        if not out:
            out = [Identity(mats[0].rows)]
        return product(coeff, *out)

    return tidy(map_bottom_up(expr, visit)), count


def with_damping(expr: Basic, damping) -> Basic:
    """``expr`` with every Gram root and isotropic scale damped by ``damping`` (the emitted λ)."""
    def damp(e):
        if isinstance(e, (GramSqrt, GramInvSqrt, PolarFactor)):
            return e.func(e.base, damping, e.side)
        if isinstance(e, IsotropicScale):
            return IsotropicScale(e.base, damping)
        return e
    return map_bottom_up(expr, damp)

