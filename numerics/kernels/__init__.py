"""Numerical kernels shared by everything in the workbench that computes (layer 1: imports nothing
of the project above it).

* :mod:`numerics.kernels.reference` — float64 NumPy and high-precision mpmath references
  (msign over nonzero singular values, damped PSD powers of Gram matrices, norms).
* :mod:`numerics.kernels.jax_kernels` — the JAX kernels (the one Newton–Schulz, Gram roots,
  SVD msign, input validation); the emitted code inlines their source.
* :mod:`numerics.kernels.numpy_kernels` — their float64 NumPy counterparts.
* :mod:`numerics.kernels.gram_roots` — matmul-only PSD roots (coupled Newton–Schulz).
* :mod:`numerics.kernels.spectra` — random test matrices with prescribed singular values.
* :mod:`numerics.kernels.argcheck`, :mod:`numerics.kernels.ov_layout` — argument checks.
* :mod:`numerics.kernels.lapack_threads` — one OpenBLAS thread for LAPACK on the CPU.
"""
