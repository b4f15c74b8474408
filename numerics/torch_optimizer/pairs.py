"""Attention pairs of a PyTorch model: declared by parameter names, or found from the module types.

Every member is a PyTorch weight stored ``(out, in)`` (``nn.Linear``: ``y = x Wᵀ``), or a block of its rows
(``nn.MultiheadAttention``'s packed ``in_proj_weight``, whose rows ``[0, d)``, ``[d, 2d)``, ``[2d, 3d)`` are
``W_Q``, ``W_K``, ``W_V``). A query/key pair ``(W_Q, W_K)`` has ``W_Q (H·d_h, d)``, ``W_K (H_kv·d_h, d)``; an
output/value pair ``(W_O, W_V)`` has ``W_O (d, H·d_h)``, ``W_V (H_kv·d_h, d)``. The layout of a weight is
read from its module's type, never guessed from its shape: a pair whose module is not an ``nn.Linear`` (or an
``nn.MultiheadAttention``) is refused, naming the parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: sibling ``nn.Linear`` names that form one attention block: (query, key, value, output)
LINEAR_NAMES = (("q", "k", "v", "o"), ("wq", "wk", "wv", "wo"), ("q_proj", "k_proj", "v_proj", "o_proj"))
#: attributes of an attention module that give its number of query heads, then of key/value heads
HEAD_ATTRIBUTES = ("num_heads", "n_heads", "num_attention_heads", "n_head", "heads")
KV_HEAD_ATTRIBUTES = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "kv_heads")

WHERE = "CompositionalMuon"


@dataclass(frozen=True)
class Member:
    """One factor of a pair: the parameter ``name``, or its rows ``[start, stop)`` when ``rows`` is given."""

    name: str
    rows: tuple[int, int] | None = None

    def __str__(self) -> str:
        return self.name if self.rows is None else f"{self.name}[{self.rows[0]}:{self.rows[1]}]"

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """This member's block of the parameter (or of its momentum, gradient) ``x``."""
        return x if self.rows is None else x[self.rows[0]:self.rows[1]]


def _member(m: Any) -> Member:
    """A member from a name, ``(name, start, stop)`` or a :class:`Member`."""
    if isinstance(m, Member):
        return m
    if isinstance(m, str):
        return Member(m)
    if isinstance(m, tuple) and len(m) == 3 and isinstance(m[0], str) and all(isinstance(i, int) for i in m[1:]):
        return Member(m[0], (m[1], m[2]))
    raise TypeError(f"{WHERE}: a pair member is a parameter name or (name, first_row, stop_row), got {m!r}")


@dataclass(frozen=True)
class TorchPair:
    """An attention pair of ``(out, in)`` weights: ``kind`` ``"qk"`` (``first`` = query, ``second`` = key) or
    ``"ov"`` (``first`` = output, ``second`` = value), with ``heads`` query heads and ``kv_heads`` key/value heads."""

    kind: str
    first: Member
    second: Member
    heads: int
    kv_heads: int


def QKPair(query: Any, key: Any, heads: int, kv_heads: int | None = None) -> TorchPair:  # noqa: N802
    """A query/key pair of ``nn.Linear``-layout weights ``W_Q (heads·d_h, d)``, ``W_K (kv_heads·d_h, d)``;
    a member is a parameter name or ``(name, first_row, stop_row)`` (a block of packed rows)."""
    return _pair("qk", query, key, heads, kv_heads)


def OVPair(output: Any, value: Any, heads: int, kv_heads: int | None = None) -> TorchPair:  # noqa: N802
    """An output/value pair of ``nn.Linear``-layout weights ``W_O (d, heads·d_h)``, ``W_V (kv_heads·d_h, d)``."""
    return _pair("ov", output, value, heads, kv_heads)


