"""Benchmark: one full optimizer update, Compositional Muon against ``optax.contrib.muon``.

    python -m benchmarks.step [--repeats N] [--shapes gpt2,llama3] [--dtype float32|bfloat16]

Times the first step's compilation, then ``jit(update)`` (momentum included) of both optimizers on the
four attention matrices of one layer: GPT-2-small (``d = 768``, 12 heads of 64) and Llama-3-8B
(``d = 4096``, 32 heads, 8 kv heads of 128; ``W_K, W_V`` are ``4096 × 1024``). Compositional Muon uses
half-split QK (grouped-query when ``H_kv < H``) and the hybrid OV rule, damping ``1e-2``; Muon orthogonalizes
each matrix whole. Both use the same 5-step Polar Express schedule. The two are timed interleaved in one run; the last
line is ``cm/muon median step time ratio: R``, the largest ratio over the shapes; each ratio is the
median over rounds of the two updates' times within a round (see :mod:`benchmarks.interleave`).
Each row also prints the flop model of both updates (:func:`flop_model`), the floor the measured
ratio would reach if every flop ran at the same rate.
"""

from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from threadpoolctl import threadpool_info

from benchmarks.interleave import interleaved, paired_ratio
from derivations.commandline import OneLineParser, UsageError, stdout_closed, usage_error
from numerics.kernels.lapack_threads import lapack_threads
from numerics.optimizer import OVPair, QKPair, compositional_muon, resolve_schedule

SHAPES = {"gpt2": (768, 12, 12, 64), "llama3": (4096, 32, 8, 128)}


def layer(rng, d, heads, kv_heads, head_dim, dtype):
    shapes = {"wq": (d, heads * head_dim), "wk": (d, kv_heads * head_dim), "wo": (d, heads * head_dim),
              "wv": (kv_heads * head_dim, d)}
    return {k: jnp.asarray(rng.standard_normal(s) / np.sqrt(d), dtype) for k, s in shapes.items()}


def ns_flops(m, n, steps, degree):
    """Multiply-add flops (2 per MAC) of Newton–Schulz on an ``m × n`` matrix (short side ``a``).

    Per step: ``A = X Xᵀ`` (``2a²b``), ``degree − 2`` products of ``a × a`` matrices in the Horner
    form (``2a³`` each), and ``B X`` (``2a²b``).
    """
    a, b = min(m, n), max(m, n)
    return steps * (4 * a * a * b + max(degree - 2, 0) * 2 * a ** 3)


def eigh_flops(n):
    """``≈ 9 n³`` for a symmetric eigendecomposition with eigenvectors (tridiagonal reduction plus
    back-transformation; Golub & Van Loan's count)."""
    return 9 * n ** 3


def flop_model(d, heads, kv_heads, head_dim, steps, degree):
    """``(cm, muon)`` flops of one update on a layer's four attention matrices (Gram roots by eigh).

    CM: half-split QK (per query head: its key head's Gram root, whitened sign of ``d_h × d``; per key
    head: the stacked group's Gram root) and hybrid OV (per value head: Gram root; one global sign of
    ``d × H·d_h`` on the O side; per value head: the stacked output heads' Gram root and a
    ``d_h × d`` sign). Muon: one sign per matrix. Elementwise work and momentum are left out.
    """
    g, dh = heads // kv_heads, head_dim
    def root(rows):
        return 2 * rows * dh * dh + eigh_flops(dh) + 2 * dh ** 3  # Gram, eigh, V f(Λ) Vᵀ
    whiten = 2 * d * dh * dh  # G C⁻¹ or C⁻¹ G for one head
    head_sign = ns_flops(d, dh, steps, degree)
    qk = heads * (root(d) + 2 * whiten + head_sign) + kv_heads * (root(g * d) + 2 * whiten + head_sign)
    ov = (kv_heads * root(d) + heads * 2 * whiten + ns_flops(d, heads * dh, steps, degree)
          + kv_heads * (root(g * d) + 2 * whiten + head_sign))
    muon = (2 * ns_flops(d, heads * dh, steps, degree) + 2 * ns_flops(d, kv_heads * dh, steps, degree))
    return qk + ov, muon


def measure(name, repeats, dtype):
    """``(median cm seconds, median muon seconds, paired cm/muon ratio)`` over interleaved rounds."""
    return measure_with_compile(name, repeats, dtype)[2:]


