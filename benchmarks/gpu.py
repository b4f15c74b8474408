"""One prepared accelerator run (at most about 5 minutes); on the CPU it runs at small sizes.

    python -m benchmarks.gpu [--small] [--budget SECONDS]

Measures, in one process, on ``jax.devices()[0]``:

1. the device's bfloat16 matmul rate (``n × n`` products), and bfloat16 Newton–Schulz throughput
   (5-step Polar Express on a batch of ``d × d`` matrices) as a fraction of that rate (flops per
   step counted as ``2·(2m²n + m³)`` for ``m ≤ n``, i.e. ``XXᵀ``, ``A²`` and the product with ``X``);
2. one Compositional Muon update against ``optax.contrib.muon`` at GPT-2-small and Llama-3-8B attention
   shapes, then on full layers (attention and gated MLP) Compositional Muon and the project's Muon path
   against ``optax.contrib.muon``, msign ``auto`` (Gram Newton–Schulz where the flop model says it is
   cheaper), each with its flop-model ratio (``python -m benchmarks.step``'s measurements; with
   ``--small``: the full GPT-2-small layer only, widths divided by ``benchmarks.step.SMALL_FACTOR``);
3. Gram inverse roots by ``eigh`` against the matmul-only coupled Newton–Schulz iteration
   (error against float64 and time);
4. the optimizer update sharded over all local devices against the unsharded one;
5. Gram Newton–Schulz against the standard iteration in bfloat16 at the weight shapes of a GPT-2-small
   layer (768 × 768, 768 × 3072) and a Llama-3-8B layer (4096 × 4096, 4096 × 14336; small: divided by
   :data:`SMALL_DIVISOR`), with muon's schedule and its restarts certified in bfloat16 (after 1, 2, 3),
   each time ratio beside the flop model's (Zhang, Amsel, Chen, Dao 2026 report up to 2x with their
   symmetric GEMM routines, github.com/Dao-AILab/gram-newton-schulz README; plain matmuls here).

``--small`` (default on a CPU) shrinks every size so that continuous integration keeps it working.
"""

from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import coeffsearch
from benchmarks import gram as gram_bench
from benchmarks import gram_roots as gr
from benchmarks import step
from benchmarks.interleave import interleaved
from foundation.commandline import OneLineParser, UsageError, stdout_closed, usage_error
from foundation.compute.gram_roots import DEFAULT_SCHEDULE, gram_inv_sqrt
from foundation.compute.lapack_threads import lapack_threads
from numerics import sharding
from numerics.emitted import halfsplit
from numerics.optimizer import _schedule_for, resolve_schedule


def timed(fn, *args, repeats=5):
    """Median seconds of ``fn(*args)`` over ``repeats`` calls after one untimed call."""
    return statistics.median(interleaved({"fn": lambda: fn(*args)}, repeats, warmup=1)["fn"])


def matmul_rate(n, dtype):
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x: x @ x)
    return 2 * n ** 3 / timed(f, a)


def ns_throughput(batch, m, n, dtype):
    sched = resolve_schedule("polar-express-5", 5)
    x = jax.random.normal(jax.random.PRNGKey(0), (batch, m, n), dtype)
    f = jax.jit(lambda x: halfsplit.spectral_sign(x, "newton_schulz", _schedule_for(halfsplit, sched)))
    flops = batch * len(sched) * 2 * (2 * m * m * n + m ** 3)
    return flops / timed(f, x)


#: part [5]: (layer, rows, cols) of the weights timed; small sizes divide both sides by SMALL_DIVISOR
GRAM_SHAPES = (("gpt2-small", 768, 768), ("gpt2-small", 768, 3072), ("llama3-8b", 4096, 4096),
               ("llama3-8b", 4096, 14336))
SMALL_DIVISOR = 8
GRAM_SCHEDULE, GRAM_RESTARTS = "muon", (1, 2, 3)  # certified in bfloat16 (coeffsearch restarts muon)


def gram_comparison(small: bool, repeats: int = 3) -> list:
    """Part [5]: ``[(layer, rows, cols, measured gram/standard, flop model)]`` in bfloat16."""
    schedule = coeffsearch.get(GRAM_SCHEDULE).as_floats()
    rows_out = []
    for layer, rows, cols in GRAM_SHAPES:
        if small:
            rows, cols = rows // SMALL_DIVISOR, cols // SMALL_DIVISOR
        _, _, ratio, model, _ = gram_bench.measure_shape((None, rows, cols), repeats, jnp.bfloat16, GRAM_RESTARTS,
                                                         schedule)
        rows_out.append((layer, rows, cols, ratio, model))
        print(f"[5] {layer} {rows}x{cols} bf16: gram/standard time {ratio:.3f}, flop model {model:.3f}", flush=True)
    return rows_out


