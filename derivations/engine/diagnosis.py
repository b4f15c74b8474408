"""What a failed search should try next: the nearest missing move, read off the state where its most promising
branch stopped (never off the text of the problem).

:func:`diagnose` looks at that state's constraint and objective in order: a matrix power outside the vocabulary, a
norm of no registered family, a scalar of unknown sign inside a norm, the factors standing beside the variable in
the constraint (a whitening the objective lacks, a partner whose row space no lemma restricts to, a factor not known
to be invertible), and a loss gradient that no chain-rule definition names. Each hint names the lemma or the docs
page that provides the move.
"""

from __future__ import annotations

from collections.abc import Iterable

from sympy import Mul
from sympy.matrices.expressions import MatMul, MatPow, MatrixSymbol

from derivations import lemmas as L
from derivations.engine import norms
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    SPD,
    FactMatrix,
    GramSqrt,
    MatrixScalar,
    facts_of,
)
from derivations.vocabulary.spd_power import SPDPower

EXTENDING = "docs/extending.rst"


def diagnose(state, offered: Iterable[str], available: set, gradients: dict) -> str | None:
    """The nearest missing move from ``state`` (a problem of the search; ``offered``: the keys of the lemmas that
    offered a move there), as one line, or ``None``."""
    if not hasattr(state, "constraint"):
        return None
    keys = set(offered)
    return (_power(state) or _family(state) or _scalar(state)
            or next((h for h in (_beside(state, f, side, keys) for f, side in _neighbours(state)) if h), None)
            or _gradient(state, available, gradients))


def _power(state) -> str | None:
    for part in state.parts():
        for node in part.atoms(MatPow):
            if not node.exp.is_Integer:
                return (f"a matrix power {node} with p = {node.exp} is not in the vocabulary: write it as "
                        f"SPDPower({node.base}, {node.exp}) for an SPD {node.base}, "
                        f"or add a node ({EXTENDING}, 'A vocabulary node')")
    return None


def _constraint_norm(state) -> tuple:
    """``(constraint, norm)``: the constraint with a known positive scale taken out, and its norm node (or ``None``)."""
    con = norms.unscaled(state).constraint
    return con, next((a for a in (con.args if isinstance(con, Mul) else (con,)) if isinstance(a, MatrixScalar)), None)


def _family(state) -> str | None:
    con, norm = _constraint_norm(state)
    if norms.family_of(con) is not None:
        return None
    if norm is not None and norms.family_of(norm) is None:
        return (f"the norm family of {norm} ({type(norm).__name__}) is not registered: register it with "
                f"register_family(NormFamily(...)) ({EXTENDING}, 'A norm family')")
    if norm is not None:
        scale = con / norm
        return (f"the scale {scale} of the constraint is not known to be positive: declare its symbols with "
                "positive_symbol so the solve step reads the ball")
    return None


def _scalar(state) -> str | None:
    arg = _norm_argument(state)
    if isinstance(arg, MatMul):
        coeff = arg.as_coeff_matrices()[0]
        if coeff != 1 and coeff.is_positive is None and coeff.is_negative is None:
            return (f"the scalar {coeff} inside the norm has no known sign: declare it with positive_symbol so "
                    f"Lemma {L.HOMOGENEITY.number} ({L.HOMOGENEITY.title}) takes it out")
    return None


def _norm_argument(state):
    _, norm = _constraint_norm(state)
    return norm.args[0] if norm is not None and norm.args else None


def _neighbours(state) -> list:
    """``[(factor, side)]``: the factors beside the variable in the constraint's product."""
    arg = _norm_argument(state)
    if not isinstance(arg, MatMul):
        return []
    mats = list(arg.as_coeff_matrices()[1])
    out = []
    for i, m in enumerate(mats):
        if m == state.variable:
            out += [(mats[i - 1], "left")] if i > 0 else []
            out += [(mats[i + 1], "right")] if i + 1 < len(mats) else []
    return out


def _beside(state, factor, side, keys) -> str | None:
    """A hint for a factor standing beside the variable in the constraint."""
    if L.inverse_of(factor) is not None:
        return _whitening(state, factor, keys)
    if isinstance(factor, SPDPower):
        return (f"{factor} is a power of {factor.arg}, which is not known to be SPD: declare it "
                f"(FactMatrix(..., [SPD])) so Lemma {L.WHITENING_CHANGE.number} can invert it")
    if isinstance(factor, GramSqrt):
        return (f"{factor} is a Gram root of {factor.base}, which is not known to have full rank: declare "
                f"FULL_COLUMN_RANK or FULL_ROW_RANK")
    if factor.shape[0] != factor.shape[1]:
        return _wide(factor, side, keys)
    if not isinstance(factor, FactMatrix) or not facts_of(factor) & {SPD, FULL_COLUMN_RANK, FULL_ROW_RANK}:
        return (f"{factor} beside {state.variable} is not known to be invertible: declare it SPD (Lemma "
                f"{L.WHITENING_CHANGE.number} whitens SPD powers and Gram roots), or add a lemma for it "
                f"({EXTENDING}, 'A lemma')")
    return (f"{factor} beside {state.variable} is invertible but no lemma inverts it: write it as an SPD power or a "
            f"Gram root (Lemma {L.WHITENING_CHANGE.number}), or add a change-of-variables lemma ({EXTENDING}, "
            "'A lemma')")


def _whitening(state, factor, keys) -> str | None:
    if state.objective.has(factor):
        if L.CHANGE_OF_VARIABLES.key not in keys:
            return (f"the objective contains the whitening {factor}: add the change of variables of Lemma "
                    f"{L.CHANGE_OF_VARIABLES.number} ({L.CHANGE_OF_VARIABLES.title})")
        return None
    if L.WHITENING_CHANGE.key not in keys:
        return (f"the objective does not contain the whitening {factor}: add a change of variables that moves it "
                f"there (Lemma {L.WHITENING_CHANGE.number}, {L.WHITENING_CHANGE.title}, "
                "derivations.lemmas.invertible_change)")
    return None


def _wide(factor, side, keys) -> str | None:
    space = "row" if side == "left" else "column"
    fact = FULL_ROW_RANK if side == "left" else FULL_COLUMN_RANK
    lemma = L.RANGE_RESTRICTION
    if side == "right":
        return (f"no lemma restricts to the column space of {factor} (Lemma {lemma.number} restricts the variable "
                f"to the row space of a partner on its left): transpose the problem, or add one ({EXTENDING}, "
                "'A lemma')")
    if fact not in facts_of(factor):
        return (f"no lemma restricts to the {space} space of {factor}: it is not known to have full {space} rank "
                f"(declare {fact.upper()} for Lemma {lemma.number}, {lemma.title})")
    if lemma.key not in keys:
        return (f"no lemma restricts to the {space} space of {factor}: add Lemma {lemma.number} ({lemma.title}, "
                "derivations.lemmas.range_restriction)")
    return None


def _gradient(state, available: set, gradients: dict) -> str | None:
    missing = sorted((m for m in state.objective.free_symbols if isinstance(m, MatrixSymbol)
                      and m not in available and m != state.variable), key=str)
    if missing and not gradients:
        return (f"the objective uses {', '.join(map(str, missing))}, which the result may not: define the factor "
                f"gradients in Context(definitions=...) (Lemma {L.CHAIN_RULE.number}, {L.CHAIN_RULE.title})")
    return None

