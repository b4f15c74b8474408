"""LAPACK calls from the JAX kernels: no NaN or Inf reaches them, and none deadlocks on the CPU.

Hostile values: :func:`lapack_guard` replaces every matrix that holds a NaN or Inf by zeros before an
eigh, SVD or Schur call and turns that matrix's results into NaN after it (a NaN or Inf in an SVD
made jaxlib 0.10's ``dgesdd`` spin forever). It works on traced values, so it holds under ``jit`` and
``vmap`` too; each kernel spreads a NaN or Inf over the whole matrix it computes, so the emitted
functions check only their outputs (:mod:`numerics.kernels.jax_output_checks`). Batches:
:func:`per_matrix_on_cpu` runs a batched LAPACK kernel as single-matrix calls on the CPU. Inlined
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


UNROLL_LIMIT = 64  # matrices per batched LAPACK call that the CPU path unrolls into single calls


def per_matrix_on_cpu(fn, a, unroll=True):
    """``fn(a)`` for a batched LAPACK ``fn``; on the CPU one single-matrix call per matrix.

    jaxlib's CPU kernels split a batch over the intra-op pool and wait inside a pool worker for
    it; two such kernels at once on a 2-worker pool deadlock (seen at Llama-3-8B attention shapes
    with gdb). A single-matrix call never waits on the pool. Up to ``UNROLL_LIMIT`` matrices the
    calls are independent operations, which XLA runs in parallel (24 eighs of 64 × 64 on 2 cores
    with one OpenBLAS thread: 8.7 ms, as fast as the batched call's 9.0 ms; compiling 64 calls
    takes 1.5 s, 256 take 7.5 s); larger batches run one matrix at a time in a ``lax.map``
    (12.2 ms for the same 24; a loop body runs its calls in sequence). Other platforms keep the
    batched call. ``unroll=False`` always loops: for a route that rarely runs (the SVD fallback of
    :func:`~numerics.kernels.jax_damped_gram.gram_eigh`), whose unrolled calls would be compiled in
    every program (both branches of a ``lax.cond`` are) for no speed gain on the common path.
    """
    if a.ndim == 2 or a.size == 0:  # an empty batch: the batched call returns empty results
        return fn(a)

    def single_calls(x):
        flat = x.reshape(-1, *x.shape[-2:])
        if unroll and flat.shape[0] <= UNROLL_LIMIT:
            outs = [fn(flat[i]) for i in range(flat.shape[0])]
            out = jax.tree.map(lambda *ys: jnp.stack(ys), *outs)
        else:
            out = jax.lax.map(fn, flat)
        return jax.tree.map(lambda y: y.reshape(*x.shape[:-2], *y.shape[1:]), out)

    return jax.lax.platform_dependent(a, cpu=single_calls, default=fn)
