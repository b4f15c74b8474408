"""Train a small character-level decoder-only transformer on the Python standard library's source.

The corpus and the model are :mod:`numerics.train_model`'s: the ``.py`` files of the running
interpreter's standard library (nothing is downloaded), every tenth file held out for validation, and
a pre-RMSNorm transformer in plain JAX whose attention weights use the stored layouts of the derived
rules. The study with seeds, learning-rate grids, error bands and a LoRA fine-tuning run is
:mod:`numerics.study`; this module is one run, or a one-seed comparison:

    python -m numerics.train --optimizer cm --steps 300            # one run, progress bar
    python -m numerics.train --compare --steps 300 --out results    # every optimizer, LR sweep, PNG + table

Optimizers: ``adamw`` (``optax.adamw``), ``muon`` (``optax.contrib.muon``), ``cm`` (half-split),
``cm-proj`` (half-split, momentum projected onto the horizontal space), ``cm-iso`` and
``cm-iso-proj`` (the isotropic rule). Every optimizer gets the same warm-up-cosine schedule shape;
the peak learning rate multiplies the update outside the jitted step, so a sweep compiles once.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax

from foundation.commandline import (
    OneLineParser,
    UsageError,
    int_option,
    stdout_closed,
    usage_error,
    write_result,
)
from foundation.commandline import progress as progress_bar
from foundation.compute.lapack_threads import lapack_threads
from numerics.optimizer import compositional_muon, parameter_roles, path_name
from numerics.train_model import (
    ADAMW_PARAMS,
    Config,
    attention_pairs,
    batches,
    corpus,
    init_params,
    loss_fn,
    muon_dims,
)

#: peak learning rates swept per optimizer (``--compare``)
SWEEPS = {
    "adamw": (3e-3, 1e-2, 3e-2),
    "muon": (1e-2, 3e-2, 1e-1),
    "cm": (1e-2, 3e-2, 1e-1),
    "cm-proj": (1e-2, 3e-2, 1e-1),
    "cm-iso": (1e-2, 3e-2, 1e-1),
    "cm-iso-proj": (1e-2, 3e-2, 1e-1),
}
OPTIMIZERS = tuple(SWEEPS)
#: the ranges of the integer options of ``python -m numerics.train`` and ``python -m numerics.study`` (checked by
#: :func:`foundation.commandline.int_option`, so a value outside is one line and exit 2, never a crash inside
#: optax, NumPy or JAX): steps per run, model sizes, and the seeds NumPy's generator takes
MAX_STEPS = 10**6
MAX_WIDTH = 2**16
MAX_HEADS = 2**12
MAX_LAYERS = 2**10
MAX_SEED = 2**32 - 1
#: the Compositional Muon variants: ``(qk_rule, gauge)``
CM_VARIANTS: dict[str, tuple[Literal["half_split", "isotropic"], Literal["none", "horizontal_projection"]]] = {
    "cm": ("half_split", "none"), "cm-proj": ("half_split", "horizontal_projection"),
               "cm-iso": ("isotropic", "none"), "cm-iso-proj": ("isotropic", "horizontal_projection")}


# ---- optimizers -----------------------------------------------------------------------------
def make_optimizer(name: str, cfg: Config, schedule: optax.Schedule, adam_schedule: optax.Schedule | None = None,
                   *, check_finite: bool = True) -> optax.GradientTransformation:
    """The optimizer ``name`` with learning rate ``schedule`` (peak 1: the sweep scales it); the AdamW part of
    Muon and CM (embeddings, output head, gains) runs on ``adam_schedule`` (default ``0.1 × schedule``).
    ``check_finite=False``: CM skips a step with a NaN/Inf gradient instead of raising (a diverged run)."""
    adam = adam_schedule if adam_schedule is not None else (lambda c: 0.1 * schedule(c))
    if name == "adamw":
        return optax.adamw(schedule, weight_decay=0.0)
    if name == "muon":
        return optax.contrib.muon(schedule, adam_learning_rate=adam, muon_weight_dimension_numbers=muon_dims)
    if name not in CM_VARIANTS:
        raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")
    rule, gauge = CM_VARIANTS[name]
    return compositional_muon(schedule, pairs=attention_pairs(cfg), qk_rule=rule, gauge=gauge,
                              adamw_params=_to_adamw, adam_learning_rate=adam, check_finite=check_finite)


def _to_adamw(path: str, x) -> bool:
    return path in ADAMW_PARAMS


def adamw_part(name: str, cfg: Config, params: dict) -> dict:
    """A pytree of bools like ``params``: ``True`` where the optimizer ``name`` updates the leaf with its AdamW part
    (embeddings, head, gains of Muon and CM); all ``False`` for AdamW itself (one learning rate)."""
    if name == "adamw":
        return jax.tree.map(lambda x: False, params)
    if name == "muon":
        return jax.tree.map(lambda x, d: d is None, params, muon_dims(params))
    roles = parameter_roles(params, attention_pairs(cfg), _to_adamw)
    return jax.tree_util.tree_map_with_path(lambda path, x: roles[path_name(path)] == "adam", params)


def make_scaled_step(opt: optax.GradientTransformation, loss: Callable, adam_mask) -> Callable:
    """``step(params, state, inputs, targets, lr, adam_lr, aux) -> (params, state, loss)``, jitted: the update of
    a leaf where ``adam_mask`` is ``True`` is scaled by ``adam_lr``, every other by ``lr``. Both are traced (a
    learning-rate grid compiles once); ``loss(params, inputs, targets, aux)`` (``aux``: frozen weights or None)."""

    def step(params, state, inputs, targets, lr, adam_lr, aux):
        value, grads = jax.value_and_grad(loss)(params, inputs, targets, aux)
        updates, state = opt.update(grads, state, params)
        params = jax.tree.map(lambda p, u, m: p + (adam_lr if m else lr) * u, params, updates, adam_mask)
        return params, state, value

    return jax.jit(step)


# ---- training -------------------------------------------------------------------------------
@dataclass
class RunResult:
    optimizer: str
    learning_rate: float
    steps: list
    val_loss: list
    train_loss: float
    seconds: float


def make_step(opt: optax.GradientTransformation, cfg: Config) -> Callable:
    """One jitted step; the peak learning rate ``lr`` is a traced argument (one compilation)."""

    def step(params, state, inputs, targets, lr):
        loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets, cfg)
        updates, state = opt.update(grads, state, params)
        params = jax.tree.map(lambda p, u: p + lr * u, params, updates)
        return params, state, loss

    return jax.jit(step)


@functools.cache
def _eval_fn(cfg: Config):
    return jax.jit(lambda p, x, y: loss_fn(p, x, y, cfg))


def lr_schedule(steps: int, warmup_steps: int) -> optax.Schedule:
    """The learning-rate shape every run shares (peak 1: the traced learning rate scales it): linear warm-up
    from 0 over ``warmup_steps``, then cosine decay to 10 % of the peak at ``steps``. The warm-up is cut to
    ``steps - 1`` so the cosine always has a step: a one-step run takes the peak (optax's cosine refuses
    ``decay_steps = 0``), and a run of ``steps >= 2`` is unchanged by the cut."""
    warmup = min(warmup_steps, steps - 1)
    return optax.warmup_cosine_decay_schedule(0.0, 1.0, warmup, steps, 0.1)


def evaluate(params: dict, val_batches: list[tuple[np.ndarray, np.ndarray]], cfg: Config) -> float:
    """Mean validation loss over fixed batches (one compilation per configuration)."""
    fn = _eval_fn(cfg)
    return float(np.mean([fn(params, x, y) for x, y in val_batches]))


def train(name: str, lr: float, steps: int, cfg: Config, data: tuple[np.ndarray, np.ndarray], *, seed: int = 0,
          eval_every: int = 25, eval_batches: int = 8, progress: bool = True,
          step_fn: Callable | None = None) -> RunResult:
    """Train ``steps`` steps; validation loss every ``eval_every`` steps and at the end."""

    train_tokens, val_tokens = data
    opt = make_optimizer(name, cfg, lr_schedule(steps, max(1, steps // 10)))
    params = init_params(cfg, seed)
    state = opt.init(params)
    step = step_fn or make_step(opt, cfg)
    val_gen = batches(val_tokens, cfg, seed=1234)
    val_batches = [next(val_gen) for _ in range(eval_batches)]
    gen = batches(train_tokens, cfg, seed)
    xs, vs, loss = [], [], float("nan")
    t0 = time.perf_counter()
    bar = progress_bar(range(1, steps + 1), desc=f"{name} lr={lr:g}", quiet=not progress)
    for i in bar:
        x, y = next(gen)
        params, state, loss = step(params, state, x, y, jnp.float32(lr))
        if i % eval_every == 0 or i == steps:
            loss = float(loss)
            if not math.isfinite(loss):
                vs.append(float("nan"))
                xs.append(i)
                break
            xs.append(i)
            vs.append(evaluate(params, val_batches, cfg))
            bar.set_postfix(train=f"{loss:.3f}", val=f"{vs[-1]:.3f}")
    return RunResult(name, lr, xs, vs, float(loss), time.perf_counter() - t0)


def compare(steps: int, cfg: Config, out: Path, optimizers: Sequence[str] = OPTIMIZERS,
            progress: bool = True) -> dict:
    """Every optimizer at every swept learning rate; the best final validation loss of each."""
    data = corpus()
    runs = []
    for name in optimizers:
        opt = make_optimizer(name, cfg, lr_schedule(steps, max(1, steps // 10)))
        step = make_step(opt, cfg)  # compiled once per optimizer
        for lr in SWEEPS[name]:
            runs.append(train(name, lr, steps, cfg, data, step_fn=step, progress=progress))
            r = runs[-1]
            print(f"{name:<12} lr={lr:<7g} final val {r.val_loss[-1]:.4f}  ({r.seconds:.0f} s)", flush=True)
    best: dict[str, tuple[float, RunResult]] = {}
    for r in runs:
        final = r.val_loss[-1] if r.val_loss and math.isfinite(r.val_loss[-1]) else float("inf")
        if r.optimizer not in best or final < best[r.optimizer][0]:
            best[r.optimizer] = (final, r)
    out.mkdir(parents=True, exist_ok=True)
    _plot(best, out / "train_comparison.png", steps, cfg)
    table = _table(best, runs, steps, cfg)
    (out / "train_comparison.md").write_text(table, encoding="utf-8")
    (out / "train_comparison.json").write_text(json.dumps(
        {"config": asdict(cfg), "steps": steps, "runs": [asdict(r) for r in runs]}, indent=1), encoding="utf-8")
    print(table)
    return best


def _plot(best, path: Path, steps: int, cfg: Config):
    import matplotlib  # lazy: only the plot needs matplotlib, a slow import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after choosing the backend
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, (_, r) in best.items():
        ax.plot(r.steps, r.val_loss, label=f"{name} (lr {r.learning_rate:g})")
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_title(f"char-level LM on the Python stdlib, d={cfg.width}, {cfg.layers} layers, {cfg.heads} heads")
    ax.legend()
    ax.grid(alpha=0.3)
    finals = [v for _, r in best.values() for v in r.val_loss[len(r.val_loss) // 3:] if math.isfinite(v)]
    if finals:
        ax.set_ylim(min(finals) - 0.05, max(finals) + 0.1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _table(best, runs, steps, cfg) -> str:
    rows = ["| optimizer | best peak lr | final val loss | swept (lr: final val) | seconds per run |",
            "|---|---|---|---|---|"]
    for name, (final, r) in sorted(best.items(), key=lambda kv: kv[1][0]):
        swept = ", ".join(f"{x.learning_rate:g}: {x.val_loss[-1]:.3f}" for x in runs if x.optimizer == name)
        rows.append(f"| {name} | {r.learning_rate:g} | {final:.4f} | {swept} | {r.seconds:.0f} |")
    return (f"{steps} steps, batch {cfg.batch} × {cfg.context} characters, width {cfg.width}, "
            f"{cfg.layers} layers, {cfg.heads} heads ({cfg.kv_heads} kv)\n\n" + "\n".join(rows) + "\n")


# ---- command line ---------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """Command line: train one optimizer (``--optimizer``) or compare all (``--compare``); returns the exit status."""
    prog = "numerics.train"
    if stdout_closed(prog):  # >&-: one line and exit 2, not a silent run
        return 2
    p = OneLineParser(prog="python -m numerics.train", description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="examples:\n  python -m numerics.train --optimizer cm --steps 300\n"
                             "  python -m numerics.train --compare --steps 300 --out results")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--optimizer", choices=OPTIMIZERS, help="train once with this optimizer")
    what.add_argument("--compare", action="store_true", help="every optimizer, learning-rate sweep, PNG + table")
    p.add_argument("--steps", type=int_option(1, MAX_STEPS, "a step count"), default=300,
                   help=f"training steps, 1 to {MAX_STEPS:,} (default 300)")
    p.add_argument("--lr", type=float, help="peak learning rate (default: the middle of the optimizer's sweep)")
    p.add_argument("--out", default="results", help="--compare: output folder (default results)")
    p.add_argument("--width", type=int_option(1, MAX_WIDTH, "a width"), default=64,
                   help=f"model width, 1 to {MAX_WIDTH:,}, a multiple of --heads (default 64)")
    p.add_argument("--heads", type=int_option(1, MAX_HEADS, "a head count"), default=4,
                   help=f"attention heads, 1 to {MAX_HEADS:,} (default 4)")
    p.add_argument("--kv-heads", type=int_option(1, MAX_HEADS, "a head count"), default=None,
                   help="key/value heads, dividing --heads (default: --heads)")
    p.add_argument("--layers", type=int_option(1, MAX_LAYERS, "a layer count"), default=2,
                   help=f"1 to {MAX_LAYERS:,} (default 2)")
    p.add_argument("--seed", type=int_option(0, MAX_SEED, "a seed"), default=0,
                   help=f"0 to {MAX_SEED:,} (default 0)")
    try:
        args = p.parse_args(argv)
        kv = args.heads if args.kv_heads is None else args.kv_heads
        if args.width % args.heads:
            raise UsageError(f"--width {args.width} must be a positive multiple of --heads {args.heads}")
        if args.heads % kv:
            raise UsageError(f"argument --kv-heads: {kv} must divide --heads {args.heads}")
        if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
            raise UsageError(f"argument --lr: must be finite and > 0, got {args.lr}")
        if args.compare and os.path.isfile(args.out):
            raise UsageError(f"argument --out: {args.out} is a file")
    except UsageError as exc:
        return usage_error(prog, exc)
    cfg = Config(width=args.width, heads=args.heads, kv_heads=kv, layers=args.layers)
    lapack_threads(1)  # small per-head eigh: one OpenBLAS thread (see foundation.compute.lapack_threads)
    if args.compare:
        compare(args.steps, cfg, Path(args.out))
        return 0
    lr = args.lr if args.lr is not None else SWEEPS[args.optimizer][1]
    r = train(args.optimizer, lr, args.steps, cfg, corpus(), seed=args.seed)
    return write_result(prog, f"{r.optimizer} lr={lr:g}: final train loss {r.train_loss:.4f}, validation loss "
                              f"{r.val_loss[-1]:.4f} after {args.steps} steps ({r.seconds:.1f} s)\n", 0)


if __name__ == "__main__":
    sys.exit(main())
