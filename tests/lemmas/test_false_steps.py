"""A corpus of false steps the trusted kernel must refuse.

Each entry is a step a careless or hostile derivation could record: a definition laid over an independent
symbol, a back-substitution with another partner or a factor applied twice, a rewrite that is true only for
square or orthogonal matrices, a transpose dropped, a ring law that does not hold for matrices. The kernel
(:func:`derivations.lemmas.kernel.step_instance`) must refuse every one of them; the honest twin of each kind
is accepted, so a kernel that refuses everything fails too.
"""

from __future__ import annotations

import pytest
from sympy import Rational
from sympy.matrices.expressions import Identity, MatrixSymbol

from derivations import lemmas as L
from derivations.engine import derivation as engine_derivation
from derivations.engine.derivation import Context, Derivation, DerivationError, Problem, StepCheckFailed, identity_chain
from derivations.lemmas import spd_powers
from derivations.lemmas.kernel import step_instance
from derivations.lemmas.spd_powers import SPDPower
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    Inner,
    Msign,
    OpNorm,
    PolarFactor,
    Projector,
    dimension,
    positive_symbol,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

d, h = dimension("d"), dimension("d_h")
eps = positive_symbol("epsilon")
G = MatrixSymbol("G_M", d, d)
W_K = FactMatrix("W_K", d, h, [FULL_COLUMN_RANK])
W_Q = FactMatrix("W_Q", d, h, [FULL_COLUMN_RANK])
W_V = FactMatrix("W_V", d, h, [FULL_COLUMN_RANK])
G_Q = MatrixSymbol("G_Q", d, h)
X = MatrixSymbol("dW_Q", d, h)
Z = MatrixSymbol("Z_Q", d, h)
A, B = MatrixSymbol("A", d, h), MatrixSymbol("B", h, h)
CONTEXT = Context(check_dims=[{d: 6, h: 2}, {d: 5, h: 3}], mpmath_dims={d: 4, h: 2})

#: the recorded change of variables of the half-split query problem, ``dW_Q = Z_Q C_K⁻¹``
RECORDED = ((X, Z, product(Z, GramInvSqrt(W_K))),)
SOLUTION = [product(-eps / 2, Msign(product(G_Q, GramInvSqrt(W_K)))), -eps / 2]


def _back(argmin):
    return [argmin, SOLUTION[1]]


