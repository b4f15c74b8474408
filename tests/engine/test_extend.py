"""Extending the engine with the public API only: new rules found by ``derive``, checked and emitted.

The five extensions a researcher tries first (plain Muon, a one-sided rule, a Frobenius ball, a
nuclear ball, a middle factor ``A·W·Bᵀ``), the half-split sides rediscovered unaided (equal to the
scripted derivations), an unsolvable problem reported branch by branch, and the README example run
as written.
"""

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sympy.matrices.expressions import MatrixSymbol

from derivations import Context, Derivation, EmittedFunction, Problem, RuleModule, SearchFailed, derive
from derivations import halfsplit as H
from derivations import lemmas as L
from derivations.cli import render
from derivations.engine import norms as N
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    Inner,
    Msign,
    OpNorm,
    dimension,
    positive_symbol,
)

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

m, n, k, l = (dimension(s) for s in "mnkl")  # noqa: E741 (the dimensions as printed: m, n, k, l)
eps = positive_symbol("epsilon")
X, G = MatrixSymbol("dW", m, n), MatrixSymbol("G", m, n)
PLAIN = Context(check_dims=[{m: 5, n: 3}, {m: 3, n: 3}], mpmath_dims={m: 4, n: 2})


def _light(ctx):
    """The same numeric checks without the (slow) symbolic ones, to keep the suite fast."""
    return replace(ctx, symbolic_dims={})


def test_plain_muon():
    der = derive(Problem(X, Inner(G, X), OpNorm(X), eps), PLAIN, name="muon")
    assert der.formula == product(-eps, Msign(G))
    assert [s.kind for s in der.steps] == ["solve"]


def _qk_problem(own, budget):
    delta = MatrixSymbol(f"dW_{own}", H.d, H.d_h)
    change = product(delta, transpose(H.W_K)) if own == "Q" else product(H.W_Q, transpose(delta))
    return Problem(delta, Inner(H.G_M, change), OpNorm(change), budget)


@pytest.mark.parametrize("side", ["query", "key"])
def test_halfsplit_sides_rediscovered_equal_the_scripted_ones(side):
    own = "Q" if side == "query" else "K"
    der = derive(_qk_problem(own, H.BUDGET), _light(H.context(H.GRADIENTS_QK)), name=f"found.{side}")
    scripted = getattr(H, f"{side}_side")()
    assert der.formula == scripted.formula
    assert der.search_stats["expanded"] < 60


def test_value_side_rediscovered():
    dv = MatrixSymbol("dW_V", H.d_h, H.d)
    change = product(H.W_O, dv)
    der = derive(Problem(dv, Inner(H.G_M, change), OpNorm(change), H.BUDGET), _light(H.context(H.GRADIENTS_OV)),
                 name="found.value")
    assert der.formula == H.value_side().formula


def test_one_sided_rule_gets_the_whole_budget():
    der = derive(_qk_problem("Q", eps), _light(H.context(H.GRADIENTS_QK)), name="one_sided")
    c_inv = GramInvSqrt(H.W_K)
    assert der.formula == product(-eps, Msign(product(H.G_Q, c_inv)), c_inv)
    rng = np.random.default_rng(0)
    wk, gm = rng.standard_normal((9, 3)), rng.standard_normal((9, 9))
    dq = evaluate_on(der.formula, {"W_K": wk, "G_Q": gm @ wk, "epsilon": 0.3})
    assert np.linalg.norm(dq @ wk.T, 2) == pytest.approx(0.3)  # the whole budget on one side


def test_middle_factor():
    """``min ⟨G, A ΔW Bᵀ⟩ s.t. ‖A ΔW Bᵀ‖_op ≤ ε``: whitened on both sides, ``Z = C_A ΔW C_B``."""
    a, b = FactMatrix("A", k, m, [FULL_COLUMN_RANK]), FactMatrix("B", l, n, [FULL_COLUMN_RANK])
    g = MatrixSymbol("G_M", k, l)
    change = product(a, X, transpose(b))
    ctx = Context(check_dims=[{k: 6, l: 5, m: 3, n: 2}, {k: 4, l: 4, m: 4, n: 4}], mpmath_dims={k: 4, l: 3, m: 2, n: 2})
    der = derive(Problem(X, Inner(g, change), OpNorm(change), eps), ctx, name="middle")
    ca, cb = GramInvSqrt(a), GramInvSqrt(b)
    assert der.formula == product(-eps, ca, Msign(product(ca, transpose(a), g, b, cb)), cb)


@pytest.mark.parametrize("family", N.FAMILIES, ids=lambda f: f.key)
def test_plain_steepest_descent_in_every_norm_family(family):
    der = derive(Problem(X, Inner(G, X), family.norm(X), eps), PLAIN, name=f"plain.{family.key}")
    assert der.formula == family.solve(G, eps)[0]
    assert der.steps[-1].check.passed  # certified by the family's dual norm


