"""Parameter counts of the decoder families (GPT-2, Qwen2, mixtures of experts, multi-head latent attention),
from their tensors and from the config files in tests/configs (written by hand from the published configs).

Each family is checked at the tensor level (the tensors a block holds and their shapes, against a formula written
out here) and on a published total. Planted mistakes are kept as tests: a count with one convention changed (a
bias left out, a tied head counted untied, shared experts counted as routed, ...) differs from the model's, and
``--compare`` names the change; the MLA count is built from :mod:`derivations.mla`'s layout too.
"""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from derivations import mla
from paramcount import config as C
from paramcount import count as P

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

CONFIGS = Path(__file__).parents[1] / "configs"


def shape_of(name):
    return C.read_config(str(CONFIGS / name)).shape


def out_json(argv):
    return json.loads(P.run([*argv, "--json"]))


def by_name(shape):
    return {t.name: t for t in P.tensors(shape)}


# ---- GPT-2 -------------------------------------------------------------------------------------------------------
GPT2_SMALL = P.Shape(768, 12, 50257, 3072, 12, 12, 64, True, qkv_bias=True, o_bias=True, mlp_bias=True,
                     layer_norm=True, gated_mlp=False, positions=1024, family="gpt2")


def test_gpt2_small_is_124_439_808():
    assert P.count(GPT2_SMALL) == 124_439_808
    assert shape_of("gpt2.json") == GPT2_SMALL
    d, f, v = 768, 3072, 50257
    block = (4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d  # attention, MLP, two LayerNorms (gain and shift)
    assert P.count(GPT2_SMALL) == 12 * block + v * d + 1024 * d + 2 * d


def test_gpt2_tensors_biases_everywhere_layer_norm_ungated_positions_tied():
    t = by_name(GPT2_SMALL)
    assert {"b_Q", "b_K", "b_V", "b_O", "b_up", "b_down", "attention_norm.shift", "final_norm.shift"} <= set(t)
    assert "W_gate" not in t and "output_head" not in t
    assert t["W_up"].shape == (768, 3072) and t["position_embedding"].shape == (1024, 768)
    assert P.active_count(GPT2_SMALL) == P.count(GPT2_SMALL)


# ---- Qwen2 -------------------------------------------------------------------------------------------------------
def qwen2_formula(d, layers, vocab, f, heads, kv, tied):
    dh = d // heads
    block = 2 * d * heads * dh + 2 * d * kv * dh + heads * dh + 2 * kv * dh + 3 * d * f + 2 * d  # no O bias
    return layers * block + vocab * d * (1 if tied else 2) + d


def test_qwen2_tensor_formula_and_published_totals():
    small, big = shape_of("qwen2-0.5b.json"), shape_of("qwen2-7b.json")
    assert P.count(small) == qwen2_formula(896, 24, 151936, 4864, 14, 2, True) == 494_032_768  # Qwen2-0.5B
    assert P.count(big) == qwen2_formula(3584, 28, 152064, 18944, 28, 4, False) == 7_615_616_512  # Qwen2-7B
    t = by_name(small)
    assert t["b_Q"].shape == (896,) and t["b_K"].shape == (128,) and "b_O" not in t and "output_head" not in t
    assert "output_head" in by_name(big) and small.tied_embeddings and not big.tied_embeddings


# ---- mixture of experts ------------------------------------------------------------------------------------------
def test_mixtral_total_and_active_from_its_config():
    shape = shape_of("mixtral-8x7b.json")
    assert P.count(shape) == 46_702_792_704 and P.active_count(shape) == 12_879_925_248
    d, layers, f, experts, top_k = 4096, 32, 14336, 8, 2
    assert P.count(shape) - P.active_count(shape) == layers * (experts - top_k) * 3 * d * f
    t = by_name(shape)
    assert t["experts.W_gate"].shape == (8, 4096, 14336) and t["router"].shape == (4096, 8)
    assert "W_gate" not in t and "shared_experts.W_up" not in t


def test_deepseek_moe_dense_blocks_shared_experts_and_router():
    shape = shape_of("deepseek-v3.json")
    t = by_name(shape)
    assert t["W_gate"].copies(61) == 3 and t["experts.W_gate"].copies(61) == 58  # first_k_dense_replace = 3
    assert t["shared_experts.W_gate"].shape == (7168, 2048) and t["router.score_bias"].shape == (256,)
    assert t["experts.W_down"].active_size == 8 * 2048 * 7168
    moe = P.MoE(256, 8, 2048, 1, 0, 3, 1)
    assert moe.moe_blocks(61) == 58 and replace(moe, every=2).moe_blocks(61) == 29  # blocks 4, 6, ..., 60
    assert replace(moe, dense_layers=0, every=3).moe_blocks(7) == 3  # blocks 0, 3, 6
    assert replace(moe, dense_layers=1, every=2).moe_blocks(6) == 2  # blocks 2, 4 (i ≥ k and i % every == 0)


def test_published_deepseek_totals_agree_to_their_precision():
    # total and active as published (DeepSeek-V2 and -V3 technical reports, DeepSeek-V2-Lite's model card)
    assert P.main(["--config", str(CONFIGS / "deepseek-v3.json"), "--compare", "671B"]) == 0
    assert P.main(["--config", str(CONFIGS / "deepseek-v2.json"), "--compare", "236B", "--compare-active", "21B"]) == 0
    assert P.main(["--config", str(CONFIGS / "deepseek-v2-lite.json"), "--compare", "15.7B"]) == 0
    assert P.count(shape_of("deepseek-v3.json")) == 671_026_419_200


def test_deepseek_v3_active_37b_is_the_count_without_the_input_embedding():
    out = out_json(["--config", str(CONFIGS / "deepseek-v3.json"), "--compare-active", "37B"])["compare_active"]
    assert not out["agrees"] and out["derived"] == 37_552_297_472
    assert ["embedding_inactive"] in [m["variants"] for m in out["matches"]]


# ---- multi-head latent attention ---------------------------------------------------------------------------------
MLA_NAMES = {"wq", "wq_a", "q_a_norm.gain", "wq_b", "wkv_a", "kv_a_norm.gain", "wkv_b", "wo"}


def mla_shape(d, heads, q_rank, kv_rank, nope, rope, v):
    return P.Shape(d, 2, 100, 4 * d, heads, heads, nope + rope, mla=P.MLA(q_rank, kv_rank, nope, rope, v))


def brief_formula(d, heads, q_rank, kv_rank, nope, rope, v):
    q = heads * (nope + rope) * d if q_rank is None else q_rank * d + q_rank + heads * (nope + rope) * q_rank
    return q + (kv_rank + rope) * d + kv_rank + heads * (nope + v) * kv_rank + heads * v * d


@pytest.mark.parametrize("cfg", [(7168, 128, 1536, 512, 128, 64, 128), (2048, 16, None, 512, 128, 64, 128),
                                 (24, 3, 6, 5, 3, 2, 3)])
def test_mla_count_agrees_with_derivations_mla(cfg):
    tensors = [t for t in P.tensors(mla_shape(*cfg)) if t.name in MLA_NAMES]
    assert sum(t.size for t in tensors) == mla.parameter_count(*cfg) == brief_formula(*cfg)
    assert [t.name for t in P.mla_tensors(mla_shape(*cfg))] == [t.name for t in tensors]


@pytest.mark.parametrize("q_rank", [6, None])
def test_mla_shapes_are_the_layout_derivations_mla_reads(q_rank):
    d, heads, kv_rank, nope, rope, v = 24, 3, 5, 3, 2, 3
    rng = np.random.default_rng(0)
    shapes = {t.name: t.shape for t in P.mla_tensors(mla_shape(d, heads, q_rank, kv_rank, nope, rope, v))}
    if q_rank is None:  # no query compression: the dense wq is read as wq_b with wq_a=None
        shapes = {**shapes, "wq_b": shapes.pop("wq")}
    w = {k: rng.standard_normal(shapes[k]) if k in shapes else None for k in ("wq_a", "wq_b", "wkv_a", "wkv_b", "wo")}
    u_q, w_uk, w_uv, w_o = mla.split_heads(w["wq_b"], w["wkv_b"], w["wo"], heads, nope, v)
    assert u_q.shape == (heads, nope + rope, q_rank or d) and w_uk.shape == (heads, nope, kv_rank)
    assert w_uv.shape == (heads, v, kv_rank) and w_o.shape == (heads, d, v)
    p = mla.partners(**w, heads=heads, d_h=nope, d_v=v)
    assert p["K_hat"].shape == (heads, nope + rope, d) and p["W_DKV"].shape == (kv_rank, d)
    # a planted mistake: the shared RoPE key counted per head is not the layout mla.partners reads
    wrong = {t.name: t.shape for t in P.mla_tensors(mla_shape(d, heads, q_rank, kv_rank, nope, rope, v),
                                                      P.Conventions(rope_key_per_head=True))}
    with pytest.raises(ValueError, match="wkv_a"):
        mla.partners(**{**w, "wkv_a": rng.standard_normal(wrong["wkv_a"])}, heads=heads, d_h=nope, d_v=v)


def test_deepseek_v2_lite_has_no_query_compression():
    t = by_name(shape_of("deepseek-v2-lite.json"))
    assert t["wq"].shape == (16 * 192, 2048) and "wq_a" not in t and "q_a_norm.gain" not in t
    assert "router.score_bias" not in t  # topk_method greedy: no score-correction bias


# ---- planted mistakes: a changed convention differs, and --compare names it --------------------------------------
PLANTED = [
    ("qwen2-7b.json", "no_qkv_biases", "the Q, K and V biases left out"),
    ("qwen2-0.5b.json", "untied", "untied input and output embeddings"),
    ("qwen2-7b.json", "tied", "tied input and output embeddings"),
    ("gpt2.json", "no_norm_shifts", "LayerNorm shifts left out"),
    ("gpt2.json", "no_positions", "position embeddings left out"),
    ("gpt2.json", "no_attention_biases", "attention biases left out"),
    ("deepseek-v3.json", "no_shared_experts", "shared experts left out"),
    ("deepseek-v3.json", "dense_layers_as_moe", "dense blocks counted as MoE"),
    ("deepseek-v3.json", "no_rope_dims", "RoPE query and key parts left out"),
    ("mixtral-8x7b.json", "no_router", "the router left out"),
]


@pytest.mark.parametrize(("config", "variant", "words"), PLANTED)
def test_a_planted_mistake_changes_the_count_and_compare_names_it(config, variant, words, capsys):
    shape = shape_of(config)
    change = next(v for v in P.VARIANTS if v.name == variant).change
    wrong = P.count(shape, P.Conventions(**change))
    assert wrong != P.count(shape)
    assert P.main(["--config", str(CONFIGS / config), "--compare", str(wrong)]) == 1
    out = capsys.readouterr().out
    assert "differs" in out and words in out.split("explained by:")[1]


def test_shared_experts_counted_as_routed_is_named_on_the_active_count(capsys):
    shape = shape_of("deepseek-v3.json")
    wrong = P.active_count(shape, P.Conventions(shared_as_routed=True))
    assert P.count(shape, P.Conventions(shared_as_routed=True)) == P.count(shape)  # the total is the same
    assert wrong == P.active_count(shape) - 58 * 3 * 7168 * 2048
    assert P.main(["--config", str(CONFIGS / "deepseek-v3.json"), "--compare-active", str(wrong)]) == 1
    assert "the shared experts counted as routed ones" in capsys.readouterr().out


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIGS.glob("*.json")))
def test_every_single_planted_variant_is_found_by_explain(config):
    shape = shape_of(config)
    for quantity, of in P.QUANTITIES.items():
        for v in P._candidates(shape, quantity):
            n = of(shape, replace(P.Conventions(), **v.change))
            assert [v.name] in [m["variants"] for m in P.explain(shape, str(n), quantity=quantity)["matches"]], v


