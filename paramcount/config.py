"""A local Hugging Face style ``config.json`` read into a :class:`~paramcount.families.Shape`.

``model_type`` picks the family: ``gpt2``, ``llama``, ``mistral``, ``qwen2``, ``mixtral``, ``deepseek_v2``,
``deepseek_v3``; the family's standard keys give the shape (Hugging Face ``transformers`` names and defaults:
``num_key_value_heads`` defaults to the heads, ``head_dim`` to ``hidden_size / num_attention_heads``, a MoE's
``first_k_dense_replace`` to 0). Every key is reported as used, defaulted (absent, with the value assumed) or
ignored (no parameter depends on it, or the note says what is not counted). A file that is not a regular file,
is over :data:`MAX_CONFIG_BYTES`, is not JSON, has an unknown ``model_type`` or lacks a key the family needs is
refused in one line (:class:`ConfigError`), never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from foundation.commandline import FileRefused, read_json_file
from paramcount.families import MLA, MoE, Shape

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB
MAX_SIZE = 10**7  # any one dimension
MAX_LAYERS = 10**5
_REQUIRED = object()

#: keys a family's code reads but no parameter depends on (or that the count leaves out on purpose), by model_type
NOTES = {
    "num_nextn_predict_layers": "the multi-token-prediction module is not part of the model's blocks: not counted",
    "num_key_value_heads": "multi-head latent attention has no separate key/value heads",
    "attention_bias": "not read by this model_type's code: its attention biases are fixed (see the tensors)",
    "mlp_bias": "not read by this model_type's code: it has no MLP biases",
}


class ConfigError(ValueError):
    """A config file that cannot be read as a model: one line naming the file, the key and the fix."""


@dataclass(frozen=True)
class ConfigShape:
    """A shape read from a config file, and what was read: ``used`` keys, ``defaults`` (absent keys and the
    values assumed) and ``ignored`` keys."""

    shape: Shape
    model_type: str
    used: tuple[str, ...]
    defaults: tuple[str, ...]
    ignored: tuple[str, ...]


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Keys:
    """The keys of one config, read with their checks; records which were used and which defaulted."""

    def __init__(self, data: dict, where: str, model_type: str):
        self.data, self.where, self.model_type = data, where, model_type
        self.used: list[str] = []
        self.defaults: list[str] = []

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {message}")

    def _get(self, key: str, default, why: str):
        if key not in self.data:
            if default is _REQUIRED:
                raise self.error(f"model_type {self.model_type!r} needs the key {key!r}, which is missing: add it")
            self.defaults.append(f"{key} = {_short(default)} ({why})" if why else f"{key} = {_short(default)}")
            return default, False
        self.used.append(key)
        return self.data[key], True

    def size(self, key: str, default=_REQUIRED, why: str = "", *, limit: int = MAX_SIZE, minimum: int = 1,
             nullable: bool = False):
        """A whole number between ``minimum`` and ``limit`` (``None`` too when ``nullable``)."""
        value, given = self._get(key, default, why)
        if not given or (value is None and nullable):
            return value
        if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= limit:
            null = " or null" if nullable else ""
            raise self.error(f"{key} must be a whole number between {minimum} and {limit:,}{null}, "
                             f"got {_short(value)}")
        return value

    def flag(self, key: str, default: bool, why: str = "") -> bool:
        value, given = self._get(key, default, why)
        if given and not isinstance(value, bool):
            raise self.error(f"{key} must be true or false, got {_short(value)}")
        return value

    def text(self, key: str, default: str, why: str = "") -> str:
        value, given = self._get(key, default, why)
        if given and not isinstance(value, str):
            raise self.error(f"{key} must be a string, got {_short(value)}")
        return value

    def divides(self, big: tuple[str, int], small: tuple[str, int], fix: str) -> None:
        if big[1] % small[1]:
            raise self.error(f"{big[0]} = {big[1]} is not a multiple of {small[0]} = {small[1]}: {fix}")


# ---- the families ----------------------------------------------------------------------------------------------
def _gpt2(k: _Keys) -> Shape:
    d, heads = k.size("n_embd"), k.size("n_head")
    layers, vocab = k.size("n_layer", limit=MAX_LAYERS), k.size("vocab_size")
    positions = k.size("n_positions")
    inner = k.size("n_inner", 4 * d, "absent: 4 n_embd", nullable=True)
    k.divides(("n_embd", d), ("n_head", heads), "fix one of them")
    tied = k.flag("tie_word_embeddings", True, "GPT-2 ties its embeddings")
    return Shape(d, layers, vocab, inner or 4 * d, heads, heads, d // heads, tied, qkv_bias=True, o_bias=True,
                 mlp_bias=True, layer_norm=True, gated_mlp=False, positions=positions, family="gpt2")


def _decoder(k: _Keys, tied_default: bool) -> dict:
    """The keys every Llama-like family shares: width, depth, vocabulary, heads (GQA) and head width."""
    d, layers = k.size("hidden_size"), k.size("num_hidden_layers", limit=MAX_LAYERS)
    vocab, heads = k.size("vocab_size"), k.size("num_attention_heads")
    kv = k.size("num_key_value_heads", heads, "absent: num_attention_heads")
    k.divides(("num_attention_heads", heads), ("num_key_value_heads", kv), "fix one of them")
    head_dim = k.data.get("head_dim")
    if head_dim is None:
        k.divides(("hidden_size", d), ("num_attention_heads", heads), "give head_dim")
    head_dim = k.size("head_dim", d // heads, "absent: hidden_size / num_attention_heads", nullable=True) or (
        d // heads)
    tied = k.flag("tie_word_embeddings", tied_default, "absent: the family's default")
    return {"hidden": d, "layers": layers, "vocab": vocab, "heads": heads, "kv_heads": kv, "head_dim": head_dim,
            "tied_embeddings": tied}


def _llama(k: _Keys) -> Shape:
    base = _decoder(k, False)
    bias = k.flag("attention_bias", False, "absent: no attention biases")
    return Shape(**base, ffn=k.size("intermediate_size"), qkv_bias=bias, o_bias=bias,
                 mlp_bias=k.flag("mlp_bias", False, "absent: no MLP biases"), family="llama")


def _mistral(k: _Keys) -> Shape:
    return Shape(**_decoder(k, False), ffn=k.size("intermediate_size"), family="mistral")


def _qwen2(k: _Keys) -> Shape:
    return Shape(**_decoder(k, False), ffn=k.size("intermediate_size"), qkv_bias=True, family="qwen2")


def _mixtral(k: _Keys) -> Shape:
    base, ffn = _decoder(k, False), k.size("intermediate_size")
    experts, top_k = k.size("num_local_experts"), k.size("num_experts_per_tok")
    if top_k > experts:
        raise k.error(f"num_experts_per_tok = {top_k} is more than num_local_experts = {experts}: fix one of them")
    return Shape(**base, ffn=ffn, moe=MoE(experts, top_k, ffn), family="mixtral")


def _deepseek_moe(k: _Keys, layers: int) -> MoE | None:
    experts = k.size("n_routed_experts", nullable=True)
    if experts is None:
        return None
    top_k, ffn = k.size("num_experts_per_tok"), k.size("moe_intermediate_size")
    if top_k > experts:
        raise k.error(f"num_experts_per_tok = {top_k} is more than n_routed_experts = {experts}: fix one of them")
    shared = k.size("n_shared_experts", minimum=0, nullable=True) or 0
    dense = k.size("first_k_dense_replace", 0, "absent: every block is a MoE block", minimum=0, limit=MAX_LAYERS)
    if dense > layers:
        raise k.error(f"first_k_dense_replace = {dense} is more than num_hidden_layers = {layers}: fix one of them")
    every = k.size("moe_layer_freq", 1, "absent: every block", limit=MAX_LAYERS)
    method = k.text("topk_method", "noaux_tc" if k.model_type == "deepseek_v3" else "greedy",
                    "absent: the model_type's default")
    return MoE(experts, top_k, ffn, shared, 0, dense, every, router_bias=method == "noaux_tc")


def _deepseek(k: _Keys) -> Shape:
    d, layers = k.size("hidden_size"), k.size("num_hidden_layers", limit=MAX_LAYERS)
    vocab, heads = k.size("vocab_size"), k.size("num_attention_heads")
    mla = MLA(k.size("q_lora_rank", nullable=True), k.size("kv_lora_rank"), k.size("qk_nope_head_dim"),
              k.size("qk_rope_head_dim"), k.size("v_head_dim"))
    bias = k.flag("attention_bias", False, "absent: no attention biases")
    tied = k.flag("tie_word_embeddings", False, "absent: the family's default")
    moe = _deepseek_moe(k, layers)
    dense = moe is None or moe.moe_blocks(layers) < layers  # intermediate_size is the dense blocks' MLP width
    return Shape(d, layers, vocab, k.size("intermediate_size") if dense else 0, heads, heads,
                 mla.qk_nope_head_dim + mla.qk_rope_head_dim, tied, qkv_bias=bias, o_bias=bias, moe=moe, mla=mla,
                 family=k.model_type)


FAMILIES: dict[str, Callable[[_Keys], Shape]] = {
    "gpt2": _gpt2, "llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "mixtral": _mixtral,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
}


# ---- the file --------------------------------------------------------------------------------------------------
def _load(path: str) -> dict:
    where = f"--config {path!a}"
    try:
        data = read_json_file(path, MAX_CONFIG_BYTES, "--config")
    except FileRefused as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where} is not a config: its JSON is {type(data).__name__}, not an object of keys")
    return data


def read_config(path: str) -> ConfigShape:
    """The shape of the model that the config file ``path`` describes; :class:`ConfigError` in one line."""
    where = f"--config {path!a}"
    data = _load(path)
    model_type = data.get("model_type")
    if model_type not in FAMILIES:
        what = "has no model_type" if model_type is None else f"has model_type {_short(model_type)}"
        raise ConfigError(f"{where} {what}: the known ones are {', '.join(FAMILIES)}")
    keys = _Keys(data, where, model_type)
    shape = FAMILIES[model_type](keys)
    used = set(keys.used) | {"model_type"}
    ignored = tuple(f"{key} ({NOTES[key]})" if key in NOTES else key for key in sorted(set(data) - used))
    return ConfigShape(shape, model_type, ("model_type", *keys.used), tuple(keys.defaults), ignored)
