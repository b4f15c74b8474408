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

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp

from foundation.compute.argcheck import check_whole
from numerics.emitted import gqa as _gqa

from .framework_pairs import (
    EQUINOX_PROJECTIONS,
    LAYOUTS,
    NAMED_LAYOUTS,
    block_layout,
    check_layout,
    declared_2d_layout,
    head_axes_counts,
    is_variable_value,
    module_head_counts,
)
from .groups import (
    GROUP_DECLARATIONS,
    LoRAPair,
    LoRAPlan,
    MLAPair,
    MLAPlan,
    auto_lora_pairs,
    auto_mla_pairs,
    group_from_data,
    plan_group,
)


class QKPair(NamedTuple):
    """A query/key pair: ``query`` and ``key`` are parameter paths (``"layers/0/attn/wq"``).

    Stored layouts ``W_Q (..., d, heads·d_h)`` and ``W_K (..., d, kv_heads·d_h)`` (``q = x @ W_Q``,
    which is also a flax ``Dense`` kernel); leading axes (stacked layers) are batched. With
    ``transposed=True`` both are stored as ``W @ x`` weights (PyTorch-style, equinox ``Linear``):
    ``W_Q (..., heads·d_h, d)`` and ``W_K (..., kv_heads·d_h, d)``. With ``head_axes=True`` both are
    ``DenseGeneral`` kernels with separate head axes (flax linen ``MultiHeadDotProductAttention``, flax nnx
    ``MultiHeadAttention``): ``W_Q (..., d, heads, d_h)`` and ``W_K (..., d, kv_heads, d_h)``.
    """

    query: str
    key: str
    heads: int
    kv_heads: int | None = None
    transposed: bool = False
    head_axes: bool = False


class OVPair(NamedTuple):
    """An output/value pair of parameter paths.

    Stored layouts ``W_O (..., d, heads·d_h)`` and ``W_V (..., kv_heads·d_h, d)`` (``v = x @ W_Vᵀ``,
    ``y = o @ W_Oᵀ``). With ``kernels=True`` both are stored as ``x @ W`` kernels (flax ``Dense``):
    ``W_O (..., heads·d_h, d)`` and ``W_V (..., d, kv_heads·d_h)``. With ``head_axes=True`` both are flax
    ``DenseGeneral`` kernels with head axes: ``W_O (..., heads, d_h, d)`` and ``W_V (..., d, kv_heads, d_h)``
    (``kernels`` is then not read).
    """

    output: str
    value: str
    heads: int
    kv_heads: int | None = None
    kernels: bool = False
    head_axes: bool = False


#: the ``pairs`` argument of :func:`~numerics.optimizer.compositional_muon` as a function:
#: ``params -> [QKPair | OVPair | LoRAPair | MLAPair, ...]`` (a list, ``"auto"`` or :class:`AutoPairs` also do)
Pairs = Callable[[Any], list]


@dataclass(frozen=True)
class PairPlan:
    """One declared pair, resolved and checked against the params.

    ``kind``: ``"qk"`` or ``"ov"``; ``first``/``second``: the paths of ``W_Q``/``W_K`` (``W_O``/``W_V``);
    ``kv_heads``: the declared kv heads (``heads`` when not given); ``head_dim``: ``d_h``;
    ``kernels``: the pair is stored transposed from its default layout (an OV pair as flax kernels,
    a QK pair as ``W @ x`` weights); ``head_axes``: stored with separate head axes (flax ``DenseGeneral``
    kernels), whose reshape (:func:`~numerics.optimizer.framework_pairs.merge_head_axes`) is the 2-D layout
    that ``kernels`` describes.
    """

    kind: Literal["qk", "ov"]
    first: str
    second: str
    heads: int
    kv_heads: int
    head_dim: int
    kernels: bool
    head_axes: bool = False

    @property
    def members(self) -> tuple[str, str]:
        return (self.first, self.second)

    @property
    def label(self) -> str:
        return f"{self.kind} pair ({self.first!r}, {self.second!r})"


