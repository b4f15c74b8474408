"""Translation validation of the stored-layout adapters (``gqa_qk``, ``hybrid_ov``, ``joint_qk``): each entry point,
called on weights drawn in their stored layouts, computes the core functions' checked formulas evaluated head by
head on the mathematically laid-out matrices (:mod:`derivations.printing.layout_reference`); adapter bugs planted
in the layout printer (:mod:`derivations.printing.layout`) are caught, in ``--check`` and ``--emit`` too.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from derivations import registry
from derivations.cli import adapters_of, check_table, failures, main, render
from derivations.printing import layout
from derivations.printing.layout import AdapterPrinter
from derivations.printing.layout_reference import head, updates
from derivations.printing.validation import ADAPTER_SIZES, validate_source

ADAPTED = ("gqa", "hybrid_ov", "joint")


def _validate(rule, target="jax"):
    module = registry.rule_module(rule)
    return validate_source(render(module, target), module.functions(), module.scalars, target, rule,
                           adapters=adapters_of(module))


def _messages(results) -> list[str]:
    return [v.message for v in results if not v.passed]


def _entry(rule):
    return registry.rule_module(rule).adapters()[0].entry


def test_every_printed_adapter_is_declared_for_validation():
    """A rule whose JAX module gets extra public functions names the adapters they are printed from."""
    for rule in registry.rule_names():
        module = registry.rule_module(rule)
        extra = set(module.jax_extra()[1]) if module.jax_extra else set()
        assert extra == {a.entry for a in adapters_of(module)}, rule


def test_a_public_function_without_a_formula_fails_the_validation():
    module = dataclasses.replace(registry.rule_module("joint"), adapters=None)
    wrong = _messages(validate_source(render(module, "jax"), module.functions(), module.scalars, "jax", "joint"))
    assert wrong == ["joint: jax function joint_qk has no checked formula to be validated against"]


def test_the_numpy_modules_carry_no_adapter():
    assert {v.function for v in _validate("gqa", "numpy")} == {fn.name for fn in
                                                                 registry.rule_module("gqa").functions()}


def test_adapter_sizes_have_distinct_dimensions_and_real_groups():
    for dims in ADAPTER_SIZES:
        group = dims["H"] // dims["H_kv"]
        assert len({*dims.values(), group}) == len(dims) + 1 and dims["H"] % dims["H_kv"] == 0
        assert group >= 2 and dims["H_kv"] >= 2 and dims["d"] > dims["d_h"]


def test_the_reference_pairs_query_heads_with_consecutive_key_heads():
    """gqa_qk's dW_Q head h is the half-split query update with key head h // G (a direct check of the reference)."""
    rng = np.random.default_rng(0)
    adapter = registry.rule_module("gqa").adapters()[0]
    d, d_h, heads, kv = 5, 2, 4, 2
    stored = {"W_Q": rng.standard_normal((d, heads * d_h)), "W_K": rng.standard_normal((d, kv * d_h)),
              "G_Q": rng.standard_normal((d, heads * d_h)), "G_K": rng.standard_normal((d, kv * d_h))}
    got = updates(adapter, stored, d_h, {"epsilon": 1.0})
    for h in range(heads):
        w_k, g_q = head(stored["W_K"], "columns", h // 2, d_h), head(stored["G_Q"], "columns", h, d_h)
        c_inv = np.linalg.inv(scipy_sqrtm(w_k.T @ w_k))
        u, _, vt = np.linalg.svd(g_q @ c_inv, full_matrices=False)
        assert np.allclose(head(got["dW_Q"], "columns", h, d_h), -0.5 * (u @ vt) @ c_inv)


def scipy_sqrtm(a):
    w, q = np.linalg.eigh(a)
    return (q * np.sqrt(w)) @ q.T


# ---- planted adapter bugs ----------------------------------------------------------------------------------

def _transpose_dropped(original):
    """The value heads laid into ``P_V`` as stored (``W_{V,h}``), not transposed (``W_{V,h}ᵀ``)."""
    def operand(self, lay, source):
        return original(self, dataclasses.replace(lay, transposed=False), source)
    return operand


def _axis_swapped(name, axis, source=None):
    """Every stored weight split along its columns, whatever axis holds its heads."""
    return _ORIGINAL_HEADS(name, "columns", source)


_ORIGINAL_HEADS = layout._heads


def _heads_tiled(original):
    """Shared heads repeated as a whole (head h paired with shared head h mod H_kv, not h // G)."""
    def argument(self, sym, own):
        text = original(self, sym, own)
        if text.startswith("jnp.repeat("):
            return f"jnp.tile({text.removeprefix('jnp.repeat(').removesuffix(', group, axis=-3)')}, (group, 1, 1))"
        return text
    return argument


def _blocks_reversed(original):
    """The joint partner laid out as ``blockdiag(W_Q, W_K)`` for ``blockdiag(W_K, W_Q)``."""
    def argument(self, sym, own):
        own = [dataclasses.replace(lay, stored=lay.stored[::-1]) if lay.arrangement == "concat" else lay
               for lay in own]
        return original(self, sym, own)
    return argument


PLANTS = {
    "transpose dropped": ("hybrid_ov", lambda mp: mp.setattr(AdapterPrinter, "_operand",
                                                             _transpose_dropped(AdapterPrinter._operand))),
    "head axis swapped": ("hybrid_ov", lambda mp: mp.setattr(layout, "_heads", _axis_swapped)),
    "shared heads tiled": ("gqa", lambda mp: mp.setattr(AdapterPrinter, "_argument",
                                                        _heads_tiled(AdapterPrinter._argument))),
    "partner blocks reversed": ("joint", lambda mp: mp.setattr(AdapterPrinter, "_argument",
                                                               _blocks_reversed(AdapterPrinter._argument))),
}


@pytest.mark.parametrize("plant", PLANTS)
def test_a_planted_adapter_bug_is_caught(plant, monkeypatch):
    rule, apply = PLANTS[plant]
    apply(monkeypatch)
    wrong = _messages(_validate(rule))
    assert wrong and all(m.startswith(f"{rule}: jax function {_entry(rule)} at ") for m in wrong)


def test_the_plants_change_only_the_adapter(monkeypatch):
    """The planted modules' core functions still validate: the failures above are the adapters'."""
    for rule, apply in PLANTS.values():
        with monkeypatch.context() as mp:
            apply(mp)
            assert {v.function for v in _validate(rule) if not v.passed} == {_entry(rule)}


def test_emit_refuses_a_planted_adapter_bug_and_writes_nothing(monkeypatch, tmp_path, capsys):
    PLANTS["transpose dropped"][1](monkeypatch)
    out = tmp_path / "hybrid_ov.py"
    assert main(registry.rule_module("hybrid_ov"), ["--emit", "jax", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("derivations.hybrid_ov: not emitted: hybrid_ov: jax function hybrid_ov ")
    assert not out.exists()


def test_check_table_fails_on_a_planted_adapter_bug(monkeypatch):
    PLANTS["head axis swapped"][1](monkeypatch)
    table = check_table(registry.rule_module("hybrid_ov"), trials=1, seed=0)
    assert not table["ok"]
    assert any(f.startswith("hybrid_ov: jax function hybrid_ov at ") for f in failures(table))


def test_a_cached_validation_never_hides_a_changed_adapter():
    """The same printed text against an adapter declaring another stored layout (W_V with heads along its columns)
    is validated afresh, and fails: the record of P_V says W_V holds its heads along its rows."""
    module = registry.rule_module("hybrid_ov")
    text = render(module, "jax")
    adapter = module.adapters()[0]
    assert not _messages(validate_source(text, module.functions(), module.scalars, "jax", "hybrid_ov",
                                         adapters=(adapter,)))
    moved = dataclasses.replace(adapter, stored={**adapter.stored, "W_V": "columns", "G_V": "columns"})
    wrong = _messages(validate_source(text, module.functions(), module.scalars, "jax", "hybrid_ov", adapters=(moved,)))
    assert wrong and all(m.startswith("hybrid_ov: jax function hybrid_ov at ") for m in wrong)
    assert any("the record of P_V says rows" in m for m in wrong)
