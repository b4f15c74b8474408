"""The training study (numerics.study): a tiny study end to end, the record's refusals, the model's GQA and LoRA
layouts, the two learning rates of a step, a planted divergence, and the command line's bad input."""

import copy
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from numerics import study as S
from numerics import study_report as R
from numerics import train as T
from numerics import train_model as M
from numerics.optimizer import auto_lora_pairs
from numerics.optimizer.pairs import named_leaves

TINY = M.Config(width=16, heads=4, kv_heads=2, layers=1, context=16, batch=4)
PLAN = S.Plan(config=TINY, steps=3, seeds=2, optimizers=("adamw", "muon"), grid=2, adam_grid=2, eval_batches=2,
              lora_steps=2, lora_rank=2, lora_grid=1)


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    return out, S.study(PLAN, out, quiet=True)


def test_grid_is_geometric_and_centred():
    assert S.grid(0.02, 5, 2.0) == (0.005, 0.01, 0.02, 0.04, 0.08)
    assert S.grid(4e-3, 3, 3.0) == (0.00133, 0.004, 0.012) and S.grid(0.5, 1, 2.0) == (0.5,)


@pytest.mark.e2e
def test_tiny_study_runs_every_configuration_paired_and_writes_its_files(record):
    out, rec = record
    pre, lora = PLAN.run_count()
    assert len(rec["runs"]) == pre + lora == 2 * 2 + 2 * (2 + 2) + 2 * 1 * 2  # adamw, muon + adam grid, 2 LoRA
    assert {p.name for p in out.iterdir()} == {"study.json", "study.md", "study.png", "study_lora.png"}
    for part in R.PARTS:
        runs = [r for r in rec["runs"] if r["part"] == part]
        assert all(len(r["train_loss"]) == r["steps"] and r["step_s"] > 0 and r["val_loss"] > 0 for r in runs)
        for seed in (0, 1):  # one seed: the same initialization and first batch for every optimizer and lr
            first = [r["train_loss"][0] for r in runs if r["seed"] == seed]
            assert max(first) - min(first) < 1e-5, first
        assert runs[0]["train_loss"][0] != [r for r in runs if r["seed"] == 1][0]["train_loss"][0]
    muon = [r for r in rec["runs"] if r["part"] == "pretrain" and r["optimizer"] == "muon"]
    best = S.best_config([S.Run(**r) for r in muon if r["adam_lr"] == S.ADAM_CENTER], "muon")
    assert {r["adam_lr"] for r in muon if r["lr"] == best[0]} == {S.ADAM_CENTER, *S.grid(S.ADAM_CENTER, 2, 3.0)}
    text = (out / "study.md").read_text()
    assert "## What the numbers show" in text and "## LoRA fine-tuning" in text
    assert sum(line.startswith("- ") and "muon" in line and "adamw" in line for line in text.splitlines()) == 4


@pytest.mark.e2e
def test_summary_is_mean_and_sample_std_over_seeds_with_paired_differences(record):
    _, rec = record
    part = R.summarize(rec)["pretrain"]
    adamw = [r for r in rec["runs"] if r["part"] == "pretrain" and r["optimizer"] == "adamw"]
    best = part["best"]["adamw"]
    values = [r["val_loss"] for r in sorted(adamw, key=lambda r: r["seed"]) if r["lr"] == best["lr"]]
    assert best["mean"] == pytest.approx(np.mean(values)) and best["std"] == pytest.approx(np.std(values, ddof=1))
    assert best["mean"] == min(e["mean"] for e in part["configs"]["adamw"])
    pair = part["pairs"][0]
    assert (pair["a"], pair["b"]) == ("muon", "adamw")
    assert pair["diffs"] == pytest.approx([m - a for m, a in zip(part["best"]["muon"]["values"], values, strict=True)])


def _planted(rec, what):
    bad = copy.deepcopy(rec)
    runs = bad["runs"]
    if what == "nan":
        runs[0]["val_loss"] = math.nan
    elif what == "config":
        runs[1]["config"] = {**runs[1]["config"], "width": 32}
    elif what == "missing seed":
        del runs[1]
    elif what == "repeated seed":
        runs[1]["seed"] = 0
    elif what == "nan in training":
        runs[0]["train_loss"][1] = None
    elif what == "steps":
        runs[2]["steps"] = 99
    return bad


