"""Lemma statements as SymPy objects, and the trusted kernel that matches steps against them.

* (a) the LaTeX of a lemma is printed from its :class:`Statement`;
* (b) the statement's self-check evaluates it in float64 at two sizes (one with every dimension ≥ 16)
  and in mpmath at 50 digits, and a false statement fails it;
* (c) a rewrite step must be made of instances of the statement's clauses; a rewrite that is not an
  instance of the lemma it cites fails, even where the numbers agree.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sympy import Rational, Symbol
from sympy.matrices.expressions import MatrixSymbol

from derivations import halfsplit
from derivations import lemmas as L
from derivations.engine.derivation import Context, Derivation, Problem, StepCheckFailed, identity_chain
from derivations.lemmas import blocks, counting, gram, spd_powers
from derivations.lemmas.blocks import BlockMaxOpNorm
from derivations.lemmas.kernel import rewrite_normal_form, ring_normal_form, step_instance
from derivations.lemmas.spd_powers import SPDPower
from derivations.lemmas.statement import Clause, Statement, known
from derivations.vocabulary.algebra import product
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    Inner,
    OpNorm,
    PolarFactor,
    dimension,
)
from derivations.vocabulary.spectral_nodes import Flops, Group

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

d, h = dimension("d"), dimension("d_h")
G = MatrixSymbol("G_M", d, d)
W = FactMatrix("W_K", d, h, [FULL_COLUMN_RANK])
X = MatrixSymbol("dW_Q", d, h)
STATED = [lem for lem in L.ALL_LEMMAS if isinstance(lem.statement, Statement)]
#: lemmas whose statement is still LaTeX text (each one is a gap in the kernel's reach; the list may only shrink)
TEXT_STATEMENTS = {lem.key for lem in L.ALL_LEMMAS if not isinstance(lem.statement, Statement)}


def test_the_most_cited_lemmas_are_stated_in_sympy():
    keys = {lem.key for lem in STATED}
    assert {"adjoint_move", "polar_inverse", "polar_substitution", "change_of_variables", "chain_rule",
            "orthonormal_invariance", "ring", "msign_scale", "msign_transpose", "transposition"} <= keys
    assert len(STATED) >= 14, sorted(keys)


@pytest.mark.parametrize("lemma", STATED, ids=lambda lem: lem.key)
def test_statement_is_printed_from_sympy_and_checked_at_every_size(lemma):
    stmt = lemma.statement
    assert lemma.statement_latex == stmt.latex()
    for clause in stmt.clauses:  # (a): the printed formula is the clause's two sides, printed
        assert clause.latex() in lemma.statement_latex
    errors = stmt.check(np.random.default_rng(1))
    if all(c.defines for c in stmt.clauses):
        assert errors == {}  # definitions only (the chain rule): its own check compares with autodiff
        return
    assert any("mpmath 50 digits" in k for k in errors), errors
    assert min((stmt.sizes[-1][d] for d in stmt.dimensions), default=16) >= 16
    assert all(err <= Statement.tolerance(k) for k, err in errors.items()), errors
    assert lemma.self_check(np.random.default_rng(2)).passed


def test_a_false_statement_fails_its_self_check():
    """(b): ``⟨G, A X⟩ = ⟨A G, X⟩`` (the transpose of ``A`` dropped) is refuted in float64 and in mpmath."""
    m, k = dimension("m"), dimension("k")
    g, a, x = MatrixSymbol("G", m, k), MatrixSymbol("A", m, m), MatrixSymbol("X", m, k)
    sizes = ({m: 5, k: 3}, {m: 20, k: 16})
    true = Statement((Clause(Inner(g, a * x), Inner(a.T * g, x)),), sizes=sizes)
    assert max(true.check(np.random.default_rng(0)).values()) < 1e-12
    false = Statement((Clause(Inner(g, a * x), Inner(a * g, x)),), sizes=sizes)
    planted = dataclasses.replace(L.ADJOINT_MOVE, statement=false)
    result = planted.self_check(np.random.default_rng(0))
    assert not result.passed
    assert any("statement (float64, k=16 m=20)" in f for f in result.failures), result.failures
    assert any("mpmath 50 digits" in f for f in result.failures), result.failures
    assert planted.statement_latex == r"\left\langle G,\, A X \right\rangle = \left\langle A G,\, X \right\rangle"


def test_a_step_that_is_not_an_instance_is_refused():
    """(c): a dropped transpose, and a true rewrite that cites the wrong lemma."""
    before = [Inner(G, X * W.T)]
    assert step_instance(L.ADJOINT_MOVE, "rewrite", before, [Inner(G * W, X)])[1] is None
    status, failure = step_instance(L.ADJOINT_MOVE, "rewrite", before, [Inner(G.T * W, X)])
    assert failure and "not made of instances" in failure
    # true (Lemma 3 gives it) but not what Lemma 6b says
    assert step_instance(L.POLAR_INVERSE, "rewrite", before, [Inner(G * W, X)])[1] is not None


def test_side_conditions_are_data_the_kernel_checks():
    """``W C_W⁻¹ = U_W`` needs ``C_W`` invertible: full column rank or a positive damping."""
    plain = MatrixSymbol("W_K", d, h)  # no fact: rank unknown
    lam0, lam = Symbol("lambda", nonnegative=True), Symbol("lambda", positive=True)
    ok = step_instance(L.POLAR_INVERSE, "rewrite", [G * W * GramInvSqrt(W)], [G * PolarFactor(W)])
    assert ok[1] is None
    assert step_instance(L.POLAR_INVERSE, "rewrite", [GramInvSqrt(plain, lam) * plain.T],
                         [PolarFactor(plain, lam).T])[1] is None
    refused = step_instance(L.POLAR_INVERSE, "rewrite", [GramInvSqrt(plain, lam0) * plain.T],
                            [PolarFactor(plain, lam0).T])
    assert refused[1] is not None
    assert any("invertible" in c for c in L.POLAR_INVERSE.condition_latex)


def test_ring_steps_are_decided_by_the_free_ring_normal_form():
    a, b, c = (MatrixSymbol(n, d, d) for n in "ABC")
    assert ring_normal_form((a + b) * c) == ring_normal_form(a * c + b * c)
    assert step_instance(L.RING, "rewrite", [(a + b) * c], [a * c + b * c])[1] is None
    assert step_instance(L.RING, "rewrite", [a * b], [b * a])[1] is not None  # not commutative
    assert step_instance(L.RING, "rewrite", [2 * a + 3 * a], [4 * a])[1] is not None


def test_change_of_variables_must_use_the_statement_definition():
    z = MatrixSymbol("Z_Q", d, h)
    before = [Inner(G, X * GramSqrt(W) * W.T), OpNorm(X * GramSqrt(W))]
    after = [Inner(G, z * W.T), OpNorm(z)]
    good = step_instance(L.CHANGE_OF_VARIABLES, "change_of_variables", before, after,
                         substitution=(X, z * GramInvSqrt(W)))
    assert good[1] is None, good
    wrong = step_instance(L.CHANGE_OF_VARIABLES, "change_of_variables", before, after,
                          substitution=(X, z * GramSqrt(W)))  # X = Z C is not Lemma 4's definition
    assert wrong[1] is not None


def test_every_rewrite_of_halfsplit_is_an_instance():
    """The kernel's verdict is recorded on every step; every rewrite of half-split passes through it."""
    for der in halfsplit.derivations():
        for step in der.steps:
            assert step.instance is not None
            if step.kind in ("rewrite", "change_of_variables") and isinstance(step.lemma.statement, Statement):
                assert step.instance.startswith("instance"), (der.name, step.index, step.instance)


