"""Hybrid OV rule: head-local V side, global O side (one msign over all heads).

V side (head-local, left whitening by the partner ``W_{O,h}``) is the half-split V derivation:
``ΔW_{V,h} = −(ε/2) C_{O,h}⁻¹ msign(C_{O,h}⁻¹ G_{V,h})``.

O side: with ``P = blockdiag(W_{V,1}ᵀ, …, W_{V,H}ᵀ)`` (``H d × H d_h``) the product
``ΔW_O Pᵀ = [ΔW_{O,1} W_{V,1} | … | ΔW_{O,H} W_{V,H}]`` holds every head's product change side by
side. The derivation starts from the per-head problem (``max_h ‖ΔW_{O,h} W_{V,h}‖_op ≤ ε/2``, the
``d``-column blocks) and restricts it by Lemma K to one global constraint ``‖ΔW_O Pᵀ‖_op ≤ ε/2``,
whose operator norm equals the stacked bound ``‖[ΔW_{O,h} C_{V,h}]_h‖_op``; the step's layout record
(value heads as diagonal blocks, repeated over each group) prints the stored-layout adapter. The block-whitened
derivation gives ``S = msign([G_{O,h} C_{V,h}⁻¹]_h)`` split into head blocks
``ΔW_{O,h} = −(ε/2) S_h C_{V,h}⁻¹``, with ``‖[ΔW_{O,h} C_{V,h}]_h‖_op = ε/2``.

Shared value heads (GQA, ``H_kv < H``): the V side is :func:`derivations.gqa.value_side` (the
group's output heads stacked, budget ``ε/(2G)``; at ``G = 1`` the head-local rule above), the O side
the same block-whitened derivation with the value blocks repeated over each group.
"""

from __future__ import annotations

from functools import cache

from sympy import Rational
from sympy.matrices.expressions import MatrixSymbol

from derivations import gqa, halfsplit
from derivations import lemmas as L
from derivations.block_whitened import block_roots as block_roots_of
from derivations.block_whitened import block_whitened
from derivations.engine.derivation import Context
from derivations.engine.rule import EmittedFunction, RuleModule
from derivations.printing.layout import Adapter, adapter_source
from derivations.vocabulary.nodes import BLOCK_DIAGONAL, FULL_COLUMN_RANK, FactMatrix, dimension

d, m, n = dimension("d"), dimension("m"), dimension("n")  # m = H d_h, n = H d
eps = halfsplit.eps
P = FactMatrix("P_V", n, m, [FULL_COLUMN_RANK, BLOCK_DIAGONAL])  # blockdiag(W_{V,h}ᵀ)
G_tilde = MatrixSymbol("G_Mheads", d, n)  # [G_{M_1} | … | G_{M_H}]
G_O = MatrixSymbol("G_O", d, m)  # = G̃ P = [G_{M_h} W_{V,h}ᵀ]_h
dW_O = MatrixSymbol("dW_O", d, m)


def context() -> Context:
    return Context(definitions={G_O: G_tilde * P}, check_dims=[{d: 6, m: 4, n: 12}, {d: 5, m: 3, n: 15}],
                   symbolic_dims={d: 3, m: 2, n: 4}, mpmath_dims={d: 4, m: 2, n: 8})


RESTRICTION_NOTE = "restrict to all heads side by side: max_h ‖ΔW_{O,h} W_{V,h}‖_op ≤ ‖ΔW_O P_Vᵀ‖_op (one global sign)"


def _o_layout():
    #: P_V's blocks: the value heads W_{V,g}ᵀ of W_V (H_kv·d_h, d), each repeated over its group of output heads
    return L.HeadLayout("P_V", "W_V", "diagonal", gqa.group, head_axis="rows", transposed=True)


@cache
def o_side():
    return block_whitened("hybrid_ov.o_side", "Hybrid OV: global O update", dW_O, P, G_tilde, G_O,
                          eps * Rational(1, 2), context(),
                          "every head's product change ΔW_{O,h} W_{V,h} (the d-column blocks of ΔW_O P_Vᵀ) "
                          "within ε/2", per_block=(d, _o_layout(), RESTRICTION_NOTE))


