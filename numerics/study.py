"""The training study: AdamW, Muon and Compositional Muon on a GQA character model, with seeds and grids.

``python -m numerics.study`` trains :mod:`numerics.train_model`'s transformer (default: width 256,
4 layers, 8 query heads sharing 2 key/value heads, head width 32) on the standard library's ``.py``
files and writes ``results/study.{json,md,png}`` (and ``study_lora.png``). Design:

1. **Learning-rate grid.** Every optimizer runs a geometric grid of peak learning rates (``--grid 5``
   points, factor 2 apart) with every seed (``--seeds 3``). A seed fixes the initialization and the
   order of the training batches, the same for every optimizer, so runs of one seed are paired.
2. **The AdamW part of Muon and CM** (embeddings, output head, RMSNorm gains) is swept at each one's
   best matrix learning rate: ``--adam-grid 3`` points a factor 3 apart around ``ADAM_CENTER`` (the
   value the first stage used), every seed. Cost: ``(adam_grid − 1) × seeds`` runs per optimizer, so
   the default study is ``3 × 5 × 3 + 2 × 2 × 3 = 57`` training runs. A joint grid would cost 15 × 3 per
   optimizer, as much as the whole first stage again.
3. **Selection.** A configuration's score is its final validation loss (``--eval-batches 32`` fixed
   batches from the held-out files), averaged over the seeds; the best configuration of each optimizer
   is the one with the lowest mean, and a configuration with a diverged seed is out. Results are
   mean ± sample standard deviation over seeds, and the paired per-seed differences between optimizers.
4. **Timing.** The first step of a run (the compilation, for the first run of an optimizer) is timed
   apart from the steady-state steps; validation is timed apart too.
5. **LoRA** (``--lora-steps``, default half of ``--steps``; 0 skips it): the AdamW run of seed 0 at
   AdamW's best learning rate is the base model; rank-``--lora-rank`` adapters on all six matrices of
   every layer are fine-tuned on ``pydoc``'s help topics (English prose, disjoint from the code) with
   AdamW, ``optax.contrib.muon`` and CM's LoRA rule (``derivations.lora``, half-split with damping)
   (those of them in ``--optimizers``), a ``--lora-grid 3`` learning-rate grid (factor 3) and every seed.

Budget: 90 steps of 8 × 64 characters per run (LoRA: 45), so 57 pretraining and 27 LoRA runs. Measured
CPU time per steady step on the project's 2-core machine: AdamW 0.21 s, Muon 0.43 s, CM 0.45 s (the
Newton–Schulz iterations cost more than the gradient at this batch), LoRA 0.23 s; about 40 minutes of CPU
time in all, compilation and validation included. XLA runs a step on both cores (1.8 times less wall time
than CPU time when they are free), so the study takes about 22–27 minutes on the idle machine, and longer
while other jobs share it (``--steps 70`` cuts it by a fifth). Progress lines show the time left.

``--scale S`` multiplies the width and the step counts by ``S`` (heads stay 8 and 2: the head width
grows to ``32·S``), for an accelerator. ``--report FILE.json`` rewrites the Markdown and the PNGs from
a stored record without training.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from foundation.commandline import (
    FileRefused,
    OneLineParser,
    UsageError,
    error_line,
    int_option,
    read_json_file,
    stdout_closed,
    usage_error,
)
from foundation.compute.lapack_threads import lapack_threads
from numerics.optimizer import compositional_muon
from numerics.study_report import check_record, summarize, write_report
from numerics.train import (
    MAX_HEADS,
    MAX_LAYERS,
    MAX_STEPS,
    MAX_WIDTH,
    OPTIMIZERS,
    adamw_part,
    lr_schedule,
    make_optimizer,
    make_scaled_step,
)
from numerics.train_model import (
    Config,
    corpus,
    fixed_batches,
    init_lora,
    init_params,
    lora_loss_fn,
    lora_muon_dims,
    lora_pairs,
    loss_fn,
    prose_corpus,
)
from numerics.train_model import batches as train_batches

#: the study's model: width 256, 4 layers, 8 query heads, 2 kv heads (head width 32)
DEFAULT_CONFIG = Config(width=256, heads=8, kv_heads=2, layers=4, context=64, batch=8)
DEFAULT_STEPS = 90
#: the ranges of the study's own integer options (the model's and the steps' are numerics.train's)
MAX_SEEDS = 1000
MAX_GRID = 100
MAX_SCALE = 64
MAX_CONTEXT = 2**16
MAX_BATCH = 2**16
#: the largest study record ``--report`` reads (a default study writes about 80 kB)
MAX_RECORD_BYTES = 64 * 2**20
#: the middle of each optimizer's learning-rate grid (points a factor ``LR_FACTOR`` apart)
CENTERS = {"adamw": 2e-3, "muon": 0.02, "cm": 0.02, "cm-proj": 0.02, "cm-iso": 0.02, "cm-iso-proj": 0.02}
LR_FACTOR = 2.0
#: the AdamW part of Muon and CM: its learning rate in the first stage, and its grid's factor
ADAM_CENTER = 4e-3
ADAM_FACTOR = 3.0
#: the LoRA fine-tuning optimizers and the middle of their grids (points a factor ``LORA_FACTOR`` apart)
LORA_CENTERS = {"adamw": 0.01, "muon": 0.03, "cm": 0.09}
LORA_FACTOR = 3.0


def grid(center: float, points: int, factor: float) -> tuple[float, ...]:
    """``points`` learning rates ``center · factor^k``, ``k`` centred on 0, rounded to 3 significant digits."""
    return tuple(float(f"{center * factor ** (k - (points - 1) / 2):.3g}") for k in range(points))


@dataclass(frozen=True)
class Plan:
    """What the study runs (recorded with its results)."""

    config: Config = DEFAULT_CONFIG
    steps: int = DEFAULT_STEPS
    seeds: int = 3
    optimizers: tuple[str, ...] = ("adamw", "muon", "cm")
    grid: int = 5
    adam_grid: int = 3
    eval_batches: int = 32
    lora_steps: int = DEFAULT_STEPS // 2
    lora_rank: int = 8
    lora_grid: int = 3
    scale: int = 1
    warmup: float = 0.1

    def learning_rates(self, name: str) -> tuple[float, ...]:
        return grid(CENTERS[name], self.grid, LR_FACTOR)

    def adam_rates(self) -> tuple[float, ...]:
        return grid(ADAM_CENTER, self.adam_grid, ADAM_FACTOR)

    def lora_rates(self, name: str) -> tuple[float, ...]:
        return grid(LORA_CENTERS[name], self.lora_grid, LORA_FACTOR)

    def run_count(self) -> tuple[int, int]:
        """``(pretraining runs, LoRA runs)``."""
        extra = len([a for a in self.adam_rates() if a != ADAM_CENTER])
        pre = sum(self.seeds * (self.grid + (extra if name != "adamw" else 0)) for name in self.optimizers)
        return pre, (len(self.lora_optimizers()) * self.lora_grid * self.seeds if self.lora_steps else 0)

    def lora_optimizers(self) -> tuple[str, ...]:
        """The LoRA fine-tuning optimizers: those of ``optimizers`` among AdamW, Muon and CM."""
        return tuple(n for n in LORA_CENTERS if n in self.optimizers)


@dataclass
class Run:
    """One training run: its configuration, per-step training loss and final validation loss."""

    part: str  # "pretrain" or "lora"
    optimizer: str
    lr: float
    adam_lr: float | None
    seed: int
    config: dict
    steps: int
    train_loss: list = field(default_factory=list)
    val_loss: float | None = None
    diverged: bool = False
    first_step_s: float = 0.0
    step_s: float = 0.0
    step_cpu_s: float = 0.0
    eval_s: float = 0.0


def schedule(steps: int, warmup: float) -> optax.Schedule:
    """The shape every run shares (peak 1: the traced learning rate scales it): linear warm-up, cosine to 10 %."""
    return lr_schedule(steps, max(1, int(steps * warmup)))


class Evaluator:
    """Mean loss over fixed batches; one jitted function per loss."""

    def __init__(self, loss: Callable, val_batches: list):
        self.fn = jax.jit(loss)
        self.val_batches = val_batches

    def __call__(self, params, aux) -> float:
        return float(np.mean([self.fn(params, x, y, aux) for x, y in self.val_batches]))


def train_run(run: Run, step: Callable, opt: optax.GradientTransformation, params, tokens: np.ndarray, cfg: Config,
              evaluate: Evaluator, aux=None):
    """Train ``run.steps`` steps from ``params`` (filling ``run`` in place); returns the final parameters.

    The loss is read after every step: a NaN/Inf loss stops the run as diverged (so does a non-finite
    validation loss). The first step is timed alone (it compiles, for the first run of a jitted step);
    the steady-state time per step is the mean over the others, validation excluded."""
    state = opt.init(params)
    gen = train_batches(tokens, cfg, run.seed)
    lr, adam_lr = jnp.float32(run.lr), jnp.float32(run.adam_lr if run.adam_lr is not None else run.lr)
    t0 = time.perf_counter()
    x, y = next(gen)
    params, state, loss = step(params, state, x, y, lr, adam_lr, aux)
    run.train_loss.append(float(loss))
    run.first_step_s = time.perf_counter() - t0
    t1, c1 = time.perf_counter(), time.process_time()
    while len(run.train_loss) < run.steps and math.isfinite(run.train_loss[-1]):
        x, y = next(gen)
        params, state, loss = step(params, state, x, y, lr, adam_lr, aux)
        run.train_loss.append(float(loss))
    n = max(1, len(run.train_loss) - 1)
    run.step_s, run.step_cpu_s = (time.perf_counter() - t1) / n, (time.process_time() - c1) / n
    run.diverged = not all(math.isfinite(v) for v in run.train_loss)
    if not run.diverged:
        t2 = time.perf_counter()
        val = evaluate(params, aux)
        run.eval_s = time.perf_counter() - t2
        run.diverged = not math.isfinite(val)
        run.val_loss = None if run.diverged else val
    run.train_loss = [round(v, 5) if math.isfinite(v) else None for v in run.train_loss]
    return params


def best_config(runs: list[Run], optimizer: str) -> tuple[float, float | None] | None:
    """``(lr, adam_lr)`` of ``optimizer``'s configuration with the lowest mean validation loss over seeds
    (a configuration with a diverged seed is out); ``None`` when every one diverged."""
    groups: dict[tuple, list] = {}
    for r in runs:
        if r.optimizer == optimizer:
            groups.setdefault((r.lr, r.adam_lr), []).append(r.val_loss)
    scored = [(float(np.mean(v)), k) for k, v in groups.items() if None not in v]
    return min(scored)[1] if scored else None


class Progress:
    """One line per finished run, with the elapsed time and an estimate of what is left."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.done, self.quiet, self.start = total, 0, quiet, time.perf_counter()

    def __call__(self, run: Run) -> None:
        self.done += 1
        if self.quiet:
            return
        elapsed = time.perf_counter() - self.start
        left = elapsed / self.done * (self.total - self.done)
        val = "diverged" if run.diverged else f"val {run.val_loss:.4f}"
        adam = f" adam_lr={run.adam_lr:g}" if run.adam_lr is not None else ""
        print(f"[{self.done}/{self.total}] {run.part} {run.optimizer} lr={run.lr:g}{adam} seed {run.seed}: {val}, "
              f"{1e3 * run.step_s:.0f} ms/step (first step {run.first_step_s:.1f} s); "
              f"{elapsed / 60:.1f} min elapsed, ~{left / 60:.1f} min left", flush=True)


