"""Multi-head latent attention (DeepSeek-V2/V3): compositional rules for the score and value–output circuits.

Layout (DeepSeek-V2/V3 names; ``d`` model width, ``H`` heads, ``c_q``/``c_kv`` the query/KV latent
widths, ``d_h`` the non-RoPE and ``d_R`` the RoPE head width, ``d_v`` the value head width):

* ``wq_a = W_DQ`` (``c_q × d``): down-projection to the query latent, shared by all heads;
* ``wq_b``: per head ``Û_Q = [W_UQ; W_QR]`` (``(d_h + d_R) × c_q``), the content and the decoupled RoPE
  query up-projections, stored together;
* ``wkv_a = D̂ = [W_DKV; W_KR]`` (``(c_kv + d_R) × d``): the KV latent and the RoPE key (shared by all heads);
* ``wkv_b``: per head ``W_UK`` (``d_h × c_kv``) and ``W_UV`` (``d_v × c_kv``);
* ``wo``: per head ``W_O`` (``d × d_v``).

Head ``h``'s query and key maps are ``Q̂ = Û_Q W_DQ`` and ``K̂ = [W_UK W_DKV; W_KR]`` (both
``(d_h + d_R) × d``); its score circuit is ``M = Q̂ᵀ R(τ) K̂`` (``d × d``) with the RoPE rotation ``R(τ)`` of the
relative position ``τ`` on the ``d_R`` RoPE coordinates: a product of four factors,
``W_DQᵀ Û_Qᵀ · blockdiag(W_UK, I) D̂``, whose down-projections are shared by all heads. Its value–output
circuit is ``V = W_O W_UV W_DKV`` (``d × d``), three factors, ``W_DKV`` shared again.

What is optimized. Every factor moves; each term of the first-order change of a head's circuit gets a
share of a per-head budget ``ε``: ``ε/4`` for each of the four score factors, ``ε/3`` for each of the
three value–output factors, so to first order ``‖ΔM‖_op ≤ ε`` and ``‖ΔV‖_op ≤ ε`` for every head. Each
rule is found by :func:`derivations.derive` from ``min ⟨G, term⟩ s.t. ‖term‖_op ≤ share`` (``G`` the
circuit's loss gradient, never formed; the stored factor gradient comes from the chain rule):

* ``mla.query_up`` (per head, ``Û_Q``): term ``K̂ᵀ ΔÛ_Q W_DQ``, whitened on both sides,
  ``ΔÛ_Q = −(ε/4) C_K̂⁻¹ msign(C_K̂⁻¹ G_UQ C_DQ⁻¹) C_DQ⁻¹``, ``C_K̂ = (K̂K̂ᵀ)^{1/2}``, ``C_DQ = (W_DQ W_DQᵀ)^{1/2}``:
  the content and RoPE rows of the head move together;
* ``mla.key_up`` (per head, ``W_UK``): term ``E_Qᵀ ΔW_UK W_DKV`` with ``E_Q = W_UQ W_DQ`` (the content rows of
  ``Q̂``: only they meet ``W_UK``);
* ``mla.query_down`` (shared ``W_DQ``): every head's term ``K̂_hᵀ Û_{Q,h} ΔW_DQ`` within ``ε/4``, restricted to
  the stacked partner ``P_Q = [K̂_hᵀ Û_{Q,h}]_h`` (``H d × c_q``): ``‖P_Q ΔW_DQ‖_op ≤ ε/4`` implies every head's
  bound (Lemma K, ``max_h ‖X_h‖ ≤ ‖X‖``);
* ``mla.kv_down`` (shared ``wkv_a``): the score terms ``Q̂_hᵀ blockdiag(W_{UK,h}, I) ΔD̂`` and the value terms
  ``W_{O,h} [W_{UV,h} 0] ΔD̂`` of every head, stacked into ``P_KV`` (``2H d × (c_kv + d_R)``), budget ``ε/4``
  (the value terms get ``ε/4 ≤ ε/3``: conservative; scale their rows by ``3/4`` to give them exactly ``ε/3``);
* ``mla.value_up`` (per head, ``W_UV``): term ``W_O ΔW_UV W_DKV``, budget ``ε/3``;
* ``mla.output`` (per head, ``W_O``): term ``ΔW_O E_V``, ``E_V = W_UV W_DKV``, budget ``ε/3`` (head-local, unlike
  the hybrid OV rule's global sign of the output projection).

Without query compression (DeepSeek-V2-Lite, ``q_lora_rank = None``) the query is one dense per-head map
``wq`` (``H (d_h + d_R) × d``), ``Q̂ = W_Q`` per head: the score circuit ``W_Qᵀ blockdiag(W_UK, I) D̂`` has three
factors, each term within ``ε/3``, and the value–output circuit is unchanged:

* ``mla.query_uncompressed`` (per head, ``W_Q``): term ``K̂ᵀ ΔW_Q``, ``ΔW_Q = −(ε/3) C_K̂⁻¹ msign(C_K̂⁻¹ G_Q)``;
* ``mla.key_up_uncompressed``: as ``mla.key_up`` at budget ``ε/3`` (``E_Q`` the content rows of ``W_Q``);
* ``mla.kv_down_uncompressed``: as ``mla.kv_down`` at budget ``ε/3``, now exactly the share of both the score
  and the value terms of ``wkv_a``.

The shared rules depend on their stacked partner only through its Gram matrix, so any ``P'`` with
``P'ᵀP' = PᵀP`` gives the same update: :func:`partners` builds the compact ``[C_K̂_h Û_{Q,h}]_h``
(``H (d_h + d_R) × c_q``, the size of ``wq_b``) instead of the ``H d``-row one (checked by ``--check``).

Not modelled, stated plainly: (1) RoPE. The rules whiten with the circuit at ``τ = 0`` (``R = I``). ``R(τ)`` is
orthogonal but does not commute with the Gram roots, so at ``τ ≠ 0`` a term's norm can exceed its share;
``--check`` measures the worst ratio over positions on random weights. (2) The latent RMSNorms
(``q_a_layernorm``, ``kv_a_layernorm``): their per-token scale is data-dependent; the circuit is the linear
map with the norms taken as the identity (a learned gain can be folded into the up-projection).
(3) The softmax scale ``1/√(d_h + d_R)`` is a constant factor of the budget.

Run ``python -m derivations.mla --help``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import scipy.linalg
from sympy import Rational
from sympy.matrices.expressions import MatrixSymbol

from derivations import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    Context,
    EmittedFunction,
    FactMatrix,
    Inner,
    OpNorm,
    Problem,
    RuleModule,
    derive,
    dimension,
    positive_symbol,
    product,
    transpose,
)
from derivations.vocabulary.evaluate import evaluate_on
from foundation.compute.numpy_routines import gram_eigh, psd_power

d, c_q, c_kv, c_kvr = dimension("d"), dimension("c_q"), dimension("c_kv"), dimension("c_kvr")
q_w, d_h, d_v, n = dimension("d_qk"), dimension("d_h"), dimension("d_v"), dimension("n")  # d_qk = d_h + d_R
eps = positive_symbol("epsilon")
SCORE_SHARE, VALUE_SHARE = eps * Rational(1, 4), eps * Rational(1, 3)
SCORE_SHARE_UNCOMPRESSED = VALUE_SHARE  # no query compression: three score factors, each ε/3

# partners (each a full-rank map; named, computed from the stored weights by ``partners``)
K_hat = FactMatrix("K_hat", q_w, d, [FULL_ROW_RANK])  # the head's key map [W_UK W_DKV; W_KR]
W_DQ = FactMatrix("W_DQ", c_q, d, [FULL_ROW_RANK])  # wq_a
E_Q = FactMatrix("E_Q", d_h, d, [FULL_ROW_RANK])  # the head's content query map W_UQ W_DQ
W_DKV = FactMatrix("W_DKV", c_kv, d, [FULL_ROW_RANK])  # the KV-latent rows of wkv_a
W_O = FactMatrix("W_O", d, d_v, [FULL_COLUMN_RANK])  # the head's block of wo
E_V = FactMatrix("E_V", d_v, d, [FULL_ROW_RANK])  # the head's value map W_UV W_DKV
P_Q = FactMatrix("P_Q", n, c_q, [FULL_COLUMN_RANK])  # stacked [K̂_hᵀ Û_{Q,h}]_h (or any P with its Gram)
P_KV = FactMatrix("P_KV", n, c_kvr, [FULL_COLUMN_RANK])  # stacked score and value rows of every head

# circuit gradients (never formed) and the stored factor gradients
G_S = MatrixSymbol("G_S", d, d)  # ∂L/∂(K̂ᵀ Q̂): the score circuit, key side on the left
G_M = MatrixSymbol("G_M", d, d)  # ∂L/∂(Q̂ᵀ K̂): the score circuit
G_V = MatrixSymbol("G_V", d, d)  # ∂L/∂(W_O W_UV W_DKV): the value–output circuit
G_SQ = MatrixSymbol("G_SQ", n, d)  # the heads' G_S stacked (query-latent side)
G_SKV = MatrixSymbol("G_SKV", n, d)  # the heads' score and value gradients stacked (KV side)
G_UQ, G_UK = MatrixSymbol("G_UQ", q_w, c_q), MatrixSymbol("G_UK", d_h, c_kv)
G_Q = MatrixSymbol("G_Q", q_w, d)  # the head's rows of wq's gradient (no query compression)
G_UV, G_O = MatrixSymbol("G_UV", d_v, c_kv), MatrixSymbol("G_O", d, d_v)
G_DQ, G_DKV = MatrixSymbol("G_DQ", c_q, d), MatrixSymbol("G_DKV", c_kvr, d)


def _context(definitions, dims) -> Context:
    """Check sizes: the given ones (float64; mpmath at the first), and symbolic checks at the smallest sizes with
    every dimension at least 2 (``d = 3``, ``n = 4``)."""
    small = {k: (3 if k == d else 4 if k == n else 2) for k in dims[0]}
    return Context(definitions=definitions, check_dims=dims, mpmath_dims=dims[0], symbolic_dims=small)


def _middle(name, title, left, variable, right, gradient, loss, share, statement):
    """``min ⟨loss, L ΔX R⟩ s.t. ‖L ΔX R‖_op ≤ share`` with ``gradient = Lᵀ loss Rᵀ`` (chain rule), by search."""
    change = product(left, variable, right)
    dims = {"query_up": [{d: 7, q_w: 3, c_q: 4}, {d: 6, q_w: 2, c_q: 2}],
            "key_up": [{d: 7, d_h: 2, c_kv: 3}, {d: 5, d_h: 3, c_kv: 4}],
            "value_up": [{d: 7, d_v: 2, c_kv: 3}, {d: 5, d_v: 3, c_kv: 4}]}[name.split(".")[1].split("_un")[0]]
    ctx = _context({gradient: product(transpose(left), loss, transpose(right))}, dims)
    return derive(Problem(variable, Inner(loss, change), OpNorm(change), share), ctx, name=name, title=title,
                  statement=statement)


@cache
def query_up():
    """``ΔÛ_Q = −(ε/4) C_K̂⁻¹ msign(C_K̂⁻¹ G_UQ C_DQ⁻¹) C_DQ⁻¹``: one head's query up-projection
    (content and RoPE rows)."""
    return _middle("mla.query_up", "MLA score circuit: query up-projection (one head)", transpose(K_hat),
                   MatrixSymbol("dU_Q", q_w, c_q), W_DQ, G_UQ, G_S, SCORE_SHARE,
                   "‖K̂ᵀ ΔÛ_Q W_DQ‖_op ≤ ε/4: the query up-projection's term of the head's score circuit")


@cache
def key_up():
    """``ΔW_UK = −(ε/4) C_EQ⁻¹ msign(C_EQ⁻¹ G_UK C_DKV⁻¹) C_DKV⁻¹``: one head's key up-projection."""
    return _middle("mla.key_up", "MLA score circuit: key up-projection (one head)", transpose(E_Q),
                   MatrixSymbol("dW_UK", d_h, c_kv), W_DKV, G_UK, G_M, SCORE_SHARE,
                   "‖E_Qᵀ ΔW_UK W_DKV‖_op ≤ ε/4: the key up-projection's term of the head's score circuit")


