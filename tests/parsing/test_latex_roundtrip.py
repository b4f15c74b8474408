"""Every derivation's printed LaTeX result reads back (project's own formula parser) as the checked formula,
and a LaTeX printer bug planted by monkeypatching (an exponent changed in the LaTeX only, a transpose dropped, a
left Gram root printed as a right one) is caught, by the round trip and by ``python -m derivations.<rule> --check``
(exit 1, naming the rule and the derivation); a known-unreadable result is reported as such, never as equal."""

from __future__ import annotations

import dataclasses

import pytest
from sympy.matrices.expressions import MatrixSymbol

import derivations.vocabulary.nodes as vocabulary
from derivations import registry
from derivations.cli import main
from derivations.parsing.formula import parse
from derivations.parsing.latex_roundtrip import UNREADABLE, round_trip, round_trips
from derivations.vocabulary.latex_notation import WorkbenchLatexPrinter, latex
from derivations.vocabulary.nodes import GramInvSqrt, GramSqrt, PolarFactor, latex_subscript
from derivations.vocabulary.norm_nodes import AspectScale


@pytest.fixture(scope="session")
def trips():
    cache: dict = {}

    def get(rule):
        if rule not in cache:
            cache[rule] = round_trips(registry.rule_module(rule))
        return cache[rule]
    return get


@pytest.mark.parametrize("rule", registry.rule_names())
def test_printed_results_read_back_as_the_checked_formulas(rule, trips):
    results = trips(rule)
    assert results
    wrong = [r.message for r in results if r.status == "FAIL"]
    assert not wrong
    assert all(r.unreadable == UNREADABLE[r.derivation] for r in results if r.status == "unreadable")
    now_readable = [r.derivation for r in results if r.passed and r.derivation in UNREADABLE]
    assert not now_readable, f"remove {now_readable} from UNREADABLE: they read back"


def _exponent_one(self, printer):
    """``(V/d)^{1/2}`` printed as ``(V/d)^{1}``: an exponent changed in the LaTeX printing of the aspect scale only."""
    return rf"\left({printer._print(self.ratio())}\right)^{{1}}"


def _derivation(rule, name):
    return next(d for d in registry.rule_module(rule).derivations() if d.name == name)


def test_a_changed_exponent_in_the_latex_printer_is_caught(monkeypatch):
    der = _derivation("tied_embeddings", "tied_embeddings.update")
    assert round_trip(der, "tied_embeddings").passed
    monkeypatch.setattr(AspectScale, "_latex", _exponent_one)
    result = round_trip(der, "tied_embeddings")
    assert "^{1}" in result.text and "sqrt" not in result.text
    assert not result.passed and result.message.startswith("tied_embeddings: LaTeX of tied_embeddings.update: ")


def test_a_dropped_transpose_in_the_latex_printer_is_caught(monkeypatch):
    der = _derivation("balance", "balance.product")
    assert round_trip(der, "balance").passed
    monkeypatch.setattr(WorkbenchLatexPrinter, "_print_Transpose", lambda self, expr: self._print(expr.arg))
    result = round_trip(der, "balance")
    assert not result.passed and result.message.startswith("balance: LaTeX of balance.product: ")


def _left_as_right(node, printer):
    """A left Gram root printed as the right one (``C_{X}`` for ``(XXᵀ)^{1/2}``): the side dropped in the LaTeX."""
    return latex_subscript(node.base, printer)


def test_a_left_root_printed_as_a_right_one_is_caught(monkeypatch):
    der = _derivation("mla", "mla.output")
    assert round_trip(der, "mla").passed and r"C_{E_V^{\top}}^{-1}" in round_trip(der, "mla").text
    monkeypatch.setattr(vocabulary, "root_subscript", _left_as_right)
    result = round_trip(der, "mla")
    assert r"C_{E_V}^{-1}" in result.text
    assert result.status == "FAIL" and result.message.startswith("mla: LaTeX of mla.output: ")


def test_left_and_right_roots_print_apart_and_read_back_as_themselves():
    x = MatrixSymbol("X", 3, 5)
    namespace = {"X": x}
    for node, text in [(GramSqrt(x, 0, "left"), r"C_{X^{\top}}"), (GramSqrt(x), "C_{X}"),
                       (GramInvSqrt(x, 0, "left"), r"C_{X^{\top}}^{-1}"), (GramInvSqrt(x), "C_{X}^{-1}"),
                       (PolarFactor(x, 0, "left"), r"U_{X^{\top}}^{\top}"), (PolarFactor(x), "U_{X}")]:
        assert latex(node) == text
        parsed = parse(text, namespace)
        assert parsed == node or parsed.T.doit() == node.T.doit()
        assert parsed.shape == node.shape
    assert parse(r"C_{X^{\top}}", namespace) == GramSqrt(x, 0, "left")  # the right root of Xᵀ is the left one


def _one_derivation_rule(rule: str, name: str):
    """Rule ``rule`` cut down to derivation ``name`` and no emitted functions, so that ``--check`` is quick."""
    der = _derivation(rule, name)
    return dataclasses.replace(registry.rule_module(rule), derivations=lambda: [der], functions=lambda: [],
                               measurements=None)


PLANTED = [("tied_embeddings", "tied_embeddings.update", AspectScale, "_latex", _exponent_one),
           ("balance", "balance.product", WorkbenchLatexPrinter, "_print_Transpose",
            lambda self, expr: self._print(expr.arg)),
           ("mla", "mla.output", vocabulary, "root_subscript", _left_as_right)]


@pytest.mark.parametrize("rule, name, owner, attribute, planted", PLANTED, ids=[p[1] for p in PLANTED])
def test_check_exits_1_naming_the_derivation_on_a_planted_latex_printer_bug(rule, name, owner, attribute, planted,
                                                                            monkeypatch, capsys):
    module = _one_derivation_rule(rule, name)
    assert main(module, ["--check", "--trials", "1"]) == 0
    out = capsys.readouterr().out
    assert "printed LaTeX result read back" in out and f"{name} " in out and "1/1 printed LaTeX results" in out
    monkeypatch.setattr(owner, attribute, planted)
    assert main(module, ["--check", "--trials", "1"]) == 1
    out, err = capsys.readouterr()
    assert f"derivations.{rule}: check failed: {rule}: LaTeX of {name}: " in err
    assert f"FAIL: {rule}: LaTeX of {name}" in out


def test_a_known_unreadable_result_is_reported_unreadable_never_equal(monkeypatch, capsys):
    module = _one_derivation_rule("mla", "mla.output")
    monkeypatch.setattr(vocabulary, "root_subscript", _left_as_right)
    monkeypatch.setitem(UNREADABLE, "mla.output", "a planted reason")
    assert main(module, ["--check", "--trials", "1"]) == 0  # known, so not a failure of the check
    out = capsys.readouterr().out
    assert "unreadable: a planted reason" in out and "0/1 printed LaTeX results read back" in out
    assert "(1 known unreadable)" in out and "ok (" not in out.split("printed LaTeX result read back")[1]