def test_a_true_rewrite_citing_the_wrong_lemma_stops_the_derivation(monkeypatch):
    """Half-split's key side cites Lemma T for ``‖Aᵀ‖ = ‖A‖``. Planted: the same (true) rewrite under a lemma
    whose statement is Lemma 2's. Every number agrees; the kernel refuses the step and names it."""
    wrong = dataclasses.replace(L.TRANSPOSITION, statement=L.ORTHONORMAL_INVARIANCE.statement)
    monkeypatch.setattr(L, "TRANSPOSITION", wrong)
    halfsplit.key_side.cache_clear()
    try:
        with pytest.raises(StepCheckFailed, match=r"halfsplit.key step \d+ \(rewrite\), lemma T .*instance of the"):
            halfsplit.key_side()
    finally:
        halfsplit.key_side.cache_clear()


def test_a_forged_step_cannot_carry_its_own_verdict():
    """A step appended behind the engine's back, claiming the kernel's verdict, is refused when the
    derivation is checked: ``check()`` asks the kernel again (the wrong ``after`` is also numerically wrong,
    so the kernel's verdict is what stops it first)."""
    dq = MatrixSymbol("dW_Q", d, h)
    change = dq * halfsplit.W_K.T
    der = Derivation("t.forged", "t", Problem(dq, Inner(halfsplit.G_M, change), OpNorm(change), halfsplit.BUDGET),
                     halfsplit.context(halfsplit.GRADIENTS_QK))
    der.apply(L.POLAR_SUBSTITUTION, matrix=halfsplit.W_K)
    good = der.steps[-1]
    wrong = {GramSqrt(halfsplit.W_K): GramInvSqrt(halfsplit.W_K)}
    bad_after = good.after.with_parts(good.after.objective.xreplace(wrong), good.after.constraint)
    der.steps.append(dataclasses.replace(good, index=2, before=good.after, after=bad_after,
                                         instance="instance of clause 1"))
    with pytest.raises(StepCheckFailed, match=r"t.forged step 2 \(rewrite\), lemma 6a .*instance of the statement"):
        der.check(trials=1, mp=False)