@cache
def value_up():
    """``ΔW_UV = −(ε/3) C_O⁻¹ msign(C_O⁻¹ G_UV C_DKV⁻¹) C_DKV⁻¹``: one head's value up-projection."""
    return _middle("mla.value_up", "MLA value–output circuit: value up-projection (one head)", W_O,
                   MatrixSymbol("dW_UV", d_v, c_kv), W_DKV, G_UV, G_V, VALUE_SHARE,
                   "‖W_O ΔW_UV W_DKV‖_op ≤ ε/3: the value up-projection's term of the head's value–output circuit")


@cache
def output():
    """``ΔW_O = −(ε/3) msign(G_O C_EV⁻¹) C_EV⁻¹``: one head's block of the output projection."""
    dw = MatrixSymbol("dW_O", d, d_v)
    change = product(dw, E_V)
    ctx = _context({G_O: product(G_V, transpose(E_V))}, [{d: 7, d_v: 3}, {d: 4, d_v: 4}])
    return derive(Problem(dw, Inner(G_V, change), OpNorm(change), VALUE_SHARE), ctx, name="mla.output",
                  title="MLA value–output circuit: output projection (one head)",
                  statement="‖ΔW_O E_V‖_op ≤ ε/3: the output projection's term of the head's value–output circuit")


