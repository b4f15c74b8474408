"""Benchmark: emitted half-split update vs the same algorithm written by hand in JAX.

    python -m benchmarks.halfsplit [--repeats N] [--dtype float32|bfloat16]

Times, in one run and interleaved, (1) the emitted jitted ``halfsplit_qk`` (the public function,
input validation included) against a hand-written JAX version of the same algorithm (eigh
inverse roots, the same Newton–Schulz schedule), and (2) Newton–Schulz msign against SVD msign
inside the emitted function, for 12 heads of ``d = 768, d_h = 64`` and for ``d = 4096, d_h = 128``.
The hand-written version comes in both Newton–Schulz orientations (the emitted code runs
batches tall on the CPU, which a hand-written version could also do); the ratio is against the
faster of the two, as the median over interleaved rounds of the times within a round (see
:mod:`benchmarks.interleave`). The last line is ``emitted/handwritten median time ratio: R`` (the
worst configuration).
"""

from __future__ import annotations

import functools
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import coeffsearch
from benchmarks.interleave import MAX_REPEATS, MAX_THREADS, interleaved, paired_ratio
from derivations import halfsplit
from derivations.cli import render
from foundation.commandline import OneLineParser, UsageError, int_option, stdout_closed, usage_error
from foundation.compute.lapack_threads import lapack_threads

MAX_HEADS = 64  # --heads-4096: at most this many heads of width 128


@functools.partial(jax.jit, static_argnames=("coeffs", "tall"))
def handwritten_halfsplit(W_Q, W_K, G_Q, G_K, eps, damping, coeffs, tall=False):
    """The half-split rule typed by hand from its closed form, for timing only.

    Both Gram roots come from one stacked eigh and both signs from one stacked Newton–Schulz,
    as in the emitted code: two concurrent eigh calls deadlock jaxlib 0.10 on a 2-core CPU.
    ``tall`` runs Newton–Schulz on the ``d × d_h`` matrices as they are (``A = XᵀX``, ``X ← X p(A)``),
    the orientation the emitted code picks for batches on the CPU; otherwise on their transposes.
    """
    W = jnp.stack([W_K, W_Q])
    g = W.mT @ W
    g = 0.5 * (g + g.mT) + damping * jnp.eye(W.shape[-1], dtype=W.dtype)
    w, v = jnp.linalg.eigh(g)
    C_inv = (v * w[..., None, :] ** -0.5) @ v.mT
    X = jnp.stack([G_Q, G_K]) @ C_inv
    X = X if tall else X.mT
    X = X / (jnp.linalg.norm(X, axis=(-2, -1), keepdims=True) + 1e-7)
    for a, b, c in coeffs:
        if tall:
            S = X.mT @ X
            X = a * X + X @ (b * S + c * S @ S)
        else:
            S = X @ X.mT
            X = a * X + (b * S + c * S @ S) @ X
    step = -(eps / 2) * (X if tall else X.mT) @ C_inv
    return step[0], step[1]


def _load_emitted():
    src = render(halfsplit.rule_module(), "jax")
    path = Path(tempfile.mkdtemp()) / "halfsplit_jax_bench.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("halfsplit_jax_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(repeats: int, dtype, configs) -> float:
    mod = _load_emitted()
    sched = coeffsearch.get(coeffsearch.DEFAULT).as_floats()
    rng = np.random.default_rng(0)
    worst = 0.0
    print(f"{'config':<26} {'emitted (NS) ms':>16} {'hand ms':>8} {'hand tall ms':>13} {'ratio':>6} "
          f"{'emitted SVD ms':>15} {'SVD/NS':>7}")
    for heads, d, d_h in configs:
        args = [jnp.asarray(rng.standard_normal((heads, d, d_h)), dtype) for _ in range(4)]
        fns = {"emitted": lambda args=args: mod.halfsplit_qk(*args, eps=0.02, damping=1e-4, schedule=sched),
               "hand": lambda args=args: handwritten_halfsplit(*args, 0.02, 1e-4, sched),
               "hand tall": lambda args=args: handwritten_halfsplit(*args, 0.02, 1e-4, sched, tall=True)}
        times = interleaved(fns, repeats)
        def svd(args=args):
            return mod.halfsplit_qk(*args, eps=0.02, damping=1e-4, msign="svd")
        s_times = interleaved({"svd": svd}, max(3, repeats // 4))["svd"]
        e, h, t, s = (statistics.median(x) * 1e3 for x in (*times.values(), s_times))
        ratio = max(paired_ratio(times["emitted"], times["hand"]), paired_ratio(times["emitted"], times["hand tall"]))
        worst = max(worst, ratio)
        print(f"{heads:>3} x ({d}, {d_h}) {jnp.dtype(dtype).name:<9} {e:>16.2f} {h:>8.2f} {t:>13.2f} {ratio:>6.3f} "
              f"{s:>15.2f} {s / e:>7.2f}")
    return worst


def main(argv=None) -> int:
    if stdout_closed("benchmarks.halfsplit"):
        return 2
    p = OneLineParser(prog="python -m benchmarks.halfsplit", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int_option(1, MAX_REPEATS, "a count"), default=30,
                   help=f"timed calls per implementation, 1 to {MAX_REPEATS} (default 30)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--heads-4096", type=int_option(1, MAX_HEADS, "a head count"), default=1,
                   help=f"heads in the d = 4096 configuration, 1 to {MAX_HEADS} (default 1)")
    p.add_argument("--lapack-threads", type=int_option(0, MAX_THREADS, "a thread count"), default=1,
                   help="OpenBLAS threads for jaxlib's CPU eigh, both implementations (default 1; 0 leaves the "
                        "library default; see foundation.compute.lapack_threads)")
    try:
        args = p.parse_args(argv)
    except UsageError as exc:
        return usage_error("benchmarks.halfsplit", exc)
    if args.lapack_threads:
        lapack_threads(args.lapack_threads)
    dtype = jnp.float32 if args.dtype == "float32" else jnp.bfloat16
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; schedule {coeffsearch.DEFAULT}; "
          f"median of {args.repeats} interleaved calls")
    worst = run(args.repeats, dtype, [(12, 768, 64), (args.heads_4096, 4096, 128)])
    print(f"emitted/handwritten median time ratio: {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
