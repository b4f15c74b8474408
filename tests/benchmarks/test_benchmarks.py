"""The benchmark commands' models and argument handling (their timings are never asserted)."""

import pytest

from benchmarks import step
from benchmarks.step import flop_model, gram_flops, layer_flop_model, ns_flops, sign_flops
from foundation.compute.flop_count import routine_flops


def test_newton_schulz_flops_count_every_product():
    # one quintic step on 2 × 3: A = X Xᵀ (2·2·2·3 = 24), A·A (2·8 = 16), B X (24)
    assert ns_flops(2, 3, 1, 3) == 64
    assert ns_flops(3, 2, 1, 3) == 64  # formed on the short side
    assert ns_flops(2, 3, 5, 2) == 5 * 48  # cubic: no A·A


def test_flop_model_reproduces_the_published_estimate_at_gpt2_small():
    cm, muon = flop_model(768, 12, 12, 64, steps=5, degree=3)
    assert cm / muon == pytest.approx(0.31, abs=0.01)  # the published estimate
    # Llama-3-8B: the O side's global d × H·d_h sign alone is half of Muon's two square signs
    cm, muon = flop_model(4096, 32, 8, 128, steps=5, degree=3)
    assert 0.5 < cm / muon < 0.52




def test_lapack_threads_limits_the_library_jaxlib_calls_and_restores_it():
    from threadpoolctl import threadpool_info

    from foundation.compute.lapack_threads import lapack_threads

    def scipy_threads():
        return {i["filepath"]: i["num_threads"] for i in threadpool_info() if "scipy" in i["filepath"]}

    before = scipy_threads()
    assert before, "SciPy's OpenBLAS (jaxlib's CPU LAPACK) is not loaded"
    with lapack_threads(1):
        assert set(scipy_threads().values()) == {1}
    assert scipy_threads() == before
    with pytest.raises(ValueError, match="positive int"):
        lapack_threads(0)


def test_step_measure_returns_times_and_the_paired_ratio(monkeypatch):
    """``benchmarks.gpu`` unpacks ``measure``'s result; SGD in place of both optimizers keeps this fast."""
    import jax.numpy as jnp
    import optax

    from benchmarks import step
    monkeypatch.setitem(step.SHAPES, "tiny", (32, 2, 1, 16))
    monkeypatch.setitem(step.MLP_WIDTH, "tiny", 64)
    monkeypatch.setattr(step, "compositional_muon", lambda lr, pairs, **kw: optax.sgd(lr))
    monkeypatch.setattr(step.optax.contrib, "muon", lambda lr, ns_coeffs: optax.sgd(lr))
    t_cm, t_muon, ratio = step.measure("tiny", 3, jnp.float32)
    assert t_cm > 0 and t_muon > 0 and ratio > 0
    c_cm, c_muon, *rest = step.measure_with_compile("tiny", 3, jnp.float32)  # the first step's compile times first
    assert c_cm > 0 and c_muon > 0 and len(rest) == 3 and all(x > 0 for x in rest)
    assert len(step.measure_with_compile("tiny", 2, jnp.float32, layers=3)) == 5  # --layers: three layers' leaves
    model = step.stacked_model(lambda: {"wq": 0}, 3)
    assert list(model) == ["layer0", "layer1", "layer2"] and step.stacked_model(lambda: {"wq": 0}, 1) == {"wq": 0}
    assert [p[0] for p in step.attention_pairs(2, 1, 2)(model)] == ["layer0/wq", "layer0/wo", "layer1/wq",
                                                                    "layer1/wo"]
    full = step.measure_full("tiny", 2, jnp.float32)  # attention and gated MLP: three optimizers, ratios to optax
    assert set(full) == {"cm", "muon-path", "optax"} and full["optax"][2] == 1.0
    assert all(c > 0 and t > 0 and r > 0 for c, t, r in full.values())
    train = step.measure_train("tiny", 2, jnp.float32, layers=2)  # the first training step: CM and optax
    assert set(train) == {"cm", "optax"} and train["optax"][2] == 1.0
    assert all(c > 0 and t > 0 and r > 0 for c, t, r in train.values())


