"""Benchmark: one full optimizer update, Compositional Muon against ``optax.contrib.muon``.

    python -m benchmarks.step [--repeats N] [--shapes gpt2,llama3] [--dtype float32|bfloat16]
                              [--rows attention,full,train,small,rules] [--msign auto|newton_schulz|gram_newton_schulz]
                              [--small] [--layers N] [--json]

Times the first step's compilation, then ``jit(update)`` (momentum included) of the optimizers, interleaved
in one run. Attention rows: the four attention matrices of one layer, GPT-2-small (``d = 768``, 12 heads
of 64) and Llama-3-8B (``d = 4096``, 32 heads, 8 kv heads of 128; ``W_K, W_V`` are ``4096 × 1024``).
Full-layer rows: the attention matrices plus a gated MLP (``W_gate, W_up: d × f``, ``W_down: f × d``;
``f = 14336`` for Llama-3-8B, and for GPT-2-small its MLP width ``4d = 3072`` in the gated form), with
two optimizers each against ``optax.contrib.muon``: Compositional Muon (attention pairs by the derived
rules, the MLP by its Muon path) and the project's Muon path alone (``compositional_muon`` with no
pairs: every matrix ``√max(1, fan_out/fan_in) msign(m)``). Compositional Muon uses half-split QK
(grouped-query when ``H_kv < H``) and the hybrid OV rule, damping ``1e-2``; Muon orthogonalizes each
matrix whole. All use the same 5-step Polar Express schedule; the project's optimizers compute msign by
``--msign`` (default ``auto``: Gram Newton–Schulz with its default restart after iteration 2 where the
flop model says it is cheaper, the standard iteration elsewhere). ``--small`` divides ``d``, ``d_h``
and ``f`` by :data:`SMALL_FACTOR` (head counts kept), for a CPU. ``--layers N`` makes every row a model of
``N`` such layers, each layer's matrices separate leaves (``layer0/wq``, …, as an unscanned model stores
them): ``optax.contrib.muon`` compiles one Newton–Schulz per matrix, Compositional Muon one call per
rule and shape (:mod:`numerics.optimizer.batching`), so the compile-time ratio (``comp ratio``) falls as
``N`` grows. Each ratio of step times is the median over rounds of the two updates' times within a round
(see :mod:`benchmarks.interleave`); each row also prints the flop
model of both updates (:func:`flop_model`, :func:`layer_flop_model`), the floor the measured ratio would
reach if every flop ran at the same rate. Training rows (``train``): the first training step as a training
loop compiles it, one program of the model's forward pass, its gradient, the update and the new params
(:func:`train_step`, full layers of :func:`block_forward`, inputs :data:`TRAIN_BATCH`), CM against
``optax.contrib.muon``: compile time first, then the steady-state step. Small-width rows (``small``,
:mod:`benchmarks.step_small`): two-layer plain JAX and flax models at widths 128 and 256, the first step
(compile and first run) and the steady-state step of CM, its Muon path, ``optax.contrib.muon`` and
``optax.adamw``, with the ratios to the last two and the routines XLA compiles. Rule rows (``rules``,
:mod:`benchmarks.step_rules`): each attention rule alone against Newton–Schulz on its two matrices, beside its flop
floor (:func:`rule_flop_model`). The last line is ``cm/muon median
step time ratio: R``, the largest Compositional Muon / ``optax.contrib.muon`` ratio over every row printed;
``--json`` prints one JSON document instead (every row's ratios, the small rows' records in full).
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from threadpoolctl import threadpool_info

from benchmarks.interleave import MAX_REPEATS, MAX_THREADS, interleaved, paired_ratio
from benchmarks.models import attention_pairs, full_layer, layer, mlp_shapes, stacked_model
from benchmarks.step_rules import measure_rules
from benchmarks.step_small import print_small, small_records
from foundation.commandline import OneLineParser, UsageError, int_option, stdout_closed, usage_error
from foundation.compute.jax_spectral_sign import default_restarts, gram_chosen
from foundation.compute.lapack_threads import lapack_threads
from numerics.optimizer import MSIGN_METHODS, compositional_muon, resolve_schedule

SHAPES = {"gpt2": (768, 12, 12, 64), "llama3": (4096, 32, 8, 128)}
#: the gated MLP's width f per shape: Llama-3-8B's 14336; GPT-2-small's (ungated) MLP width 4d = 3072
MLP_WIDTH = {"gpt2": 3072, "llama3": 14336}
SMALL_FACTOR = 8  # --small: d, d_h and f divided by this, head counts kept
ROWS = ("attention", "full", "train", "small", "rules")
MAX_LAYERS = 96  # --layers: at most this many (GPT-3's 96 layers)
GRAM_CHOICES = tuple(m for m in MSIGN_METHODS if m != "svd")  # the methods the flop model counts


def dims(name, small=False):
    """``(d, heads, kv_heads, head_dim, f)`` of a shape, scaled down by :data:`SMALL_FACTOR` when ``small``."""
    d, heads, kv, hd = SHAPES[name]
    f = MLP_WIDTH[name]
    k = SMALL_FACTOR if small else 1
    return d // k, heads, kv, hd // k, f // k


def ns_flops(m, n, steps, degree):
    """Multiply-add flops (2 per MAC) of Newton–Schulz on an ``m × n`` matrix (short side ``a``).

    Per step: ``A = X Xᵀ`` (``2a²b``), ``degree − 2`` products of ``a × a`` matrices in the Horner
    form (``2a³`` each), and ``B X`` (``2a²b``).
    """
    a, b = min(m, n), max(m, n)
    return steps * (4 * a * a * b + max(degree - 2, 0) * 2 * a ** 3)


def gram_flops(m, n, steps, restarts):
    """Flops of Gram Newton–Schulz (quintic steps) on an ``m × n`` matrix (short side ``a``, long ``b``) with
    ``restarts`` restarts: ``4(K + 1) a²b + 2a³ (4T − 3K − 3)`` (``python -m derivations.gram_ns``, Lemma GK;
    ``tests/benchmarks/test_benchmarks.py`` checks it against the products the routine executes)."""
    a, b = min(m, n), max(m, n)
    return 4 * (restarts + 1) * a * a * b + 2 * a ** 3 * (4 * steps - 3 * restarts - 3)


def sign_flops(m, n, steps, degree, msign="newton_schulz"):
    """Flops of one msign of an ``m × n`` matrix as the project computes it with ``msign``: the Gram form
    (quintic steps, the default restarts) for ``"gram_newton_schulz"``, and for ``"auto"`` where
    :func:`foundation.compute.jax_spectral_sign.gram_chosen` picks it; else :func:`ns_flops`."""
    if degree == 3 and (msign == "gram_newton_schulz" or (msign == "auto" and gram_chosen((m, n)))):
        return gram_flops(m, n, steps, len(default_restarts(steps)))
    return ns_flops(m, n, steps, degree)


def eigh_flops(n):
    """``≈ 9 n³`` for a symmetric eigendecomposition with eigenvectors (tridiagonal reduction plus
    back-transformation; Golub & Van Loan's count)."""
    return 9 * n ** 3


def rule_flop_model(d, heads, kv_heads, head_dim, steps, degree, msign="newton_schulz"):
    """``{"qk": (cm, muon), "ov": (cm, muon)}``: the flops of each attention rule and of Muon on the same two
    matrices (Gram roots by eigh).

    CM: half-split QK (per query head: its key head's Gram root, whitened sign of ``d_h × d``; per key
    head: the stacked group's Gram root) and hybrid OV (per value head: Gram root; one global sign of
    ``d × H·d_h`` on the O side; per value head: the stacked output heads' Gram root and a
    ``d_h × d`` sign), each sign as ``msign`` computes it (:func:`sign_flops`). Muon
    (``optax.contrib.muon``): one standard sign per matrix. Elementwise work and momentum are left out.
    """
    g, dh = heads // kv_heads, head_dim
    def root(rows):
        return 2 * rows * dh * dh + eigh_flops(dh) + 2 * dh ** 3  # Gram, eigh, V f(Λ) Vᵀ
    whiten = 2 * d * dh * dh  # G C⁻¹ or C⁻¹ G for one head
    head_sign = sign_flops(d, dh, steps, degree, msign)
    qk = heads * (root(d) + 2 * whiten + head_sign) + kv_heads * (root(g * d) + 2 * whiten + head_sign)
    ov = (kv_heads * root(d) + heads * 2 * whiten + sign_flops(d, heads * dh, steps, degree, msign)
          + kv_heads * (root(g * d) + 2 * whiten + head_sign))
    muon = ns_flops(d, heads * dh, steps, degree) + ns_flops(d, kv_heads * dh, steps, degree)  # per pair
    return {"qk": (qk, muon), "ov": (ov, muon)}


def flop_model(d, heads, kv_heads, head_dim, steps, degree, msign="newton_schulz"):
    """``(cm, muon)`` flops of one update on a layer's four attention matrices: the sums over the rules of
    :func:`rule_flop_model`."""
    rules = rule_flop_model(d, heads, kv_heads, head_dim, steps, degree, msign).values()
    return sum(cm for cm, _ in rules), sum(muon for _, muon in rules)


def layer_flop_model(d, heads, kv_heads, head_dim, f, steps, degree, msign="auto"):
    """``{"cm", "muon-path", "optax"}`` flops of one update of a full layer: the attention matrices of
    :func:`flop_model` plus the gated MLP (:func:`mlp_shapes`). ``"optax"`` (``optax.contrib.muon``): one
    standard sign per matrix; ``"muon-path"``: one sign per matrix as ``msign`` computes it
    (:func:`sign_flops`); ``"cm"``: the attention rules of :func:`flop_model` and the MLP by the Muon path."""
    attention = [(d, heads * head_dim), (d, kv_heads * head_dim), (d, heads * head_dim), (kv_heads * head_dim, d)]
    mlp = list(mlp_shapes(d, f).values())
    return {"cm": flop_model(d, heads, kv_heads, head_dim, steps, degree, msign)[0]
            + sum(sign_flops(m, n, steps, degree, msign) for m, n in mlp),
            "muon-path": sum(sign_flops(m, n, steps, degree, msign) for m, n in attention + mlp),
            "optax": sum(ns_flops(m, n, steps, degree) for m, n in attention + mlp)}


def measure(name, repeats, dtype, msign="newton_schulz", small=False, layers=1):
    """``(median cm seconds, median muon seconds, paired cm/muon ratio)`` over interleaved rounds."""
    return measure_with_compile(name, repeats, dtype, msign, small, layers)[2:]


def run_compiled(programs, repeats):
    """``(compile seconds, [seconds per round])`` per label of ``programs`` (``{label: (function, args)}``):
    ``jit(function).lower(*args).compile()`` (tracing included, wall clock), then interleaved rounds of the
    compiled programs."""
    runs, compile_s = {}, {}
    for label, (function, args) in programs.items():
        start = time.perf_counter()
        fn = jax.jit(function).lower(*args).compile()
        compile_s[label] = time.perf_counter() - start
        runs[label] = lambda fn=fn, args=args: fn(*args)
    return compile_s, interleaved(runs, repeats, warmup=1)


def against_optax(compile_s, times):
    """``{label: (compile s, median s, paired ratio to the "optax" label)}`` from :func:`run_compiled`'s result."""
    return {k: (compile_s[k], statistics.median(times[k]), paired_ratio(times[k], times["optax"])) for k in times}

def first_updates(optimizers, params, grads):
    """``{label: (optimizer.update, (grads, state, params))}``: the first update of each optimizer."""
    return {label: (opt.update, (grads, opt.init(params), params)) for label, opt in optimizers.items()}


def measure_with_compile(name, repeats, dtype, msign="newton_schulz", small=False, layers=1):
    """``(cm compile s, muon compile s, median cm s, median muon s, paired cm/muon ratio)`` on the attention
    matrices of ``layers`` layers (``muon``: ``optax.contrib.muon``)."""
    d, heads, kv, hd, _ = dims(name, small)
    rng = np.random.default_rng(0)
    params = stacked_model(lambda: layer(rng, d, heads, kv, hd, dtype), layers)
    grads = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), dtype), params)
    schedule = resolve_schedule("polar-express-5", 5)
    cm = compositional_muon(0.02, pairs=attention_pairs(heads, kv, layers), msign=msign)
    muon = optax.contrib.muon(0.02, ns_coeffs=schedule)
    compile_s, times = run_compiled(first_updates({"cm": cm, "muon": muon}, params, grads), repeats)
    return (compile_s["cm"], compile_s["muon"], statistics.median(times["cm"]), statistics.median(times["muon"]),
            paired_ratio(times["cm"], times["muon"]))