#: (what is false, lemma, kind, before, after, keyword arguments of step_instance)
FALSE_STEPS = [
    ("back-substitution with an unrelated partner: Z* C_V⁻¹", L.CHANGE_OF_VARIABLES, "back_substitute",
     SOLUTION, _back(product(SOLUTION[0], GramInvSqrt(W_V))), {"substitution": RECORDED}),
    ("back-substitution applying C_K⁻¹ twice", L.CHANGE_OF_VARIABLES, "back_substitute",
     SOLUTION, _back(product(SOLUTION[0], GramInvSqrt(W_K), GramInvSqrt(W_K))), {"substitution": RECORDED}),
    ("back-substitution on the wrong side: C_K⁻¹ Z*", L.CHANGE_OF_VARIABLES, "back_substitute",
     [product(-eps / 2, Msign(product(GramInvSqrt(FactMatrix("W_O", h, h, [FULL_COLUMN_RANK])), B))), -eps / 2],
     [product(-eps / 2, Msign(product(GramInvSqrt(FactMatrix("W_O", h, h, [FULL_COLUMN_RANK])), B)),
              GramInvSqrt(FactMatrix("W_O", h, h, [FULL_COLUMN_RANK]))), -eps / 2],
     {"substitution": ((MatrixSymbol("dW_V", h, h), MatrixSymbol("Z_V", h, h),
                        product(GramInvSqrt(FactMatrix("W_O", h, h, [FULL_COLUMN_RANK])),
                                MatrixSymbol("Z_V", h, h))),)}),
    ("back-substitution with no change of variables recorded", L.CHANGE_OF_VARIABLES, "back_substitute",
     SOLUTION, _back(product(SOLUTION[0], GramInvSqrt(W_K))), {"substitution": ()}),
    ("back-substitution that changes the optimal value", L.CHANGE_OF_VARIABLES, "back_substitute",
     SOLUTION, [product(SOLUTION[0], GramInvSqrt(W_K)), -eps], {"substitution": RECORDED}),
    ("back-substitution undoing a substitution X = Z C_K (not the statement's definition)", L.CHANGE_OF_VARIABLES,
     "back_substitute", SOLUTION, _back(product(SOLUTION[0], GramSqrt(W_K))),
     {"substitution": ((X, Z, product(Z, GramSqrt(W_K))),)}),
    ("chain rule defining G_Q := G_M W_K over an independent G_Q", L.CHAIN_RULE, "rewrite",
     [Inner(product(G, W_K), A) + Inner(G_Q, A)], [2 * Inner(G_Q, A)],
     {"params": {"gradients": {G_Q: product(G, W_K)}}, "independent": frozenset({G, W_K, G_Q, A})}),
    ("chain rule with another partner than the derivation's: G_Q = G_M W_Q", L.CHAIN_RULE, "rewrite",
     [product(G, W_Q, B)], [product(G_Q, B)],
     {"params": {"gradients": {G_Q: product(G, W_Q)}}, "definitions": {G_Q: product(G, W_K)}}),
    ("chain rule with a dropped transpose: G_Q = G_Mᵀ W_K against the derivation's G_M W_K", L.CHAIN_RULE,
     "rewrite", [product(transpose(G), W_K, B)], [product(G_Q, B)],
     {"params": {"gradients": {G_Q: product(transpose(G), W_K)}}, "definitions": {G_Q: product(G, W_K)}}),
    ("chain rule relating matrices of different shapes", L.CHAIN_RULE, "rewrite",
     [product(G, W_K, B)], [product(MatrixSymbol("G_X", d, d), W_K, B)],
     {"params": {"gradients": {MatrixSymbol("G_X", d, d): product(G, W_K)}}}),
    ("change of variables whose new variable is not fresh", L.CHANGE_OF_VARIABLES, "change_of_variables",
     [Inner(G_Q, product(X, GramSqrt(W_K))), OpNorm(product(X, GramSqrt(W_K)))], [Inner(G_Q, Z), OpNorm(Z)],
     {"substitution": (X, product(Z, GramInvSqrt(W_K))), "fresh": (Z,), "independent": frozenset({G_Q, W_K, Z})}),
    ("change of variables X = Z C_K (not the statement's definition)", L.CHANGE_OF_VARIABLES, "change_of_variables",
     [Inner(G, product(X, GramSqrt(W_K), transpose(W_K))), OpNorm(product(X, GramSqrt(W_K)))],
     [Inner(G, product(Z, transpose(W_K))), OpNorm(Z)], {"substitution": (X, product(Z, GramSqrt(W_K)))}),
    ("adjoint move without the transpose: ⟨G, X W_Kᵀ⟩ → ⟨G W_K, X⟩ written as ⟨Gᵀ W_K, X⟩", L.ADJOINT_MOVE,
     "rewrite", [Inner(G, product(X, transpose(W_K)))], [Inner(product(transpose(G), W_K), X)], {}),
    ("the projector onto a tall matrix's range taken as the identity: msign(G P_K) → msign(G)",
     L.PROJECTOR, "rewrite", [Msign(product(G, Projector(W_K)))], [Msign(G)], {}),
    ("msign of a non-orthogonal right factor pulled out: msign(G W_K) → msign(G) W_K",
     L.MSIGN_ORTHOGONAL, "rewrite", [Msign(product(G, W_K))], [product(Msign(G), W_K)], {}),
    ("msign scale taken for a matrix factor: msign(G B') → msign(G)", L.MSIGN_SCALE, "rewrite",
     [Msign(product(G, MatrixSymbol("S", d, d)))], [Msign(G)], {}),
    ("msign of a transpose without transposing back: msign(Gᵀ) → msign(G)", L.MSIGN_TRANSPOSE, "rewrite",
     [Msign(transpose(G))], [Msign(G)], {}),
    ("the polar factor with the Gram root on the wrong side: W C_W⁻¹ → C_W⁻¹ Wᵀ", L.POLAR_INVERSE, "rewrite",
     [product(G, W_K, GramInvSqrt(W_K))], [product(G, transpose(PolarFactor(W_K)), W_K, GramInvSqrt(W_K))], {}),
    ("operator-norm invariance under a factor that is not an isometry: ‖A B‖ → ‖A‖", L.ORTHONORMAL_INVARIANCE,
     "rewrite", [OpNorm(product(A, B))], [OpNorm(A)], {}),
    ("matrices commuted as if scalars: A B → B A", L.RING, "rewrite",
     [product(MatrixSymbol("P", d, d), MatrixSymbol("R", d, d))],
     [product(MatrixSymbol("R", d, d), MatrixSymbol("P", d, d))], {}),
    ("like terms collected wrongly: 2A + 3A → 4A", L.RING, "rewrite", [2 * A + 3 * A], [4 * A], {}),
    ("a square root split into a quarter and an eighth power", spd_powers.POWER_SPLIT, "rewrite",
     [SPDPower(MatrixSymbol("Y", h, h), Rational(1, 2))],
     [product(SPDPower(MatrixSymbol("Y", h, h), Rational(1, 4)), SPDPower(MatrixSymbol("Y", h, h), Rational(1, 8)))],
     {}),
    ("transposition invariance with a sign lost: ⟨Aᵀ, (A B)ᵀ⟩ → −⟨A, A B⟩",
     L.TRANSPOSITION, "rewrite", [Inner(transpose(A), transpose(product(A, B)))],
     [-Inner(A, product(A, B))], {}),
    ("a Gram root cancelled against another matrix's: C_K⁻¹ C_Q → I", L.CHANGE_OF_VARIABLES, "rewrite",
     [product(A, GramInvSqrt(W_K), GramSqrt(W_Q))], [product(A, Identity(h))], {}),
]