def _shared(name, title, partner, variable, gradient, loss, statement, share=SCORE_SHARE, rows=n):
    """``min ⟨loss, P ΔD⟩ s.t. ‖P ΔD‖_op ≤ share`` for a stacked partner ``P`` (every head's rows), by search."""
    change = product(partner, variable)
    cols = partner.shape[1]
    sizes = [{d: 5, cols: 3, n: 10}, {d: 4, cols: 2, n: 8}] if rows == n else [{d: 7, cols: 3}, {d: 4, cols: 4}]
    ctx = _context({gradient: product(transpose(partner), loss)}, sizes)
    return derive(Problem(variable, Inner(loss, change), OpNorm(change), share), ctx, name=name, title=title,
                  statement=statement)


@cache
def query_down():
    """``ΔW_DQ = −(ε/4) C_PQ⁻¹ msign(C_PQ⁻¹ G_DQ)``: the shared query down-projection (``wq_a``)."""
    return _shared("mla.query_down", "MLA score circuits: shared query down-projection", P_Q,
                   MatrixSymbol("dW_DQ", c_q, d), G_DQ, G_SQ,
                   "‖P_Q ΔW_DQ‖_op ≤ ε/4, P_Q = [K̂_hᵀ Û_{Q,h}]_h: every head's term within ε/4 (Lemma K)")