def test_qwen2_o_bias_is_not_counted_and_a_claim_with_it_is_explained():
    shape = shape_of("qwen2-7b.json")
    with_o = P.count(shape, P.Conventions(o_bias=True))
    assert with_o - P.count(shape) == 28 * 3584
    assert [m["variants"] for m in P.explain(shape, str(with_o))["matches"]] == [["attention_biases"]]


# ---- --compare exit status ---------------------------------------------------------------------------------------
def test_compare_exit_status_is_1_when_different_0_when_equal(capsys):
    llama = ["--config", str(CONFIGS / "llama3-8b.json")]
    assert P.main([*llama, "--compare", "8030261248"]) == 0
    assert P.main([*llama, "--compare", "8030261249"]) == 1
    assert P.main([*llama, "--compare", "8.03e9"]) == 0 and P.main([*llama, "--compare", "8.59e9"]) == 1
    mixtral = ["--config", str(CONFIGS / "mixtral-8x7b.json")]
    assert P.main([*mixtral, "--compare", "46.7B", "--compare-active", "12.9B"]) == 0
    assert P.main([*mixtral, "--compare", "46.7B", "--compare-active", "46.7B"]) == 1  # all experts active
    out = capsys.readouterr().out
    assert "every routed expert counted as active" in out
    assert P.main([*mixtral, "--compare", "46702792704", "--json"]) == 0


