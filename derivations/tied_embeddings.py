"""Tied embeddings: one table ``E`` (``V × d``) is both the input lookup and the output head.

Roles. The lookup maps a one-hot token ``e_t`` to the row ``Eᵀe_t`` (``d``-dimensional); the head maps a
hidden state ``h`` to the logits ``E h`` (``V``-dimensional). Autodiff of a tied parameter returns one gradient,
``G_E = G_in + G_out`` (the lookup's sparse rows plus the head's dense ``G_zᵀ H``), and the first-order loss
change of a step is ``⟨G_E, ΔE⟩``.

The norm. Each role has its natural operator norm (Bernstein and Newhouse, "Modular duality in deep learning",
2024; "Old optimizer, new norm", 2024): the head is a map from RMS-normalized hidden states to logits,
``N_out(ΔE) = ‖ΔE‖_{RMS→RMS} = √(d/V) ‖ΔE‖_op``; the lookup is a map from one-hot (ℓ1) inputs to RMS-normalized
embeddings, ``N_in(ΔE) = ‖ΔE‖_{ℓ1→RMS} = max_t ‖e_tᵀΔE‖₂ / √d``. A tied step must respect both: the stated norm is
``N(ΔE) = max(N_in(ΔE), N_out(ΔE))``.

The derivation. A row's norm is at most the operator norm, ``‖e_tᵀΔE‖₂ ≤ ‖ΔE‖_op``, so
``N_in(ΔE) ≤ ‖ΔE‖_op / √d = (√V / d) · N_out(ΔE)``; the factor ``√V/d`` is attained (``ΔE = e_t vᵀ``). Hence when
``√V ≤ d`` (GPT-2: ``√50257 ≈ 224 ≤ 768``; Llama-3-8B: ``√128256 ≈ 358 ≤ 4096``; the project's character model:
``√V ≤ 10 ≤ 64``) ``N = N_out`` and the steepest descent under ``N`` is the steepest descent under the head's
RMS→RMS norm, derived by search (``tied_embeddings.update``):

    ΔE = −ε √(V/d) msign(G_E),

that is, Muon on the whole table with the RMS→RMS scale, applied to the *summed* gradient. Every row moves by
at most ``ε √V / d ≤ ε`` in RMS. When ``√V > d`` (a large vocabulary on a very narrow model) the input ball
cuts into the output ball, ``N`` is a genuine maximum of two norms, and no closed form is derived here.
``--check`` measures the domination (the ratio ``N_in/N_out`` on random and on worst-case steps) and the bound.
In practice many Muon implementations keep embeddings and heads on AdamW; this module states what steepest
descent under the norm above is, not that it trains better.

Run ``python -m derivations.tied_embeddings --help``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from sympy.matrices.expressions import MatrixSymbol

from derivations import (
    FAMILIES,
    Context,
    EmittedFunction,
    Inner,
    Problem,
    RuleModule,
    derive,
    dimension,
    positive_symbol,
)
from derivations.vocabulary.evaluate import evaluate_on

V, d = dimension("V"), dimension("d")
eps = positive_symbol("epsilon")
G_E = MatrixSymbol("G_E", V, d)  # the tied table's gradient: lookup rows plus head
dE = MatrixSymbol("dE", V, d)
RMS = next(f for f in FAMILIES if f.key == "rms")


@cache
def update():
    """``ΔE = −ε √(V/d) msign(G_E)``: steepest descent under the head's RMS→RMS norm (= the tied norm when √V ≤ d)."""
    ctx = Context(check_dims=[{V: 9, d: 4}, {V: 16, d: 5}, {V: 4, d: 4}], mpmath_dims={V: 9, d: 4},
                  symbolic_dims={V: 3, d: 2})
    return derive(Problem(dE, Inner(G_E, dE), RMS.norm(dE), eps), ctx, name="tied_embeddings.update",
                  title="Tied embeddings: steepest descent under max(N_in, N_out) = N_out (√V ≤ d)",
                  statement="‖ΔE‖_{RMS→RMS} ≤ ε for the table as the output head; dominates the lookup's ℓ1→RMS norm "
                            "when √V ≤ d")


def derivations():
    return [update()]


def input_norm(de):
    """``N_in(ΔE) = max_t ‖e_tᵀΔE‖₂ / √d``: the lookup's ℓ1→RMS operator norm."""
    return float(np.max(np.linalg.norm(de, axis=1)) / np.sqrt(de.shape[1]))


def output_norm(de):
    """``N_out(ΔE) = √(d/V) ‖ΔE‖_op``: the head's RMS→RMS operator norm."""
    return float(np.sqrt(de.shape[1] / de.shape[0]) * np.linalg.norm(de, 2))


def measurements(rng):
    """The domination ``N_in ≤ (√V/d) N_out`` (random and worst-case steps) and the derived step's norms."""
    out = []
    for vocab, width in ((100, 64), (2000, 64), (5000, 50)):
        worst = 0.0
        for _ in range(5):
            step = rng.standard_normal((vocab, width)) * rng.uniform(0.1, 10, (vocab, 1))  # uneven rows
            worst = max(worst, input_norm(step) / output_norm(step) / (np.sqrt(vocab) / width))
        e1 = np.zeros((vocab, width))
        e1[0] = rng.standard_normal(width)  # ΔE = e_t vᵀ attains the factor
        out.append((f"V = {vocab}, d = {width}: worst N_in / N_out over random steps, in units of √V/d "
                    f"= {np.sqrt(vocab) / width:.3g} (at most 1)", float(worst), 1 + 1e-10))
        out.append((f"V = {vocab}, d = {width}: N_in / N_out at ΔE = e_t vᵀ, in units of √V/d (= 1: attained)",
                    input_norm(e1) / output_norm(e1) / (np.sqrt(vocab) / width), (1 - 1e-10, 1 + 1e-10)))
        g = rng.standard_normal((vocab, width))
        step = evaluate_on(update().formula, {"G_E": g, "epsilon": 1.0})
        out.append((f"V = {vocab}, d = {width}: derived step, N_out / ε (= 1)", output_norm(step),
                    (1 - 1e-10, 1 + 1e-10)))
        out.append((f"V = {vocab}, d = {width}: derived step, N_in / ε in units of √V/d (at most 1)",
                    input_norm(step) / (np.sqrt(vocab) / width), 1 + 1e-10))
    return out


def emitted_functions():
    return [EmittedFunction(
        "tied_embedding", "Tied-embedding update: steepest descent under the head's RMS→RMS norm",
        [G_E], [("dE", update())],
        [("G_E (..., V, d) is the tied table's gradient (lookup rows plus head). "
          "‖ΔE‖_{RMS→RMS} = √(d/V)‖ΔE‖_op = ε, and "
          "every row moves by at most ε√V/d in RMS; "
          "this is the steepest descent under max(N_in, N_out) when √V ≤ d.")])]


def rule_module():
    return RuleModule(name="tied_embeddings", title="Tied embeddings: the table as lookup and head",
                      derivations=derivations, functions=emitted_functions, scalars={eps: "eps"},
                      measurements=measurements, description=__doc__.split("\n\n")[0],
                      examples=["python -m derivations.tied_embeddings --check",
                                "python -m derivations.tied_embeddings --emit text"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
