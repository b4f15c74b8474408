"""Train a small character-level decoder-only transformer on the Python standard library's source.

The corpus is the ``.py`` files of the running interpreter's standard library (every machine that
runs this has it; nothing is downloaded): files sorted by path, every tenth one held out for
validation, bytes above 127 mapped to one token. The model is plain JAX: token and position
embeddings, ``layers`` pre-RMSNorm blocks (causal multi-head attention with optional grouped
key/value heads, a GELU MLP of width ``4d``) stacked on a leading axis, a final norm and an
untied output head. Attention weights use the stored layouts of the derived rules:
``W_Q (L, d, H·d_h)``, ``W_K (L, d, H_kv·d_h)``, ``W_O (L, d, H·d_h)``, ``W_V (L, H_kv·d_h, d)``.

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
import sysconfig
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from optax.contrib import MuonDimensionNumbers
from tqdm.auto import tqdm

from derivations.commandline import OneLineParser, UsageError, stdout_closed, usage_error, write_result
from numerics.kernels.lapack_threads import lapack_threads
from numerics.optimizer import OVPair, QKPair, compositional_muon, path_name

VOCAB = 128  # ASCII; bytes above 127 map to 127

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


@dataclass(frozen=True)
class Config:
    """Model and data sizes."""

    width: int = 64
    heads: int = 4
    kv_heads: int = 4
    layers: int = 2
    context: int = 64
    batch: int = 16

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


# ---- corpus ---------------------------------------------------------------------------------
def corpus(max_bytes: int = 4_000_000) -> tuple[np.ndarray, np.ndarray]:
    """``(train, validation)`` token arrays from the standard library's ``.py`` files."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    if not files:
        raise RuntimeError(f"no .py files under the standard library at {root}")
    train, val, size = [], [], 0
    for i, path in enumerate(files):
        try:
            data = np.frombuffer(path.read_bytes(), dtype=np.uint8)
        except OSError:
            continue
        (val if i % 10 == 9 else train).append(np.minimum(data, VOCAB - 1))
        size += data.size
        if size >= max_bytes and val:
            break
    return np.concatenate(train).astype(np.int32), np.concatenate(val).astype(np.int32)


