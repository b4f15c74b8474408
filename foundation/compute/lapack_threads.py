"""The thread count of the LAPACK behind jaxlib's CPU factorizations (SciPy's OpenBLAS).

On the CPU, jaxlib computes ``eigh``, ``svd`` and Schur forms by calling SciPy's LAPACK, an
OpenBLAS with its own worker threads, while XLA runs the rest of the program on its own
intra-op pool. The two pools compete for the same cores, and idle OpenBLAS workers spin: on this
project's 2-core machine the 24 Gram eigendecompositions (64 × 64) of one half-split update at
GPT-2-small shapes took 148 ms with OpenBLAS's default 2 threads and 28 ms with 1 thread (same
run, interleaved; ``python -m benchmarks.step`` shows the effect on a whole update). The per-head
matrices are small, so one LAPACK thread loses nothing; parallelism comes from XLA's pool.

``lapack_threads(1)`` applies the limit now and returns a context manager that restores the
previous counts on exit (``threadpoolctl``). It limits every OpenBLAS/MKL loaded in the process,
NumPy's included. GPUs are unaffected (their solvers do not use these libraries).
"""

from __future__ import annotations

import scipy.linalg  # noqa: F401  (loads the LAPACK jaxlib calls, so the limit reaches it)
from threadpoolctl import threadpool_limits


def lapack_threads(n: int = 1):
    """Limit the BLAS/LAPACK thread pools to ``n`` threads (``with lapack_threads(1): ...``)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"lapack_threads: n must be a positive int, got {n!r}")
    return threadpool_limits(limits=n, user_api="blas")
