"""Measurements in --check are gated: each has a limit (or is marked as context), and one outside its limit
fails the check (once the Sylvester least-squares agreement with μ = λ planted printed 6.6e-2 and passed)."""

import numpy as np
import pytest

from derivations import sylvester
from derivations.cli import check_table, failures, measurement_rows
from derivations.engine.rule import RuleModule

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def test_limits_upper_band_and_context():
    rows = measurement_rows([("a", 1e-12, 1e-10), ("b", 2.0, 1e-10), ("c", 1.0, (1 - 1e-10, 1 + 1e-10)),
                             ("d", 0.5, (0.9, 1.1)), ("e", 7.0, None), ("f", float("nan"), 1.0)])
    assert [r["status"] for r in rows] == ["ok", "FAIL", "ok", "FAIL", "reported", "FAIL"]


def test_context_numbers_do_not_fail_the_check():
    rule = RuleModule(name="context", title="context", derivations=list, functions=list, scalars={},
                      measurements=lambda rng: [("within", 1e-12, 1e-10), ("shown for context", 0.9, None)])
    table = check_table(rule, trials=1, seed=0)
    assert table["ok"] and failures(table) == []


def test_a_measurement_outside_its_limit_fails_the_check():
    rule = RuleModule(name="planted", title="planted", derivations=list, functions=list, scalars={},
                      measurements=lambda rng: [("agreement with an independent solve", 6.6e-2, 1e-10)])
    table = check_table(rule, trials=1, seed=0)
    assert not table["ok"]
    assert failures(table) == ["measurement 'agreement with an independent solve' is 6.600e-02, outside its "
                               "limit <= 1.0e-10"]


def test_sylvester_least_squares_agreement_is_gated(monkeypatch):
    rows = measurement_rows(sylvester.measurements(np.random.default_rng(0)))
    assert [r["status"] for r in rows] == ["ok"]
    exact = sylvester.least_squares_step
    # the planted mistake: regularization μ = λ where the problem has 2λ (seen from the independent side)
    monkeypatch.setattr(sylvester, "least_squares_step", lambda w_q, w_k, d, mu: exact(w_q, w_k, d, mu / 2))
    rows = measurement_rows(sylvester.measurements(np.random.default_rng(0)))
    assert [r["status"] for r in rows] == ["FAIL"] and rows[0]["value"] > 1e-3


@pytest.mark.parametrize("bad", [("two", 1.0), ("four", 1.0, 1.0, 1.0)])
def test_a_measurement_without_a_limit_is_refused(bad):
    with pytest.raises(ValueError):
        measurement_rows([bad])