def pretrain(plan: Plan, data: tuple[np.ndarray, np.ndarray], progress: Progress) -> tuple[list[Run], dict]:
    """Both stages for every optimizer; returns the runs and AdamW's seed-0 final parameters by learning rate."""
    cfg, runs, adamw_params = plan.config, [], {}
    evaluate = Evaluator(lambda p, x, y, aux: loss_fn(p, x, y, cfg), fixed_batches(data[1], cfg, plan.eval_batches))
    for name in plan.optimizers:
        opt = make_optimizer(name, cfg, schedule(plan.steps, plan.warmup),
                             adam_schedule=schedule(plan.steps, plan.warmup), check_finite=False)
        init = init_params(cfg, 0)
        step = make_scaled_step(opt, lambda p, x, y, aux: loss_fn(p, x, y, cfg), adamw_part(name, cfg, init))
        adam = None if name == "adamw" else ADAM_CENTER
        configs = [(lr, adam) for lr in plan.learning_rates(name)]
        while configs:
            for lr, adam_lr in configs:
                for seed in range(plan.seeds):
                    run = Run("pretrain", name, lr, adam_lr, seed, asdict(cfg), plan.steps)
                    final = train_run(run, step, opt, init_params(cfg, seed), data[0], cfg,
                                      evaluate)
                    if name == "adamw" and seed == 0:
                        adamw_params[lr] = final
                    runs.append(run)
                    progress(run)
            best = best_config(runs, name)
            done = {(r.lr, r.adam_lr) for r in runs if r.optimizer == name}
            configs = [] if best is None or adam is None else \
                [(best[0], a) for a in plan.adam_rates() if (best[0], a) not in done]
    return runs, adamw_params


