"""The derivation engine: lemmas refuse without their facts, wrong steps are caught and named."""

import numpy as np
import pytest
from sympy import Symbol
from sympy.matrices.expressions import MatrixSymbol

from derivations import halfsplit as H
from derivations import lemmas as L
from derivations.engine.derivation import Context, Derivation, DerivationError, Problem, StepCheckFailed, identity_chain
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.nodes import (
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

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

d, d_h = H.d, H.d_h


@pytest.mark.parametrize("lemma", L.ALL_LEMMAS, ids=lambda lem: lem.key)
def test_every_lemma_passes_its_self_check(lemma):
    result = lemma.self_check(np.random.default_rng(0))
    assert result.passed, result.failures
    assert result.error < 1e-8 and result.errors  # something was measured
    if lemma.check is None:  # rewrite lemmas: the rewrite code itself was exercised
        assert "rewrite preserves value" in result.errors
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
    assert "t step 2 (rewrite), lemma X (Forgetful polar substitution)" in msg and "counterexample" in msg
    assert "sub-check 'before = after'" in msg and "W_K =" in msg and "G_M =" in msg


def test_wrong_solution_is_caught():
    der = Derivation("t", "t", _problem(), H.context(H.GRADIENTS_QK))
    der.apply(L.POLAR_SUBSTITUTION, matrix=H.W_K)
    der.change_variables(MatrixSymbol("Z", d, d_h), GramSqrt(H.W_K))
    # skipping Lemma 2 leaves ‖Z U_Kᵀ‖: solve refuses rather than produce a wrong argmin
    with pytest.raises(DerivationError, match=r"t step 3 \(solve\), lemma 1 .*Lemma 1 needs the constraint"):
        der.solve()


def test_inapplicable_lemma_is_an_error_naming_the_step():
    der = Derivation("t", "t", _problem(), H.context(H.GRADIENTS_QK))
    with pytest.raises(DerivationError, match=r"t step 1 \(rewrite\), lemma 5b .* no msign of a positively scaled"):
        der.apply(L.MSIGN_SCALE)


def test_results_are_what_the_lemmas_produce():
    g_q_ck = product(H.G_Q, GramInvSqrt(H.W_K))
    assert H.query_side().formula == product(-H.BUDGET, Msign(g_q_ck), GramInvSqrt(H.W_K))
    assert H.query_side().result.value == -H.BUDGET * NuclearNorm(g_q_ck)
    expected = (product(-H.BUDGET, Msign(product(H.G_M, Projector(H.W_K))))
                + product(-H.BUDGET, Msign(product(Projector(H.W_Q), H.G_M))))
    assert set(H.product_step().formula.args) == set(expected.args)


def test_full_check_passes_with_mpmath_and_says_what_was_shown_symbolically():
    der = H.query_side()
    results = der.check(trials=2, seed=3)
    assert all(r.passed and r.failure is None for r in results)
    assert all(r.mpmath_error is not None and r.mpmath_error < 1e-35 for r in results)
    kinds = {s.lemma.key: s.check.symbolic for s in der.steps}
    assert kinds["adjoint_move"] == "verified symbolically at sizes (d=3, d_h=2)"
    assert kinds["chain_rule"].startswith("not modelled: checked against automatic differentiation")
    assert kinds["orthonormal_invariance"].startswith("not modelled")
    assert not any("proved" in s.check.symbolic for s in der.steps)
    solve = next(s for s in der.steps if s.kind == "solve")
    assert ({"feasible", "attains the dual bound", "stated value", "no improving direction"}
            <= set(solve.check.subchecks))


def test_symbolic_check_refutes_a_false_algebraic_identity():
    from derivations.engine.symbolic import verify_equal
    a, b = MatrixSymbol("A", d, d), MatrixSymbol("B", d, d)
    assert verify_equal([(product(a, b), product(b, a))], {d: 2}).status == "refuted"
    ok = verify_equal([(transpose(product(a, b)), product(transpose(b), transpose(a)))], {d: 2})
    assert str(ok) == "verified symbolically at sizes (d=2)"


def test_symbolic_refutation_fails_the_step():
    """A wrong algebraic rewrite (AB -> BA) is a failure, not "numeric only"."""
    a, b = MatrixSymbol("A", d, d), MatrixSymbol("B", d, d)
    swap = L.Lemma("swap", "X", "Commute a product", "AB = BA", algebraic=True,
                   rewrite=lambda e, **_: (e.xreplace({product(a, b): product(b, a)}), []))
    der = identity_chain("t.swap", "t", product(a, b), Context(symbolic_dims={d: 2}))  # no numeric sizes
    with pytest.raises(StepCheckFailed, match=r"t.swap step 1 \(rewrite\), lemma X .*sub-check 'symbolic'.*refuted"):
        der.apply(swap)


def test_check_sizes_below_two_are_refused():
    with pytest.raises(DerivationError, match="dimension below 2"):
        Derivation("t.small", "t", _problem(), Context(check_dims=[{d: 3, d_h: 1}]))


def test_fact_matrix_validation_and_printing():
    with pytest.raises(ValueError, match="unknown structural fact"):
        FactMatrix("W", d, d_h, ["orthogonal-ish"])
    with pytest.raises(ValueError, match="equal shapes"):
        Inner(H.W_K, H.G_M)
    from derivations.engine.latex import latex
    assert latex(H.query_side().formula) == (
        r"- \frac{\epsilon}{2} \operatorname{msign}\left(G_{Q} C_{K}^{-1}\right) C_{K}^{-1}")
    assert str(H.value_side().formula) == "(-epsilon/2)*C_O^-1*msign(C_O^-1*G_V)"


def test_context_sizes_include_the_square_case():
    sizes = H.context({}).check_dims
    assert any(s[d] == s[d_h] for s in sizes)
    assert isinstance(H.context({}), Context)
    assert dimension("d") == d
