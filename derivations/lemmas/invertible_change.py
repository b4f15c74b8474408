"""A change of variables through an invertible whitening factor that moves the whitening into the objective
(Lemma 4i).

For ``min ⟨G, X⟩ s.t. ‖A X‖ ≤ β`` with ``A`` invertible (an SPD power ``P^p`` or a Gram root ``C_W`` of a
full-rank ``W``), the new variable ``Z = A X`` (``X = A⁻¹ Z``) turns the constraint into ``‖Z‖ ≤ β`` and the
objective into ``⟨G, A⁻¹ Z⟩``; on the right, ``Z = X A``. Unlike Lemma 4 the objective need not contain
the whitening already: this is the step a plainly stated problem needs.
"""

from __future__ import annotations

from sympy import Rational, Symbol
from sympy.matrices.expressions import Identity, MatMul

from derivations.lemmas.base import (
    _LARGE,
    _SMALL,
    Applies,
    Case,
    Lemma,
    NotApplicable,
    Offer,
    _fresh,
    _k,
    _n,
    _tall,
)
from derivations.lemmas.statement import Clause, Statement, known
from derivations.lemmas.whitening import _cov_statement
from derivations.vocabulary.algebra import product, replace_free, rewrite_adjacent
from derivations.vocabulary.evaluate import InstanceSampler
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    SPD,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    Inner,
    OpNorm,
    facts_of,
)
from derivations.vocabulary.spd_power import SPDPower

#: the exponent pattern of an SPD power in the statement (any nonzero rational in an instance)
_Q = Symbol("q")


def inverse_of(factor):
    """``A⁻¹`` for an invertible whitening factor ``A`` that the vocabulary can invert, else ``None``:
    ``(P^p)⁻¹ = P^{-p}`` for ``P`` known to be SPD, ``C_W⁻¹`` for a Gram root known to be invertible."""
    if type(factor) is GramSqrt and known("invertible", factor):
        return GramInvSqrt(*factor.args)
    if isinstance(factor, SPDPower) and factor.exponent != 0 and _spd(factor.arg):
        return SPDPower(factor.arg, -factor.exponent)
    return None


def _spd(matrix) -> bool:
    return SPD in facts_of(matrix) or isinstance(matrix, SPDPower)


def _rewrite(expr, *, variable, new, factor, side="right", **_):
    """``X = Z A⁻¹`` (right) or ``X = A⁻¹ Z`` (left) substituted, then ``A A⁻¹ = A⁻¹ A = I`` cancelled where the
    two stand side by side (the constraint); the objective keeps ``A⁻¹``."""
    inverse = inverse_of(factor)
    if inverse is None:
        raise NotApplicable(f"{factor} is not an invertible whitening factor (an SPD power of a matrix known to be "
                            "SPD, or a Gram root of a full-rank matrix)")
    if not expr.has(variable):
        raise NotApplicable(f"{variable} does not occur in {expr}")
    back = product(new, inverse) if side == "right" else product(inverse, new)
    out = replace_free(expr, variable, back)
    out = rewrite_adjacent(out, [factor, inverse], [])[0]
    out = rewrite_adjacent(out, [inverse, factor], [])[0]
    return out, [f"{factor} invertible"]


def _ids():
    p = FactMatrix("P", _n, _n, [SPD])
    a, inv = SPDPower(p, Rational(1, 4)), SPDPower(p, Rational(-1, 4))
    x, z, g = _fresh("X", _k, _n), _fresh("Z", _k, _n), _fresh("G", _k, _n)
    xl, zl, gl = _fresh("Y", _n, _k), _fresh("V", _n, _k), _fresh("H", _n, _k)
    right = {"variable": x, "new": z, "factor": a, "side": "right"}
    left = {"variable": xl, "new": zl, "factor": a, "side": "left"}
    w = _tall("W", FULL_COLUMN_RANK)  # a Gram root: C_W, inverted by C_W⁻¹
    c, c_inv = GramSqrt(w), GramInvSqrt(w)
    root = {"variable": x, "new": z, "factor": c, "side": "right"}
    return ([Case(OpNorm(product(x, c)), OpNorm(z), root, (x, product(z, c_inv))),
             Case(Inner(g, x), Inner(g, product(z, c_inv)), root, (x, product(z, c_inv))),
             Case(OpNorm(product(x, a)), OpNorm(z), right, (x, product(z, inv))),
             Case(Inner(g, x), Inner(g, product(z, inv)), right, (x, product(z, inv))),
             Case(OpNorm(product(a, xl)), OpNorm(zl), left, (xl, product(inv, zl))),
             Case(Inner(gl, xl), Inner(gl, product(inv, zl)), left, (xl, product(inv, zl)))],
            InstanceSampler(_SMALL))


def _statement() -> Statement:
    """``X = Z P^q`` or ``X = P^q Z`` defines the new variable (``P`` SPD, ``q ≠ 0`` rational: ``P^q`` is the
    inverse of the whitening ``P^{-q}``), ``P^q P^{-q} = I``; and Lemma 4's clauses for the Gram roots."""
    p = FactMatrix("P", _n, _n, [SPD])
    power, inverse = SPDPower(p, _Q), SPDPower(p, -_Q)
    own = (Clause(_fresh("X", _k, _n), product(_fresh("Z", _k, _n), power), defines=True),
           Clause(_fresh("X", _n, _k), product(power, _fresh("Z", _n, _k)), defines=True),
           Clause(product(power, inverse), Identity(_n)))
    gram = _cov_statement()
    return Statement(own + gram.clauses, gram.conditions, sizes=(_SMALL, _LARGE),
                     scalars={_Q: Rational(-1, 4)})


def _beside(constraint, z) -> list:
    """``[(factor, side)]``: the factors standing right next to ``z`` in the constraint's product."""
    arg = constraint.args[0] if constraint.args else None
    if not isinstance(arg, MatMul):
        return []
    mats = list(arg.as_coeff_matrices()[1])
    out = []
    for i, m in enumerate(mats):
        if m == z:
            out += [(mats[i - 1], "left")] if i > 0 else []
            out += [(mats[i + 1], "right")] if i + 1 < len(mats) else []
    return out


def _partner_root(factor, view) -> bool:
    """``factor`` is the Gram root of a partner that the objective or a chain-rule definition names: the objective
    gets the root the partner's way (Lemmas 6a, 6b), and Lemma 4 absorbs it."""
    return isinstance(factor, GramSqrt) and (view.state.objective.has(factor.base)
                                             or any(d.has(factor.base) for d in view.gradients.values()))


def _offers(view):
    """Search: a whitening factor beside the variable in the constraint, absent from the objective, absorbed
    into a new variable on its side (where the objective has it too, or will, Lemma 4 applies instead)."""
    state = view.state
    out = []
    for factor, side in _beside(state.constraint, view.variable):
        if inverse_of(factor) is None or state.objective.has(factor) or _partner_root(factor, view):
            continue
        new = view.fresh_variable()
        out.append(Offer(f"Lemma 4i ({new} = {'A X' if side == 'left' else 'X A'}, A = {factor})",
                         {"new": new, "factor": factor, "side": side, "lemma": WHITENING_CHANGE},
                         method="change_variables"))
    return out


WHITENING_CHANGE = Lemma(
    key="whitening_change_of_variables", number="4i", title="Change of variables into the objective",
    statement=_statement(), rewrite=_rewrite, identities=_ids,
    not_modelled="powers of an SPD matrix other than ±1/2 have no exact explicit model",
    applies=Applies(_offers, order=22),
)
