"""LoRA pairs and multi-head latent attention blocks in the optimizer.

The optimizer's step of a :class:`LoRAPair` is the emitted ``lora_halfsplit`` (or ``joint_qk`` on ``(B, Aᵀ)``)
and equals the closed form computed here in NumPy; at the ``B = 0`` start ``A`` does not move and ``B`` takes a
finite nonzero step, and near ``B = 0`` the damped ``A`` step stays bounded where the undamped one grows like
``1/σ_min(B)``. An :class:`MLAPair`'s step is the six emitted MLA rules fed with the partners of
``derivations.mla.partners`` (NumPy), although the optimizer forms them in JAX (QR factors, no callbacks), under
``jit`` too. Declarations are found by name (peft, flax nnx), and bad ones fail in one line naming the parameter.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from derivations import mla as derived_mla
from numerics.emitted import joint, lora, mla
from numerics.optimizer import (
    AutoPairs,
    LoRAPair,
    MLAPair,
    MLAPlan,
    auto_pairs,
    compositional_muon,
    describe_pairs,
    mla_partners,
    scale_by_compositional_muon,
)

D_OUT, D_IN, R = 10, 12, 3


def step(opt, params, g, jit=False):
    return (jax.jit(opt.update) if jit else opt.update)(g, opt.init(params), params)[0]


def op(x):
    return float(np.linalg.norm(np.asarray(x, np.float64), 2))


def msign(x):
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    return u @ vt


def inv_root(gram, power=-0.5):
    """``gram^power``, with the pseudo-inverse's cut (eigenvalues at or below ``n eps max`` give 0)."""
    e, v = np.linalg.eigh(gram)
    keep = e > len(e) * np.finfo(float).eps * max(e.max(), 0.0)
    return (v * np.where(keep, np.where(keep, e, 1.0) ** power, 0.0)) @ v.T


def lora_closed_form(b, a, g_b, g_a, lr, lam, power=-0.5):
    """``ΔB = −η msign(G_B C_A⁻¹) C_A⁻¹``, ``ΔA = −η C_B⁻¹ msign(C_B⁻¹ G_A)`` (``power``: the planted mistake)."""
    c_a, c_b = inv_root(a @ a.T + lam * np.eye(len(a)), power), inv_root(b.T @ b + lam * np.eye(b.shape[1]), power)
    return -lr * msign(g_b @ c_a) @ c_a, -lr * c_b @ msign(c_b @ g_a)


def lora_params(rng, b_scale=1.0):
    return {"proj": {"lora_B": b_scale * rng.standard_normal((D_OUT, R)), "lora_A": rng.standard_normal((R, D_IN))},
            "bias": rng.standard_normal(D_OUT)}


PEFT = LoRAPair("proj/lora_B", "proj/lora_A")


