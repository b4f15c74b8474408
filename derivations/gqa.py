"""Grouped-query attention: query heads grouped over shared key heads.

A key head ``W_{K,g}`` is shared by the ``G`` query heads of its group. The query side is
head-local: exactly the half-split query update with the group's key head as partner. The shared
side gets the group budget divided by ``G``: with the group's queries stacked row-wise,
``W̄_g = [W_{Q,h}]_{h∈g}`` (``G d × d_h``), the products of the group stack into ``W̄_g W_{K,g}ᵀ``
and the derivation is the half-split key problem for the stacked partner with budget ``ε/(2G)``::

    ΔW_{K,g} = −(ε/2G) msign(G_{K,g} C̄_g⁻¹) C̄_g⁻¹,   C̄_g² = W̄_gᵀW̄_g = Σ_h W_{Q,h}ᵀW_{Q,h},

where ``G_{K,g} = Ḡ_Mᵀ W̄_g = Σ_h G_{M_h}ᵀ W_{Q,h}`` is the stored key gradient. Every per-product
bound holds: ``‖W_{Q,h} ΔW_{K,g}ᵀ‖ ≤ ‖W̄_g ΔW_{K,g}ᵀ‖ = ε/(2G)``; with ``G = 1`` it is half-split.

Shared value heads (GQA on the OV side) are the same problem with the partner on the left: the
group's output heads stacked row-wise, ``W̄_O = [W_{O,h}]_{h∈g}`` (``G d × d_h``), multiply the shared
``W_{V,g}`` (``d_h × d``), and the value side gets budget ``ε/(2G)``::

    ΔW_{V,g} = −(ε/2G) C̄_O⁻¹ msign(C̄_O⁻¹ G_{V,g}),   C̄_O² = Σ_h W_{O,h}ᵀW_{O,h},

with ``G_{V,g} = W̄_Oᵀ Ḡ_M = Σ_h W_{O,h}ᵀ G_{M_h}``; ``‖W_{O,h} ΔW_{V,g}‖ ≤ ε/(2G)`` for every head.
The O side keeps the hybrid rule's global sign with the block-diagonal partner
``blockdiag(W_{V,g(h)}ᵀ)`` (value blocks repeated over each group).

Both shared sides start from the per-head problem, every product of the group bounded (the
``d``-row blocks of ``W̄ ΔW_Kᵀ``, resp. ``W̄_O ΔW_V``), and reduce it to the stacked one by Lemma K
(:mod:`derivations.lemmas.blocks`), a checked restriction step. That step carries the
:class:`~derivations.lemmas.blocks.HeadLayout` (stored weight, group, shared head) from which the
stored-layout adapter of ``gqa_qk`` is printed (:mod:`derivations.printing.layout`).
"""

from __future__ import annotations

from functools import cache

from sympy.matrices.expressions import MatrixSymbol

from derivations import halfsplit
from derivations import lemmas as L
from derivations.engine.derivation import Context, Derivation, Problem, identity_chain
from derivations.engine.rule import EmittedFunction, RuleModule
from derivations.printing.layout import Adapter, adapter_source
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    ISOTROPIC_COLUMNS,
    FactMatrix,
    GramSqrt,
    Inner,
    dimension,
    positive_symbol,
)

d, d_h, n = halfsplit.d, halfsplit.d_h, dimension("n")  # n = G·d rows of the stacked queries
eps = halfsplit.eps
group = positive_symbol("G")
W_Qbar = FactMatrix("W_Qbar", n, d_h, [FULL_COLUMN_RANK])
G_Mbar = MatrixSymbol("G_Mbar", n, d)  # the group's product gradients, stacked
G_K = halfsplit.G_K
GRADIENTS = {G_K: product(transpose(G_Mbar), W_Qbar)}
#: the stacked queries in the stored layout: query heads are column blocks of W_Q (d, H·d_h), grouped
#: consecutively over the key heads of W_K
KEY_LAYOUT = L.HeadLayout("W_Qbar", "W_Q", "stack_rows", group, shared="W_K")


def context(definitions: dict | None = None) -> Context:
    return Context(definitions=GRADIENTS if definitions is None else definitions,
                   check_dims=[{d: 5, d_h: 2, n: 10}, {d: 4, d_h: 3, n: 12}, {d: 3, d_h: 3, n: 3}],
                   symbolic_dims={d: 3, d_h: 2, n: 4}, mpmath_dims={d: 4, d_h: 2, n: 8})


