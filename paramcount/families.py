"""The parameter tensors of the mainstream decoder families, from their shapes: exact integers.

:class:`Shape` describes one model; :func:`tensors` lists every named tensor of one block (``per_layer``) and of
the model around the blocks; the total is the sum of their sizes (:func:`count`), and with experts the parameters
one token uses (:func:`active_count`). What a family adds to the Llama-3 block (``W_Q, W_K, W_V, W_O`` with
grouped-query attention, a SwiGLU MLP, two RMSNorm gains, an embedding, a final gain and an untied head):

* GPT-2 (Radford et al. 2019): biases on every projection, LayerNorm (a gain and a shift), an ungated MLP
  (``d_ff = 4d`` by default), learned positions (``n_positions × d``) and tied embeddings;
* Qwen2 (Qwen team 2024): biases on ``W_Q, W_K, W_V`` only (none on ``W_O``), tied or untied embeddings;
* a mixture of experts (Mixtral, DeepSeekMoE): per MoE block a router ``d × E`` (DeepSeek-V3 adds a per-expert
  score-correction bias), ``E`` routed SwiGLU experts stored stacked (``E × d × f``), of which ``top_k`` work for a
  token, and shared experts that every token uses (one SwiGLU MLP of width ``shared × f``); the first
  ``dense_layers`` blocks (DeepSeek's ``first_k_dense_replace``) keep a dense MLP of width ``ffn``;
* multi-head latent attention (DeepSeek-V2/V3), in the layout of :mod:`derivations.mla` (rows are outputs):
  ``wq_a`` (``c_q × d``) and its RMSNorm gain, ``wq_b`` (``H (d_nope + d_rope) × c_q``) — or one ``wq``
  (``H (d_nope + d_rope) × d``) without query compression —, ``wkv_a`` (``(c_kv + d_rope) × d``: the KV latent
  and the one RoPE key every head shares) and its gain, ``wkv_b`` (``H (d_nope + d_v) × c_kv``), ``wo``
  (``d × H d_v``). With ``attention_bias`` (Hugging Face's DeepSeek code) ``wq_a``, ``wkv_a`` and ``wo`` get biases.

The active count of a token is every tensor outside the experts (embeddings and router included), ``top_k`` of
the routed experts and all shared experts. :class:`Conventions` describes how a hand count departs from the model
(``--compare`` searches them); by default it departs in nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoE:
    """The mixture-of-experts MLP of a model (the MoE blocks; the others keep the dense MLP)."""

    experts: int  # routed experts E
    top_k: int  # routed experts per token
    expert_ffn: int  # each routed expert's MLP width f
    shared: int = 0  # shared experts, used by every token
    shared_ffn: int = 0  # the shared MLP's width (0: shared × expert_ffn)
    dense_layers: int = 0  # the first blocks keep a dense MLP (DeepSeek's first_k_dense_replace)
    every: int = 1  # block i ≥ dense_layers is MoE when i % every == 0 (DeepSeek's moe_layer_freq)
    router_bias: bool = False  # a per-expert score-correction bias (DeepSeek-V3's e_score_correction_bias)

    def moe_blocks(self, layers: int) -> int:
        """How many of ``layers`` blocks are MoE blocks."""
        first = -(-self.dense_layers // self.every) * self.every  # the first multiple of every ≥ dense_layers
        return len(range(first, layers, self.every))


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): the latent ranks and the head widths."""

    q_lora_rank: int | None  # None: no query compression (one wq)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Shape:
    """The hyperparameters of a decoder (a Llama-3 block by default)."""

    hidden: int
    layers: int
    vocab: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    tied_embeddings: bool = False
    qkv_bias: bool = False  # biases on W_Q, W_K, W_V (Qwen2, GPT-2)
    o_bias: bool = False  # a bias on W_O (GPT-2)
    mlp_bias: bool = False  # biases on the MLP projections (GPT-2)
    layer_norm: bool = False  # LayerNorm (gain and shift) instead of RMSNorm (gain only)
    gated_mlp: bool = True  # SwiGLU's three matrices; False: two (GPT-2)
    positions: int = 0  # learned position embeddings (GPT-2's n_positions); 0: none (RoPE)
    moe: MoE | None = None
    mla: MLA | None = None
    family: str = "llama"


