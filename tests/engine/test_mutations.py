"""Planted mistakes, run in-process: each must be caught by the checks with a message naming where.

The mutants: a dropped transpose (factor-gradient definition), ε/2 → ε in the solve, an inverse
instead of an inverse root, a suboptimal (scaled-gradient) solve, a false lemma (rewrite and
statement), a tampered certificate. Every one must be caught; ``test_catch_rate`` reports the rate.
"""

import dataclasses
import json

import numpy as np
import pytest
from sympy.matrices.expressions import MatrixSymbol

import coeffsearch
from coeffsearch.certify import CertificateError, certify, recheck
from derivations import gqa, halfsplit, sylvester
from derivations import lemmas as L
from derivations.cli import main
from derivations.engine import derivation as engine_derivation
from derivations.engine.derivation import Derivation, DerivationError, Problem, StepCheckFailed
from derivations.vocabulary.algebra import map_bottom_up, product, transpose
from derivations.vocabulary.nodes import GramInvSqrt, GramSqrt, Inner, Msign, OpNorm

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

CAUGHT = {}
CACHED = [halfsplit.query_side, halfsplit.key_side, halfsplit.value_side, halfsplit.product_step,
          halfsplit.isotropic_query, halfsplit.isotropic_key, gqa.key_side, sylvester.adjoint,
          sylvester.achieved_change]


@pytest.fixture(autouse=True)
def fresh_derivations():
    """Derivations are cached per process: rebuild them under the mutant, and again afterwards."""
    for f in CACHED:
        f.cache_clear()
    yield
    for f in CACHED:
        f.cache_clear()


def _caught(name, exc_info, *needles):
    msg = str(exc_info.value) if hasattr(exc_info, "value") else str(exc_info)
    missing = [n for n in needles if n not in msg]
    assert not missing, f"{name}: message lacks {missing}:\n{msg[:600]}"
    CAUGHT[name] = msg.splitlines()[0]


def test_dropped_transpose_in_a_gradient_definition():
    """``G_K = G_M W_Q`` instead of ``G_Mᵀ W_Q``: automatic differentiation disagrees."""
    grads = {halfsplit.G_Q: product(halfsplit.G_M, halfsplit.W_K), halfsplit.G_K: product(halfsplit.G_M, halfsplit.W_Q)}
    with pytest.raises((StepCheckFailed, DerivationError)) as info:
        halfsplit._right_whitened("halfsplit.key", "mutant", "K", halfsplit.W_Q, grads, "Z_K")
    _caught("drop a transpose", info, "halfsplit.key step", "lemma CR")


def test_dropped_transpose_in_the_chain_rule_rewrite(monkeypatch):
    """The rewrite substitutes ``G_K → G_M W_Q`` (transpose of the square ``G_M`` dropped); the step's
    instances come from automatic differentiation of ``L(W_Q W_Kᵀ)``, so the rewrite is refuted."""
    from derivations import gauge, gauge_directions
    rewrite = L.CHAIN_RULE.rewrite

    def dropped(expr, *, gradients, **kw):
        wrong = {k: v.xreplace({transpose(gauge_directions.G_M): gauge_directions.G_M}) for k, v in gradients.items()}
        return rewrite(expr, gradients=wrong, **kw)

    monkeypatch.setattr(L, "CHAIN_RULE", dataclasses.replace(L.CHAIN_RULE, rewrite=dropped))
    gauge.gradients_horizontal.cache_clear()
    try:
        # the trusted kernel refuses it first: the rewrite is not the declared definitions' instance
        with pytest.raises(StepCheckFailed) as info:
            gauge.gradients_horizontal()
        _caught("drop a transpose (chain rule)", info, "gauge.gradients step 1 (rewrite), lemma CR",
                "sub-check 'instance of the statement'")
        # and the numerical check refutes it on its own, with the trusted kernel's verdict taken away
        monkeypatch.setattr(engine_derivation, "step_instance", lambda *a, **k: ("(bypassed)", None))
        gauge.gradients_horizontal.cache_clear()
        with pytest.raises(StepCheckFailed) as info:
            gauge.gradients_horizontal()
        _caught("drop a transpose (chain rule)", info, "gauge.gradients step 1 (rewrite), lemma CR",
                "sub-check 'before = after'")
    finally:
        gauge.gradients_horizontal.cache_clear()


