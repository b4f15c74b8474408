"""Joint-whitened QK rule: one spectral sign over ``[G_Q C_K⁻¹ | G_K C_Q⁻¹]``.

Write ``Δ = [ΔW_Q | ΔW_K]`` (``d × 2d_h``), ``P = blockdiag(W_K, W_Q)`` (``2d × 2d_h``) and
``G̃ = [G_M | G_Mᵀ]`` (``d × 2d``). Then ``Δ Pᵀ = [ΔW_Q W_Kᵀ | ΔW_K W_Qᵀ]`` holds both halves of ``ΔM``
side by side and ``⟨G̃, Δ Pᵀ⟩ = ⟨G_M, ΔW_Q W_Kᵀ + W_Q ΔW_Kᵀ⟩``. Budget convention: the two halves
*side by side* have operator norm at most ``ε/2``:

    min ⟨G̃, Δ Pᵀ⟩  s.t.  ‖[ΔW_Q W_Kᵀ | ΔW_K W_Qᵀ]‖_op ≤ ε/2
    ⇒ [Z_Q | Z_K] = −(ε/2) msign([G_Q C_K⁻¹ | G_K C_Q⁻¹]),  ΔW_Q = Z_Q C_K⁻¹,  ΔW_K = Z_K C_Q⁻¹.

The engine derives this from the two-variable problem: Lemma J (:mod:`derivations.lemmas.blocks`)
concatenates the side-by-side products and the sum of inner products into the one stacked variable
``Δ`` with partner ``P`` (an equal reformulation; the back-substitution checks the result against the
two-variable problem too), and that step's layout record prints the ``joint_qk`` adapter.

Worst case: each half has ``‖·‖_op ≤ ‖[Z_Q | Z_K]‖_op = ε/2``, so ``‖ΔM‖_op ≤ ε``, the same bound as
half-split; the joint feasible set is contained in half-split's, and each half is at most (not
exactly) ``ε/2``. Giving the joint sign the whole budget ``ε`` instead would loosen the worst case
to ``‖ΔM‖_op ≤ 2ε``, twice half-split's. When the whitened gradients have orthogonal column spaces,
``msign([A | B]) = [msign(A) | msign(B)]`` and the rule is half-split: derived in
:func:`orthogonal_reduction` (msign in polar form, the Gram root of orthogonal blocks) and
measured by ``--check``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import scipy.linalg
from sympy import Rational
from sympy.matrices.expressions import Identity, MatrixSymbol

from derivations import halfsplit
from derivations import lemmas as L
from derivations.block_whitened import block_roots as block_roots_of
from derivations.block_whitened import block_whitened
from derivations.engine.derivation import Context, Derivation, Problem, identity_chain
from derivations.engine.rule import EmittedFunction, RuleModule
from derivations.lemmas.blocks import ColumnBlock, HeadLayout
from derivations.printing.layout import Adapter, adapter_source
from derivations.vocabulary.algebra import product, total, transpose
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import (
    BLOCK_DIAGONAL,
    FULL_COLUMN_RANK,
    BlockDiag,
    FactMatrix,
    HStack,
    Inner,
    Msign,
    OpNorm,
    Projector,
    dimension,
)
from foundation.compute.numpy_routines import gram_eigh, psd_power

d, d_h = halfsplit.d, halfsplit.d_h
m, n = dimension("m"), dimension("n")  # m = 2 d_h, n = 2 d (separate symbols: smaller symbolic checks)
eps = halfsplit.eps
W_Q, W_K, G_M = halfsplit.W_Q, halfsplit.W_K, halfsplit.G_M
P = FactMatrix("P", n, m, [FULL_COLUMN_RANK, BLOCK_DIAGONAL])  # blockdiag(W_K, W_Q)
G_tilde = MatrixSymbol("G_tilde", d, n)  # [G_M | G_Mᵀ]
G = MatrixSymbol("G", d, m)  # [G_Q | G_K] = G̃ P by the chain rule
Delta = MatrixSymbol("Delta", d, m)  # [ΔW_Q | ΔW_K]
dW_Q, dW_K = ColumnBlock(Delta, 0, 2, "dW_Q"), ColumnBlock(Delta, 1, 2, "dW_K")
#: the abbreviations the concatenation step introduces (definitions of the check instances too)
NAMES = {BlockDiag(W_K, W_Q): P, HStack(G_M, transpose(G_M)): G_tilde}
#: the factor gradients block_roots is written in, by the chain rule (so a hand formula may write G_M W_K)
GRADIENTS_QK = halfsplit.GRADIENTS_QK


def _layout() -> HeadLayout:
    """The stored layout, read off the concatenation: P's blocks are the stored weights of ``NAMES``'
    block-diagonal partner; G = G̃ P = [G_M W_K | G_Mᵀ W_Q] is, block by block, the stored gradients of
    the chain rule (``halfsplit.GRADIENTS_QK``); the update splits into Δ's named column blocks."""
    partner = next(e for e, sym in NAMES.items() if sym == P)
    gradient = next(e for e, sym in NAMES.items() if sym == G_tilde)
    stored = {v: k.name for k, v in halfsplit.GRADIENTS_QK.items()}
    gradients = tuple(stored[product(g, b)] for g, b in zip(gradient.args, partner.args, strict=False))
    return HeadLayout("P", tuple(b.name for b in partner.args), "concat", gradient=G.name, gradients=gradients,
                      outputs=(dW_Q.name, dW_K.name))