# ---- LoRA ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("damping", [0.0, 0.3])
def test_lora_step_is_the_emitted_rule_and_the_closed_form(damping):
    rng = np.random.default_rng(0)
    params, lr = lora_params(rng), 0.05
    g_w = rng.standard_normal((D_OUT, D_IN))  # ∂L/∂W: the factor gradients follow by the chain rule
    b, a = params["proj"]["lora_B"], params["proj"]["lora_A"]
    g = {"proj": {"lora_B": g_w @ a.T, "lora_A": b.T @ g_w}, "bias": rng.standard_normal(D_OUT)}
    u = step(compositional_muon(lr, pairs=[PEFT], msign="svd", damping=damping), params, g)
    d_b, d_a = lora.lora_halfsplit(b, a, g["proj"]["lora_B"], g["proj"]["lora_A"], eps=2.0, damping=damping,
                                   msign="svd")
    np.testing.assert_allclose(u["proj"]["lora_B"], lr * np.asarray(d_b), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(u["proj"]["lora_A"], lr * np.asarray(d_a), rtol=1e-10, atol=1e-12)
    want_b, want_a = lora_closed_form(b, a, g["proj"]["lora_B"], g["proj"]["lora_A"], lr, damping)
    np.testing.assert_allclose(u["proj"]["lora_B"], want_b, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(u["proj"]["lora_A"], want_a, rtol=1e-8, atol=1e-10)
    if damping == 0.0:  # each half of ΔW = ΔB A + B ΔA has operator norm η
        assert op(u["proj"]["lora_B"] @ a) == pytest.approx(lr, rel=1e-9)
        assert op(b @ u["proj"]["lora_A"]) == pytest.approx(lr, rel=1e-9)
    # planted mistake: whitening by C_A⁻¹ squared (the inverse Gram) is told apart
    wrong_b, _ = lora_closed_form(b, a, g["proj"]["lora_B"], g["proj"]["lora_A"], lr, damping, power=-1.0)
    assert not np.allclose(u["proj"]["lora_B"], wrong_b, rtol=1e-3)


def test_lora_flax_kernels_are_the_transposed_rule_and_leading_axes_batch():
    rng = np.random.default_rng(1)
    b, a = rng.standard_normal((2, D_OUT, R)), rng.standard_normal((2, R, D_IN))  # two stacked layers
    g_b, g_a = rng.standard_normal(b.shape), rng.standard_normal(a.shape)
    peft = step(compositional_muon(0.1, pairs=[PEFT]), {"proj": {"lora_B": b, "lora_A": a}},
                {"proj": {"lora_B": g_b, "lora_A": g_a}})  # eager, as below: one compilation of the rule
    nnx = {"lora_a": a.swapaxes(-1, -2), "lora_b": b.swapaxes(-1, -2)}  # y = x @ lora_a @ lora_b
    found = auto_pairs(nnx)
    assert found == [LoRAPair("lora_b", "lora_a", kernels=True)]
    g_nnx = {"lora_a": g_a.swapaxes(-1, -2), "lora_b": g_b.swapaxes(-1, -2)}
    u = step(compositional_muon(0.1, pairs="auto"), nnx, g_nnx)
    np.testing.assert_allclose(u["lora_b"], peft["proj"]["lora_B"].swapaxes(-1, -2), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(u["lora_a"], peft["proj"]["lora_A"].swapaxes(-1, -2), rtol=1e-10, atol=1e-12)


def test_lora_b_zero_start_and_the_undamped_blow_up_near_it():
    """At B = 0 (G_A = Bᵀ G_W = 0): A does not move and B takes a finite nonzero step, damped or not. Near B = 0
    the undamped ‖ΔA‖ grows like η/σ_min(B), the damped one stays below η/√λ (derivations.lora)."""
    rng = np.random.default_rng(2)
    lr, lam = 0.01, 1e-2
    params = lora_params(rng, b_scale=0.0)
    a, g_w = params["proj"]["lora_A"], rng.standard_normal((D_OUT, D_IN))
    g = {"proj": {"lora_B": g_w @ a.T, "lora_A": np.zeros((R, D_IN))}, "bias": np.zeros(D_OUT)}
    for pair, damping in ((PEFT, lam), (PEFT._replace(damping=0.0), lam), (PEFT, 0.0)):
        u = step(compositional_muon(lr, pairs=[pair], msign="svd", damping=damping), params, g)
        lam_used = pair.damping if pair.damping is not None else damping
        assert np.all(u["proj"]["lora_A"] == 0)
        assert np.all(np.isfinite(u["proj"]["lora_B"])) and op(u["proj"]["lora_B"]) > 0
        want_b, _ = lora_closed_form(np.zeros((D_OUT, R)), a, g["proj"]["lora_B"], g["proj"]["lora_A"], lr, lam_used)
        np.testing.assert_allclose(u["proj"]["lora_B"], want_b, rtol=1e-8, atol=1e-12)
    near = lora_params(np.random.default_rng(3), b_scale=1e-4)  # after the first steps: B small, nonzero
    b = near["proj"]["lora_B"]
    g = {"proj": {"lora_B": g_w @ near["proj"]["lora_A"].T, "lora_A": b.T @ g_w}, "bias": np.zeros(D_OUT)}
    damped = step(compositional_muon(lr, pairs=[PEFT], msign="svd", damping=lam), near, g)
    undamped = step(compositional_muon(lr, pairs=[PEFT._replace(damping=0.0)], msign="svd", damping=lam), near, g)
    sigma_min = np.linalg.svd(b, compute_uv=False).min()
    assert op(damped["proj"]["lora_A"]) <= lr / np.sqrt(lam) * (1 + 1e-9)
    assert op(undamped["proj"]["lora_A"]) == pytest.approx(lr / sigma_min, rel=1e-6)
    assert op(undamped["proj"]["lora_A"]) > 100 * lr / np.sqrt(lam)


def test_lora_joint_is_the_joint_qk_rule_of_a_square_adapter():
    rng = np.random.default_rng(4)
    b, a = rng.standard_normal((D_IN, R)), rng.standard_normal((R, D_IN))
    g_b, g_a = rng.standard_normal(b.shape), rng.standard_normal(a.shape)
    params, g = {"proj": {"lora_B": b, "lora_A": a}}, {"proj": {"lora_B": g_b, "lora_A": g_a}}
    u = step(compositional_muon(0.1, pairs=[PEFT], lora_rule="joint"), params, g)
    d_b, d_at = joint.joint_qk(b, a.T, g_b, g_a.T, eps=2.0, damping=1e-2)
    np.testing.assert_allclose(u["proj"]["lora_B"], 0.1 * np.asarray(d_b), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(u["proj"]["lora_A"], 0.1 * np.asarray(d_at).T, rtol=1e-10, atol=1e-12)
    rect = lora_params(rng)
    with pytest.raises(ValueError, match=r"lora_rule='joint' needs a square adapter, but the LoRA pair "
                                         r"\('proj/lora_B', 'proj/lora_A'\) has d_out = 10 and d_in = 12") as err:
        step(compositional_muon(0.1, pairs=[PEFT], lora_rule="joint"), rect, rect)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"lora_rule must be one of \('half_split', 'joint'\), got 'jiont'"):
        compositional_muon(0.1, lora_rule="jiont")


def test_lora_pairs_found_by_their_usual_names():
    rng = np.random.default_rng(5)
    peft = {"layers": {"0": {"self_attn": {
        "q_proj": {"base_layer": {"weight": rng.standard_normal((16, 16))},
                   "lora_A": {"default": {"weight": rng.standard_normal((R, 16))}},
                   "lora_B": {"default": {"weight": np.zeros((8, R))}}},
        "v_proj": {"lora_A": {"default": {"weight": rng.standard_normal((R, 16))}},
                   "lora_B": {"default": {"weight": np.zeros((16, R))}}}}}}}
    q, v = "layers/0/self_attn/q_proj", "layers/0/self_attn/v_proj"
    assert sorted(auto_pairs(peft)) == sorted([LoRAPair(f"{q}/lora_B/default/weight", f"{q}/lora_A/default/weight"),
                                               LoRAPair(f"{v}/lora_B/default/weight", f"{v}/lora_A/default/weight")])
    table = describe_pairs(peft)
    assert "LoRA pair: r=3 d_out=8 d_in=16, B of" in table and "2 LoRA pairs" in table
    assert [line.split()[-1] for line in table.splitlines() if "base_layer" in line] == ["muon"]
    square = {"lora_a": rng.standard_normal((R, R)), "lora_b": rng.standard_normal((R, R)),
              "x": {"lora_A": rng.standard_normal((R, R)), "lora_B": rng.standard_normal((R, R)),
                    "lora_A_scale": np.ones(R)}}
    assert sorted(auto_pairs(square)) == [LoRAPair("lora_b", "lora_a", kernels=True), LoRAPair("x/lora_B", "x/lora_A")]
    mixed = {"lora_a": np.ones((4, R)), "lora_b": np.ones((5, 2))}
    with pytest.raises(ValueError, match=r"found the LoRA factors 'lora_b' \(5, 2\) and 'lora_a' \(4, 3\), which share "
                                         r"no rank axis") as err:
        compositional_muon(0.1, pairs="auto").init(mixed)
    assert "\n" not in str(err.value)
    assert AutoPairs().declare({"lora_a": np.ones(3), "lora_b": np.ones(3)}) == []  # vectors: not factors


# ---- multi-head latent attention -----------------------------------------------------------------
CFG = {"heads": 3, "d_h": 3, "d_v": 3}
SHAPES = {"wq_a": (6, 24), "wq_b": (3 * 5, 6), "wkv_a": (5 + 2, 24), "wkv_b": (3 * 6, 5), "wo": (24, 3 * 3)}
NAMES = ("wq_a", "wq_b", "wkv_a", "wkv_b", "wo")
BLOCK = MLAPair(*(f"attn/{n}" for n in NAMES), heads=3, d_h=3)


def mla_model(rng, lead=()):
    return {"attn": {n: rng.standard_normal((*lead, *s)) for n, s in SHAPES.items()}, "norm": np.ones(6)}


def emitted_mla_step(w, g, lr):
    """The six emitted rules (damping 1e-2, exact msign) on stacked layers, fed with derivations.mla.partners
    (NumPy, Gram roots) layer by layer."""
    p = {k: jnp.asarray(np.stack([derived_mla.partners(**{n: w[n][i] for n in NAMES}, **CFG)[k]
                                  for i in range(len(w["wq_a"]))])) for k in ("K_hat", "E_Q", "W_DKV", "E_V",
                                                                               "W_O", "P_Q", "P_KV")}
    heads = [derived_mla.split_heads(g["wq_b"][i], g["wkv_b"][i], g["wo"][i], 3, 3, 3) for i in range(len(g["wo"]))]
    g_uq, g_uk, g_uv, g_o = (np.stack(x) for x in zip(*heads, strict=True))
    shared = lambda x: jnp.broadcast_to(x[:, None], (x.shape[0], 3, *x.shape[1:]))  # noqa: E731
    kw = {"eps": 2.0, "damping": 1e-2, "msign": "svd"}
    d_uq = mla.mla_query_up(p["K_hat"], shared(jnp.asarray(w["wq_a"])), g_uq, **kw)
    d_uk = mla.mla_key_up(p["E_Q"], shared(p["W_DKV"]), g_uk, **kw)
    d_uv = mla.mla_value_up(p["W_O"], shared(p["W_DKV"]), g_uv, **kw)
    d_o = mla.mla_output(p["E_V"], g_o, **kw)
    lead = len(w["wq_a"])
    return {"wq_a": lr * np.asarray(mla.mla_query_down(p["P_Q"], g["wq_a"], **kw)),
            "wq_b": lr * np.asarray(d_uq).reshape(lead, *SHAPES["wq_b"]),
            "wkv_a": lr * np.asarray(mla.mla_kv_down(p["P_KV"], g["wkv_a"], **kw)),
            "wkv_b": lr * np.concatenate([d_uk, d_uv], axis=2).reshape(lead, *SHAPES["wkv_b"]),
            "wo": lr * np.moveaxis(np.asarray(d_o), 1, 2).reshape(lead, *SHAPES["wo"])}


@pytest.fixture(scope="module")
def mla_case():
    """Two stacked layers, their gradients, the emitted reference and the optimizer's step (one compilation of
    the six emitted functions, shared: the optimizer calls them with the reference's shapes)."""
    rng = np.random.default_rng(6)
    params = mla_model(rng, lead=(2,))
    g = jax.tree.map(lambda x: rng.standard_normal(x.shape), params)
    want = emitted_mla_step(params["attn"], g["attn"], 0.1)
    return params, g, want, step(compositional_muon(0.1, pairs=[BLOCK], msign="svd"), params, g)


def test_mla_step_is_the_emitted_rules_with_stacked_layers(mla_case):
    params, g, want, u = mla_case
    for n in NAMES:
        np.testing.assert_allclose(u["attn"][n], want[n], rtol=1e-8, atol=1e-11, err_msg=n)
    assert describe_pairs(params, [BLOCK]).splitlines()[-1] == "0 pairs, 0 LoRA pairs, 1 MLA blocks, 0 Muon " \
                                                               "matrices, 1 AdamW parameters"


def test_mla_flax_kernels_are_the_transposed_rule(mla_case):
    params, g, _, u = mla_case
    flax = {"attn": {n: x.swapaxes(-1, -2) for n, x in params["attn"].items()}, "norm": params["norm"]}
    flax_g = {"attn": {n: x.swapaxes(-1, -2) for n, x in g["attn"].items()}, "norm": g["norm"]}
    u_flax = step(compositional_muon(0.1, pairs=[BLOCK._replace(kernels=True)], msign="svd"), flax, flax_g)
    for n in NAMES:
        np.testing.assert_allclose(u_flax["attn"][n], u["attn"][n].swapaxes(-1, -2), rtol=1e-10, atol=1e-13)


def test_mla_update_traces_under_jit_without_host_callbacks(mla_case):
    """The partners are formed in JAX (QR factors), not by derivations.mla.partners (NumPy): the direction traces
    under jit into one program with no host callback, so it compiles and runs on the device."""
    params, g, _, _ = mla_case
    direction = scale_by_compositional_muon([BLOCK])
    attn, g_attn = {"attn": params["attn"]}, {"attn": g["attn"]}  # the direction takes matrices only
    jaxpr = str(jax.make_jaxpr(direction.update)(g_attn, direction.init(attn), attn))
    assert "callback" not in jaxpr and "qr" in jaxpr
    w = [jnp.asarray(params["attn"][n]) for n in NAMES]
    plan = MLAPlan(*(f"attn/{n}" for n in NAMES), heads=3, d_h=3, d_rope=2, d_v=3, kernels=False)
    got = jax.jit(lambda *x: mla_partners(*x, plan))(*w)
    full = derived_mla.partners(**{n: params["attn"][n][1] for n in NAMES}, **CFG, compact=False)
    for k in ("P_Q", "P_KV"):  # the compact partners have the Gram of the H·d-row stacks
        gram = np.asarray(got[k][1]).T @ np.asarray(got[k][1])
        np.testing.assert_allclose(gram, full[k].T @ full[k], rtol=1e-10, atol=1e-10 * np.abs(gram).max())
    np.testing.assert_allclose(got["K_hat"][1], full["K_hat"], rtol=1e-12, atol=1e-12)


def test_mla_per_head_budget(mla_case):
    """Each head's query up-projection term ‖K̂ᵀ ΔÛ_Q W_DQ‖_op is at most η/2 (ε/4 at ε = 2; equal to it at λ = 0),
    and so is every head's term of the shared query down-projection, ‖K̂ᵀ Û_Q ΔW_DQ‖_op (Lemma K)."""
    params, _, _, u = mla_case
    w = {n: params["attn"][n][0] for n in NAMES}
    k_hat = derived_mla.partners(**w, **CFG)["K_hat"]
    u_q, d_uq = w["wq_b"].reshape(3, 5, 6), u["attn"]["wq_b"][0].reshape(3, 5, 6)
    up = [op(k_hat[h].T @ d_uq[h] @ w["wq_a"]) for h in range(3)]
    down = [op(k_hat[h].T @ u_q[h] @ u["attn"]["wq_a"][0]) for h in range(3)]
    assert max(up + down) <= 0.05 * (1 + 1e-9)
    assert min(up) > 0.95 * 0.05 and max(down) > 0.2 * 0.05  # λ = 1e-2 against Grams of order 10: nearly equal


# ---- bad declarations: one line naming the parameter ------------------------------------------------
def _lora_bad_rank(rng):
    return {"proj": {"lora_B": rng.standard_normal((D_OUT, R)), "lora_A": rng.standard_normal((R + 1, D_IN))}}


def _mla_without(part):
    def make(rng):
        params = mla_model(rng)
        if part == "rope_query":  # 3 rows per head: only the content rows
            params["attn"]["wq_b"] = rng.standard_normal((3 * 3, 6))
        elif part == "rope_key":  # only the KV latent rows
            params["attn"]["wkv_a"] = rng.standard_normal((5, 24))
        elif part == "wo":
            params["attn"]["wo"] = rng.standard_normal((24, 8))
        else:
            params["attn"]["wkv_b"] = params["attn"]["wkv_b"].astype(np.float32)
        return params
    return make


@pytest.mark.parametrize("make, pairs, error, message", [
    (_lora_bad_rank, [PEFT], ValueError, r"LoRA pair \('proj/lora_B', 'proj/lora_A'\): the ranks disagree: "
                                         r"'proj/lora_B' \(10, 3\) has r = 3 but 'proj/lora_A' \(4, 12\) has r = 4"),
    (lora_params, [PEFT._replace(b="bias")], ValueError, r"\('bias', 'proj/lora_A'\): 'bias' must be a matrix"),
    (lora_params, [PEFT._replace(damping=-1.0)], ValueError, r"damping must be None \(the optimizer's\) or a "
                                                             r"finite real number >= 0, got -1.0"),
    (lora_params, [PEFT._replace(a="proj/lora_a")], ValueError, r"names 'proj/lora_a', which is not a parameter"),
    (lora_params, [PEFT._replace(kernels="yes")], TypeError, r"kernels must be True or False, got 'yes'"),
    (lora_params, [{"b": "proj/lora_B"}], TypeError, r"the LoRAPair declaration \{'b': 'proj/lora_B'\} needs the "
                                                     r"fields \('b', 'a'\)"),
    (_mla_without("rope_query"), [BLOCK], ValueError, r"'attn/wq_b' has 3 rows per head, not d_h = 3 content rows "
                                                      r"plus the decoupled RoPE query rows: the RoPE query part is "
                                                      r"missing"),
    (_mla_without("rope_key"), [BLOCK], ValueError, r"'attn/wkv_a' has shape \(5, 24\), expected \(c_kv \+ d_R, d\) "
                                                    r"= \(5 \+ 2, 24\) .*the RoPE key part is missing"),
    (_mla_without("wo"), [BLOCK], ValueError, r"'attn/wo' has shape \(24, 8\), expected \(d, heads·d_v\) = "
                                              r"\(24, 3·3\)"),
    (_mla_without("dtype"), [BLOCK], TypeError, r"'attn/wkv_b' is float32 but 'attn/wq_a' is float64"),
    (mla_model, [BLOCK._replace(heads=2)], ValueError, r"'attn/wq_b' has shape \(15, 6\), expected "
                                                       r"heads·\(d_h \+ d_R\) = 2·\(d_h \+ d_R\) rows"),
])
def test_bad_declarations_are_one_line_naming_the_parameter(make, pairs, error, message):
    params = make(np.random.default_rng(8))
    with pytest.raises(error, match=message) as err:
        compositional_muon(0.1, pairs=pairs).init(params)
    assert "\n" not in str(err.value) and str(err.value).startswith("compositional_muon: ")


def test_declarations_as_data_jit_and_a_lora_pairs_damping_range():
    """Dicts with the fields of LoRAPair/MLAPair are declarations (the step jitted equals the eager one); a pair's
    own damping is range-checked."""
    rng = np.random.default_rng(9)
    params = lora_params(rng)
    g = jax.tree.map(lambda x: rng.standard_normal(x.shape), params)
    as_data = step(compositional_muon(0.1, pairs=[{"b": "proj/lora_B", "a": "proj/lora_A"}]), params, g, jit=True)
    eager = step(compositional_muon(0.1, pairs=[PEFT]), params, g)
    for n in ("lora_B", "lora_A"):
        np.testing.assert_allclose(as_data["proj"][n], eager["proj"][n], rtol=1e-12, atol=1e-14)
    small = jax.tree.map(lambda x: np.asarray(x, np.float32), params)
    with pytest.raises(ValueError, match=r"damping = 1e-300 is subnormal in float32, the dtype in which the LoRA "
                                         r"pair \('proj/lora_B', 'proj/lora_A'\) of float32 weights"):
        compositional_muon(0.1, pairs=[PEFT._replace(damping=1e-300)]).init(small)
    mla_params = mla_model(rng)
    decl = dict(zip(MLAPair._fields, BLOCK, strict=True))
    assert "1 MLA blocks" in describe_pairs(mla_params, [decl])
