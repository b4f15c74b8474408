"""LoRA rules (``derivations.lora``): found by search, checked, emitted; the B = 0 start, the gauge, the joint form.

Planted mistakes kept as tests: Lemma 2 without its orthonormal-rows case (the search cannot whiten the wide
``A``), a polar inverse with the wrong exponent and a doubled budget (pruned by their checks), a chain-rule
instance that loses the transpose of a wide partner, and a strip of a wide factor without orthonormal rows.
"""

from dataclasses import replace

import numpy as np
import pytest
import scipy.linalg
from sympy.matrices.expressions import MatMul, MatrixSymbol, Transpose

from derivations import (
    Derivation,
    GramInvSqrt,
    GramSqrt,
    Inner,
    Msign,
    OpNorm,
    PolarFactor,
    Problem,
    SearchFailed,
    StepCheckFailed,
    derive,
    lora,
    product,
)
from derivations import joint as J
from derivations import lemmas as L
from derivations.lemmas import chain_rule, isometry
from derivations.lemmas.base import rewrite_nodes
from derivations.vocabulary.algebra import with_damping
from derivations.vocabulary.evaluate import evaluate_on
from numerics.emitted import balance as balance_emitted
from numerics.emitted import joint as joint_emitted
from numerics.emitted import lora as emitted

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

EPS = 0.4


def _instance(rng, d_out=9, d_in=7, r=3, batch=()):
    b, a, gw = (rng.standard_normal((*batch, *s)) for s in ((d_out, r), (r, d_in), (d_out, d_in)))
    return b, a, gw, gw @ np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2) @ gw


def test_half_split_sides_are_found_by_search_and_are_the_closed_forms():
    c_a, c_b = GramInvSqrt(lora.A, 0, "left"), GramInvSqrt(lora.B)
    assert lora.b_side().formula == product(-lora.BUDGET, Msign(product(lora.G_B, c_a)), c_a)
    assert lora.a_side().formula == product(-lora.BUDGET, c_b, Msign(product(c_b, lora.G_A)))
    for der in (lora.b_side(), lora.a_side()):
        assert der.search_stats["path"][-2:] == ["solve (operator ball)", "back-substitute"]
        assert all(s.check.passed for s in der.steps)


def test_emitted_update_matches_the_derivation_and_spends_half_the_budget_each():
    b, a, _, gb, ga = _instance(np.random.default_rng(0), batch=(2,))
    db, da = (np.asarray(x) for x in emitted.lora_halfsplit(b, a, gb, ga, eps=EPS, msign="svd"))
    for i in range(2):
        want_b = evaluate_on(lora.b_side().formula, {"A": a[i], "G_B": gb[i], "epsilon": EPS})
        want_a = evaluate_on(lora.a_side().formula, {"B": b[i], "G_A": ga[i], "epsilon": EPS})
        assert np.allclose(db[i], want_b, atol=1e-12) and np.allclose(da[i], want_a, atol=1e-12)
        assert np.linalg.norm(db[i] @ a[i], 2) == pytest.approx(EPS / 2)
        assert np.linalg.norm(b[i] @ da[i], 2) == pytest.approx(EPS / 2)


def test_emitted_damping_is_the_derived_damped_rule():
    """The emitted code damps every Gram root; that is exactly the damped problems' solution (found by search)."""
    lam = lora.lam
    assert with_damping(lora.b_side().formula.xreplace({lora.A: lora.A_ANY}), lam) == lora.damped_b().formula
    assert with_damping(lora.a_side().formula.xreplace({lora.B: lora.B_ANY}), lam) == lora.damped_a().formula


def test_b_zero_start_a_waits_and_b_takes_the_step():
    _, a, gw, gb, _ = _instance(np.random.default_rng(1))
    zero = np.zeros((gw.shape[0], a.shape[0]))
    for damping in (1e-3, 0.0):  # damped: the derived rule; undamped: the pseudo-inverse root of a zero Gram
        db, da = (np.asarray(x) for x in emitted.lora_halfsplit(zero, a, gb, zero.T @ gw, eps=EPS, damping=damping,
                                                                 msign="svd"))
        assert np.all(da == 0.0)
        assert 0.99 * EPS / 2 <= np.linalg.norm(db @ a, 2) <= EPS / 2 * (1 + 1e-12)