def layer_comparison(small: bool) -> list:
    """Part [2]: attention rows (not ``small``), then full-layer rows; the cm/optax ratios."""
    dtype = jnp.float32 if small else jnp.bfloat16
    schedule = resolve_schedule("polar-express-5", 5)
    steps, degree = len(schedule), max(len(c) for c in schedule)
    ratios = []
    for name in () if small else ("gpt2", "llama3"):
        t_cm, t_muon, ratio = step.measure(name, 3, dtype, "auto")
        ratios.append(ratio)
        d, h, kv, hd, _ = step.dims(name)
        f_cm, f_muon = step.flop_model(d, h, kv, hd, steps, degree, "auto")
        print(f"[2] {name} attention: cm {1e3 * t_cm:.1f} ms, muon {1e3 * t_muon:.1f} ms, ratio {ratio:.3f} "
              f"(flop model {f_cm / f_muon:.3f})", flush=True)
    for name in ("gpt2",) if small else ("gpt2", "llama3"):
        found = step.measure_full(name, 2 if small else 3, dtype, "auto", small)
        d, h, kv, hd, f = step.dims(name, small)
        flops = step.layer_flop_model(d, h, kv, hd, f, steps, degree, "auto")
        ratios.append(found["cm"][2])
        rows = ", ".join(f"{k} {1e3 * found[k][1]:.1f} ms, ratio {found[k][2]:.3f} (flop model "
                         f"{flops[k] / flops['optax']:.3f})" for k in ("cm", "muon-path"))
        print(f"[2] {name} full layer (d={d}, f={f}): optax {1e3 * found['optax'][1]:.1f} ms; {rows}", flush=True)
    return ratios


def main(argv=None) -> int:
    if stdout_closed("benchmarks.gpu"):
        return 2
    p = OneLineParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="small sizes (default on a CPU)")
    try:
        args = p.parse_args(argv)
    except UsageError as exc:
        return usage_error("benchmarks.gpu", exc)
    dev = jax.devices()[0]
    small = args.small or dev.platform == "cpu"
    if dev.platform == "cpu":
        lapack_threads(1)  # as benchmarks.step does (see foundation.compute.lapack_threads)
    t0 = time.perf_counter()
    print(f"device: {dev.device_kind} ({dev.platform}), {len(jax.devices())} device(s), small={small}", flush=True)

    n = 512 if small else 8192
    rate = matmul_rate(n, jnp.bfloat16)
    print(f"[1] bf16 matmul {n}x{n}: {rate / 1e12:.3f} TFLOP/s", flush=True)
    for batch, m, d in ((4, 64, 256),) if small else ((32, 4096, 4096), (32, 128, 4096)):
        thr = ns_throughput(batch, m, d, jnp.bfloat16)
        print(f"    bf16 Newton-Schulz {batch} x ({m}, {d}): {thr / 1e12:.3f} TFLOP/s = {thr / rate:.2f} of matmul",
              flush=True)

    ratios = layer_comparison(small)

    sched = tuple(coeffsearch.resolve(DEFAULT_SCHEDULE).as_floats())
    h, d, dh = (4, 256, 32) if small else gr.SHAPES["llama3"]
    w64 = np.random.default_rng(0).standard_normal((h, d, dh)) / np.sqrt(d)
    ref = gr.reference(w64)
    w32 = jnp.asarray(w64, jnp.float32)
    ns = jax.jit(lambda w: gram_inv_sqrt(w, gr.DAMPING, sched))
    eg = jax.jit(lambda w: gr.eigh_inv_sqrt(w, gr.DAMPING))
    print(f"[3] Gram roots {h} x ({d}, {dh}): "
          f"coupled NS err {gr.rel(ns(w32), ref):.1e} in {1e3 * timed(ns, w32):.2f} ms; "
          f"eigh err {gr.rel(eg(w32), ref):.1e} in {1e3 * timed(eg, w32):.2f} ms; "
          f"bf16 input err {gr.rel(ns(w32.astype(jnp.bfloat16)).astype(jnp.float32), ref):.1e}", flush=True)

    count = len(jax.devices())
    mesh_shape = (2, count // 2) if count >= 2 and count % 2 == 0 else (1, count)
    worst, _ = sharding.compare(layers=2, d=64 if small else 1024, heads=4 if small else 16, kv_heads=4,
                                head_dim=16 if small else 64, steps=2, mesh_shape=mesh_shape)
    print(f"[4] sharded over a {mesh_shape} mesh vs unsharded: max relative difference {worst:.2e}", flush=True)
    gram_comparison(small)
    print(f"total {time.perf_counter() - t0:.0f} s")
    print(f"cm/muon median step time ratio: {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
