"""Block and stacking reductions as engine steps (Lemma K), and the layout adapters printed from them."""

from dataclasses import replace

import numpy as np
import pytest
from sympy.matrices.expressions import MatrixSymbol

from derivations import gqa, hybrid_ov
from derivations import lemmas as L
from derivations.engine import derivation as engine_derivation
from derivations.engine.derivation import Context, Derivation, DerivationError, Problem, StepCheckFailed
from derivations.lemmas.base import rewrite_nodes
from derivations.printing.text import derivation_text
from derivations.vocabulary.evaluate import evaluate
from derivations.vocabulary.nodes import FULL_COLUMN_RANK, FactMatrix, Inner, OpNorm, dimension, positive_symbol

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def test_block_stacking_passes_its_self_check():
    result = L.BLOCK_STACKING.self_check(np.random.default_rng(0))
    assert result.passed, result.failures
    assert {"bound (before ≤ after)", "rewrite fires"} <= set(result.errors)
    assert any(k.startswith("statement (float64") for k in result.errors)  # the statement itself, at both sizes
    assert "statement (mpmath 50 digits)" in result.errors


def _planted(rewrite_to):
    """Lemma K with a wrong right-hand side ``rewrite_to(X, BlockMaxOpNorm)``."""
    def rewrite(expr, **_):
        return rewrite_nodes(expr, lambda e: (rewrite_to(e.matrix, e), []) if isinstance(e, L.BlockMaxOpNorm) else None,
                             "nothing")
    return replace(L.BLOCK_STACKING, key="planted", rewrite=rewrite)


@pytest.mark.parametrize("wrong", [
    lambda x, e: OpNorm(x) / 2,  # too small by a constant
    lambda x, e: L.BlockMaxOpNorm(x, 1, e.axis),  # single rows/columns instead of the blocks
])
def test_planted_false_restriction_fails_the_self_check(wrong):
    result = _planted(wrong).self_check(np.random.default_rng(0))
    assert not result.passed
    assert "bound" in result.failures[0]


def _key_problem():
    d, d_h, n = dimension("d"), dimension("d_h"), dimension("n")
    w = FactMatrix("W_bar", n, d_h, [FULL_COLUMN_RANK])
    g = MatrixSymbol("G_bar", n, d)
    delta = MatrixSymbol("dW", d, d_h)
    change = w * delta.T
    ctx = Context(check_dims=[{d: 4, d_h: 2, n: 8}, {d: 3, d_h: 2, n: 9}], mpmath_dims={d: 3, d_h: 2, n: 6})
    problem = Problem(delta, Inner(g, change), L.BlockMaxOpNorm(change, d, "rows"), positive_symbol("beta"))
    return problem, ctx, w, delta


def test_a_wrong_restriction_step_fails_its_engine_check(monkeypatch):
    """The trusted kernel refuses it first (not a bound clause of K's statement); with the kernel's verdict taken
    away, the numerical check still finds the constraint tightened."""
    problem, ctx, _, _ = _key_problem()
    wrong = _planted(lambda x, e: OpNorm(x) / 2)
    with pytest.raises(StepCheckFailed, match="sub-check 'instance of the statement' failed"):
        Derivation("planted.restriction", "planted", problem, ctx).apply(wrong)
    monkeypatch.setattr(engine_derivation, "step_instance", lambda *a, **k: ("(bypassed)", None))
    with pytest.raises(StepCheckFailed, match="constraint tightened"):
        Derivation("planted.restriction", "planted", problem, ctx).apply(wrong)


def test_a_restriction_must_leave_the_objective_alone():
    problem, ctx, _, _ = _key_problem()
    greedy = replace(L.BLOCK_STACKING, key="greedy", rewrite=lambda expr, **_: (
        (2 * expr, []) if isinstance(expr, Inner) else L.BLOCK_STACKING.rewrite(expr)))
    with pytest.raises(DerivationError, match="leaves the objective alone"):
        Derivation("greedy.restriction", "greedy", problem, ctx).apply(greedy)