# ---- --config ----------------------------------------------------------------------------------------------------
def test_config_reports_used_defaulted_and_ignored_keys():
    cfg = out_json(["--config", str(CONFIGS / "gpt2.json")])["config"]
    assert {"model_type", "n_embd", "n_layer", "n_head", "vocab_size", "n_positions"} == set(cfg["used"])
    assert any(d.startswith("tie_word_embeddings = true") for d in cfg["defaults"])
    assert {"activation_function", "n_ctx", "resid_pdrop"} <= set(cfg["ignored"])
    v3 = C.read_config(str(CONFIGS / "deepseek-v3.json"))
    assert "q_lora_rank" in v3.used and "topk_method" in v3.used and "rope_theta" in v3.ignored
    assert any(i.startswith("num_nextn_predict_layers (the multi-token-prediction") for i in v3.ignored)
    text = P.run(["--config", str(CONFIGS / "deepseek-v3.json")])
    assert "model_type: deepseek_v3" in text and "in each of the 3 dense blocks" in text
    assert "active per token: 37,552,297,472" in text


def test_json_breakdown_sums_to_total_and_active():
    for name in ("deepseek-v3.json", "gpt2.json", "mixtral-8x7b.json"):
        out = out_json(["--config", str(CONFIGS / name)])
        assert sum(t["total"] for t in out["tensors"]) == out["total"]
        assert sum(t["active"] for t in out["tensors"]) == out["active"]