@dataclass(frozen=True)
class Conventions:
    """How a count departs from the model; every default (``None``: as the model says) departs in nothing."""

    qkv_biases: bool | None = None
    o_bias: bool | None = None
    mlp_biases: bool | None = None
    norm_shifts: bool | None = None  # LayerNorm shifts next to every block and final norm gain
    gated_mlp: bool | None = None
    tied: bool | None = None
    final_norm: bool = True
    gqa: bool = True  # K and V have kv_heads heads; False counts them like Q
    ffn_4d: bool = False  # the dense MLP is 4d wide instead of the model's
    embeddings: bool = True
    embedding_active: bool = True  # False: the input lookup not counted as active (an untied table)
    norms: bool = True
    positions: bool = True
    shared_experts: bool = True
    shared_as_routed: bool = False  # the shared experts counted as routed ones: not active for every token
    router: bool = True
    router_bias: bool = True
    dense_layers: bool = True  # False: every block counted as a MoE block
    all_experts_active: bool = False
    latent_norms: bool = True  # MLA's gains on the query and KV latents
    rope_dims: bool = True  # MLA's decoupled RoPE query and key parts
    rope_key_per_head: bool = False  # MLA's shared RoPE key counted once per head


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple
    per_layer: bool
    blocks: int | None = None  # per_layer: how many blocks hold it (None: every block)
    active: int | None = None  # elements one token uses (None: all of them)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def active_size(self) -> int:
        return self.size if self.active is None else self.active

    def copies(self, layers: int) -> int:
        """How many times the model holds it: once, or once per block that has it."""
        if not self.per_layer:
            return 1
        return layers if self.blocks is None else self.blocks


@dataclass(frozen=True)
class _Resolved:
    """The model's features after the conventions."""

    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    norm_shifts: bool
    gated: bool
    tied: bool


def _pick(model: bool, convention: bool | None) -> bool:
    return model if convention is None else convention


def _resolve(shape: Shape, conv: Conventions) -> _Resolved:
    return _Resolved(_pick(shape.qkv_bias, conv.qkv_biases), _pick(shape.o_bias, conv.o_bias),
                     _pick(shape.mlp_bias, conv.mlp_biases), _pick(shape.layer_norm, conv.norm_shifts),
                     _pick(shape.gated_mlp, conv.gated_mlp), _pick(shape.tied_embeddings, conv.tied))


def tensors(shape: Shape, conv: Conventions = Conventions()) -> list[Tensor]:
    """Every parameter tensor of one block (``per_layer``) and of the model around the blocks."""
    r = _resolve(shape, conv)
    return [*_attention(shape, conv, r), *_mlps(shape, conv, r), *_norms(shape, conv, r),
            *_embeddings(shape, conv, r)]


def count(shape: Shape, conv: Conventions = Conventions()) -> int:
    """Total number of parameters: every tensor times the number of blocks that hold it.

    Examples:
      Llama-3-8B (``d = 4096``, 32 layers, 32 query heads sharing 8 key/value heads):

      >>> from paramcount.count import Shape, count
      >>> count(Shape(hidden=4096, layers=32, vocab=128256, ffn=14336, heads=32, kv_heads=8, head_dim=128))
      8030261248
    """
    return sum(t.size * t.copies(shape.layers) for t in tensors(shape, conv))


def active_count(shape: Shape, conv: Conventions = Conventions()) -> int:
    """Parameters one token uses: all but the routed experts a token is not sent to (the total without experts)."""
    return sum(t.active_size * t.copies(shape.layers) for t in tensors(shape, conv))


# ---- the parts of a block --------------------------------------------------------------------------------------
def _attention(shape: Shape, conv: Conventions, r: _Resolved) -> list[Tensor]:
    if shape.mla is not None:
        return mla_tensors(shape, conv, r)
    d, dh = shape.hidden, shape.head_dim
    q_width = shape.heads * dh
    kv_width = (shape.kv_heads if conv.gqa else shape.heads) * dh
    out = [Tensor("W_Q", (d, q_width), True), Tensor("W_K", (d, kv_width), True),
           Tensor("W_V", (d, kv_width), True), Tensor("W_O", (q_width, d), True)]
    if r.qkv_bias:
        out += [Tensor("b_Q", (q_width,), True), Tensor("b_K", (kv_width,), True), Tensor("b_V", (kv_width,), True)]
    if r.o_bias:
        out.append(Tensor("b_O", (d,), True))
    return out