@pytest.mark.e2e
@pytest.mark.parametrize("what, message", [
    ("nan", "must be recorded as a divergence"), ("config", "disagree in their configuration"),
    ("missing seed", "ran seeds [0]"), ("repeated seed", "ran seeds [0, 0]"),
    ("nan in training", "training losses must be finite"), ("steps", "disagree in their configuration")])
def test_check_record_refuses_planted_mistakes(record, what, message):
    _, rec = record
    R.check_record(rec)  # the study's own record passes
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        R.check_record(_planted(rec, what))


def test_a_nan_loss_is_a_divergence_and_out_of_the_selection():
    """A planted step that returns NaN at its second call: the run stops, is marked diverged and has no validation
    loss; the selection takes the other configuration."""
    calls = []

    def step(params, state, x, y, lr, adam_lr, aux):
        calls.append(1)
        return params, state, jnp.float32(math.nan if len(calls) == 2 else 1.0)

    tokens = np.arange(200, dtype=np.int32) % M.VOCAB
    run = S.Run("pretrain", "adamw", 1.0, None, 0, {}, 5)
    S.train_run(run, step, optax.identity(), {}, tokens, TINY, lambda p, aux: 0.5)
    assert run.diverged and run.val_loss is None and run.train_loss == [1.0, None] and len(calls) == 2
    ok = [S.Run("pretrain", "adamw", 2.0, None, s, {}, 5, val_loss=3.0) for s in (0, 1)]
    assert S.best_config([run, S.Run("pretrain", "adamw", 1.0, None, 1, {}, 5, val_loss=0.1), *ok], "adamw") == \
        (2.0, None)


def _rms(x, g):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g