def test_undamped_rule_at_b_zero_stated_honestly():
    """B without a rank fact: the undamped A problem has no derivation (a singular Gram), and near B = 0 the
    undamped update grows like 1/σ_min(B) while the damped one stays bounded."""
    change = product(lora.B_ANY, lora.dA)
    problem = Problem(lora.dA, Inner(lora.G_W, change), OpNorm(change), lora.BUDGET)
    with pytest.raises(SearchFailed, match="B is not known to have full rank"):
        derive(problem, lora.damped_context(), name="lora.undamped_any_B", max_expansions=40)
    rows = {label: value for label, value, _ in lora.measurements(np.random.default_rng(0))}
    sizes = [rows[f"undamped, ‖B‖ ~ {s:g}: ‖ΔA‖_op (grows like 1/σ_min(B))"] for s in (1e-1, 1e-3, 1e-5)]
    assert sizes[1] > 20 * sizes[0] and sizes[2] > 20 * sizes[1]  # ~100× per step of 100 in ‖B‖
    assert rows["B = 0, damping 0.001: ‖ΔA‖_F (zero: A waits for B)"] == 0.0


def test_gauge_derivations_and_the_emitted_projection_with_unequal_sides():
    assert str(lora.horizontality().formula) == "<B.T*Delta_B, X> + <-Delta_A*A.T, X>"
    for der in (lora.vertical_invisible(), lora.gradients_horizontal(), lora.projection_horizontal(), lora.balanced()):
        assert der.formula.is_ZeroMatrix, der.name
    rng = np.random.default_rng(2)
    b, a, mb, ma = (rng.standard_normal(s) for s in ((9, 3), (3, 5), (9, 3), (3, 5)))  # d_out ≠ d_in
    pb, pa = (np.asarray(x) for x in emitted.lora_horizontal_projection(b, a, mb, ma))
    assert np.allclose(b.T @ pb, pa @ a.T, atol=1e-12)  # horizontal
    assert np.allclose(pb @ a + b @ pa, mb @ a + b @ ma, atol=1e-12)  # same first-order change of W
    ref = lora.least_squares_projection(b, a, mb, ma)
    assert np.allclose(pb, ref[0], atol=1e-12) and np.allclose(pa, ref[1], atol=1e-12)


def test_balance_is_the_qk_balance_of_b_and_a_transposed():
    rng = np.random.default_rng(3)
    b, a = 5 * rng.standard_normal((9, 3)), rng.standard_normal((3, 6)) / 5
    b2, a2t = (np.asarray(x) for x in balance_emitted.balance_qk(b, a.T))
    assert np.allclose(b2.T @ b2, a2t.T @ a2t, atol=1e-10 * np.abs(a2t.T @ a2t).max())
    assert np.allclose(b2 @ a2t.T, b @ a, atol=1e-12 * np.abs(b @ a).max())


def test_joint_form_for_square_adapters_is_the_joint_qk_rule():
    assert lora.joint().formula == J.joint().formula  # the same block-whitened problem
    b, a, _, gb, ga = _instance(np.random.default_rng(4), d_out=8, d_in=8, r=3)
    dq, dk = (np.asarray(x) for x in joint_emitted.joint_qk(b, a.T, gb, ga.T, eps=EPS, msign="svd"))
    halves = np.concatenate([dq @ a, dk @ b.T], axis=1)  # [ΔB A | ΔAᵀ Bᵀ] with ΔAᵀ = dk
    assert np.linalg.norm(halves, 2) == pytest.approx(EPS / 2)
    delta = evaluate_on(lora.joint().formula, {"P": scipy.linalg.block_diag(a.T, b),
                                               "G": np.concatenate([gb, ga.T], axis=1), "epsilon": EPS})
    assert np.allclose(delta, np.concatenate([dq, dk], axis=1), atol=1e-12)


def test_ranks_that_disagree_are_one_clear_line():
    with pytest.raises(ValueError) as info:
        emitted.lora_halfsplit(np.ones((6, 2)), np.ones((3, 5)), np.ones((6, 2)), np.ones((3, 5)), eps=0.1)
    msg = str(info.value)
    assert "\n" not in msg and "A has r = 3" in msg and "r = 2" in msg


# ---- planted mistakes -------------------------------------------------------------------------------
def _old_strip(norm_types):
    """Lemma 2 as it was: only a trailing ``Uᵀ`` of an orthonormal-columns ``U`` is stripped on the right."""
    def rule(e):
        if not isinstance(e, norm_types) or not isinstance(e.args[0], MatMul):
            return None
        coeff, mats = e.args[0].as_coeff_matrices()
        mats, conditions = list(mats), []
        while len(mats) > 1 and isinstance(mats[-1], Transpose) and L._orthonormal_cols(mats[-1].arg):
            conditions.append(L._isometry_condition(mats.pop().arg))
        while len(mats) > 1 and L._orthonormal_cols(mats[0]):
            conditions.append(L._isometry_condition(mats.pop(0)))
        return (type(e)(product(coeff, *mats)), conditions) if conditions else None
    return rule


def _stops(failure):
    """Every reason a branch of a failed search stopped (the message shows the last few only)."""
    return "\n".join(why for _, why in failure.report)


def _light():
    return replace(lora.context(), symbolic_dims={}, mpmath_dims={})