@dataclass(frozen=True)
class Plan:
    """Resolved declarations in declaration order: attention pairs (:class:`PairPlan`), LoRA pairs and MLA blocks
    (``groups``: :class:`~numerics.optimizer.groups.LoRAPlan`, :class:`~numerics.optimizer.groups.MLAPlan`), and
    the set of their member paths."""

    pairs: tuple[PairPlan, ...]
    members: frozenset[str]
    groups: tuple[LoRAPlan | MLAPlan, ...] = ()

    @property
    def records(self) -> tuple[PairPlan | LoRAPlan | MLAPlan, ...]:
        """Every resolved declaration: the attention pairs, then the groups."""
        return (*self.pairs, *self.groups)


def path_name(path) -> str:
    """``"a/b/0/c"`` for a pytree key path (dict keys, sequence indices, attribute names).

    A final ``.value`` attribute is dropped: it is the array of a flax nnx ``Variable``, so ``nnx.state(model)``
    (which ``nnx.Optimizer`` initializes from) and its pure arrays (which it updates with) name a leaf alike.
    """
    if len(path) > 1 and is_variable_value(path[-1]):
        path = path[:-1]
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def _unorderable_keys(tree, path=()) -> tuple[tuple, list] | None:
    """``(path, keys)`` of the first dict (in a tree of dicts, lists and tuples) whose keys cannot be sorted."""
    if isinstance(tree, dict):
        try:
            sorted(tree)
        except TypeError:
            return path, list(tree)
        children = tree.items()
    elif isinstance(tree, (list, tuple)):
        children = enumerate(tree)
    else:
        return None
    for key, child in children:
        found = _unorderable_keys(child, (*path, key))
        if found is not None:
            return found
    return None


def _flatten_with_path(tree) -> list:
    """``jax.tree_util.tree_flatten_with_path(tree)[0]``; a dict whose keys cannot be sorted (``0`` and
    ``"0"``: pytrees sort dict keys) is refused naming the keys instead of JAX's comparator error."""
    try:
        return jax.tree_util.tree_flatten_with_path(tree)[0]
    except (ValueError, TypeError):
        found = _unorderable_keys(tree)
        if found is None:
            raise
        path, keys = found
        where = "".join(f"[{k!r}]" for k in path) or "the top level"
        raise ValueError(f"compositional_muon: the dict at {where} has keys {keys!r} of types that cannot be ordered "
                         f"(JAX sorts a pytree's dict keys); use keys of one type, e.g. strings") from None


def named_leaves(tree) -> dict:
    """``{path name: leaf}`` of a pytree (masked leaves of ``optax.partition`` have none).

    Raises ``ValueError`` naming both leaves when two paths join to one name (``{"a/b": x}`` and
    ``{"a": {"b": y}}`` are both ``"a/b"``), and naming the keys when a dict's keys cannot be
    ordered (``0`` and ``"0"``).
    """
    out, paths = {}, {}
    for p, x in _flatten_with_path(tree):
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
    heads = check_whole(where, "heads", heads)
    kv_heads = check_whole(where, "kv_heads", kv_heads)
    if heads % kv_heads:
        raise ValueError(f"{where}: kv_heads = {kv_heads!r} must be a positive int dividing heads = {heads}")
    if kind == "qk":
        (d_a, width_a), (d_b, width_b) = (a.shape[-2:][::-1], b.shape[-2:][::-1]) if kernels else (a.shape[-2:],
                                                                                                    b.shape[-2:])
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


#: every declaration ``pairs`` may hold
DECLARATIONS = (QKPair, OVPair, *GROUP_DECLARATIONS)


def pair_from_data(item: Any) -> QKPair | OVPair | LoRAPair | MLAPair:
    """A declaration, or one written as a dict (a config file's): ``{"query": …, "key": …, "heads": …}`` is a
    ``QKPair``, ``{"output": …, "value": …, "heads": …}`` an ``OVPair`` (optional ``kv_heads``, ``kernels``),
    ``{"b": …, "a": …}`` a ``LoRAPair`` and ``{"wq_a": …, "wq_b": …, …, "heads": …, "d_h": …}`` an ``MLAPair``."""
    if isinstance(item, DECLARATIONS):
        return item
    if isinstance(item, Mapping):
        kind = QKPair if "query" in item or "key" in item else OVPair if "output" in item or "value" in item else \
            group_from_data(item)
        if kind is not None:
            unknown = sorted(set(item) - set(kind._fields), key=str)
            if unknown:
                raise TypeError(f"compositional_muon: the {kind.__name__} declaration {dict(item)!r} has unknown "
                                f"fields {unknown}; its fields are {kind._fields}")
            try:
                return kind(**item)
            except TypeError:
                raise TypeError(f"compositional_muon: the {kind.__name__} declaration {dict(item)!r} needs the "
                                f"fields {tuple(f for f in kind._fields if f not in kind._field_defaults)}") from None
    raise TypeError(f"compositional_muon: pairs must be a function params -> [QKPair | OVPair | LoRAPair | MLAPair, "
                    f"...], a list of them (or of dicts with their fields), 'auto' or AutoPairs(heads=H) (found from "
                    f"the parameter names), or None (no attention pairs), got {item!r}")


