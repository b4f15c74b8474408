"""The shape options of ``python -m paramcount`` for every family that ``--config`` reads (GPT-2,
Llama, Mistral, Qwen2, Mixtral-style experts with shared experts, DeepSeek's multi-head latent attention).

The options of each published model in tests/configs (written out here by hand from the config) give the same
shape, total and active count as its config file; GPT-2 small is 124,439,808 from options alone; every option of
those command lines matters (left out, the count changes or the command names it); and a missing, foreign or bad
option is one line and exit status 2.
"""

import json
from pathlib import Path

import pytest

from paramcount import config as C
from paramcount import count as P
from paramcount import flags as F

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

CONFIGS = Path(__file__).parents[1] / "configs"

GPT2_SMALL = "--family gpt2 --hidden 768 --layers 12 --vocab 50257 --heads 12 --positions 1024"
#: each config file of tests/configs as shape options
AS_OPTIONS = {
    "gpt2.json": GPT2_SMALL,
    "llama3-8b.json": "--hidden 4096 --layers 32 --vocab 128256 --ffn 14336 --heads 32 --kv-heads 8",
    "qwen2-0.5b.json": "--family qwen2 --hidden 896 --layers 24 --vocab 151936 --ffn 4864 --heads 14 --kv-heads 2 "
                       "--tied-embeddings",
    "qwen2-7b.json": "--family qwen2 --hidden 3584 --layers 28 --vocab 152064 --ffn 18944 --heads 28 --kv-heads 4",
    "mixtral-8x7b.json": "--family mixtral --hidden 4096 --layers 32 --vocab 32000 --ffn 14336 --heads 32 "
                         "--kv-heads 8 --experts 8 --top-k 2",
    "deepseek-v2-lite.json": "--family deepseek_v2 --hidden 2048 --layers 27 --vocab 102400 --ffn 10944 --heads 16 "
                             "--kv-lora-rank 512 --qk-nope-head-dim 128 --qk-rope-head-dim 64 --v-head-dim 128 "
                             "--experts 64 --top-k 6 --expert-ffn 1408 --shared-experts 2 --dense-layers 1",
    "deepseek-v2.json": "--family deepseek_v2 --hidden 5120 --layers 60 --vocab 102400 --ffn 12288 --heads 128 "
                        "--q-lora-rank 1536 --kv-lora-rank 512 --qk-nope-head-dim 128 --qk-rope-head-dim 64 "
                        "--v-head-dim 128 --experts 160 --top-k 6 --expert-ffn 1536 --shared-experts 2 "
                        "--dense-layers 1",
    "deepseek-v3.json": "--family deepseek_v3 --hidden 7168 --layers 61 --vocab 129280 --ffn 18432 --heads 128 "
                        "--q-lora-rank 1536 --kv-lora-rank 512 --qk-nope-head-dim 128 --qk-rope-head-dim 64 "
                        "--v-head-dim 128 --experts 256 --top-k 8 --expert-ffn 2048 --shared-experts 1 "
                        "--dense-layers 3",
}


def options_shape(argv):
    return F.shape_from_options(P._parser().parse_args(argv)).shape


def out_json(argv):
    return json.loads(P.run([*argv, "--json"]))


def test_every_config_of_the_tests_is_written_as_options():
    assert set(AS_OPTIONS) == {p.name for p in CONFIGS.glob("*.json")}


def test_gpt2_small_from_options_is_124_439_808():
    out = out_json(GPT2_SMALL.split())
    assert out["total"] == out["active"] == 124_439_808 and out["family"] == "gpt2"
    assert out["options"]["defaults"] == ["--ffn 3072 (absent: 4 × --hidden)",
                                          "--tied-embeddings (GPT-2 ties its embeddings)"]
    assert out["config"] is None
    assert "family: gpt2" in P.run(GPT2_SMALL.split())


@pytest.mark.parametrize("config", sorted(AS_OPTIONS))
def test_options_and_config_give_the_same_shape_and_counts(config):
    from_file = C.read_config(str(CONFIGS / config)).shape
    from_options = options_shape(AS_OPTIONS[config].split())
    assert from_options == from_file
    assert (P.count(from_options), P.active_count(from_options)) == (P.count(from_file), P.active_count(from_file))


def _without(argv, option):
    """``argv`` with ``option`` (and its value, unless it is a switch) left out."""
    i = argv.index(option)
    switch = i + 1 == len(argv) or argv[i + 1].startswith("--")
    return argv[:i] + argv[i + (1 if switch else 2):]


@pytest.mark.parametrize("config", sorted(AS_OPTIONS))
def test_every_option_matters_or_its_absence_is_named(config, capsys):
    argv = AS_OPTIONS[config].split()
    full = options_shape(argv)
    for option in [a for a in argv if a.startswith("--") and a != "--family"]:
        shorter = _without(argv, option)
        status = P.main([*shorter, "--json"])
        captured = capsys.readouterr()
        if status == 2:
            assert captured.err.count("\n") == 1 and option in captured.err, (option, captured.err)
        else:
            assert status == 0 and json.loads(captured.out)["total"] != P.count(full), option


