"""LAPACK calls from the PyTorch routines: no NaN or Inf reaches them (:mod:`foundation.compute.jax_lapack_calls`).

:func:`lapack_guard` replaces every matrix that holds a NaN or Inf by zeros before an eigh or SVD call
and turns that matrix's results into NaN after it (``torch.linalg.eigh`` raises on a non-finite input
instead of returning NaN). Each LAPACK call then spreads a NaN or Inf over the whole matrix it computes,
so the emitted functions check only their outputs (:mod:`foundation.compute.torch_output_checks`).
Inlined verbatim into the emitted modules.
"""

import torch


def lapack_guard(a):
    """``(A with every non-finite matrix zeroed, ok)``; ``ok`` is ``(..., 1, 1)``, True where finite.

    Callers pass the zeroed matrices to LAPACK and NaN the results where ``ok`` is False.
    """
    ok = torch.isfinite(a).all(dim=-1, keepdim=True).all(dim=-2, keepdim=True)
    return torch.where(ok, a, torch.zeros_like(a)), ok


def per_matrix_on_cpu(fn, a):
    """``fn(a)`` for a batched LAPACK ``fn``: PyTorch loops over the batch itself, so the call is made as it is.

    The JAX routine of this name runs one single-matrix call per matrix on the CPU (jaxlib's batched calls
    can deadlock its thread pool); PyTorch's batched calls have no such pool, and the name is kept so that
    the routines read as their JAX counterparts.
    """
    return fn(a)