def pair_declaration(pairs: Any) -> Pairs | None:
    """``pairs`` as a function ``params -> [QKPair | OVPair | LoRAPair | MLAPair, ...]`` (or ``None``: no pairs).

    Takes that function; the declarations themselves as data: a list or tuple of them or of dicts with
    their fields (:func:`pair_from_data`), or one of them; or ``"auto"`` (:func:`auto_pairs`, found from
    the parameter names). Anything else raises ``TypeError`` saying what ``pairs`` must be.
    Data stays static under ``optax.inject_hyperparams`` (which takes every callable for a schedule).
    """
    if pairs is None or callable(pairs):
        return pairs
    if isinstance(pairs, AutoPairs):
        return pairs.declare
    if isinstance(pairs, str):
        if pairs == "auto":
            return AutoPairs().declare
        pair_from_data(pairs)  # raises, saying what pairs may be
    if isinstance(pairs, (*DECLARATIONS, Mapping)):
        pairs = [pairs]
    if not isinstance(pairs, (list, tuple)):
        pair_from_data(pairs)  # raises, saying what pairs may be
    fixed = [pair_from_data(p) for p in pairs]
    return lambda params: fixed


def _declared(pairs: Pairs, params: Any) -> list:
    """The user's declaration called on ``params``, as a list of declarations (dicts read as data)."""
    declared = pairs(params)
    if isinstance(declared, (*DECLARATIONS, Mapping)):
        declared = [declared]
    if not isinstance(declared, (list, tuple)):
        raise TypeError(f"compositional_muon: pairs(params) must return a list of QKPair/OVPair, got {declared!r} "
                        f"(LoRAPair and MLAPair items are taken too)")
    return [pair_from_data(p) if isinstance(p, Mapping) else p for p in declared]


def _kind_and_names(p: Any) -> tuple[str, tuple]:
    """``(kind, member paths)`` of a declaration; ``TypeError`` for anything else."""
    if isinstance(p, QKPair):
        return "qk", (p.query, p.key)
    if isinstance(p, OVPair):
        return "ov", (p.output, p.value)
    if isinstance(p, LoRAPair):
        return "LoRA", (p.b, p.a)
    if isinstance(p, MLAPair):
        return "MLA", p.members
    raise TypeError(f"compositional_muon: pairs must return QKPair/OVPair/LoRAPair/MLAPair items, got {p!r}")


def _check_names(kind: str, p: Any, names: tuple, leaves: dict, members: set) -> None:
    """Every member is a parameter path, declared once; adds them to ``members``."""
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"compositional_muon: the {kind} pair {p!r} names {name!r}; parameters are named "
                            f"by '/'-joined path strings like {next(iter(leaves), '')!r}")
        if name not in leaves:
            near = sorted(n for n in leaves if n.split("/")[-1] == str(name).split("/")[-1])[:3]
            hint = f"; parameters with that last name: {near}" if near else \
                f"; parameters are named like {next(iter(leaves), '')!r}"
            raise ValueError(f"compositional_muon: the {kind} pair names {name!r}, which is not a parameter{hint}")
        if name in members:
            raise ValueError(f"compositional_muon: parameter {name!r} is declared in two pairs")
        members.add(name)