def test_planted_lemma_2_without_orthonormal_rows_cannot_whiten_a(monkeypatch):
    old = replace(L.ORTHONORMAL_INVARIANCE, rewrite=lambda expr, **_: rewrite_nodes(
        expr, _old_strip((OpNorm,)), "no operator norm with an outer factor known to have orthonormal columns"))
    monkeypatch.setattr(L, "ORTHONORMAL_INVARIANCE", old)
    with pytest.raises(SearchFailed, match="no derivation of planted.B") as info:
        derive(lora.b_problem(), _light(), name="planted.B", max_expansions=60)
    assert "||Z_dB*C_A^-1*A||_op" in str(info.value)  # the wide partner is never stripped from the norm


def test_planted_strip_of_a_plain_wide_factor_fails_its_check():
    """An isometry rule that strips any trailing wide factor (no orthonormal rows) changes the norm: the step's
    check fails (‖ΔB A‖ is not ‖ΔB‖)."""
    def careless(e):
        if isinstance(e, OpNorm) and isinstance(e.args[0], MatMul):
            coeff, mats = e.args[0].as_coeff_matrices()
            if len(mats) > 1:
                return OpNorm(product(coeff, *mats[:-1])), ["(planted) dropped a trailing factor"]
        return None
    planted = replace(L.ORTHONORMAL_INVARIANCE, rewrite=lambda expr, **_: rewrite_nodes(expr, careless, "nothing"))
    der = Derivation("planted.strip", "planted", lora.b_problem(), _light())
    with pytest.raises(StepCheckFailed, match="planted.strip step 1"):
        der.apply(planted)


def test_planted_wrong_exponent_in_the_polar_inverse_is_pruned(monkeypatch):
    """``U_A = C_A A`` (exponent +1/2 instead of −1/2): every branch that uses it fails its check."""
    true_rewrite = L.POLAR_INVERSE.rewrite

    def wrong(expr, **kw):
        out, conds = true_rewrite(expr, **kw)
        return out.replace(lambda e: isinstance(e, GramInvSqrt), lambda e: GramSqrt(*e.args)), conds
    monkeypatch.setattr(L, "POLAR_INVERSE", replace(L.POLAR_INVERSE, rewrite=wrong))
    with pytest.raises(SearchFailed) as info:
        derive(lora.b_problem(), _light(), name="planted.exponent", max_expansions=80)
    assert "pruned by its check" in _stops(info.value)


def test_planted_doubled_budget_fails_the_certificate(monkeypatch):
    doubled = replace(L.LINEAR_STEEPEST_DESCENT, solution=lambda a, beta: L._lsd_solution(a, 2 * beta))
    monkeypatch.setattr(L, "LINEAR_STEEPEST_DESCENT", doubled)
    with pytest.raises(SearchFailed) as info:
        derive(lora.a_problem(), _light(), name="planted.budget", max_expansions=60)
    assert "solve (operator ball): pruned by its check" in _stops(info.value)


def test_chain_rule_instance_keeps_the_transpose_of_a_wide_partner(monkeypatch):
    """``G_B = G_W Aᵀ``: the autodiff instance must differentiate ``L(B A)``; before the fix it sampled ``Aᵀ`` as a
    fresh matrix of ``G_B``'s shape and failed. A planted instance that drops the transpose is caught."""
    rng = np.random.default_rng(5)
    dims = {lora.d_out: 5, lora.d_in: 4, lora.r: 2}
    env = {lora.A: rng.standard_normal((2, 4)), lora.B: rng.standard_normal((5, 2))}
    vals, _ = chain_rule._chain_instance(env, rng, L._NP, dims, gradients=lora.GRADIENTS)
    assert np.allclose(vals[lora.G_B], vals[lora.G_W] @ env[lora.A].T)
    assert np.allclose(vals[lora.G_A], env[lora.B].T @ vals[lora.G_W])
    true_products = chain_rule.chain_rule_products

    def dropped(gradients, loss_gradient=None):
        s, left, right, slots = true_products(gradients, loss_gradient)
        return s, left, (right[0], not right[1]) if right else right, slots
    monkeypatch.setattr(chain_rule, "chain_rule_products", dropped)
    with pytest.raises(Exception, match="dot_general|shape|size"):
        chain_rule._chain_instance(env, rng, L._NP, dims, gradients=lora.GRADIENTS)


def test_isometry_lemma_strips_a_trailing_left_polar_factor_only():
    z = MatrixSymbol("Z", 4, lora.r)
    out, conds = L.ORTHONORMAL_INVARIANCE.apply(OpNorm(product(z, PolarFactor(lora.A, 0, "left"))))
    assert out == OpNorm(z) and "orthonormal rows" in conds[0]
    assert isometry.strip_isometries((OpNorm,))(OpNorm(product(z, lora.A))) is None  # A itself: no isometry
