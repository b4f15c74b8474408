"""Translation validation: printer bugs planted by monkeypatching are caught. That every emitted function of every
discovered rule (JAX and NumPy) computes its checked formula is asserted where the rule's ``--emit`` runs the
validation, in ``tests/rules/test_cli.py::test_every_rule_module_emits_and_checks`` (the same call, computed once).

The validation (:mod:`derivations.printing.validation`) evaluates each function at two sizes with all
dimensions distinct and compares with the derivation's formula evaluated by the engine's float64 evaluator.
"""

from __future__ import annotations

import dataclasses

import pytest

from derivations import regenerate, registry
from derivations.cli import adapters_of, check_table, failures, main, render
from derivations.printing.jax_printer import JaxPrinter
from derivations.printing.numpy_printer import NumpyPrinter
from derivations.printing.validation import check_sizes, validate_source
from derivations.vocabulary.nodes import GramInvSqrt

TARGETS = ("numpy", "jax")


def _messages(results) -> list[str]:
    return [v.message for v in results if not v.passed]


@pytest.mark.parametrize("rule", registry.rule_names())
def test_validation_sizes_are_distinct_and_several(rule):
    for fn in registry.rule_module(rule).functions():
        sizes = check_sizes(fn)
        assert len(sizes) >= 2 and len({tuple(d.values()) for d in sizes}) == len(sizes)
        for dims in sizes:
            assert len(set(dims.values())) == len(dims), (fn.name, dims)


# ---- planted printer bugs -----------------------------------------------------------------------------------

def _partner_on_the_left(original):
    """``X C⁻¹`` printed as ``C⁻¹ X``: the Gram factor of an output moved to the wrong side of its product (the
    JAX printer's output factors, :meth:`JaxPrinter._split_factors`)."""
    def factors(self, expr):
        plan = original(self, expr)
        if plan is not None and plan[2] is None and len(plan[1]) >= 2 and isinstance(plan[1][-1], GramInvSqrt):
            coeff, mats, node = plan
            return coeff, [mats[-1], *mats[:-1]], node
        return plan
    return factors


def _transpose_dropped(self, expr):
    return self._atom(expr.arg)


def _validate(rule, target):
    module = registry.rule_module(rule)
    return validate_source(render(module, target), module.functions(), module.scalars, target, rule,
                           adapters=adapters_of(module))


def test_partner_on_the_wrong_side_in_the_jax_printer_is_caught(monkeypatch):
    monkeypatch.setattr(JaxPrinter, "_split_factors", _partner_on_the_left(JaxPrinter._split_factors))
    wrong = _messages(_validate("halfsplit", "jax"))
    assert wrong and all(m.startswith("halfsplit: jax function ") for m in wrong)
    assert any("halfsplit_qk" in m for m in wrong)


@pytest.mark.parametrize("printer, target", [(JaxPrinter, "jax"), (NumpyPrinter, "numpy")])
def test_dropped_transpose_is_caught(printer, target, monkeypatch):
    monkeypatch.setattr(printer, "_print_Transpose", _transpose_dropped)
    wrong = _messages(_validate("gauge", target))
    assert wrong and any(f"gauge: {target} function horizontal_projection" in m for m in wrong)


def test_the_plant_in_one_printer_leaves_the_other_target_valid(monkeypatch):
    monkeypatch.setattr(NumpyPrinter, "_print_Transpose", _transpose_dropped)
    assert not _messages(_validate("gauge", "jax"))


def test_emit_refuses_a_planted_printer_bug_and_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(JaxPrinter, "_split_factors", _partner_on_the_left(JaxPrinter._split_factors))
    out = tmp_path / "halfsplit.py"
    assert main(registry.rule_module("halfsplit"), ["--emit", "jax", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("derivations.halfsplit: not emitted: halfsplit: jax function ")
    assert not out.exists()


def test_check_table_fails_on_a_planted_printer_bug(monkeypatch):
    monkeypatch.setattr(NumpyPrinter, "_print_Transpose", _transpose_dropped)
    table = check_table(registry.rule_module("gauge"), trials=1, seed=0)
    assert not table["ok"]
    assert any("gauge: numpy function horizontal_projection" in f for f in failures(table))
    assert any(r["status"] == "FAIL" and r["target"] == "numpy" for r in table["translation"])


def test_regenerate_refuses_a_planted_printer_bug_and_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(JaxPrinter, "_split_factors", _partner_on_the_left(JaxPrinter._split_factors))
    with pytest.raises(regenerate.Refused, match="halfsplit: jax function halfsplit_qk"):
        regenerate.regenerate(("halfsplit",), tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_cached_validation_never_hides_a_changed_formula():
    """The same printed text against other formulas (dW_Q and dW_K swapped) is validated afresh, and fails."""
    module = registry.rule_module("halfsplit")
    text = render(module, "numpy")
    assert not _messages(validate_source(text, module.functions(), module.scalars, "numpy", "halfsplit"))
    functions = [dataclasses.replace(fn, outputs=fn.outputs[::-1]) if fn.name == "halfsplit_qk" else fn
                 for fn in module.functions()]
    wrong = _messages(validate_source(text, functions, module.scalars, "numpy", "halfsplit"))
    assert wrong and all("halfsplit_qk" in m for m in wrong)