#: the stored layout: P's blocks are the stored W_K, W_Q; G = [G_Q | G_K]; Δ splits into ΔW_Q, ΔW_K
LAYOUT = _layout()
LAYOUT_BLOCKS = next(e for e, sym in NAMES.items() if sym == P).args  # (W_K, W_Q)


def context() -> Context:
    """P and G̃ are free here; the concatenation step binds them to ``NAMES`` on its own instances."""
    return Context(definitions={G: G_tilde * P}, check_dims=[{d: 6, d_h: 2, m: 4, n: 12}, {d: 5, d_h: 3, m: 6, n: 10}],
                   symbolic_dims={d: 3, m: 2, n: 4}, mpmath_dims={d: 4, d_h: 2, m: 4, n: 8})


def two_variable_problem() -> Problem:
    """``min ⟨G_M, ΔW_Q W_Kᵀ + W_Q ΔW_Kᵀ⟩ s.t. ‖[ΔW_Q W_Kᵀ | ΔW_K W_Qᵀ]‖_op ≤ ε/2`` over ``Δ = [ΔW_Q | ΔW_K]``."""
    objective = Inner(G_M, product(dW_Q, transpose(W_K))) + Inner(transpose(G_M), product(dW_K, transpose(W_Q)))
    constraint = OpNorm(HStack(product(dW_Q, transpose(W_K)), product(dW_K, transpose(W_Q))))
    return Problem(Delta, objective, constraint, eps * Rational(1, 2))


def _concatenate(der):
    der.apply(L.CONCATENATION, names=NAMES, layout=LAYOUT,
              note="one stacked variable Δ = [ΔW_Q | ΔW_K] with the partner P = blockdiag(W_K, W_Q)")


@cache
def joint() -> Derivation:
    return block_whitened("joint.update", "Joint-whitened QK update", Delta, P, G_tilde, G, eps * Rational(1, 2),
                          context(), "both halves of ΔM side by side, operator norm ε/2",
                          start=(two_variable_problem(), _concatenate))


@cache
def block_roots() -> Derivation:
    """The joint update with P and G written out: ``−(ε/2) msign([G_Q C_K⁻¹ | G_K C_Q⁻¹]) blockdiag(C_K⁻¹, C_Q⁻¹)``."""
    ctx = Context(check_dims=[{d: 6, d_h: 2, m: 4, n: 12}, {d: 5, d_h: 3, m: 6, n: 10}],
                  mpmath_dims={d: 4, d_h: 2, m: 4, n: 8})
    return block_roots_of("joint.block_roots", "Joint update, block by block", joint(), P, G,
                          LAYOUT_BLOCKS, (halfsplit.G_Q, halfsplit.G_K), ctx,
                          "P = blockdiag(W_K, W_Q), G = [G_Q | G_K] in the derived joint update")


A = FactMatrix("A", d, d_h, [FULL_COLUMN_RANK])  # G_Q C_K⁻¹, whitened
B = MatrixSymbol("B", d, d_h)  # G_K C_Q⁻¹, orthogonal to A's columns