@cache
def kv_down():
    """``ΔD̂ = −(ε/4) C_PKV⁻¹ msign(C_PKV⁻¹ G_DKV)``: the shared KV down-projection with the RoPE key (``wkv_a``)."""
    return _shared("mla.kv_down", "MLA score and value–output circuits: shared KV down-projection", P_KV,
                   MatrixSymbol("dW_DKV", c_kvr, d), G_DKV, G_SKV,
                   "‖P_KV ΔD̂‖_op ≤ ε/4, P_KV = [Q̂_hᵀ blockdiag(W_UK,h, I); W_O,h [W_UV,h 0]]_h: every head's score "
                   "and value terms within ε/4 (Lemma K)")


@cache
def query_uncompressed():
    """``ΔW_Q = −(ε/3) C_K̂⁻¹ msign(C_K̂⁻¹ G_Q)``: one head's dense query map (``wq``, no query compression)."""
    return _shared("mla.query_uncompressed", "MLA without query compression: query projection (one head)",
                   transpose(K_hat), MatrixSymbol("dW_Q", q_w, d), G_Q, G_S,
                   "‖K̂ᵀ ΔW_Q‖_op ≤ ε/3: the query projection's term of the head's three-factor score circuit",
                   share=SCORE_SHARE_UNCOMPRESSED, rows=d)


@cache
def key_up_uncompressed():
    """``ΔW_UK = −(ε/3) C_EQ⁻¹ msign(C_EQ⁻¹ G_UK C_DKV⁻¹) C_DKV⁻¹``: one head's key up-projection, no query
    compression (``E_Q`` the content rows of the head's ``wq`` block)."""
    return _middle("mla.key_up_uncompressed", "MLA without query compression: key up-projection (one head)",
                   transpose(E_Q), MatrixSymbol("dW_UK", d_h, c_kv), W_DKV, G_UK, G_M, SCORE_SHARE_UNCOMPRESSED,
                   "‖E_Qᵀ ΔW_UK W_DKV‖_op ≤ ε/3: the key up-projection's term of the head's three-factor score "
                   "circuit")