def test_the_corpus_has_at_least_twenty_false_steps():
    assert len(FALSE_STEPS) >= 20


@pytest.mark.parametrize("what, lemma, kind, before, after, kwargs", FALSE_STEPS, ids=[f[0] for f in FALSE_STEPS])
def test_the_kernel_refuses_a_false_step(what, lemma, kind, before, after, kwargs):
    status, failure = step_instance(lemma, kind, before, after, **kwargs)
    assert failure, f"the kernel accepted a false step ({what}): {status}"


def test_the_honest_back_substitution_and_definition_are_accepted():
    """The twins of the corpus's first kinds: the recorded substitution undone once, and a fresh factor gradient."""
    honest = _back(product(SOLUTION[0], GramInvSqrt(W_K)))
    assert step_instance(L.CHANGE_OF_VARIABLES, "back_substitute", SOLUTION, honest, substitution=RECORDED)[1] is None
    fresh = step_instance(L.CHAIN_RULE, "rewrite", [product(G, W_K, B)], [product(G_Q, B)],
                          params={"gradients": {G_Q: product(G, W_K)}}, independent=frozenset({G, W_K, B}))
    assert fresh[1] is None, fresh


def test_a_definition_over_an_independent_symbol_is_refused_in_a_derivation():
    """The context does not define ``G_Q``, the start has an independent ``G_Q``, and a chain-rule step "defines"
    it as ``G_M W_K``; before, the kernel counted it as proven for all sizes."""
    der = identity_chain("plant.independent", "planted", product(G, W_K, B) - product(G_Q, B), CONTEXT)
    with pytest.raises(StepCheckFailed, match="redefines G_Q, an independent symbol"):
        der.apply(L.CHAIN_RULE, gradients={G_Q: product(G, W_K)})


def test_the_numeric_check_refuses_the_autodiff_values_for_an_independent_symbol(monkeypatch):
    """The second line of defence: with the kernel bypassed, the chain rule's autodiff hook would give ``G_Q`` the
    values of ``G_M W_K`` and the numbers would agree; the check refuses those values for an independent symbol."""
    monkeypatch.setattr(engine_derivation, "step_instance", lambda *a, **k: ("(bypassed)", None))
    der = identity_chain("plant.independent", "planted", product(G, W_K, B) - product(G_Q, B), CONTEXT)
    with pytest.raises(StepCheckFailed, match="sub-check 'independent symbols'.*G_Q"):
        der.apply(L.CHAIN_RULE, gradients={G_Q: product(G, W_K)})


def _query_problem() -> Derivation:
    """The one-sided query problem ``min ⟨G_M, ΔW_Q W_Kᵀ⟩ s.t. ‖ΔW_Q W_Kᵀ‖_op ≤ ε``, with ``W_K = U_K C_K``."""
    change = product(X, transpose(W_K))
    der = Derivation("plant.query", "planted", Problem(X, Inner(G, change), OpNorm(change), eps), CONTEXT)
    return der.apply(L.POLAR_SUBSTITUTION, matrix=W_K)


def test_a_change_of_variables_to_a_symbol_already_used_is_refused():
    """``Z = ΔW_Q C_K`` named ``W_K``, the partner itself: the substitution would conflate the two."""
    der = _query_problem()
    with pytest.raises(DerivationError, match="already a symbol of the derivation"):
        der.change_variables(W_K, GramSqrt(W_K))
    der.change_variables(Z, GramSqrt(W_K))  # a fresh name is fine


def test_a_forged_back_substitution_in_a_derivation_is_refused():
    """A back-substitution recorded by hand with ``C_K⁻¹`` applied twice fails the kernel, naming the
    recorded substitution; the honest one passes."""
    der = _query_problem().change_variables(Z, GramSqrt(W_K)).apply(L.ORTHONORMAL_INVARIANCE)
    der.apply(L.ADJOINT_MOVE, variable=Z).solve()
    solution = der.state
    twice = solution.with_parts(product(solution.argmin, GramInvSqrt(W_K), GramInvSqrt(W_K)), solution.value,
                                variable=X)
    with pytest.raises(StepCheckFailed, match="recorded substitutions"):
        der._record("back_substitute", L.CHANGE_OF_VARIABLES, twice, [])
    der.back_substitute()  # the honest one
    assert der.steps[-1].check.instance.startswith("instance of the definition")
