"""The derivation engine: lemmas refuse without their facts, wrong steps are caught and named."""

import numpy as np
import pytest
from sympy import Symbol
from sympy.matrices.expressions import MatrixSymbol

from derivations import halfsplit as H
from derivations import lemmas as L
from derivations.algebra import product, transpose
from derivations.engine import Context, Derivation, DerivationError, Problem, StepCheckFailed
from derivations.vocabulary import (
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    Inner,
    Msign,
    NuclearNorm,
    OpNorm,
    PolarFactor,
    Projector,
    dimension,
)

d, d_h = H.d, H.d_h


@pytest.mark.parametrize("lemma", L.ALL_LEMMAS, ids=lambda lem: lem.key)
def test_every_lemma_passes_its_self_check(lemma):
    assert lemma.self_check(np.random.default_rng(0)) < 1e-8
    assert lemma.statement and lemma.title and lemma.number


def test_orthonormal_invariance_needs_the_fact():
    plain = MatrixSymbol("W", d, d_h)  # no facts
    z = MatrixSymbol("Z", d, d_h)
    with pytest.raises(L.NotApplicable):
        L.ORTHONORMAL_INVARIANCE.apply(OpNorm(product(z, transpose(PolarFactor(plain)))))
    new, conds = L.ORTHONORMAL_INVARIANCE.apply(OpNorm(product(z, transpose(PolarFactor(H.W_K)))))
    assert new == OpNorm(z) and "orthonormal columns" in conds[0]


def test_damped_polar_factor_is_not_an_isometry():
    z = MatrixSymbol("Z", d, d_h)
    with pytest.raises(L.NotApplicable):
        L.ORTHONORMAL_INVARIANCE.apply(OpNorm(product(z, transpose(PolarFactor(H.W_K, Symbol("lam", positive=True))))))


def test_change_of_variables_needs_invertibility():
    w = MatrixSymbol("W", d, d_h)
    x, z = MatrixSymbol("X", d, d_h), MatrixSymbol("Z", d, d_h)
    with pytest.raises(L.NotApplicable, match="full rank"):
        L.CHANGE_OF_VARIABLES.apply(Inner(x, x), variable=x, new=z, factor=GramSqrt(w))


def test_msign_scale_needs_a_positive_scalar():
    a = MatrixSymbol("A", d, d_h)
    with pytest.raises(L.NotApplicable):
        L.MSIGN_SCALE.apply(Msign(product(Symbol("c", real=True), a)))


def _problem():
    dq = MatrixSymbol("dW_Q", d, d_h)
    change = product(dq, transpose(H.W_K))
    return Problem(dq, Inner(H.G_M, change), OpNorm(change), H.BUDGET)


def test_wrong_rewrite_is_caught_with_step_and_counterexample():
    """A 'lemma' that forgets the partner's Gram root must fail its numerical check."""
    def forget(expr, **_):
        return expr.xreplace({GramSqrt(H.W_K): GramInvSqrt(H.W_K)}), []

    bogus = L.Lemma("bogus", "X", "Forgetful polar substitution", "W = U C^{-1}", rewrite=forget,
                    identities=None)
    der = Derivation("t", "t", _problem(), H.context(H.GRADIENTS_QK))
    der.apply(L.POLAR_SUBSTITUTION, matrix=H.W_K)
    with pytest.raises(StepCheckFailed) as info:
        der.apply(bogus)
    msg = str(info.value)
    assert "step 2" in msg and "Forgetful polar substitution" in msg and "counterexample" in msg
    assert "W_K =" in msg and "G_M =" in msg


def test_wrong_solution_is_caught():
    der = Derivation("t", "t", _problem(), H.context(H.GRADIENTS_QK))
    der.apply(L.POLAR_SUBSTITUTION, matrix=H.W_K)
    der.change_variables(MatrixSymbol("Z", d, d_h), GramSqrt(H.W_K))
    # skipping Lemma 2 leaves ‖Z U_Kᵀ‖: solve refuses rather than produce a wrong argmin
    with pytest.raises(DerivationError, match="Lemma 1 needs the constraint"):
        der.solve()


def test_inapplicable_lemma_is_an_error_naming_the_step():
    der = Derivation("t", "t", _problem(), H.context(H.GRADIENTS_QK))
    with pytest.raises(DerivationError, match="step 1: lemma 5b"):
        der.apply(L.MSIGN_SCALE)


def test_results_are_what_the_lemmas_produce():
    g_q_ck = product(H.G_Q, GramInvSqrt(H.W_K))
    assert H.query_side().formula == product(-H.BUDGET, Msign(g_q_ck), GramInvSqrt(H.W_K))
    assert H.query_side().result.value == -H.BUDGET * NuclearNorm(g_q_ck)
    expected = (product(-H.BUDGET, Msign(product(H.G_M, Projector(H.W_K))))
                + product(-H.BUDGET, Msign(product(Projector(H.W_Q), H.G_M))))
    assert set(H.product_step().formula.args) == set(expected.args)


def test_full_check_passes_with_mpmath_and_proves_algebraic_steps():
    der = H.query_side()
    results = der.check(trials=2, seed=3)
    assert all(r.passed for r in results)
    assert all(r.mpmath_error is not None and r.mpmath_error < 1e-35 for r in results)
    kinds = {s.lemma.key: s.check.symbolic for s in der.steps}
    assert kinds["adjoint_move"] == "proved" and kinds["chain_rule"] == "proved"
    assert kinds["orthonormal_invariance"] == "numeric only"


def test_symbolic_check_refutes_a_false_algebraic_identity():
    from derivations.symbolic import prove_equal
    a, b = MatrixSymbol("A", d, d), MatrixSymbol("B", d, d)
    assert prove_equal([(product(a, b), product(b, a))], {d: 2}) == "numeric only"
    assert prove_equal([(transpose(product(a, b)), product(transpose(b), transpose(a)))], {d: 2}) == "proved"


def test_fact_matrix_validation_and_printing():
    with pytest.raises(ValueError, match="unknown structural fact"):
        FactMatrix("W", d, d_h, ["orthogonal-ish"])
    with pytest.raises(ValueError, match="equal shapes"):
        Inner(H.W_K, H.G_M)
    from derivations.printing.latex import latex
    assert latex(H.query_side().formula) == (
        r"- \frac{\epsilon}{2} \operatorname{msign}\left(G_{Q} C_{K}^{-1}\right) C_{K}^{-1}")
    assert str(H.value_side().formula) == "(-epsilon/2)*C_O^-1*msign(C_O^-1*G_V)"


def test_context_sizes_include_the_square_case():
    sizes = H.context({}).check_dims
    assert any(s[d] == s[d_h] for s in sizes)
    assert isinstance(H.context({}), Context)
    assert dimension("d") == d
