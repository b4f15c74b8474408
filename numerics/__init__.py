"""Numerical kernels shared by everything in the workbench that computes.

* :mod:`numerics.reference` — float64 NumPy and high-precision mpmath references
  (msign over nonzero singular values, damped PSD powers of Gram matrices, norms).
* :mod:`numerics.jax_kernels` — the JAX kernels (the one Newton–Schulz, eigh-based damped
  inverse roots, SVD msign, input validation); the emitted code inlines their source.
* :mod:`numerics.spectra` — random test matrices with prescribed singular values.
"""
