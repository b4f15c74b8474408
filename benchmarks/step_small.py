"""The small-width rows of ``python -m benchmarks.step`` (``--rows small``): two-layer models at widths 128 and 256.

Two models per width (:mod:`benchmarks.models`): plain JAX (two full pre-norm layers as separate leaves, the
attention pairs declared, heads of :data:`HEAD_DIM`, a gated MLP of width ``4d``) and flax linen
(:func:`~benchmarks.models.flax_decoder`, ``pairs="auto"``). Four optimizers each: Compositional Muon (``cm``),
its Muon path alone (``muon-path``: no pairs, every matrix by ``msign``), ``optax.contrib.muon`` (``muon``) and
``optax.adamw`` (``adamw``); the project's two with :data:`~numerics.optimizer.OPTAX_PARITY` (optax's Newton–Schulz
coefficients and steps). ``optax.contrib.muon`` is given the flax attention kernels' matrix view
(``MuonDimensionNumbers``, as :mod:`numerics.optimizer.head_axes` reads them), so that it orthogonalizes them
instead of handing them to AdamW.

First step: ``jax.jit(update)`` called once from scratch (tracing, lowering, XLA's compile and the first run), wall
clock, :data:`FIRST_STEP_ROUNDS` rounds with the optimizers interleaved, the fastest kept. Steady state: the
compiled update, interleaved rounds (:mod:`benchmarks.interleave`); each ratio is the median over rounds of the
two times within a round. ``routines``: the distinct routines XLA compiles for the update (:func:`compiled_routines`).
"""

from __future__ import annotations

import re
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from optax.contrib import MuonDimensionNumbers

from benchmarks.interleave import interleaved, paired_ratio
from benchmarks.models import attention_pairs, flax_available, flax_decoder, full_layer, stacked_model
from numerics.optimizer import OPTAX_PARITY, compositional_muon, named_leaves
from numerics.optimizer.head_axes import head_axes_dimension_numbers

WIDTHS = (128, 256)
HEAD_DIM = 32  # heads of both models: d / HEAD_DIM
LAYERS = 2
FIRST_STEP_ROUNDS = 2
OPTIMIZERS = ("cm", "muon-path", "muon", "adamw")


def optax_dimension_numbers(params):
    """``optax.contrib.muon``'s ``weight_dimension_numbers`` for ``params``: the flax attention kernels' matrix
    view, the default for every other 2-D array, ``None`` (AdamW) for the rest."""
    heads = head_axes_dimension_numbers(params)
    names = iter(named_leaves(params))
    return jax.tree.map(lambda x: heads.get(next(names), MuonDimensionNumbers() if x.ndim == 2 else None), params)


def models(width, dtype):
    """``{model: (params, pairs, optax dimension numbers)}`` at ``width``: plain JAX, and flax when installed."""
    heads = width // HEAD_DIM
    rng = np.random.default_rng(0)
    plain = stacked_model(lambda: full_layer(rng, width, heads, heads, HEAD_DIM, 4 * width, dtype), LAYERS)
    out = {"jax": (plain, attention_pairs(heads, heads, LAYERS), None)}
    if flax_available():
        params = flax_decoder(width, heads, LAYERS, dtype)
        out["flax"] = (params, "auto", optax_dimension_numbers(params))
    return out


def optimizers(pairs, dimension_numbers, msign):
    """The four optimizers of a row (:data:`OPTIMIZERS`)."""
    return {"cm": compositional_muon(0.02, pairs=pairs, msign=msign, **OPTAX_PARITY),
            "muon-path": compositional_muon(0.02, pairs=None, msign=msign, **OPTAX_PARITY),
            "muon": optax.contrib.muon(0.02, muon_weight_dimension_numbers=dimension_numbers),
            "adamw": optax.adamw(0.02)}


def compiled_routines(compiled) -> int:
    """The distinct fused computations of a compiled program (``jax.stages.Compiled``): fusions whose bodies
    differ only in names count once, as XLA's CPU compiler emits one routine for them. Within a few of the count
    XLA's CPU compiler logs with ``TF_CPP_VMODULE=cpu_compiler=3``; XLA's compile time
    follows it."""
    text = compiled.as_text()
    bodies: dict = {}
    body: list = []
    for line in text.splitlines():
        if line.endswith("{") and not line.startswith(" "):  # a computation's header
            body = bodies.setdefault(line.split()[1 if line.startswith("ENTRY") else 0], [])
        elif line.startswith("  "):
            body.append(re.sub(r"%[\w.\-]+", "%", re.sub(r", metadata=\{.*?\}", "", line)).strip())
    fused = set(re.findall(r"kind=k\w+, calls=(%[\w.\-]+)", text))
    return len({"\n".join(bodies[name]) for name in fused if name in bodies})