def measure_full(name, repeats, dtype, msign="auto", small=False, layers=1):
    """Full layers (attention and gated MLP): ``{label: (compile s, median s, paired ratio to optax)}`` for
    ``"cm"``, ``"muon-path"`` (``compositional_muon`` without pairs) and ``"optax"`` (ratio 1)."""
    d, heads, kv, hd, f = dims(name, small)
    rng = np.random.default_rng(0)
    params = stacked_model(lambda: full_layer(rng, d, heads, kv, hd, f, dtype), layers)
    grads = jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), dtype), params)
    schedule = resolve_schedule("polar-express-5", 5)
    optimizers = {
        "cm": compositional_muon(0.02, pairs=attention_pairs(heads, kv, layers), msign=msign),
        "muon-path": compositional_muon(0.02, pairs=None, msign=msign),
        "optax": optax.contrib.muon(0.02, ns_coeffs=schedule)}
    compile_s, times = run_compiled(first_updates(optimizers, params, grads), repeats)
    return against_optax(compile_s, times)


#: ``(batch, tokens)`` of the training rows' inputs
TRAIN_BATCH = (8, 128)


def rms_norm(x, eps=1e-6):
    """``x / rms(x)`` over the last axis, without a gain (the params are :func:`full_layer`'s matrices only)."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)


def block_forward(params, x, heads, kv_heads, head_dim):
    """One pre-norm transformer block of :func:`full_layer`'s params on ``x`` (``batch × tokens × d``): causal
    attention with ``heads`` query and ``kv_heads`` key/value heads (the layouts :func:`attention_pairs`
    declares: ``q = x W_Q``, ``k = x W_K``, ``v = x W_Vᵀ``, output ``a W_Oᵀ``), then the gated MLP
    ``(silu(x W_gate) ⊙ x W_up) W_down``, each on :func:`rms_norm` of its input and added to it."""
    b, t, _ = x.shape
    h = rms_norm(x)
    q = (h @ params["wq"]).reshape(b, t, heads, head_dim)
    k = (h @ params["wk"]).reshape(b, t, kv_heads, head_dim)
    v = (h @ params["wv"].T).reshape(b, t, kv_heads, head_dim)
    attended = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, t, heads * head_dim)
    x = x + attended @ params["wo"].T
    h = rms_norm(x)
    return x + (jax.nn.silu(h @ params["w_gate"]) * (h @ params["w_up"])) @ params["w_down"]


def train_step(optimizer, heads, kv_heads, head_dim, layers):
    """``(params, state, x, y) → (params, state, loss)``: the model's loss (mean squared error of its output
    against ``y``), its gradient, ``optimizer``'s update and the new params, one program as a training loop
    jits it."""
    def loss(params, x, y):
        for block in [params] if layers == 1 else [params[f"layer{i}"] for i in range(layers)]:
            x = block_forward(block, x, heads, kv_heads, head_dim)
        return jnp.mean((x - y) ** 2)

    def step(params, state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    return step


def measure_train(name, repeats, dtype, msign="auto", small=False, layers=1):
    """The first training step (forward, backward, update, :func:`train_step`) of ``layers`` full layers on
    :data:`TRAIN_BATCH` inputs: ``{label: (compile s, median s, paired ratio to optax)}`` for ``"cm"`` and
    ``"optax"`` (ratio 1)."""
    d, heads, kv, hd, f = dims(name, small)
    rng = np.random.default_rng(0)
    params = stacked_model(lambda: full_layer(rng, d, heads, kv, hd, f, dtype), layers)
    x = jnp.asarray(rng.standard_normal((*TRAIN_BATCH, d)), dtype)
    y = jnp.roll(x, 1, axis=1)  # any fixed target: the step's cost does not depend on it
    optimizers = {"cm": compositional_muon(0.02, pairs=attention_pairs(heads, kv, layers), msign=msign),
                  "optax": optax.contrib.muon(0.02, ns_coeffs=resolve_schedule("polar-express-5", 5))}
    compile_s, times = run_compiled(
        {label: (train_step(opt, heads, kv, hd, layers), (params, opt.init(params), x, y))
         for label, opt in optimizers.items()}, repeats)
    return against_optax(compile_s, times)


def _names(text, known, what):
    names = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in names if s not in known]
    if bad or not names:
        raise UsageError(f"argument {what}: unknown {bad or names}; choose from {', '.join(known)}")
    return names


def attention_rows(names, args, dtype, steps, degree) -> list:
    """Print the attention rows; their cm/optax ratios."""
    print(f"attention (four matrices per layer), {args.layers} layer{'s' if args.layers > 1 else ''}; "
          f"msign={args.msign}{SMALL_NOTE if args.small else ''}")
    print(f"{'shape':<8} {'d':>5} {'H':>3} {'H_kv':>4} {'d_h':>4} {'cm comp s':>9} {'muon comp s':>11} "
          f"{'comp ratio':>10} {'cm ms':>10} {'muon ms':>10} {'ratio':>6} "
          f"{'cm GF':>7} {'muon GF':>8} {'flop ratio':>10}")
    ratios = []
    for name in names:
        d, h, kv, hd, _ = dims(name, args.small)
        c_cm, c_muon, t_cm, t_muon, ratio = measure_with_compile(name, args.repeats, dtype, args.msign, args.small,
                                                                 args.layers)
        ratios.append(ratio)
        f_cm, f_muon = flop_model(d, h, kv, hd, steps, degree, args.msign)
        print(f"{name:<8} {d:>5} {h:>3} {kv:>4} {hd:>4} {c_cm:>9.2f} {c_muon:>11.2f} {c_cm / c_muon:>10.2f} "
              f"{1e3 * t_cm:>10.1f} "
              f"{1e3 * t_muon:>10.1f} {ratios[-1]:>6.3f} "
              f"{f_cm / 1e9:>7.2f} {f_muon / 1e9:>8.2f} {f_cm / f_muon:>10.3f}", flush=True)
    return ratios


SMALL_NOTE = f"; --small: d, d_h and f divided by {SMALL_FACTOR}"


def full_rows(names, args, dtype, steps, degree) -> dict:
    """Print the full-layer rows; ``{"cm": [ratios], "muon-path": [ratios]}`` against ``optax.contrib.muon``."""
    print(f"full layer (attention + gated MLP), {args.layers} layer{'s' if args.layers > 1 else ''}, each against "
          f"optax.contrib.muon; msign={args.msign}{SMALL_NOTE if args.small else ''}")
    print(f"{'shape':<8} {'d':>5} {'H':>3} {'H_kv':>4} {'d_h':>4} {'f':>6} {'optimizer':<10} {'comp s':>7} "
          f"{'optax comp s':>12} {'ms':>10} {'optax ms':>10} {'ratio':>6} {'GF':>8} {'optax GF':>8} {'flop ratio':>10}")
    ratios: dict = {"cm": [], "muon-path": []}
    for name in names:
        d, h, kv, hd, f = dims(name, args.small)
        found = measure_full(name, args.repeats, dtype, args.msign, args.small, args.layers)
        flops = layer_flop_model(d, h, kv, hd, f, steps, degree, args.msign)
        for label in ratios:
            comp, t, ratio = found[label]
            ratios[label].append(ratio)
            print(f"{name:<8} {d:>5} {h:>3} {kv:>4} {hd:>4} {f:>6} {label:<10} {comp:>7.2f} {found['optax'][0]:>12.2f} "
                  f"{1e3 * t:>10.1f} "
                  f"{1e3 * found['optax'][1]:>10.1f} {ratio:>6.3f} {flops[label] / 1e9:>8.2f} "
                  f"{flops['optax'] / 1e9:>8.2f} {flops[label] / flops['optax']:>10.3f}", flush=True)
    return ratios


def train_rows(names, args, dtype) -> list:
    """Print the training-step rows; their ``(compile ratio, step ratio)`` of CM to ``optax.contrib.muon``."""
    print(f"first training step (forward, backward, update; batch {TRAIN_BATCH[0]} x {TRAIN_BATCH[1]} tokens) of "
          f"{args.layers} full layer{'s' if args.layers > 1 else ''}, CM against optax.contrib.muon; "
          f"msign={args.msign}{SMALL_NOTE if args.small else ''}")
    print(f"{'shape':<8} {'d':>5} {'H':>3} {'H_kv':>4} {'d_h':>4} {'f':>6} {'cm comp s':>9} {'optax comp s':>12} "
          f"{'comp ratio':>10} {'cm ms':>10} {'optax ms':>10} {'ratio':>6}")
    found_ratios = []
    for name in names:
        d, h, kv, hd, f = dims(name, args.small)
        found = measure_train(name, args.repeats, dtype, args.msign, args.small, args.layers)
        (c_cm, t_cm, ratio), (c_optax, t_optax, _) = found["cm"], found["optax"]
        found_ratios.append((c_cm / c_optax, ratio))
        print(f"{name:<8} {d:>5} {h:>3} {kv:>4} {hd:>4} {f:>6} {c_cm:>9.2f} {c_optax:>12.2f} {c_cm / c_optax:>10.2f} "
              f"{1e3 * t_cm:>10.1f} {1e3 * t_optax:>10.1f} {ratio:>6.3f}", flush=True)
    return found_ratios


def rule_rows(names, args, dtype, steps, degree) -> dict:
    """Print the rule rows (:mod:`benchmarks.step_rules`); ``{shape: {rule: {...}}}`` for ``--json``."""
    print(f"each attention rule alone against optax.contrib.muon's Newton-Schulz on the same two matrices; "
          f"msign={args.msign}{SMALL_NOTE if args.small else ''}")
    print(f"{'shape':<8} {'rule':<4} {'cm comp s':>9} {'muon comp s':>11} {'comp ratio':>10} {'cm rout':>7} "
          f"{'muon rout':>9} {'cm ms':>9} {'muon ms':>9} {'ratio':>6} {'floor':>6} {'ratio/floor':>11}")
    schedule = resolve_schedule("polar-express-5", 5)
    out = {}
    for name in names:
        d, h, kv, hd, _ = dims(name, args.small)
        found = measure_rules(d, h, kv, hd, dtype, args.msign, schedule, args.repeats, quiet=args.json)
        flops = rule_flop_model(d, h, kv, hd, steps, degree, args.msign)
        out[name] = {}
        for rule, row in found.items():
            (c_cm, k_cm, t_cm), (c_mu, k_mu, t_mu) = row["cm"], row["muon"]
            floor = flops[rule][0] / flops[rule][1]
            out[name][rule] = {"cm_compile_s": c_cm, "muon_compile_s": c_mu, "cm_routines": k_cm,
                               "muon_routines": k_mu, "cm_s": t_cm, "muon_s": t_mu, "ratio": row["ratio"],
                               "flop_floor": floor}
            print(f"{name:<8} {rule:<4} {c_cm:>9.2f} {c_mu:>11.2f} {c_cm / c_mu:>10.2f} {k_cm:>7} {k_mu:>9} "
                  f"{1e3 * t_cm:>9.1f} {1e3 * t_mu:>9.1f} {row['ratio']:>6.3f} {floor:>6.3f} "
                  f"{row['ratio'] / floor:>11.2f}", flush=True)
    return out


def main(argv=None) -> int:
    if stdout_closed("benchmarks.step"):
        return 2
    p = OneLineParser(prog="python -m benchmarks.step", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int_option(1, MAX_REPEATS, "a count"), default=9,
                   help=f"timed updates per optimizer and shape, 1 to {MAX_REPEATS} (default 9)")
    p.add_argument("--shapes", default="gpt2,llama3", help="comma-separated: gpt2, llama3 (default both)")
    p.add_argument("--rows", default="attention,full,train",
                   help="comma-separated: attention (the four attention matrices), full (attention + gated MLP, "
                        "CM and the project's Muon path), train (the first training step of full layers: forward, "
                        "backward and update), small (two-layer plain JAX and flax models at widths 128 and 256 "
                        "against optax.contrib.muon and optax.adamw; --shapes, --small and --layers do not apply), "
                        "rules (each attention rule alone against Newton-Schulz on its two matrices, its flop floor); "
                        "default attention,full,train")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
    p.add_argument("--msign", choices=GRAM_CHOICES, default="auto",
                   help="how the project's optimizers compute msign (default auto: Gram Newton-Schulz where the "
                        "flop model says it is cheaper)")
    p.add_argument("--small", action="store_true", help=f"divide d, d_h and f by {SMALL_FACTOR} (for a CPU)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--layers", type=int_option(1, MAX_LAYERS, "a layer count"), default=1,
                   help=f"layers per model, 1 to {MAX_LAYERS}, each layer's matrices separate leaves (default 1); "
                        "the flop model columns are per layer")
    p.add_argument("--lapack-threads", type=int_option(0, MAX_THREADS, "a thread count"), default=1,
                   help="OpenBLAS threads for jaxlib's CPU eigh (default 1; 0 leaves the library default; "
                        "see foundation.compute.lapack_threads)")
    try:
        args = p.parse_args(argv)
        names = _names(args.shapes, SHAPES, "--shapes")
        rows = _names(args.rows, ROWS, "--rows")
    except UsageError as exc:
        return usage_error("benchmarks.step", exc)
    if args.lapack_threads:
        lapack_threads(args.lapack_threads)
    if args.json:
        with contextlib.redirect_stdout(io.StringIO()):  # the tables: --json prints one document and nothing else
            found = run_rows(rows, names, args)
        print(json.dumps(found, indent=1))
    else:
        run_rows(rows, names, args)
    return 0


def run_rows(rows, names, args) -> dict:
    """Print the rows named in ``rows``; what they measured, as the ``--json`` document."""
    dtype = jnp.dtype(args.dtype)
    schedule = resolve_schedule("polar-express-5", 5)
    steps, degree = len(schedule), max(len(c) for c in schedule)
    doc: dict = {"dtype": args.dtype, "repeats": args.repeats, "msign": args.msign, "rows": {}}
    cm_ratios = attention_rows(names, args, dtype, steps, degree) if "attention" in rows else []
    if "attention" in rows:
        doc["rows"]["attention"] = dict(zip(names, cm_ratios, strict=True))
    if "full" in rows:
        full = full_rows(names, args, dtype, steps, degree)
        cm_ratios += full["cm"]
        doc["rows"]["full"] = {label: dict(zip(names, r, strict=True)) for label, r in full.items()}
        print(f"full layer, largest over the shapes: cm/optax {max(full['cm']):.3f}, muon-path/optax "
              f"{max(full['muon-path']):.3f}")
    if "train" in rows:
        train = train_rows(names, args, dtype)
        cm_ratios += [ratio for _, ratio in train]
        doc["rows"]["train"] = {n: {"compile_ratio": c, "step_ratio": r}
                                for n, (c, r) in zip(names, train, strict=True)}
        print(f"first training step, largest over the shapes: cm/optax compile time ratio "
              f"{max(c for c, _ in train):.2f}, step time ratio {max(r for _, r in train):.3f}")
    if "rules" in rows:
        doc["rows"]["rules"] = rule_rows(names, args, dtype, steps, degree)
    if "small" in rows:
        records = small_records(args.repeats, dtype, args.msign, quiet=args.json)
        print_small(records, args.msign)
        cm_ratios += [r["step_vs_muon"] for r in records if r["optimizer"] == "cm"]
        doc["rows"]["small"] = records
    blas = ", ".join(f"{i['prefix']} {i['num_threads']}" for i in threadpool_info() if i["user_api"] == "blas")
    doc.update(device=jax.devices()[0].device_kind, blas=blas or "none loaded", cm_muon_ratio=max(cm_ratios or [0.0]))
    print(f"device: {doc['device']}, dtype {args.dtype}, {args.repeats} interleaved repeats; "
          f"BLAS/LAPACK threads: {doc['blas']}")
    if cm_ratios:  # the rule rows alone time no whole update
        print(f"cm/muon median step time ratio: {max(cm_ratios):.3f}")
    return doc


if __name__ == "__main__":
    sys.exit(main())
