"""The training study's record checked, summarized and written out (:mod:`numerics.study`).

:func:`check_record` refuses a record that cannot be summarized honestly (runs of one part that
disagree in their model or step count, a seed missing or repeated, a NaN/Inf loss not marked as a
divergence); :func:`summarize` turns the runs into means ± standard deviations over seeds, the best
configuration of each optimizer (lowest mean validation loss) and paired per-seed differences;
:func:`write_report` writes ``study.md``, ``study.png`` and ``study_lora.png``. Every sentence of the
Markdown is computed from the record: nothing is written in advance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

PARTS = ("pretrain", "lora")
#: the comparisons the report states, in this order, when both optimizers ran
PAIRS = (("cm", "muon"), ("cm", "adamw"), ("muon", "adamw"), ("cm-proj", "muon"), ("cm-iso", "muon"),
         ("cm-iso-proj", "muon"))


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_record(record: dict) -> None:
    """Raise ``ValueError`` (one line) unless ``record`` is a consistent study: every run of a part has the
    part's model configuration and step count, every configuration ran every seed once, a finite validation
    loss unless the run is marked diverged, and finite training losses up to a divergence."""
    seeds = record["plan"]["seeds"]
    if not isinstance(seeds, int) or seeds < 2:
        raise ValueError(f"the plan has seeds={seeds!r}; mean ± std needs at least 2")
    for part in PARTS:
        runs = [r for r in record["runs"] if r["part"] == part]
        for r in runs:
            if (r["config"], r["steps"]) != (runs[0]["config"], runs[0]["steps"]):
                raise ValueError(f"{part} runs disagree in their configuration: {r['optimizer']} lr={r['lr']} seed "
                                 f"{r['seed']} has {r['config']} for {r['steps']} steps, the first run "
                                 f"{runs[0]['config']} for {runs[0]['steps']}")
            where = f"{part} run {r['optimizer']} lr={r['lr']} seed {r['seed']}"
            if r["diverged"] != (r["val_loss"] is None) or (r["val_loss"] is not None and not _finite(r["val_loss"])):
                raise ValueError(f"{where}: validation loss {r['val_loss']!r} with diverged={r['diverged']}: a "
                                 f"NaN/Inf loss must be recorded as a divergence (val_loss null)")
            losses = r["train_loss"]
            if not losses or not all(_finite(v) for v in losses[:-1]) or not (_finite(losses[-1]) or r["diverged"]):
                raise ValueError(f"{where}: training losses must be finite (only a diverged run ends on a NaN/Inf)")
            if not r["diverged"] and len(losses) != r["steps"]:
                raise ValueError(f"{where}: {len(losses)} training losses for {r['steps']} steps")
        groups: dict[tuple, list] = {}
        for r in runs:
            groups.setdefault((r["optimizer"], r["lr"], r["adam_lr"]), []).append(r["seed"])
        for (name, lr, adam_lr), got in groups.items():
            if sorted(got) != list(range(seeds)):
                raise ValueError(f"{part} {name} lr={lr} adam_lr={adam_lr} ran seeds {sorted(got)}, "
                                 f"the plan has {seeds} (0..{seeds - 1}) once each")
    if record["plan"]["lora_steps"] and not _finite(record.get("lora", {}).get("base_val_loss")):
        raise ValueError("the LoRA part has no finite base validation loss")


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def _part_summary(runs: list[dict]) -> dict:
    configs: dict[str, list] = {}
    by_key: dict[tuple, list] = {}
    for r in sorted(runs, key=lambda r: (r["optimizer"], r["lr"], r["adam_lr"] or 0.0, r["seed"])):
        by_key.setdefault((r["optimizer"], r["lr"], r["adam_lr"]), []).append(r)
    for (name, lr, adam_lr), group in by_key.items():
        values = [r["val_loss"] for r in group]
        entry = {"lr": lr, "adam_lr": adam_lr, "values": values, "diverged": sum(r["diverged"] for r in group)}
        if entry["diverged"] == 0:
            entry["mean"], entry["std"] = _mean_std(values)
        configs.setdefault(name, []).append(entry)
    best: dict[str, dict | None] = {}
    for name, entries in configs.items():
        scored = [e for e in entries if e["diverged"] == 0]
        if not scored:
            best[name] = None
            continue
        top = dict(min(scored, key=lambda e: e["mean"]))
        lrs = sorted({e["lr"] for e in entries})
        top["edge"] = None if len(lrs) < 3 else "lowest" if top["lr"] == lrs[0] else \
            "highest" if top["lr"] == lrs[-1] else None
        curves = [r["train_loss"] for r in by_key[(name, top["lr"], top["adam_lr"])]]
        top["curve_window"], top["curve_mean"], top["curve_std"] = _curve_band(curves)
        best[name] = top
    timing = {}
    for name in configs:
        mine = [r for r in runs if r["optimizer"] == name]
        steady = [r["step_s"] for r in mine]
        timing[name] = {"step_ms": 1e3 * float(np.median(steady)),
                        "step_cpu_ms": 1e3 * float(np.median([r["step_cpu_s"] for r in mine])),
                        "first_step_s": max(r["first_step_s"] for r in mine),
                        "eval_s": float(np.median([r["eval_s"] for r in mine if not r["diverged"]] or [0.0]))}
    pairs = [_paired(a, b, ba, bb) for a, b in PAIRS
             if (ba := best.get(a)) is not None and (bb := best.get(b)) is not None]
    return {"configs": configs, "best": best, "pairs": pairs, "timing": timing, "runs": len(runs)}


def _curve_band(curves: list[list[float]]) -> tuple[int, list[float], list[float]]:
    """``(window, mean, std)``: mean and standard deviation over seeds of the training loss, each smoothed by a
    moving average over ``window = len / 25`` steps."""
    window = max(1, len(curves[0]) // 25)
    weights = np.ones(window) / window
    smooth = np.array([np.convolve(np.asarray(c, float), weights, mode="valid") for c in curves])
    return window, smooth.mean(axis=0).tolist(), smooth.std(axis=0, ddof=1).tolist()


def _paired(a: str, b: str, best_a: dict, best_b: dict) -> dict:
    """``a`` against ``b`` at their best configurations, seed by seed (the same initialization and batches)."""
    diffs = [x - y for x, y in zip(best_a["values"], best_b["values"], strict=True)]
    mean, std = _mean_std(diffs)
    n, wins = len(diffs), sum(d < 0 for d in diffs)
    resolved = wins in (0, n) and abs(mean) > 2 * std / math.sqrt(n)
    if resolved and mean < 0:
        verdict = f"{a} beats {b} on every seed, by {-mean:.4f} ± {std:.4f} nats"
    elif resolved:
        verdict = f"{a} does not beat {b}: {b} is better on every seed, by {mean:.4f} ± {std:.4f} nats"
    else:
        verdict = (f"{a} − {b} = {mean:+.4f} ± {std:.4f} nats ({wins} of {n} seeds favour {a}): not resolved, the "
                   f"difference is within the seed-to-seed spread")
    return {"a": a, "b": b, "diffs": diffs, "mean": mean, "std": std, "wins": wins, "n": n, "resolved": resolved,
            "verdict": verdict}


def summarize(record: dict) -> dict:
    """``{part: summary}`` of a checked record (:func:`check_record`)."""
    return {part: _part_summary([r for r in record["runs"] if r["part"] == part]) for part in PARTS
            if any(r["part"] == part for r in record["runs"])}


def parameter_count(cfg: dict) -> int:
    """Parameters of the study's model for config ``cfg``: embeddings, positions, blocks, final gain, head."""
    d, L, q, kv = cfg["width"], cfg["layers"], cfg["width"] // cfg["heads"] * cfg["heads"], \
        cfg["width"] // cfg["heads"] * cfg["kv_heads"]
    block = 2 * d + 2 * q * d + 2 * kv * d + 8 * d * d
    return 128 * d + cfg["context"] * d + L * block + d + d * 128