def batches(tokens: np.ndarray, cfg: Config, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless random windows ``(inputs, targets)`` of shape ``(batch, context)``."""
    rng = np.random.default_rng(seed)
    while True:
        start = rng.integers(0, tokens.size - cfg.context - 1, size=cfg.batch)
        idx = start[:, None] + np.arange(cfg.context + 1)
        window = tokens[idx]
        yield window[:, :-1], window[:, 1:]


# ---- model ----------------------------------------------------------------------------------
def init_params(cfg: Config, key: jax.Array) -> dict:
    """Gaussian init with standard deviation ``1/√fan_in``; norms start at 1."""
    d, L, hd = cfg.width, cfg.layers, cfg.head_dim
    ks = jax.random.split(key, 9)

    def normal(k, shape, fan_in):
        return jax.random.normal(k, shape, jnp.float32) / math.sqrt(fan_in)

    return {
        "embed": normal(ks[0], (VOCAB, d), 1.0) * 0.02,
        "pos": normal(ks[1], (cfg.context, d), 1.0) * 0.02,
        "layers": {
            "norm1": jnp.ones((L, d), jnp.float32),
            "norm2": jnp.ones((L, d), jnp.float32),
            "wq": normal(ks[2], (L, d, cfg.heads * hd), d),
            "wk": normal(ks[3], (L, d, cfg.kv_heads * hd), d),
            "wv": normal(ks[4], (L, cfg.kv_heads * hd, d), d),
            "wo": normal(ks[5], (L, d, cfg.heads * hd), cfg.heads * hd),
            "w1": normal(ks[6], (L, d, 4 * d), d),
            "w2": normal(ks[7], (L, 4 * d, d), 4 * d),
        },
        "norm_f": jnp.ones((d,), jnp.float32),
        "head": normal(ks[8], (d, VOCAB), d),
    }


def attention_pairs(cfg: Config) -> Callable[[dict], list]:
    """The pair declaration for :func:`numerics.optimizer.compositional_muon`."""

    def pairs(params):
        del params
        return [QKPair("layers/wq", "layers/wk", cfg.heads, cfg.kv_heads),
                OVPair("layers/wo", "layers/wv", cfg.heads, cfg.kv_heads)]

    return pairs


def _rms_norm(x, scale):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def forward(params: dict, tokens: jax.Array, cfg: Config) -> jax.Array:
    """Logits ``(batch, context, VOCAB)`` of the causal model."""
    B, T = tokens.shape
    hd, H, Hkv = cfg.head_dim, cfg.heads, cfg.kv_heads
    x = params["embed"][tokens] + params["pos"][:T]
    mask = jnp.tril(jnp.ones((T, T), bool))

    def block(x, p):
        h = _rms_norm(x, p["norm1"])
        q = (h @ p["wq"]).reshape(B, T, H, hd)
        k = (h @ p["wk"]).reshape(B, T, Hkv, hd)
        v = (h @ p["wv"].T).reshape(B, T, Hkv, hd)
        k, v = (jnp.repeat(a, H // Hkv, axis=2) for a in (k, v))  # query head h uses kv head h // G
        s = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
        a = jax.nn.softmax(jnp.where(mask, s, -1e30), axis=-1)
        o = jnp.einsum("bhts,bshd->bthd", a, v).reshape(B, T, H * hd)
        x = x + o @ p["wo"].T
        h = _rms_norm(x, p["norm2"])
        return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"], None

    x, _ = jax.lax.scan(block, x, params["layers"])
    return _rms_norm(x, params["norm_f"]) @ params["head"]


def loss_fn(params: dict, inputs: jax.Array, targets: jax.Array, cfg: Config) -> jax.Array:
    """Mean next-character cross-entropy (nats)."""
    logits = forward(params, inputs, cfg)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


# ---- optimizers -----------------------------------------------------------------------------
def make_optimizer(name: str, cfg: Config, schedule: optax.Schedule) -> optax.GradientTransformation:
    """The optimizer ``name`` with learning rate ``schedule`` (peak 1: the sweep scales it)."""
    def embeddings(path, x):
        return path in ("embed", "pos", "head")

    if name == "adamw":
        return optax.adamw(schedule, weight_decay=0.0)
    if name == "muon":
        return optax.contrib.muon(schedule, adam_learning_rate=lambda c: 0.1 * schedule(c),
                                  muon_weight_dimension_numbers=_muon_dims)
    variants = {"cm": ("half_split", "none"), "cm-proj": ("half_split", "horizontal_projection"),
                "cm-iso": ("isotropic", "none"), "cm-iso-proj": ("isotropic", "horizontal_projection")}
    if name not in variants:
        raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")
    rule, gauge = variants[name]
    return compositional_muon(schedule, pairs=attention_pairs(cfg), qk_rule=rule, gauge=gauge,
                              adamw_params=embeddings, adam_learning_rate=lambda c: 0.1 * schedule(c))


def _muon_dims(params):
    """optax.contrib.muon dimension numbers: matrices (stacked over layers) → Muon; vectors, embeddings
    and the output head → AdamW. ``W_O`` and ``W_V`` act as ``x @ Wᵀ``: their last axis is the input."""

    def dims(path, x):
        name = path_name(path)
        if x.ndim < 2 or name in ("embed", "pos", "head"):
            return None
        if name in ("layers/wo", "layers/wv"):
            return MuonDimensionNumbers(reduction_axis=x.ndim - 1, output_axis=x.ndim - 2)
        return MuonDimensionNumbers(reduction_axis=x.ndim - 2, output_axis=x.ndim - 1)

    return jax.tree_util.tree_map_with_path(dims, params)


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


def evaluate(params: dict, val_batches: list[tuple[np.ndarray, np.ndarray]], cfg: Config) -> float:
    """Mean validation loss over fixed batches (one compilation per configuration)."""
    fn = _eval_fn(cfg)
    return float(np.mean([fn(params, x, y) for x, y in val_batches]))


def train(name: str, lr: float, steps: int, cfg: Config, data: tuple[np.ndarray, np.ndarray], *, seed: int = 0,
          eval_every: int = 25, eval_batches: int = 8, progress: bool = True,
          step_fn: Callable | None = None) -> RunResult:
    """Train ``steps`` steps; validation loss every ``eval_every`` steps and at the end."""

    train_tokens, val_tokens = data
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1.0, max(1, steps // 10), steps, 0.1)
    opt = make_optimizer(name, cfg, schedule)
    params = init_params(cfg, jax.random.PRNGKey(seed))
    state = opt.init(params)
    step = step_fn or make_step(opt, cfg)
    val_gen = batches(val_tokens, cfg, seed=1234)
    val_batches = [next(val_gen) for _ in range(eval_batches)]
    gen = batches(train_tokens, cfg, seed)
    xs, vs, loss = [], [], float("nan")
    t0 = time.perf_counter()
    bar = tqdm(range(1, steps + 1), desc=f"{name} lr={lr:g}", disable=not progress, leave=False)
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
        schedule = optax.warmup_cosine_decay_schedule(0.0, 1.0, max(1, steps // 10), steps, 0.1)
        step = make_step(make_optimizer(name, cfg, schedule), cfg)  # compiled once per optimizer
        for lr in SWEEPS[name]:
            runs.append(train(name, lr, steps, cfg, data, step_fn=step, progress=progress))
            r = runs[-1]
            print(f"{name:<12} lr={lr:<7g} final val {r.val_loss[-1]:.4f}  ({r.seconds:.0f} s)", flush=True)
    best = {}
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
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument("--lr", type=float, help="peak learning rate (default: the middle of the optimizer's sweep)")
    p.add_argument("--out", default="results", help="--compare: output folder (default results)")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads (default: --heads)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    try:
        args = p.parse_args(argv)
        kv = args.heads if args.kv_heads is None else args.kv_heads
        if args.steps < 1:
            raise UsageError(f"argument --steps: must be >= 1, got {args.steps}")
        if args.width < 1 or args.heads < 1 or args.layers < 1 or args.width % args.heads:
            raise UsageError(f"--width {args.width} must be a positive multiple of --heads {args.heads}")
        if kv < 1 or args.heads % kv:
            raise UsageError(f"argument --kv-heads: {kv} must divide --heads {args.heads}")
        if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
            raise UsageError(f"argument --lr: must be finite and > 0, got {args.lr}")
        if args.compare and os.path.isfile(args.out):
            raise UsageError(f"argument --out: {args.out} is a file")
    except UsageError as exc:
        return usage_error(prog, exc)
    cfg = Config(width=args.width, heads=args.heads, kv_heads=kv, layers=args.layers)
    lapack_threads(1)  # small per-head eigh: one OpenBLAS thread (see numerics.kernels.lapack_threads)
    if args.compare:
        compare(args.steps, cfg, Path(args.out))
        return 0
    lr = args.lr if args.lr is not None else SWEEPS[args.optimizer][1]
    r = train(args.optimizer, lr, args.steps, cfg, corpus(), seed=args.seed)
    return write_result(prog, f"{r.optimizer} lr={lr:g}: final train loss {r.train_loss:.4f}, validation loss "
                              f"{r.val_loss[-1]:.4f} after {args.steps} steps ({r.seconds:.1f} s)\n", 0)


if __name__ == "__main__":
    sys.exit(main())
