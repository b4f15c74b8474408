"""Multi-head latent attention without query compression, and MLA blocks found by their DeepSeek names.

The optimizer's step of an :class:`MLAPair` with ``wq_a=None`` (DeepSeek-V2-Lite: one dense per-head ``wq``) is
compared with the closed forms of ``derivations.mla``'s ``_uncompressed`` rules written here in NumPy from the
stored weights (the ``H·d``-row stack for the shared ``wkv_a``, eigendecomposition roots, SVD signs), with planted
mistakes told apart. ``pairs=AutoPairs(heads=H, qk_nope_head_dim=d_h)`` finds the blocks in HF transformers' and
DeepSeek's reference naming (plain dicts), ``"auto"`` alone refuses them in one line, and a missing RoPE part is
one line naming the parameter. The members of a found block and its latent norm gains count as
``derivations.mla.parameter_count`` says.
"""

import jax
import numpy as np
import pytest

from derivations import mla as derived_mla
from numerics.optimizer import (
    AutoPairs,
    LoRAPair,
    MLAPair,
    OVPair,
    QKPair,
    auto_pairs,
    compositional_muon,
    describe_pairs,
)

H, D_H, D_R, D_V, C_KV, C_Q, D = 3, 3, 2, 3, 5, 6, 24  # the shapes of test_optimizer_lora_mla.py
LR, LAM = 0.1, 0.05
QK = D_H + D_R


def op(x):
    return float(np.linalg.norm(np.asarray(x, np.float64), 2))


def msign(x):
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    return u @ vt


def inv_root(gram, lam):
    e, v = np.linalg.eigh(gram + lam * np.eye(len(gram)))
    return (v / np.sqrt(e)) @ v.T


def uncompressed_closed_form(w, g, lam, share=1 / 3, value_rows=True):
    """Every factor's step of one layer (W @ x layouts), at lr·ε with ε = 2 per circuit, each term ``share`` of it:
    ``ΔW_Q = −c C_K̂⁻¹ msign(C_K̂⁻¹ G_Q)``, the two-sided key/value up-projections, the one-sided output, and
    ``ΔD̂ = −c C_P⁻¹ msign(C_P⁻¹ G_D̂)`` with ``P`` every head's score and value rows stacked (``H·d`` rows each).
    ``share=1/4`` and ``value_rows=False`` are planted mistakes (the compressed share; ``wkv_a``'s value terms
    left out of its partner)."""
    c = LR * 2 * share
    q = w["wq"].reshape(H, QK, D)
    kv = w["wkv_b"].reshape(H, D_H + D_V, C_KV)
    w_dkv, w_kr = w["wkv_a"][:C_KV], w["wkv_a"][C_KV:]
    w_o = w["wo"].reshape(D, H, D_V)
    g_q, g_kv, g_o = g["wq"].reshape(H, QK, D), g["wkv_b"].reshape(H, D_H + D_V, C_KV), g["wo"].reshape(D, H, D_V)
    c_dkv = inv_root(w_dkv @ w_dkv.T, lam)
    d_q, d_kv, d_o, rows = [], [], [], []
    for h in range(H):
        w_uk, w_uv, o = kv[h, :D_H], kv[h, D_H:], w_o[:, h]
        k_hat = np.vstack([w_uk @ w_dkv, w_kr])
        c_k = inv_root(k_hat @ k_hat.T, lam)
        d_q.append(-c * c_k @ msign(c_k @ g_q[h]))
        c_eq = inv_root(q[h, :D_H] @ q[h, :D_H].T, lam)
        d_uk = -c * c_eq @ msign(c_eq @ g_kv[h, :D_H] @ c_dkv) @ c_dkv
        c_o = inv_root(o.T @ o, lam)
        d_uv = -LR * 2 / 3 * c_o @ msign(c_o @ g_kv[h, D_H:] @ c_dkv) @ c_dkv
        d_kv.append(np.vstack([d_uk, d_uv]))
        e_v = w_uv @ w_dkv
        c_ev = inv_root(e_v @ e_v.T, lam)
        d_o.append(-LR * 2 / 3 * msign(g_o[:, h] @ c_ev) @ c_ev)
        block = np.zeros((QK, C_KV + D_R))
        block[:D_H, :C_KV], block[D_H:, C_KV:] = w_uk, np.eye(D_R)
        rows.append(q[h].T @ block)  # Q̂ᵀ blockdiag(W_UK, I)
        if value_rows:
            rows.append(np.hstack([o @ w_uv, np.zeros((D, D_R))]))  # W_O [W_UV 0]
    p = np.vstack(rows)
    c_p = inv_root(p.T @ p, lam)
    return {"wq": np.vstack(d_q), "wkv_a": -c * c_p @ msign(c_p @ g["wkv_a"]), "wkv_b": np.vstack(d_kv),
            "wo": np.stack(d_o, axis=1).reshape(D, H * D_V)}


