"""The symbolic model with facts: Gram roots tied to their matrices, isometries orthonormal and
msign's defining identities hold identically in it, so a step or formula that needs one of these facts is verified
at the explicit sizes, and a wrong one (a dropped transpose, a wrong power, a flipped sign) is still refuted.

Planted: without the model with facts (``_uses_facts`` answering no) the true identities are refuted; a square
orthogonal factor modelled without its reflection verifies an identity that only rotations satisfy."""

from __future__ import annotations

import pytest
from sympy import cancel
from sympy.matrices.expressions import Identity, MatrixSymbol

from derivations.engine import symbolic
from derivations.engine.symbolic import ExplicitModel, verify_equal
from derivations.vocabulary.algebra import product, total
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    Msign,
    PolarFactor,
    dimension,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

d, h = dimension("d"), dimension("d_h")
SIZES = {d: 3, h: 2}
W = FactMatrix("W_K", d, h, [FULL_COLUMN_RANK])
C, CI, U_W = GramSqrt(W), GramInvSqrt(W), PolarFactor(W)
U = FactMatrix("U", d, h, [ORTHONORMAL_COLUMNS])
X, Y, A, G = MatrixSymbol("X", d, h), MatrixSymbol("Y", d, d), MatrixSymbol("A", h, h), MatrixSymbol("G", d, h)

TRUE = {
    "C_W squares to WᵀW": (product(C, C), product(W.T, W)),
    "U_W = W C_W⁻¹ is orthonormal": (product(U_W.T, U_W), Identity(h)),
    "UᵀU = I": (product(U.T, U), Identity(h)),
    "msign(X) msign(X)ᵀ X = X": (product(Msign(X), Msign(X).T, X), X),
    "X msign(X)ᵀ msign(X) = X": (product(X, Msign(X).T, Msign(X)), X),
    "msign(Yᵀ) = msign(Y)ᵀ": (Msign(Y.T), Msign(Y).T),
    "msign(2 U A) = U msign(A)": (Msign(product(2, U, A)), product(U, Msign(A))),
    "msign(G C⁻¹ U_Wᵀ) = msign(G C⁻¹) C⁻¹ Wᵀ": (Msign(product(G, CI, U_W.T)), product(Msign(product(G, CI)), CI, W.T)),
}
WRONG = {
    "C_W⁻¹ WᵀW (one root dropped)": (product(CI, W.T, W), Identity(h)),
    "C_W = WᵀW (wrong power)": (C, product(W.T, W)),
    "U Uᵀ = I (transpose on the wrong side)": (product(U, U.T), Identity(d)),
    "msign(Yᵀ) = msign(Y) (dropped transpose)": (Msign(Y.T), Msign(Y)),
    "msign(−2 U A) = U msign(A) (sign)": (Msign(product(-2, U, A)), product(U, Msign(A))),
    "msign(X)ᵀ msign(X) Xᵀ … (X of unknown rank)": (product(Msign(X).T, Msign(X), X.T), X.T),
    "msign(G C⁻¹ U_Wᵀ) = msign(G C⁻¹) C Wᵀ (wrong power)": (Msign(product(G, CI, U_W.T)),
                                                            product(Msign(product(G, CI)), C, W.T)),
}


@pytest.mark.parametrize("name", TRUE)
def test_an_identity_that_needs_a_fact_is_verified(name):
    verdict = verify_equal([TRUE[name]], SIZES)
    assert verdict.status == "verified" and "with the facts" in str(verdict), verdict


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_identity_is_still_refuted(name):
    assert verify_equal([WRONG[name]], SIZES).status == "refuted"


def test_without_the_facts_the_true_identities_are_refuted(monkeypatch):
    monkeypatch.setattr(symbolic, "_uses_facts", lambda pairs, definitions: False)
    for name in ("C_W squares to WᵀW", "UᵀU = I", "msign(X) msign(X)ᵀ X = X", "msign(Yᵀ) = msign(Y)ᵀ"):
        assert verify_equal([TRUE[name]], SIZES).status == "refuted", name


def test_a_square_orthogonal_factor_is_checked_with_its_reflection_too():
    """For a 2 × 2 rotation ``O + Oᵀ = 2 cos θ I`` commutes with everything; for a reflection it does not. The
    Cayley transform gives rotations only, so the model also evaluates the reflected factor: refuted."""
    n = dimension("n")
    o = FactMatrix("O", n, n, [ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS])
    z = MatrixSymbol("Z", n, n)
    both = total(o, o.T)
    pair = (product(both, z), product(z, both))
    rotations = ExplicitModel({n: 2}, facts=True)
    a, b = rotations.value(pair[0]), rotations.value(pair[1])
    assert rotations.square_orthogonal and (a - b).applyfunc(cancel).is_zero_matrix
    assert verify_equal([pair], {n: 2}).status == "refuted"
    assert verify_equal([(product(o.T, o), Identity(n))], {n: 2}).status == "verified"
