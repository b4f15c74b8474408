"""Steepest-descent problems stated plainly, ``min ⟨G, ΔW⟩ s.t. ‖A ΔW B‖ ≤ ε``, derived by ``derive`` through the public
API with the registered lemmas: the change of variables that moves an invertible whitening into the objective (Lemma
4i: two-sided Shampoo-style SPD powers, one-sided, activation-aware through the polar factor of a wide data matrix),
a temperature through the chain rule and the homogeneity of norms (Lemma Hn), the restriction to the row space of a
wide partner (Lemma Rw, the minimum-norm solution). Each derived formula is compared with a closed form computed
here in NumPy; one is emitted as JAX and compared too. Each new lemma's planted-wrong variant is refused, and each
hint a failed search gives is produced by a problem that needs it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import numpy as np
import pytest
from sympy import Rational, Symbol
from sympy.matrices.expressions import MatMul, MatPow, MatrixSymbol

from derivations import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    SPD,
    Applies,
    Clause,
    Context,
    Derivation,
    EmittedFunction,
    FactMatrix,
    Inner,
    MatrixScalar,
    OpNorm,
    Problem,
    RuleModule,
    SearchFailed,
    SPDPower,
    Statement,
    StepCheckFailed,
    derive,
    dimension,
    evaluate_on,
    positive_symbol,
    product,
    transpose,
)
from derivations import lemmas as L
from derivations.cli import render
from derivations.lemmas.homogeneity import NORM_NODES
from derivations.lemmas.kernel import step_instance
from derivations.vocabulary.nodes import GramInvSqrt
from tests.hand_formulas import msign, spd_power

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

b, d, f, m, n = (dimension(s) for s in ("b", "d", "f", "m", "n"))
eps, tau = positive_symbol("epsilon"), positive_symbol("tau")
RNG_SIZES = ((6, 4, 9), (5, 5, 7))  # (m, n, b): tall, and square with a wide data matrix


# ---- independent NumPy references -------------------------------------------------------------
def _spd(rng, k):
    a = rng.standard_normal((k, 2 * k))
    return a @ a.T / k + 0.5 * np.eye(k)


def _close(got, want):
    assert np.linalg.norm(got - want) <= 1e-10 * np.linalg.norm(want)


# ---- the plain problems (each states its problem in a few lines of the public API) --------------
@pytest.fixture(scope="module")
def shampoo():
    """(a) min ⟨G, ΔW⟩ s.t. ‖L^{1/4} ΔW R^{1/4}‖_op ≤ ε, L and R SPD."""
    L_, R_ = FactMatrix("L", m, m, [SPD]), FactMatrix("R", n, n, [SPD])
    G, dW = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n)
    change = product(SPDPower(L_, Rational(1, 4)), dW, SPDPower(R_, Rational(1, 4)))
    return derive(Problem(dW, Inner(G, dW), OpNorm(change), eps), Context(check_dims=[{m: 4, n: 3}]),
                  name="plain.shampoo")


def test_two_sided_shampoo_whitening_derives_and_equals_the_closed_form(shampoo):
    assert [s.lemma.number for s in shampoo.steps if s.kind == "change_of_variables"] == ["4i", "4i"]
    rng = np.random.default_rng(0)
    for mm, nn, _ in RNG_SIZES:
        l_, r_, g = _spd(rng, mm), _spd(rng, nn), rng.standard_normal((mm, nn))
        got = evaluate_on(shampoo.formula, {"L": l_, "R": r_, "G": g, "epsilon": 0.3})
        li, ri = spd_power(l_, -0.25), spd_power(r_, -0.25)
        _close(got, -0.3 * li @ msign(li @ g @ ri) @ ri)


def test_one_sided_whitening_derives_and_equals_the_closed_form():
    L_ = FactMatrix("L", m, m, [SPD])
    G, dW = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n)
    problem = Problem(dW, Inner(G, dW), OpNorm(product(SPDPower(L_, Rational(1, 2)), dW)), eps)
    der = derive(problem, Context(check_dims=[{m: 4, n: 3}]), name="plain.one_sided")
    rng = np.random.default_rng(1)
    for mm, nn, _ in RNG_SIZES:
        l_, g = _spd(rng, mm), rng.standard_normal((mm, nn))
        got = evaluate_on(der.formula, {"L": l_, "G": g, "epsilon": 0.2})
        _close(got, -0.2 * spd_power(l_, -0.5) @ msign(spd_power(l_, -0.5) @ g))


@pytest.fixture(scope="module")
def activation():
    """(c) min ⟨G, ΔW⟩ s.t. ‖ΔW X‖_op ≤ ε, X (n × b) a wide data matrix of full row rank."""
    X = FactMatrix("X", n, b, [FULL_ROW_RANK])
    G, dW = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n)
    problem = Problem(dW, Inner(G, dW), OpNorm(product(dW, X)), eps)
    return derive(problem, Context(check_dims=[{m: 4, n: 3, b: 5}]), name="plain.activation")


def _activation_closed_form(x, g, eta):
    c_inv = spd_power(x @ x.T, -0.5)
    return -eta * msign(g @ c_inv) @ c_inv


def test_activation_aware_whitening_goes_through_the_polar_factor(activation):
    assert {"6a", "2", "4i"} <= {s.lemma.number for s in activation.steps}
    rng = np.random.default_rng(2)
    for mm, nn, bb in RNG_SIZES:
        x, g = rng.standard_normal((nn, bb)), rng.standard_normal((mm, nn))
        got = evaluate_on(activation.formula, {"X": x, "G": g, "epsilon": 0.1})
        _close(got, _activation_closed_form(x, g, 0.1))
        assert np.linalg.norm(got @ x, 2) == pytest.approx(0.1, rel=1e-10)  # the budget is spent


def test_the_activation_aware_rule_is_emitted_as_jax_and_equals_the_closed_form(activation):
    X = next(s for s in activation.start.constraint.free_symbols if str(s) == "X")
    G = next(s for s in activation.start.objective.free_symbols if str(s) == "G")
    step = EmittedFunction("activation_step", "Activation-aware step", [X, G], [("dW", activation)])
    module = RuleModule(name="activation", title="Activation-aware descent", derivations=lambda: [activation],
                        functions=lambda: [step], scalars={eps: "eps"})
    emitted: dict = {}
    exec(render(module, "jax"), emitted)  # noqa: S102 (the emitted module)
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((3, 8)), rng.standard_normal((5, 3))
    got = np.asarray(emitted["activation_step"](x, g, eps=0.1, msign="svd"))
    assert np.allclose(got, _activation_closed_form(x, g, 0.1), rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def temperature():
    """Half-split with a temperature, M = τ W_Q W_Kᵀ: min ⟨G_M, τ ΔW_Q W_Kᵀ⟩ s.t. ‖τ ΔW_Q W_Kᵀ‖_op ≤ ε/2."""
    W_K = FactMatrix("W_K", d, n, [FULL_COLUMN_RANK])
    G_M, G_Q, dW_Q = MatrixSymbol("G_M", d, d), MatrixSymbol("G_Q", d, n), MatrixSymbol("dW_Q", d, n)
    change = product(tau, dW_Q, transpose(W_K))
    context = Context(definitions={G_Q: product(tau, G_M, W_K)}, check_dims=[{d: 6, n: 3}])
    return derive(Problem(dW_Q, Inner(G_M, change), OpNorm(change), eps / 2), context, name="plain.temperature")


def test_a_temperature_goes_through_the_chain_rule_and_out_of_the_norm(temperature):
    assert {"CR", "Hn", "4"} <= {s.lemma.number for s in temperature.steps}  # the partner's root: Lemma 4
    rng = np.random.default_rng(4)
    for dd, nn in ((7, 3), (5, 5)):
        w_k, g_m, t = rng.standard_normal((dd, nn)), rng.standard_normal((dd, dd)), 1.7
        g_q = t * g_m @ w_k
        got = evaluate_on(temperature.formula, {"W_K": w_k, "G_Q": g_q, "tau": t, "epsilon": 0.4})
        c_inv = spd_power(w_k.T @ w_k, -0.5)
        _close(got, -0.4 / (2 * t) * msign(g_q @ c_inv) @ c_inv)
        assert np.linalg.norm(t * got @ w_k.T, 2) == pytest.approx(0.2, rel=1e-10)


@pytest.fixture(scope="module")
def mlp():
    """M = W_down W_up, W_down (d × f) wide of full row rank: min ⟨G_M, W_down ΔW_up⟩ s.t. ‖W_down ΔW_up‖_op ≤ ε/2."""
    W_down = FactMatrix("W_down", d, f, [FULL_ROW_RANK])
    G_M, G_up, dW_up = MatrixSymbol("G_M", d, n), MatrixSymbol("G_up", f, n), MatrixSymbol("dW_up", f, n)
    change = product(W_down, dW_up)
    context = Context(definitions={G_up: product(transpose(W_down), G_M)}, check_dims=[{d: 3, f: 6, n: 4}])
    return derive(Problem(dW_up, Inner(G_M, change), OpNorm(change), eps / 2), context, name="plain.mlp")


def test_a_wide_partner_gives_the_minimum_norm_update_in_factor_gradient_form(mlp):
    assert "Rw" in {s.lemma.number for s in mlp.steps}
    assert {str(s) for s in mlp.formula.free_symbols} == {"W_down", "G_up", "epsilon"}
    rng = np.random.default_rng(5)
    for dd, ff, nn in ((3, 7, 4), (4, 9, 4)):
        w, g_m = rng.standard_normal((dd, ff)), rng.standard_normal((dd, nn))
        got = evaluate_on(mlp.formula, {"W_down": w, "G_up": w.T @ g_m, "epsilon": 0.6})
        want = -0.3 * w.T @ np.linalg.solve(w @ w.T, msign(g_m))
        _close(got, want)
        # the minimum-norm member: orthogonal to the null space of W_down
        null = np.linalg.svd(w)[2][dd:].T
        assert np.abs(null.T @ got).max() <= 1e-10 * np.abs(got).max()


# ---- planted-wrong variants of the new lemmas are refused ----------------------------------------
def _objective_keeps_the_old_variable(expr, *, variable, new, factor, side="right", **_):
    """Lemma 4i with the whitening's inverse dropped from the objective (wrong)."""
    out, conditions = L.WHITENING_CHANGE.rewrite(expr, variable=variable, new=new, factor=factor, side=side)
    return out.xreplace({L.inverse_of(factor): factor}) if isinstance(expr, Inner) else out, conditions


