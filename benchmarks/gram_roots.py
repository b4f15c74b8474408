"""Benchmark: matmul-only Gram inverse roots (coupled Newton–Schulz) against ``eigh``.

    python -m benchmarks.gram_roots [--repeats N]

For ``H`` heads of ``W (d, d_h)`` (GPT-2-small: 12 × (768, 64); Llama-3-8B: 32 × (4096, 128)),
damping ``1e-2``: the relative Frobenius error of ``(WᵀW + λI)^{-1/2}`` by the coupled iteration
(schedule from :mod:`coeffsearch`, certified there on ``[1e-3, 1]``) in float32 and bfloat16 against
float64 ``eigh`` (bfloat16 inputs computed in float32, and bfloat16 arithmetic throughout), and the median CPU
time of both (float32), interleaved. Last line:
``newton_schulz/eigh median time ratio: R`` (the largest over the shapes).
"""

from __future__ import annotations

import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import coeffsearch
from benchmarks.interleave import MAX_REPEATS, interleaved
from coeffsearch.certify import certify
from foundation.commandline import OneLineParser, UsageError, int_option, stdout_closed, usage_error
from foundation.compute.gram_roots import CERTIFIED_LOWER, DEFAULT_SCHEDULE, certified_lower, gram_inv_sqrt

SHAPES = {"gpt2": (12, 768, 64), "llama3": (32, 4096, 128)}
DAMPING = 1e-2


def eigh_inv_sqrt(w, damping):
    g = w.mT @ w
    g = 0.5 * (g + g.mT) + damping * jnp.eye(g.shape[-1], dtype=g.dtype)
    e, v = jnp.linalg.eigh(g)
    return (v * e[..., None, :] ** -0.5) @ v.mT


def reference(w):
    g = np.swapaxes(w, -1, -2) @ w + DAMPING * np.eye(w.shape[-1])
    e, v = np.linalg.eigh(g)
    return (v * e[..., None, :] ** -0.5) @ np.swapaxes(v, -1, -2)


def rel(a, b):
    return float(np.max(np.linalg.norm(np.asarray(a, np.float64) - b, axis=(-2, -1))
                        / np.linalg.norm(b, axis=(-2, -1))))


def main(argv=None) -> int:
    if stdout_closed("benchmarks.gram_roots"):
        return 2
    p = OneLineParser(prog="python -m benchmarks.gram_roots", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int_option(1, MAX_REPEATS, "a count"), default=10,
                   help=f"timed rounds, 1 to {MAX_REPEATS} (default 10)")
    p.add_argument("--shapes", default="gpt2,llama3")
    try:
        args = p.parse_args(argv)
    except UsageError as exc:
        return usage_error("benchmarks.gram_roots", exc)
    names = [s for s in args.shapes.split(",") if s]
    if any(s not in SHAPES for s in names) or not names:
        sys.stderr.write(f"benchmarks.gram_roots: error: --shapes from {', '.join(SHAPES)}\n")
        return 2
    sched = tuple(coeffsearch.resolve(DEFAULT_SCHEDULE).as_floats())
    band = certify(sched, str(CERTIFIED_LOWER), "1").band
    print(f"schedule {DEFAULT_SCHEDULE} ({len(sched)} steps), "
          f"certified: [{CERTIFIED_LOWER:g}, 1] -> [{band[0]}, {band[1]}]")
    ns = jax.jit(lambda w: gram_inv_sqrt(w, DAMPING, sched))
    ns_native = jax.jit(lambda w: gram_inv_sqrt(w, DAMPING, sched, native=True))
    eg = jax.jit(lambda w: eigh_inv_sqrt(w, DAMPING))
    print(f"{'shape':<7} {'heads x (d, d_h)':<18} {'certified':<9} {'err f32':>9} {'bf16 in':>9} {'bf16 all':>9} "
          f"{'err eigh':>9} {'NS ms':>8} {'eigh ms':>8} {'ratio':>6}")
    ratios = []
    for name in names:
        h, d, dh = SHAPES[name]
        rng = np.random.default_rng(0)
        w64 = rng.standard_normal((h, d, dh)) / np.sqrt(d)
        ref = reference(w64)
        w32 = jnp.asarray(w64, jnp.float32)
        ok = bool(jnp.all(certified_lower(w32, DAMPING) >= CERTIFIED_LOWER))
        b16 = w32.astype(jnp.bfloat16)
        e32, e16 = rel(ns(w32), ref), rel(ns(b16).astype(jnp.float32), ref)
        e16n = rel(ns_native(b16).astype(jnp.float32), ref)
        ee = rel(eg(w32), ref)
        times = interleaved({"ns": lambda w=w32: ns(w), "eigh": lambda w=w32: eg(w)}, args.repeats, warmup=1)
        t_ns, t_e = statistics.median(times["ns"]), statistics.median(times["eigh"])
        ratios.append(t_ns / t_e)
        print(f"{name:<7} {f'{h} x ({d}, {dh})':<18} {ok!s:<9} {e32:>9.1e} {e16:>9.1e} {e16n:>9.1e} {ee:>9.1e} "
              f"{1e3 * t_ns:>8.2f} {1e3 * t_e:>8.2f} {ratios[-1]:>6.2f}", flush=True)
    print(f"device: {jax.devices()[0].device_kind}")
    print(f"newton_schulz/eigh median time ratio: {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
