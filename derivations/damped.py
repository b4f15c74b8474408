"""Damped rules as exact solutions of their own problems.

The emitted functions compute every Gram root with damping ``λ``: ``C_{W,λ} = (WᵀW + λI)^{1/2}``.
For ``λ > 0`` the half-split query update ``−(ε/2) msign(G_Q C_{K,λ}⁻¹) C_{K,λ}⁻¹`` is *not* the
solution of the undamped problem (its product change ``ΔW_Q W_Kᵀ`` has operator norm below ``ε/2``);
it is the exact solution of::

    min ⟨G_M, ΔW_Q W_Kᵀ⟩  s.t.  ‖ΔW_Q C_{K,λ}‖_op ≤ ε/2,

derived here by the engine (damped polar substitution ``W_K = U_λ C_{K,λ}``, change of variables
``Z = ΔW_Q C_{K,λ}``, invertible because ``λ > 0``, adjoint move, chain rule, solve,
back-substitution), and likewise for the key and value sides. The damped
constraint implies the product bound: ``‖ΔW_Q W_Kᵀ‖ ≤ ‖ΔW_Q C_{K,λ}‖ ‖C_{K,λ}⁻¹ W_Kᵀ‖ ≤ ε/2`` since
``‖W_K C_{K,λ}⁻¹‖_op = max_i σ_i/(σ_i² + λ)^{1/2} < 1``; ``--check`` measures both.
:func:`matches_emission` shows the damped formulas are exactly what the printers emit (the undamped
derivation with every Gram root damped), so the emitted damped functions are derived, and their
bounds (``= ε/2`` in the whitened norm, ``≤ ε/2`` on the product) hold for ``λ > 0``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from sympy.matrices.expressions import MatrixSymbol

from derivations import halfsplit as H
from derivations import lemmas as L
from derivations.engine.derivation import Context, Derivation, Problem
from derivations.engine.rule import RuleModule
from derivations.vocabulary.algebra import product, transpose, with_damping
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import GramSqrt, Inner, OpNorm, positive_symbol

lam = positive_symbol("lambda")


def context(definitions=None) -> Context:
    return Context(definitions=definitions or {}, check_dims=[{H.d: 7, H.d_h: 3}, {H.d: 4, H.d_h: 4}],
                   symbolic_dims={H.d: 3, H.d_h: 2}, mpmath_dims={H.d: 5, H.d_h: 2})


def _damped(name, title, delta, change, partner, side, gradients, solve_lemma=None):
    """``min ⟨G_M, change⟩ s.t. ‖Δ C_λ‖_op ≤ ε/2`` (or ``‖C_λ Δ‖``): the half-split problem with the
    constraint measured in the damped whitened norm."""
    c = GramSqrt(partner, lam)
    whitened = product(delta, c) if side == "right" else product(c, delta)
    problem = Problem(delta, Inner(H.G_M, change), OpNorm(whitened), H.BUDGET)
    z = MatrixSymbol(f"Z_{str(delta.name)[-1]}", *delta.shape)
    der = Derivation(name, title, problem, context(gradients),
                     statement=f"budget ε/2 in the damped whitened norm ‖{whitened}‖_op, λ > 0")
    der.apply(L.POLAR_SUBSTITUTION, matrix=partner, damping=lam,
              note=f"{partner} = U_λ C_λ with U_λ = {partner} C_λ⁻¹ (not an isometry when λ > 0)")
    der.change_variables(z, c, side=side, note="C_λ is invertible since λ > 0")
    der.apply(L.ADJOINT_MOVE, variable=z)
    der.apply(L.POLAR_INVERSE, matrix=partner, damping=lam, reverse=True, note="express U_λ through the partner")
    der.apply(L.CHAIN_RULE, gradients=gradients, note="only factor gradients are available")
    der.solve(lemma=solve_lemma)
    der.back_substitute()
    return der


@cache
def query_side(solve_lemma=None) -> Derivation:
    """``ΔW_Q = −(ε/2) msign(G_Q C_{K,λ}⁻¹) C_{K,λ}⁻¹``, exact for ``‖ΔW_Q C_{K,λ}‖_op ≤ ε/2``
    (``solve_lemma`` replaces Lemma 1, to plant a mistake)."""
    dq = MatrixSymbol("dW_Q", H.d, H.d_h)
    return _damped("damped.query", "Damped half-split: query update", dq, product(dq, transpose(H.W_K)), H.W_K,
                   "right", H.GRADIENTS_QK, solve_lemma)


@cache
def key_side() -> Derivation:
    """``ΔW_K = −(ε/2) msign(G_K C_{Q,λ}⁻¹) C_{Q,λ}⁻¹``, exact for ``‖ΔW_K C_{Q,λ}‖_op ≤ ε/2``."""
    dk = MatrixSymbol("dW_K", H.d, H.d_h)
    return _damped("damped.key", "Damped half-split: key update", dk, product(H.W_Q, transpose(dk)), H.W_Q,
                   "right", H.GRADIENTS_QK)


@cache
def value_side() -> Derivation:
    """``ΔW_V = −(ε/2) C_{O,λ}⁻¹ msign(C_{O,λ}⁻¹ G_V)``, exact for ``‖C_{O,λ} ΔW_V‖_op ≤ ε/2``."""
    dv = MatrixSymbol("dW_V", H.d_h, H.d)
    return _damped("damped.value", "Damped hybrid OV: value update", dv, product(H.W_O, dv), H.W_O, "left",
                   H.GRADIENTS_OV)


def derivations():
    return [query_side(), key_side(), value_side()]


def matches_emission() -> dict:
    """For each side: does the damped derivation equal the undamped one with every Gram root damped
    (what the printers emit)? Structural equality of the SymPy expressions."""
    pairs = {"query": (H.query_side(), query_side()), "key": (H.key_side(), key_side()),
             "value": (H.value_side(), value_side())}
    return {k: with_damping(undamped.formula, lam) == damped.formula for k, (undamped, damped) in pairs.items()}


def measurements(rng):
    """The damped query update on random instances: whitened norm (= ε/2) and product norm (≤ ε/2)."""

    out = []
    for damping in (1e-3, 1e-1, 10.0):
        worst_whitened, worst_product = 0.0, 0.0
        for _ in range(5):
            wk, gq = rng.standard_normal((12, 4)), rng.standard_normal((12, 4))
            dq = evaluate_on(query_side().formula, {"W_K": wk, "G_Q": gq, "epsilon": 1.0, "lambda": damping})
            c = evaluate_on(GramSqrt(H.W_K, lam), {"W_K": wk, "lambda": damping})
            worst_whitened = max(worst_whitened, abs(np.linalg.norm(dq @ c, 2) - 0.5))
            worst_product = max(worst_product, np.linalg.norm(dq @ wk.T, 2) / 0.5)
        out.append((f"damping {damping:g}: | ‖ΔW_Q C_K,λ‖_op − ε/2 | (zero: the damped problem is solved)",
                    worst_whitened, 1e-10))
        out.append((f"damping {damping:g}: ‖ΔW_Q W_Kᵀ‖_op / (ε/2) (at most 1: the product bound)", worst_product,
                    1 + 1e-10))
    return out


def rule_module():
    return RuleModule(name="damped", title="Damped half-split rules as exact solutions of their own problems",
                      derivations=derivations, functions=list, scalars={H.eps: "eps", lam: "damping"},
                      measurements=measurements, description=__doc__.split("\n\n")[0],
                      examples=["python -m derivations.damped --check", "python -m derivations.damped --emit text"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
