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
from sympy import Basic, S, sympify
from sympy.core.symbol import Str
from sympy.core.sympify import _sympify

from ..evaluate import InstanceSampler, evaluate
from ..vocabulary import OpNorm, _MatrixScalar, dimension
from .base import _NP, Lemma, _fresh, rewrite_nodes

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
        return f"max_i ||({printer._print(self.matrix)})_i||_op [{self.axis[:-1]} blocks of {printer._print(self.size)}]"

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
    stored: str
    arrangement: str
    group: object = S.One
    head_axis: str = "columns"
    transposed: bool = False
    shared: str | None = None

    def describe(self) -> str:
        heads = f"{self.stored}'s heads" + ("ᵀ" if self.transposed else "")
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


BLOCK_STACKING = Restriction(
    key="block_stacking", number="K", title="A block's operator norm is at most the stacked matrix's",
    statement=(r"\max_i \|X_i\|_{\mathrm{op}} \le \|X\|_{\mathrm{op}}"
               r"\quad (X_i \text{ the row blocks or the column blocks of } X)"),
    conditions=(r"X_i = E_i^{\top} X \text{ or } X E_i,\ E_i^{\top} E_i = I",),
    rewrite=_stacking_rewrite, check=lambda rng, lemma: bound_check(lemma, rng),
    not_modelled="an inequality (checked on random instances, not an identity of the explicit model)",
)