def test_block_max_norm_evaluates_blocks_and_refuses_a_bad_tiling():
    x = np.zeros((6, 2))
    x[2:4] = [[3.0, 0.0], [0.0, 1.0]]
    d, n = dimension("d"), dimension("n")
    X = MatrixSymbol("X", n, 2)
    assert evaluate(L.BlockMaxOpNorm(X, d, "rows"), {X: x}, dims={d: 2, n: 6}) == pytest.approx(3.0)
    assert evaluate(L.BlockMaxOpNorm(X.T, d, "columns"), {X: x}, dims={d: 3, n: 6}) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="do not tile"):
        evaluate(L.BlockMaxOpNorm(X, d, "rows"), {X: x}, dims={d: 4, n: 6})


@pytest.mark.parametrize("derivation, axis", [(gqa.key_side, "rows"), (gqa.value_side, "rows"),
                                              (hybrid_ov.o_side, "columns")])
def test_derivations_reduce_the_per_head_problem_by_lemma_k(derivation, axis):
    der = derivation()
    assert isinstance(der.start.constraint, L.BlockMaxOpNorm) and der.start.constraint.axis == axis
    first = der.steps[0]
    assert first.kind == "restrict" and first.lemma is L.BLOCK_STACKING
    assert isinstance(first.params["layout"], L.HeadLayout)
    assert der.restricted_problem() is first.after
    back = der.steps[-1]
    assert back.kind == "back_substitute" and "feasible for the original problem" in back.check.subchecks
    text = derivation_text(der)
    assert "Step 1. Lemma K (A block's operator norm is at most the stacked matrix's) [restriction" in text


def test_the_adapters_are_printed_from_the_reduction_steps():
    from derivations.cli import render
    from derivations.printing.layout import adapter_source, layouts_of
    key = gqa.emitted_functions()[1]
    assert layouts_of(key) == [gqa.KEY_LAYOUT]
    text = render(gqa.rule_module(), "jax")
    assert ("W_Qbar = heads.reshape(*heads.shape[:-3], heads.shape[-3] // group, group * heads.shape[-2], "
            "heads.shape[-1])") in text
    assert "(gqa.key step 1, Lemma K)" in " ".join(text.split())
    ov = render(hybrid_ov.rule_module(), "jax")
    assert "jnp.repeat(split_heads(jnp.asarray(W_V).mT, head_dim), group, axis=-3)" in ov  # blockdiag(W_{V,g(h)}ᵀ)
    # without the step's layout the printer has nothing to build W_Qbar from, and says so
    bare = replace(gqa.adapter(), calls=[("query_fn", gqa.emitted_functions()[0]),
                                         ("key_fn", replace(key, outputs=[("dW_K", gqa.halfsplit.key_side())],
                                                            inputs=[gqa.W_Qbar, gqa.G_K]))])
    with pytest.raises(TypeError, match="W_Qbar is not a stored argument"):
        adapter_source(bare)


def test_printed_gqa_adapter_stacks_each_groups_queries(tmp_path):
    """The stored-layout entry point equals the derived key formula on the hand-stacked group."""
    from derivations.cli import render
    from derivations.vocabulary.evaluate import evaluate_on
    from tests.conftest import load_module
    path = tmp_path / "gqa_fresh.py"
    path.write_text(render(gqa.rule_module(), "jax"))
    mod = load_module(path, "gqa_fresh_reductions")
    rng = np.random.default_rng(3)
    d, d_h, heads, kv = 7, 2, 6, 2
    w_q, g_q = rng.standard_normal((d, heads * d_h)), rng.standard_normal((d, heads * d_h))
    w_k, g_k = rng.standard_normal((d, kv * d_h)), rng.standard_normal((d, kv * d_h))
    _, dk = mod.gqa_qk(w_q, w_k, g_q, g_k, head_dim=d_h, eps=0.2, msign="svd")
    group = heads // kv
    for g in range(kv):
        stacked = np.concatenate([w_q[:, h * d_h:(h + 1) * d_h] for h in range(g * group, (g + 1) * group)], axis=0)
        want = evaluate_on(gqa.key_side().formula, {"W_Qbar": stacked, "G_K": g_k[:, g * d_h:(g + 1) * d_h],
                                                     "epsilon": 0.2, "G": float(group)})
        assert np.allclose(np.asarray(dk)[:, g * d_h:(g + 1) * d_h], want, atol=1e-5)