def first_step(fn, args):
    """``(seconds, compiled)``: ``fn(*args)`` traced, lowered, compiled by XLA and run once, wall clock, with JAX's
    caches cleared first."""
    jax.clear_caches()  # else a second round finds the program of the first in JAX's compilation cache
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    return time.perf_counter() - start, compiled


def measure_row(params, pairs, dimension_numbers, msign, repeats, quiet=False):
    """``{optimizer: {"first_s", "step_s", "routines", "steady": [s per round]}}``: the fastest of
    :data:`FIRST_STEP_ROUNDS` first steps, the median steady-state step and :func:`compiled_routines`."""
    grads = jax.tree.map(lambda x: jnp.asarray(np.random.default_rng(1).standard_normal(x.shape), x.dtype), params)
    opts = optimizers(pairs, dimension_numbers, msign)
    args = {k: (grads, opt.init(params), params) for k, opt in opts.items()}
    first: dict = {k: [] for k in opts}
    compiled = {}
    for _ in range(FIRST_STEP_ROUNDS):
        for k, opt in opts.items():  # a new function each round: traced and compiled anew
            seconds, compiled[k] = first_step(lambda g, s, p, opt=opt: opt.update(g, s, p), args[k])
            first[k].append(seconds)
    steady = interleaved({k: (lambda k=k: compiled[k](*args[k])) for k in opts}, repeats, warmup=1, quiet=quiet)
    return {k: {"first_s": min(first[k]), "step_s": statistics.median(steady[k]), "steady": steady[k],
                "routines": compiled_routines(compiled[k])} for k in opts}


def small_records(repeats, dtype, msign, quiet=False):
    """One record per model, width and optimizer: first-step and steady-state seconds, routines, and the
    ratios to ``muon`` and ``adamw`` (first step: fastest against fastest; steady state: paired, per round)."""
    jax.block_until_ready(jax.jit(lambda x: x + 1)(jnp.zeros(4)))  # the process's first compile is not a row's
    records = []
    for width in WIDTHS:
        for model, (params, pairs, dims) in models(width, dtype).items():
            found = measure_row(params, pairs, dims, msign, repeats, quiet)
            for k, r in found.items():
                records.append({
                    "model": model, "width": width, "heads": width // HEAD_DIM, "layers": LAYERS, "optimizer": k,
                    "first_step_s": r["first_s"], "step_s": r["step_s"], "routines": r["routines"],
                    "first_vs_muon": r["first_s"] / found["muon"]["first_s"],
                    "first_vs_adamw": r["first_s"] / found["adamw"]["first_s"],
                    "step_vs_muon": paired_ratio(r["steady"], found["muon"]["steady"]),
                    "step_vs_adamw": paired_ratio(r["steady"], found["adamw"]["steady"])})
    return records


def print_small(records, msign, note=""):
    """The table of :func:`small_records`."""
    print(f"small widths: {LAYERS} layers, heads of {HEAD_DIM}, plain JAX (gated MLP 4d) and flax linen (MLP 4d); "
          f"cm and muon-path with OPTAX_PARITY, msign={msign}{note}")
    print(f"{'model':<5} {'d':>4} {'H':>2} {'optimizer':<10} {'first s':>7} {'/muon':>6} {'/adamw':>6} "
          f"{'step ms':>8} {'/muon':>6} {'/adamw':>6} {'routines':>8}")
    for r in records:
        print(f"{r['model']:<5} {r['width']:>4} {r['heads']:>2} {r['optimizer']:<10} {r['first_step_s']:>7.2f} "
              f"{r['first_vs_muon']:>6.2f} {r['first_vs_adamw']:>6.2f} {1e3 * r['step_s']:>8.2f} "
              f"{r['step_vs_muon']:>6.3f} {r['step_vs_adamw']:>6.3f} {r['routines']:>8}", flush=True)
    if not flax_available():
        print("flax is not installed (pip install .[frameworks]): its rows are left out")
