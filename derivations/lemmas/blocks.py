"""Block and stacking reductions: many per-block constraints replaced by one stacked constraint.

A shared key head of grouped-query attention meets ``G`` products ``W_{Q,h} ΔW_Kᵀ``, one per query
head of its group; the hybrid OV rule's O side meets ``H`` products ``ΔW_{O,h} W_{V,h}``, one per
head. The per-head problem bounds each product: ``max_h ‖X_h‖_op ≤ β`` where ``X_h`` are the row
blocks of ``X = W̄ ΔW_Kᵀ`` (``W̄`` the group's query heads stacked row-wise) or the column blocks of
``X = ΔW_O Pᵀ`` (``P = blockdiag(W_{V,h}ᵀ)``). A block ``X_h = E_hᵀ X`` (``E_h`` selects its rows,
orthonormal columns) has ``‖X_h‖_op ≤ ‖E_h‖_op ‖X‖_op = ‖X‖_op``, so

    max_h ‖X_h‖_op ≤ ‖X‖_op                                                         (Lemma K)

and the stacked constraint ``‖X‖_op ≤ β`` is *stronger*: every feasible point of the stacked
problem is feasible for the per-head one. The reduction is a restriction, not an equality: the
engine checks it as one (``c_before(X) ≤ c_after(X)`` on random ``X``, objective unchanged), and the
final back-substitution certifies the argmin by duality for the stacked problem and checks that it
is feasible for the per-head problem it started from.

A reduction step also carries a :class:`HeadLayout`: how its stacked operand is assembled from the
stored weight layouts (which weight, which axis holds its heads, the group size). The JAX printer
reads it to print the stored-layout adapter (:mod:`derivations.printing.layout`), so the adapter and
the derivation share one description.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sympy import Add, Basic, Integer, S, Symbol, sympify
from sympy.core.symbol import Str
from sympy.core.sympify import _sympify
from sympy.matrices.expressions import MatMul, MatrixExpr, MatrixSymbol, Transpose

from derivations.lemmas.base import _LARGE, _NP, _SMALL, Lemma, _fresh, _n, _tall, rewrite_nodes
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.evaluate import InstanceSampler, evaluate
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    BlockDiag,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    HStack,
    Inner,
    OpNorm,
    _MatrixScalar,
    dimension,
    positive_symbol,
)

_SMALL_BLOCKS = _SMALL

AXES = ("rows", "columns")


class BlockMaxOpNorm(_MatrixScalar):
    """``max_i ‖X_i‖_op`` over the consecutive blocks ``X_i`` of ``X``: blocks of ``size`` rows
    (``axis="rows"``) or of ``size`` columns (``axis="columns"``); ``size`` must divide that side."""

    is_nonnegative = True

    def __new__(cls, x, size, axis):
        x = _sympify(x)
        if not getattr(x, "is_Matrix", False):
            raise TypeError(f"BlockMaxOpNorm takes a matrix expression, got {x!r}")
        if str(axis) not in AXES:
            raise ValueError(f"BlockMaxOpNorm: axis must be one of {AXES}, got {axis!r}")
        return Basic.__new__(cls, x, sympify(size), Str(str(axis)))

    matrix = property(lambda self: self.args[0])
    size = property(lambda self: self.args[1])
    axis = property(lambda self: self.args[2].name)

    def blocks(self, value, total: int, size: int):
        """The blocks of a concrete ``value`` (NumPy or mpmath) with ``total`` rows/columns on the axis."""
        if size < 1 or total % size:
            raise ValueError(f"{self}: blocks of {size} {self.axis} do not tile {total} {self.axis}")
        cols = value.cols if hasattr(value, "cols") else np.shape(value)[1]
        rows = value.rows if hasattr(value, "rows") else np.shape(value)[0]
        if self.axis == "rows":
            return [value[i:i + size, 0:cols] for i in range(0, total, size)]
        return [value[0:rows, j:j + size] for j in range(0, total, size)]

    def _numeric(self, ev):
        x = ev(self.matrix)
        total = ev.shape(self.matrix)[0 if self.axis == "rows" else 1]
        norms = [ev.backend.op_norm(b) for b in self.blocks(x, total, ev.size(self.size))]
        return max(norms)

    def _sympystr(self, printer):
        return (f"max_i ||({printer._print(self.matrix)})_i||_op "
                f"[{self.axis[:-1]} blocks of {printer._print(self.size)}]")

    def _latex(self, printer):
        return (rf"\max_i \left\| \left({printer._print(self.matrix)}\right)_i \right\|_{{\mathrm{{op}}}}"
                rf"\ \text{{({self.axis[:-1]} blocks of }}{printer._print(self.size)}\text{{)}}")


@dataclass(frozen=True)
class HeadLayout:
    """How a reduction's operand is laid out in the stored weights (read by the layout printer).

    ``operand``: the symbol the reduction produces (``W_Qbar``, ``P_V``); ``stored``: the stored
    weight whose heads it is made of (``W_Q`` of shape ``(d, H·d_h)``: heads are column blocks, or
    ``W_V`` of shape ``(H_kv·d_h, d)``: heads are row blocks, ``head_axis="rows"``); ``arrangement``:
    ``"stack_rows"`` (the ``G`` heads of a group stacked row-wise, one operand per shared head) or
    ``"diagonal"`` (one block per head, ``blockdiag``: passed as its blocks ``(..., H, d, d_h)``);
    ``group``: the group-size symbol, or 1; ``transposed``: the blocks are the stored heads
    transposed (``W_{V,h}ᵀ``); ``shared``: the stored weight of the shared heads (a head ``h`` of
    ``stored`` pairs with shared head ``h // G``).
    """

    operand: str
    stored: str | tuple  # a tuple of stored weights for "concat"
    arrangement: str
    group: object = S.One
    head_axis: str = "columns"
    transposed: bool = False
    shared: str | None = None
    #: ``"concat"`` (the joint rule): the gradient argument and the stored gradients it concatenates,
    #: and the stored updates the output splits into
    gradient: str | None = None
    gradients: tuple = ()
    outputs: tuple = ()

    def describe(self) -> str:
        heads = f"{self.stored}'s heads" + ("ᵀ" if self.transposed else "")
        if self.arrangement == "concat":
            return (f"{self.operand} = blockdiag({', '.join(self.stored)}), "
                    f"{self.gradient} = [{' | '.join(self.gradients)}], "
                    f"the update = [{' | '.join(self.outputs)}]")
        how = {"stack_rows": f"stacked row-wise in groups of {self.group}",
               "diagonal": f"as diagonal blocks, each repeated over a group of {self.group}"}[self.arrangement]
        share = f"; head h pairs with {self.shared} head h // {self.group}" if self.shared else ""
        return f"{self.operand} = {heads} {how}{share}"


@dataclass(frozen=True)
class Restriction(Lemma):
    """A lemma that replaces a constraint by a stronger one: ``c_before(X) ≤ c_after(X)`` for every
    ``X`` (the feasible set shrinks). The engine records its application as a ``restrict`` step."""

    restricts: bool = True


_CONDITION = ("every block X_i = E_iᵀ X (rows) or X E_i (columns) with E_i a selection of orthonormal "
              "columns, so ‖X_i‖_op ≤ ‖X‖_op: the stacked constraint implies every per-block one")


def _stacking_rule(e):
    if isinstance(e, BlockMaxOpNorm):
        return OpNorm(e.matrix), [_CONDITION]
    return None


def _stacking_rewrite(expr, layout=None, **_):
    """``max_i ‖X_i‖_op → ‖X‖_op`` (``layout``, the step's :class:`HeadLayout`, is data for the printer)."""
    if layout is not None and not isinstance(layout, HeadLayout):
        raise TypeError(f"layout must be a HeadLayout, got {layout!r}")
    return rewrite_nodes(expr, _stacking_rule, "no maximum of operator norms over blocks (max_i ‖X_i‖_op)")


_b, _c, _k = dimension("b"), dimension("c"), dimension("k_b")
_BLOCK_DIMS = ({_b: 3, _c: 4, _k: 2}, {_b: 2, _c: 3, _k: 4}, {_b: 4, _c: 2, _k: 3})


def bound_check(lemma, rng) -> dict:
    """The restriction's self-check: on random matrices (Gaussian, and ones whose mass sits in one
    block, where the bound is tight), the lemma's own rewrite of ``max_i ‖X_i‖_op`` must not be
    smaller than the original (relative excess ``max(0, before − after) / after``), and it must fire."""
    errors = {"bound (before ≤ after)": 0.0, "rewrite fires": 0.0}
    for dims in _BLOCK_DIMS:
        for axis in AXES:
            shape = (_k * _b, _c) if axis == "rows" else (_c, _k * _b)
            x = _fresh("X", *shape)
            expr = BlockMaxOpNorm(x, _b, axis)
            try:
                new, _ = lemma.apply(expr)
            except Exception:  # noqa: BLE001 (a rewrite that fails is reported, whatever it raised)
                errors["rewrite fires"] = 1.0
                continue
            if new == expr:
                errors["rewrite fires"] = 1.0
                continue
            sampler = InstanceSampler(dims)
            for tight in (False, True):
                env = sampler.sample(rng, {x})
                if tight:  # all the mass in one block: the per-block maximum equals the whole norm
                    value = np.zeros_like(env[x])
                    b = dims[_b]
                    sl = (slice(0, b), slice(None)) if axis == "rows" else (slice(None), slice(0, b))
                    value[sl] = env[x][sl]
                    env[x] = value
                before, after = (float(evaluate(e, env, _NP, dims)) for e in (expr, new))
                errors["bound (before ≤ after)"] = max(errors["bound (before ≤ after)"],
                                                       max(0.0, before - after) / max(after, 1e-300))
    return errors


def _stacking_statement() -> Statement:
    """``max_i ‖X_i‖_op ≤ ‖X‖_op`` for the row blocks and for the column blocks of ``X`` (blocks of ``b`` rows or
    columns): a bound, so a step citing it is a restriction (the stacked constraint implies the per-block one)."""
    m, n, b = dimension("m"), dimension("n"), dimension("b")
    x = MatrixSymbol("X", m, n)
    return Statement(tuple(Clause(BlockMaxOpNorm(x, b, axis), OpNorm(x), "<=") for axis in AXES),
                     sizes=({m: 6, n: 4, b: 2}, {m: 48, n: 32, b: 16}), integers=frozenset({b}))


BLOCK_STACKING = Restriction(
    key="block_stacking", number="K", title="A block's operator norm is at most the stacked matrix's",
    statement=_stacking_statement(),
    conditions=(r"b \text{ divides the rows (row blocks) or the columns (column blocks) of } X",
                r"X_i = E_i^{\top} X \text{ or } X E_i,\ E_i^{\top} E_i = I"),
    rewrite=_stacking_rewrite, check=lambda rng, lemma: bound_check(lemma, rng),
    not_modelled="an inequality (checked on random instances, not an identity of the explicit model)",
)


# ---- the joint rule: two variables side by side, one block-diagonal partner ---------------------
class ColumnBlock(MatrixExpr):
    """The ``index``-th of ``count`` equal column blocks of ``X`` (``ΔW_Q = [Δ]_0``, ``ΔW_K = [Δ]_1``
    for ``Δ = [ΔW_Q | ΔW_K]``), printed by its ``name``."""

    label_args = (3,)  # the name is a print label: the trusted kernel matches blocks whatever their names

    def __new__(cls, x, index, count, name):
        x = _sympify(x)
        index, count = int(index), int(count)
        if not 0 <= index < count:
            raise ValueError(f"ColumnBlock: index {index} is not one of {count} blocks")
        return Basic.__new__(cls, x, Integer(index), Integer(count), Str(str(name)))

    matrix = property(lambda self: self.args[0])
    index = property(lambda self: int(self.args[1]))
    count = property(lambda self: int(self.args[2]))
    name = property(lambda self: self.args[3].name)

    @property
    def shape(self):
        return (self.matrix.shape[0], self.matrix.shape[1] / self.count)

    def _columns(self, total):
        if total % self.count:
            raise ValueError(f"{self.name}: {total} columns do not split into {self.count} blocks")
        width = total // self.count
        return self.index * width, (self.index + 1) * width

    def _numeric(self, ev):
        x = ev(self.matrix)
        rows, cols = ev.shape(self.matrix)
        lo, hi = self._columns(cols)
        return x[0:rows, lo:hi]

    def _symbolic(self, model):
        x = model.value(self.matrix)
        lo, hi = self._columns(x.cols)
        return x[:, lo:hi]

    def _sympystr(self, printer):
        return self.name

    def _latex(self, printer):
        return printer._print(MatrixSymbol(self.name, 1, 1))


def _assemble(blocks):
    """``[X_0 | … | X_{k−1}] → X`` when the blocks are a matrix's column blocks in order, else the HStack."""
    if (all(isinstance(b, ColumnBlock) for b in blocks) and len({b.matrix for b in blocks}) == 1
            and [b.index for b in blocks] == list(range(blocks[0].count))):
        return blocks[0].matrix
    return HStack(*blocks)


def _concatenate(blocks, names):
    """``[A_1 B_1ᵀ | … | A_k B_kᵀ] → [A_1 | … | A_k] blockdiag(B_1, …, B_k)ᵀ`` (``None`` if a block is not ``A Bᵀ``)."""
    left, right = [], []
    for b in blocks:
        coeff, mats = b.as_coeff_matrices() if isinstance(b, MatMul) else (S.One, [b])
        if len(mats) < 2 or not isinstance(mats[-1], Transpose):
            return None
        left.append(product(coeff, *mats[:-1]))
        right.append(mats[-1].arg)
    partner = BlockDiag(*right)
    return product(_assemble(left), transpose(names.get(partner, partner)))


def _block_key(term):
    found = sorted(b.index for b in term.atoms(ColumnBlock)) if isinstance(term, Basic) else []
    return found[0] if found else -1


def _concatenation_rule(names):
    def rule(e):
        if isinstance(e, HStack):
            out = _concatenate(list(e.args), names)
            return None if out is None else (out, [_CONCAT_CONDITION])
        if isinstance(e, Add) and all(isinstance(t, Inner) for t in e.args):
            pairs = []
            for t in sorted(e.args, key=_block_key):
                g, x = t.args if t.args[1].has(ColumnBlock) or not t.args[0].has(ColumnBlock) else t.args[::-1]
                pairs.append((g, x))
            if len({x.shape[0] for _, x in pairs}) != 1:
                return None
            stacked = _concatenate([x for _, x in pairs], names)
            if stacked is None:
                return None
            gradient = HStack(*[g for g, _ in pairs])
            return Inner(names.get(gradient, gradient), stacked), [_CONCAT_CONDITION]
        return None
    return rule


_CONCAT_CONDITION = ("the blocks are side by side with equal row counts: [A_1 B_1ᵀ | A_2 B_2ᵀ] = "
                     "[A_1 | A_2] blockdiag(B_1, B_2)ᵀ and Σ_i ⟨G_i, X_i⟩ = ⟨[G_1 | G_2], [X_1 | X_2]⟩")


def _concatenation_rewrite(expr, names=None, layout=None, **_):
    """Concatenate the side-by-side products and the sum of inner products; ``names`` abbreviates the
    stacked partner and gradient by their defined symbols (``P := blockdiag(W_K, W_Q)``)."""
    if layout is not None and not isinstance(layout, HeadLayout):
        raise TypeError(f"layout must be a HeadLayout, got {layout!r}")
    return rewrite_nodes(expr, _concatenation_rule(dict(names or {})),
                         "no side-by-side products [A_1 B_1ᵀ | …] "
                         "and no sum of inner products ⟨G_i, X_i⟩ to concatenate")


def _concatenation_ids():
    a1, a2 = _fresh("A_1", _c, _b), _fresh("A_2", _c, _b)
    b1, b2 = _fresh("B_1", _k, _b), _fresh("B_2", _k, _b)
    g1, g2 = _fresh("G_1", _c, _k), _fresh("G_2", _c, _k)
    x = _fresh("X", _c, 2 * _b)
    h1, h2 = ColumnBlock(x, 0, 2, "X_1"), ColumnBlock(x, 1, 2, "X_2")
    stacked = product(HStack(a1, a2), transpose(BlockDiag(b1, b2)))
    cases = [(HStack(a1 * b1.T, a2 * b2.T), stacked),
             (Inner(g1, a1 * b1.T) + Inner(g2, a2 * b2.T), Inner(HStack(g1, g2), stacked)),
             (HStack(h1 * b1.T, h2 * b2.T), product(x, transpose(BlockDiag(b1, b2))))]
    return cases, InstanceSampler({_b: 2, _c: 5, _k: 3})


@dataclass(frozen=True)
class Reduction(Lemma):
    """An equality that reformulates the original problem (before any change of variables); the
    back-substitution certifies the reformulated problem and checks feasibility for the original."""

    reduces: bool = True


def _concatenation_instance(env, rng, backend, dims, *, names=None, **_):
    """The abbreviations hold on the step's instances: ``P := blockdiag(W_K, W_Q)``, ``G̃ := [G_M | G_Mᵀ]``
    are computed from the sampled blocks (the rest of the derivation treats them as free symbols)."""
    out = dict(env)
    for expr, sym in (names or {}).items():
        out[sym] = evaluate(expr, env, backend, dims)
    return out, set((names or {}).values())


def _concatenation_statement() -> Statement:
    """``[A_1 B_1ᵀ | A_2 B_2ᵀ] = [A_1 | A_2] blockdiag(B_1, B_2)ᵀ``, ``⟨G_1, A_1 B_1ᵀ⟩ + ⟨G_2, A_2 B_2ᵀ⟩ =
    ⟨[G_1 | G_2], [A_1 | A_2] blockdiag(B_1, B_2)ᵀ⟩`` and ``[X_1 | X_2] = X`` for the two column blocks of ``X``; the
    step's abbreviations ``P = blockdiag(B_1, B_2)``, ``G̃ = [G_1 | G_2]`` are instances of its definitions. A step is an
    instance when the clauses and its abbreviations, applied left to right, give both sides one normal form."""
    a1, a2 = _fresh("A_1", _c, _b), _fresh("A_2", _c, _b)
    b1, b2 = _fresh("B_1", _k, _b), _fresh("B_2", _k, _b)
    g1, g2 = _fresh("G_1", _c, _k), _fresh("G_2", _c, _k)
    x = _fresh("X", _c, 2 * _b)
    partner, stacked = BlockDiag(b1, b2), HStack(a1, a2)
    clauses = (Clause(HStack(a1 * b1.T, a2 * b2.T), product(stacked, transpose(partner))),
               Clause(Inner(g1, a1 * b1.T) + Inner(g2, a2 * b2.T), Inner(HStack(g1, g2), product(stacked,
                                                                                        transpose(partner)))),
               Clause(HStack(ColumnBlock(x, 0, 2, "X_1"), ColumnBlock(x, 1, 2, "X_2")), x),
               Clause(_fresh("P", 2 * _k, 2 * _b), partner, defines=True),
               Clause(_fresh("G", _c, 2 * _k), HStack(g1, g2), defines=True))
    return Statement(clauses, closure="rewrite", defined_by=("names",),
                     sizes=({_b: 2, _c: 5, _k: 3}, {_b: 16, _c: 20, _k: 18}))


CONCATENATION = Reduction(
    key="concatenation", number="J", title="Side-by-side products concatenate through a block-diagonal partner",
    statement=_concatenation_statement(),
    rewrite=_concatenation_rewrite, identities=_concatenation_ids, instance=_concatenation_instance,
    not_modelled=("the abbreviated partner and gradient are bound on the step's own instances, which the explicit "
                  "model does not see"),
)


# ---- a block-diagonal partner is whitened block by block ---------------------------------------
def _block_root_rule(e):
    if isinstance(e, (GramSqrt, GramInvSqrt)) and isinstance(e.base, BlockDiag):
        blocks = [type(e)(b, e.damping, e.side) for b in e.base.args]
        side = "column" if e.side == "right" else "row"
        return BlockDiag(*blocks), [(f"{e.base} is block diagonal: its Gram matrix (+ λI) is blockdiag of the "
                                     f"blocks' ({side} side), and powers act block by block")]
    return None


def _block_root_rewrite(expr, **_):
    return rewrite_nodes(expr, _block_root_rule, "no Gram root of a block-diagonal matrix")


def _block_root_ids():
    a, b = _tall("A", FULL_COLUMN_RANK), _tall("B", FULL_COLUMN_RANK)
    lam = positive_symbol("lambda_b")
    cases = [(node(BlockDiag(a, b), damping), BlockDiag(node(a, damping), node(b, damping)))
             for node in (GramInvSqrt, GramSqrt) for damping in (S.Zero, lam)]
    return cases, InstanceSampler(_SMALL_BLOCKS)


def _block_root_statement() -> Statement:
    """``C_{blockdiag(A, B)}^{±1} = blockdiag(C_A^{±1}, C_B^{±1})`` (Gram roots with damping ``λ ≥ 0``) for two
    blocks of full column rank: the form every step uses (two blocks)."""
    a, b = _tall("A", FULL_COLUMN_RANK), FactMatrix("B", dimension("k"), _n, [FULL_COLUMN_RANK])
    lam = Symbol("lambda", nonnegative=True)
    return Statement(tuple(Clause(node(BlockDiag(a, b), lam), BlockDiag(node(a, lam), node(b, lam)))
                           for node in (GramInvSqrt, GramSqrt)), sizes=(_SMALL, _LARGE))


BLOCK_DIAGONAL_ROOT = Lemma(
    key="block_diagonal_root", number="BD", title="Gram roots of a block-diagonal matrix, block by block",
    statement=_block_root_statement(),
    rewrite=_block_root_rewrite, identities=_block_root_ids,
    not_modelled="Gram roots of explicit symbolic matrices are not formed by the explicit model",
)
