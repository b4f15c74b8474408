"""The model and the data of the training runs (:mod:`numerics.train`, :mod:`numerics.study`).

Data: the running interpreter's standard library, read from disk (every machine with Python has it;
nothing is downloaded). :func:`corpus` is its ``.py`` source (test folders and ``pydoc_data`` left
out): files sorted by path, every tenth held out for validation, bytes above 127 mapped to one token.
:func:`prose_corpus` is a disjoint text set for fine-tuning: the English help topics that ``pydoc``
shows (``pydoc_data.topics``, the language reference's sections), about a tenth of it held out.

Model: a character-level decoder-only transformer in plain JAX: token and position embeddings,
``layers`` pre-RMSNorm blocks (causal attention with ``kv_heads`` key/value heads shared by groups of
query heads, a GELU MLP of width ``4d``), a final norm and an untied output head. The attention weights
use the stored layouts of the derived rules: ``W_Q (L, d, H·d_h)``, ``W_K (L, d, H_kv·d_h)``,
``W_O (L, d, H·d_h)``, ``W_V (L, H_kv·d_h, d)`` (``v = x @ W_Vᵀ``, ``y = o @ W_Oᵀ``); the MLP's
``w1 (L, d, 4d)`` and ``w2 (L, 4d, d)`` act as ``x @ W``.

LoRA (:func:`init_lora`, :func:`merge_lora`): every one of the six matrices of every layer gets an
adapter ``W₀ + B A`` in peft's layout, ``A (L, r, d_in)`` and ``B (L, d_out, r)`` named ``lora_A`` and
``lora_B`` (``B`` starts at 0), so :func:`numerics.optimizer.auto_lora_pairs` finds the pairs by name.
"""

from __future__ import annotations

import math
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from pydoc_data import topics as pydoc_topics

import jax
import jax.numpy as jnp
import numpy as np
import optax
from optax.contrib import MuonDimensionNumbers

from numerics.optimizer import LoRAPair, OVPair, QKPair, path_name

VOCAB = 128  # ASCII; bytes above 127 map to 127
#: the matrices of a block, with their ``(d_out, d_in)`` as multiples of ``(d, H·d_h, H_kv·d_h)`` read by
#: :func:`matrix_shapes`; ``True``: stored in × out, used as ``x @ W`` ``(d_in, d_out)``
X_AT_W = {"wq": True, "wk": True, "wv": False, "wo": False, "w1": True, "w2": True}
LORA_TARGETS = tuple(X_AT_W)
#: what the Muon family updates with its AdamW part: embeddings, output head, and the RMSNorm gains (stacked
#: over layers they have two axes, but they are vectors, not linear maps)
ADAMW_PARAMS = ("embed", "pos", "head", "layers/norm1", "layers/norm2", "norm_f")


@dataclass(frozen=True)
class Config:
    """Model and data sizes (``head_dim = width // heads``)."""

    width: int = 64
    heads: int = 4
    kv_heads: int = 4
    layers: int = 2
    context: int = 64
    batch: int = 16

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


# ---- data -----------------------------------------------------------------------------------
def stdlib_root() -> Path:
    """The running interpreter's standard-library folder (the corpus: on every machine, nothing downloaded)."""
    return Path(sysconfig.get_paths()["stdlib"])


def code_files() -> list[Path]:
    """The standard library's ``.py`` files, sorted by path: no test folders, no ``site-packages``, no
    ``pydoc_data`` (its topics are the prose set)."""
    root = stdlib_root()
    files = sorted(p for p in root.rglob("*.py")
                   if not {"site-packages", "test", "tests", "pydoc_data"} & set(p.relative_to(root).parts))
    if not files:
        raise RuntimeError(f"no .py files under the standard library at {root}")
    return files


def encode(data: bytes) -> np.ndarray:
    """Bytes as tokens: ASCII codes, everything above 127 mapped to 127."""
    return np.minimum(np.frombuffer(data, dtype=np.uint8), VOCAB - 1).astype(np.int32)


def corpus(max_bytes: int = 4_000_000) -> tuple[np.ndarray, np.ndarray]:
    """``(train, validation)`` token arrays from the standard library's ``.py`` files (every tenth file held
    out), reading files in path order until ``max_bytes`` bytes are in."""
    train: list[np.ndarray] = []
    val: list[np.ndarray] = []
    size = 0
    for i, path in enumerate(code_files()):
        try:
            data = encode(path.read_bytes())
        except OSError:
            continue
        (val if i % 10 == 9 else train).append(data)
        size += data.size
        if size >= max_bytes and val:
            break
    return np.concatenate(train), np.concatenate(val)