def test_concatenation_passes_its_self_check_and_a_swapped_partner_fails():
    assert L.CONCATENATION.self_check(np.random.default_rng(0)).passed
    from derivations.lemmas import blocks
    from derivations.vocabulary.nodes import BlockDiag

    def swapped(expr, **params):  # the partner's blocks in the wrong order
        new, conds = L.CONCATENATION.rewrite(expr, **params)
        return new.replace(BlockDiag, lambda *b: BlockDiag(*reversed(b))), conds
    planted = replace(L.CONCATENATION, key="swapped", rewrite=swapped)
    result = planted.self_check(np.random.default_rng(0))
    assert not result.passed and any("statement" in f or "preserves" in f for f in result.failures)
    assert blocks.CONCATENATION.reduces


def test_joint_reduces_two_variables_to_one_stacked_variable():
    from derivations import joint
    der = joint.joint()
    first = der.steps[0]
    assert first.lemma is L.CONCATENATION and first.kind == "rewrite"
    assert der.start.objective.has(L.ColumnBlock) and not der.restricted_problem().objective.has(L.ColumnBlock)
    assert "feasible for the original problem" in der.steps[-1].check.subchecks
    assert first.params["layout"].gradients == ("G_Q", "G_K")  # read off the chain rule, G = G̃ P
    text = derivation_text(der)
    assert "Step 1. Lemma J (Side-by-side products concatenate through a block-diagonal partner)" in text
    assert "<G_M, dW_Q*W_K.T> + <G_M.T, dW_K*W_Q.T>" in text


def test_a_wrong_abbreviation_fails_the_joint_step_check():
    """A concatenation whose partner abbreviation binds P to blockdiag(W_Q, W_K) (blocks swapped)."""
    from derivations import joint
    from derivations.vocabulary.evaluate import evaluate as ev
    from derivations.vocabulary.nodes import BlockDiag

    def swapped_instance(env, rng, backend, dims, *, names=None, **_):
        env = dict(env)
        env[joint.P] = ev(BlockDiag(joint.W_Q, joint.W_K), env, backend, dims)
        env[joint.G_tilde] = ev(joint.HStack(joint.G_M, joint.G_M.T), env, backend, dims)
        return env, {joint.P, joint.G_tilde}
    planted = replace(L.CONCATENATION, key="swapped_abbreviation", instance=swapped_instance)
    der = Derivation("planted.joint", "planted", joint.two_variable_problem(), joint.context())
    with pytest.raises(StepCheckFailed, match="before = after"):
        der.apply(planted, names=joint.NAMES)


def test_block_diagonal_root_checks_and_a_reversed_one_fails():
    from derivations.vocabulary.nodes import BlockDiag
    assert L.BLOCK_DIAGONAL_ROOT.self_check(np.random.default_rng(0)).passed

    def reversed_blocks(expr, **params):
        new, conds = L.BLOCK_DIAGONAL_ROOT.rewrite(expr, **params)
        return new.replace(BlockDiag, lambda *b: BlockDiag(*reversed(b))), conds
    planted = replace(L.BLOCK_DIAGONAL_ROOT, key="reversed", rewrite=reversed_blocks)
    assert not planted.self_check(np.random.default_rng(0)).passed


@pytest.mark.parametrize("module", ["joint", "hybrid_ov"])
def test_block_roots_write_the_update_block_by_block(module):
    import importlib
    mod = importlib.import_module(f"derivations.{module}")
    der = mod.block_roots()
    assert [s.lemma.key for s in der.steps] == ["block_diagonal_root", "block_product"]
    assert der in mod.derivations()
    text = " ".join(derivation_text(der).split())
    want = {"joint": "msign([G_Q*C_K^-1 | G_K*C_Q^-1])*blockdiag(C_K^-1, C_Q^-1)",
            "hybrid_ov": "msign([G_O1*C_V1t^-1 | G_O2*C_V2t^-1])*blockdiag(C_V1t^-1, C_V2t^-1)"}[module]
    assert want in text