def test_mixtral_style_experts_with_shared_experts_and_the_active_count():
    argv = AS_OPTIONS["mixtral-8x7b.json"].split()
    plain, shared = out_json(argv), out_json([*argv, "--shared-experts", "2"])
    d, f, layers = 4096, 14336, 32
    assert plain["total"] == 46_702_792_704 and plain["active"] == 12_879_925_248
    assert shared["total"] - plain["total"] == shared["active"] - plain["active"] == layers * 3 * d * 2 * f
    names = {t["name"] for t in shared["tensors"]}
    assert {"shared_experts.W_gate", "router", "experts.W_down"} <= names
    # a narrower expert than the dense MLP, and dense first blocks
    mixed = out_json([*argv, "--expert-ffn", "1024", "--dense-layers", "2"])
    t = {x["name"]: x for x in mixed["tensors"]}
    assert t["W_up"]["shape"] == [4096, 14336] and t["W_up"]["blocks"] == 2
    assert t["experts.W_up"]["shape"] == [8, 4096, 1024] and t["experts.W_up"]["blocks"] == 30


def test_deepseek_options_read_the_mla_ranks_and_rope_dims():
    argv = AS_OPTIONS["deepseek-v3.json"].split()
    t = {x["name"]: x for x in out_json(argv)["tensors"]}
    assert t["wq_b"]["shape"] == [128 * 192, 1536] and t["wkv_a"]["shape"] == [512 + 64, 7168]
    assert t["wkv_b"]["shape"] == [128 * 256, 512] and t["router.score_bias"]["shape"] == [256]
    no_q = {x["name"] for x in out_json(_without(argv, "--q-lora-rank"))["tensors"]}
    assert "wq" in no_q and "wq_a" not in no_q
    assert "router.score_bias" not in {x["name"] for x in out_json([*argv, "--no-router-bias"])["tensors"]}
    assert P.main([*argv, "--compare", "671B", "--compare-active", "37.6B"]) == 0


@pytest.mark.parametrize(("options", "claim", "words"), [
    (GPT2_SMALL + " --no-tied-embeddings", "124,439,808", "tied input and output embeddings"),
    (AS_OPTIONS["qwen2-7b.json"], str(7_615_616_512 - 28 * (3584 + 2 * 512)), "the Q, K and V biases left out"),
    (AS_OPTIONS["deepseek-v2-lite.json"], "15,706,484,224", None),
])
def test_compare_on_options(options, claim, words, capsys):
    status = P.main([*options.split(), "--compare", claim])
    out = capsys.readouterr().out
    if words is None:
        assert status == 0 and "agrees" in out
    else:
        assert status == 1 and words in out.split("explained by:")[1]


def _an_option(dest):
    """One use of the option ``dest`` on a command line."""
    option = F.flag(dest)
    return [option] if any(option == s for s, _ in F.SWITCHES) else [option, "4"]


@pytest.mark.parametrize("dest", sorted(F.APPLIES))
def test_an_option_of_another_family_is_refused(dest, capsys):
    family = next(f for f in C.FAMILIES if f not in F.APPLIES[dest])
    assert P.main(["--hidden", "64", "--layers", "2", "--vocab", "9", "--heads", "4", "--family", family,
                   *_an_option(dest)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{F.flag(dest)} does not apply to --family {family}" in err, err


LITE = AS_OPTIONS["deepseek-v2-lite.json"].split()


@pytest.mark.parametrize(("argv", "needle"), [
    (["--family", "gpt2", "--hidden", "768"], "--layers, --vocab, --heads, --positions missing"),
    (["--family", "gpt2", "--hidden", "770", "--layers", "2", "--vocab", "9", "--heads", "12", "--positions", "8"],
     "--hidden 770 is not a multiple of --heads 12"),
    (["--family", "bert"], "argument --family: invalid choice: 'bert'"),
    (["--family", "mixtral", "--hidden", "64", "--layers", "2", "--vocab", "9", "--ffn", "8", "--heads", "4",
      "--kv-heads", "2"], "--experts missing"),
    (AS_OPTIONS["mixtral-8x7b.json"].replace("--top-k 2", "").split(), "--top-k missing"),
    (AS_OPTIONS["mixtral-8x7b.json"].replace("--top-k 2", "--top-k 9").split(), "--top-k 9 is more than --experts 8"),
    (AS_OPTIONS["mixtral-8x7b.json"].replace("--ffn 14336", "").split(), "give --expert-ffn"),
    (AS_OPTIONS["qwen2-7b.json"].replace("--kv-heads 4", "--kv-heads 5").split(),
     "--heads 28 is not a multiple of --kv-heads 5"),
    ([*_without(_without(LITE, "--experts"), "--top-k")], "--expert-ffn describes the experts: give --experts"),
    ([*_without(LITE, "--ffn")], "give --ffn: the dense blocks"),
    ([*_without(LITE, "--dense-layers"), "--dense-layers", "28"], "--dense-layers 28 is more than --layers 27"),
    ([*_without(LITE, "--dense-layers")], "--ffn 10944 is not used"),
    ([*LITE, "--shared-experts", "-1"], "argument --shared-experts: must be >= 0"),
    ([*LITE, "--moe-every", "0"], "argument --moe-every: must be >= 1"),
    (["--config", str(CONFIGS / "gpt2.json"), "--family", "gpt2"], "leave out --family"),
    (["--config", str(CONFIGS / "gpt2.json"), "--no-tied-embeddings"], "leave out --tied-embeddings"),
])
def test_a_missing_or_bad_option_is_one_line_exit_2(argv, needle, capsys):
    assert P.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and needle in captured.err, captured.err
