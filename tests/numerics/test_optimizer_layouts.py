"""``pairs="auto"`` never guesses how a square matrix is stored.

A plain-dict model written as usual (``q = x @ wq``, ``k = x @ wk``, ``v = x @ wv``, ``y = o @ wo``) with square
``d × d`` projections reads both as ``x @ W`` kernels and as ``x @ Wᵀ`` weights. ``AutoPairs(heads=H)`` used to read
its ``wo``/``wv`` in the other layout silently: each head's value-side product change was about twice the derived
budget ``η``, and ``wv``'s update about half off the one the explicit declaration ``OVPair(kernels=True)`` gives.
Now such a block is refused in one line naming ``layout=``; with the right layout the update is the explicit
declaration's, and the per-head budgets hold when measured in the model's own forward use of the matrices. The old
guess is planted (monkeypatched back) and these checks catch it.
"""

import jax
import numpy as np
import pytest

from numerics import optimizer
from numerics.optimizer import AutoPairs, OVPair, QKPair, auto_pairs, compositional_muon, describe_pairs
from numerics.optimizer.framework_pairs import LAYOUTS

D, H, DH = 16, 4, 4  # square projections: d = H·d_h
LR = 0.05
#: the explicit declarations of a block of each layout (QKPair transposed=…, OVPair kernels=…)
DECLARED = {name: [QKPair("attn/wq", "attn/wk", H, H, transposed=qk_t), OVPair("attn/wo", "attn/wv", H, H,
                                                                               kernels=ov_k)]
            for name, (qk_t, ov_k) in LAYOUTS.items()}


def square_model(seed=0):
    """``q = x @ wq``, ``k = x @ wk``, ``v = x @ wv``, ``y = o @ wo``: every projection ``x @ W`` (in × out)."""
    rng = np.random.default_rng(seed)
    attn = {n: rng.standard_normal((D, D)) / np.sqrt(D) for n in ("wq", "wk", "wv", "wo")}
    return {"attn": attn, "mlp": rng.standard_normal((D, 3 * D))}


def grads(params, seed=1):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: rng.standard_normal(x.shape), params)


def update(pairs, params, g):
    opt = compositional_muon(LR, pairs=pairs, msign="svd", damping=0.0)
    return opt.update(g, opt.init(params), params)[0]


def op(x):
    return float(np.linalg.norm(np.asarray(x, np.float64), 2))


def value_side_changes(params, u):
    """Per head ``‖W_O,h ΔW_V,h‖_op`` as the model's forward uses the matrices (``v = x @ wv``, ``y = o @ wo``):
    head ``h`` maps ``x ↦ x @ wv[:, h] @ wo[h, :]``, so its value-side change is ``Δwv[:, h] @ wo[h, :]``."""
    wo, dwv = np.asarray(params["attn"]["wo"]), np.asarray(u["attn"]["wv"])
    return [op(dwv[:, h * DH:(h + 1) * DH] @ wo[h * DH:(h + 1) * DH, :]) for h in range(H)]


def relative_difference(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))


@pytest.fixture(scope="module")
def square():
    params = square_model()
    g = grads(params)
    return params, g, update(DECLARED["kernel"], params, g)


def test_square_plain_block_is_refused_naming_layout(square):
    params, g, _ = square
    pattern = (r"pairs='auto' cannot tell how the attention block 'attn' \(wq/wk/wv/wo\) is stored: its shapes "
               r"\[\(16, 16\), \(16, 16\), \(16, 16\), \(16, 16\)\] read as layout='kernel' and as layout='weight' "
               r"and as layout='paper', .* pass pairs=numerics.optimizer.AutoPairs\(heads=H, layout=L\) with L "
               r"'kernel': every projection used as x @ W")
    for call in (lambda: auto_pairs(params, heads=H), lambda: describe_pairs(params, AutoPairs(heads=H)),
                 lambda: compositional_muon(LR, pairs=AutoPairs(heads=H)).init(params)):
        with pytest.raises(ValueError, match=pattern) as caught:
            call()
        assert "\n" not in str(caught.value)


def test_the_given_layout_gives_the_explicit_declaration_and_the_derived_budget(square):
    params, g, want = square
    for name, declared in DECLARED.items():
        assert auto_pairs(params, heads=H, layout=name) == declared
    got = update(AutoPairs(heads=H, layout="kernel"), params, g)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_allclose(value_side_changes(params, got), LR, rtol=1e-9)  # each head's budget is η
    for wrong in ("weight", "paper"):  # the other layouts are other updates, off the budget in the model's use
        other = update(AutoPairs(heads=H, layout=wrong), params, g)
        assert relative_difference(other["attn"]["wv"], want["attn"]["wv"]) > 0.1
        assert not np.allclose(value_side_changes(params, other), LR, rtol=1e-3)


