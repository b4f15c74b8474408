"""Declarations of factored parameter groups other than attention pairs: LoRA adapters and MLA blocks.

* :class:`LoRAPair`: a LoRA adapter ``W = W₀ + B A`` (``B``: ``d_out × r``, ``A``: ``r × d_in``), updated by the
  rules derived in ``derivations.lora`` (emitted as :mod:`numerics.emitted.lora`). :func:`auto_lora_pairs` finds
  sibling factors named ``lora_A``/``lora_B`` (peft) or ``lora_a``/``lora_b`` (flax nnx's ``LoRA``).
* :class:`MLAPair`: a multi-head latent attention block, DeepSeek-V2/V3 style (``wq_a``, ``wq_b``, ``wkv_a``,
  ``wkv_b``, ``wo``; or ``wq`` without query compression), updated by the rules derived in ``derivations.mla``
  (:mod:`numerics.emitted.mla`). :func:`auto_mla_pairs` finds the blocks by their DeepSeek names (HF transformers'
  ``q_a_proj``/``q_b_proj``/``kv_a_proj_with_mqa``/``kv_b_proj``/``o_proj``/``q_proj``, the reference code's
  ``wq_a``/``wq_b``/``wkv_a``/``wkv_b``/``wo``/``wq``), with the head count and width given.

Each declaration is resolved against the params into a plan record (:class:`LoRAPlan`, :class:`MLAPlan`) whose
shape checks name the parameter and what was expected, in one line. Nothing here imports the rest of the
package: :mod:`numerics.optimizer.pairs` calls :func:`plan_group` for these declarations.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax.numpy as jnp


class LoRAPair(NamedTuple):
    """A LoRA adapter ``W = W₀ + B A``: ``b`` and ``a`` are the parameter paths of its two factors.

    Stored layouts ``B (..., d_out, r)`` and ``A (..., r, d_in)`` (peft's ``lora_B``/``lora_A`` weights; ``B``
    starts at 0). With ``kernels=True`` both are stored as ``x @ W`` kernels (flax nnx's ``LoRA``:
    ``lora_a (..., d_in, r)``, ``lora_b (..., r, d_out)``, ``y = x @ lora_a @ lora_b``); the rule then acts
    on their transposes, so ``B`` is still the factor that starts at 0. ``damping``: this pair's ``λ``
    in its Gram roots, ``None`` for the optimizer's ``damping`` (default ``1e-2``: at the ``B = 0`` start
    the undamped ``A`` step, finite there, grows like ``1/σ_min(B)`` once ``B`` is small and nonzero).
    A LoRA scale ``α/r`` multiplying ``B A`` is not part of the rule: the product change is scaled by it.
    """

    b: str
    a: str
    kernels: bool = False
    damping: float | None = None


class MLAPair(NamedTuple):
    """A multi-head latent attention block (DeepSeek-V2/V3): the paths of its five projections.

    Stored layouts (PyTorch ``W @ x`` weights, as DeepSeek's reference code stores them; ``d`` model width,
    ``H = heads``, ``d_h`` the non-RoPE query/key head width, ``d_R`` the RoPE head width, ``d_v`` the value
    head width, ``c_q``/``c_kv`` the latent widths): ``wq_a (..., c_q, d)``, ``wq_b (..., H·(d_h + d_R), c_q)``
    (per head the content rows, then the RoPE rows), ``wkv_a (..., c_kv + d_R, d)`` (the KV latent rows, then
    the shared RoPE key rows), ``wkv_b (..., H·(d_h + d_v), c_kv)`` (per head the key rows, then the value
    rows), ``wo (..., d, H·d_v)``. ``d_R``, ``d_v``, ``c_q`` and ``c_kv`` are read from the shapes. With
    ``kernels=True`` all five are stored transposed (``x @ W`` kernels, flax ``Dense``). The latent RMSNorm
    gains are vectors and go to AdamW.

    ``wq_a=None``: no query compression (DeepSeek-V2-Lite, ``q_lora_rank = None``); ``wq_b`` then names the dense
    query projection ``wq (..., H·(d_h + d_R), d)`` (HF transformers' ``q_proj``), per head the content rows,
    then the RoPE rows; the score circuit has three factors, each term within ``ε/3`` (``derivations.mla``).
    """

    wq_a: str | None
    wq_b: str
    wkv_a: str
    wkv_b: str
    wo: str
    heads: int
    d_h: int
    kernels: bool = False

    @property
    def members(self) -> tuple:
        """The declared projections' paths (``wq_a`` left out when it is None: no query compression)."""
        return tuple(self[1:5]) if self.wq_a is None else tuple(self[:5])


@dataclass(frozen=True)
class LoRAPlan:
    """A :class:`LoRAPair` checked against the params: paths, rank ``r``, ``d_out``, ``d_in``, layout, damping."""

    kind: ClassVar[str] = "lora"
    b: str
    a: str
    rank: int
    d_out: int
    d_in: int
    kernels: bool
    damping: float | None

    @property
    def members(self) -> tuple[str, str]:
        return (self.b, self.a)

    @property
    def label(self) -> str:
        return f"LoRA pair ({self.b!r}, {self.a!r})"


@dataclass(frozen=True)
class MLAPlan:
    """An :class:`MLAPair` checked against the params, with every width read from the shapes."""

    kind: ClassVar[str] = "mla"
    wq_a: str | None  # None: no query compression, wq_b is the dense wq
    wq_b: str
    wkv_a: str
    wkv_b: str
    wo: str
    heads: int
    d_h: int
    d_rope: int
    d_v: int
    kernels: bool
    damping: ClassVar[None] = None  # the optimizer's damping

    @property
    def compressed(self) -> bool:
        """Whether the query is compressed (``wq_a``, ``wq_b``) rather than one dense ``wq``."""
        return self.wq_a is not None

    @property
    def members(self) -> tuple[str, ...]:
        tail = (self.wq_b, self.wkv_a, self.wkv_b, self.wo)
        return (self.wq_a, *tail) if self.wq_a is not None else tail

    @property
    def roles(self) -> tuple[str, ...]:
        """What each member is, in the order of :attr:`members`."""
        query = (("wq_a (query down-projection)", "wq_b (query up-projections, content and RoPE)")
                 if self.compressed else ("wq (query projection, content and RoPE)",))
        return (*query, "wkv_a (KV down-projection and RoPE key)", "wkv_b (key and value up-projections)",
                "wo (output projection)")

    @property
    def label(self) -> str:
        return f"MLA block ({', '.join(repr(m) for m in self.members)})"


#: the declarations this module resolves
GROUP_DECLARATIONS = (LoRAPair, MLAPair)


def group_from_data(item: Mapping) -> type[LoRAPair] | type[MLAPair] | None:
    """The declaration class a config file's dict names by its fields (``b``/``a``: LoRA, ``wq_a``…: MLA), or None."""
    if "b" in item or "a" in item:
        return LoRAPair
    if any(k in item for k in MLAPair._fields[:5]):
        return MLAPair
    return None


def _check_matrices(where: str, named: dict[str, Any]) -> None:
    """Every member a real floating matrix, all of one dtype and one leading (layer) shape; raises naming it."""
    dtype = lead = first = None
    for name, x in named.items():
        if getattr(x, "ndim", 0) < 2:
            raise ValueError(f"{where}: {name!r} must be a matrix (..., rows, cols), got shape "
                             f"{tuple(getattr(x, 'shape', ()))}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{where}: {name!r} must be real floating point, got dtype {x.dtype}")
        if first is None:
            dtype, lead, first = x.dtype, x.shape[:-2], name
        elif x.dtype != dtype:
            raise TypeError(f"{where}: {name!r} is {x.dtype} but {first!r} is {dtype}; store every factor of the "
                            f"group in one dtype")
        elif x.shape[:-2] != lead:
            raise ValueError(f"{where}: leading (layer) axes differ: {name!r} has {x.shape[:-2]}, {first!r} has "
                             f"{lead}")


def _positive_int(where: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{where}: {name} must be a positive int, got {value!r}")
    return int(value)


def _pair_damping(where: str, damping: Any) -> float | None:
    """A LoRA pair's own ``λ``: None, or a finite real number ``>= 0`` (its dtype range is checked with the rest)."""
    if damping is None:
        return None
    if isinstance(damping, bool) or not isinstance(damping, numbers.Real) or not math.isfinite(float(damping)) \
            or float(damping) < 0:
        raise ValueError(f"{where}: damping must be None (the optimizer's) or a finite real number >= 0, "
                         f"got {damping!r}")
    return float(damping)


def plan_lora(p: LoRAPair, leaves: Mapping[str, Any]) -> LoRAPlan:
    """Check a LoRA pair's factors: matrices of one dtype and leading shape whose ranks agree."""
    where = f"compositional_muon: LoRA pair ({p.b!r}, {p.a!r})"
    b, a = leaves[p.b], leaves[p.a]
    _check_matrices(where, {p.b: b, p.a: a})
    if not isinstance(p.kernels, bool):
        raise TypeError(f"{where}: kernels must be True or False, got {p.kernels!r}")
    (d_out, r_b), (r_a, d_in) = (b.shape[-2:][::-1], a.shape[-2:][::-1]) if p.kernels else (b.shape[-2:],
                                                                                           a.shape[-2:])
    if r_b != r_a:
        layout = ("as kernels: A (..., d_in, r), B (..., r, d_out)" if p.kernels else
                  "B (..., d_out, r), A (..., r, d_in), peft's lora_B/lora_A weights")
        other = "kernels=False" if p.kernels else "kernels=True for flax kernels"
        raise ValueError(f"{where}: the ranks disagree: {p.b!r} {tuple(b.shape)} has r = {r_b} but {p.a!r} "
                         f"{tuple(a.shape)} has r = {r_a}; expected {layout} (or {other})")
    return LoRAPlan(b=p.b, a=p.a, rank=int(r_b), d_out=int(d_out), d_in=int(d_in), kernels=p.kernels,
                    damping=_pair_damping(where, p.damping))


def _mla_shapes(p: MLAPair, leaves: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """The trailing ``(rows, cols)`` of each member in the default (``W @ x``) layout."""
    return {n: tuple(int(s) for s in (leaves[n].shape[-2:][::-1] if p.kernels else leaves[n].shape[-2:]))
            for n in p.members}


def _mla_query(where: str, p: MLAPair, s: dict, heads: int, d_h: int, t: str) -> tuple[int, int]:
    """``(d, d_R)`` read from the query side: ``wq_a`` and ``wq_b``, or the dense ``wq`` (``wq_a=None``)."""
    q_rows, q_cols = s[p.wq_b]
    if p.wq_a is None:  # wq (H·(d_h + d_R), d): the model width is its column count
        d, name, cols = q_cols, f"{p.wq_b!r} (wq, no query compression)", "d columns"
        if q_cols != s[p.wkv_a][1]:
            raise ValueError(f"{where}: {name}{t} has {q_cols} columns, expected the model width d = "
                             f"{s[p.wkv_a][1]} (the columns of {p.wkv_a!r}); a compressed query (wq_b with c_q "
                             f"columns) needs its wq_a declared")
    else:
        (c_q, d), name = s[p.wq_a], repr(p.wq_b)
        cols = f"c_q = {c_q} columns (the rows of {p.wq_a!r})"
    if q_rows % heads or (p.wq_a is not None and q_cols != s[p.wq_a][0]):
        raise ValueError(f"{where}: {name}{t} has shape {(q_rows, q_cols)}, expected heads·(d_h + d_R) = "
                         f"{heads}·(d_h + d_R) rows and {cols}")
    d_rope = q_rows // heads - d_h
    if d_rope < 1:
        raise ValueError(f"{where}: {name} has {q_rows // heads} rows per head, not d_h = {d_h} content rows "
                         f"plus the decoupled RoPE query rows: the RoPE query part is missing (or d_h is wrong)")
    return d, d_rope


def plan_mla(p: MLAPair, leaves: Mapping[str, Any]) -> MLAPlan:
    """Check an MLA block's projections against each other; every error names the parameter."""
    where = f"compositional_muon: MLA block ({p.members[0]!r}, …, {p.wo!r})"
    _check_matrices(where, {n: leaves[n] for n in p.members})
    heads, d_h = _positive_int(where, "heads", p.heads), _positive_int(where, "d_h", p.d_h)
    if not isinstance(p.kernels, bool):
        raise TypeError(f"{where}: kernels must be True or False, got {p.kernels!r}")
    s = _mla_shapes(p, leaves)
    (kv_rows, d_kv), (b_rows, c_kv), (d_o, o_cols) = s[p.wkv_a], s[p.wkv_b], s[p.wo]
    t = " (transposed: kernels=True)" if p.kernels else ""
    d, d_rope = _mla_query(where, p, s, heads, d_h, t)
    if b_rows % heads or b_rows // heads <= d_h:
        raise ValueError(f"{where}: {p.wkv_b!r}{t} has {b_rows} rows, expected heads·(d_h + d_v) = "
                         f"{heads}·({d_h} + d_v) with d_v >= 1")
    d_v = b_rows // heads - d_h
    if kv_rows != c_kv + d_rope or d_kv != d:
        raise ValueError(f"{where}: {p.wkv_a!r}{t} has shape {(kv_rows, d_kv)}, expected (c_kv + d_R, d) = "
                         f"({c_kv} + {d_rope}, {d}) (c_kv from {p.wkv_b!r}, d_R from {p.wq_b!r}, d from "
                         f"{p.members[0]!r}): "
                         + (f"the RoPE key part is missing (no d_R = {d_rope} shared RoPE key rows after its "
                            f"{c_kv} KV latent rows)" if kv_rows == c_kv and d_kv == d else
                            "the RoPE key part is missing or the ranks disagree"))
    if (d_o, o_cols) != (d, heads * d_v):
        raise ValueError(f"{where}: {p.wo!r}{t} has shape {(d_o, o_cols)}, expected (d, heads·d_v) = "
                         f"({d}, {heads}·{d_v})")
    return MLAPlan(wq_a=p.wq_a, wq_b=p.wq_b, wkv_a=p.wkv_a, wkv_b=p.wkv_b, wo=p.wo, heads=heads, d_h=d_h,
                   d_rope=d_rope, d_v=d_v, kernels=p.kernels)


def plan_group(p: LoRAPair | MLAPair, leaves: Mapping[str, Any]) -> LoRAPlan | MLAPlan:
    """The plan record of a LoRA or MLA declaration (its paths already checked to be parameters)."""
    return plan_lora(p, leaves) if isinstance(p, LoRAPair) else plan_mla(p, leaves)


# ---- LoRA pairs found from the parameter names ----------------------------------------------
#: sibling names of a LoRA adapter's factors: (B, A), peft's and flax nnx's
LORA_NAMES = (("lora_B", "lora_A"), ("lora_b", "lora_a"))


def _lora_kernels(b_path: str, a_path: str, b: Any, a: Any, lowercase: bool) -> bool:
    """Whether the factors are flax kernels (``A (d_in, r)``, ``B (r, d_out)``), by which axis they share."""
    as_weights = b.shape[-1] == a.shape[-2]  # B (d_out, r), A (r, d_in)
    as_kernels = a.shape[-1] == b.shape[-2]  # A (d_in, r), B (r, d_out)
    if as_weights and as_kernels:
        return lowercase  # both fit (square factors): flax nnx names them lora_a/lora_b, peft lora_A/lora_B
    if not (as_weights or as_kernels):
        raise ValueError(f"compositional_muon: pairs='auto' found the LoRA factors {b_path!r} {tuple(b.shape)} and "
                         f"{a_path!r} {tuple(a.shape)}, which share no rank axis: expected B (..., d_out, r) with "
                         f"A (..., r, d_in) (peft), or A (..., d_in, r) with B (..., r, d_out) (flax kernels)")
    return as_kernels


def auto_lora_pairs(leaves: Mapping[str, Any]) -> list[LoRAPair]:
    """LoRA pairs found from the names: a path with a ``lora_A`` (``lora_a``) segment whose sibling path with
    ``lora_B`` (``lora_b``) in its place is a parameter too (``…/q_proj/lora_A/default/weight`` and
    ``…/q_proj/lora_B/default/weight``). The layout is read from the axis the factors share (square factors:
    peft's ``B A`` for ``lora_A``/``lora_B``, flax nnx's ``x @ a @ b`` for ``lora_a``/``lora_b``)."""
    out = []
    for path, a in leaves.items():
        parts = path.split("/")
        for i, part in enumerate(parts):
            for b_name, a_name in LORA_NAMES:
                b_path = "/".join([*parts[:i], b_name, *parts[i + 1:]])
                if part != a_name or b_path not in leaves:
                    continue
                b = leaves[b_path]
                if getattr(a, "ndim", 0) < 2 or getattr(b, "ndim", 0) < 2:
                    continue  # a scale or a bias next to the factors
                out.append(LoRAPair(b_path, path, kernels=_lora_kernels(b_path, path, b, a, a_name == "lora_a")))
    return out


# ---- MLA blocks found from the parameter names (DeepSeek) ----------------------------------------
#: sibling names of an MLA block's projections, ``(wq_a, wq_b, wkv_a, wkv_b, wo, wq)``: HF transformers'
#: ``DeepseekV2Attention``/``DeepseekV3Attention`` and DeepSeek's reference code (``wq``: no query compression)
MLA_NAMES = (("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "q_proj"),
             ("wq_a", "wq_b", "wkv_a", "wkv_b", "wo", "wq"))


def _mla_block(prefix: str, rest: str, names: tuple, leaves: Mapping[str, Any]) -> dict[str, str | None] | None:
    """``{role: path}`` of the block whose ``wkv_a`` is ``prefix/names[2]/rest``, ``None`` when a missing member is
    there in another form (a LoRA ``base_layer``: not this layout); raises when one is missing or ambiguous."""
    path = {n: "/".join(filter(None, (prefix, n, rest))) for n in names}
    inside = f"{prefix}/" if prefix else ""
    have = {n: path[n] in leaves for n in names}
    # in some form: the matrix itself, or a module wrapping it (peft's base_layer and LoRA factors)
    exists = {n: have[n] or any(q.startswith(f"{inside}{n}/") for q in leaves) for n in names}
    wq_a, wq_b, _, wkv_b, wo, wq = names
    where = f"compositional_muon: pairs='auto' found the MLA block {prefix or '(top level)'!r} ({path[names[2]]!r})"
    if exists[wq] and (exists[wq_a] or exists[wq_b]):
        raise ValueError(f"{where} with both a dense query {path[wq]!r} and a compressed one "
                         f"({path[wq_a]!r}, {path[wq_b]!r}): declare it with MLAPair (wq_a=None for the dense wq)")
    query = (wq,) if exists[wq] else (wq_a, wq_b)
    missing = [n for n in (*query, wkv_b, wo) if not have[n]]
    if not missing:
        return {"wq_a": None if have[wq] else path[wq_a], "wq_b": path[wq if have[wq] else wq_b],
                "wkv_a": path[names[2]], "wkv_b": path[wkv_b], "wo": path[wo]}
    missing = [n for n in missing if not exists[n]]
    if not missing:
        return None  # stored in another form (a wrapped module): not an MLA block of this layout
    raise ValueError(f"{where} without {', '.join(repr(path[n]) for n in missing)}: expected "
                     f"{'/'.join(n for n in names[:5])} (or {wq} for a dense query) as siblings, each a matrix "
                     f"or holding one as {rest or 'the array itself'!r}; declare the block with MLAPair")


def auto_mla_pairs(leaves: Mapping[str, Any], heads: int | None, d_h: int | None,
                   matrix_leaves: tuple[str, ...]) -> list[MLAPair]:
    """MLA blocks found from their DeepSeek names (:data:`MLA_NAMES`): a parent path with a ``kv_a_proj_with_mqa``
    (``wkv_a``) child and its siblings, each a matrix or holding one under a name in ``matrix_leaves``
    (``weight``: HF and reference ``W @ x`` weights, out × in; ``kernel``: flax ``x @ W`` kernels, taken
    transposed). ``q_proj`` (``wq``) instead of ``q_a_proj``/``q_b_proj`` is a block without query compression.

    The head count and the non-RoPE head width cannot be told apart from the latent widths by the names, so they
    come from the caller (``AutoPairs(heads=H, qk_nope_head_dim=d_h)``: ``num_attention_heads`` and
    ``qk_nope_head_dim`` of the DeepSeek config); a block found without them is refused, naming it. The shapes
    are then checked against them as for a declared :class:`MLAPair`."""
    out = []
    for path in leaves:
        parts = path.split("/")
        for i, part in enumerate(parts):
            names = next((n for n in MLA_NAMES if n[2] == part), None)
            rest = "/".join(parts[i + 1:])
            if names is None or (rest and rest not in matrix_leaves) or getattr(leaves[path], "ndim", 0) < 2:
                continue
            prefix = "/".join(parts[:i])
            block = _mla_block(prefix, rest, names, leaves)
            if block is None:
                continue
            if heads is None or d_h is None:
                lacking = " or ".join(n for n, v in (("heads", heads), ("qk_nope_head_dim", d_h)) if v is None)
                raise ValueError(f"compositional_muon: pairs='auto' found the MLA block {prefix or '(top level)'!r} "
                                 f"({block['wkv_a']!r}) but no {lacking} was given (not guessed from the shapes); pass "
                                 f"pairs=numerics.optimizer.AutoPairs(heads=H, qk_nope_head_dim=d_h) (the config's "
                                 f"num_attention_heads and qk_nope_head_dim)")
            out.append(MLAPair(**block, heads=heads, d_h=d_h, kernels=rest == "kernel"))
    return out