@cache
def key_side() -> Derivation:
    """Shared key head: ``min ⟨Ḡ_M, W̄ ΔKᵀ⟩ s.t. ‖W̄ ΔKᵀ‖_op ≤ ε/(2G)``."""
    delta = MatrixSymbol("dW_K", d, d_h)
    z = MatrixSymbol("Z_K", d, d_h)
    change = product(W_Qbar, transpose(delta))
    problem = Problem(delta, Inner(G_Mbar, change), L.BlockMaxOpNorm(change, d, "rows"), eps / (2 * group))
    der = Derivation("gqa.key", "GQA: shared key update", problem, context(),
                     statement="every product W_{Q,h} ΔW_Kᵀ of the group (the d-row blocks of W̄ ΔW_Kᵀ) within the "
                               "group budget ε/2 divided by the group size G")
    der.apply(L.BLOCK_STACKING, layout=KEY_LAYOUT,
              note="restrict to the stacked product: max_h ‖W_{Q,h} ΔW_Kᵀ‖_op ≤ ‖W̄ ΔW_Kᵀ‖_op")
    der.apply(L.POLAR_SUBSTITUTION, matrix=W_Qbar, note="polar decomposition of the stacked queries")
    der.change_variables(z, GramSqrt(W_Qbar))
    der.apply(L.ORTHONORMAL_INVARIANCE)
    der.apply(L.TRANSPOSITION)
    der.apply(L.ADJOINT_MOVE, variable=z)
    der.apply(L.POLAR_INVERSE, matrix=W_Qbar, reverse=True)
    der.apply(L.CHAIN_RULE, gradients=GRADIENTS, note="the stored key gradient sums over the group")
    der.solve()
    der.back_substitute()
    return der


@cache
def isotropic_key() -> Derivation:
    """Corollary: ``ΔW_{K,g} = −(ε/2G) c̄⁻¹ msign(G_{K,g})`` when the stacked queries have ``W̄ᵀW̄ = c̄² I``.

    The grouped form of ``qk_rule="isotropic"``: the shared key side of :func:`key_side` with the isotropic
    partner of :func:`derivations.halfsplit.isotropic_key`, ``c̄² = ‖W̄_g‖_F²/d_h + λ = Σ_h ‖W_{Q,h}‖_F²/d_h + λ``
    in the emitted function (exact when the stacked queries have orthogonal columns of equal norm). The query
    side is :func:`derivations.halfsplit.isotropic_query` with the group's key head as partner.
    """
    iso = FactMatrix(W_Qbar.name, *W_Qbar.shape, list(W_Qbar.facts | {ISOTROPIC_COLUMNS}))
    start = key_side().result.argmin.xreplace({W_Qbar: iso})
    defs = {g: v.xreplace({W_Qbar: iso}) for g, v in GRADIENTS.items()}
    der = identity_chain("gqa.isotropic_key", "GQA: shared key update, isotropic stacked queries (corollary)",
                         start, context(defs), statement="the shared key update when W_Qbarᵀ W_Qbar = c² I")
    der.apply(L.ISOTROPIC_PARTNER, matrix=iso)
    der.apply(L.MSIGN_SCALE)
    return der


W_Obar = FactMatrix("W_Obar", n, d_h, [FULL_COLUMN_RANK])  # the group's output heads, stacked
G_MObar = MatrixSymbol("G_MObar", n, d)  # the group's OV product gradients, stacked
G_V = halfsplit.G_V
GRADIENTS_V = {G_V: product(transpose(W_Obar), G_MObar)}
#: the stacked output heads: column blocks of W_O (d, H·d_h), grouped over the value heads of W_V (H_kv·d_h, d)
VALUE_LAYOUT = L.HeadLayout("W_Obar", "W_O", "stack_rows", group, shared="W_V")


@cache
def value_side() -> Derivation:
    """Shared value head: ``min ⟨Ḡ_M, W̄_O ΔV⟩ s.t. ‖W̄_O ΔV‖_op ≤ ε/(2G)``."""
    delta = MatrixSymbol("dW_V", d_h, d)
    z = MatrixSymbol("Z_V", d_h, d)
    change = product(W_Obar, delta)
    problem = Problem(delta, Inner(G_MObar, change), L.BlockMaxOpNorm(change, d, "rows"), eps / (2 * group))
    ctx = Context(definitions=GRADIENTS_V, check_dims=[{d: 5, d_h: 2, n: 10}, {d: 4, d_h: 3, n: 12},
                                                       {d: 3, d_h: 3, n: 3}],
                  symbolic_dims={d: 3, d_h: 2, n: 4}, mpmath_dims={d: 4, d_h: 2, n: 8})
    der = Derivation("gqa.value", "GQA: shared value update", problem, ctx,
                     statement="every product W_{O,h} ΔW_V of the group (the d-row blocks of W̄_O ΔW_V) within the "
                               "group budget ε/2 divided by the group size G")
    der.apply(L.BLOCK_STACKING, layout=VALUE_LAYOUT,
              note="restrict to the stacked product: max_h ‖W_{O,h} ΔW_V‖_op ≤ ‖W̄_O ΔW_V‖_op")
    der.apply(L.POLAR_SUBSTITUTION, matrix=W_Obar, note="polar decomposition of the stacked output heads")
    der.change_variables(z, GramSqrt(W_Obar), side="left")
    der.apply(L.ORTHONORMAL_INVARIANCE)
    der.apply(L.ADJOINT_MOVE, variable=z)
    der.apply(L.POLAR_INVERSE, matrix=W_Obar, reverse=True)
    der.apply(L.CHAIN_RULE, gradients=GRADIENTS_V, note="the stored value gradient sums over the group")
    der.solve()
    der.back_substitute()
    return der


