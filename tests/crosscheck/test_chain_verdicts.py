"""Chain verdicts that mean proven: a change of variables must reach every point, or the
step is refused naming the rank obstruction (the Compositional Muon paper, §2.1: ``Z = ΔW_Q W_Kᵀ`` has rank
``≤ d_h < d``); a step whose optimality or reach was not established makes the chain *not proven* (exit 3),
never "all steps hold"; and the exact check runs on a numeric agreement too, so ``(B + 10⁻⁶⁰ A) − B`` against
``0`` is different. Each defect is planted back (the check monkeypatched away) and shown to pass unnoticed
without its check; the shipped examples still hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from derivations.crosscheck import chain, checker, identities
from derivations.crosscheck.chain import EXIT_NOT_PROVEN, check_blocks, check_chain_file
from derivations.crosscheck.cli import main as crosscheck_main
from derivations.crosscheck.reachability import Reach

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
RANK = EXAMPLES / "rank_obstruction.md"
UNCHECKED = EXAMPLES / "optimality_unchecked.md"


def _surjective(*args, **kwargs):
    return Reach("surjective", "planted: reaches every point", [])


# ---- a change of variables must reach every feasible point ------------------------------------------
@pytest.fixture(scope="module")
def rank_report():
    return check_chain_file(str(RANK))


def test_rank_obstructed_substitution_is_refused_naming_the_rank(rank_report):
    assert not rank_report.ok and rank_report.status == "fails" and rank_report.exit_status == 1
    step = rank_report.failed
    assert (step.index, step.kind, step.verdict.verdict) == (1, "problem", "refused")
    words = step.verdict.diagnosis[0]
    assert "rank obstruction" in words and "does not reach every Z" in words
    assert "every achievable Z has rank at most" in words  # rank(ΔW_Q W_Kᵀ) ≤ d_h < d
    text = rank_report.text()
    assert "all" not in text.splitlines()[-1] and "REFUSED" in text and "rank obstruction" in text


def test_rank_obstructed_chain_exits_1_and_says_so_in_json(capsys):
    assert crosscheck_main(["--chain", str(RANK), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "fails" and not out["ok"]
    assert out["first_failure"]["verdict"] == "refused" and "rank obstruction" in out["first_failure"]["diagnosis"][0]


def test_without_the_reach_check_the_achievable_set_check_still_refuses_the_solution(monkeypatch):
    """Plant: the change of variables taken as surjective. The solution ``Z* = −(ε/2) msign(G_M)`` is then
    refused, because no ``ΔW_Q`` gives it."""
    monkeypatch.setattr(chain, "reachability", _surjective)
    report = check_chain_file(str(RANK))
    assert report.failed.index == 2 and report.failed.kind == "solution"
    assert report.failed.verdict.verdict == "refused"
    assert "not in the achievable set" in report.failed.verdict.diagnosis[0]


def test_without_both_checks_the_paper_s_wrong_chain_holds(monkeypatch):
    """Plant: both checks removed, the rank-deficient chain holds again ("all steps hold", exit 0): the two
    tests above are what catches it."""
    monkeypatch.setattr(chain, "reachability", _surjective)
    monkeypatch.setattr(chain, "in_range", _surjective)
    report = check_chain_file(str(RANK))
    assert report.ok and report.exit_status == 0


def test_an_invertible_change_of_variables_reaches_every_point():
    report = check_chain_file(str(EXAMPLES / "halfsplit_query.md"))
    assert report.ok and report.exit_status == 0 and report.held == 3
    assert "reaches every Z" in report.steps[0].note  # Z = ΔW_Q C_K, C_K invertible


def test_square_partner_reaches_every_point():
    """``Z = ΔW_Q W_Kᵀ`` with ``W_K`` square and invertible is a bijection: no obstruction, the chain holds."""
    text = RANK.read_text(encoding="utf-8").replace("<!-- assume: G_M: square -->",
                                                    "<!-- assume: G_M: square -->\n<!-- assume: W_K: square -->")
    report = check_blocks([b for b in map(chain._clean, chain.display_math(text)) if b],
                          identities.parse_assumptions(["W_K: full column rank", "G_M: square", "W_K: square"]))
    assert report.ok, report.text()
    assert "reaches every Z" in report.steps[0].note


def test_a_non_linear_change_of_variables_is_not_proven():
    """``Z = XᵀX`` reaches only positive semidefinite ``Z``: the reach is not decided, the chain is not proven."""
    blocks = [r"\min_{X} \langle G, X^T X \rangle \text{ s.t. } \|X^T X\|_{op} \le 1",
              r"\min_{Z} \langle G, Z \rangle \text{ s.t. } \|Z\|_{op} \le 1 \text{ where } Z = X^T X"]
    report = check_blocks(blocks, identities.parse_assumptions([]))
    assert report.failed is None and report.status == "not proven" and report.exit_status == EXIT_NOT_PROVEN
    assert "not affine" in report.steps[0].unproven


# ---- a step not established makes the chain "not proven" ---------------------------------------------
def test_optimality_not_checked_is_not_proven_with_its_own_exit_status(capsys):
    assert crosscheck_main(["--chain", str(UNCHECKED)]) == EXIT_NOT_PROVEN == 3
    out = capsys.readouterr().out
    assert "all 1 steps hold" not in out and "all steps hold" not in out
    assert "NOT PROVEN" in out and "optimality not checked" in out


def test_not_proven_in_json():
    report = check_chain_file(str(UNCHECKED))
    data = report.as_json()
    assert not data["ok"] and data["verdict"] == "not proven" and data["first_failure"] is None
    assert data["not_proven"][0]["step"] == 1 and "optimality not checked" in data["not_proven"][0]["reason"]
    assert data["results"][0]["status"] == "not proven" and report.held == 0


def test_a_failure_after_a_step_not_proven_exits_1():
    blocks = [r"\min_{X} \langle G, X B \rangle \text{ s.t. } \|X B\|_{op} \le 1",
              r"X^\star = -\operatorname{msign}(G B^T) B^{-1}",
              "(A C)^T", "= A^T C^T"]
    report = check_blocks(blocks, identities.parse_assumptions(["B: square", "A: square", "C: square"]))
    assert report.status == "fails" and report.exit_status == 1 and report.failed.index == 2
    assert "not proven: step 1" in report.text()


def test_help_documents_the_not_proven_exit_status(capsys):
    with pytest.raises(SystemExit):
        crosscheck_main(["--help"])
    assert f"{EXIT_NOT_PROVEN} --chain: not proven" in capsys.readouterr().out


# ---- the exact check runs when the numbers agree -----------------------------------------------------
HIDDEN = ("(B + 10^{-60} A) - B", "0")


def test_a_difference_below_rounding_is_different_exactly(capsys):
    target, cand = identities.identity_target(*HIDDEN, identities.parse_assumptions([]))
    v = checker.compare(target, cand)
    assert (v.verdict, v.method) == ("different", "symbolic")
    assert "differ exactly" in v.diagnosis[0]
    ce = v.counterexample
    assert ce is not None and ce["relative_difference"] == 1.0  # derived value 10⁻⁶⁰ A, candidate 0
    assert any(abs(x) > 0 for row in ce["derived"] for x in row)
    assert crosscheck_main(["identity", *HIDDEN]) == 1
    assert "DIFFERENT (symbolic" in capsys.readouterr().out


def test_without_the_exact_check_on_agreement_it_is_equal(monkeypatch):
    """Plant: the exact check skipped on agreement (the old order) gives EQUAL for two different expressions."""
    monkeypatch.setattr(checker, "_symbolic_status", lambda *a: "not modelled")
    target, cand = identities.identity_target(*HIDDEN, identities.parse_assumptions([]))
    assert checker.compare(target, cand).verdict == "equal"


def test_the_same_difference_in_a_chain_fails_the_step():
    report = check_blocks([HIDDEN[0], "= " + HIDDEN[1]], identities.parse_assumptions([]))
    assert report.failed.index == 1 and report.failed.verdict.method == "symbolic"


@pytest.mark.parametrize("lhs, rhs, facts", [
    ("(B + 10^{-60} A) - B", "10^{-60} A", []),
    ("W^T W", "I", ["W: orthonormal columns"]),
    ("inv(A^T A) A^T A", "I", ["A: full column rank"]),
    ("A^T", "A", ["A: symmetric"]),
])
def test_true_identities_stay_equal(lhs, rhs, facts):
    target, cand = identities.identity_target(lhs, rhs, identities.parse_assumptions(facts))
    assert checker.compare(target, cand).verdict == "equal"


# ---- honest chains still pass --------------------------------------------------------------------------
@pytest.mark.parametrize("name, status", [("halfsplit_query.md", 0), ("notation_shampoo.md", 0),
                                          ("halfsplit_key.tex", 1)])
def test_shipped_examples_keep_their_verdicts(name, status):
    assert check_chain_file(str(EXAMPLES / name)).exit_status == status
