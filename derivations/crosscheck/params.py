"""Parameter counts of Llama-3-style decoders, derived from the shapes of their matrices.

A Llama-3 block holds ``W_Q ∈ R^{d×H d_h}``, ``W_K, W_V ∈ R^{d×H_kv d_h}`` (grouped-query
attention), ``W_O ∈ R^{H d_h×d}``, a SwiGLU MLP (``W_gate, W_up ∈ R^{d×d_ff}``, ``W_down ∈
R^{d_ff×d}``) and two RMSNorm gains of length ``d``; the model adds an embedding ``V×d``, a final
RMSNorm gain and an untied output head ``d×V``; no biases (Dubey et al. 2024, *The Llama 3 Herd
of Models*, Table 3). The total is the sum of the sizes of the tensors listed by
:func:`tensors`, an exact integer.

``--compare N`` explains a hand or published total that differs: it searches sets of named
variants (biases on the attention or MLP projections, LayerNorm shifts, tied embeddings, no
final norm, GQA ignored, ``d_ff = 4d``, embeddings or norms left out, …) for the smallest set
whose count equals ``N`` (to the precision ``N`` is written with, e.g. ``8.59e9`` or ``8.59B``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation

from derivations.commandline import OneLineParser, UsageError, stdout_closed, usage_error, write_result

MAX_SIZE = 10**7  # any one dimension
MAX_LAYERS = 10**5


@dataclass(frozen=True)
class Shape:
    """The hyperparameters of a decoder."""

    hidden: int
    layers: int
    vocab: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    tied_embeddings: bool = False


@dataclass(frozen=True)
class Conventions:
    """How a count treats the parts that vary between hand derivations (Llama-3 by default)."""

    attention_biases: bool = False
    mlp_biases: bool = False
    norm_shifts: bool = False  # LayerNorm (gain and shift) instead of RMSNorm (gain only)
    final_norm: bool = True
    gqa: bool = True  # K and V have kv_heads heads; False counts them like Q
    ffn_4d: bool = False  # d_ff = 4d instead of the model's
    gated_mlp: bool = True
    embeddings: bool = True
    norms: bool = True
    tied: bool | None = None  # None: as the shape says


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple
    per_layer: bool

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def tensors(shape: Shape, conv: Conventions = Conventions()) -> list[Tensor]:
    """Every parameter tensor of one block (``per_layer``) and of the model around the blocks."""
    d, v, dh = shape.hidden, shape.vocab, shape.head_dim
    q_width = shape.heads * dh
    kv_width = (shape.kv_heads if conv.gqa else shape.heads) * dh
    ffn = 4 * d if conv.ffn_4d else shape.ffn
    out = [Tensor("W_Q", (d, q_width), True), Tensor("W_K", (d, kv_width), True),
           Tensor("W_V", (d, kv_width), True), Tensor("W_O", (q_width, d), True)]
    if conv.attention_biases:
        out += [Tensor("b_Q", (q_width,), True), Tensor("b_K", (kv_width,), True),
                Tensor("b_V", (kv_width,), True), Tensor("b_O", (d,), True)]
    mlp_in = ["W_gate", "W_up"] if conv.gated_mlp else ["W_up"]
    out += [Tensor(n, (d, ffn), True) for n in mlp_in] + [Tensor("W_down", (ffn, d), True)]
    if conv.mlp_biases:
        out += [Tensor(n.replace("W_", "b_"), (ffn,), True) for n in mlp_in] + [Tensor("b_down", (d,), True)]
    if conv.norms:
        out += [Tensor("attention_norm.gain", (d,), True), Tensor("mlp_norm.gain", (d,), True)]
        if conv.norm_shifts:
            out += [Tensor("attention_norm.shift", (d,), True), Tensor("mlp_norm.shift", (d,), True)]
        if conv.final_norm:
            out.append(Tensor("final_norm.gain", (d,), False))
            if conv.norm_shifts:
                out.append(Tensor("final_norm.shift", (d,), False))
    if conv.embeddings:
        tied = shape.tied_embeddings if conv.tied is None else conv.tied
        out.append(Tensor("embedding", (v, d), False))
        if not tied:
            out.append(Tensor("output_head", (d, v), False))
    return out


def count(shape: Shape, conv: Conventions = Conventions()) -> int:
    """Total number of parameters: ``L × (per-block tensors) + (the rest)``."""
    return sum(t.size * (shape.layers if t.per_layer else 1) for t in tensors(shape, conv))


# ---- named variants ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    change: dict = field(default_factory=dict)


VARIANTS = (
    Variant("attention_biases", "biases on the Q, K, V and O projections (GPT style)", {"attention_biases": True}),
    Variant("mlp_biases", "biases on the MLP projections (GPT style)", {"mlp_biases": True}),
    Variant("norm_shifts", "LayerNorm shifts (a bias next to every norm gain)", {"norm_shifts": True}),
    Variant("no_final_norm", "no final norm", {"final_norm": False}),
    Variant("tied", "tied input and output embeddings", {"tied": True}),
    Variant("untied", "untied input and output embeddings", {"tied": False}),
    Variant("gqa_ignored", "GQA ignored (K and V as wide as Q)", {"gqa": False}),
    Variant("ffn_4d", "d_ff = 4d instead of the model's", {"ffn_4d": True}),
    Variant("ungated_mlp", "a two-matrix MLP instead of SwiGLU's three", {"gated_mlp": False}),
    Variant("no_embeddings", "embeddings and output head left out", {"embeddings": False}),
    Variant("no_norms", "norm parameters left out", {"norms": False}),
)


def _precision(text: str) -> tuple[int, int]:
    """``(value, half a unit of its last written digit)`` for ``8030261248``, ``8.59e9``, ``8.59B``,
    ``405,872,984,064``."""
    t = text.strip().replace(",", "").replace("_", "")
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([eE][+]?[0-9]+|[kKmMbBtT])?", t)
    if not m:
        raise ValueError(f"--compare {text!r} is not a count (e.g. 8030261248, 8.59e9, 8.59B)")
    mantissa, suffix = m.group(1), m.group(2) or ""
    exp = {"k": 3, "m": 6, "b": 9, "t": 12}.get(suffix.lower(), 0) if suffix[:1] not in "eE" or not suffix else (
        int(suffix[1:]))
    try:
        dec = Decimal(mantissa).scaleb(exp)
    except InvalidOperation:
        raise ValueError(f"--compare {text!r} is not a count") from None
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    unit = Decimal(1).scaleb(exp - decimals)
    if dec > Decimal(10) ** 16:
        raise ValueError(f"--compare {text!r} is too large")
    exact = not suffix and "." not in mantissa
    return int(dec), 0 if exact else int(max(unit / 2, Decimal(0)))


def explain(shape: Shape, total_text: str, max_size: int = 4) -> dict:
    """The smallest sets of named variants whose count matches ``total_text``."""
    target, tol = _precision(total_text)
    ours = count(shape)
    found = []
    for k in range(max_size + 1):
        for combo in itertools.combinations(VARIANTS, k):
            keys = [c for v in combo for c in v.change]
            if len(keys) != len(set(keys)):
                continue  # two variants of the same convention
            conv = replace(Conventions(), **{key: val for v in combo for key, val in v.change.items()})
            n = count(shape, conv)
            if abs(n - target) <= tol:
                found.append({"variants": [v.name for v in combo], "explanation": [v.description for v in combo],
                              "count": n})
        if found:
            break
    return {"given": target, "tolerance": tol, "derived": ours, "difference": target - ours, "matches": found}


# ---- command line -----------------------------------------------------------------------------
def _positive(name, limit):
    def parse(text):
        try:
            value = int(text.replace(",", "").replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not 1 <= value <= limit:
            raise argparse.ArgumentTypeError(f"must be between 1 and {limit:,}, got {value:,}")
        return value
    parse.__name__ = name
    return parse


def _parser() -> OneLineParser:
    p = OneLineParser(prog="python -m derivations.crosscheck.params",
                      description="Parameter count of a Llama-3-style decoder from its shapes (exact integers).",
                      epilog="example (Llama-3-8B): python -m derivations.crosscheck.params --hidden 4096 --layers 32 "
                             "--vocab 128256 --ffn 14336 --heads 32 --kv-heads 8 --compare 8.59e9")
    dim = _positive("size", MAX_SIZE)
    p.add_argument("--hidden", type=dim, required=True, help="model width d")
    p.add_argument("--layers", type=_positive("layers", MAX_LAYERS), required=True, help="number of blocks L")
    p.add_argument("--vocab", type=dim, required=True, help="vocabulary size V")
    p.add_argument("--ffn", type=dim, required=True, help="MLP width d_ff")
    p.add_argument("--heads", type=dim, required=True, help="query heads H")
    p.add_argument("--kv-heads", type=dim, required=True, help="key/value heads H_kv (GQA)")
    p.add_argument("--head-dim", type=dim, help="head width d_h (default d / H)")
    p.add_argument("--tied-embeddings", action="store_true", help="the output head is the embedding")
    p.add_argument("--compare", metavar="N", help="a hand or published total to explain")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def run(argv: list[str] | None = None) -> str:
    """The text (or with ``--json`` the JSON) of one parameter count; raises :class:`UsageError`."""
    a = _parser().parse_args(argv)
    if a.head_dim is None:
        if a.hidden % a.heads:
            raise UsageError(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}; give --head-dim")
        a.head_dim = a.hidden // a.heads
    if a.heads % a.kv_heads:
        raise UsageError(f"--heads {a.heads} is not a multiple of --kv-heads {a.kv_heads}")
    shape = Shape(a.hidden, a.layers, a.vocab, a.ffn, a.heads, a.kv_heads, a.head_dim, a.tied_embeddings)
    ts = tensors(shape)
    total = count(shape)
    comparison = None
    if a.compare is not None:
        try:
            comparison = explain(shape, a.compare)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if a.json:
        obj = {"total": total, "per_layer": sum(t.size for t in ts if t.per_layer), "layers": shape.layers,
               "tensors": [{"name": t.name, "shape": list(t.shape), "size": t.size, "per_layer": t.per_layer,
                            "total": t.size * (shape.layers if t.per_layer else 1)} for t in ts],
               "compare": comparison}
        return json.dumps(obj, indent=2) + "\n"
    lines = [f"{'tensor':<22} {'shape':>16} {'count':>18} {'x layers':>9} {'total':>20}"]
    for t in ts:
        mult = shape.layers if t.per_layer else 1
        lines.append(f"{t.name:<22} {' x '.join(map(str, t.shape)):>16} {t.size:>18,} {mult:>9} {t.size * mult:>20,}")
    per_layer = sum(t.size for t in ts if t.per_layer)
    lines += [f"per layer: {per_layer:,}", f"total: {total:,}"]
    if comparison:
        lines.append(_comparison_text(comparison))
    return "\n".join(lines) + "\n"


def _comparison_text(c: dict) -> str:
    given = f"{c['given']:,}" + (f" (±{c['tolerance']:,} as written)" if c["tolerance"] else "")
    if c["difference"] == 0 or (c["tolerance"] and abs(c["difference"]) <= c["tolerance"]):
        return f"compare: {given} agrees with the derived count"
    head = f"compare: {given} differs from the derived count by {c['difference']:+,}"
    if not c["matches"]:
        return head + "; no combination of up to four named variants explains it"
    out = [head + "; explained by:"]
    for m in c["matches"]:
        out.append(f"  {' + '.join(m['explanation'])}  → {m['count']:,}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m derivations.crosscheck.params``; returns the exit status (2: bad input)."""
    prog = "derivations.crosscheck.params"
    if stdout_closed(prog):  # >&-: one line and exit 2 (also for --help)
        return 2
    try:
        text = run(argv)
    except UsageError as exc:
        return usage_error(prog, exc)
    return write_result(prog, text, 0)


if __name__ == "__main__":
    sys.exit(main())
