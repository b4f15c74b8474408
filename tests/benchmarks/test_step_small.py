"""The small-width rows of ``benchmarks.step`` (``--rows small``): their models, the optax baseline's matrix view
of flax kernels, the routine count and the ``--json`` document (timings are never asserted)."""

import json

import jax
import jax.numpy as jnp
import optax
import pytest
from optax.contrib import MuonDimensionNumbers

from benchmarks import step, step_small
from benchmarks.models import flax_available


def test_compiled_routines_counts_identical_fusions_once():
    """Two fusions that differ only in names are one routine; a different one is another. Planted: a program whose
    second elementwise chain differs (``cos``) must count one routine more."""
    x = jnp.ones((64, 64))
    same = jax.jit(lambda a, b: ((jnp.sin(a) * 2 + 1) @ a, (jnp.sin(b) * 2 + 1) @ b)).lower(x, x + 1).compile()
    other = jax.jit(lambda a, b: ((jnp.sin(a) * 2 + 1) @ a, (jnp.cos(b) * 2 + 1) @ b)).lower(x, x + 1).compile()
    assert step_small.compiled_routines(other) == step_small.compiled_routines(same) + 1


@pytest.mark.skipif(not flax_available(), reason="flax (the frameworks extra) is not installed")
def test_optax_muon_sees_the_flax_attention_kernels_as_matrices():
    """optax.contrib.muon would give the ``(d, H, d_h)`` flax kernels to AdamW; the benchmark hands it their
    matrix view, the 2-D flax kernels the default, vectors None (AdamW)."""
    params, pairs, dims = step_small.models(64, jnp.float32)["flax"]
    assert pairs == "auto"
    block = dims["params"]["Block_0"]
    assert block["MultiHeadDotProductAttention_0"]["query"]["kernel"].output_axis == (-2, -1)
    assert block["MultiHeadDotProductAttention_0"]["out"]["kernel"].reduction_axis == (-3, -2)
    assert block["Dense_0"]["kernel"] == MuonDimensionNumbers() and block["Dense_0"]["bias"] is None
    opt = optax.contrib.muon(0.02, muon_weight_dimension_numbers=dims)
    query = params["params"]["Block_0"]["MultiHeadDotProductAttention_0"]["query"]["kernel"]
    state = opt.init(params)
    labels = jax.tree.leaves(state.inner_states["muon"])  # the Muon part holds the flax kernels' momentum
    assert any(getattr(x, "shape", None) == query.shape for x in labels)


@pytest.mark.e2e  # compiles and times four optimizers: a benchmark run, after the suite
def test_small_rows_record_every_optimizer_and_ratio(monkeypatch):
    """SGD in place of the four optimizers and one width keep this fast; the records carry both baselines'
    ratios (1 against themselves) and the routine count."""
    monkeypatch.setattr(step_small, "WIDTHS", (32,))
    monkeypatch.setattr(step_small, "HEAD_DIM", 16)
    monkeypatch.setattr(step_small, "optimizers", lambda pairs, dims, msign: {k: optax.sgd(0.1 * (i + 1)) for i, k in
                                                                              enumerate(step_small.OPTIMIZERS)})
    records = step_small.small_records(2, jnp.float32, "auto", quiet=True)
    models = {"jax", "flax"} if flax_available() else {"jax"}
    assert {(r["model"], r["optimizer"]) for r in records} == {(m, k) for m in models for k in step_small.OPTIMIZERS}
    for r in records:
        assert r["first_step_s"] > 0 and r["step_s"] > 0 and r["routines"] >= 1 and r["width"] == 32
        if r["optimizer"] == "muon":
            assert r["first_vs_muon"] == r["step_vs_muon"] == 1.0
        if r["optimizer"] == "adamw":
            assert r["first_vs_adamw"] == r["step_vs_adamw"] == 1.0


def test_json_prints_one_document_with_the_small_rows(monkeypatch, capsys):
    record = {"model": "jax", "width": 128, "heads": 4, "layers": 2, "optimizer": "cm", "first_step_s": 1.0,
              "step_s": 0.01, "routines": 3, "first_vs_muon": 1.5, "first_vs_adamw": 5.0, "step_vs_muon": 0.5,
              "step_vs_adamw": 9.0}
    monkeypatch.setattr(step, "small_records", lambda repeats, dtype, msign, quiet: [record])
    assert step.main(["--rows", "small", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # nothing but the document on stdout
    assert doc["rows"]["small"] == [record] and doc["cm_muon_ratio"] == 0.5
    assert step.main(["--rows", "small"]) == 0  # the table
    out = capsys.readouterr().out
    assert "small widths" in out and out.rstrip().endswith("cm/muon median step time ratio: 0.500")


@pytest.mark.e2e  # compiles and times each attention rule: a benchmark run, after the suite
def test_rule_rows_time_each_rule_against_newton_schulz_on_its_matrices(monkeypatch):
    """``--rows rules`` at a tiny grouped-query shape: both rules, compile times, routines and the paired ratio;
    the per-rule flop floors sum to :func:`benchmarks.step.flop_model`'s."""
    from benchmarks import step_rules
    from numerics.optimizer import resolve_schedule
    schedule = resolve_schedule("polar-express-5", 5)
    found = step_rules.measure_rules(32, 2, 1, 16, jnp.float32, "auto", schedule, 1, quiet=True)
    assert set(found) == {"qk", "ov"}
    for row in found.values():
        assert all(c > 0 and k >= 1 and t > 0 for c, k, t in (row["cm"], row["muon"])) and row["ratio"] > 0
    rules = step.rule_flop_model(32, 2, 1, 16, 5, 3, "auto")
    assert tuple(map(sum, zip(*rules.values(), strict=True))) == step.flop_model(32, 2, 1, 16, 5, 3, "auto")