SHAPES = {"wq": (H * QK, D), "wkv_a": (C_KV + D_R, D), "wkv_b": (H * (D_H + D_V), C_KV), "wo": (D, H * D_V)}
BLOCK = MLAPair(None, "attn/wq", "attn/wkv_a", "attn/wkv_b", "attn/wo", heads=H, d_h=D_H)


@pytest.fixture(scope="module")
def dense_case():
    """Two stacked layers, their gradients and the optimizer's step (damping λ, exact msign)."""
    rng = np.random.default_rng(0)
    params = {"attn": {n: rng.standard_normal((2, *s)) for n, s in SHAPES.items()}, "kv_norm": np.ones(C_KV)}
    g = jax.tree.map(lambda x: rng.standard_normal(x.shape), params)
    opt = compositional_muon(LR, pairs=[BLOCK], msign="svd", damping=LAM)
    return params, g, opt.update(g, opt.init(params), params)[0]


def test_uncompressed_step_is_the_closed_form_and_planted_mistakes_differ(dense_case):
    params, g, u = dense_case
    for layer in range(2):
        w, gl = ({n: x[layer] for n, x in t["attn"].items()} for t in (params, g))
        want = uncompressed_closed_form(w, gl, LAM)
        for n in SHAPES:
            np.testing.assert_allclose(u["attn"][n][layer], want[n], rtol=1e-8, atol=1e-11, err_msg=n)
        for planted, names in (({"share": 1 / 4}, ("wq", "wkv_a", "wkv_b")), ({"value_rows": False}, ("wkv_a",))):
            wrong = uncompressed_closed_form(w, gl, LAM, **planted)
            for n in names:
                assert not np.allclose(u["attn"][n][layer], wrong[n], rtol=1e-3), (planted, n)
    assert "1 MLA blocks" in describe_pairs(params, [BLOCK])


def test_uncompressed_terms_are_a_third_of_each_circuit_budget_and_flax_kernels_transpose(dense_case):
    """At λ = 0 the query projection's and key up-projection's terms of each head's score circuit are exactly
    lr·2/3 and the shared wkv_a's score and value terms at most that (Lemma K); flax kernels give the transposed
    step."""
    params, g, _ = dense_case
    w, gl = ({n: x[0] for n, x in t["attn"].items()} for t in (params, g))
    d = uncompressed_closed_form(w, gl, 0.0)
    q, kv = w["wq"].reshape(H, QK, D), w["wkv_b"].reshape(H, D_H + D_V, C_KV)
    d_q, d_kv = d["wq"].reshape(H, QK, D), d["wkv_b"].reshape(H, D_H + D_V, C_KV)
    w_dkv, w_kr, third = w["wkv_a"][:C_KV], w["wkv_a"][C_KV:], LR * 2 / 3
    for h in range(H):
        k_hat = np.vstack([kv[h, :D_H] @ w_dkv, w_kr])
        assert op(k_hat.T @ d_q[h]) == pytest.approx(third, rel=1e-9)
        assert op(q[h, :D_H].T @ d_kv[h, :D_H] @ w_dkv) == pytest.approx(third, rel=1e-9)
        k_moved = np.vstack([kv[h, :D_H] @ d["wkv_a"][:C_KV], d["wkv_a"][C_KV:]])
        assert op(q[h].T @ k_moved) <= third * (1 + 1e-9)
    flax = jax.tree.map(lambda x: x.swapaxes(-1, -2) if x.ndim > 1 else x, params)
    flax_g = jax.tree.map(lambda x: x.swapaxes(-1, -2) if x.ndim > 1 else x, g)
    opt = compositional_muon(LR, pairs=[BLOCK._replace(kernels=True)], msign="svd", damping=LAM)
    u_flax = opt.update(flax_g, opt.init(flax), flax)[0]
    for n in SHAPES:
        np.testing.assert_allclose(u_flax["attn"][n], dense_case[2]["attn"][n].swapaxes(-1, -2), rtol=1e-10,
                                   atol=1e-13)


