"""LAPACK calls from the JAX routines: no NaN or Inf reaches them, and none deadlocks on the CPU.

Hostile values: :func:`lapack_guard` replaces every matrix that holds a NaN or Inf by zeros before an
eigh, SVD or Schur call and turns that matrix's results into NaN after it (a NaN or Inf in an SVD
made jaxlib 0.10's ``dgesdd`` spin forever). It works on traced values, so it holds under ``jit`` and
``vmap`` too; each LAPACK call spreads a NaN or Inf over the whole matrix it computes, so the emitted
functions check only their outputs (:mod:`foundation.compute.jax_output_checks`). Batches:
:func:`per_matrix_on_cpu` runs a batched LAPACK call as single-matrix calls on the CPU. Inlined
verbatim into the emitted modules.
"""

import jax
import jax.numpy as jnp


def lapack_guard(a):
    """``(A with every non-finite matrix zeroed, ok)``; ``ok`` is ``(..., 1, 1)``, True where finite.

    Callers pass the zeroed matrices to LAPACK and NaN the results where ``ok`` is False.
    """
    ok = jnp.all(jnp.isfinite(a), axis=(-2, -1), keepdims=True)
    return jnp.where(ok, a, 0), ok


def per_matrix_on_cpu(fn, a):
    """``fn(a)`` for a batched LAPACK ``fn``; on the CPU one single-matrix call per matrix, in a loop.

    jaxlib's CPU LAPACK calls split a batch over the intra-op pool and wait inside a pool worker for
    it; two such calls at once on a 2-worker pool deadlock (seen at Llama-3-8B attention shapes
    with gdb). A single-matrix call never waits on the pool. The calls run one after another in a
    ``lax.map``, so each call site is compiled once whatever the batch: 24 eighs of 64 × 64 compile
    in 0.13 s and run in 5.4 ms on 2 cores with one OpenBLAS thread, against 0.49 s and 4.1 ms as 24
    independent calls (which XLA runs in parallel) and 9.0 ms for the batched call. Unrolled calls
    made about a third of the first step's compile time of an attention layer for about 2 % of its
    step time. Other platforms keep the batched call.
    """
    if a.ndim == 2 or a.size == 0:  # an empty batch: the batched call returns empty results
        return fn(a)

    def single_calls(x):
        out = jax.lax.map(fn, x.reshape(-1, *x.shape[-2:]))
        return jax.tree.map(lambda y: y.reshape(*x.shape[:-2], *y.shape[1:]), out)

    return jax.lax.platform_dependent(a, cpu=single_calls, default=fn)
