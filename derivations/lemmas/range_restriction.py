"""Restriction to the row space of a wide partner: the minimum-norm solution (Lemma Rw).

For ``min ⟨A, X⟩ s.t. ‖W X‖ ≤ β`` with ``W`` (``d × f``) of full row rank, the constraint sees ``X`` only through
``Y = W X``, and every ``Y`` (``d × n``) is reached. The minimizers form an affine family
``{X* + N : W N = 0}`` when the objective depends on ``X`` only through ``W X`` too (``A = Wᵀ G_M``, the chain rule
of ``M = W X``); the lemma picks its minimum-Frobenius-norm member, the one in the row space of ``W``:
``X = Wᵀ (W Wᵀ)⁻¹ Y = Wᵀ C⁻¹ C⁻¹ Y`` with ``C = (W Wᵀ)^{1/2}``, and then ``W X = W Wᵀ C⁻¹ C⁻¹ Y = Y``. The new
variable ``Y`` has ``d`` rows where ``X`` has ``f``: the step is not a bijection, so its result is certified
against the original problem at the back-substitution (the duality certificate), not by the substitution alone.
"""

from __future__ import annotations

from sympy import S
from sympy.matrices.expressions import Identity, MatMul

from derivations.lemmas.base import _SMALL, Applies, Case, Lemma, NotApplicable, Offer, _fresh, _k, _m, _n
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, replace_free, rewrite_adjacent, transpose
from derivations.vocabulary.evaluate import InstanceSampler
from derivations.vocabulary.nodes import FULL_ROW_RANK, FactMatrix, GramInvSqrt, Inner, OpNorm, dimension, facts_of


class RangeRestriction(Lemma):
    """A change of variables into a smaller space that every value of the constraint's argument still reaches: the
    new variable may have another number of rows (:meth:`Derivation.change_variables` allows it)."""

    reshapes: bool = True


def right_inverse_of(w):
    """``Wᵀ (W Wᵀ)⁻¹ = Wᵀ C⁻¹ C⁻¹`` for ``W`` known to have full row rank (``W Wᵀ`` invertible), else ``None``."""
    if FULL_ROW_RANK not in facts_of(w):
        return None
    c_inv = GramInvSqrt(w, S.Zero, "left")
    return product(transpose(w), c_inv, c_inv)


def _rewrite(expr, *, variable, new, factor, side="left", **_):
    """``X = Wᵀ C⁻¹ C⁻¹ Y`` substituted, then ``W Wᵀ C⁻¹ C⁻¹ = I`` where it stands (the constraint)."""
    back = right_inverse_of(factor)
    if back is None or side != "left":
        raise NotApplicable(f"{factor} is not known to have full row rank (or the side is not left): no "
                            "restriction to its row space")
    if not expr.has(variable):
        raise NotApplicable(f"{variable} does not occur in {expr}")
    out = replace_free(expr, variable, product(back, new))
    c_inv = GramInvSqrt(factor, S.Zero, "left")
    out = rewrite_adjacent(out, [factor, transpose(factor), c_inv, c_inv], [])[0]
    return out, [f"{factor} has full row rank: {factor} {factor}ᵀ is invertible, every Y = {factor} X is reached; "
                 f"the minimum-norm X in the row space of {factor}"]


def _pattern():
    d = dimension("d")
    return FactMatrix("W", d, _m, [FULL_ROW_RANK]), d


def _ids():
    w, d = _pattern()
    c_inv = GramInvSqrt(w, S.Zero, "left")
    x, y, g = _fresh("X", _m, _n), _fresh("Y", d, _n), _fresh("G", d, _n)
    params = {"variable": x, "new": y, "factor": w, "side": "left"}
    back = product(transpose(w), c_inv, c_inv, y)
    return ([Case(OpNorm(product(w, x)), OpNorm(y), params, (x, back)),
             Case(Inner(g, product(w, x)), Inner(g, y), params, (x, back)),
             Case(product(w, transpose(w), c_inv, c_inv), Identity(d), rewrites=False)],
            InstanceSampler({**_SMALL, d: 2}))


def _statement() -> Statement:
    """``X = Wᵀ C_W⁻¹ C_W⁻¹ Y`` defines the restricted variable (``C_W = (W Wᵀ)^{1/2}``, ``W`` of full row rank);
    ``W Wᵀ C_W⁻¹ C_W⁻¹ = I`` (``W Wᵀ`` is invertible because ``W`` has full row rank, a fact of the pattern)."""
    w, d = _pattern()
    c_inv = GramInvSqrt(w, S.Zero, "left")
    return Statement((Clause(_fresh("X", _m, _k), product(transpose(w), c_inv, c_inv, _fresh("Y", d, _k)),
                             defines=True),
                      Clause(product(w, transpose(w), c_inv, c_inv), Identity(d))),
                     sizes=({_m: 5, _k: 3, d: 2}, {_m: 40, _k: 17, d: 16}))


def _offers(view):
    """Search: a partner of full row rank left of the variable in the constraint, and not a square one (a square
    partner of full rank is whitened without restriction)."""
    arg = view.state.constraint.args[0] if view.state.constraint.args else None
    if not isinstance(arg, MatMul):
        return []
    mats = list(arg.as_coeff_matrices()[1])
    out = []
    for i, m in enumerate(mats[1:], 1):
        w = mats[i - 1]
        if m == view.variable and right_inverse_of(w) is not None and w.shape[0] != w.shape[1]:
            new = _fresh_rows(view, w.shape[0])
            out.append(Offer(f"Lemma Rw ({view.variable} in the row space of {w})",
                             {"new": new, "factor": w, "side": "left", "lemma": RANGE_RESTRICTION},
                             method="change_variables"))
    return out


def _fresh_rows(view, rows):
    """A new variable like :meth:`SearchView.fresh_variable`, with ``rows`` rows."""
    z = view.fresh_variable()
    return type(z)(z.name.replace("Z_", "Y_", 1), rows, z.shape[1])


RANGE_RESTRICTION = RangeRestriction(
    key="range_restriction", number="Rw", title="Restriction to the row space of a wide partner",
    statement=_statement(), rewrite=_rewrite, identities=_ids,
    conditions=(r"\text{the solution set is the affine family } X^\star + \ker W;\ \text{the lemma picks its "
                r"minimum-Frobenius-norm member}",),
    not_modelled="the inverse of a Gram root of a wide matrix has no exact explicit model",
    applies=Applies(_offers, order=24),
)