def test_the_old_guess_planted_is_caught(square, monkeypatch):
    """Planted: the old reading of a square plain block (Q/K as ``x @ W``, O/V as ``x @ Wᵀ``, i.e. 'paper'),
    chosen silently. The checks above catch it: the value side is about 2η per head and ``wv`` half off."""
    params, g, want = square
    monkeypatch.setattr(optimizer.pairs, "block_layout", lambda *args: "paper")
    guessed = update(AutoPairs(heads=H), params, g)  # no refusal: the old behaviour
    ratios = np.asarray(value_side_changes(params, guessed)) / LR
    assert ratios.max() > 1.5 and not np.allclose(ratios, 1.0, rtol=1e-3), ratios  # 1.6–2.2 η here
    assert relative_difference(guessed["attn"]["wv"], want["attn"]["wv"]) > 0.3  # 59 % here
    table = describe_pairs(params, AutoPairs(heads=H))  # and the table shows the mixed layout it used
    assert "qk pair: heads=4 kv_heads=4 d_h=4 (x @ W)" in table
    assert "ov pair: heads=4 kv_heads=4 d_h=4 (x @ Wᵀ)" in table


def test_describe_pairs_prints_the_layout_of_each_pair(square):
    params = square[0]
    lines = describe_pairs(params, AutoPairs(heads=H, layout="kernel")).splitlines()
    assert all(line.split("d_h=4 ")[1].startswith("(x @ W),") for line in lines if " pair: " in line)
    table = describe_pairs(params, AutoPairs(heads=H, layout="weight"))
    assert table.count("(x @ Wᵀ)") == 4 and "(x @ W)," not in table
    table = describe_pairs(params, AutoPairs(heads=H, layout="paper"))
    assert table.count("qk pair: heads=4 kv_heads=4 d_h=4 (x @ W)") == 2 and table.count("(x @ Wᵀ)") == 2


def test_leaf_names_fix_the_layout_of_square_blocks():
    sq = np.eye(D)
    kernels = {"attn": {n: {"kernel": sq} for n in ("q", "k", "v", "o")}}
    assert auto_pairs(kernels, heads=H) == [QKPair("attn/q/kernel", "attn/k/kernel", H, H),
                                            OVPair("attn/o/kernel", "attn/v/kernel", H, H, kernels=True)]
    weights = {"attn": {n: {"weight": sq} for n in ("q_proj", "k_proj", "v_proj", "o_proj")}}
    assert auto_pairs(weights, heads=H) == [QKPair("attn/q_proj/weight", "attn/k_proj/weight", H, H, transposed=True),
                                            OVPair("attn/o_proj/weight", "attn/v_proj/weight", H, H, kernels=False)]
    assert auto_pairs(weights, heads=H, layout="weight") == auto_pairs(weights, heads=H)
    with pytest.raises(ValueError, match=r"holds its matrices as 'kernel', which is layout='kernel', but "
                                         r"layout='weight' was given; declare the block's pairs"):
        auto_pairs(kernels, heads=H, layout="weight")
    with pytest.raises(ValueError, match="cannot tell how"):  # 'w' (haiku's, and others') fixes nothing
        auto_pairs({"attn": {n: {"w": sq} for n in ("q", "k", "v", "o")}}, heads=H)


def test_shapes_fix_the_layout_only_where_one_layout_fits():
    rng = np.random.default_rng(2)
    w = lambda *s: rng.standard_normal(s)  # noqa: E731
    # grouped key heads: K shares the model-width axis with Q, so even square wq/wo are read
    kernel_gqa = {"wq": w(D, D), "wk": w(D, DH), "wv": w(D, DH), "wo": w(D, D)}
    assert auto_pairs(kernel_gqa, heads=H) == [QKPair("wq", "wk", H, 1), OVPair("wo", "wv", H, 1, kernels=True)]
    weight_gqa = {"wq": w(D, D), "wk": w(DH, D), "wv": w(DH, D), "wo": w(D, D)}
    assert auto_pairs(weight_gqa, heads=H) == [QKPair("wq", "wk", H, 1, transposed=True), OVPair("wo", "wv", H, 1)]
    # the declarations' own layout, non-square: W_V shaped like W_Qᵀ
    paper = {"wq": w(D, 8), "wk": w(D, 8), "wv": w(8, D), "wo": w(D, 8)}
    assert auto_pairs(paper, heads=2) == [QKPair("wq", "wk", 2, 2), OVPair("wo", "wv", 2, 2)]
    # all four in one orientation but not square: (16, 8) is d = 16 as kernels and d = 8 as weights
    with pytest.raises(ValueError, match=r"read as layout='kernel' and as layout='weight', which pair"):
        auto_pairs({"wq": w(D, 8), "wk": w(D, 8), "wv": w(D, 8), "wo": w(8, D)}, heads=2)
    with pytest.raises(ValueError, match=r"reads as none of the layouts \['kernel', 'weight', 'paper'\] with "
                                         r"heads=2; declare its pairs"):
        auto_pairs({"wq": w(D, 8), "wk": w(8, D), "wv": w(D, 8), "wo": w(8, D)}, heads=2)


def test_a_layout_that_is_not_one_is_refused_in_one_line():
    for bad in ("x @ W", "kernels", 1):
        with pytest.raises(ValueError, match=r"AutoPairs\(layout=.*\) is not a layout; layout= takes 'kernel': "
                                             r".*; 'weight': .*; 'paper': ") as caught:
            AutoPairs(layout=bad)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="is not a layout"):
        auto_pairs({}, layout="transposed")