def mla_tensors(shape: Shape, conv: Conventions = Conventions(), r: _Resolved | None = None) -> list[Tensor]:
    """The attention tensors of one multi-head latent attention block (DeepSeek layout, rows are outputs)."""
    m, d, h = shape.mla, shape.hidden, shape.heads
    if m is None:
        raise ValueError("the shape has no multi-head latent attention (Shape.mla is None)")
    r = r or _resolve(shape, conv)
    rope = m.qk_rope_head_dim if conv.rope_dims else 0
    qk = m.qk_nope_head_dim + rope
    key_rope = rope * (h if conv.rope_key_per_head else 1)
    gains = conv.norms and conv.latent_norms
    if m.q_lora_rank is None:
        out = [Tensor("wq", (h * qk, d), True)]
    else:
        c_q = m.q_lora_rank
        out = [Tensor("wq_a", (c_q, d), True), *([Tensor("bq_a", (c_q,), True)] if r.qkv_bias else []),
               *([Tensor("q_a_norm.gain", (c_q,), True)] if gains else []), Tensor("wq_b", (h * qk, c_q), True)]
    c_kv = m.kv_lora_rank
    out += [Tensor("wkv_a", (c_kv + key_rope, d), True),
            *([Tensor("bkv_a", (c_kv + key_rope,), True)] if r.qkv_bias else []),
            *([Tensor("kv_a_norm.gain", (c_kv,), True)] if gains else []),
            Tensor("wkv_b", (h * (m.qk_nope_head_dim + m.v_head_dim), c_kv), True),
            Tensor("wo", (d, h * m.v_head_dim), True), *([Tensor("bo", (d,), True)] if r.o_bias else [])]
    return out


def _mlp(prefix: str, d: int, ffn: int, r: _Resolved, *, blocks: int | None = None, experts: int | None = None,
         active: tuple[int, int] | None = None) -> list[Tensor]:
    """One MLP (or ``experts`` of them stacked): ``W_gate, W_up`` (``d × ffn``), ``W_down`` and their biases;
    ``active = (k, n)``: a token uses ``k/n`` of each tensor."""
    lead = () if experts is None else (experts,)

    def tensor(name, dims):
        t = Tensor(prefix + name, lead + dims, True, blocks)
        return t if active is None else Tensor(t.name, t.shape, True, blocks, t.size // active[1] * active[0])

    ins = ["W_gate", "W_up"] if r.gated else ["W_up"]
    out = [tensor(n, (d, ffn)) for n in ins] + [tensor("W_down", (ffn, d))]
    if r.mlp_bias:
        out += [tensor(n.replace("W_", "b_"), (ffn,)) for n in ins] + [tensor("b_down", (d,))]
    return out


def _mlps(shape: Shape, conv: Conventions, r: _Resolved) -> list[Tensor]:
    moe, d = shape.moe, shape.hidden
    n_moe = 0 if moe is None else shape.layers if not conv.dense_layers else moe.moe_blocks(shape.layers)
    n_dense = shape.layers - n_moe
    out = []
    if n_dense:
        out += _mlp("", d, 4 * d if conv.ffn_4d else shape.ffn, r, blocks=None if n_moe == 0 else n_dense)
    if moe is None or not n_moe:
        return out
    blocks = None if n_moe == shape.layers else n_moe
    if conv.router:
        out.append(Tensor("router", (d, moe.experts), True, blocks))
        if moe.router_bias and conv.router_bias:
            out.append(Tensor("router.score_bias", (moe.experts,), True, blocks))
    routed = None if conv.all_experts_active else (moe.top_k, moe.experts)
    out += _mlp("experts.", d, moe.expert_ffn, r, blocks=blocks, experts=moe.experts, active=routed)
    if moe.shared and conv.shared_experts:
        width = moe.shared_ffn or moe.shared * moe.expert_ffn
        out += _mlp("shared_experts.", d, width, r, blocks=blocks, active=(0, 1) if conv.shared_as_routed else None)
    return out


def _norms(shape: Shape, conv: Conventions, r: _Resolved) -> list[Tensor]:
    if not conv.norms:
        return []
    d = shape.hidden
    out = [Tensor("attention_norm.gain", (d,), True), Tensor("mlp_norm.gain", (d,), True)]
    if r.norm_shifts:
        out += [Tensor("attention_norm.shift", (d,), True), Tensor("mlp_norm.shift", (d,), True)]
    if conv.final_norm:
        out.append(Tensor("final_norm.gain", (d,), False))
        if r.norm_shifts:
            out.append(Tensor("final_norm.shift", (d,), False))
    return out


def _embeddings(shape: Shape, conv: Conventions, r: _Resolved) -> list[Tensor]:
    if not conv.embeddings:
        return []
    d, v = shape.hidden, shape.vocab
    lookup_only = not r.tied and not conv.embedding_active  # a lookup multiplies nothing; a tied table is the head
    out = [Tensor("embedding", (v, d), False, active=0 if lookup_only else None)]
    if shape.positions and conv.positions:
        out.append(Tensor("position_embedding", (shape.positions, d), False))
    if not r.tied:
        out.append(Tensor("output_head", (d, v), False))
    return out