def _scripted_frobenius_query():
    """The Frobenius half-split query side written step by step (as a researcher would)."""
    dq, z = MatrixSymbol("dW_Q", H.d, H.d_h), MatrixSymbol("Z_Q", H.d, H.d_h)
    change = product(dq, transpose(H.W_K))
    der = Derivation("scripted.frobenius", "Frobenius query", Problem(dq, Inner(H.G_M, change),
                     N.FrobeniusNorm(change), H.BUDGET), _light(H.context(H.GRADIENTS_QK)))
    der.apply(L.POLAR_SUBSTITUTION, matrix=H.W_K)
    der.change_variables(z, GramSqrt(H.W_K))
    der.apply(N.UNITARY_INVARIANCE)
    der.apply(L.ADJOINT_MOVE, variable=z)
    der.apply(L.POLAR_INVERSE, matrix=H.W_K, reverse=True)
    der.apply(L.CHAIN_RULE, gradients=H.GRADIENTS_QK)
    der.solve()
    der.back_substitute()
    return der


@pytest.mark.parametrize("family", [N.FROBENIUS, N.NUCLEAR], ids=lambda f: f.key)
def test_frobenius_and_nuclear_half_split_found_checked_and_emitted(family):
    dq = MatrixSymbol("dW_Q", H.d, H.d_h)
    change = product(dq, transpose(H.W_K))
    der = derive(Problem(dq, Inner(H.G_M, change), family.norm(change), H.BUDGET),
                 _light(H.context(H.GRADIENTS_QK)), name=f"{family.key}.query")
    c_inv = GramInvSqrt(H.W_K)
    assert der.formula == product(-H.BUDGET, family.sharp_of(product(H.G_Q, c_inv)), c_inv)
    if family is N.FROBENIUS:
        assert der.formula == _scripted_frobenius_query().formula
    fn = EmittedFunction(f"{family.key}_q", "query update", [H.W_K, H.G_Q], [("dW_Q", der)])
    source = render(RuleModule(name=family.key, title=family.title, derivations=lambda: [der],
                               functions=lambda: [fn], scalars={H.eps: "eps"}), "jax")
    module = {}
    exec(source, module)  # noqa: S102 (the emitted JAX module)
    rng = np.random.default_rng(2)
    wk, gm = rng.standard_normal((2, 9, 3)), rng.standard_normal((2, 9, 9))
    gq = gm @ wk
    got = np.asarray(module[f"{family.key}_q"](wk, gq, eps=0.4))
    for i in range(2):  # batched over the leading axis; the constraint is tight in the family's norm
        ref = evaluate_on(der.formula, {"W_K": wk[i], "G_Q": gq[i], "epsilon": 0.4})
        assert np.allclose(got[i], ref, atol=1e-10)
        norm = {"frobenius": "fro", "nuclear": "nuc"}[family.key]
        assert np.linalg.norm(got[i] @ wk[i].T, norm) == pytest.approx(0.2)


def test_unsolvable_problem_says_where_each_branch_stopped():
    w = MatrixSymbol("W", m, n)  # no facts: the partner cannot be whitened
    change = product(X, transpose(w))
    with pytest.raises(SearchFailed) as info:
        derive(Problem(X, Inner(MatrixSymbol("G_M", m, m), change), OpNorm(change), eps),
               Context(check_dims=[{m: 5, n: 3}]), name="stuck")
    msg = str(info.value)
    assert "no derivation of stuck" in msg and "dead end" in msg and "after [" in msg
    assert "W is not known to have full rank" in msg and "Traceback" not in msg and info.value.report


def test_readme_example_runs_as_written():
    text = (Path(__file__).parents[2] / "README.md").read_text()
    section = text.split("## Extending the engine", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    assert len(code.strip().splitlines()) <= 25
    # the public API of the mathematics and the printers' render: nothing from the package's internal modules
    assert re.findall(r"^from derivations(\.\w+)+ import", code, re.MULTILINE) == [".cli"]
    ns = {}
    exec(code, ns)  # noqa: S102 (the README's example, run as a user would)
    module = {}
    exec(ns["source"], module)  # noqa: S102 (the emitted JAX module)
    rng = np.random.default_rng(1)
    wk, gq = rng.standard_normal((8, 3)), rng.standard_normal((8, 3))
    got = np.asarray(module["one_sided_q"](wk, gq, eps=0.1, msign="svd"))
    ref = evaluate_on(ns["rule"].formula, {"W_K": wk, "G_Q": gq, "epsilon": 0.1})
    assert np.allclose(got, ref, atol=1e-10)
    assert N.FAMILIES  # the norm families are part of the same public surface