# ---- Markdown ---------------------------------------------------------------------------------
def _fmt(entry: dict | None) -> str:
    if entry is None:
        return "every configuration diverged"
    return f"{entry['mean']:.4f} ± {entry['std']:.4f}"


def _findings(part: dict, what: str) -> list[str]:
    lines = []
    ranked = sorted((e["mean"], n) for n, e in part["best"].items() if e is not None)
    if ranked:
        lines.append(f"- Ranking by mean {what} validation loss at each optimizer's best configuration: "
                     + ", ".join(f"{n} {part['best'][n]['mean']:.4f}" for _, n in ranked) + ".")
    for pair in part["pairs"]:
        lines.append(f"- {pair['verdict']}.")
    cm_muon = next((p for p in part["pairs"] if (p["a"], p["b"]) == ("cm", "muon")), None)
    if cm_muon is not None and not (cm_muon["resolved"] and cm_muon["mean"] < 0):
        lines.append("- CM does not win against Muon here" + (" (Muon is better on every seed)."
                                                             if cm_muon["resolved"] else " (no resolved difference)."))
    for name, entry in part["best"].items():
        if entry is None:
            lines.append(f"- {name}: every configuration diverged.")
        elif entry["edge"]:
            lines.append(f"- {name}: the best learning rate {entry['lr']:g} is the {entry['edge']} of its grid; the "
                         f"optimum may lie outside it.")
    diverged = sum(e["diverged"] for entries in part["configs"].values() for e in entries)
    if diverged:
        lines.append(f"- {diverged} run(s) diverged (NaN/Inf loss); their configurations are out of the selection.")
    return lines