def prose_corpus() -> tuple[np.ndarray, np.ndarray]:
    """``(train, validation)`` tokens of ``pydoc``'s help topics (English prose from the language reference), a
    text set disjoint from :func:`corpus`: topics in name order, each held out when the held-out share of the
    characters so far stays at most 10 % with it."""
    texts = [encode(pydoc_topics.topics[k].encode("utf-8")) for k in sorted(pydoc_topics.topics)]
    if len(texts) < 20:
        raise RuntimeError(f"pydoc_data.topics has {len(texts)} topics; expected the standard library's ~90")
    train: list[np.ndarray] = []
    val: list[np.ndarray] = []
    n_train = n_val = 0
    for t in texts:
        if n_val + t.size <= 0.1 * (n_train + n_val + t.size):
            val.append(t)
            n_val += t.size
        else:
            train.append(t)
            n_train += t.size
    return np.concatenate(train), np.concatenate(val)


def batches(tokens: np.ndarray, cfg: Config, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless random windows ``(inputs, targets)`` of shape ``(batch, context)``."""
    if tokens.size < cfg.context + 2:
        raise ValueError(f"{tokens.size} tokens are too few for windows of {cfg.context + 1}")
    rng = np.random.default_rng(seed)
    while True:
        start = rng.integers(0, tokens.size - cfg.context - 1, size=cfg.batch)
        idx = start[:, None] + np.arange(cfg.context + 1)
        window = tokens[idx]
        yield window[:, :-1], window[:, 1:]


def fixed_batches(tokens: np.ndarray, cfg: Config, count: int, seed: int = 1234) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` windows drawn once (validation: the same batches for every run)."""
    gen = batches(tokens, cfg, seed)
    return [next(gen) for _ in range(count)]


# ---- model ----------------------------------------------------------------------------------
def matrix_shapes(cfg: Config) -> dict[str, tuple[int, int]]:
    """``{name: (d_out, d_in)}`` of a block's six matrices, as linear maps."""
    d, q, kv = cfg.width, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    return {"wq": (q, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, q), "w1": (4 * d, d), "w2": (d, 4 * d)}


def init_params(cfg: Config, seed: int) -> dict:
    """Gaussian init with standard deviation ``1/√fan_in``; norms start at 1. Drawn with NumPy's generator
    (``seed``): the same numbers on every backend, and no compilation."""
    d, L = cfg.width, cfg.layers
    rng = np.random.default_rng(seed)

    def normal(shape, fan_in):
        return jnp.asarray(rng.standard_normal(shape, np.float32) / np.float32(math.sqrt(fan_in)))

    embed, pos = normal((VOCAB, d), 1.0) * 0.02, normal((cfg.context, d), 1.0) * 0.02
    layers = {"norm1": jnp.ones((L, d), jnp.float32), "norm2": jnp.ones((L, d), jnp.float32)}
    for name, (d_out, d_in) in matrix_shapes(cfg).items():
        layers[name] = normal((L, d_in, d_out) if X_AT_W[name] else (L, d_out, d_in), d_in)
    return {"embed": embed, "pos": pos, "layers": layers, "norm_f": jnp.ones((d,), jnp.float32),
            "head": normal((d, VOCAB), d)}


def attention_pairs(cfg: Config) -> Callable[[dict], list]:
    """The pair declaration for :func:`numerics.optimizer.compositional_muon`."""

    def pairs(params):
        del params
        return [QKPair("layers/wq", "layers/wk", cfg.heads, cfg.kv_heads),
                OVPair("layers/wo", "layers/wv", cfg.heads, cfg.kv_heads)]

    return pairs


def _rms_norm(x, scale):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def forward(params: dict, tokens: jax.Array, cfg: Config) -> jax.Array:
    """Logits ``(batch, context, VOCAB)`` of the causal model. The layers are unrolled (on the CPU their
    backward pass runs about 1.4 times faster than under ``lax.scan``)."""
    B, T = tokens.shape
    hd, H, Hkv = cfg.head_dim, cfg.heads, cfg.kv_heads
    x = params["embed"][tokens] + params["pos"][:T]
    mask = jnp.tril(jnp.ones((T, T), bool))
    lay = params["layers"]
    for i in range(cfg.layers):
        h = _rms_norm(x, lay["norm1"][i])
        q = (h @ lay["wq"][i]).reshape(B, T, Hkv, H // Hkv, hd)  # query head h = k·G + g uses kv head k = h // G
        k = (h @ lay["wk"][i]).reshape(B, T, Hkv, hd)
        v = (h @ lay["wv"][i].T).reshape(B, T, Hkv, hd)
        s = jnp.einsum("btkgd,bskd->bkgts", q, k) / math.sqrt(hd)
        a = jax.nn.softmax(jnp.where(mask, s, -1e30), axis=-1)
        o = jnp.einsum("bkgts,bskd->btkgd", a, v).reshape(B, T, H * hd)
        x = x + o @ lay["wo"][i].T
        h = _rms_norm(x, lay["norm2"][i])
        x = x + jax.nn.gelu(h @ lay["w1"][i]) @ lay["w2"][i]
    return _rms_norm(x, params["norm_f"]) @ params["head"]


def loss_fn(params: dict, inputs: jax.Array, targets: jax.Array, cfg: Config) -> jax.Array:
    """Mean next-character cross-entropy (nats)."""
    logits = forward(params, inputs, cfg)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def muon_dims(params):
    """optax.contrib.muon dimension numbers: matrices (stacked over layers) → Muon; :data:`ADAMW_PARAMS` (gains,
    embeddings, the output head) → AdamW. ``W_O`` and ``W_V`` act as ``x @ Wᵀ``: their last axis is the input."""

    def dims(path, x):
        name = path_name(path)
        if x.ndim < 2 or name in ADAMW_PARAMS:
            return None
        if name in ("layers/wo", "layers/wv"):
            return MuonDimensionNumbers(reduction_axis=x.ndim - 1, output_axis=x.ndim - 2)
        return MuonDimensionNumbers(reduction_axis=x.ndim - 2, output_axis=x.ndim - 1)

    return jax.tree_util.tree_map_with_path(dims, params)


# ---- LoRA -----------------------------------------------------------------------------------
def init_lora(cfg: Config, rank: int, seed: int) -> dict:
    """Adapters for the six matrices of every layer: ``{name: {"lora_A": (L, r, d_in), "lora_B": (L, d_out, r)}}``,
    ``A`` Gaussian with standard deviation ``1/√d_in`` (NumPy's generator, ``seed``), ``B = 0`` (peft's start: the
    adapted model is the base)."""
    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank}")
    rng = np.random.default_rng(seed)
    out = {}
    for name, (d_out, d_in) in matrix_shapes(cfg).items():
        a = rng.standard_normal((cfg.layers, rank, d_in), np.float32) / np.float32(math.sqrt(d_in))
        out[name] = {"lora_A": jnp.asarray(a), "lora_B": jnp.zeros((cfg.layers, d_out, rank), jnp.float32)}
    return out


def merge_lora(base: dict, lora: dict) -> dict:
    """The base parameters with every adapted matrix replaced by ``W₀ + B A`` (in its stored layout)."""
    layers = dict(base["layers"])
    for name, ab in lora.items():
        delta = ab["lora_B"] @ ab["lora_A"]  # (L, d_out, d_in)
        layers[name] = layers[name] + (jnp.swapaxes(delta, -1, -2) if X_AT_W[name] else delta)
    return {**base, "layers": layers}


def lora_loss_fn(lora: dict, base: dict, inputs: jax.Array, targets: jax.Array, cfg: Config) -> jax.Array:
    """:func:`loss_fn` of the adapted model (the gradient is taken with respect to ``lora`` only)."""
    return loss_fn(merge_lora(base, lora), inputs, targets, cfg)


def lora_pairs(lora: dict) -> list[LoRAPair]:
    """The LoRA pairs of :func:`init_lora`'s adapters for :func:`numerics.optimizer.compositional_muon`."""
    return [LoRAPair(f"{name}/lora_B", f"{name}/lora_A") for name in lora]


def lora_muon_dims(lora: dict):
    """optax.contrib.muon dimension numbers for the adapters: ``A`` and ``B`` both act as ``W @ x``."""
    return jax.tree.map(lambda x: MuonDimensionNumbers(reduction_axis=x.ndim - 1, output_axis=x.ndim - 2), lora)