def test_a_planted_change_of_variables_without_the_inverse_is_refused():
    wrong = replace(L.WHITENING_CHANGE, rewrite=_objective_keeps_the_old_variable)
    assert not wrong.self_check(np.random.default_rng(0)).passed
    L_ = FactMatrix("L", m, m, [SPD])
    G, dW, Z = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n), MatrixSymbol("Z", m, n)
    a = SPDPower(L_, Rational(1, 2))
    der = Derivation("wrong.cov", "planted", Problem(dW, Inner(G, dW), OpNorm(product(a, dW)), eps),
                     Context(check_dims=[{m: 4, n: 3}]))
    with pytest.raises(StepCheckFailed, match="lemma 4i"):
        der.change_variables(Z, a, side="left", lemma=wrong)


def _scaled_norm(e):
    return isinstance(e, NORM_NODES) and isinstance(e.args[0], MatMul) and e.args[0].as_coeff_matrices()[0] != 1


def test_a_planted_homogeneity_that_drops_the_scale_is_refused():
    def dropped(expr, **_):  # ‖c Z‖ → ‖Z‖ (wrong)
        return expr.replace(_scaled_norm, lambda e: type(e)(product(*e.args[0].as_coeff_matrices()[1]))), []

    wrong = replace(L.HOMOGENEITY, rewrite=dropped)
    assert not wrong.self_check(np.random.default_rng(0)).passed
    dW = MatrixSymbol("dW", m, n)
    der = Derivation("wrong.h", "planted", Problem(dW, Inner(MatrixSymbol("G", m, n), dW),
                                                   OpNorm(product(tau, dW)), eps), Context(check_dims=[{m: 4, n: 3}]))
    with pytest.raises(StepCheckFailed, match="lemma Hn"):
        der.apply(wrong)


