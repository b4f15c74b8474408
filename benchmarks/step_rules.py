"""The rule rows of ``python -m benchmarks.step`` (``--rows rules``): each attention rule alone against Muon on the
same two matrices, with its flop floor.

For each shape (``--shapes``, ``--small``): the half-split QK rule on ``(W_Q, W_K)`` and the hybrid OV rule on
``(W_O, W_V)`` as the optimizer calls them (:func:`~numerics.optimizer.rules.qk_direction`,
:func:`~numerics.optimizer.rules.ov_direction`, ``ε = 2``, damping ``1e-2``, ``--msign``), and
``optax.contrib.muon``'s Newton–Schulz on the same two matrices (the same 5-step Polar Express schedule): the
first call's compile time (JAX's caches cleared), the routines XLA compiles
(:func:`benchmarks.step_small.compiled_routines`), the median time per call over interleaved rounds, the paired
ratio to Muon, and the flop ratio of :func:`benchmarks.step.rule_flop_model` (the floor the time ratio would reach
if every flop ran at the same rate). No momentum, non-finite guard or Muon path: what is left is the rules.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from optax.contrib._muon import orthogonalize_via_newton_schulz

from benchmarks.interleave import interleaved, paired_ratio
from benchmarks.models import layer
from benchmarks.step_small import compiled_routines
from numerics.optimizer import DirectionOptions, OVPair, QKPair, plan_pairs
from numerics.optimizer.rules import ov_direction, qk_direction

RULES = {"qk": ("half_split", qk_direction, ("wq", "wk")), "ov": ("hybrid", ov_direction, ("wo", "wv"))}


def rule_programs(params, grads, heads, kv_heads, msign, schedule) -> dict:
    """``{rule: {"cm": (function, args), "muon": (function, args)}}`` of one layer's attention matrices."""
    plan = plan_pairs([QKPair("wq", "wk", heads, kv_heads), OVPair("wo", "wv", heads, kv_heads)], params)
    options = DirectionOptions(eps=2.0, damping=1e-2, msign=msign, schedule=schedule)
    coeffs = jnp.asarray(schedule)
    out = {}
    for (rule, (name, direction, members)), pair in zip(RULES.items(), plan.pairs, strict=True):
        args = (*(params[m] for m in members), *(grads[m] for m in members))
        out[rule] = {
            "cm": (lambda wa, wb, ga, gb, pair=pair, name=name, direction=direction:
                   direction(name, wa, wb, ga, gb, pair, options), args),
            "muon": (lambda wa, wb, ga, gb: tuple(orthogonalize_via_newton_schulz(g, coeffs, len(schedule))
                                                  for g in (ga, gb)), args)}
    return out


def measure_rules(d, heads, kv_heads, head_dim, dtype, msign, schedule, repeats, quiet=False) -> dict:
    """``{rule: {"cm": (compile s, routines, median s), "muon": (…), "ratio": paired cm/muon}}``."""
    rng = np.random.default_rng(0)
    params = layer(rng, d, heads, kv_heads, head_dim, dtype)
    grads = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), dtype), params)
    found = {}
    for rule, programs in rule_programs(params, grads, heads, kv_heads, msign, schedule).items():
        compiled, row = {}, {}
        for label, (fn, args) in programs.items():
            jax.clear_caches()
            start = time.perf_counter()
            compiled[label] = jax.jit(fn).lower(*args).compile()
            row[label] = [time.perf_counter() - start, compiled_routines(compiled[label])]
        calls = {k: (lambda fn=compiled[k], args=programs[k][1]: fn(*args)) for k in programs}
        times = interleaved(calls, repeats, warmup=1, quiet=quiet)
        found[rule] = {k: (*row[k], statistics.median(times[k])) for k in programs}
        found[rule]["ratio"] = paired_ratio(times["cm"], times["muon"])
    return found