def measure_with_compile(name, repeats, dtype):
    """``(cm compile s, muon compile s, median cm s, median muon s, paired cm/muon ratio)``.

    Compile time: ``jit(update).lower(...).compile()`` of the first step (tracing included), wall clock;
    the steady state: interleaved rounds of the compiled updates.
    """
    d, heads, kv, hd = SHAPES[name]
    rng = np.random.default_rng(0)
    params = layer(rng, d, heads, kv, hd, dtype)
    grads = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), dtype), params)
    schedule = resolve_schedule("polar-express-5", 5)
    cm = compositional_muon(0.02, pairs=lambda p: [QKPair("wq", "wk", heads, kv), OVPair("wo", "wv", heads, kv)])
    muon = optax.contrib.muon(0.02, ns_coeffs=schedule)
    runs, compile_s = {}, {}
    for label, opt in (("cm", cm), ("muon", muon)):
        state = opt.init(params)
        start = time.perf_counter()
        fn = jax.jit(opt.update).lower(grads, state, params).compile()
        compile_s[label] = time.perf_counter() - start
        runs[label] = lambda fn=fn, state=state: fn(grads, state, params)
    times = interleaved(runs, repeats, warmup=1)
    return (compile_s["cm"], compile_s["muon"], statistics.median(times["cm"]), statistics.median(times["muon"]),
            paired_ratio(times["cm"], times["muon"]))


def main(argv=None) -> int:
    if stdout_closed("benchmarks.step"):
        return 2
    p = OneLineParser(prog="python -m benchmarks.step", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=9, help="timed updates per optimizer and shape (default 9)")
    p.add_argument("--shapes", default="gpt2,llama3", help="comma-separated: gpt2, llama3 (default both)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--lapack-threads", type=int, default=1,
                   help="OpenBLAS threads for jaxlib's CPU eigh (default 1; 0 leaves the library default; "
                        "see numerics.kernels.lapack_threads)")
    try:
        args = p.parse_args(argv)
        names = [s.strip() for s in args.shapes.split(",") if s.strip()]
        bad = [s for s in names if s not in SHAPES]
        if bad or not names:
            p.error(f"argument --shapes: unknown {bad or names}; choose from {', '.join(SHAPES)}")
        if args.repeats < 1:
            p.error(f"argument --repeats: must be >= 1, got {args.repeats}")
        if args.lapack_threads < 0:
            p.error(f"argument --lapack-threads: must be >= 0, got {args.lapack_threads}")
    except UsageError as exc:
        return usage_error("benchmarks.step", exc)
    if args.lapack_threads:
        lapack_threads(args.lapack_threads)
    dtype = jnp.dtype(args.dtype)
    schedule = resolve_schedule("polar-express-5", 5)
    steps, degree = len(schedule), max(len(c) for c in schedule)
    print(f"{'shape':<8} {'d':>5} {'H':>3} {'H_kv':>4} {'d_h':>4} {'cm comp s':>9} {'muon comp s':>11} "
          f"{'cm ms':>10} {'muon ms':>10} {'ratio':>6} "
          f"{'cm GF':>7} {'muon GF':>8} {'flop ratio':>10}")
    ratios = []
    for name in names:
        d, h, kv, hd = SHAPES[name]
        c_cm, c_muon, t_cm, t_muon, ratio = measure_with_compile(name, args.repeats, dtype)
        ratios.append(ratio)
        f_cm, f_muon = flop_model(d, h, kv, hd, steps, degree)
        print(f"{name:<8} {d:>5} {h:>3} {kv:>4} {hd:>4} {c_cm:>9.2f} {c_muon:>11.2f} {1e3 * t_cm:>10.1f} "
              f"{1e3 * t_muon:>10.1f} {ratios[-1]:>6.3f} "
              f"{f_cm / 1e9:>7.2f} {f_muon / 1e9:>8.2f} {f_cm / f_muon:>10.3f}", flush=True)
    blas = ", ".join(f"{i['prefix']} {i['num_threads']}" for i in threadpool_info() if i["user_api"] == "blas")
    print(f"device: {jax.devices()[0].device_kind}, dtype {args.dtype}, {args.repeats} interleaved repeats; "
          f"BLAS/LAPACK threads: {blas or 'none loaded'}")
    print(f"cm/muon median step time ratio: {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