def derivations():
    return [halfsplit.query_side(), key_side(), value_side(), halfsplit.isotropic_query(), isotropic_key()]


def emitted_functions():
    return [
        EmittedFunction("gqa_query", "GQA query update, one head (partner: its group's key head)",
                        [halfsplit.W_K, halfsplit.G_Q], [("dW_Q", halfsplit.query_side())],
                        ["Identical to the half-split query update."]),
        EmittedFunction("gqa_key", "GQA shared key update, one key head (partner: its group's stacked queries)",
                        [W_Qbar, G_K], [("dW_K", key_side())],
                        [("W_Qbar stacks the group's query heads row-wise, shape (..., G·d, d_h); "
                          "‖ΔW_K C̄‖_op = ε/(2G) with C̄ = (W_QbarᵀW_Qbar + λI)^(1/2), hence ‖W_Qbar ΔW_Kᵀ‖_op ≤ ε/(2G) "
                          "(equality at λ = 0) and ‖W_{Q,h} ΔW_Kᵀ‖_op ≤ ε/(2G) for every head.")],
                        extra_scalars={group: "group_size"}, counts=("group_size",)),
        value_function(),
        EmittedFunction("gqa_isotropic_query", "Isotropic GQA query update, one head (partner: its group's key "
                        "head)", [halfsplit.W_K, halfsplit.G_Q], [("dW_Q", halfsplit.isotropic_query())],
                        ["Identical to the isotropic half-split query update; c_K = (‖W_K‖_F²/d_h + λ)^(1/2)."]),
        EmittedFunction("gqa_isotropic_key", "Isotropic GQA shared key update, one key head (partner: its group's "
                        "stacked queries)", [W_Qbar, G_K], [("dW_K", isotropic_key())],
                        [("W_Qbar stacks the group's query heads row-wise, shape (..., G·d, d_h); the shared key "
                          "update of gqa_key with the stacked queries' Gram root replaced by c̄ I, c̄ = "
                          "(‖W_Qbar‖_F²/d_h + λ)^(1/2): exact when W_Qbar has orthogonal columns of equal norm.")],
                        extra_scalars={group: "group_size"}, counts=("group_size",)),
    ]


def value_function():
    """The emitted shared-value update (also used by the hybrid OV module's stored-layout entry point)."""
    return EmittedFunction("gqa_value", "GQA shared value update, one value head (partner: its group's stacked "
                           "output heads)", [W_Obar, G_V], [("dW_V", value_side())],
                           [("W_Obar stacks the group's output heads W_{O,h} (d, d_h) row-wise, shape (..., G·d, d_h); "
                             "‖C̄_O ΔW_V‖_op = ε/(2G) with C̄_O = (W_ObarᵀW_Obar + λI)^(1/2), "
                             "hence ‖W_Obar ΔW_V‖_op ≤ ε/(2G) "
                             "(equality at λ = 0), so ‖W_{O,h} ΔW_V‖_op ≤ ε/(2G) for every head.")],
                           extra_scalars={group: "group_size"}, counts=("group_size",))


def adapter():
    """The stored-layout entry point ``gqa_qk``: its adapter is printed from the reduction step of
    :func:`key_side` (the group's query heads stacked row-wise; the shared key head repeated over the
    group for the head-local query side)."""
    query, key = emitted_functions()[:2]
    return Adapter("gqa_layout", "gqa_qk", "Stored GQA layouts → per-head rule calls → stored layouts.",
                   {"W_Q": "columns", "W_K": "columns", "G_Q": "columns", "G_K": "columns"},
                   [("query_fn", query), ("key_fn", key)], "check_qk_heads",
                   entry_doc="GQA update from stored layouts: "
                             "W_Q, G_Q (..., d, H·d_h); W_K, G_K (..., d, H_kv·d_h).\n\n"
                             "    Returns (ΔW_Q, ΔW_K) in the same layouts: gqa_query per query head, gqa_key per "
                             "key head.",
                   notes=["Query head h uses key head h // G (consecutive grouping, as repeat_kv does)."],
                   example_sizes={"d": 7, "d_h": 3, "H": 4, "H_kv": 2})  # G = 2: at ε = 1e-3 a normal float16 step


def jax_extra():
    """The stored-layout entry point ``gqa_qk`` (inlined primitives and checks, the printed adapter)."""
    return adapter_source(adapter())


def rule_module():
    return RuleModule(name="gqa", title="Grouped-query attention rule of Compositional Muon",
                      derivations=derivations, functions=emitted_functions, scalars={eps: "eps"},
                      description=__doc__.split("\n\n")[0], jax_extra=jax_extra, adapters=lambda: [adapter()],
                      examples=["python -m derivations.gqa --emit jax > gqa_jax.py",
                                "python -m derivations.gqa --check"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