@cache
def kv_down_uncompressed():
    """``ΔD̂ = −(ε/3) C_PKV⁻¹ msign(C_PKV⁻¹ G_DKV)``: the shared KV down-projection (``wkv_a``), no query
    compression: every score and value term of ``wkv_a`` within ``ε/3``, the share of both circuits."""
    return _shared("mla.kv_down_uncompressed", "MLA without query compression: shared KV down-projection", P_KV,
                   MatrixSymbol("dW_DKV", c_kvr, d), G_DKV, G_SKV,
                   "‖P_KV ΔD̂‖_op ≤ ε/3, P_KV = [W_Q,hᵀ blockdiag(W_UK,h, I); W_O,h [W_UV,h 0]]_h: every head's score "
                   "and value terms within ε/3 (Lemma K)", share=SCORE_SHARE_UNCOMPRESSED)


def derivations():
    """Every derivation of this module, in reading order."""
    return [query_up(), key_up(), query_down(), kv_down(), value_up(), output(), query_uncompressed(),
            key_up_uncompressed(), kv_down_uncompressed()]


# ---- emission --------------------------------------------------------------------------------------
def emitted_functions():
    return [
        EmittedFunction("mla_query_up", "MLA query up-projection update, one head (content and RoPE rows)",
                        [K_hat, W_DQ, G_UQ], [("dW_UQ", query_up())],
                        [("K_hat (..., d_h + d_R, d) is the head's key map [W_UK W_DKV; W_KR], "
                          "W_DQ = wq_a (..., c_q, d), "
                          "G_UQ the head's rows of wq_b's gradient. ‖C_K̂ ΔÛ_Q C_DQ‖_op = ε/4, "
                          "hence ‖K̂ᵀ ΔÛ_Q W_DQ‖_op ≤ ε/4 "
                          "(equality at λ = 0) at RoPE position 0.")]),
        EmittedFunction("mla_key_up", "MLA key up-projection update, one head",
                        [E_Q, W_DKV, G_UK], [("dW_UK", key_up())],
                        [("E_Q (..., d_h, d) is the head's content query map W_UQ W_DQ, "
                          "W_DKV the KV-latent rows of wkv_a "
                          "(..., c_kv, d). ‖E_Qᵀ ΔW_UK W_DKV‖_op ≤ ε/4.")]),
        EmittedFunction("mla_value_up", "MLA value up-projection update, one head",
                        [W_O, W_DKV, G_UV], [("dW_UV", value_up())],
                        ["W_O (..., d, d_v) is the head's block of wo. ‖W_O ΔW_UV W_DKV‖_op ≤ ε/3."]),
        EmittedFunction("mla_output", "MLA output-projection update, one head",
                        [E_V, G_O], [("dW_O", output())],
                        ["E_V (..., d_v, d) is the head's value map W_UV W_DKV. ‖ΔW_O E_V‖_op ≤ ε/3."]),
        EmittedFunction("mla_query_down", "MLA shared query down-projection (wq_a) update",
                        [P_Q, G_DQ], [("dW_DQ", query_down())],
                        [("P_Q (..., n, c_q) stacks every head's partner rows K̂_hᵀ Û_{Q,h}, "
                          "or any matrix with the same Gram "
                          "(the compact [C_K̂_h Û_{Q,h}]_h). Every head's term ‖K̂_hᵀ Û_{Q,h} ΔW_DQ‖_op ≤ ε/4.")]),
        EmittedFunction("mla_kv_down", "MLA shared KV down-projection (wkv_a, RoPE key rows included) update",
                        [P_KV, G_DKV], [("dW_DKV", kv_down())],
                        [("P_KV (..., n, c_kv + d_R) stacks every head's score rows Q̂_hᵀ blockdiag(W_UK,h, I) "
                          "and value rows "
                          "W_O,h [W_UV,h 0] (or any matrix with the same Gram). Every head's terms ≤ ε/4.")]),
        EmittedFunction("mla_query_uncompressed", "MLA query projection update without query compression, one head",
                        [K_hat, G_Q], [("dW_Q", query_uncompressed())],
                        [("K_hat (..., d_h + d_R, d) is the head's key map [W_UK W_DKV; W_KR], G_Q the head's rows "
                          "of wq's gradient (q_lora_rank = None). ‖K̂ᵀ ΔW_Q‖_op ≤ ε/3 (equality at λ = 0) at RoPE "
                          "position 0.")]),
        EmittedFunction("mla_key_up_uncompressed", "MLA key up-projection update without query compression, one head",
                        [E_Q, W_DKV, G_UK], [("dW_UK", key_up_uncompressed())],
                        [("E_Q (..., d_h, d) is the content rows of the head's block of wq, W_DKV the KV-latent rows "
                          "of wkv_a (..., c_kv, d). ‖E_Qᵀ ΔW_UK W_DKV‖_op ≤ ε/3.")]),
        EmittedFunction("mla_kv_down_uncompressed", "MLA shared KV down-projection (wkv_a) update without query "
                        "compression", [P_KV, G_DKV], [("dW_DKV", kv_down_uncompressed())],
                        [("P_KV (..., n, c_kv + d_R) stacks every head's score rows W_Q,hᵀ blockdiag(W_UK,h, I) and "
                          "value rows W_O,h [W_UV,h 0] (or any matrix with the same Gram). "
                          "Every head's terms ≤ ε/3.")]),
    ]


