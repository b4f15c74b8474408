"""Half-split QK rule of Compositional Muon, derived from its problem statement.

Each half of the first-order product change ``ΔM ≈ ΔW_Q W_Kᵀ + W_Q ΔW_Kᵀ`` gets half the
budget: ``min ⟨G_M, ΔW_Q W_Kᵀ⟩ s.t. ‖ΔW_Q W_Kᵀ‖_op ≤ ε/2`` and the same for ``W_K``. The module
states those problems and chooses the lemmas; the engine produces the updates. With the same
engine it also derives

* the head-local V side of the hybrid OV rule (left whitening, the partner ``W_O`` on the left),
* the theorem that the achieved product step is ``−(ε/2)[msign(G_M P_K) + msign(P_Q G_M)]``,
* the isotropic approximation as a corollary, exact for partners with orthogonal columns of
  equal norm.

Run ``python -m derivations.halfsplit --help``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from sympy import Rational
from sympy.matrices.expressions import MatrixSymbol

from derivations import lemmas as L
from derivations.engine.derivation import Context, Derivation, Problem, identity_chain
from derivations.engine.rule import EmittedFunction, RuleModule
from derivations.vocabulary.algebra import product, total, transpose
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    ISOTROPIC_COLUMNS,
    FactMatrix,
    GramSqrt,
    Inner,
    OpNorm,
    dimension,
    positive_symbol,
)
from foundation.compute.spectra import log_spaced_spectrum, with_singular_values

d, d_h = dimension("d"), dimension("d_h")
eps = positive_symbol("epsilon")
BUDGET = eps * Rational(1, 2)

W_Q = FactMatrix("W_Q", d, d_h, [FULL_COLUMN_RANK])
W_K = FactMatrix("W_K", d, d_h, [FULL_COLUMN_RANK])
W_O = FactMatrix("W_O", d, d_h, [FULL_COLUMN_RANK])
G_M = MatrixSymbol("G_M", d, d)  # ∂L/∂M, never formed
G_Q = MatrixSymbol("G_Q", d, d_h)
G_K = MatrixSymbol("G_K", d, d_h)
G_V = MatrixSymbol("G_V", d_h, d)

#: factor gradients by the chain rule through ``M = W_Q W_Kᵀ`` (and ``W_O W_V``)
GRADIENTS_QK = {G_Q: product(G_M, W_K), G_K: product(transpose(G_M), W_Q)}
GRADIENTS_OV = {G_V: product(transpose(W_O), G_M)}


def context(definitions: dict) -> Context:
    """Check sizes: tall, taller and square heads; the partner Gram is undamped (λ = 0)."""
    return Context(definitions=definitions,
                   check_dims=[{d: 7, d_h: 3}, {d: 11, d_h: 2}, {d: 4, d_h: 4}],
                   symbolic_dims={d: 3, d_h: 2}, mpmath_dims={d: 5, d_h: 2})


def _right_whitened(name, title, own, partner, gradients, variable_name):
    """``min ⟨G_M, ΔW Pᵀ⟩`` (own factor on the left of ``M``) or its transpose, whitened by ``P``."""
    delta = MatrixSymbol(f"dW_{own}", d, d_h)
    z = MatrixSymbol(variable_name, d, d_h)
    change = product(delta, transpose(partner)) if own == "Q" else product(partner, transpose(delta))
    problem = Problem(delta, Inner(G_M, change), OpNorm(change), BUDGET)
    der = Derivation(name, title, problem, context(gradients),
                     statement=f"half budget ε/2 on the {own} half of ΔM")
    der.apply(L.POLAR_SUBSTITUTION, matrix=partner, note=f"polar decomposition of the partner {partner}")
    der.change_variables(z, GramSqrt(partner))
    der.apply(L.ORTHONORMAL_INVARIANCE)
    if own == "K":
        der.apply(L.TRANSPOSITION)
    der.apply(L.ADJOINT_MOVE, variable=z)
    der.apply(L.POLAR_INVERSE, matrix=partner, reverse=True, note="express U through the partner")
    der.apply(L.CHAIN_RULE, gradients=gradients, note="only factor gradients are available")
    der.solve()
    der.back_substitute()
    return der


@cache
def query_side() -> Derivation:
    """``ΔW_Q`` of the half-split rule."""
    return _right_whitened("halfsplit.query", "Half-split QK: query update", "Q", W_K, GRADIENTS_QK, "Z_Q")


@cache
def key_side() -> Derivation:
    """``ΔW_K`` of the half-split rule."""
    return _right_whitened("halfsplit.key", "Half-split QK: key update", "K", W_Q, GRADIENTS_QK, "Z_K")


@cache
def value_side() -> Derivation:
    """Head-local V side of the hybrid OV rule: the partner ``W_O`` multiplies from the left."""
    delta = MatrixSymbol("dW_V", d_h, d)
    z = MatrixSymbol("Z_V", d_h, d)
    change = product(W_O, delta)
    problem = Problem(delta, Inner(G_M, change), OpNorm(change), BUDGET)
    der = Derivation("halfsplit.value", "Hybrid OV: head-local value update", problem,
                     context(GRADIENTS_OV), statement="half budget ε/2 on the V half of Δ(W_O W_V)")
    der.apply(L.POLAR_SUBSTITUTION, matrix=W_O, note="polar decomposition of the partner W_O")
    der.change_variables(z, GramSqrt(W_O), side="left")
    der.apply(L.ORTHONORMAL_INVARIANCE)
    der.apply(L.ADJOINT_MOVE, variable=z)
    der.apply(L.POLAR_INVERSE, matrix=W_O, reverse=True, note="express U through the partner")
    der.apply(L.CHAIN_RULE, gradients=GRADIENTS_OV, note="only factor gradients are available")
    der.solve()
    der.back_substitute()
    return der


@cache
def product_step() -> Derivation:
    """Theorem: ``ΔW_Q W_Kᵀ + W_Q ΔW_Kᵀ = −(ε/2)[msign(G_M P_K) + msign(P_Q G_M)]``."""
    dq, dk = query_side().result.argmin, key_side().result.argmin
    start = total(product(dq, transpose(W_K)), product(W_Q, transpose(dk)))
    der = identity_chain("halfsplit.product_step", "Half-split QK: the achieved product step",
                         start, context(GRADIENTS_QK),
                         statement="ΔW_Q W_Kᵀ + W_Q ΔW_Kᵀ with the half-split updates")
    der.apply(L.POLAR_INVERSE, matrix=W_K)
    der.apply(L.POLAR_INVERSE, matrix=W_Q)
    der.apply(L.MSIGN_TRANSPOSE)
    der.apply(L.MSIGN_ISOMETRY)
    der.apply(L.CHAIN_RULE, gradients=GRADIENTS_QK, reverse=True, note="expand the factor gradients")
    der.apply(L.POLAR_INVERSE, matrix=W_K)
    der.apply(L.POLAR_INVERSE, matrix=W_Q)
    der.apply(L.PROJECTOR, matrix=W_K)
    der.apply(L.PROJECTOR, matrix=W_Q)
    return der


def _isotropic(side: Derivation, partner: FactMatrix, gradients: dict, name: str) -> Derivation:
    iso = FactMatrix(partner.name, *partner.shape, list(partner.facts | {ISOTROPIC_COLUMNS}))
    start = side.result.argmin.xreplace({partner: iso})
    defs = {g: v.xreplace({partner: iso}) for g, v in gradients.items()}
    der = identity_chain(name, f"{side.title}: isotropic partner (corollary)", start, context(defs),
                         statement=f"{side.title} when {partner}ᵀ{partner} = c² I")
    der.apply(L.ISOTROPIC_PARTNER, matrix=iso)
    der.apply(L.MSIGN_SCALE)
    return der


@cache
def isotropic_query() -> Derivation:
    """Corollary: ``ΔW_Q = −(ε/2) c_K⁻¹ msign(G_Q)`` when ``W_Kᵀ W_K = c_K² I``."""
    return _isotropic(query_side(), W_K, GRADIENTS_QK, "halfsplit.isotropic_query")


@cache
def isotropic_key() -> Derivation:
    """Corollary: ``ΔW_K = −(ε/2) c_Q⁻¹ msign(G_K)`` when ``W_Qᵀ W_Q = c_Q² I``."""
    return _isotropic(key_side(), W_Q, GRADIENTS_QK, "halfsplit.isotropic_key")


def derivations() -> list[Derivation]:
    """Every derivation of this module, in reading order."""
    return [query_side(), key_side(), value_side(), product_step(), isotropic_query(), isotropic_key()]



# ---- emission ------------------------------------------------------------------------------
def emitted_functions():
    """The public functions of the emitted modules."""
    return [
        EmittedFunction("halfsplit_qk", "Half-split QK update of Compositional Muon",
                        [W_Q, W_K, G_Q, G_K], [("dW_Q", query_side()), ("dW_K", key_side())],
                        [("Each half of ΔM gets budget ε/2: ‖ΔW_Q C_K‖_op = ‖ΔW_K C_Q‖_op = ε/2 "
                          "with C_W = (WᵀW + λI)^(1/2), "
                         "hence ‖ΔW_Q W_Kᵀ‖_op, ‖W_Q ΔW_Kᵀ‖_op ≤ ε/2, with equality at damping λ = 0.")]),
        EmittedFunction("halfsplit_v", "Head-local V update of the hybrid OV rule (partner W_O on the left)",
                        [W_O, G_V], [("dW_V", value_side())],
                        [("W_O is one head's (d, d_h) block of the output projection; ‖C_O ΔW_V‖_op = ε/2 with "
                         "C_O = (W_OᵀW_O + λI)^(1/2), hence ‖W_O ΔW_V‖_op ≤ ε/2, with equality at λ = 0.")]),
        EmittedFunction("isotropic_qk", "Isotropic approximation of the half-split QK update",
                        [W_Q, W_K, G_Q, G_K], [("dW_Q", isotropic_query()), ("dW_K", isotropic_key())],
                        [("Exact when the partner has orthogonal columns of equal norm; c_W = "
                         "(‖W‖_F²/d_h + λ)^(1/2).")]),
    ]


def measurements(rng):
    """How far the isotropic approximation is from the exact rule, by partner condition number."""

    out = []
    for cond in (1.0, 2.0, 10.0, 100.0):
        worst = 0.0
        for _ in range(5):
            values = {"W_K": with_singular_values(rng, 64, 8, log_spaced_spectrum(rng, 8, cond)),
                      "G_Q": rng.standard_normal((64, 8)), "epsilon": 1.0}
            exact = evaluate_on(query_side().formula, values)
            iso = evaluate_on(isotropic_query().formula, values)
            worst = max(worst, np.linalg.norm(iso - exact) / np.linalg.norm(exact))
        out.append((f"isotropic vs exact dW_Q, relative Frobenius error, partner condition {cond:g}", worst,
                    1e-10 if cond == 1 else None))  # exact for an isotropic partner; an approximation beyond
    return out


def rule_module():
    return RuleModule(
        name="halfsplit", title="Half-split QK rule of Compositional Muon",
        derivations=derivations, functions=emitted_functions, scalars={eps: "eps"},
        measurements=measurements,
        description=__doc__.split("\n\n")[0],
        examples=["python -m derivations.halfsplit --emit jax > halfsplit_jax.py",
                  "python -m derivations.halfsplit --emit text",
                  "python -m derivations.halfsplit --check"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