def plan_pairs(pairs: Pairs | None, params: Any) -> Plan:
    """Call the user's declaration on ``params`` and check every pair against the params.

    Examples:
      >>> import jax.numpy as jnp
      >>> from numerics.optimizer import QKPair, plan_pairs
      >>> params = {"wq": jnp.ones((8, 4 * 2)), "wk": jnp.ones((8, 2 * 2))}  # d = 8, d_h = 2
      >>> pair = plan_pairs([QKPair("wq", "wk", heads=4, kv_heads=2)], params).pairs[0]
      >>> pair.kind, pair.heads, pair.kv_heads, pair.head_dim
      ('qk', 4, 2, 2)
    """
    leaves = named_leaves(params)  # also refuses two parameters with one path name
    pairs = pair_declaration(pairs)
    if pairs is None:
        return Plan((), frozenset())
    out, groups, members = [], [], set()
    for p in _declared(pairs, params):
        kind, names = _kind_and_names(p)
        _check_names(kind, p, names, leaves, members)
        if kind not in ("qk", "ov"):
            groups.append(plan_group(p, leaves))
            continue
        kv = p.heads if p.kv_heads is None else p.kv_heads
        a, b, kernels = declared_2d_layout(kind, p, names, leaves[names[0]], leaves[names[1]], kv)
        head_dim = _check_pair_shapes(kind, *names, a, b, p.heads, kv, kernels)
        out.append(PairPlan(kind=kind, first=names[0], second=names[1], heads=p.heads, kv_heads=kv,
                            head_dim=head_dim, kernels=kernels, head_axes=p.head_axes))
    return Plan(tuple(out), frozenset(members), tuple(groups))


def adamw_selector(adamw_params: Any) -> Callable[[str, Any], bool] | None:
    """``adamw_params`` as ``(path, array) -> bool``: a function, or data: a path pattern or a list of them.

    Patterns are ``fnmatch`` patterns on the whole ``"/"``-joined path (``"embed"``, ``"*/embedding"``,
    ``"head/*"``); a matrix whose path matches goes to AdamW. ``None``: only parameters with fewer than
    2 axes do (the default).
    """
    if adamw_params is None or callable(adamw_params):
        return adamw_params
    patterns = [adamw_params] if isinstance(adamw_params, str) else adamw_params
    if not isinstance(patterns, (list, tuple)) or not all(isinstance(q, str) for q in patterns):
        raise TypeError(f"compositional_muon: adamw_params must be a function (path, array) -> bool, a path "
                        f"pattern or a list of them (fnmatch, e.g. ['embed', '*/embedding']), got {adamw_params!r}")
    patterns = tuple(patterns)
    return lambda path, x: any(fnmatch.fnmatchcase(path, q) for q in patterns)


# ---- pairs found from the parameter names ----------------------------------------------------
#: sibling names of (query, key, value, output) projections, as the common model libraries store them
AUTO_NAMES = (("q_proj", "k_proj", "v_proj", "o_proj"), ("wq", "wk", "wv", "wo"), ("query", "key", "value", "out"),
              ("q", "k", "v", "o"), ("W_Q", "W_K", "W_V", "W_O"), ("q_lin", "k_lin", "v_lin", "out_lin"),
              EQUINOX_PROJECTIONS)
#: names under a projection that hold its matrix (flax ``Dense``: kernel; PyTorch-style and equinox: weight)
AUTO_LEAVES = ("kernel", "weight", "w")


@dataclass(frozen=True)
class AutoLayout:
    """How :func:`auto_pairs` reads one attention block: the paths of its four projections' matrices."""

    prefix: str
    names: tuple[str, str, str, str]
    paths: tuple[str, str, str, str]


def auto_layouts(leaves: dict) -> list[AutoLayout]:
    """Every attention block: a parent path with children named like one row of :data:`AUTO_NAMES`."""
    found = {}
    for path in leaves:
        parts = path.split("/")
        for i in range(len(parts)):
            for names in AUTO_NAMES:
                if parts[i] != names[0]:
                    continue
                prefix, rest = "/".join(parts[:i]), "/".join(parts[i + 1:])
                paths = tuple("/".join(filter(None, (prefix, n, rest))) for n in names)
                if all(q in leaves for q in paths) and (not rest or rest in AUTO_LEAVES):
                    found.setdefault(paths, AutoLayout(prefix, names, paths))
    return list(found.values())


