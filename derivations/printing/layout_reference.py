"""What a stored-layout adapter must compute, head by head, from the same layout records.

An adapter (:class:`~derivations.printing.layout.Adapter`) takes weights in their stored layouts and calls
the emitted core functions; :mod:`derivations.printing.layout` prints it from the
:class:`~derivations.lemmas.blocks.HeadLayout` records of the reduction steps. This module computes the
updates those records *mean*, without the printer's array code (no reshapes, no repeats): every head is
sliced out of its stored matrix, the mathematically laid-out operands are assembled one head or one block at
a time, each core function's checked formula is evaluated on them by the engine's evaluator
(:func:`derivations.vocabulary.numeric.evaluate`) and the results are written back head by head.

The stored layouts: a weight (or its gradient ``G_X`` of ``W_X``, same layout) stored as ``"columns"`` is
``(d, H·d_h)``, head ``h`` its columns ``h·d_h … (h+1)·d_h − 1``; as ``"rows"`` it is ``(H·d_h, d)``, head ``h``
the rows. With ``H`` heads and ``H_kv`` shared heads, ``G = H / H_kv`` and head ``h`` pairs with shared head
``h // G`` (consecutive grouping). Per call, by the records of the called function's derivations:

* ``"concat"``: one call on ``P = blockdiag(stored…)`` and ``G = [gradients…]``; the output's equal column
  blocks are the listed updates;
* ``"diagonal"``: one call on ``blockdiag(B_0, …, B_{H−1})`` with ``B_h`` shared head ``h // G`` of the stored
  weight (transposed when the record says so), every other argument whole; the output is the whole update;
* ``"stack_rows"``: one call per shared head ``j``, on the heads ``jG … jG + G − 1`` of the stored weight
  stacked row-wise and head ``j`` of every other argument; the output is head ``j`` of the update;
* no record: one call per head ``h`` of the updated weight, on head ``h`` of each argument, or head ``h // G``
  of an argument another call's record names as shared; the output is head ``h`` of the update.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from sympy import Symbol
from sympy.matrices.expressions import MatrixSymbol

from derivations.lemmas.blocks import HeadLayout
from derivations.vocabulary.numeric import evaluate
from foundation.compute.reference import NumpyBackend


class LayoutError(ValueError):
    """The stored arrays or the records do not describe one consistent layout."""


def layouts(function) -> list[HeadLayout]:
    """The :class:`HeadLayout` records of ``function``'s derivations' steps."""
    out: list[HeadLayout] = []
    for der in function.derivations():
        for step in getattr(der, "steps", ()):
            lay = step.params.get("layout")
            if isinstance(lay, HeadLayout) and lay not in out:
                out.append(lay)
    return out


def weight_of(name: str) -> str:
    """The stored weight an argument belongs to: ``G_X`` is the gradient of ``W_X``."""
    return "W_" + name[2:] if name.startswith("G_") else name


def head(x: np.ndarray, axis: str, h: int, head_dim: int) -> np.ndarray:
    """Head ``h`` of a stored matrix (a block of ``head_dim`` columns, or of rows)."""
    s = slice(h * head_dim, (h + 1) * head_dim)
    return x[:, s] if axis == "columns" else x[s, :]


def head_count(x: np.ndarray, axis: str, head_dim: int) -> int:
    width = x.shape[1] if axis == "columns" else x.shape[0]
    if width % head_dim:
        raise LayoutError(f"a stored width of {width} is not a multiple of head_dim = {head_dim}")
    return width // head_dim


def updates(adapter, stored: dict, head_dim: int | None, scalars: dict) -> dict:
    """``{"dW_X": update}`` in the stored layouts, in the order of the stored weights.

    ``stored``: argument name → stored matrix; ``head_dim``: the head width (``None`` for an adapter without
    heads: every matrix is one head); ``scalars``: scalar symbol name → value for the formulas (``ε``, ``λ``);
    a core function's count (``extra_scalars``, the group size) is ``G``."""
    heads = _Heads(adapter, stored, head_dim)
    calls = [(fn, layouts(fn)) for _, fn in adapter.calls]
    shared = {lay.shared for _, own in calls for lay in own if lay.shared}
    for fn, own in calls:
        _check_records(adapter, own)
        kinds = {lay.arrangement: lay for lay in own}
        if "concat" in kinds:
            lay = kinds["concat"]
            value = _call(fn, {lay.operand: scipy.linalg.block_diag(*(stored[s] for s in lay.stored)),
                               lay.gradient: np.hstack([stored[g] for g in lay.gradients])}, scalars, heads.group)
            [(_, result)] = value.items()
            step = result.shape[1] // len(lay.outputs)
            for i, name in enumerate(lay.outputs):
                heads.put(name, None, result[:, i * step:(i + 1) * step])
        elif "diagonal" in kinds:
            lay = kinds["diagonal"]
            blocks = [heads.cut(lay.stored, h // heads.group) for h in range(max(heads.counts.values()))]
            args = {lay.operand: scipy.linalg.block_diag(*(b.T if lay.transposed else b for b in blocks))}
            args |= {s.name: stored[s.name] for s in fn.inputs if s.name != lay.operand}
            for name, result in _call(fn, args, scalars, heads.group).items():
                heads.put(name, None, result)
        elif "stack_rows" in kinds:
            lay = kinds["stack_rows"]
            for j in range(heads.counts[lay.shared]):
                group = range(j * heads.group, (j + 1) * heads.group)
                args = {lay.operand: np.vstack([heads.cut(lay.stored, h) for h in group])}
                args |= {s.name: heads.cut(s.name, j) for s in fn.inputs if s.name != lay.operand}
                for name, result in _call(fn, args, scalars, heads.group).items():
                    heads.put(name, j, result)
        else:
            for h in range(heads.counts[weight_of(fn.outputs[0][0][1:])]):
                args = {s.name: heads.cut(s.name, h // heads.group if s.name in shared else h) for s in fn.inputs}
                for name, result in _call(fn, args, scalars, heads.group).items():
                    heads.put(name, h, result)
    return {f"d{name}": heads.out[f"d{name}"] for name in adapter.stored if f"d{name}" in heads.out}


class _Heads:
    """The stored matrices cut into heads, and the updates written back head by head."""

    def __init__(self, adapter, stored: dict, head_dim: int | None):
        self.axes, self.stored, self.whole = adapter.stored, stored, head_dim is None
        self.width = stored[next(iter(self.axes))].shape[1] if head_dim is None else head_dim
        self.counts = {name: 1 if head_dim is None else head_count(x, self.axes[name], head_dim)
                       for name, x in stored.items()}
        self.group = max(self.counts.values()) // min(self.counts.values())
        self.out = {f"d{name}": np.zeros_like(x) for name, x in stored.items() if name.startswith("W_")}

    def cut(self, name: str, h: int) -> np.ndarray:
        return self.stored[name] if self.whole else head(self.stored[name], self.axes[name], h, self.width)

    def put(self, name: str, h: int | None, value: np.ndarray) -> None:
        """Head ``h`` of the update ``name`` (the whole update for ``None``)."""
        w, out = self.width, self.out[name]
        if self.whole or h is None:
            out[...] = value
        elif self.axes[weight_of(name[1:])] == "columns":
            out[:, h * w:(h + 1) * w] = value
        else:
            out[h * w:(h + 1) * w, :] = value


def _check_records(adapter, own: list) -> None:
    """Every record names stored arguments, with the head axis the entry point stores them with."""
    axes = adapter.stored
    for lay in own:
        names = lay.stored if isinstance(lay.stored, tuple) else (lay.stored,)
        for name in names:
            if name not in axes:
                raise LayoutError(f"{adapter.entry}: the record of {lay.operand} names {name}, not a stored argument")
        if lay.arrangement != "concat" and axes[lay.stored] != lay.head_axis:
            raise LayoutError(f"{adapter.entry}: {lay.stored} is stored with heads along its {axes[lay.stored]}, "
                              f"the record of {lay.operand} says {lay.head_axis}")


def _call(fn, args: dict, scalars: dict, group: int) -> dict:
    """``{output: value}``: ``fn``'s checked formulas on ``args`` (by name), evaluated in float64."""
    results = {}
    for out, der in fn.outputs:
        env: dict = {}
        dims: dict = {}
        for sym in der.formula.atoms(MatrixSymbol):
            if sym.name in args:
                value = np.asarray(args[sym.name], dtype=np.float64)
                env[sym] = value
                for size, n in zip(sym.shape, value.shape, strict=True):
                    if isinstance(size, Symbol):
                        if dims.setdefault(size, n) != n:
                            raise LayoutError(f"{fn.name}: dimension {size} is {dims[size]} and {n}")
                    elif int(size.subs(dims)) != n:
                        raise LayoutError(f"{fn.name}: {sym.name} has shape {value.shape}, the formula {sym.shape}")
        for sym in der.formula.free_symbols:
            if isinstance(sym, Symbol) and not isinstance(sym, MatrixSymbol) and sym not in dims:
                if fn.extra_scalars.get(sym) in fn.counts:
                    env[sym] = float(group)
                elif sym.name in scalars:
                    env[sym] = scalars[sym.name]
                else:
                    raise LayoutError(f"{fn.name}: no value for the scalar {sym} of {der.name}")
        results[out] = np.asarray(evaluate(der.formula, env, NumpyBackend(), dims), dtype=np.float64)
    return results
