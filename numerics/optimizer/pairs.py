"""Pair declarations: which parameters form attention pairs, checked against the params.

A query/key pair is the per-head product ``M_h = W_{Q,h} W_{K,h}ᵀ``, an output/value pair
``M_h = W_{O,h} W_{V,h}``; with ``kv_heads < heads`` a key (value) head ``K_g`` is shared by the group
``g`` of ``G = heads/kv_heads`` consecutive query (output) heads. Parameters are named by their
``"/"``-joined pytree paths (:func:`path_name`); :func:`plan_pairs` resolves a declaration into a
:class:`Plan` of :class:`PairPlan` records (paths, heads, kv heads, head dimension ``d_h``, layout).
The layout helpers here move a pair between its stored layouts and the per-head / per-group factors
``(..., H, d, d_h)`` and ``(Q̄_g, K_g)`` that the rules and the gauge act on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp

from numerics.emitted import gqa as _gqa


class QKPair(NamedTuple):
    """A query/key pair: ``query`` and ``key`` are parameter paths (``"layers/0/attn/wq"``).

    Stored layouts ``W_Q (..., d, heads·d_h)`` and ``W_K (..., d, kv_heads·d_h)`` (``q = x @ W_Q``,
    which is also a flax ``Dense`` kernel); leading axes (stacked layers) are batched.
    """

    query: str
    key: str
    heads: int
    kv_heads: int | None = None


class OVPair(NamedTuple):
    """An output/value pair of parameter paths.

    Stored layouts ``W_O (..., d, heads·d_h)`` and ``W_V (..., kv_heads·d_h, d)`` (``v = x @ W_Vᵀ``,
    ``y = o @ W_Oᵀ``). With ``kernels=True`` both are stored as ``x @ W`` kernels (flax ``Dense``):
    ``W_O (..., heads·d_h, d)`` and ``W_V (..., d, kv_heads·d_h)``.
    """

    output: str
    value: str
    heads: int
    kv_heads: int | None = None
    kernels: bool = False


Pairs = Callable[[Any], list]


@dataclass(frozen=True)
class PairPlan:
    """One declared pair, resolved and checked against the params.

    ``kind``: ``"qk"`` or ``"ov"``; ``first``/``second``: the paths of ``W_Q``/``W_K`` (``W_O``/``W_V``);
    ``kv_heads``: the declared kv heads (``heads`` when not given); ``head_dim``: ``d_h``;
    ``kernels``: an OV pair stored as flax kernels.
    """

    kind: Literal["qk", "ov"]
    first: str
    second: str
    heads: int
    kv_heads: int
    head_dim: int
    kernels: bool


@dataclass(frozen=True)
class Plan:
    """Resolved pairs (:class:`PairPlan` in declaration order) and the set of their member paths."""

    pairs: tuple[PairPlan, ...]
    members: frozenset[str]


def path_name(path) -> str:
    """``"a/b/0/c"`` for a pytree key path (dict keys, sequence indices, attribute names)."""
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def named_leaves(tree) -> dict:
    """``{path name: leaf}`` of a pytree (masked leaves of ``optax.partition`` have none).

    Raises ``ValueError`` naming both leaves when two paths join to one name (``{"a/b": x}`` and
    ``{"a": {"b": y}}`` are both ``"a/b"``; so are the keys ``0`` and ``"0"``).
    """
    out, paths = {}, {}
    for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = path_name(p)
        if name in out:
            raise ValueError(f"compositional_muon: the parameters at {jax.tree_util.keystr(paths[name])} and "
                             f"{jax.tree_util.keystr(p)} have the same path name {name!r} (paths are '/'-joined "
                             f"keys); rename one of the keys")
        out[name], paths[name] = x, p
    return out


def _check_pair_shapes(kind, a_name, b_name, a, b, heads, kv_heads, kernels) -> int:
    """Shapes of one declared pair; returns the head dimension. Raises naming the parameter."""
    where = f"compositional_muon: {kind} pair ({a_name!r}, {b_name!r})"
    for name, x in ((a_name, a), (b_name, b)):
        if getattr(x, "ndim", 0) < 2:
            raise ValueError(f"{where}: {name!r} must be a matrix (..., rows, cols), got shape "
                             f"{tuple(getattr(x, 'shape', ()))}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{where}: {name!r} must be real floating point, got dtype {x.dtype}")
    if a.dtype != b.dtype:
        raise TypeError(f"{where}: {a_name!r} is {a.dtype} but {b_name!r} is {b.dtype}; store both factors of a "
                        f"pair in one dtype")
    if not isinstance(heads, int) or heads < 1:
        raise ValueError(f"{where}: heads must be a positive int, got {heads!r}")
    if not isinstance(kv_heads, int) or kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"{where}: kv_heads = {kv_heads!r} must be a positive int dividing heads = {heads}")
    if kind == "qk":
        d_a, width_a, d_b, width_b = a.shape[-2], a.shape[-1], b.shape[-2], b.shape[-1]
    else:  # o: (d, H·d_h) and v: (H_kv·d_h, d); transposed as kernels
        (width_a, d_a), (d_b, width_b) = (a.shape[-2:], b.shape[-2:]) if kernels else (a.shape[-2:][::-1],
                                                                                          b.shape[-2:][::-1])
    if width_a % heads:
        raise ValueError(f"{where}: {a_name!r} has {width_a} head columns, not divisible into heads = {heads}")
    head_dim = width_a // heads
    if width_b != kv_heads * head_dim:
        raise ValueError(f"{where}: {b_name!r} has {width_b} head columns, expected kv_heads·d_h = "
                         f"{kv_heads}·{head_dim} = {kv_heads * head_dim}")
    if d_a != d_b:
        raise ValueError(f"{where}: model widths differ: {a_name!r} has d = {d_a}, {b_name!r} has d = {d_b}")
    if a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"{where}: leading (layer) axes differ: {a.shape[:-2]} and {b.shape[:-2]}")
    if head_dim > d_a:
        raise ValueError(f"{where}: head dimension {head_dim} exceeds the model width {d_a}")
    return head_dim


def pair_declaration(pairs: Pairs | QKPair | OVPair | list | tuple | None) -> Pairs | None:
    """``pairs`` as a function ``params -> [QKPair | OVPair, ...]`` (or ``None``: no pairs).

    Takes that function, or the pairs themselves: a list or tuple of ``QKPair``/``OVPair``, or one.
    Anything else raises ``TypeError`` saying what ``pairs`` must be.
    """
    if pairs is None or callable(pairs):
        return pairs
    fixed = [pairs] if isinstance(pairs, (QKPair, OVPair)) else pairs
    if isinstance(fixed, (list, tuple)) and all(isinstance(p, (QKPair, OVPair)) for p in fixed):
        fixed = list(fixed)
        return lambda params: fixed
    raise TypeError(f"compositional_muon: pairs must be a function params -> [QKPair | OVPair, ...], a list of "
                    f"QKPair/OVPair, or None (no attention pairs), got {pairs!r}")


def plan_pairs(pairs: Pairs | None, params: Any) -> Plan:
    """Call the user's declaration on ``params`` and check every pair against the params."""
    leaves = named_leaves(params)  # also refuses two parameters with one path name
    pairs = pair_declaration(pairs)
    if pairs is None:
        return Plan((), frozenset())
    declared = pairs(params)
    if isinstance(declared, (QKPair, OVPair)):
        declared = [declared]
    if not isinstance(declared, (list, tuple)):
        raise TypeError(f"compositional_muon: pairs(params) must return a list of QKPair/OVPair, got {declared!r}")
    out, members = [], set()
    for p in declared:
        if isinstance(p, QKPair):
            kind, names, kernels = "qk", (p.query, p.key), False
        elif isinstance(p, OVPair):
            kind, names, kernels = "ov", (p.output, p.value), p.kernels
        else:
            raise TypeError(f"compositional_muon: pairs must return QKPair/OVPair items, got {p!r}")
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"compositional_muon: the {kind} pair {p!r} names {name!r}; parameters are named "
                                f"by '/'-joined path strings like {next(iter(leaves), '')!r}")
            if name not in leaves:
                near = sorted(n for n in leaves if n.split("/")[-1] == str(name).split("/")[-1])[:3]
                hint = f"; parameters with that last name: {near}" if near else \
                    f"; parameters are named like {next(iter(leaves), '')!r}"
                raise ValueError(f"compositional_muon: the {kind} pair names {name!r}, which is not a parameter"
                                 f"{hint}")
            if name in members:
                raise ValueError(f"compositional_muon: parameter {name!r} is declared in two pairs")
            members.add(name)
        kv = p.heads if p.kv_heads is None else p.kv_heads
        head_dim = _check_pair_shapes(kind, *names, leaves[names[0]], leaves[names[1]], p.heads, kv, kernels)
        out.append(PairPlan(kind=kind, first=names[0], second=names[1], heads=p.heads, kv_heads=kv,
                            head_dim=head_dim, kernels=kernels))
    return Plan(tuple(out), frozenset(members))