def test_a_chain_rule_step_with_a_temperature_is_an_instance_and_a_wrong_coefficient_is_not():
    W_K = FactMatrix("W_K", d, n, [FULL_COLUMN_RANK])
    G_M, G_Q = MatrixSymbol("G_M", d, d), MatrixSymbol("G_Q", d, n)
    grads = {G_Q: product(tau, G_M, W_K)}
    c_inv = GramInvSqrt(W_K)
    before = [product(tau, G_M, W_K, c_inv)]
    kwargs = {"params": {"gradients": grads}, "definitions": grads, "independent": frozenset({G_M, W_K})}
    status, failure = step_instance(L.CHAIN_RULE, "rewrite", before, [product(G_Q, c_inv)], **kwargs)
    assert failure is None and status.startswith("instance")
    for wrong in (product(tau, G_Q, c_inv), product(2, G_Q, c_inv), product(1 / tau, G_Q, c_inv)):
        assert step_instance(L.CHAIN_RULE, "rewrite", before, [wrong], **kwargs)[1] is not None, wrong


def test_a_planted_restriction_without_the_inverse_gram_is_refused():
    def without_gram(expr, *, variable, new, factor, **_):
        out = expr.xreplace({variable: product(transpose(factor), new)})  # X = Wᵀ Y: W X = W Wᵀ Y ≠ Y
        return out.replace(lambda e: e == product(factor, transpose(factor), new), lambda e: new), []

    wrong = replace(L.RANGE_RESTRICTION, rewrite=without_gram)
    assert not wrong.self_check(np.random.default_rng(0)).passed


# ---- a failed search says what to do --------------------------------------------------------------
class ColumnNormMax(MatrixScalar):
    """max_j ‖A e_j‖₂, a norm without a registered family."""


