"""Parameter counts of Llama-3-style decoders derived from their shapes, and explained hand totals."""

import json
import subprocess
import sys

import pytest

from paramcount import count as P

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

LLAMA3_8B = ["--hidden", "4096", "--layers", "32", "--vocab", "128256", "--ffn", "14336", "--heads", "32",
             "--kv-heads", "8"]
LLAMA31_405B = ["--hidden", "16384", "--layers", "126", "--vocab", "128256", "--ffn", "53248", "--heads", "128",
                "--kv-heads", "8"]


def _json(argv):
    return json.loads(P.run([*argv, "--json"]))


def test_published_totals():
    assert _json(LLAMA3_8B)["total"] == 8_030_261_248
    assert _json(LLAMA31_405B)["total"] == 405_853_388_800


def test_breakdown_sums_to_total_and_shapes_are_the_model():
    out = _json(LLAMA3_8B)
    assert sum(t["total"] for t in out["tensors"]) == out["total"]
    shapes = {t["name"]: tuple(t["shape"]) for t in out["tensors"]}
    assert shapes["W_K"] == (4096, 1024) and shapes["W_down"] == (14336, 4096)
    assert "b_Q" not in shapes and "output_head" in shapes


def test_tied_embeddings_drop_the_head():
    tied = _json([*LLAMA3_8B, "--tied-embeddings"])
    assert tied["total"] == 8_030_261_248 - 128256 * 4096


def test_survey_total_for_405b_is_explained():
    out = _json([*LLAMA31_405B, "--compare", "405,872,984,064"])["compare"]
    assert out["difference"] == 405_872_984_064 - 405_853_388_800
    assert [m["variants"] for m in out["matches"]] == [["mlp_biases", "norm_shifts", "no_final_norm"]]
    assert out["matches"][0]["count"] == 405_872_984_064


def test_sixteen_d_squared_rule_is_explained():
    out = _json([*LLAMA3_8B, "--compare", "8.59e9"])["compare"]
    variants = {frozenset(m["variants"]) for m in out["matches"]}
    assert frozenset({"gqa_ignored", "ffn_4d", "no_embeddings"}) in variants
    # the rule itself: 16 d² per layer, nothing else
    rule = P.Conventions(gqa=False, ffn_4d=True, embeddings=False, norms=False)
    assert P.count(P.Shape(4096, 32, 128256, 14336, 32, 8, 128), rule) == 16 * 4096**2 * 32


def test_matching_total_needs_no_explanation():
    out = _json([*LLAMA3_8B, "--compare", "8030261248"])["compare"]
    assert out["difference"] == 0 and out["matches"] == [{"variants": [], "explanation": [], "count": 8030261248}]


def test_unexplainable_total_says_so():
    text = P.run([*LLAMA3_8B, "--compare", "12345"])
    assert "no combination" in text


@pytest.mark.parametrize("bad", [
    ["--hidden", "0"], ["--hidden", "1e99"], ["--heads", "7"], ["--kv-heads", "5"], ["--compare", "lots"],
    ["--compare", "9" * 40], ["--layers", "-3"],
])
def test_bad_input_is_one_line_exit_2(bad, capsys):
    argv = list(LLAMA3_8B)
    for i in range(0, len(bad), 2):
        if bad[i] in argv:
            argv[argv.index(bad[i]) + 1] = bad[i + 1]
        else:
            argv += bad[i:i + 2]
    assert P.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err


@pytest.mark.parametrize("argv", [
    ["paramcount", "--hidden", "64", "--layers", "2", "--vocab", "100", "--ffn", "128",
     "--heads", "4", "--kv-heads", "2"],
    ["derivations.crosscheck", "identity", "A^T B", "(B^T A)^T"],  # prints its verdict; builds no derivation
])
def test_stdout_on_a_full_disk_is_one_line_exit_2(argv):
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", *argv], check=False, stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"{argv[0]}: error: cannot write to stdout: No space left on device"]
