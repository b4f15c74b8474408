"""The ground floor (layer 1): what every other layer computes and reads with, importing nothing of the
project above it.

* :mod:`foundation.compute` — the compute routines: JAX and NumPy linear algebra that the emitted modules,
  the optimizer and the checks call (matrix sign, Gram roots, Sylvester solves, exact scaling, argument and
  output checks), with float64/mpmath references;
* :mod:`foundation.schedule` — the Newton–Schulz :class:`~foundation.schedule.Schedule` value (literal
  coefficients or a recipe), validated once; :mod:`foundation.polynomial` — the odd polynomials it steps by,
  in mpmath; :mod:`foundation.minimax` — the greedy per-step minimax (Remez) a recipe is computed by;
* :mod:`foundation.commandline` — the one-line command-line I/O every command shares (usage errors with
  exit status 2, bounded JSON reading, integer options with ranges).
"""