# ---- layouts of one pair --------------------------------------------------------------------
def split_heads(w: jax.Array, head_dim: int) -> jax.Array:
    """``(..., d, H·d_h)`` → per-head factors ``(..., H, d, d_h)`` (the emitted ``split_heads``)."""
    return _gqa.split_heads(w, head_dim)


def merge_heads(w: jax.Array) -> jax.Array:
    """Inverse of :func:`split_heads`: ``(..., H, d, d_h)`` → ``(..., d, H·d_h)``."""
    return _gqa.merge_heads(w)


def as_qk(kind: str, a: jax.Array, b: jax.Array, kernels: bool) -> tuple[jax.Array, jax.Array]:
    """The pair as ``(W_Q-like, W_K-like)`` factors of ``M = A Bᵀ``, both ``(..., d, ·)``.

    An involution: applied to the result it gives back the stored layouts.
    """
    if kind == "qk":
        return a, b
    return (a.mT, b) if kernels else (a, b.mT)


def group_stack(x: jax.Array, kv_heads: int) -> jax.Array:
    """Per-head factors ``(..., H, d, d_h)`` → the groups' stacked factors ``(..., H_kv, G·d, d_h)``.

    Query head ``h`` belongs to group ``h // G`` (consecutive grouping, as in ``gqa_layout``); the
    group's heads are stacked row-wise, ``Q̄_g = [W_{Q,gG}; …; W_{Q,gG+G−1}]``.
    """
    *lead, heads, d, d_h = x.shape
    return x.reshape(*lead, kv_heads, (heads // kv_heads) * d, d_h)


def group_unstack(x: jax.Array, heads: int) -> jax.Array:
    """Inverse of :func:`group_stack`: ``(..., H_kv, G·d, d_h)`` → ``(..., H, d, d_h)``."""
    *lead, kv_heads, rows, d_h = x.shape
    return x.reshape(*lead, heads, rows * kv_heads // heads, d_h)


def grouped_pair(kind: str, w_a: jax.Array, w_b: jax.Array, heads: int, kv_heads: int, head_dim: int,
                 kernels: bool) -> tuple[jax.Array, jax.Array]:
    """``(Q̄, K)``: the pair's gauge-sharing factors, ``(..., H_kv, G·d, d_h)`` and ``(..., H_kv, d, d_h)``.

    A shared head ``K_g`` is gauged with its whole group: ``(W_{Q,h} R⁻ᵀ for h in g, K_g R)`` keeps
    every ``W_{Q,h} K_gᵀ``, which is the single-head gauge of the stacked pair ``(Q̄_g, K_g)``
    (``Q̄_g K_gᵀ`` stacks the group's products). With ``kv_heads = heads`` it is head by head.
    """
    wa, wb = as_qk(kind, w_a, w_b, kernels)
    return group_stack(split_heads(wa, head_dim), kv_heads), split_heads(wb, head_dim)


def ungrouped_pair(kind: str, bar_a: jax.Array, b: jax.Array, heads: int,
                   kernels: bool) -> tuple[jax.Array, jax.Array]:
    """The stored layouts of a pair given as stacked groups (inverse of :func:`grouped_pair`)."""
    return as_qk(kind, merge_heads(group_unstack(bar_a, heads)), merge_heads(b), kernels)