@pytest.mark.e2e
def test_the_training_row_runs_the_block_it_declares_and_trains_with_compositional_muon():
    """:func:`benchmarks.step.block_forward` against an independent NumPy block (GQA: query head h reads key
    and value head h // G), so a transposed ``W_V`` or a wrong head layout fails; then the jitted training step
    of two such layers with CM (the declared pairs) lowers the loss.
    Planted: ``W_V`` read as if stored ``d × H_kv·d_h``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    d, heads, kv, hd, f = 16, 4, 2, 4, 24
    rng = np.random.default_rng(5)
    params = step.full_layer(rng, d, heads, kv, hd, f, jnp.float64)
    x = rng.standard_normal((2, 5, d))

    def reference(p, x, transpose_v=True):
        p = {k: np.asarray(v) for k, v in p.items()}
        norm = lambda z: z / np.sqrt(np.mean(z * z, axis=-1, keepdims=True) + 1e-6)  # noqa: E731
        h_ = norm(x)
        q, k_ = (h_ @ p["wq"]).reshape(2, 5, heads, hd), (h_ @ p["wk"]).reshape(2, 5, kv, hd)
        v = (h_ @ (p["wv"].T if transpose_v else p["wv"].reshape(d, kv * hd))).reshape(2, 5, kv, hd)
        out = np.zeros((2, 5, heads, hd))
        for h in range(heads):
            g = h // (heads // kv)
            s = np.einsum("bti,bsi->bts", q[:, :, h], k_[:, :, g]) / np.sqrt(hd)
            s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
            w = np.exp(s - s.max(-1, keepdims=True))
            out[:, :, h] = np.einsum("bts,bsi->bti", w / w.sum(-1, keepdims=True), v[:, :, g])
        x = x + out.reshape(2, 5, heads * hd) @ p["wo"].T
        silu = lambda z: z / (1 + np.exp(-z))  # noqa: E731
        h_ = norm(x)
        return x + (silu(h_ @ p["w_gate"]) * (h_ @ p["w_up"])) @ p["w_down"]

    got = np.asarray(step.block_forward(params, jnp.asarray(x), heads, kv, hd))  # float64: the suite enables x64
    np.testing.assert_allclose(got, reference(params, x), rtol=1e-5, atol=1e-6)  # jax.nn attention: ~1e-7
    assert not np.allclose(got, reference(params, x, transpose_v=False), atol=1e-3)  # the planted transpose

    model = step.stacked_model(lambda: step.full_layer(rng, d, heads, kv, hd, f, jnp.float32), 2)
    opt = step.compositional_muon(0.02, pairs=step.attention_pairs(heads, kv, 2))
    run = jax.jit(step.train_step(opt, heads, kv, hd, 2))
    state, xs = opt.init(model), jnp.asarray(x, jnp.float32)
    losses = []
    for _ in range(4):
        model, state, loss = run(model, state, xs, jnp.roll(xs, 1, axis=1))
        losses.append(float(loss))
    assert losses[-1] < losses[0], losses


def test_paired_ratio_is_the_median_of_per_round_ratios():
    from benchmarks.interleave import paired_ratio
    assert paired_ratio([1.0, 4.0, 3.0], [2.0, 2.0, 1.0]) == 2.0  # ratios 0.5, 2, 3
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0, 2.0])


def test_the_gram_flop_model_counts_what_the_routine_executes():
    # 5 quintic steps, 2 restarts, on 4 x 12: every product the Gram routine runs (cond branches taken only)
    assert gram_flops(4, 12, 5, 2) == gram_flops(12, 4, 5, 2) == routine_flops("gram", "left", 4, 12, 5, 2)


def test_auto_counts_the_gram_form_exactly_where_it_is_chosen():
    assert sign_flops(768, 3072, 5, 3, "auto") == gram_flops(768, 3072, 5, 1) < ns_flops(768, 3072, 5, 3)
    assert sign_flops(768, 1024, 5, 3, "auto") == ns_flops(768, 1024, 5, 3)  # aspect 1.33 <= 1.5: standard
    assert sign_flops(768, 1024, 5, 3, "gram_newton_schulz") == gram_flops(768, 1024, 5, 1)
    assert sign_flops(768, 3072, 5, 3, "newton_schulz") == ns_flops(768, 3072, 5, 3)


def test_full_layer_flop_model_adds_the_gated_mlp():
    d, h, kv, hd, f = step.dims("gpt2")
    assert (d, f) == (768, 3072) and step.dims("llama3", small=True) == (512, 32, 8, 16, 1792)
    standard = layer_flop_model(d, h, kv, hd, f, 5, 3, "newton_schulz")
    mlp = 3 * ns_flops(d, f, 5, 3)
    assert standard["muon-path"] == standard["optax"] == flop_model(d, h, kv, hd, 5, 3)[1] + mlp
    assert standard["cm"] == flop_model(d, h, kv, hd, 5, 3)[0] + mlp
    auto = layer_flop_model(d, h, kv, hd, f, 5, 3, "auto")
    assert auto["optax"] == standard["optax"]  # optax.contrib.muon runs the standard iteration
    assert auto["muon-path"] == standard["muon-path"] - mlp + 3 * gram_flops(d, f, 5, 1)  # attention is square
    assert auto["cm"] < standard["cm"]  # the 768 x 64 head signs and the MLP in the Gram form


@pytest.mark.parametrize("args,needle", [(["--shapes", "gpt3"], "argument --shapes: unknown ['gpt3']"),
                                         (["--repeats", "0"], "argument --repeats: must be >= 1"),
                                         (["--dtype", "int8"], "argument --dtype: invalid choice"),
                                         (["--rows", "mlp"], "argument --rows: unknown ['mlp']"),
                                         (["--msign", "svd"], "argument --msign: invalid choice"),
                                         (["--layers", "0"], "argument --layers: must be >= 1 and <= 96")])
def test_step_benchmark_rejects_bad_arguments_with_one_line(args, needle, capsys):
    """In-process (``main`` returns the exit status): one ``benchmarks.step: error:`` line, exit 2."""
    assert step.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("benchmarks.step: error: ") and needle in err, err


def test_gpu_gram_part_prints_the_measured_ratio_beside_the_flop_model(monkeypatch, capsys):
    """Part [5] of ``benchmarks.gpu``: one row per weight shape, the flop model of the certified bfloat16
    restarts (muon after 1, 2, 3) beside the measured ratio."""
    from benchmarks import gpu
    from derivations.gram_ns import flop_count
    monkeypatch.setattr(gpu, "GRAM_SHAPES", (("tiny", 8, 32),))
    rows = gpu.gram_comparison(small=False, repeats=1)
    (layer, m, n, ratio, model), = rows
    assert (layer, m, n) == ("tiny", 8, 32) and ratio > 0
    assert model == flop_count("gram", 8, 32, 5, 3) / flop_count("standard", 8, 32, 5)
    assert "[5] tiny 8x32 bf16: gram/standard time" in capsys.readouterr().out
