"""The balancing gauge: derived in derivations.balance, computed by numerics.optimizer.gauge_balance."""


import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from sympy import Rational

from derivations import StepCheckFailed
from derivations import balance as B
from derivations import lemmas as L
from derivations.cli import main
from derivations.lemmas import spd_powers as LB
from derivations.vocabulary.evaluate import evaluate
from foundation.compute.reference import MpmathBackend
from numerics.optimizer.gauge_balance import balance
from tests.inprocess import call_mains

DERIVED = (B.congruence, B.whitening, B.riccati, B.factor, B.inverse_transpose, B.equal_grams, B.product_kept,
           B.stable_query, B.stable_key)
BALANCE_LEMMAS = ("B1", "B2", "B3", "B4", "B5", "B6", "B7")


def clear():
    for f in DERIVED:
        f.cache_clear()


def test_every_step_checks_and_the_result_is_the_quarter_power():
    for der in B.derivations():
        assert all(r.passed for r in der.check(trials=2))
    assert str(B.gauge()) == "C_K^-1*(C_K*W_Q.T*W_Q*C_K)^(1/4)"
    assert str(B.inverse_transpose().formula) == "C_K*(C_K*W_Q.T*W_Q*C_K)^(-1/4)"
    assert str(B.equal_grams().formula) == "0" and str(B.product_kept().formula) == "W_Q*W_K.T"


@pytest.fixture
def planted(monkeypatch):
    """``planted(name, value)``: set a name of the SPD-power lemma module for one test, with the derivations'
    caches cleared before and after (after the name is restored, so no planted result stays cached)."""
    clear()
    with monkeypatch.context() as m:
        yield lambda name, value: m.setattr(LB, name, value)
    clear()


def test_planted_wrong_exponent_fails_the_step_check(planted):
    """Planted mistake: the power split into X^{1/2} X^{1/2} (the gauge with exponent 1/2, not 1/4)."""
    planted("HALF", Rational(1))
    with pytest.raises(StepCheckFailed, match=r"balance\.factor step 1 .*lemma B3"):
        B.factor()


def test_planted_wrong_exponent_fails_balance_check_naming_step_and_lemma(planted, capsys):
    """The same planted exponent through ``balance --check``: exit 1, a first line naming the step and the lemma."""
    planted("HALF", Rational(1))
    assert main(B.rule_module(), ["--check", "--trials", "1"]) == 1
    first = capsys.readouterr().err.splitlines()[0]  # then the counterexample
    assert first.startswith("derivations.balance: check failed: balance.factor step 1 (rewrite), lemma B3 ")


def test_balance_lemmas_are_registered():
    """B1–B7 live in the lemma layer and are members of ALL_LEMMAS, so every mechanism that runs the lemma
    self-checks (the suite's ``test_every_lemma_passes_its_self_check``, ``--check``, the docs) runs theirs;
    every lemma the balance derivations cite is registered."""
    registered = {lem.number: lem for lem in L.ALL_LEMMAS if lem.number in BALANCE_LEMMAS}
    assert tuple(registered) == BALANCE_LEMMAS == tuple(lem.number for lem in L.collect([LB]))
    assert [lem.number for lem in L.ALL_LEMMAS].count("B3") == 1
    cited = {lem.key for der in B.derivations() for lem in der.lemmas_used()}
    assert cited <= {lem.key for lem in L.ALL_LEMMAS}
    assert B.POWER_SPLIT is registered["B3"] and B.SPDPower is LB.SPDPower


def test_planted_wrong_literal_in_b3_self_check_fails_naming_the_lemma(planted, capsys):
    """Planted mistake: a wrong literal in B3's self-check, X^{1/2} = X^{1/3} X^{1/3}. The registered
    lemma's self-check fails naming B3, and so does ``balance --check``."""
    b3 = next(lem for lem in L.ALL_LEMMAS if lem.number == "B3")
    assert b3.self_check(np.random.default_rng(0)).passed
    planted("QUARTER", Rational(1, 3))
    result = b3.self_check(np.random.default_rng(0))
    assert not result.passed and result.errors["statement"] > 1e-2
    assert result.failures[0].startswith("lemma B3 (Symmetric split of an SPD power) self-check, sub-check "
                                         "'statement': error")
    assert main(B.rule_module(), ["--check", "--trials", "1"]) == 1
    captured = capsys.readouterr()
    assert "check failed: lemma B3 (Symmetric split of an SPD power) self-check" in captured.err
    assert "Lemma B3: Symmetric split of an SPD power" in captured.out and "FAIL" in captured.out