def _pair(kind: str, first: Any, second: Any, heads: Any, kv_heads: Any) -> TorchPair:
    kv = heads if kv_heads is None else kv_heads
    for name, n in (("heads", heads), ("kv_heads", kv)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{WHERE}: {name} of the pair ({first!r}, {second!r}) must be a positive int, got {n!r}")
    if heads % kv:
        raise ValueError(f"{WHERE}: kv_heads = {kv} must divide heads = {heads} in the pair ({first!r}, {second!r})")
    return TorchPair(kind, _member(first), _member(second), heads, kv)


def _attribute(module: nn.Module, names: tuple[str, ...]) -> int | None:
    for n in names:
        value = getattr(module, n, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _mha_pairs(prefix: str, m: nn.MultiheadAttention) -> list[TorchPair]:
    """The two pairs of an ``nn.MultiheadAttention``: packed ``in_proj_weight`` rows or separate weights."""
    d, h = m.embed_dim, m.num_heads
    if m.in_proj_weight is not None:
        packed = f"{prefix}in_proj_weight"
        return [QKPair((packed, 0, d), (packed, d, 2 * d), h),
                OVPair(f"{prefix}out_proj.weight", (packed, 2 * d, 3 * d), h)]
    return [QKPair(f"{prefix}q_proj_weight", f"{prefix}k_proj_weight", h),
            OVPair(f"{prefix}out_proj.weight", f"{prefix}v_proj_weight", h)]


def _linear_pairs(prefix: str, module: nn.Module, heads: int | None) -> list[TorchPair]:
    """The pairs among a module's children named as :data:`LINEAR_NAMES` (``nn.Linear`` only)."""
    children = dict(module.named_children())
    for names in LINEAR_NAMES:
        present = [n for n in names if n in children]
        if len(present) < 2:
            continue
        for n in present:
            if not isinstance(children[n], nn.Linear):
                raise ValueError(f"{WHERE}: the layout of {prefix}{n}.weight is unknown (its module is "
                                 f"{type(children[n]).__name__}, not nn.Linear); declare the pairs with pairs=[...]")
        h = _attribute(module, HEAD_ATTRIBUTES) or heads
        if h is None:
            raise ValueError(f"{WHERE}: the number of heads of {prefix}{present[0]}.weight is unknown: pass heads=H "
                             f"(or give its module a num_heads attribute)")
        q, k, v, o = (children.get(n) for n in names)
        width = (q or o).weight.shape[0] if q is not None else o.weight.shape[1]
        if width % h:
            raise ValueError(f"{WHERE}: heads = {h} does not divide the width {width} of {prefix}{present[0]}.weight")
        head_dim = width // h
        kv_width = (k or v).weight.shape[0] if (k or v) is not None else width
        kv = _attribute(module, KV_HEAD_ATTRIBUTES) or max(1, kv_width // head_dim)
        out = []
        if q is not None and k is not None:
            out.append(QKPair(f"{prefix}{names[0]}.weight", f"{prefix}{names[1]}.weight", h, kv))
        if o is not None and v is not None:
            out.append(OVPair(f"{prefix}{names[3]}.weight", f"{prefix}{names[2]}.weight", h, kv))
        return out
    return []


def find_pairs(model: nn.Module, heads: int | None = None) -> list[TorchPair]:
    """The attention pairs of ``model`` by module type and name: ``nn.MultiheadAttention`` and sibling
    ``nn.Linear`` ``q``/``k``/``v``/``o`` (``wq``…, ``q_proj``…) whose parent gives ``num_heads`` (or ``heads``)."""
    pairs: list[TorchPair] = []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, nn.MultiheadAttention):
            pairs += _mha_pairs(prefix, module)
        else:
            pairs += _linear_pairs(prefix, module, heads)
    return pairs


def embedding_names(model: nn.Module) -> set[str]:
    """The names of the ``nn.Embedding`` weights of ``model`` (they take AdamW)."""
    return {f"{n}.weight" if n else "weight" for n, m in model.named_modules() if isinstance(m, nn.Embedding)}


def check_pairs(pairs: Iterable[TorchPair], params: dict[str, torch.Tensor]) -> list[TorchPair]:
    """Refuse a pair naming a missing parameter, a member twice, mixed dtypes or shapes that do not fit."""
    seen: dict[str, list[tuple[int, int] | None]] = {}
    out = []
    for pair in pairs:
        if not isinstance(pair, TorchPair):
            raise TypeError(f"{WHERE}: pairs holds {pair!r}; declare pairs with QKPair(...) and OVPair(...)")
        for m in (pair.first, pair.second):
            if m.name not in params:
                raise ValueError(f"{WHERE}: the pair member {str(m)!r} is not a parameter name")
            x = params[m.name]
            if x.ndim != 2 or not x.is_floating_point() or x.is_complex():
                raise TypeError(f"{WHERE}: the pair member {str(m)!r} must be a real floating matrix, got shape "
                                f"{tuple(x.shape)} and dtype {x.dtype}")
            rows = seen.setdefault(m.name, [])
            if None in rows or (m.rows is None and rows) or m.rows in rows:
                raise ValueError(f"{WHERE}: {str(m)!r} is in two pairs")
            rows.append(m.rows)
        a, b = params[pair.first.name], params[pair.second.name]
        if a.dtype != b.dtype:
            raise TypeError(f"{WHERE}: {str(pair.first)!r} is {a.dtype} but {str(pair.second)!r} is {b.dtype}; "
                            f"store both factors of a pair in one dtype")
        _check_shapes(pair, pair.first.read(a).shape, pair.second.read(b).shape)
        out.append(pair)
    return out


def _check_shapes(pair: TorchPair, a: torch.Size, b: torch.Size) -> None:
    """The pair's two blocks fit its kind and heads: query rows ``H·d_h`` and key rows ``H_kv·d_h`` (output
    columns and value rows for ``"ov"``) with one ``d_h``."""
    width, kv_width = (a[0], b[0]) if pair.kind == "qk" else (a[1], b[0])
    d_h = width // pair.heads if width % pair.heads == 0 else 0
    if d_h == 0 or kv_width != pair.kv_heads * d_h or (pair.kind == "ov" and a[0] != b[1]):
        raise ValueError(f"{WHERE}: the {pair.kind} pair ({str(pair.first)!r} {tuple(a)}, {str(pair.second)!r} "
                         f"{tuple(b)}) does not fit heads = {pair.heads}, kv_heads = {pair.kv_heads} in nn.Linear "
                         f"layout (out, in)")


def head_dim(pair: TorchPair, first: torch.Tensor) -> int:
    """``d_h`` of a pair from its first member's block."""
    return (first.shape[0] if pair.kind == "qk" else first.shape[1]) // pair.heads