@cache
def orthogonal_reduction():
    """Theorem: ``AᵀB = 0 ⇒ msign([A | B]) = [msign(A) | msign(B)]``, so joint = half-split."""
    d_h = A.shape[1]
    r = MatrixSymbol("R", d, d_h)
    orthogonal_b = product(total(Identity(d), product(-1, Projector(A))), r)  # B = (I − P_A) R
    ctx = Context(definitions={B: orthogonal_b}, check_dims=[{d: 6, d_h: 2}, {d: 7, d_h: 3}],
                  symbolic_dims={d: 4, d_h: 2}, mpmath_dims={d: 5, d_h: 2})
    stacked = HStack(A, B)
    der = identity_chain("joint.orthogonal_reduction", "Joint reduces to half-split for orthogonal whitened gradients",
                         Msign(stacked), ctx, statement="msign([A | B]) with AᵀB = 0 (A = G_Q C_K⁻¹, B = G_K C_Q⁻¹)")
    der.apply(L.MSIGN_POLAR_FORM, targets=[stacked])
    der.apply(L.ORTHOGONAL_BLOCKS, pair=(A, B))
    der.apply(L.BLOCK_PRODUCT)
    der.apply(L.MSIGN_POLAR_FORM, targets=[A, B], reverse=True)
    return der


def derivations():
    return [joint(), block_roots(), orthogonal_reduction()]


def measurements(rng):
    """How far joint is from half-split: generic gradients vs orthogonal whitened column spaces."""

    out = []
    for label, orthogonal in (("generic gradients", False), ("orthogonal whitened column spaces", True)):
        wq, wk = rng.standard_normal((30, 4)), rng.standard_normal((30, 4))
        ckq = [psd_power(gram_eigh(w, 0.0, "right"), 0.5) for w in (wk, wq)]  # C_K, C_Q
        a, b = rng.standard_normal((30, 4)), rng.standard_normal((30, 4))
        if orthogonal:
            q, _ = np.linalg.qr(rng.standard_normal((30, 8)))
            a, b = q[:, :4] @ rng.standard_normal((4, 4)), q[:, 4:] @ rng.standard_normal((4, 4))
        gq, gk = a @ ckq[0], b @ ckq[1]  # so that the whitened gradients are a and b
        joint_q = evaluate_on(joint().formula, {"P": scipy.linalg.block_diag(wk, wq),
                                                "G": np.concatenate([gq, gk], axis=1), "epsilon": 1.0})[:, :4]
        half_q = evaluate_on(halfsplit.query_side().formula, {"W_K": wk, "G_Q": gq, "epsilon": 1.0})
        out.append((f"joint vs half-split dW_Q, relative difference, {label}",
                    float(np.linalg.norm(joint_q - half_q) / np.linalg.norm(half_q)),
                    1e-10 if orthogonal else None))  # equal on orthogonal column spaces; apart in general
    return out


def emitted_functions():
    return [EmittedFunction(
        "joint_whitened", "Block-whitened steepest descent (the joint rule's core)", [P, G],
        [("Delta", joint())],
        ["P = blockdiag(W_K, W_Q): the JAX module takes its blocks (..., k, d, d_h), "
         "the NumPy reference the dense matrix."],
        shape_spec={"P": ("k", "d", "d_h"), "G": ("d", "m")})]


def adapter():
    """The stored-layout entry point ``joint_qk``, printed from the concatenation step of :func:`joint`."""
    return Adapter("joint_layout", "joint_qk",
                   "``(W_Q, W_K, G_Q, G_K)`` → one block-whitened call → ``(ΔW_Q, ΔW_K)``.",
                   {"W_Q": "columns", "W_K": "columns", "G_Q": "columns", "G_K": "columns"},
                   [("core", emitted_functions()[0])], "check_joint_pair", head_dim=False,
                   entry_doc="Joint-whitened QK update: [ΔW_Q | ΔW_K] = −(ε/2) msign([G_Q C_K⁻¹ | G_K C_Q⁻¹]) "
                             "blockdiag(C_K⁻¹, C_Q⁻¹).\n\n    Shapes (..., d, d_h) for all four inputs; returns "
                             "(ΔW_Q, ΔW_K).")


def jax_extra():
    return adapter_source(adapter())


def rule_module():
    return RuleModule(name="joint", title="Joint-whitened QK rule of Compositional Muon", derivations=derivations,
                      functions=emitted_functions, scalars={eps: "eps"}, measurements=measurements,
                      description=__doc__.split("\n\n")[0], jax_extra=jax_extra, adapters=lambda: [adapter()],
                      examples=["python -m derivations.joint --emit jax > joint_jax.py",
                                "python -m derivations.joint --check"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
