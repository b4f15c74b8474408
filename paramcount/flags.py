"""The shape options of ``python -m paramcount``: every family that ``--config`` reads, given on
the command line instead of in a file.

``--family`` names the family by its Hugging Face ``model_type`` (``llama`` when absent) and so fixes what the
family fixes (GPT-2's biases, LayerNorm, ungated MLP and learned positions; Qwen2's Q, K and V biases); the other
options give the sizes, each standing for one config key and defaulting as :mod:`params_config
<paramcount.config>` defaults it, so the same model gives the same count either way:

* every family: ``--hidden``, ``--layers``, ``--vocab``, ``--heads``, ``--tied-embeddings`` / ``--no-tied-embeddings``
  (GPT-2 ties by default, the others do not); ``--ffn`` (the dense MLP width; GPT-2's defaults to ``4 × --hidden``);
* ``llama``, ``mistral``, ``qwen2``, ``mixtral``: ``--kv-heads`` (GQA) and ``--head-dim`` (``--hidden / --heads``
  when absent); ``llama`` also ``--attention-bias`` and ``--mlp-bias``; ``gpt2``: ``--positions``;
* a mixture of experts (``mixtral``, ``deepseek_v2``, ``deepseek_v3``): ``--experts`` routed experts, ``--top-k``
  of them per token, each ``--expert-ffn`` wide (``--ffn`` when absent, as in Mixtral), ``--shared-experts``,
  ``--dense-layers`` (DeepSeek's ``first_k_dense_replace``), ``--moe-every`` (``moe_layer_freq``) and
  ``--router-bias`` (DeepSeek-V3's score-correction bias, its default);
* multi-head latent attention (``deepseek_v2``, ``deepseek_v3``): ``--q-lora-rank`` (absent: no query
  compression), ``--kv-lora-rank``, ``--qk-nope-head-dim``, ``--qk-rope-head-dim``, ``--v-head-dim``, and
  ``--attention-bias``.

An option that the family does not have, a size the family needs and is missing, or sizes that do not fit
together (``--heads`` not a multiple of ``--kv-heads``, ``--top-k`` above ``--experts``) is a :class:`UsageError`
in one line naming the option and the fix; nothing is guessed and no option is silently ignored.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from foundation.commandline import UsageError, int_option
from paramcount.config import FAMILIES, MAX_LAYERS, MAX_SIZE
from paramcount.families import MLA, MoE, Shape

LLAMA_LIKE = ("llama", "mistral", "qwen2", "mixtral")
DEEPSEEK = ("deepseek_v2", "deepseek_v3")
MOE_FAMILIES = ("mixtral", *DEEPSEEK)
#: the families each option applies to (an option missing here applies to every family)
APPLIES = {
    "kv_heads": LLAMA_LIKE, "head_dim": LLAMA_LIKE, "positions": ("gpt2",), "attention_bias": ("llama", *DEEPSEEK),
    "mlp_bias": ("llama",),
    **dict.fromkeys(("experts", "top_k", "expert_ffn", "shared_experts", "dense_layers", "moe_every", "router_bias"),
                    MOE_FAMILIES),
    **dict.fromkeys(("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"), DEEPSEEK),
}
#: the options that describe the experts, so need --experts
EXPERT_OPTIONS = ("top_k", "expert_ffn", "shared_experts", "dense_layers", "moe_every", "router_bias")
SIZES = ("hidden", "layers", "vocab", "ffn", "heads", *APPLIES)
FLAGS = ("family", "tied_embeddings", *SIZES)


def flag(dest: str) -> str:
    return f"--{dest.replace('_', '-')}"


def whole(name: str, limit: int, minimum: int = 1):
    """An ``argparse`` type: a whole number between ``minimum`` and ``limit`` (``1,024`` and ``1_024`` too):
    the shared :func:`foundation.commandline.int_option`."""
    return int_option(minimum, limit, name)


#: the whole-number options: (option, smallest value, largest value, help)
NUMBERS = (
    ("--hidden", 1, MAX_SIZE, "model width d"),
    ("--layers", 1, MAX_LAYERS, "number of blocks L"),
    ("--vocab", 1, MAX_SIZE, "vocabulary size V"),
    ("--ffn", 1, MAX_SIZE, "MLP width d_ff of the dense blocks (gpt2: default 4d; mixtral: the experts' width)"),
    ("--heads", 1, MAX_SIZE, "query heads H"),
    ("--kv-heads", 1, MAX_SIZE, "key/value heads H_kv (GQA; llama, mistral, qwen2, mixtral)"),
    ("--head-dim", 1, MAX_SIZE, "head width d_h (default d / H)"),
    ("--positions", 1, MAX_SIZE, "learned position embeddings (gpt2's n_positions)"),
    ("--experts", 1, MAX_SIZE, "routed experts per MoE block (mixtral, deepseek_v2/v3)"),
    ("--top-k", 1, MAX_SIZE, "routed experts per token"),
    ("--expert-ffn", 1, MAX_SIZE, "each routed expert's MLP width (default --ffn)"),
    ("--shared-experts", 0, MAX_SIZE, "shared experts, used by every token (default 0)"),
    ("--dense-layers", 0, MAX_LAYERS, "the first blocks keep a dense MLP of width --ffn (first_k_dense_replace; "
                                      "default 0)"),
    ("--moe-every", 1, MAX_LAYERS, "block i ≥ --dense-layers is a MoE block when i %% N = 0 (moe_layer_freq; "
                                   "default 1)"),
    ("--q-lora-rank", 1, MAX_SIZE, "MLA query compression rank c_q (absent: no query compression)"),
    ("--kv-lora-rank", 1, MAX_SIZE, "MLA key/value compression rank c_kv (deepseek_v2/v3)"),
    ("--qk-nope-head-dim", 1, MAX_SIZE, "MLA per-head query/key width without RoPE"),
    ("--qk-rope-head-dim", 1, MAX_SIZE, "MLA decoupled RoPE width (one RoPE key shared by the heads)"),
    ("--v-head-dim", 1, MAX_SIZE, "MLA per-head value width"),
)
#: the yes/no options (each with its --no- form): (option, help)
SWITCHES = (
    ("--tied-embeddings", "the output head is the embedding (default: gpt2 tied, the others untied)"),
    ("--attention-bias", "biases on the attention projections (llama, deepseek_v2/v3)"),
    ("--mlp-bias", "biases on the MLP projections (llama)"),
    ("--router-bias", "a per-expert score-correction bias (default: deepseek_v3 yes, the others no)"),
)


def add_shape_options(p: argparse.ArgumentParser) -> None:
    """The shape options (instead of ``--config``)."""
    g = p.add_argument_group("shape (instead of --config; each option stands for one config.json key)")
    g.add_argument("--family", choices=tuple(FAMILIES), metavar="MODEL_TYPE",
                   help=f"the family, as a config.json's model_type: {', '.join(FAMILIES)} (default llama); it "
                        "fixes the biases, norms, MLP and positions")
    for option, low, high, text in NUMBERS:
        g.add_argument(option, type=whole(option, high, low), metavar="N", help=text)
    for option, text in SWITCHES:
        g.add_argument(option, action=argparse.BooleanOptionalAction, default=None, help=text)


def given(a: argparse.Namespace) -> list[str]:
    """The shape options given on the command line."""
    return [flag(d) for d in FLAGS if getattr(a, d) is not None]


@dataclass(frozen=True)
class FlagShape:
    """A shape read from the options, and the values assumed for the options left out."""

    shape: Shape
    family: str
    defaults: tuple[str, ...]


class _Options:
    """The options of one command line, read for one family; records the defaults assumed."""

    def __init__(self, a: argparse.Namespace):
        self.a, self.family = a, a.family or "llama"
        self.defaults: list[str] = [] if a.family else ["--family llama"]

    def get(self, dest: str, default=None, why: str = ""):
        value = getattr(self.a, dest)
        if value is not None:
            return value
        if why:
            self.defaults.append(f"{default_text(dest, default)} ({why})")
        return default

    def require(self, *dests: str) -> None:
        missing = [flag(d) for d in dests if getattr(self.a, d) is None]
        if missing:
            raise UsageError(f"give --config FILE, or the shape of --family {self.family}: "
                             f"{', '.join(missing)} missing")

    def check_applies(self) -> None:
        for dest, families in APPLIES.items():
            if getattr(self.a, dest) is not None and self.family not in families:
                raise UsageError(f"{flag(dest)} does not apply to --family {self.family} (it is for "
                                 f"{', '.join(families)}): leave it out or give another --family")
        if self.family in MOE_FAMILIES and self.a.experts is None:
            extra = [flag(d) for d in EXPERT_OPTIONS if getattr(self.a, d) is not None]
            if extra:
                raise UsageError(f"{extra[0]} describes the experts: give --experts too, or leave it out")

    def divides(self, big: str, small: str, fix: str) -> None:
        if getattr(self.a, big) % getattr(self.a, small):
            raise UsageError(f"{flag(big)} {getattr(self.a, big)} is not a multiple of {flag(small)} "
                             f"{getattr(self.a, small)}: {fix}")


def default_text(dest: str, value) -> str:
    if value is None:
        return f"no {flag(dest)}"
    if isinstance(value, bool):
        return flag(dest) if value else flag(dest).replace("--", "--no-", 1)
    return f"{flag(dest)} {value}"


def _gpt2(o: _Options) -> Shape:
    o.require("hidden", "layers", "vocab", "heads", "positions")
    a = o.a
    o.divides("hidden", "heads", "fix one of them")
    ffn = o.get("ffn", 4 * a.hidden, "absent: 4 × --hidden")
    return Shape(a.hidden, a.layers, a.vocab, ffn, a.heads, a.heads, a.hidden // a.heads,
                 o.get("tied_embeddings", True, "GPT-2 ties its embeddings"), qkv_bias=True, o_bias=True, mlp_bias=True,
                 layer_norm=True, gated_mlp=False, positions=a.positions, family="gpt2")


def _attention(o: _Options) -> dict:
    """The sizes every Llama-like family shares: width, depth, vocabulary, heads (GQA) and head width."""
    a = o.a
    if a.head_dim is None:
        o.divides("hidden", "heads", "give --head-dim")
    o.divides("heads", "kv_heads", "fix one of them")
    return {"hidden": a.hidden, "layers": a.layers, "vocab": a.vocab, "heads": a.heads, "kv_heads": a.kv_heads,
            "head_dim": o.get("head_dim", a.hidden // a.heads, "absent: --hidden / --heads"),
            "tied_embeddings": o.get("tied_embeddings", False, "absent: untied")}


def _moe(o: _Options) -> MoE | None:
    """The experts (None without ``--experts``); checks that ``--ffn`` is given exactly when a block uses it."""
    a = o.a
    if a.experts is None:
        return None
    o.require("top_k")
    if a.top_k > a.experts:
        raise UsageError(f"--top-k {a.top_k} is more than --experts {a.experts}: fix one of them")
    if a.expert_ffn is None and a.ffn is None:
        raise UsageError("give --expert-ffn (each routed expert's MLP width) or --ffn")
    expert_ffn = o.get("expert_ffn", a.ffn, "absent: --ffn")
    moe = MoE(a.experts, a.top_k, expert_ffn, o.get("shared_experts", 0, "absent: none"), 0,
              o.get("dense_layers", 0, "absent: every block is a MoE block"),
              o.get("moe_every", 1, "absent: every block"),
              o.get("router_bias", o.family == "deepseek_v3", f"absent: {o.family}'s default"))
    if moe.dense_layers > a.layers:
        raise UsageError(f"--dense-layers {moe.dense_layers} is more than --layers {a.layers}: fix one of them")
    dense = moe.moe_blocks(a.layers) < a.layers
    if dense and a.ffn is None:
        raise UsageError("give --ffn: the dense blocks (--dense-layers, --moe-every) have an MLP of that width")
    if not dense and a.ffn is not None and a.expert_ffn is not None:
        raise UsageError(f"--ffn {a.ffn} is not used: every block is a MoE block (see --dense-layers, --moe-every) "
                         "and --expert-ffn gives the experts' width; leave --ffn out or give the dense blocks")
    return moe


def _llama_like(o: _Options) -> Shape:
    dense = ("ffn",) if o.a.experts is None else ()  # with experts, _moe says when --ffn is needed
    experts = ("experts",) if o.family == "mixtral" else ()
    o.require("hidden", "layers", "vocab", *dense, "heads", "kv_heads", *experts)
    moe = _moe(o)
    base = _attention(o)
    bias = o.get("attention_bias", False, "absent: no attention biases") if o.family == "llama" else False
    mlp_bias = o.get("mlp_bias", False, "absent: no MLP biases") if o.family == "llama" else False
    return Shape(**base, ffn=o.a.ffn or 0, qkv_bias=bias or o.family == "qwen2", o_bias=bias, mlp_bias=mlp_bias,
                 moe=moe, family=o.family)


def _deepseek(o: _Options) -> Shape:
    dense = ("ffn",) if o.a.experts is None else ()  # with experts, _moe says when --ffn is needed
    o.require("hidden", "layers", "vocab", *dense, "heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
              "v_head_dim")
    a = o.a
    mla = MLA(o.get("q_lora_rank", None, "absent: no query compression"), a.kv_lora_rank, a.qk_nope_head_dim,
              a.qk_rope_head_dim, a.v_head_dim)
    moe = _moe(o)
    bias = o.get("attention_bias", False, "absent: no attention biases")
    tied = o.get("tied_embeddings", False, "absent: untied")
    return Shape(a.hidden, a.layers, a.vocab, a.ffn or 0, a.heads, a.heads, mla.qk_nope_head_dim + mla.qk_rope_head_dim,
                 tied, qkv_bias=bias, o_bias=bias, moe=moe, mla=mla, family=o.family)


def shape_from_options(a: argparse.Namespace) -> FlagShape:
    """The shape the options describe; :class:`UsageError` in one line for a missing, foreign or bad option."""
    o = _Options(a)
    o.check_applies()
    if o.family == "gpt2":
        shape = _gpt2(o)
    elif o.family in DEEPSEEK:
        shape = _deepseek(o)
    else:
        shape = _llama_like(o)
    return FlagShape(shape, o.family, tuple(o.defaults))