#: two heads' blocks of ``P_V = blockdiag(W_{V,1}ᵀ, W_{V,2}ᵀ)`` and of ``G_O = [G_{O,1} | G_{O,2}]``
#: (Lemma BD holds for any count)
V_BLOCKS = (FactMatrix("W_V1t", d, halfsplit.d_h, [FULL_COLUMN_RANK]),
            FactMatrix("W_V2t", d, halfsplit.d_h, [FULL_COLUMN_RANK]))
O_GRADIENTS = (MatrixSymbol("G_O1", d, halfsplit.d_h), MatrixSymbol("G_O2", d, halfsplit.d_h))


@cache
def block_roots():
    """The O update with two heads written out: ``−(ε/2) msign([G_{O,h} C_{V,h}⁻¹]_h) blockdiag(C_{V,h}⁻¹)``."""
    d_h = halfsplit.d_h
    ctx = Context(check_dims=[{d: 6, d_h: 2, m: 4, n: 12}, {d: 5, d_h: 3, m: 6, n: 10}],
                  mpmath_dims={d: 4, d_h: 2, m: 4, n: 8})
    return block_roots_of("hybrid_ov.block_roots", "Hybrid OV: global O update, head by head", o_side(), P, G_O,
                          V_BLOCKS, O_GRADIENTS, ctx, "two heads: P_V = blockdiag(W_V1t, W_V2t) with W_Vht = W_{V,h}ᵀ, "
                          "G_O = [G_O1 | G_O2]; one global sign, each head whitened by its own root")


def derivations():
    return [halfsplit.value_side(), o_side(), block_roots(), gqa.value_side()]


def emitted_functions():
    return [
        EmittedFunction("hybrid_o", "Global O update of the hybrid OV rule (core)", [P, G_O], [("dW_O", o_side())],
                        ["P_V = blockdiag(W_{V,h}ᵀ): the JAX module takes its blocks (..., H, d, d_h), "
                         "the NumPy reference the dense matrix."],
                        shape_spec={"P_V": ("k", "d", "d_h"), "G_O": ("d", "m")}),
        EmittedFunction("hybrid_v", "Head-local V update of the hybrid OV rule", [halfsplit.W_O, halfsplit.G_V],
                        [("dW_V", halfsplit.value_side())],
                        ["One head: W_O (..., d, d_h), G_V (..., d_h, d)."]),
        gqa.value_function(),
    ]


def adapter():
    """The stored-layout entry point ``hybrid_ov``, printed from the reduction steps of :func:`o_side`
    (value heads as diagonal blocks, repeated over each group) and of :func:`derivations.gqa.value_side`
    (a group's output heads stacked row-wise)."""
    o_fn, _, value_fn = emitted_functions()
    return Adapter("gqa_ov_layout", "hybrid_ov",
                   "Stored OV layouts with H_kv value heads → O side (one global sign) and shared V side.",
                   {"W_O": "columns", "W_V": "rows", "G_O": "columns", "G_V": "rows"},
                   [("o_core", o_fn), ("v_core", value_fn)], "check_ov_heads",
                   entry_doc="Hybrid OV update from stored layouts: W_O, G_O (..., d, H·d_h); W_V, G_V (..., "
                             "H_kv·d_h, d).\n\n    H_kv = H: head-local V side. H_kv < H (GQA): each value head "
                             "is shared by H/H_kv consecutive output\n    heads and gets budget ε/(2G) (gqa_value). "
                             "Returns (ΔW_O, ΔW_V) in the same layouts.",
                   notes=["Output head h reads value head h // G; with H_kv = H this is the head-local hybrid rule."],
                   # head-local (H_kv = H): the golden copy of this module predates shared value heads
                   example_sizes={"d": 7, "d_h": 3, "H": 4, "H_kv": 4})


def jax_extra():
    return adapter_source(adapter())


def rule_module():
    return RuleModule(name="hybrid_ov", title="Hybrid OV rule of Compositional Muon", derivations=derivations,
                      functions=emitted_functions, scalars={eps: "eps"}, description=__doc__.split("\n\n")[0],
                      jax_extra=jax_extra, adapters=lambda: [adapter()],
                      examples=["python -m derivations.hybrid_ov --emit jax > hybrid_ov_jax.py",
                                "python -m derivations.hybrid_ov --check"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
