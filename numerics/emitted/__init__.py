"""The emitted modules that the optimizers call, shipped as generated files.

Each ``<rule>.py`` here is exactly what ``python -m derivations.<rule> --emit jax`` prints (default schedule
and msign), and each ``<rule>_torch.py`` what ``--emit torch`` prints; nothing in them is written by hand.
A JAX module imports only ``jax``, ``functools`` and the routines its code calls, from
:mod:`foundation.compute.jax_runtime`; a PyTorch module only ``torch`` and its routines, from
:mod:`foundation.compute.torch_runtime` (this package imports none of them, so it imports without PyTorch).
The emitter owns them: ``python -m derivations.regenerate --regenerate`` rewrites them and ``--check``
compares them with a fresh emission (``tests/numerics/test_optimizer.py`` runs the same comparison).
"""
