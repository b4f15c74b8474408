"""The compute routines shared by everything in the workbench that computes (layer 1: imports nothing
of the project above it). (The word *kernel* in this project means the trusted proof kernel,
:mod:`derivations.lemmas.kernel`; these are routines.)

* :mod:`foundation.compute.reference` — float64 NumPy and high-precision mpmath references
  (msign over nonzero singular values, damped PSD powers of Gram matrices, norms).
* the JAX routines, which the emitted code imports from :mod:`~foundation.compute.jax_runtime` (or, emitted with
  ``--standalone``, inlines verbatim: they import only ``jax``):
  :mod:`~foundation.compute.jax_msign` (msign by SVD and the one Newton–Schulz),
  :mod:`~foundation.compute.jax_damped_gram` (powers of ``WᵀW + λI``: Gram roots, polar factor),
  :mod:`~foundation.compute.jax_sylvester` (the regularized Sylvester solves),
  :mod:`~foundation.compute.jax_exact_scaling` (exact powers of two: the number range),
  :mod:`~foundation.compute.jax_lapack_calls` (guarded, per-matrix LAPACK calls),
  :mod:`~foundation.compute.jax_input_checks` and :mod:`~foundation.compute.jax_output_checks`
  (arguments before, NaN/overflow/underflow after), :mod:`~foundation.compute.jax_head_layout`
  (attention heads in the stored layouts).
* :mod:`foundation.compute.numpy_routines` and :mod:`foundation.compute.numpy_exact_scaling` — their float64 NumPy
  counterparts (imported by the emitted NumPy code from :mod:`~foundation.compute.numpy_runtime`), with the
  same exponent handling; :mod:`foundation.compute.output_limits` — the underflow limit and the error words both
  targets share.
* :mod:`foundation.compute.gram_roots` — matmul-only PSD roots (coupled Newton–Schulz).
* :mod:`foundation.compute.spectra` — random test matrices with prescribed singular values.
* :mod:`foundation.compute.argcheck`, :mod:`foundation.compute.ov_layout` — argument checks.
* :mod:`foundation.compute.lapack_threads` — one OpenBLAS thread for LAPACK on the CPU.

Examples:
  The matrix sign of a 4 × 6 matrix with singular values 1, 0.5, 0.1 and 0.01: exactly, by the SVD
  (NumPy, float64), and by the five Newton–Schulz steps of Polar Express (JAX, float32), which leave
  every singular value inside the band ``[0.8589, 1.1411]`` that :mod:`coeffsearch.certify` certifies:

  >>> import jax
  >>> import numpy as np
  >>> from coeffsearch import get
  >>> from foundation.compute.jax_msign import newton_schulz, schedule_array
  >>> from foundation.compute.numpy_routines import msign_svd
  >>> from foundation.compute.spectra import with_singular_values
  >>> a = with_singular_values(np.random.default_rng(0), 4, 6, [1.0, 0.5, 0.1, 0.01])
  >>> np.linalg.svd(msign_svd(a), compute_uv=False).round(12)
  array([1., 1., 1., 1.])
  >>> steps = schedule_array(get("polar-express-5").as_floats())
  >>> sigma = np.linalg.svd(np.asarray(jax.jit(newton_schulz)(a.astype(np.float32), steps)), compute_uv=False)
  >>> bool(np.all((0.8589 < sigma) & (sigma < 1.1411)))
  True
"""