@dataclass(frozen=True)
class AutoPairs:
    """``pairs=AutoPairs(heads=H)``: pairs found from the parameter names (:func:`auto_pairs`), as data.

    Data, not a function, so that ``optax.inject_hyperparams`` keeps it static. ``pairs="auto"`` is
    ``AutoPairs()``, which works when every block's head count can be read from its shapes. ``layout``
    (``"kernel"``, ``"weight"`` or ``"paper"``, :data:`~numerics.optimizer.framework_pairs.LAYOUTS`) says how the
    blocks of plain 2-D matrices are stored, which a square block needs. MLA blocks (DeepSeek names) take ``heads``
    and ``qk_nope_head_dim`` (the config's ``num_attention_heads`` and ``qk_nope_head_dim``).
    """

    heads: int | None = None
    kv_heads: int | None = None
    qk_nope_head_dim: int | None = None
    layout: str | None = None

    def __post_init__(self) -> None:
        check_layout(self.layout)

    def declare(self, params: Any) -> list:
        """The pairs of ``params`` (:func:`auto_pairs`)."""
        return auto_pairs(params, self.heads, self.kv_heads, self.qk_nope_head_dim, self.layout)


def auto_pairs(params: Any, heads: int | None = None, kv_heads: int | None = None,
               qk_nope_head_dim: int | None = None, layout: str | None = None) -> list:
    """Query/key and output/value pairs found from the parameter names (``pairs="auto"``).

    An attention block is a parent path whose children are named like ``q_proj/k_proj/v_proj/o_proj``,
    ``wq/wk/wv/wo``, ``query/key/value/out`` (flax), ``query_proj/key_proj/value_proj/output_proj``
    (equinox), ``q/k/v/o`` or ``W_Q/W_K/W_V/W_O``, each a matrix or a module holding one as ``kernel``
    (flax ``Dense``) or ``weight`` (equinox, PyTorch-style).

    * Head axes (flax linen ``MultiHeadDotProductAttention``, flax nnx ``MultiHeadAttention``:
      ``DenseGeneral`` kernels ``query (..., d, H, d_h)``, ``key``/``value (..., d, H_kv, d_h)``,
      ``out (..., H, d_h, d)``) give the head counts; the pairs are declared ``head_axes=True``. A block whose
      ``out`` maps to another width than its input (``out_features != in_features``) gets its Q/K pair only.
    * 2-D layouts are never guessed (:func:`~numerics.optimizer.framework_pairs.block_layout`): a leaf name fixes
      one (``kernel``: ``layout="kernel"``, every projection ``x @ W``, in × out; ``weight``: ``layout="weight"``,
      ``W @ x``, out × in), else ``layout`` does (``"paper"``: ``W_Q``, ``W_K`` ``(d, H·d_h)`` and ``W_O (d, H·d_h)``,
      ``W_V (H·d_h, d)``, the declarations' defaults), else the shapes do when they read as one layout only
      (grouped key heads, or ``W_V`` shaped like ``W_Qᵀ``). A block whose shapes read two ways (square ``W_O``,
      ``W_V``) is refused, naming ``layout=``. The head count is read from an equinox ``MultiheadAttention``
      module in the tree (its static ``num_heads``); otherwise give ``heads`` (and ``kv_heads``; by default the
      ratio of the key and query widths) with ``pairs=AutoPairs(heads=H)``, or the block is refused, naming it.

    A block that reads both ways (head axes, or a stack of 2-D matrices) is refused naming it, and so is a
    given head count that its head axes contradict. LoRA adapters are found too, without a head count:
    sibling factors named ``lora_A``/``lora_B`` (peft) or ``lora_a``/``lora_b`` (flax nnx) become a
    :class:`~numerics.optimizer.groups.LoRAPair` (:func:`~numerics.optimizer.groups.auto_lora_pairs`). Multi-head
    latent attention blocks are found by their DeepSeek names (HF ``q_a_proj``/``q_b_proj``/``kv_a_proj_with_mqa``/
    ``kv_b_proj``/``o_proj``, ``q_proj`` without query compression; the reference code's ``wq_a``/``wq_b``/``wkv_a``/
    ``wkv_b``/``wo``/``wq``) with ``heads`` and ``qk_nope_head_dim`` given, and refused naming them otherwise
    (:func:`~numerics.optimizer.groups.auto_mla_pairs`). :func:`~numerics.optimizer.alias.describe_pairs` prints what
    was paired and where every other parameter goes.
    """
    check_layout(layout)
    leaves = named_leaves(params)
    module_heads = module_head_counts(params, path_name)
    out: list = auto_lora_pairs(leaves) + auto_mla_pairs(leaves, heads, qk_nope_head_dim, AUTO_LEAVES)
    for block in auto_layouts(leaves):
        arrays = [leaves[q] for q in block.paths]
        if any(getattr(x, "ndim", 0) < 2 for x in arrays):
            continue  # vectors: not an attention block's matrices
        counts = head_axes_counts(*arrays)
        flat = len({x.shape[:-2] for x in arrays}) == 1  # readable as (stacks of) 2-D matrices
        if counts is not None and flat:
            raise ValueError(f"compositional_muon: pairs='auto' cannot tell how the attention block "
                             f"{block.prefix!r} is stored: shapes {[tuple(x.shape) for x in arrays]} read both "
                             f"as kernels with head axes (d, H, d_h) and as stacked 2-D matrices; declare its "
                             f"pairs (QKPair/OVPair, head_axes=True for the former)")
        if counts is not None:
            out += _head_axes_block(block, counts, heads, kv_heads)
        elif flat:
            out += _flat_block(block, arrays, module_heads.get(block.prefix), heads, kv_heads, layout)
    return out