def test_proof_status_counts_steps_proven_for_all_sizes():
    """Every step the kernel matched is proven for all sizes; the rest say why they are not."""
    status = halfsplit.product_step().proof_status()
    assert status["for all sizes"] == len(halfsplit.product_step().steps) and status["at instances"] == 0
    query = halfsplit.query_side().proof_status()
    assert query["at instances"] == 1 and query["why"] == {"a solve step (certified by duality)": 1}
    assert query["for all sizes"] == len(halfsplit.query_side().steps) - 1


def test_scalar_powers_have_one_ring_normal_form():
    """Polynomials in the dimensions (Lemma Q): ``T (4 m n² + 2 n³) = 2 T n² (2m + n)``, and ``n² ≠ n³``."""
    t, m, n = (Symbol(s, positive=True) for s in "Tmn")
    assert ring_normal_form(t * (4 * m * n**2 + 2 * n**3)) == ring_normal_form(2 * t * n**2 * (2 * m + n))
    assert ring_normal_form(n**2) != ring_normal_form(n**3)


# ---- the kernel's rules for the statements of the counts, powers and definitions -----------------------------
N_, M_ = dimension("n"), dimension("m")


def _flops_ok(before, after, statement=None):
    lemma = counting.PRODUCT_COST
    lemma = lemma if statement is None else dataclasses.replace(lemma, statement=statement)
    return step_instance(lemma, "rewrite", [Flops(before)], [after])[1] is None


def test_rewrite_closure_accepts_a_chain_of_instances_and_refuses_a_wrong_end():
    """``closure="rewrite"``: ``flops((Q Kᵀ) V) = flops(Q Kᵀ) + 2 n n d = 4 d n²`` takes three clause instances."""
    q, k, v = (MatrixSymbol(s, N_, d) for s in "QKV")
    assert _flops_ok(product(Group(product(q, k.T)), v), 4 * d * N_**2)
    assert _flops_ok(product(q, Group(product(k.T, v))), 4 * d**2 * N_)
    assert not _flops_ok(product(Group(product(q, k.T)), v), 4 * d**2 * N_)  # the other grouping's cost


