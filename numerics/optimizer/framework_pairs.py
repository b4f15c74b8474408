"""The attention layouts of flax linen, flax nnx and equinox parameter trees, read for ``pairs="auto"``.

Neither flax nor equinox is imported here (they are optional: ``pip install -e ".[frameworks]"``); their trees
are read by their shapes, their path names and, for equinox, the static fields of the module itself:

* flax linen ``nn.MultiHeadDotProductAttention`` and flax nnx ``nnx.MultiHeadAttention`` store ``DenseGeneral``
  kernels with separate head axes: ``query/kernel (..., d, H, d_h)``, ``key/kernel`` and ``value/kernel``
  ``(..., d, H_kv, d_h)``, ``out/kernel (..., H, d_h, d)``. :func:`head_axes_counts` reads ``H`` and ``H_kv``
  from these shapes, and :func:`merge_head_axes` views such a pair in the 2-D layouts of
  :class:`~numerics.optimizer.pairs.QKPair` / :class:`~numerics.optimizer.pairs.OVPair` (kernels): a reshape,
  since head ``h`` is the ``h``-th block of ``d_h`` columns (rows of ``W_O``) there.
* flax nnx's ``nnx.state(model)`` holds ``Variable`` objects whose array is their ``value`` attribute, while
  ``nnx.Optimizer`` passes the pure arrays to ``update``: :func:`~numerics.optimizer.pairs.path_name` drops a
  trailing ``.value`` attribute (:func:`is_variable_value`), so both trees name a leaf ``"attn/query/kernel"``.
* equinox ``eqx.nn.MultiheadAttention`` stores ``query_proj``/``key_proj``/``value_proj``/``output_proj``
  ``Linear`` weights ``(out, in)`` (``W @ x``); its head count is a static field of the module, which
  :func:`module_head_counts` reads from the params tree (``eqx.filter(model, eqx.is_array)`` keeps it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

import jax


class HeadAxesCounts(NamedTuple):
    """What the shapes of a block with head axes say: ``heads``, ``kv_heads`` and whether its output
    projection maps back to the input width (``out_features == in_features``), so that O and V form a pair."""

    heads: int
    kv_heads: int
    square_ov: bool


def head_axes_counts(q: Any, k: Any, v: Any, o: Any) -> HeadAxesCounts | None:
    """``(H, H_kv, square_ov)`` when the four arrays are ``DenseGeneral`` kernels with head axes, else ``None``.

    ``q (..., d, H, d_h)``, ``k (..., d, H_kv, d_h)``, ``v (..., d, H_kv, d_v)``, ``o (..., H, d_v, d_out)``,
    the same leading (layer) axes, and ``H_kv`` dividing ``H``.
    """
    shapes = [tuple(getattr(x, "shape", ())) for x in (q, k, v, o)]
    if min(len(s) for s in shapes) < 3 or len({len(s) for s in shapes}) > 1 or len({s[:-3] for s in shapes}) > 1:
        return None
    (d, heads, d_h), (d_k, kv, d_hk), (d_v, kv_v, d_vh), (heads_o, d_vo, d_out) = (s[-3:] for s in shapes)
    if (d_k, d_hk, d_v, kv_v, heads_o, d_vo) != (d, d_h, d, kv, heads, d_vh) or heads % kv:
        return None
    return HeadAxesCounts(int(heads), int(kv), d_out == d)


def merge_head_axes(kind: str, a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A pair with head axes in its 2-D layout: ``W_Q``, ``W_K`` (and ``W_V``) ``(..., d, H, d_h)`` →
    ``(..., d, H·d_h)``; ``W_O (..., H, d_h, d)`` → ``(..., H·d_h, d)`` (an O/V pair's kernel layout).

    A reshape, not a transpose: column ``h·d_h + j`` of the result is ``[..., h, j]`` of the kernel, which is
    how the 2-D layouts number the heads. Reshape the results back with the stored shapes.
    """
    b2 = b.reshape(*b.shape[:-2], b.shape[-2] * b.shape[-1])
    if kind == "qk":
        return a.reshape(*a.shape[:-2], a.shape[-2] * a.shape[-1]), b2
    return a.reshape(*a.shape[:-3], a.shape[-3] * a.shape[-2], a.shape[-1]), b2


