"""Benchmark: Gram Newton–Schulz against the standard iteration, interleaved in one run.

    python -m benchmarks.gram [--repeats N] [--shapes NAME,...] [--dtype float32|bfloat16] [--restarts S,...]

Times the jitted standard iteration (:func:`foundation.compute.jax_msign.newton_schulz`) and the Gram
form (:func:`foundation.compute.gram_newton_schulz.gram_newton_schulz`, restarts after the given
iterations; default after iteration 2, the position ``python -m coeffsearch restarts polar-express-5
--dtype float32 --restarts 1`` certifies) with the 5-step Polar Express schedule, on single matrices
``768 × 3072``, ``4096 × 14336``, ``2048 × 11059`` and on batches ``24 × (768, 64)``, ``32 × (4096, 128)``.
Each row prints both median times, the measured ratio (the median over rounds of gram/standard within
a round, see :mod:`benchmarks.interleave`), the flop-model ratio (:func:`derivations.gram_ns.flop_count`),
whether the flop model chooses the Gram form (it is cheaper exactly when the long side exceeds 1.5
times the short side, for fewer than ``T − 1`` restarts) and the largest difference of the two results.
The last line is ``gram/standard median time ratio: R``, the worst measured ratio over the shapes where
the Gram form is chosen.
"""

from __future__ import annotations

import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import coeffsearch
from benchmarks.interleave import MAX_REPEATS, interleaved, paired_ratio
from derivations.gram_ns import flop_count
from foundation.commandline import OneLineParser, UsageError, int_option, stdout_closed, usage_error
from foundation.compute.gram_newton_schulz import gram_newton_schulz, restart_flags
from foundation.compute.jax_msign import newton_schulz

#: name -> (batch or None, rows, cols)
SHAPES = {"768x3072": (None, 768, 3072), "4096x14336": (None, 4096, 14336), "2048x11059": (None, 2048, 11059),
          "24x768x64": (24, 768, 64), "32x4096x128": (32, 4096, 128)}
SCHEDULE = coeffsearch.DEFAULT


def chosen(rows: int, cols: int, steps: int, restarts: int) -> bool:
    """The flop model's choice: the Gram form where it costs fewer flops."""
    return flop_count("gram", rows, cols, steps, restarts) < flop_count("standard", rows, cols, steps)


def measure(name, repeats, dtype, restarts, schedule):
    """One row: median seconds of both, the paired ratio, the flop-model ratio, the result difference."""
    return measure_shape(SHAPES[name], repeats, dtype, restarts, schedule)


def measure_shape(dims, repeats, dtype, restarts, schedule):
    """:func:`measure` for ``dims = (batch or None, rows, cols)``."""
    batch, rows, cols = dims
    shape = (rows, cols) if batch is None else (batch, rows, cols)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(shape), dtype)
    flags = restart_flags(restarts, len(schedule))
    standard = jax.jit(lambda x: newton_schulz(x, schedule))
    gram = jax.jit(lambda x, flags: gram_newton_schulz(x, schedule, flags))
    times = interleaved({"standard": lambda: standard(x), "gram": lambda: gram(x, flags)}, repeats, warmup=1)
    diff = float(jnp.max(jnp.abs(standard(x).astype(jnp.float32) - gram(x, flags).astype(jnp.float32))))
    model = flop_count("gram", rows, cols, len(schedule), len(restarts)) / flop_count("standard", rows, cols,
                                                                                         len(schedule))
    return (statistics.median(times["standard"]), statistics.median(times["gram"]),
            paired_ratio(times["gram"], times["standard"]), model, diff)


def main(argv=None) -> int:
    prog = "benchmarks.gram"
    if stdout_closed(prog):
        return 2
    p = OneLineParser(prog="python -m benchmarks.gram", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int_option(1, MAX_REPEATS, "a count"), default=5,
                   help=f"timed rounds, 1 to {MAX_REPEATS} (default 5)")
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)} (default all)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--restarts", default="2", help="restart positions, comma-separated (default 2; '' for none)")
    try:
        args = p.parse_args(argv)
        names = [s.strip() for s in args.shapes.split(",") if s.strip()]
        unknown = [s for s in names if s not in SHAPES]
        if unknown or not names:
            raise UsageError(f"argument --shapes: unknown shape(s) {', '.join(unknown) or '(none given)'}; "
                             f"known: {', '.join(SHAPES)}")
        schedule = coeffsearch.get(SCHEDULE).as_floats()
        try:
            restarts = tuple(int(s) for s in args.restarts.split(",") if s.strip())
            restart_flags(restarts, len(schedule))
        except ValueError as exc:
            raise UsageError(f"argument --restarts: {exc}") from None
    except UsageError as exc:
        return usage_error(prog, exc)
    dtype = jnp.float32 if args.dtype == "float32" else jnp.bfloat16
    steps = len(schedule)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; schedule {SCHEDULE} ({steps} steps); "
          f"restarts after {', '.join(map(str, restarts)) or 'none'}; {args.dtype}; median of {args.repeats} "
          f"interleaved rounds")
    print(f"{'shape':<14} {'standard ms':>12} {'gram ms':>10} {'ratio':>7} {'flop model':>11} {'ratio/model':>12} "
          f"{'chosen':>7} {'max |diff|':>11}")
    worst = None
    for name in names:
        _, rows, cols = SHAPES[name]
        t_std, t_gram, ratio, model, diff = measure(name, args.repeats, dtype, restarts, schedule)
        pick = chosen(rows, cols, steps, len(restarts))
        if pick:
            worst = ratio if worst is None else max(worst, ratio)
        print(f"{name:<14} {t_std * 1e3:>12.1f} {t_gram * 1e3:>10.1f} {ratio:>7.3f} {model:>11.3f} "
              f"{ratio / model:>12.2f} {'yes' if pick else 'no':>7} {diff:>11.2e}", flush=True)
    print("gram/standard median time ratio: "
          f"{'n/a (no shape chooses the Gram form)' if worst is None else f'{worst:.3f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