def _best_table(part: dict) -> list[str]:
    rows = ["| optimizer | peak lr | AdamW-part lr | val loss (mean ± std) | per seed | steady ms/step (CPU ms) "
            "| first step s |", "|---|---|---|---|---|---|---|"]
    for name, entry in sorted(part["best"].items(), key=lambda kv: kv[1]["mean"] if kv[1] else math.inf):
        t = part["timing"][name]
        if entry is None:
            rows.append(f"| {name} | – | – | diverged | – | {t['step_ms']:.0f} ({t['step_cpu_ms']:.0f}) "
                        f"| {t['first_step_s']:.1f} |")
            continue
        adam = "–" if entry["adam_lr"] is None else f"{entry['adam_lr']:g}"
        seeds = ", ".join(f"{v:.4f}" for v in entry["values"])
        rows.append(f"| {name} | {entry['lr']:g} | {adam} | {_fmt(entry)} | {seeds} | {t['step_ms']:.0f} "
                    f"({t['step_cpu_ms']:.0f}) | {t['first_step_s']:.1f} |")
    return rows


def _grid_table(part: dict) -> list[str]:
    rows = ["| optimizer | peak lr | AdamW-part lr | val loss (mean ± std) | diverged seeds |", "|---|---|---|---|---|"]
    for name, entries in part["configs"].items():
        for e in entries:
            adam = "–" if e["adam_lr"] is None else f"{e['adam_lr']:g}"
            value = _fmt(e) if e["diverged"] == 0 else "–"
            rows.append(f"| {name} | {e['lr']:g} | {adam} | {value} | {e['diverged']} |")
    return rows


def markdown(record: dict, summary: dict) -> str:
    """The study's report in Markdown: set-up, what the numbers show, and every configuration's mean ± std."""
    plan, cfg = record["plan"], record["plan"]["config"]
    head_dim = cfg["width"] // cfg["heads"]
    m = record["machine"]
    text = ["# Training study: AdamW, Muon and Compositional Muon", "",
            f"Model: width {cfg['width']}, {cfg['layers']} layers, {cfg['heads']} query heads sharing "
            f"{cfg['kv_heads']} key/value heads (GQA, head width {head_dim}), MLP width {4 * cfg['width']}, "
            f"{parameter_count(cfg):,} parameters. Data: the Python standard library's `.py` files, "
            f"{record['data']['train_tokens']:,} training and {record['data']['val_tokens']:,} validation characters "
            f"(every tenth file held out). Each run: {plan['steps']} steps of {cfg['batch']} × {cfg['context']} "
            f"characters, warm-up {100 * plan['warmup']:.0f} % then cosine decay to 10 % of the peak; validation loss "
            f"(nats/char) on {plan['eval_batches']} fixed held-out batches after the last step. {plan['seeds']} seeds "
            f"per configuration (a seed fixes the initialization and the batch order, shared by all optimizers); "
            f"learning-rate grid of {plan['grid']} points per optimizer, and {plan['adam_grid']} for the AdamW part "
            f"(embeddings, head, gains) of Muon and CM at their best matrix learning rate.",
            "", f"Whole study: {record['wall_s'] / 60:.1f} min wall time, {record['cpu_s'] / 60:.1f} min CPU time, "
                f"{m['cpus']} CPUs, backend {m['backend']} (JAX {m['jax']}, optax {m['optax']}, Python {m['python']}). "
                f"Steady ms/step excludes the first step (which compiles) and validation.", "",
            "## What the numbers show", "", *_findings(summary["pretrain"], "code"), "",
            "## Best configuration of each optimizer", "", *_best_table(summary["pretrain"]), "",
            "## Every configuration", "", *_grid_table(summary["pretrain"]), ""]
    if "lora" in summary:
        lora, part = record["lora"], summary["lora"]
        text += ["## LoRA fine-tuning", "",
                 f"Base model: the AdamW run of seed {lora['base']['seed']} at AdamW's best learning rate "
                 f"{lora['base']['lr']:g}. Rank-{lora['rank']} adapters `W₀ + B A` (B = 0 at the start) on all six "
                 f"matrices of every layer, the base frozen; fine-tuned for {plan['lora_steps']} steps on the "
                 f"help topics of `pydoc` (English prose, {lora['train_tokens']:,} training and "
                 f"{lora['val_tokens']:,} validation characters, whole topics held out): AdamW-LoRA, Muon-LoRA "
                 f"(`optax.contrib.muon` on A and B apart) and CM-LoRA (the derived half-split LoRA rule). "
                 f"{plan['lora_grid']} learning rates each, {plan['seeds']} seeds (the seed draws A and the batch "
                 f"order). The base model's prose validation loss before fine-tuning: {lora['base_val_loss']:.4f}.", "",
                 *_findings(part, "prose"), "", *_best_table(part), "", *_grid_table(part), ""]
    return "\n".join(text)