def merged_pair(pair: Any, a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A :class:`~numerics.optimizer.pairs.PairPlan` 's factors in its 2-D layout: head axes merged, or as stored."""
    return merge_head_axes(pair.kind, a, b) if pair.head_axes else (a, b)


def on_merged_heads(direction: Callable, rule: str, w_a: jax.Array, w_b: jax.Array, m_a: jax.Array,
                    m_b: jax.Array, pair: Any, options: Any) -> tuple[jax.Array, jax.Array]:
    """``direction(rule, w_a, w_b, m_a, m_b, pair, options)`` of a pair with head axes, computed on its 2-D
    layout (:func:`merged_pair`) and reshaped back to the stored shapes."""
    da, db = direction(rule, *merged_pair(pair, w_a, w_b), *merged_pair(pair, m_a, m_b),
                       replace(pair, head_axes=False), options)
    return da.reshape(w_a.shape), db.reshape(w_b.shape)


def check_head_axes(where: str, kind: str, names: tuple[str, str], a: Any, b: Any, heads: int,
                    kv_heads: int) -> None:
    """Refuse a pair declared with ``head_axes=True`` whose shapes are not that layout, naming the parameter."""
    want = {"qk": ("(..., d, heads, d_h)", "(..., d, kv_heads, d_h)"),
            "ov": ("(..., heads, d_h, d)", "(..., d, kv_heads, d_h)")}[kind]
    axes = (-2 if kind == "qk" else -3, -2)
    for name, x, layout, axis, count in zip(names, (a, b), want, axes, (heads, kv_heads), strict=True):
        shape = tuple(getattr(x, "shape", ()))
        if len(shape) < 3 or shape[axis] != count:
            raise ValueError(f"{where}: head_axes=True takes {name!r} as {layout} (flax DenseGeneral kernels) with "
                             f"{count} heads on axis {axis}, got shape {shape}; declare a 2-D layout with "
                             f"head_axes=False")
    d_h = a.shape[-2] if kind == "ov" else a.shape[-1]
    if b.shape[-1] != d_h:
        raise ValueError(f"{where}: head widths differ: {names[0]!r} has d_h = {d_h}, {names[1]!r} has "
                         f"d_h = {b.shape[-1]} (shapes {tuple(a.shape)} and {tuple(b.shape)})")


def declared_2d_layout(kind: str, p: Any, names: tuple, a: Any, b: Any, kv: Any) -> tuple[Any, Any, bool]:
    """``(a, b, kernels)``: a declared ``QKPair``/``OVPair`` 's arrays in its 2-D layout (a pair with head axes
    merged, as ``jax.ShapeDtypeStruct`` s, after :func:`check_head_axes`) and whether that layout is the
    transposed one (``kernels``)."""
    where = f"compositional_muon: {kind} pair ({names[0]!r}, {names[1]!r})"
    if not isinstance(p.head_axes, bool):
        raise TypeError(f"{where}: head_axes must be True or False, got {p.head_axes!r}")
    if not p.head_axes:
        return a, b, p.transposed if kind == "qk" else p.kernels
    if kind == "qk" and p.transposed:
        raise ValueError(f"{where}: head_axes=True is the flax kernel layout (..., d, heads, d_h); transposed=True "
                         f"does not apply to it")
    if not all(isinstance(n, int) and n > 0 for n in (p.heads, kv)):
        return a, b, kind == "ov"  # the 2-D check refuses the head counts, naming them
    check_head_axes(where, kind, names, a, b, p.heads, kv)
    merged = jax.eval_shape(lambda x, y: merge_head_axes(kind, x, y), jax.ShapeDtypeStruct(a.shape, a.dtype),
                            jax.ShapeDtypeStruct(b.shape, b.dtype))
    return (*merged, kind == "ov")


def is_variable_value(key: Any) -> bool:
    """Whether a pytree key is the ``.value`` attribute of a flax nnx ``Variable`` (an attribute key ``value``)."""
    return isinstance(key, jax.tree_util.GetAttrKey) and key.name == "value"


#: the equinox attention module's projections, as ``pairs="auto"`` names their blocks
EQUINOX_PROJECTIONS = ("query_proj", "key_proj", "value_proj", "output_proj")


def _is_equinox_attention(x: Any) -> bool:
    """An ``equinox.nn.MultiheadAttention`` (recognised by its module and fields; equinox is not imported)."""
    return (type(x).__name__ == "MultiheadAttention" and type(x).__module__.split(".")[0] == "equinox"
            and isinstance(getattr(x, "num_heads", None), int)
            and all(hasattr(x, name) for name in EQUINOX_PROJECTIONS))


def module_head_counts(params: Any, path_name: Any) -> dict[str, int]:
    """``{path of the module: num_heads}`` of every equinox ``MultiheadAttention`` in ``params`` (a tree of
    modules, e.g. ``eqx.filter(model, eqx.is_array)``); ``path_name`` joins a key path as the optimizer does."""
    found = jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_equinox_attention)[0]
    return {path_name(p): int(x.num_heads) for p, x in found if _is_equinox_attention(x)}