def _gelu(x):  # jax.nn.gelu's default, the tanh form
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def test_gqa_forward_matches_repeated_kv_heads():
    """The grouped einsum is attention with kv head ``h // G`` repeated for query head ``h`` (the NumPy reference
    below); a wrong grouping (``h % H_kv``) differs."""
    params = jax.tree.map(lambda a: np.asarray(a, np.float64), M.init_params(TINY, 1))
    tokens = np.random.default_rng(0).integers(0, M.VOCAB, (2, TINY.context))

    def reference(group):
        B, Tn = tokens.shape
        hd, H, Hkv = TINY.head_dim, TINY.heads, TINY.kv_heads
        p = jax.tree.map(lambda a: a[0], params["layers"])
        x = params["embed"][tokens] + params["pos"][:Tn]
        h = _rms(x, p["norm1"])
        q = (h @ p["wq"]).reshape(B, Tn, H, hd)
        k, v = (group((h @ w).reshape(B, Tn, Hkv, hd), H // Hkv) for w in (p["wk"], p["wv"].T))
        s = np.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
        s = np.exp(np.where(np.tril(np.ones((Tn, Tn), bool)), s, -np.inf) - s.max(axis=-1, keepdims=True))
        x = x + np.einsum("bhts,bshd->bthd", s / s.sum(-1, keepdims=True), v).reshape(B, Tn, H * hd) @ p["wo"].T
        x = x + _gelu(_rms(x, p["norm2"]) @ p["w1"]) @ p["w2"]
        return _rms(x, params["norm_f"]) @ params["head"]

    got = np.asarray(jax.jit(M.forward, static_argnums=2)(params, tokens, TINY))
    assert np.allclose(got, reference(lambda a, g: np.repeat(a, g, axis=2)), atol=1e-4)
    assert not np.allclose(got, reference(lambda a, g: np.tile(a, (1, 1, g, 1))), atol=1e-2)


def test_lora_adapters_add_b_a_to_each_linear_map_and_are_found_by_name():
    base = M.init_params(TINY, 0)
    lora = M.init_lora(TINY, 2, 1)
    merged = M.merge_lora(base, lora)
    assert all(np.array_equal(merged["layers"][n], base["layers"][n]) for n in M.LORA_TARGETS)  # B = 0: the base
    lora = jax.tree.map(lambda a: a + 0.1, lora)
    merged = M.merge_lora(base, lora)
    x = np.random.default_rng(0).standard_normal((3, 4 * TINY.width)).astype(np.float32)
    for name, (d_out, d_in) in M.matrix_shapes(TINY).items():
        def apply(w, name=name, d_in=d_in):
            return x[:, :d_in] @ (w[0] if M.X_AT_W[name] else w[0].T)

        a, b = lora[name]["lora_A"][0], lora[name]["lora_B"][0]
        assert apply(merged["layers"][name]).shape[1] == d_out
        assert np.allclose(apply(merged["layers"][name]) - apply(base["layers"][name]), x[:, :d_in] @ a.T @ b.T,
                           atol=1e-5), name
    assert sorted(auto_lora_pairs(named_leaves(lora))) == sorted(M.lora_pairs(lora))


def test_each_leaf_takes_its_own_learning_rate():
    """``adam_lr`` scales exactly the AdamW part of Muon (embeddings, head, gains); ``lr`` the matrices."""
    params = M.init_params(TINY, 0)
    mask = T.adamw_part("muon", TINY, params)
    assert mask["embed"] and mask["head"] and mask["layers"]["norm1"] and not mask["layers"]["wq"]
    assert mask == T.adamw_part("cm", TINY, params) and not any(jax.tree.leaves(T.adamw_part("adamw", TINY, params)))
    opt = optax.sgd(1.0)
    step = T.make_scaled_step(opt, lambda p, x, y, aux: M.loss_fn(p, x, y, TINY), mask)
    x, y = next(M.batches(np.arange(500, dtype=np.int32) % M.VOCAB, TINY, 0))
    new, _, _ = step(params, opt.init(params), x, y, jnp.float32(0.1), jnp.float32(0.0), None)
    moved = jax.tree.map(lambda a, b: bool(np.any(a != b)), params, new)
    assert moved == jax.tree.map(lambda m: not m, mask)


@pytest.mark.parametrize("args, message", [
    (["--steps", "1"], "--steps: must be >= 2 and <="),
    (["--seeds", "1"], "--seeds: must be >= 2 and <="),
    (["--grid", "0"], "--grid"),
    (["--optimizers", "adamw,sgd"], "--optimizers"),
    (["--optimizers", "muon,cm"], "needs adamw"),
    (["--heads", "8", "--kv-heads", "3"], "--kv-heads"),
    (["--width", "100"], "--width"),
    (["--lora-steps", "1"], "--lora-steps"),
    (["--lora-rank", "999"], "--lora-rank"),
    (["--steps", "x"], "--steps"),
])
def test_cli_bad_input_is_one_line_exit_2(args, message, capsys):
    assert S.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("numerics.study: error:")


def test_cli_refuses_an_out_file_and_a_report_that_is_no_record(tmp_path, capsys):
    (tmp_path / "f").write_text("{}")
    assert S.main(["--out", str(tmp_path / "f")]) == 2
    assert S.main(["--report", str(tmp_path / "f"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "--out" in err[0] and "is not a study record" in err[1]


@pytest.mark.e2e
def test_report_rewrites_the_markdown_from_a_stored_record(record, tmp_path, capsys):
    out, _ = record
    assert S.main(["--report", str(out / "study.json"), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "study.md").read_text() == (out / "study.md").read_text()
    capsys.readouterr()


def test_prose_set_is_disjoint_from_the_code_with_a_tenth_held_out():
    assert not any("pydoc_data" in p.parts or "test" in p.parts for p in M.code_files())
    train, val = M.prose_corpus()
    assert 0.05 < val.size / (train.size + val.size) <= 0.1
    text = bytes(train[:20_000].astype(np.uint8)).decode("ascii")
    assert "statement" in text and text.count(" the ") > 50


def test_scale_multiplies_the_width_and_the_steps_and_keeps_the_heads():
    plan = S.plan_from_args(S._parser().parse_args(["--scale", "4"]))
    assert (plan.config.width, plan.config.heads, plan.config.kv_heads, plan.config.head_dim) == (1024, 8, 2, 128)
    assert (plan.steps, plan.lora_steps) == (4 * S.DEFAULT_STEPS, 2 * S.DEFAULT_STEPS)
    default = S.plan_from_args(S._parser().parse_args([]))
    assert default.config == S.DEFAULT_CONFIG and default.run_count() == (57, 27)