# ---- figures ----------------------------------------------------------------------------------
def _plot_part(part: dict, path: Path, title: str, what: str, baseline: float | None = None) -> None:
    fig = Figure(figsize=(11, 4.2))
    ax_curve, ax_grid = fig.subplots(1, 2)
    lows = []
    for i, (name, entry) in enumerate(part["best"].items()):
        color = f"C{i}"
        if entry is not None:
            mean, std = np.asarray(entry["curve_mean"]), np.asarray(entry["curve_std"])
            steps = np.arange(len(mean)) + entry["curve_window"]  # a window's mean is drawn at its last step
            adam = "" if entry["adam_lr"] is None else f", AdamW part {entry['adam_lr']:g}"
            ax_curve.plot(steps, mean, color=color, label=f"{name} (lr {entry['lr']:g}{adam})")
            ax_curve.fill_between(steps, mean - std, mean + std, color=color, alpha=0.25)
            lows += list(mean[len(mean) // 3:])
        adam_lrs = [e["adam_lr"] for e in part["configs"][name]]
        first_stage = max(adam_lrs, key=adam_lrs.count)  # the AdamW-part rate of the whole first grid
        stage = [e for e in part["configs"][name] if e["adam_lr"] == first_stage and e["diverged"] == 0]
        if stage:
            ax_grid.errorbar([e["lr"] for e in stage], [e["mean"] for e in stage], yerr=[e["std"] for e in stage],
                             color=color, marker="o", capsize=3, label=name)
    if baseline is not None:
        ax_grid.axhline(baseline, color="grey", linestyle=":", label="base model, before fine-tuning")
    if lows:
        ax_curve.set_ylim(min(lows) - 0.05, max(lows) + 0.15)
    ax_curve.set(xlabel="step", ylabel="training loss (nats/char), moving average", title=f"{title}: mean ± std")
    ax_grid.set(xscale="log", xlabel=f"peak learning rate ({what})", ylabel="final validation loss (nats/char)",
                title="learning-rate grid: mean ± std over seeds")
    ax_grid.xaxis.set_minor_formatter(NullFormatter())
    for ax in (ax_curve, ax_grid):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(record: dict, summary: dict, out: Path) -> str:
    """Write ``out/study.md``, ``out/study.png`` (and ``out/study_lora.png``); returns the Markdown."""
    text = markdown(record, summary)
    (out / "study.md").write_text(text, encoding="utf-8")
    cfg = record["plan"]["config"]
    _plot_part(summary["pretrain"], out / "study.png",
               f"d={cfg['width']}, {cfg['layers']} layers, {cfg['heads']}/{cfg['kv_heads']} heads", "matrices")
    if "lora" in summary:
        _plot_part(summary["lora"], out / "study_lora.png", f"LoRA rank {record['lora']['rank']} on prose", "adapters",
                   baseline=record["lora"]["base_val_loss"])
    return text