def test_a_config_without_head_dim_defaults_and_one_with_it_is_read(tmp_path):
    data = json.loads((CONFIGS / "llama3-8b.json").read_text())
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**data, "head_dim": 64}))
    assert by_name(C.read_config(str(path)).shape)["W_Q"].shape == (4096, 32 * 64)
    path.write_text(json.dumps({**data, "attention_bias": True, "mlp_bias": True}))
    assert {"b_Q", "b_O", "b_gate", "b_down"} <= set(by_name(C.read_config(str(path)).shape))


BASE = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100,
        "num_attention_heads": 4, "intermediate_size": 128}


@pytest.mark.parametrize(("content", "needle"), [
    ("{", "not valid JSON"),
    ("[1, 2]", "not an object of keys"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (" " * (C.MAX_CONFIG_BYTES + 1), "over the limit"),
    (json.dumps({**BASE, "model_type": "bert"}), "the known ones are gpt2, llama"),
    (json.dumps({k: v for k, v in BASE.items() if k != "model_type"}), "has no model_type"),
    (json.dumps({k: v for k, v in BASE.items() if k != "intermediate_size"}), "needs the key 'intermediate_size'"),
    (json.dumps({**BASE, "hidden_size": "64"}), "hidden_size must be a whole number"),
    (json.dumps({**BASE, "hidden_size": True}), "hidden_size must be a whole number"),
    (json.dumps({**BASE, "num_hidden_layers": 0}), "num_hidden_layers must be a whole number between 1"),
    (json.dumps({**BASE, "num_key_value_heads": 3}), "not a multiple of num_key_value_heads = 3"),
    (json.dumps({**BASE, "hidden_size": 66}), "give head_dim"),
    (json.dumps({**BASE, "tie_word_embeddings": "yes"}), "tie_word_embeddings must be true or false"),
    (json.dumps({**BASE, "model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 3}),
     "more than num_local_experts"),
    (json.dumps({**BASE, "model_type": "deepseek_v3"}), "needs the key 'q_lora_rank'"),
    ('{"model_type": "llama", "hidden_size": NaN}', "got NaN"),
])
def test_a_bad_config_is_one_line_exit_2(tmp_path, capsys, content, needle):
    path = tmp_path / "config.json"
    path.write_text(content)
    assert P.main(["--config", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and needle in captured.err, captured.err


@pytest.mark.parametrize(("argv", "needle"), [
    (["--config", "/nonexistent/config.json"], "cannot read it"),
    (["--config", "."], "is a directory"),
    (["--config", str(CONFIGS / "gpt2.json"), "--hidden", "64"], "leave out --hidden"),
    (["--hidden", "64"], "--layers, --vocab, --ffn, --heads, --kv-heads missing"),
    (["--config", str(CONFIGS / "gpt2.json"), "--compare-active", "lots"], "--compare-active 'lots' is not a count"),
])
def test_bad_options_are_one_line_exit_2(capsys, argv, needle):
    assert P.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