def test_a_leaf_pattern_stands_for_one_matrix_symbol_only():
    """``flops(X B) = flops(X) + 2 m k n`` holds for ``B`` one factor: the product as written is evaluated left to
    right. Planted: without the leaf restriction ``B`` may stand for ``Kᵀ V`` and the right-to-left cost of an
    ungrouped ``Q Kᵀ V`` (a wrong count: the cost of ``Kᵀ V`` is lost) is accepted."""
    q, k, v = (MatrixSymbol(s, N_, d) for s in "QKV")
    ungrouped = product(q, k.T, v)
    assert _flops_ok(ungrouped, 4 * d * N_**2)
    assert not _flops_ok(ungrouped, 2 * d**2 * N_)
    stated = counting.PRODUCT_COST.statement
    planted = dataclasses.replace(stated, leaves=frozenset(v for v in stated.leaves if str(v) == "A"))
    assert _flops_ok(ungrouped, 2 * d**2 * N_, planted)


def test_a_bound_dimension_is_never_rebound_by_a_concrete_dimension_of_the_same_name():
    """The statement's dimensions are ``m, k, n``; the step's ``X`` is ``n × m``. ``flops(X Xᵀ) = 2 n² m``; before
    the fix the pattern's ``m`` was re-bound while ``k`` was bound to the concrete ``m``, and ``2 m² n`` passed."""
    x = MatrixSymbol("X", N_, M_)
    assert _flops_ok(product(x, x.T), 2 * N_**2 * M_)
    assert not _flops_ok(product(x, x.T), 2 * M_**2 * N_)


def test_a_rewrite_chain_that_does_not_end_is_refused():
    """A clause that undoes itself (``A B = B A``) never reaches a normal form: refused, not looped on."""
    a, b = MatrixSymbol("A", d, d), MatrixSymbol("B", d, d)
    swap = Statement((Clause(a * b, b * a),), closure="rewrite", sizes=({d: 2}, {d: 16}))
    assert rewrite_normal_form(swap, a * b) is None
    lemma = dataclasses.replace(counting.PRODUCT_COST, statement=swap)
    assert step_instance(lemma, "rewrite", [a * b], [a * b])[1] is not None


def test_a_scalar_of_bound_pattern_symbols_matches_its_value():
    """B3: ``X^p = X^{p/2} (X^{p/2})ᵀ`` matches ``X^{1/2} → X^{1/4} X^{1/4}`` (``p/2`` evaluated), not ``X^{1/8}``."""
    y = product(GramSqrt(W), W.T, W, GramSqrt(W))  # Fᵀ F for F = W C_W
    half, quarter = SPDPower(y, Rational(1, 2)), SPDPower(y, Rational(1, 4))
    assert step_instance(spd_powers.POWER_SPLIT, "rewrite", [half], [product(quarter, quarter)])[1] is None
    eighth = SPDPower(y, Rational(1, 8))
    assert step_instance(spd_powers.POWER_SPLIT, "rewrite", [half], [product(quarter, eighth)])[1] is not None


def test_full_rank_of_a_product_follows_from_its_factors():
    """``W C_W`` has full column rank (a full-rank factor times an invertible one); ``W A`` with ``A`` of unknown
    rank does not, so B3 (which needs ``F`` of full column rank) does not apply to ``(Aᵀ Wᵀ W A)^p``."""
    a = MatrixSymbol("A", h, h)
    assert known(FULL_COLUMN_RANK, product(W, GramSqrt(W)))
    assert not known(FULL_COLUMN_RANK, product(W, a))
    assert not known(FULL_ROW_RANK, product(W, GramSqrt(W)))  # tall: full column rank, not row rank
    y = product(a.T, W.T, W, a)
    quarter = SPDPower(y, Rational(1, 4))
    assert step_instance(spd_powers.POWER_SPLIT, "rewrite", [SPDPower(y, Rational(1, 2))],
                         [product(quarter, quarter)])[1] is not None
    square = FactMatrix("G", d, d, [FULL_COLUMN_RANK])
    assert known(FULL_ROW_RANK, square) and not known(FULL_ROW_RANK, W)