# ---- found by DeepSeek names ---------------------------------------------------------------------------------
def hf_layer(rng, compressed, lead=()):
    """One HF transformers DeepseekV2/V3 attention block as a plain dict of ``weight`` (out × in) matrices."""
    def w(*s):
        return {"weight": rng.standard_normal((*lead, *s))}
    query = ({"q_a_proj": w(C_Q, D), "q_a_layernorm": {"weight": np.ones(C_Q)}, "q_b_proj": w(H * QK, C_Q)}
             if compressed else {"q_proj": w(H * QK, D)})
    return {**query, "kv_a_proj_with_mqa": w(C_KV + D_R, D), "kv_a_layernorm": {"weight": np.ones(C_KV)},
            "kv_b_proj": w(H * (D_H + D_V), C_KV), "o_proj": w(D, H * D_V)}


def reference_layer(rng, compressed):
    """DeepSeek's reference code naming, the matrices themselves (``Linear`` weights, out × in)."""
    query = ({"wq_a": rng.standard_normal((C_Q, D)), "q_norm": np.ones(C_Q),
              "wq_b": rng.standard_normal((H * QK, C_Q))} if compressed else {"wq": rng.standard_normal((H * QK, D))})
    return {**query, "wkv_a": rng.standard_normal((C_KV + D_R, D)), "kv_norm": np.ones(C_KV),
            "wkv_b": rng.standard_normal((H * (D_H + D_V), C_KV)), "wo": rng.standard_normal((D, H * D_V))}


def test_mla_blocks_found_by_hf_and_reference_names():
    rng = np.random.default_rng(1)
    hf = {"model": {"layers": {"0": {"self_attn": hf_layer(rng, True)}, "1": {"self_attn": hf_layer(rng, False)}}}}
    found = sorted(auto_pairs(hf, heads=H, qk_nope_head_dim=D_H), key=str)
    a, b = "model/layers/0/self_attn", "model/layers/1/self_attn"
    assert found == sorted([
        MLAPair(f"{a}/q_a_proj/weight", f"{a}/q_b_proj/weight", f"{a}/kv_a_proj_with_mqa/weight",
                f"{a}/kv_b_proj/weight", f"{a}/o_proj/weight", H, D_H),
        MLAPair(None, f"{b}/q_proj/weight", f"{b}/kv_a_proj_with_mqa/weight", f"{b}/kv_b_proj/weight",
                f"{b}/o_proj/weight", H, D_H)], key=str)
    table = describe_pairs(hf, AutoPairs(heads=H, qk_nope_head_dim=D_H))
    assert table.splitlines()[-1] == "0 pairs, 0 LoRA pairs, 2 MLA blocks, 0 Muon matrices, 3 AdamW parameters"
    assert f"{b}/q_proj/weight" in table and "MLA block: heads=3 d_h=3 d_R=2 d_v=3 (no query compression)" in table
    assert "wq (query projection, content and RoPE)" in table and "wq_a (query down-projection)" in table
    ref = {"layers": [{"attn": reference_layer(rng, True)}, {"attn": reference_layer(rng, False)}],
           "plain": {n: rng.standard_normal((D, D)) for n in ("wq", "wk", "wv", "wo")}}
    with pytest.raises(ValueError, match=r"cannot tell how the attention block 'plain'"):  # square: layout= needed
        auto_pairs(ref, heads=H, qk_nope_head_dim=D_H)
    found = auto_pairs(ref, heads=H, qk_nope_head_dim=D_H, layout="paper")
    assert sorted(found, key=str) == sorted([
        MLAPair("layers/0/attn/wq_a", "layers/0/attn/wq_b", "layers/0/attn/wkv_a", "layers/0/attn/wkv_b",
                "layers/0/attn/wo", H, D_H),
        MLAPair(None, "layers/1/attn/wq", "layers/1/attn/wkv_a", "layers/1/attn/wkv_b", "layers/1/attn/wo", H, D_H),
        QKPair("plain/wq", "plain/wk", H, H), OVPair("plain/wo", "plain/wv", H, H)], key=str)
    flax = {"attn": {n: {"kernel": x.T} for n, x in reference_layer(rng, False).items() if x.ndim == 2}}
    assert auto_pairs(flax, heads=H, qk_nope_head_dim=D_H) == [
        MLAPair(None, "attn/wq/kernel", "attn/wkv_a/kernel", "attn/wkv_b/kernel", "attn/wo/kernel", H, D_H, True)]
    assert "1 MLA blocks" in describe_pairs(flax, AutoPairs(heads=H, qk_nope_head_dim=D_H))
    # a projection wrapped by peft (base_layer and LoRA factors): not this layout, the LoRA pair is found
    wrapped = hf_layer(rng, False)
    wrapped["q_proj"] = {"base_layer": wrapped["q_proj"], "lora_A": {"weight": rng.standard_normal((2, D))},
                         "lora_B": {"weight": np.zeros((H * QK, 2))}}
    assert auto_pairs({"attn": wrapped}, heads=H, qk_nope_head_dim=D_H) == [
        LoRAPair("attn/q_proj/lora_B/weight", "attn/q_proj/lora_A/weight")]