# ---- the 2-D layouts of an attention block ----------------------------------------------------
#: the 2-D layouts ``pairs="auto"`` reads, by ``AutoPairs(layout=...)``: ``(Q/K stored out × in, O/V stored
#: in × out)``, i.e. ``QKPair(transposed=…)`` and ``OVPair(kernels=…)``
LAYOUTS = {"kernel": (False, True), "weight": (True, False), "paper": (False, False)}
#: what each layout means, as the error that asks for one says it
LAYOUT_MEANINGS = {"kernel": "every projection used as x @ W, stored in × out (flax Dense, q = x @ wq, y = o @ wo)",
                   "weight": "every projection used as x @ Wᵀ, stored out × in (PyTorch, equinox Linear)",
                   "paper": "q = x @ wq, k = x @ wk, v = x @ wvᵀ, y = o @ woᵀ (the QKPair/OVPair defaults)"}
#: leaf names that fix the layout: a flax ``Dense`` ``kernel`` is in × out, a PyTorch or equinox ``weight`` out × in
NAMED_LAYOUTS = {"kernel": "kernel", "weight": "weight"}


def _choices() -> str:
    return "; ".join(f"{name!r}: {meaning}" for name, meaning in LAYOUT_MEANINGS.items())


def check_layout(layout: Any) -> None:
    """Refuse a ``layout`` that is not ``None`` or one of :data:`LAYOUTS`, in one line saying what each means."""
    if layout is not None and (not isinstance(layout, str) or layout not in LAYOUTS):
        raise ValueError(f"compositional_muon: AutoPairs(layout={layout!r}) is not a layout; layout= takes "
                         f"{_choices()}")


def _fits(layout: str, shapes: list, heads: int, kv_heads: int | None) -> bool:
    """Whether the block's 2-D shapes ``(q, k, v, o)`` read as ``layout`` with ``heads`` query heads: one model
    width ``d`` (the input of Q, K, V; the output of O when O maps back to it), head widths that divide into the
    heads, ``d_h ≤ d``, and K (V) as wide as ``kv_heads`` heads."""
    qk_t, ov_k = LAYOUTS[layout]
    (q0, q1), (k0, k1), (v0, v1), (o0, o1) = shapes
    (d, w), (d_k, w_k) = ((q1, q0), (k1, k0)) if qk_t else ((q0, q1), (k0, k1))
    if d_k != d or not w or w % heads:
        return False
    d_h = w // heads
    kv = kv_heads if kv_heads is not None else heads * w_k // w
    if kv < 1 or heads % kv or w_k != kv * d_h or d_h > d:
        return False
    (d_v, w_v), (w_o, d_o) = ((v0, v1), (o0, o1)) if ov_k else ((v1, v0), (o1, o0))
    if d_v != d:
        return False
    return d_o != d or (w_o % heads == 0 and w_v == kv * (w_o // heads))  # O/V a pair only when O maps back to d


def block_layout(where: str, leaf: str, layout: str | None, shapes: list, heads: int, kv_heads: int | None,
                 declare: Callable[[str], Any]) -> str:
    """The layout of one 2-D attention block, never guessed: the one its leaf name fixes (:data:`NAMED_LAYOUTS`),
    else the one given (``layout=``), else the one of :data:`LAYOUTS` its shapes read as (``_fits``), when every
    layout that fits declares the same pairs (``declare(layout)``). A square ``W_O`` or ``W_V`` (or ``W_Q``, ``W_K``)
    reads every way, so a block of them is refused, in one line naming ``layout=``; so is a ``layout=`` that its
    leaf name contradicts, and a block that reads as none of them. ``where`` names the block in the errors."""
    named = NAMED_LAYOUTS.get(leaf)
    if named is not None and layout is not None and layout != named:
        raise ValueError(f"compositional_muon: pairs='auto': {where} holds its matrices as {leaf!r}, which is "
                         f"layout={named!r}, but layout={layout!r} was given; declare the block's pairs "
                         f"(QKPair/OVPair) if its {leaf!r} matrices are stored the other way")
    if named is not None or layout is not None:
        return named or layout
    fitting = [name for name in LAYOUTS if _fits(name, shapes, heads, kv_heads)]
    if not fitting:
        raise ValueError(f"compositional_muon: pairs='auto': {where} with shapes {[tuple(s) for s in shapes]} reads "
                         f"as none of the layouts {list(LAYOUTS)} with heads={heads}"
                         f"{'' if kv_heads is None else f', kv_heads={kv_heads}'}; declare its pairs (QKPair/OVPair)")
    if len({repr(declare(name)) for name in fitting}) > 1:
        raise ValueError(f"compositional_muon: pairs='auto' cannot tell how {where} is stored: its shapes "
                         f"{[tuple(s) for s in shapes]} read as layout={' and as layout='.join(map(repr, fitting))}, "
                         f"which pair other rows and columns (a square matrix reads both ways); pass "
                         f"pairs=numerics.optimizer.AutoPairs(heads=H, layout=L) with L {_choices()}")
    return fitting[0]