def test_a_step_own_definitions_must_be_instances_and_unfold_to_the_other_side():
    """GU: ``X_2 = q_1 X_1``, ``X_1 = q_0 X_0`` unfold ``X_2`` to ``q_1 q_0 X_0``; the order matters, a definition
    of another form (``X_1 = X_0 + q_0 X_0``, a sum) is not an instance."""
    x0, x1, x2 = (MatrixSymbol(f"X_{t}", d, h) for t in range(3))
    q0, q1 = (FactMatrix(f"q_{t}", d, d, ["symmetric"]) for t in range(2))
    good = {"iterates": {x2: q1 * x1, x1: q0 * x0}}
    assert step_instance(gram.UNROLL, "rewrite", [x2], [q1 * q0 * x0], params=good)[1] is None
    assert step_instance(gram.UNROLL, "rewrite", [x2], [q0 * q1 * x0], params=good)[1] is not None
    odd = {"iterates": {x2: q1 * x1, x1: x0 + q0 * x0}}
    failure = step_instance(gram.UNROLL, "rewrite", [x2], [q1 * (x0 + q0 * x0)], params=odd)[1]
    assert failure and "not an instance of the statement's definition" in failure
    # a step's definition must be the derivation's own: X_1 = q_1 X_0 where the derivation has X_1 = q_0 X_0
    context = {x1: q0 * x0, x2: q1 * x1}
    assert step_instance(gram.UNROLL, "rewrite", [x2], [q1 * q0 * x0], params=good, definitions=context)[1] is None
    forged = {"iterates": {x2: q1 * x1, x1: q1 * x0}}
    failure = step_instance(gram.UNROLL, "rewrite", [x2], [q1 * q1 * x0], params=forged, definitions=context)[1]
    assert failure and "is not the derivation's X_1" in failure


def test_a_restriction_replaces_the_whole_constraint_by_an_upper_bound_and_keeps_the_objective():
    """K: ``max_i ‖X_i‖_op ≤ ‖X‖_op``, so ``‖X‖_op ≤ β`` implies the per-block constraint (the block size ``b`` of
    the statement binds the step's ``d``). Refused: the bound used backwards, a changed objective, and a bound
    applied inside the constraint (``2 max_i ‖X_i‖`` → ``‖X‖``: not the clause's instance)."""
    x = MatrixSymbol("X", 2 * d, h)
    objective, blocked, stacked = Inner(MatrixSymbol("G", 2 * d, h), x), BlockMaxOpNorm(x, d, "rows"), OpNorm(x)

    def ok(before, after):
        return step_instance(blocks.BLOCK_STACKING, "restrict", before, after)[1] is None

    assert ok([objective, blocked], [objective, stacked])
    assert not ok([objective, stacked], [objective, blocked])
    assert not ok([objective, blocked], [Inner(MatrixSymbol("H", 2 * d, h), x), stacked])
    assert not ok([objective, 2 * blocked], [objective, stacked])


def test_a_chain_rule_gradient_must_be_the_derivations_definition():
    """The derivation defines ``G_Q = G_M W_K``; a chain-rule step that names ``G_M W_Q`` as ``G_Q`` is
    consistent with itself (its numbers come from differentiating a loss through its own definition), so only the
    comparison with the derivation's definition refuses it."""
    w_q = FactMatrix("W_Q", d, h, [FULL_COLUMN_RANK])
    g_q, a = MatrixSymbol("G_Q", d, h), MatrixSymbol("A", h, h)
    context = {g_q: product(G, W)}
    wrong = {g_q: product(G, w_q)}
    failure = step_instance(L.CHAIN_RULE, "rewrite", [product(G, w_q, a)], [product(g_q, a)], params={
        "gradients": wrong}, definitions=context)[1]
    assert failure and "is not the derivation's G_Q" in failure
    assert step_instance(L.CHAIN_RULE, "rewrite", [product(G, W, a)], [product(g_q, a)],
                         params={"gradients": context}, definitions=context)[1] is None
    der = identity_chain("planted.chain", "planted", product(G, w_q, a),
                         Context(definitions=context, check_dims=[{d: 5, h: 2}], mpmath_dims={d: 4, h: 2}))
    with pytest.raises(StepCheckFailed, match="is not the derivation's G_Q"):
        der.apply(L.CHAIN_RULE, gradients=wrong)
