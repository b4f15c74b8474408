"""Benchmark: structured (rank-d_h) regularized Sylvester solve vs dense Bartels–Stewart.

    python -m benchmarks.sylvester [--d 1024] [--d-h 64] [--repeats N]

Solves ``(W_QW_Qᵀ + λI) H + H (W_KW_Kᵀ + λI) = D`` in float64 three ways, in one run: the project's
structured JAX routine (``O(d² d_h)``), ``jax.scipy.linalg.solve_sylvester`` and
``scipy.linalg.solve_sylvester`` (both ``O(d³)``). Prints median times, the largest difference
from SciPy's answer, and the speed-ups; the last line is the smaller of the two speed-ups.
"""

from __future__ import annotations

import statistics
import sys
import time

import jax
import numpy as np
import scipy.linalg

from benchmarks.interleave import MAX_REPEATS
from foundation.commandline import OneLineParser, UsageError, int_option, progress, stdout_closed, usage_error

jax.config.update("jax_enable_x64", True)

from foundation.compute import jax_sylvester  # noqa: E402 (after float64 is switched on)

MAX_SIZE = 2**14  # --d, --d-h: at most this wide (a d x d float64 matrix of 2 GiB)


def _median(fn, repeats):
    fn()
    out = []
    for _ in progress(range(repeats), desc="timing", unit="call"):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main(argv=None) -> int:
    if stdout_closed("benchmarks.sylvester"):
        return 2
    p = OneLineParser(prog="python -m benchmarks.sylvester", description=__doc__.split("\n\n")[0])
    p.add_argument("--d", type=int_option(1, MAX_SIZE, "a width"), default=1024, help=f"1 to {MAX_SIZE} (default 1024)")
    p.add_argument("--d-h", type=int_option(1, MAX_SIZE, "a width"), default=64, help=f"1 to {MAX_SIZE} (default 64)")
    p.add_argument("--damping", type=float, default=1e-3)
    p.add_argument("--repeats", type=int_option(1, MAX_REPEATS, "a count"), default=5,
                   help=f"1 to {MAX_REPEATS} (default 5)")
    try:
        a = p.parse_args(argv)
    except UsageError as exc:
        return usage_error("benchmarks.sylvester", exc)
    rng = np.random.default_rng(0)
    W_Q, W_K = rng.standard_normal((a.d, a.d_h)), rng.standard_normal((a.d, a.d_h))
    D = rng.standard_normal((a.d, a.d))
    eye = np.eye(a.d)
    A, B = W_Q @ W_Q.T + a.damping * eye, W_K @ W_K.T + a.damping * eye
    structured = jax.jit(jax_sylvester.sylvester_lowrank)
    dense = jax.jit(jax_sylvester.sylvester_dense)
    args = [jax.numpy.asarray(x) for x in (W_Q, W_K)]
    Dj = jax.numpy.asarray(D)
    ref = scipy.linalg.solve_sylvester(A, B, D)
    t_s = _median(lambda: structured(*args, a.damping, Dj).block_until_ready(), a.repeats)
    t_j = _median(lambda: dense(*args, a.damping, Dj).block_until_ready(), a.repeats)
    t_c = _median(lambda: scipy.linalg.solve_sylvester(A, B, D), a.repeats)
    scale = np.max(np.abs(ref))
    e_s = np.max(np.abs(np.asarray(structured(*args, a.damping, Dj)) - ref)) / scale
    e_j = np.max(np.abs(np.asarray(dense(*args, a.damping, Dj)) - ref)) / scale
    print(f"d = {a.d}, d_h = {a.d_h}, λ = {a.damping}, float64, median of {a.repeats}")
    print(f"{'solver':<34} {'time s':>9} {'max rel diff vs SciPy':>22}")
    print(f"{'structured (JAX, O(d² d_h))':<34} {t_s:>9.4f} {e_s:>22.2e}")
    print(f"{'jax.scipy.linalg.solve_sylvester':<34} {t_j:>9.4f} {e_j:>22.2e}")
    print(f"{'scipy.linalg.solve_sylvester':<34} {t_c:>9.4f} {0.0:>22.2e}")
    print(f"speed-up over jax dense: {t_j / t_s:.1f}x, over scipy: {t_c / t_s:.1f}x")
    print(f"structured/dense minimum speed-up: {min(t_j, t_c) / t_s:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