def make_lora_optimizer(name: str, sched: optax.Schedule) -> optax.GradientTransformation:
    """AdamW-LoRA, Muon-LoRA (``optax.contrib.muon`` on ``A`` and ``B`` apart) or CM-LoRA (the derived pair rule)."""
    if name == "adamw":
        return optax.adamw(sched, weight_decay=0.0)
    if name == "muon":
        return optax.contrib.muon(sched, muon_weight_dimension_numbers=lora_muon_dims)
    if name == "cm":
        return compositional_muon(sched, pairs=lora_pairs, check_finite=False)
    raise ValueError(f"unknown LoRA optimizer {name!r}; choose from {', '.join(LORA_CENTERS)}")


def finetune(plan: Plan, base, progress: Progress) -> tuple[list[Run], dict]:
    """LoRA on the prose set from ``base``; returns the runs and the base model's prose validation loss."""
    cfg = plan.config
    train_tokens, val_tokens = prose_corpus()

    def loss(lora, x, y, base):
        return lora_loss_fn(lora, base, x, y, cfg)

    evaluate = Evaluator(loss, fixed_batches(val_tokens, cfg, plan.eval_batches))
    zero = init_lora(cfg, plan.lora_rank, 0)
    info = {"base_val_loss": evaluate(zero, base), "rank": plan.lora_rank, "train_tokens": int(train_tokens.size),
            "val_tokens": int(val_tokens.size)}
    runs = []
    for name in plan.lora_optimizers():
        opt = make_lora_optimizer(name, schedule(plan.lora_steps, plan.warmup))
        step = make_scaled_step(opt, loss, jax.tree.map(lambda x: False, zero))
        for lr in plan.lora_rates(name):
            for seed in range(plan.seeds):
                run = Run("lora", name, lr, None, seed, asdict(cfg), plan.lora_steps)
                train_run(run, step, opt, init_lora(cfg, plan.lora_rank, 1000 + seed),
                          train_tokens, cfg, evaluate, aux=base)
                runs.append(run)
                progress(run)
    return runs, info