QUARTER = Rational(1, 4)


def derived_at_50_digits(w_q, w_k, exponent=QUARTER):
    """The derived balanced pair evaluated in mpmath at 50 digits (``exponent``: the gauge's power)."""
    quarter = QUARTER
    q, k = (x.xreplace({quarter: exponent, -quarter: -exponent}) for x in B.balanced_factors())
    with mpmath.workdps(50):
        backend = MpmathBackend(50)
        env = {B.W_Q: backend.asarray(w_q), B.W_K: backend.asarray(w_k)}
        dims = {B.d: w_q.shape[0], B.d_h: w_q.shape[1]}
        return [np.array(evaluate(x, env, backend, dims).tolist(), dtype=float) for x in (q, k)]


def test_gauge_balance_is_the_derived_expression_at_50_digits():
    """``numerics.optimizer.gauge_balance.balance`` (float64) against the derived pair at 50 digits.

    Planted mistake: the derived gauge with exponent 1/2 instead of 1/4 differs from the routine.
    """
    rng = np.random.default_rng(0)
    w_q, w_k = 3 * rng.standard_normal((7, 3)), rng.standard_normal((7, 3)) / 2
    got_q, got_k = (np.asarray(x) for x in balance(jnp.asarray(w_q), jnp.asarray(w_k)))
    ref_q, ref_k = derived_at_50_digits(w_q, w_k)
    np.testing.assert_allclose(got_q, ref_q, rtol=1e-11, atol=1e-12 * np.abs(ref_q).max())
    np.testing.assert_allclose(got_k, ref_k, rtol=1e-11, atol=1e-12 * np.abs(ref_k).max())
    wrong_q, wrong_k = derived_at_50_digits(w_q, w_k, Rational(1, 2))
    assert not np.allclose(got_q, wrong_q, rtol=1e-3) and not np.allclose(got_k, wrong_k, rtol=1e-3)


def test_gauge_balance_balances_batched_stacked_groups():
    """A stacked GQA group (G·d rows against d rows), batched: equal Grams and the same products."""
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 3, 12, 4)) * 3, rng.standard_normal((2, 3, 6, 4))
    bq, bk = (np.asarray(x) for x in balance(jnp.asarray(q), jnp.asarray(k)))
    np.testing.assert_allclose(bq.mT @ bq, bk.mT @ bk, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(bq @ bk.mT, q @ k.mT, rtol=1e-9, atol=1e-10)


def test_cli_checks_and_prints_the_derivation(tmp_path, monkeypatch):
    """``python -m derivations.balance``'s ``main`` (in this process; the exit status of a real ``python -m`` is
    tested once for every rule in tests/rules/test_cli.py): the derivation as text, and a bad option in one line."""
    text, bad = call_mains([("balance", ["--emit", "text"]), ("balance", ["--emit", "jax", "--trials", "0"])],
                           tmp_path, monkeypatch)
    assert text["rc"] == 0 and "balance.factor" in text["stdout"] and "Lemma B3" in text["stdout"]
    assert bad["rc"] == 2 and bad["stderr"].count("\n") == 1 and not bad["escaped"]


def test_cli_check_exits_0(tmp_path, monkeypatch):
    """``python -m derivations.balance --check``: every step, lemma and measurement passes."""
    (out,) = call_mains([("balance", ["--check", "--trials", "1"])], tmp_path, monkeypatch)
    assert out["rc"] == 0, out["stderr"]
    assert out["stderr"] == "" and "FAIL" not in out["stdout"]
    assert "15/15 steps passed, 9/9 lemma self-checks passed" in out["stdout"]