def _without_heads(rng):
    return {"attn": hf_layer(rng, True)}, "auto"


def _partial(rng):
    layer = reference_layer(rng, True)
    del layer["wkv_b"]
    return {"attn": layer}, AutoPairs(heads=H, qk_nope_head_dim=D_H)


def _both_queries(rng):
    return {"attn": {**reference_layer(rng, True), "wq": rng.standard_normal((H * QK, D))}}, \
        AutoPairs(heads=H, qk_nope_head_dim=D_H)


def _wrong_width(rng):
    return {"attn": hf_layer(rng, False)}, AutoPairs(heads=H, qk_nope_head_dim=QK)


def _no_rope_key(rng):
    layer = hf_layer(rng, False)
    layer["kv_a_proj_with_mqa"]["weight"] = layer["kv_a_proj_with_mqa"]["weight"][:C_KV]
    return {"attn": layer}, AutoPairs(heads=H, qk_nope_head_dim=D_H)


def _no_rope_query(rng):
    params = {"attn": {n: rng.standard_normal(s) for n, s in SHAPES.items()}}
    params["attn"]["wq"] = params["attn"]["wq"][:H * D_H]
    return params, [BLOCK]


def _compressed_as_dense(rng):
    params = {"attn": reference_layer(rng, True)}
    return params, [MLAPair(None, "attn/wq_b", "attn/wkv_a", "attn/wkv_b", "attn/wo", H, D_H)]


@pytest.mark.parametrize("make, message", [
    (_without_heads, r"pairs='auto' found the MLA block 'attn' \('attn/kv_a_proj_with_mqa/weight'\) but no heads or "
                     r"qk_nope_head_dim was given \(not guessed from the shapes\); pass "
                     r"pairs=numerics.optimizer.AutoPairs\(heads=H, qk_nope_head_dim=d_h\)"),
    (_partial, r"found the MLA block 'attn' \('attn/wkv_a'\) without 'attn/wkv_b': expected "
               r"wq_a/wq_b/wkv_a/wkv_b/wo \(or wq for a dense query\)"),
    (_both_queries, r"with both a dense query 'attn/wq' and a compressed one \('attn/wq_a', 'attn/wq_b'\)"),
    (_wrong_width, r"'attn/q_proj/weight' \(wq, no query compression\) has 5 rows per head, not d_h = 5 content rows "
                   r"plus the decoupled RoPE query rows: the RoPE query part is missing \(or d_h is wrong\)"),
    (_no_rope_key, r"'attn/kv_a_proj_with_mqa/weight' has shape \(5, 24\), expected \(c_kv \+ d_R, d\) = \(5 \+ 2, "
                   r"24\) .*: the RoPE key part is missing \(no d_R = 2 shared RoPE key rows after its 5 KV latent "
                   r"rows\)"),
    (_compressed_as_dense, r"'attn/wq_b' \(wq, no query compression\) has 6 columns, expected the model width "
                           r"d = 24 \(the columns of 'attn/wkv_a'\); a compressed query .* needs its wq_a declared"),
    (_no_rope_query, r"'attn/wq' \(wq, no query compression\) has 3 rows per head, not d_h = 3 content rows plus the "
                     r"decoupled RoPE query rows"),
])
def test_bad_or_ambiguous_mla_blocks_are_one_line_naming_them(make, message):
    params, pairs = make(np.random.default_rng(2))
    with pytest.raises(ValueError, match=message) as err:
        compositional_muon(0.1, pairs=pairs).init(params)
    assert "\n" not in str(err.value) and str(err.value).startswith("compositional_muon: ")


@pytest.mark.parametrize("q_lora_rank", [C_Q, None])
def test_found_block_counts_as_derivations_mla_parameter_count(q_lora_rank):
    """The members of the block pairs='auto' finds and its latent norm gains are the parameters
    derivations.mla.parameter_count counts for the same configuration."""
    layer = hf_layer(np.random.default_rng(3), q_lora_rank is not None)
    (block,) = auto_pairs({"attn": layer}, heads=H, qk_nope_head_dim=D_H)
    leaves = {f"attn/{n}/weight": x["weight"] for n, x in layer.items()}
    members = sum(leaves[m].size for m in block.members)
    gains = sum(x.size for n, x in leaves.items() if "layernorm" in n)
    assert members + gains == derived_mla.parameter_count(D, H, q_lora_rank, C_KV, D_H, D_R, D_V)
    assert len(block.members) == (5 if q_lora_rank else 4)