def test_full_budget_instead_of_half(monkeypatch):
    """The solve returns ``−2β msign(A)`` (ε where the problem says ε/2): infeasible."""
    mutant = dataclasses.replace(L.LINEAR_STEEPEST_DESCENT,
                                 solution=lambda a, beta: (product(-2 * beta, Msign(a)), -beta * L.NuclearNorm(a)))
    monkeypatch.setattr(L, "LINEAR_STEEPEST_DESCENT", mutant)
    with pytest.raises(StepCheckFailed) as info:
        halfsplit.query_side()
    _caught("eps/2 -> eps", info, "halfsplit.query step 7 (solve), lemma 1", "sub-check 'feasible'")


def test_inverse_instead_of_inverse_root(monkeypatch):
    """``U = W C⁻²`` (the Gram inverse) instead of ``W C⁻¹``."""
    rewrite = L.POLAR_INVERSE.rewrite

    def squared(expr, **kw):
        new, conds = rewrite(expr, **kw)
        return map_bottom_up(new, lambda e: product(e, e) if isinstance(e, GramInvSqrt) else e), conds

    monkeypatch.setattr(L, "POLAR_INVERSE", dataclasses.replace(L.POLAR_INVERSE, rewrite=squared))
    with pytest.raises(StepCheckFailed) as info:  # the trusted kernel: not an instance of 6b's statement
        halfsplit.query_side()
    assert "sub-check 'instance of the statement'" in str(info.value), str(info.value)
    monkeypatch.setattr(engine_derivation, "step_instance", lambda *a, **k: ("(bypassed)", None))
    with pytest.raises(StepCheckFailed) as info:  # the numerical check on its own
        halfsplit.query_side()
    _caught("inverse instead of inverse root", info, "halfsplit.query step 5 (rewrite), lemma 6b",
            "sub-check 'before = after'", "counterexample")
    assert not L.POLAR_INVERSE.self_check(np.random.default_rng(0)).passed


