"""Parameter counts of the mainstream decoder families, derived from the shapes of their tensors: exact integers.

Llama-3 and Mistral, GPT-2, Qwen2, mixtures of experts (Mixtral, DeepSeekMoE: routed and shared experts, router;
the active parameters per token too) and DeepSeek-V2/V3's multi-head latent attention
(:mod:`paramcount.families` lists each family's tensors). The shape comes from the options
(:mod:`paramcount.flags`: ``--family`` and the sizes; without ``--family`` a Llama-3-style
decoder: ``W_Q ∈ R^{d×H d_h}``, ``W_K, W_V ∈ R^{d×H_kv d_h}``, ``W_O``, a SwiGLU MLP, RMSNorm gains, an
embedding, a final gain and an untied head; Dubey et al. 2024, *The Llama 3 Herd of Models*, Table 3) or from a
local Hugging Face style ``config.json`` (``--config``, :mod:`paramcount.config`), which says
which keys it used and which it ignored; either way the same model gives the same count.

``--compare N`` explains a hand or published total that differs (exit status 1; 0 when it agrees): it searches
sets of named variants (biases on the attention or MLP projections or the Q, K, V biases left out, LayerNorm
shifts, tied or untied heads, no final norm, GQA ignored, ``d_ff = 4d``, embeddings or norms left out, shared
experts counted as routed, the RoPE parts of MLA left out, …) for the smallest set whose count equals ``N`` (to
the precision ``N`` is written with, e.g. ``8.59e9`` or ``8.59B``); ``--compare-active N`` does the same for the
active parameters per token.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import textwrap
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation

from foundation.commandline import OneLineParser, UsageError, stdout_closed, usage_error, write_result
from paramcount.config import ConfigError, ConfigShape, read_config
from paramcount.families import (
    MLA,
    Conventions,
    MoE,
    Shape,
    Tensor,
    active_count,
    count,
    mla_tensors,
    tensors,
)
from paramcount.flags import FlagShape, add_shape_options, given, shape_from_options

__all__ = ["MLA", "VARIANTS", "Conventions", "MoE", "Shape", "Tensor", "active_count", "count", "explain",
           "main", "mla_tensors", "run", "tensors"]


# ---- named variants ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    change: dict = field(default_factory=dict)


VARIANTS = (
    Variant("attention_biases", "biases on the Q, K, V and O projections (GPT style)",
            {"qkv_biases": True, "o_bias": True}),
    Variant("no_qkv_biases", "the Q, K and V biases left out", {"qkv_biases": False}),
    Variant("no_attention_biases", "the attention biases left out (Q, K, V and O)",
            {"qkv_biases": False, "o_bias": False}),
    Variant("mlp_biases", "biases on the MLP projections (GPT style)", {"mlp_biases": True}),
    Variant("no_mlp_biases", "the MLP biases left out", {"mlp_biases": False}),
    Variant("norm_shifts", "LayerNorm shifts (a bias next to every norm gain)", {"norm_shifts": True}),
    Variant("no_norm_shifts", "the LayerNorm shifts left out (RMSNorm counted)", {"norm_shifts": False}),
    Variant("no_final_norm", "no final norm", {"final_norm": False}),
    Variant("tied", "tied input and output embeddings (no separate output head)", {"tied": True}),
    Variant("untied", "untied input and output embeddings (a separate output head)", {"tied": False}),
    Variant("gqa_ignored", "GQA ignored (K and V as wide as Q)", {"gqa": False}),
    Variant("ffn_4d", "d_ff = 4d instead of the model's", {"ffn_4d": True}),
    Variant("ungated_mlp", "a two-matrix MLP instead of SwiGLU's three", {"gated_mlp": False}),
    Variant("gated_mlp", "a three-matrix gated MLP (SwiGLU) instead of the model's two", {"gated_mlp": True}),
    Variant("no_positions", "the learned position embeddings left out", {"positions": False}),
    Variant("no_embeddings", "embeddings and output head left out", {"embeddings": False}),
    Variant("no_norms", "norm parameters left out", {"norms": False}),
    Variant("no_shared_experts", "the shared experts left out", {"shared_experts": False}),
    Variant("shared_as_routed", "the shared experts counted as routed ones (not active for every token)",
            {"shared_as_routed": True}),
    Variant("no_router", "the router left out", {"router": False}),
    Variant("no_router_bias", "the router's per-expert score-correction bias left out", {"router_bias": False}),
    Variant("dense_layers_as_moe", "the first dense blocks counted as MoE blocks", {"dense_layers": False}),
    Variant("embedding_inactive", "the input embedding not counted as active (a lookup multiplies nothing)",
            {"embedding_active": False}),
    Variant("all_experts_active", "every routed expert counted as active", {"all_experts_active": True}),
    Variant("no_latent_norms", "the norm gains of MLA's query and KV latents left out", {"latent_norms": False}),
    Variant("no_rope_dims", "MLA's decoupled RoPE query and key parts left out", {"rope_dims": False}),
    Variant("rope_key_per_head", "MLA's shared RoPE key counted once per head", {"rope_key_per_head": True}),
)
#: what ``explain`` compares: the total, or the parameters one token uses
QUANTITIES = {"total": count, "active": active_count}


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


def _candidates(shape: Shape, quantity: str) -> list[Variant]:
    """The variants that change ``quantity`` for this model, each effect once (the first name for it wins:
    on Qwen2, leaving out the Q, K, V biases is leaving out every attention bias)."""
    of = QUANTITIES[quantity]
    base, seen, out = of(shape), set(), []
    for v in VARIANTS:
        conv = replace(Conventions(), **v.change)
        effect = tuple(tensors(shape, conv))
        if of(shape, conv) != base and effect not in seen:
            seen.add(effect)
            out.append(v)
    return out


def explain(shape: Shape, total_text: str, max_size: int = 4, quantity: str = "total") -> dict:
    """The smallest sets of named variants whose count (``quantity``: ``total`` or ``active``) matches
    ``total_text``.

    Examples:
      A hand count of Llama-3-8B that is 0.53B short is the count with tied embeddings:

      >>> from paramcount.count import Shape, explain
      >>> llama3_8b = Shape(hidden=4096, layers=32, vocab=128256, ffn=14336, heads=32, kv_heads=8, head_dim=128)
      >>> found = explain(llama3_8b, "7.50B")
      >>> found["agrees"], found["derived"]
      (False, 8030261248)
      >>> found["matches"][0]["explanation"]
      ['tied input and output embeddings (no separate output head)']
    """
    target, tol = _precision(total_text)
    of = QUANTITIES[quantity]
    ours = of(shape)
    candidates = _candidates(shape, quantity)
    found = []
    for k in range(max_size + 1):
        for combo in itertools.combinations(candidates, k):
            keys = [c for v in combo for c in v.change]
            if len(keys) != len(set(keys)):
                continue  # two variants of the same convention
            conv = replace(Conventions(), **{key: val for v in combo for key, val in v.change.items()})
            n = of(shape, conv)
            if abs(n - target) <= tol:
                found.append({"variants": [v.name for v in combo], "explanation": [v.description for v in combo],
                              "count": n})
        if found:
            break
    return {"quantity": quantity, "given": target, "tolerance": tol, "derived": ours, "difference": target - ours,
            "agrees": abs(target - ours) <= tol, "matches": found}


# ---- command line -----------------------------------------------------------------------------
def _parser() -> OneLineParser:
    p = OneLineParser(prog="python -m paramcount",
                      description="Parameter count of a decoder from the shapes of its tensors (exact integers): "
                                  "GPT-2, Llama, Mistral, Qwen2, Mixtral and DeepSeek-V2/V3 (experts, multi-head "
                                  "latent attention), from the shape options or from a config.json.",
                      epilog="examples: Llama-3-8B: python -m paramcount --hidden 4096 --layers 32 "
                             "--vocab 128256 --ffn 14336 --heads 32 --kv-heads 8 --compare 8.59e9; GPT-2 small: "
                             "--family gpt2 --hidden 768 --layers 12 --vocab 50257 --heads 12 --positions 1024; "
                             "from a file: python -m paramcount --config config.json. "
                             "Exit status: 0, 1 when a --compare number differs, 2 for bad input.")
    p.add_argument("--config", metavar="FILE",
                   help="a local Hugging Face style config.json (model_type gpt2, llama, mistral, qwen2, mixtral, "
                        "deepseek_v2 or deepseek_v3) instead of the shape options")
    p.add_argument("--compare", metavar="N", help="a hand or published total to explain")
    p.add_argument("--compare-active", metavar="N",
                   help="a hand or published count of the active parameters per token (experts) to explain")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_shape_options(p)
    return p


def _config_shape(a: argparse.Namespace) -> ConfigShape:
    options = given(a)
    if options:
        raise UsageError(f"--config {a.config!a} gives the shape: leave out {', '.join(options)}")
    try:
        return read_config(a.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _comparisons(shape: Shape, a: argparse.Namespace) -> dict:
    out = {}
    for key, quantity in (("compare", "total"), ("compare_active", "active")):
        if getattr(a, key) is not None:
            try:
                out[key] = explain(shape, getattr(a, key), quantity=quantity)
            except ValueError as exc:
                option = f"--{key.replace('_', '-')}"
                raise UsageError(str(exc).replace("--compare", option, 1)) from None
    return out


def _source_json(source: ConfigShape | FlagShape) -> dict:
    """What the shape was read from: ``config`` (the keys used, defaulted and ignored) or ``options``."""
    if isinstance(source, FlagShape):
        return {"config": None, "options": {"family": source.family, "defaults": list(source.defaults)}}
    return {"config": {"model_type": source.model_type, "used": list(source.used), "defaults": list(source.defaults),
                       "ignored": list(source.ignored)}, "options": None}


def evaluate(argv: list[str] | None = None) -> tuple[str, int]:
    """The text (or with ``--json`` the JSON) of one parameter count and the exit status (1: a ``--compare``
    number differs); raises :class:`UsageError`."""
    a = _parser().parse_args(argv)
    source = _config_shape(a) if a.config is not None else shape_from_options(a)
    comparisons = _comparisons(source.shape, a)
    status = 0 if all(c["agrees"] for c in comparisons.values()) else 1
    if a.json:
        return _json(source, comparisons), status
    return _text(source, comparisons), status


def run(argv: list[str] | None = None) -> str:
    """The text (or with ``--json`` the JSON) of one parameter count; raises :class:`UsageError`.

    Examples:
      GPT-2 small, as ``python -m paramcount`` prints it (the last lines):

      >>> from paramcount.count import run
      >>> text = run(["--family", "gpt2", "--hidden", "768", "--layers", "12", "--vocab", "50257",
      ...             "--heads", "12", "--positions", "1024", "--compare", "124M"])
      >>> for line in text.splitlines()[-2:]:
      ...     print(line)
      total: 124,439,808
      --compare: 124,000,000 (±500,000 as written) agrees with the derived count
    """
    return evaluate(argv)[0]


def _json(source: ConfigShape | FlagShape, comparisons: dict) -> str:
    shape = source.shape
    ts, layers = tensors(shape), shape.layers
    obj = {"family": shape.family, "total": count(shape), "active": active_count(shape),
           "per_layer": sum(t.size for t in ts if t.per_layer and t.blocks is None), "layers": layers,
           "tensors": [{"name": t.name, "shape": list(t.shape), "size": t.size, "per_layer": t.per_layer,
                        "blocks": t.copies(layers), "total": t.size * t.copies(layers),
                        "active": t.active_size * t.copies(layers)} for t in ts],
           **_source_json(source), "compare": comparisons.get("compare"),
           "compare_active": comparisons.get("compare_active")}
    return json.dumps(obj, indent=2) + "\n"


def _wrapped(label: str, items) -> list[str]:
    return textwrap.wrap(f"{label}: {', '.join(items) or 'none'}", 110, subsequent_indent="    ",
                         break_on_hyphens=False)


def _moe_summary(shape: Shape) -> str:
    moe = shape.moe
    if moe is None:
        return ""
    shared = f" and {moe.shared} shared" if moe.shared else ""
    return f" (top {moe.top_k} of {moe.experts} routed experts{shared}, and everything outside the experts)"


def _text(source: ConfigShape | FlagShape, comparisons: dict) -> str:
    lines, shape = [], source.shape
    if isinstance(source, FlagShape):
        lines += [f"family: {source.family}", *_wrapped("defaults", source.defaults), ""]
    else:
        lines += [f"model_type: {source.model_type}", *_wrapped("used", source.used)]
        lines += [*_wrapped("defaults", source.defaults), *_wrapped("ignored", source.ignored), ""]
    ts, layers = tensors(shape), shape.layers
    experts = shape.moe is not None
    lines.append(f"{'tensor':<24} {'shape':>20} {'count':>18} {'x layers':>9} {'total':>20}"
                 + (f" {'active':>20}" if experts else ""))
    for t in ts:
        mult = t.copies(layers)
        lines.append(f"{t.name:<24} {' x '.join(map(str, t.shape)):>20} {t.size:>18,} {mult:>9} {t.size * mult:>20,}"
                     + (f" {t.active_size * mult:>20,}" if experts else ""))
    lines.append(f"per layer: {sum(t.size for t in ts if t.per_layer and t.blocks is None):,}")
    groups: dict[tuple[str, int], int] = {}
    for t in ts:
        if t.per_layer and t.blocks is not None:
            kind = "MoE" if t.name.startswith(("experts.", "shared_experts.", "router")) else "dense"
            groups[kind, t.blocks] = groups.get((kind, t.blocks), 0) + t.size
    lines += [f"  + {n:,} in each of the {blocks} {kind} blocks" for (kind, blocks), n in groups.items()]
    lines.append(f"total: {count(shape):,}")
    if experts:
        lines.append(f"active per token: {active_count(shape):,}{_moe_summary(shape)}")
    lines += [_comparison_text(c, f"--{key.replace('_', '-')}") for key, c in comparisons.items()]
    return "\n".join(lines) + "\n"


def _comparison_text(c: dict, label: str = "--compare") -> str:
    what = "active count" if c["quantity"] == "active" else "count"
    given = f"{c['given']:,}" + (f" (±{c['tolerance']:,} as written)" if c["tolerance"] else "")
    if c["agrees"]:
        return f"{label}: {given} agrees with the derived {what}"
    head = f"{label}: {given} differs from the derived {what} {c['derived']:,} by {c['difference']:+,}"
    if not c["matches"]:
        return head + "; no combination of up to four named variants explains it"
    out = [head + "; explained by:"]
    for m in c["matches"]:
        out.append(f"  {' + '.join(m['explanation'])}  → {m['count']:,}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m paramcount``; returns the exit status (1: a ``--compare`` number differs,
    2: bad input)."""
    prog = "paramcount"
    if stdout_closed(prog):  # >&-: one line and exit 2 (also for --help)
        return 2
    try:
        text, status = evaluate(argv)
    except UsageError as exc:
        return usage_error(prog, exc)
    return write_result(prog, text, status)

