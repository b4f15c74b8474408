"""Benchmark: one full optimizer update, Compositional Muon against ``optax.contrib.muon``.

    python -m benchmarks.step [--repeats N] [--shapes gpt2,llama3] [--dtype float32|bfloat16]

Times ``jit(update)`` (momentum included) of both optimizers on the four attention matrices of one
layer: GPT-2-small (``d = 768``, 12 heads of 64) and Llama-3-8B (``d = 4096``, 32 heads, 8 kv heads of
128; ``W_K, W_V`` are ``4096 × 1024``). Compositional Muon uses half-split QK (grouped-query when
``H_kv < H``) and the hybrid OV rule, damping ``1e-2``; Muon orthogonalizes each matrix whole. Both
use the same 5-step Polar Express schedule. The two are timed interleaved in one run; the last
line is ``cm/muon median step time ratio: R``, the largest ratio over the shapes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from numerics.optimizer import OVPair, QKPair, compositional_muon, resolve_schedule

SHAPES = {"gpt2": (768, 12, 12, 64), "llama3": (4096, 32, 8, 128)}


def layer(rng, d, heads, kv_heads, head_dim, dtype):
    shapes = {"wq": (d, heads * head_dim), "wk": (d, kv_heads * head_dim), "wo": (d, heads * head_dim),
              "wv": (kv_heads * head_dim, d)}
    return {k: jnp.asarray(rng.standard_normal(s) / np.sqrt(d), dtype) for k, s in shapes.items()}


def timed(fn, *args):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def measure(name, repeats, dtype):
    d, heads, kv, hd = SHAPES[name]
    rng = np.random.default_rng(0)
    params = layer(rng, d, heads, kv, hd, dtype)
    grads = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), dtype), params)
    schedule = resolve_schedule("polar-express-5", 5)
    cm = compositional_muon(0.02, pairs=lambda p: [QKPair("wq", "wk", heads, kv), OVPair("wo", "wv", heads, kv)])
    muon = optax.contrib.muon(0.02, ns_coeffs=schedule)
    runs = {}
    for label, opt in (("cm", cm), ("muon", muon)):
        state = opt.init(params)
        fn = jax.jit(opt.update)
        timed(fn, grads, state, params)  # compile
        runs[label] = (fn, state)
    times = {"cm": [], "muon": []}
    for _ in range(repeats):  # interleaved
        for label, (fn, state) in runs.items():
            times[label].append(timed(fn, grads, state, params))
    med = {k: statistics.median(v) for k, v in times.items()}
    return med["cm"], med["muon"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"benchmarks.step: error: {message}\n")
        sys.exit(2)


def main(argv=None) -> int:
    p = _Parser(prog="python -m benchmarks.step", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="timed updates per optimizer and shape (default 5)")
    p.add_argument("--shapes", default="gpt2,llama3", help="comma-separated: gpt2, llama3 (default both)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    args = p.parse_args(argv)
    names = [s.strip() for s in args.shapes.split(",") if s.strip()]
    bad = [s for s in names if s not in SHAPES]
    if bad or not names:
        p.error(f"argument --shapes: unknown {bad or names}; choose from {', '.join(SHAPES)}")
    if args.repeats < 1:
        p.error(f"argument --repeats: must be >= 1, got {args.repeats}")
    dtype = jnp.dtype(args.dtype)
    print(f"{'shape':<8} {'d':>5} {'H':>3} {'H_kv':>4} {'d_h':>4} {'cm ms':>10} {'muon ms':>10} {'ratio':>6}")
    ratios = []
    for name in names:
        d, h, kv, hd = SHAPES[name]
        t_cm, t_muon = measure(name, args.repeats, dtype)
        ratios.append(t_cm / t_muon)
        print(f"{name:<8} {d:>5} {h:>3} {kv:>4} {hd:>4} {1e3 * t_cm:>10.1f} {1e3 * t_muon:>10.1f} {ratios[-1]:>6.3f}",
              flush=True)
    print(f"device: {jax.devices()[0].device_kind}, dtype {args.dtype}, {args.repeats} interleaved repeats")
    print(f"cm/muon median step time ratio: {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
