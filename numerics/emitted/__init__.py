"""The emitted JAX modules that the optimizer calls, shipped as generated files.

Each file here is exactly what ``python -m derivations.<rule> --emit jax`` prints (default schedule
and msign); nothing in it is written by hand, and each imports only ``jax``, ``functools`` and the routines
its code calls, from :mod:`foundation.compute.jax_runtime`. The emitter owns them:
``python -m derivations.regenerate --regenerate`` rewrites them and ``--check`` compares them with a
fresh emission (``tests/numerics/test_optimizer.py`` runs the same comparison).
"""