def _plain(constraint_of):
    G, dW = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n)
    return Problem(dW, Inner(G, dW), constraint_of(dW), eps), Context(check_dims=[{m: 4, n: 3}])


L_SPD = FactMatrix("L", m, m, [SPD])
NO_4I = replace(L.WHITENING_CHANGE, applies=Applies(lambda view: []))  # the search without Lemma 4i's offers
HINTS = {
    "the objective does not contain the whitening (L)^(1/2): add a change of variables": (
        lambda z: OpNorm(product(SPDPower(L_SPD, Rational(1, 2)), z)), [NO_4I]),
    "a matrix power L**(1/4) with p = 1/4 is not in the vocabulary: write it as SPDPower": (
        lambda z: OpNorm(product(MatPow(L_SPD, Rational(1, 4)), z)), None),
    "the norm family of ColumnNormMax(dW) (ColumnNormMax) is not registered: register it": (ColumnNormMax, None),
    "the scalar t inside the norm has no known sign: declare it with positive_symbol": (
        lambda z: OpNorm(product(Symbol("t"), z)), None),
    "L beside dW is not known to be invertible": (
        lambda z: OpNorm(product(MatrixSymbol("L", m, m), z)), None),
}


@pytest.mark.parametrize("hint", list(HINTS))
def test_a_failed_search_names_the_nearest_missing_move(hint):
    constraint_of, lemmas = HINTS[hint]
    problem, context = _plain(constraint_of)
    with pytest.raises(SearchFailed) as failure:
        derive(problem, context, lemmas=lemmas)
    assert failure.value.hint is not None and failure.value.hint.startswith(hint), failure.value.hint
    assert f"what to do: {failure.value.hint}" in str(failure.value).splitlines()[1]


def test_a_wide_partner_without_full_row_rank_gets_the_row_space_hint():
    W_down = FactMatrix("W_down", d, f, [])
    G_M, G_up, dW_up = MatrixSymbol("G_M", d, n), MatrixSymbol("G_up", f, n), MatrixSymbol("dW_up", f, n)
    context = Context(definitions={G_up: product(transpose(W_down), G_M)}, check_dims=[{d: 3, f: 6, n: 4}])
    with pytest.raises(SearchFailed) as failure:
        derive(Problem(dW_up, Inner(G_M, product(W_down, dW_up)), OpNorm(product(W_down, dW_up)), eps), context)
    assert failure.value.hint.startswith("no lemma restricts to the row space of W_down")


def _false_statements():
    """``(number, the lemma's statement with one clause made false)`` for the lemmas these problems added."""
    def falsified(statement, index, rhs):
        clauses = list(statement.clauses)
        clauses[index] = Clause(clauses[index].lhs, rhs)
        return dataclasses.replace(statement, clauses=tuple(clauses))

    hn, cov, rw = L.HOMOGENEITY.statement, L.WHITENING_CHANGE.statement, L.RANGE_RESTRICTION.statement
    scale, norm = hn.clauses[0].rhs.as_two_terms()
    power = cov.clauses[2].lhs.args[0]
    w, _, c_inv, _ = rw.clauses[1].lhs.args
    return [("Hn", falsified(hn, 0, scale**2 * norm)),                               # ‖c A‖ = c² ‖A‖
            ("4i", falsified(cov, 2, product(power, power))),                      # P^q P^{-q} = P^{2q}
            ("Rw", falsified(rw, 1, product(w, transpose(w), c_inv)))]             # one C⁻¹ too few


@pytest.mark.parametrize(("number", "false"), _false_statements(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_false_variant_of_each_new_statement_fails_its_self_check(number, false):
    errors = false.check(np.random.default_rng(3), trials=1)
    assert any(not err <= Statement.tolerance(k) for k, err in errors.items() if "float64" in k), (number, errors)


def test_a_change_of_variables_through_a_power_of_a_matrix_not_known_to_be_spd_is_no_instance():
    G, dW, Z = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n), MatrixSymbol("Z", m, n)
    for base, honest in ((FactMatrix("L", m, m, [SPD]), True), (MatrixSymbol("S", m, m), False)):
        a, a_inv = SPDPower(base, Rational(1, 2)), SPDPower(base, Rational(-1, 2))
        before = [Inner(G, dW), OpNorm(product(a, dW))]
        after = [Inner(G, product(a_inv, Z)), OpNorm(Z)]
        _, failure = step_instance(L.WHITENING_CHANGE, "change_of_variables", before, after,
                                   substitution=(dW, product(a_inv, Z)), independent=frozenset({G}), fresh=(Z,))
        assert (failure is None) is honest, (base, failure)