def study(plan: Plan, out: Path, quiet: bool = False) -> dict:
    """Run the whole study and write ``out/study.{json,md,png}`` and ``out/study_lora.png``; returns the record."""
    wall, cpu = time.perf_counter(), time.process_time()
    data = corpus(max_bytes=1 << 40)  # every file
    progress = Progress(sum(plan.run_count()), quiet)
    runs, adamw_params = pretrain(plan, data, progress)
    lora: dict = {}
    if plan.lora_steps:
        best = best_config(runs, "adamw")
        if best is None:  # every AdamW run diverged: no base model
            raise RuntimeError("every AdamW run diverged: no base model for the LoRA fine-tuning")
        lora_runs, lora = finetune(plan, adamw_params[best[0]], progress)
        lora["base"] = {"optimizer": "adamw", "lr": best[0], "seed": 0}
        runs += lora_runs
    record = {"plan": {**asdict(plan), "optimizers": list(plan.optimizers)}, "runs": [asdict(r) for r in runs],
              "lora": lora, "data": {"train_tokens": int(data[0].size), "val_tokens": int(data[1].size)},
              "machine": {"cpus": os.cpu_count(), "backend": jax.default_backend(), "python": platform.python_version(),
                          "jax": jax.__version__, "optax": optax.__version__},
              "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(json.dumps(record, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    check_record(record)  # after writing: a refused record stays on disk to be looked at
    text = write_report(record, summarize(record), out)
    if not quiet:
        print(text)
    return record


# ---- command line ---------------------------------------------------------------------------
def _parser() -> OneLineParser:
    p = OneLineParser(prog="python -m numerics.study", description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="examples:\n  python -m numerics.study                       # the default study\n"
                             "  python -m numerics.study --steps 20 --seeds 2 --grid 2 --out /tmp/dry   # a dry run\n"
                             "  python -m numerics.study --scale 4 --out results/scale4   # on an accelerator\n"
                             "  python -m numerics.study --report results/study.json   # Markdown + PNG again")
    d = DEFAULT_CONFIG
    def count(name, low, high, default, what, help_text=""):
        p.add_argument(name, type=int_option(low, high, what), default=default,
                       help=f"{help_text}{', ' if help_text else ''}{low} to {high:,} (default {default})")

    count("--steps", 2, MAX_STEPS, DEFAULT_STEPS, "a step count", "steps per run")
    count("--seeds", 2, MAX_SEEDS, 3, "a seed count", "seeds per configuration")
    count("--grid", 1, MAX_GRID, 5, "a grid size", "learning rates per optimizer")
    count("--adam-grid", 1, MAX_GRID, 3, "a grid size", "learning rates of Muon's and CM's AdamW part")
    p.add_argument("--optimizers", default="adamw,muon,cm", help=f"comma-separated, from {','.join(OPTIMIZERS)}")
    count("--eval-batches", 1, MAX_BATCH, 32, "a batch count", "validation batches")
    p.add_argument("--lora-steps", type=int_option(0, MAX_STEPS, "a step count"), default=None,
                   help=f"LoRA fine-tuning steps, 0 (none) or 2 to {MAX_STEPS:,} (default steps/2)")
    count("--lora-rank", 1, MAX_WIDTH, 8, "a rank", "LoRA rank")
    count("--lora-grid", 1, MAX_GRID, 3, "a grid size", "learning rates per LoRA optimizer")
    count("--scale", 1, MAX_SCALE, 1, "a scale", "multiply the width and the steps")
    count("--width", 1, MAX_WIDTH, d.width, "a width")
    count("--layers", 1, MAX_LAYERS, d.layers, "a layer count")
    count("--heads", 1, MAX_HEADS, d.heads, "a head count")
    count("--kv-heads", 1, MAX_HEADS, d.kv_heads, "a head count")
    count("--context", 2, MAX_CONTEXT, d.context, "a length", "characters per sequence")
    count("--batch", 1, MAX_BATCH, d.batch, "a batch size", "sequences per step")
    p.add_argument("--out", default="results", help="output folder (default results)")
    p.add_argument("--report", metavar="JSON", help="rewrite the Markdown and PNGs from this record; no training")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def plan_from_args(args: argparse.Namespace) -> Plan:
    """The :class:`Plan` of parsed arguments; :class:`UsageError` (one line) when one is out of range."""
    # every integer option is in its range already (int_option, in _parser)
    names = tuple(args.optimizers.split(","))
    unknown = [n for n in names if n not in OPTIMIZERS]
    if unknown or len(set(names)) != len(names):
        raise UsageError(f"argument --optimizers: {args.optimizers!r} must name distinct optimizers from "
                         f"{', '.join(OPTIMIZERS)}")
    width, steps = args.width * args.scale, args.steps * args.scale
    if width % args.heads:
        raise UsageError(f"argument --width: {width} (with --scale {args.scale}) must be a multiple of --heads "
                         f"{args.heads}")
    if args.heads % args.kv_heads:
        raise UsageError(f"argument --kv-heads: {args.kv_heads} must divide --heads {args.heads}")
    lora_steps = steps // 2 if args.lora_steps is None else args.lora_steps * args.scale
    if lora_steps == 1:
        given = (f"got {args.lora_steps}" if args.lora_steps is not None else
                 f"the default (steps/2) is 1 with --steps {args.steps}; give --lora-steps 0 or more --steps")
        raise UsageError(f"argument --lora-steps: must be 0 (no LoRA) or >= 2, {given}")
    if lora_steps and "adamw" not in names:
        raise UsageError("argument --optimizers: the LoRA part needs adamw (its base model); add it or --lora-steps 0")
    cfg = Config(width=width, heads=args.heads, kv_heads=args.kv_heads, layers=args.layers, context=args.context,
                 batch=args.batch)
    if args.lora_rank > min(cfg.head_dim * cfg.kv_heads, width):
        raise UsageError(f"argument --lora-rank: {args.lora_rank} exceeds the smallest adapted dimension "
                         f"{min(cfg.head_dim * cfg.kv_heads, width)}")
    return replace(Plan(), config=cfg, steps=steps, seeds=args.seeds, optimizers=names, grid=args.grid,
                   adam_grid=args.adam_grid, eval_batches=args.eval_batches, lora_steps=lora_steps,
                   lora_rank=args.lora_rank, lora_grid=args.lora_grid, scale=args.scale)


def main(argv: list[str] | None = None) -> int:
    """Command line: run the study (or ``--report`` a stored one); returns the exit status."""
    prog = "numerics.study"
    if stdout_closed(prog):
        return 2
    try:
        args = _parser().parse_args(argv)
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise UsageError(f"argument --out: {args.out!r} exists and is not a folder")
        if args.report is not None:
            return _report(prog, args.report, Path(args.out))
        plan = plan_from_args(args)
    except UsageError as exc:
        return usage_error(prog, exc)
    lapack_threads(1)  # small per-head eigh: one OpenBLAS thread (see foundation.compute.lapack_threads)
    pre, lora = plan.run_count()
    if not args.quiet:
        print(f"study: {pre} pretraining runs of {plan.steps} steps, {lora} LoRA runs of {plan.lora_steps} steps; "
              f"model {plan.config}", flush=True)
    try:
        study(plan, Path(args.out), quiet=args.quiet)
    except (RuntimeError, ValueError, OSError) as exc:  # no base model, a refused record, a full disk
        error_line(prog, str(exc))
        return 1
    return 0


def _report(prog: str, path: str, out: Path) -> int:
    """``--report``: the Markdown and PNGs of a stored record (refused in one line when it is not a valid one)."""
    try:
        record = read_json_file(path, MAX_RECORD_BYTES, "argument --report")
    except FileRefused as exc:
        raise UsageError(str(exc)) from None
    try:
        check_record(record)
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"argument --report: {path!r} is not a study record: {exc}") from None
    out.mkdir(parents=True, exist_ok=True)
    print(write_report(record, summarize(record), out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