def _head_axes_block(layout: AutoLayout, counts: Any, heads: int | None, kv_heads: int | None) -> list:
    """The pairs of a block stored with head axes (flax ``DenseGeneral`` kernels)."""
    for name, given, read in (("heads", heads, counts.heads), ("kv_heads", kv_heads, counts.kv_heads)):
        if given is not None and given != read:
            raise ValueError(f"compositional_muon: pairs='auto' found the attention block {layout.prefix!r} with "
                             f"{read} {name} on its head axes, but {name}={given} was given; AutoPairs() reads "
                             f"the head counts of kernels with head axes itself")
    q, k, v, o = layout.paths
    out: list = [QKPair(q, k, counts.heads, counts.kv_heads, head_axes=True)]
    if counts.square_ov:  # O/V a pair only when out maps back to the input width
        out.append(OVPair(o, v, counts.heads, counts.kv_heads, head_axes=True))
    return out


def _block_heads(layout: AutoLayout, read: int | None, heads: int | None, width: int) -> int:
    """The head count of a 2-D block (query width ``width``): its equinox module's ``num_heads``, or the one given."""
    if read is not None and heads is not None and read != heads:
        raise ValueError(f"compositional_muon: pairs='auto': the attention module {layout.prefix!r} has "
                         f"num_heads = {read}, but heads={heads} was given")
    h = read if read is not None else heads
    if h is None:
        raise ValueError(f"compositional_muon: pairs='auto' found the attention block {layout.prefix!r} "
                         f"({'/'.join(layout.names)}, width {width}) but its head count is not in "
                         f"its 2-D layout; pass pairs=numerics.optimizer.AutoPairs(heads=H) (and kv_heads for "
                         f"grouped-query attention)")
    return h


def _flat_block(layout: AutoLayout, arrays: list, read: int | None, heads: int | None, kv_heads: int | None,
                given: str | None) -> list:
    """The pairs of a block stored as 2-D matrices (stacked over leading axes), in the layout
    :func:`~numerics.optimizer.framework_pairs.block_layout` finds (never guessed: a square block needs
    ``layout=`` or a leaf name that fixes it)."""
    shapes = [tuple(x.shape[-2:]) for x in arrays]
    leaf = layout.paths[0].split("/")[-1]
    first = NAMED_LAYOUTS.get(leaf) or given or "kernel"
    q, k, v, o = layout.paths
    h = _block_heads(layout, read, heads, shapes[0][0] if LAYOUTS[first][0] else shapes[0][1])

    def declare(name: str) -> list:
        qk_t, ov_k = LAYOUTS[name]
        (d, width), kv_width = shapes[0][::-1] if qk_t else shapes[0], shapes[1][0 if qk_t else 1]
        kv = kv_heads if kv_heads is not None else h * kv_width // width if width else h
        qk = QKPair(q, k, h, kv, transposed=qk_t)
        return [qk] if d not in shapes[3] else [qk, OVPair(o, v, h, kv, kernels=ov_k)]  # O to another width: Q/K only

    where = f"the attention block {layout.prefix!r} ({'/'.join(layout.names)})"
    return declare(block_layout(where, leaf, given, shapes, h, kv_heads, declare))


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
        return (a.mT, b.mT) if kernels else (a, b)
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