def test_suboptimal_scaled_gradient_solve(monkeypatch, capsys):
    """``−β A/‖A‖_op`` is feasible and tight but not optimal: the dual bound is not attained."""
    def scaled_gradient(a, beta):
        return product(-beta / OpNorm(a), a), -beta * Inner(a, a) / OpNorm(a)

    mutant = dataclasses.replace(L.LINEAR_STEEPEST_DESCENT, solution=scaled_gradient)
    monkeypatch.setattr(L, "LINEAR_STEEPEST_DESCENT", mutant)
    assert main(gqa.rule_module(), ["--check", "--trials", "1"]) == 1
    err = capsys.readouterr().err
    _caught("suboptimal solve", err, "halfsplit.query step 7 (solve), lemma 1 (Linear steepest descent (Muon))",
            "sub-check 'attains the dual bound'")
    assert main(gqa.rule_module(), ["--emit", "jax"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and "not emitted" in out.err
    result = mutant.self_check(np.random.default_rng(0))
    assert not result.passed and "attains the dual bound" in result.failures[0]


def test_false_lemma_rewrite(monkeypatch):
    """``‖Aᵀ‖_op → 2‖A‖_op``: the self-check (which runs the rewrite) and the step check both fail."""
    def doubled(expr, **_):
        new, hits = expr, []
        new = map_bottom_up(expr, lambda e: 2 * OpNorm(e.args[0].arg)
                            if isinstance(e, OpNorm) and hasattr(e.args[0], "arg") and e.args[0].is_Transpose else e)
        if new == expr:
            raise L.NotApplicable("no operator norm of a transpose")
        return new, hits

    mutant = dataclasses.replace(L.TRANSPOSITION, rewrite=doubled)
    result = mutant.self_check(np.random.default_rng(0))
    assert not result.passed and "rewrite preserves value" in result.failures[0]
    monkeypatch.setattr(L, "TRANSPOSITION", mutant)
    with pytest.raises(StepCheckFailed) as info:
        halfsplit.key_side()
    _caught("false lemma (rewrite)", info, "halfsplit.key step 4 (rewrite), lemma T (Transposition invariance)")


def test_false_lemma_statement_fails_check_and_exit_status(monkeypatch, capsys):
    """A statement made false (``⟨G, XB⟩ = ⟨2 G Bᵀ, X⟩``) with a correct rewrite: ``--check`` exits 1."""
    original = L.ADJOINT_MOVE

    def false_ids():
        cases, sampler = original.cases()
        first = cases[0]
        return [dataclasses.replace(first, rhs=2 * first.rhs), *cases[1:]], sampler

    monkeypatch.setattr(L, "ADJOINT_MOVE", dataclasses.replace(L.ADJOINT_MOVE, identities=false_ids))
    assert main(sylvester.rule_module(), ["--check", "--trials", "1"]) == 1
    captured = capsys.readouterr()
    assert "FAIL" in captured.out
    _caught("false lemma (statement)", captured.err, "lemma 3 (Adjoint moves) self-check, sub-check 'statement'")


def test_tampered_certificate():
    cert = json.loads(certify(coeffsearch.get("muon").steps[:2], "1e-3", "1.05", "muon").to_json())
    cert["overshoot"]["u_max"] = "1.9"
    with pytest.raises(CertificateError) as info:
        recheck(cert)
    _caught("tampered certificate", info, "overshoot/u_max")


def test_api_misuse_names_where():
    """Skipping a substitution, the wrong side, wrong shapes: DerivationError with the context."""
    problem = _problem()
    der = Derivation("t.misuse", "t", problem, halfsplit.context(halfsplit.GRADIENTS_QK))
    with pytest.raises(DerivationError, match=r"t.misuse step 1 \(back_substitute\).*solve\(\) has not run"):
        der.back_substitute()
    der.apply(L.POLAR_SUBSTITUTION, matrix=halfsplit.W_K)
    z = MatrixSymbol("Z", halfsplit.d, halfsplit.d_h)
    with pytest.raises(DerivationError, match=r"t.misuse step 2 \(change_of_variables\).*side must be one of"):
        der.change_variables(z, GramSqrt(halfsplit.W_K), side="middle")
    with pytest.raises(DerivationError, match=r"cannot multiply .* on the left"):
        der.change_variables(z, GramSqrt(halfsplit.W_K), side="left")
    with pytest.raises(DerivationError, match=r"must have the shape of dW_Q"):
        der.change_variables(MatrixSymbol("Z", halfsplit.d, halfsplit.d), GramSqrt(halfsplit.W_K))
    with pytest.raises(DerivationError, match=r"step 2 \(rewrite\), lemma 3 .*wrong parameters"):
        der.apply(L.ADJOINT_MOVE)
    with pytest.raises(DerivationError, match=r"lemma 1 .*a change of variables or an isometry step is missing"):
        der.solve()


def _problem():
    dq = MatrixSymbol("dW_Q", halfsplit.d, halfsplit.d_h)
    change = product(dq, transpose(halfsplit.W_K))
    return Problem(dq, Inner(halfsplit.G_M, change), OpNorm(change), halfsplit.BUDGET)


def test_catch_rate():
    """Runs last (file order): every planted mistake above was caught where it was planted."""
    planted = ["drop a transpose", "drop a transpose (chain rule)", "eps/2 -> eps", "inverse instead of inverse root",
               "suboptimal solve", "false lemma (rewrite)", "false lemma (statement)", "tampered certificate"]
    rate = sum(p in CAUGHT for p in planted) / len(planted)
    print(f"\nmutation catch rate: {rate:.0%} ({len(CAUGHT)}/{len(planted)})")
    for p in planted:
        print(f"  {p}: {CAUGHT.get(p, 'NOT CAUGHT')[:150]}")
    assert rate == 1.0