# ---- stored layouts (NumPy, for the checks and for callers) -----------------------------------------
def parameter_count(d_model, heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim):
    """Parameters of one MLA block as DeepSeek-V2/V3 store it (``q_lora_rank=None``: no query compression, ``wq``
    of ``H (d_h + d_R) × d``): ``wq_a``, its RMSNorm gain, ``wq_b``, ``wkv_a``, its gain, ``wkv_b``, ``wo``; exact."""
    for name, value in (("d_model", d_model), ("heads", heads), ("kv_lora_rank", kv_lora_rank),
                        ("qk_nope_head_dim", qk_nope_head_dim), ("qk_rope_head_dim", qk_rope_head_dim),
                        ("v_head_dim", v_head_dim), ("q_lora_rank", 1 if q_lora_rank is None else q_lora_rank)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    qk = qk_nope_head_dim + qk_rope_head_dim
    query = (heads * qk * d_model if q_lora_rank is None
             else q_lora_rank * d_model + q_lora_rank + heads * qk * q_lora_rank)
    kv = ((kv_lora_rank + qk_rope_head_dim) * d_model + kv_lora_rank
          + heads * (qk_nope_head_dim + v_head_dim) * kv_lora_rank)
    return int(query + kv + d_model * heads * v_head_dim)


def split_heads(wq_b, wkv_b, wo, heads, d_h, d_v, query="wq_b"):
    """Per-head blocks of the stored matrices (DeepSeek layout, output features as rows):
    ``wq_b`` ``(H (d_h + d_R), c_q)`` → ``Û_Q`` ``(H, d_h + d_R, c_q)``; ``wkv_b`` ``(H (d_h + d_v), c_kv)`` →
    ``W_UK`` ``(H, d_h, c_kv)``, ``W_UV`` ``(H, d_v, c_kv)``; ``wo`` ``(d, H d_v)`` → ``W_O`` ``(H, d, d_v)``.
    ``query``: the name of ``wq_b`` in the messages (``"wq"`` without query compression, same row layout)."""
    for name, rows, per in ((query, wq_b.shape[0], None), ("wkv_b", wkv_b.shape[0], d_h + d_v),
                            ("wo", wo.shape[1], d_v)):
        if rows % heads or (per is not None and rows // heads != per):
            raise ValueError(f"{name} has {rows} {'columns' if name == 'wo' else 'rows'}, which is not heads = {heads} "
                             f"blocks{'' if per is None else f' of {per}'}")
    u_q = wq_b.reshape(heads, -1, wq_b.shape[1])
    if u_q.shape[1] <= d_h:
        raise ValueError(f"{query} has {u_q.shape[1]} rows per head, not d_h = {d_h} content rows plus a RoPE part: "
                         "the decoupled RoPE query part is missing")
    kv = wkv_b.reshape(heads, d_h + d_v, wkv_b.shape[1])
    return u_q, kv[:, :d_h], kv[:, d_h:], np.moveaxis(wo.reshape(wo.shape[0], heads, d_v), 1, 0)


def partners(wq_a, wq_b, wkv_a, wkv_b, wo, *, heads, d_h, d_v, compact=True):
    """The partner matrices the emitted functions take, from the stored weights (float64 NumPy).

    Returns a dict: ``K_hat`` ``(H, d_h + d_R, d)``, ``E_Q`` ``(H, d_h, d)``, ``W_DKV`` ``(c_kv, d)``,
    ``E_V`` ``(H, d_v, d)``, ``W_O`` ``(H, d, d_v)``, ``P_Q`` and ``P_KV`` (``compact``: rows ``C_K̂_h Û_{Q,h}`` and
    ``C_h (B_h)`` with the same Gram as the ``H d``-row stacks; otherwise the stacks themselves).
    ``wq_a=None``: no query compression, ``wq_b`` is the dense ``wq`` ``(H (d_h + d_R), d)`` and there is no
    ``P_Q``."""
    if wq_a is None and wq_b.shape[1] != wkv_a.shape[1]:
        raise ValueError(f"wq (no query compression: wq_a=None) has {wq_b.shape[1]} columns, expected the model "
                         f"width d = {wkv_a.shape[1]} (the columns of wkv_a)")
    u_q, w_uk, w_uv, w_o = split_heads(wq_b, wkv_b, wo, heads, d_h, d_v, "wq_b" if wq_a is not None else "wq")
    d_r = u_q.shape[1] - d_h
    c_kv = wkv_a.shape[0] - d_r
    if c_kv < 1 or w_uk.shape[2] != c_kv:
        raise ValueError(f"wkv_a has {wkv_a.shape[0]} rows, not kv_lora_rank = {w_uk.shape[2]} plus the RoPE key's "
                         f"d_R = {d_r} rows (from wq_b): the RoPE key part is missing or the ranks disagree")
    w_dkv, w_kr = wkv_a[:c_kv], wkv_a[c_kv:]
    k_hat = np.concatenate([w_uk @ w_dkv, np.broadcast_to(w_kr, (heads, *w_kr.shape))], axis=1)
    q_hat = u_q if wq_a is None else u_q @ wq_a
    e_q, e_v = q_hat[:, :d_h], w_uv @ w_dkv
    block = np.zeros((heads, d_h + d_r, c_kv + d_r))
    block[:, :d_h, :c_kv], block[:, d_h:, c_kv:] = w_uk, np.eye(d_r)
    score_rows = np.swapaxes(q_hat, 1, 2) @ block  # Q̂ᵀ blockdiag(W_UK, I): (H, d, c_kv + d_R)
    value_rows = np.concatenate([w_o @ w_uv, np.zeros((heads, w_o.shape[1], d_r))], axis=2)
    if compact:  # same Grams, H (d_h + d_R) and H d_v rows instead of H d
        root = [psd_power(gram_eigh(k, 0.0, "left"), 0.5) for k in k_hat]
        p_q = np.concatenate([c @ u for c, u in zip(root, u_q, strict=True)])
        q_root = [psd_power(gram_eigh(q, 0.0, "left"), 0.5) for q in q_hat]
        o_root = [psd_power(gram_eigh(o, 0.0, "right"), 0.5) for o in w_o]
        p_kv = np.concatenate([c @ b for c, b in zip(q_root, block, strict=True)]
                              + [c @ np.concatenate([v, np.zeros((v.shape[0], d_r))], axis=1)
                                 for c, v in zip(o_root, w_uv, strict=True)])
    else:
        p_q = np.concatenate(list(np.swapaxes(k_hat, 1, 2) @ u_q))
        p_kv = np.concatenate(list(score_rows) + list(value_rows))
    out = {"K_hat": k_hat, "E_Q": e_q, "W_DKV": w_dkv, "E_V": e_v, "W_O": w_o, "P_Q": p_q, "P_KV": p_kv}
    return out if wq_a is not None else {k: v for k, v in out.items() if k != "P_Q"}


def _rope(d_r, tau, base=10000.0):
    """The RoPE rotation of relative position ``tau`` on ``d_r`` coordinates (pairs ``(2j, 2j+1)``)."""
    rot = np.zeros((d_r, d_r))
    for j in range(d_r // 2):
        t = tau * base ** (-2 * j / d_r)
        rot[2 * j:2 * j + 2, 2 * j:2 * j + 2] = [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]
    return rot


def _random_mla(rng, d_model=24, heads=3, c_q=6, c_kv=5, d_h=3, d_r=2, d_v=3):
    w = {"wq_a": rng.standard_normal((c_q, d_model)), "wq_b": rng.standard_normal((heads * (d_h + d_r), c_q)),
         "wkv_a": rng.standard_normal((c_kv + d_r, d_model)), "wkv_b": rng.standard_normal((heads * (d_h + d_v), c_kv)),
         "wo": rng.standard_normal((d_model, heads * d_v))}
    return w, {"heads": heads, "d_h": d_h, "d_v": d_v}


def measurements(rng):
    """Per-head bounds of the shared rules (Lemma K), compact vs stacked partners, and the RoPE positions."""
    w, cfg = _random_mla(rng)
    full, compact = partners(**w, **cfg, compact=False), partners(**w, **cfg)
    heads, d_h = cfg["heads"], cfg["d_h"]
    u_q, w_uk, w_uv, w_o = split_heads(w["wq_b"], w["wkv_b"], w["wo"], heads, d_h, cfg["d_v"])
    g_dq, g_dkv = rng.standard_normal(w["wq_a"].shape), rng.standard_normal(w["wkv_a"].shape)
    out = []
    for name, der, partner, grad in (("query_down", query_down(), "P_Q", {"G_DQ": g_dq}),
                                     ("kv_down", kv_down(), "P_KV", {"G_DKV": g_dkv})):
        got = [evaluate_on(der.formula, {partner: p[partner], **grad, "epsilon": 1.0}) for p in (full, compact)]
        out.append((f"{name}: compact vs stacked partner, relative difference",
                    float(np.linalg.norm(got[0] - got[1]) / np.linalg.norm(got[0])), 1e-10))
        rows = full[partner] @ got[0]
        per = rows.shape[0] // (heads if name == "query_down" else 2 * heads)
        worst = max(np.linalg.norm(rows[i:i + per], 2) for i in range(0, rows.shape[0], per))
        out.append((f"{name}: worst head term / (ε/4) (at most 1: Lemma K)", float(worst / 0.25), 1 + 1e-10))
    # RoPE: the query up-projection's term at relative positions τ ≠ 0, against its share at τ = 0
    d_r = u_q.shape[1] - d_h
    k_hat = full["K_hat"]
    worst = 0.0
    for h in range(heads):
        du = evaluate_on(query_up().formula, {"K_hat": k_hat[h], "W_DQ": w["wq_a"],
                                               "G_UQ": rng.standard_normal(u_q[h].shape), "epsilon": 1.0})
        for tau in (1, 3, 17, 100, 1000):
            rot = scipy.linalg.block_diag(np.eye(d_h), _rope(d_r, tau))
            worst = max(worst, np.linalg.norm(k_hat[h].T @ rot.T @ du @ w["wq_a"], 2) / 0.25)
    out.append(("RoPE: worst ‖K̂ᵀ R(τ)ᵀ ΔÛ_Q W_DQ‖ / (ε/4) over heads and τ ∈ {1, 3, 17, 100, 1000} (1 at τ = 0)",
                float(worst), None))  # RoPE away from τ = 0 is not modelled (documented): shown, not a result
    # no query compression: a dense wq (the query map itself), the KV rule at budget ε/3
    dense = {**w, "wq_a": None, "wq_b": rng.standard_normal((w["wq_b"].shape[0], w["wq_a"].shape[1]))}
    full_u, compact_u = partners(**dense, **cfg, compact=False), partners(**dense, **cfg)
    got = [evaluate_on(kv_down_uncompressed().formula, {"P_KV": p["P_KV"], "G_DKV": g_dkv, "epsilon": 1.0})
           for p in (full_u, compact_u)]
    out.append(("kv_down_uncompressed: compact vs stacked partner, relative difference",
                float(np.linalg.norm(got[0] - got[1]) / np.linalg.norm(got[0])), 1e-10))
    rows, per = full_u["P_KV"] @ got[0], w["wq_a"].shape[1]
    worst = max(np.linalg.norm(rows[i:i + per], 2) for i in range(0, rows.shape[0], per))
    out.append(("kv_down_uncompressed: worst head term / (ε/3) (at most 1: Lemma K)", float(worst * 3), 1 + 1e-10))
    return out


def rule_module():
    return RuleModule(name="mla", title="Multi-head latent attention rules of Compositional Muon",
                      derivations=derivations, functions=emitted_functions, scalars={eps: "eps"},
                      measurements=measurements, description=__doc__.split("\n\n")[0],
                      examples=["python -m derivations.mla --emit jax > mla_jax.py",
                                "python -m derivations.mla --emit text",
                                "python -m derivations.mla --check"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
