"""Steepest descent whitened by a (block-diagonal) partner: the common core of joint and hybrid OV.

``min ⟨G̃, Δ Pᵀ⟩ s.t. ‖Δ Pᵀ‖_op ≤ β`` for a tall partner ``P`` of full column rank gives, through
the same lemmas as half-split, ``Δ = −β msign(G C_P⁻¹) C_P⁻¹`` with ``G = G̃ P``. When ``P`` is
block diagonal, ``Δ Pᵀ`` is the side-by-side concatenation of the per-block products, ``C_P`` is
block diagonal too, and the emitted code works block by block. A per-head problem (each block's
product bounded separately) is first restricted to the stacked constraint (Lemma K,
:mod:`derivations.lemmas.blocks`).
"""

from __future__ import annotations

from sympy.matrices.expressions import MatrixSymbol

from derivations import lemmas as L
from derivations.engine.derivation import Context, Derivation, DerivationError, Problem, identity_chain
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.nodes import BlockDiag, GramSqrt, HStack, Inner, OpNorm


def block_whitened(name: str, title: str, delta: MatrixSymbol, partner, loss_gradient, gradient,
                   budget, context: Context, statement: str, per_block=None, start=None) -> Derivation:
    """Derive ``argmin ⟨loss_gradient, Δ Pᵀ⟩`` s.t. ``‖Δ Pᵀ‖_op ≤ budget`` in the engine.

    ``per_block = (width, layout, note)``: the problem starts from the per-block constraint
    ``max_h ‖(Δ Pᵀ)_h‖_op ≤ budget`` over the column blocks of ``width`` (one per head: with a
    block-diagonal ``P`` they are the per-head products ``Δ_h P_hᵀ``), and the first step restricts it
    to the stacked one (Lemma K), carrying ``layout`` (a :class:`derivations.lemmas.HeadLayout`).
    ``start = (problem, reduce)``: the derivation starts from ``problem`` and ``reduce(derivation)``
    applies the reduction steps that turn it into the block-whitened problem (the joint rule's
    concatenation of two variables); a reduction that ends anywhere else is an error.
    """
    z = MatrixSymbol(f"Z_{name.split('.')[-1]}", *delta.shape)
    change = product(delta, transpose(partner))
    constraint = OpNorm(change) if per_block is None else L.BlockMaxOpNorm(change, per_block[0], "columns")
    problem = Problem(delta, Inner(loss_gradient, change), constraint, budget)
    der = Derivation(name, title, problem if start is None else start[0], context, statement=statement)
    if start is not None:
        start[1](der)
        if der.state != problem:
            raise DerivationError(f"{name}: the reduction ends in {der._describe(der.state)}, not in the "
                                  f"block-whitened problem {der._describe(problem)}")
    if per_block is not None:
        der.apply(L.BLOCK_STACKING, layout=per_block[1], note=per_block[2])
    der.apply(L.POLAR_SUBSTITUTION, matrix=partner, note=f"polar decomposition of the partner {partner}")
    der.change_variables(z, GramSqrt(partner))
    der.apply(L.ORTHONORMAL_INVARIANCE)
    der.apply(L.ADJOINT_MOVE, variable=z)
    der.apply(L.POLAR_INVERSE, matrix=partner, reverse=True, note="express U through the partner")
    der.apply(L.CHAIN_RULE, gradients={gradient: product(loss_gradient, partner)},
              note="the stacked factor gradient")
    der.solve()
    der.back_substitute()
    return der


def block_roots(name: str, title: str, derived: Derivation, partner, gradient, blocks, gradients,
                context: Context, statement: str) -> Derivation:
    """The block-whitened formula with its block-diagonal partner written out: ``partner := blockdiag(blocks)``
    and ``gradient := [gradients]`` side by side, then Lemma BD (the Gram root block by block) and Lemma B
    (concatenation times block diagonal) give the per-block form ``−β msign([G_h C_h⁻¹]_h) blockdiag(C_h⁻¹)``
    that the emitted code computes (one eigendecomposition per block, ``block_right``)."""
    written = derived.formula.xreplace({partner: BlockDiag(*blocks), gradient: HStack(*gradients)})
    der = identity_chain(name, title, written, context, statement=statement)
    der.apply(L.BLOCK_DIAGONAL_ROOT, note="whiten block by block")
    der.apply(L.BLOCK_PRODUCT, note="each gradient block meets its own root")
    return der
