"""msign="gram_newton_schulz" and "auto" in the compute routines, the emitted rule functions and the optimizer."""

import jax.numpy as jnp
import numpy as np
import pytest

import coeffsearch
from derivations.gram_ns import flop_count
from foundation.compute import jax_spectral_sign
from foundation.compute.flop_count import executed_matmul_flops, routine_flops
from foundation.compute.gram_newton_schulz import gram_newton_schulz
from foundation.compute.jax_msign import newton_schulz
from foundation.compute.jax_spectral_sign import GRAM_ASPECT, gram_chosen, spectral_sign
from foundation.compute.spectra import with_singular_values
from numerics import emitted
from numerics.optimizer import OVPair, QKPair, compositional_muon

PE5 = coeffsearch.get(coeffsearch.DEFAULT).as_floats()


def _matrices(rng):
    """Tall, wide and exactly rank-deficient matrices (float64)."""
    tall, wide = rng.standard_normal((24, 6)), rng.standard_normal((5, 31))
    deficient = with_singular_values(rng, 12, 20, np.array([1.0, 0.7, 0.3, 0.1, 0, 0, 0, 0, 0, 0, 0, 0]))
    return {"tall": tall, "wide": wide, "rank-deficient": deficient}


@pytest.mark.parametrize("restarts", [(), (2,), (1, 3)])
def test_gram_form_equals_standard_iteration_to_float64_rounding(restarts):
    for name, x in _matrices(np.random.default_rng(0)).items():
        x = jnp.asarray(x)
        want = np.asarray(newton_schulz(x, PE5))
        got = np.asarray(gram_newton_schulz(x, PE5, restarts))
        assert np.max(np.abs(got - want)) <= 1e-12, (name, restarts)
        # the dispatch runs the same routines
        assert np.array_equal(np.asarray(spectral_sign(x, "gram_newton_schulz", PE5, restarts)), got)


def test_auto_chooses_by_the_derived_flop_model():
    assert gram_chosen((768, 3072)) and gram_chosen((3072, 768)) and gram_chosen((24, 768, 64))
    assert not gram_chosen((1024, 1024)) and not gram_chosen((100, 150))
    assert not gram_chosen((768, 3072), gram_aspect=5.0)  # the threshold is overridable
    # the threshold is the derived flop model's break-even for every schedule length with K < T - 1 restarts
    for n, m in [(768, 3072), (64, 768), (100, 150), (100, 151), (512, 512), (128, 4096)]:
        for steps, restarts in [(5, 0), (5, 1), (8, 2)]:
            cheaper = flop_count("gram", n, m, steps, restarts) < flop_count("standard", n, m, steps)
            assert gram_chosen((n, m)) == cheaper, (n, m, steps, restarts)


@pytest.mark.parametrize("shape,kind", [((8, 32), "gram"), ((32, 8), "gram"), ((16, 16), "standard")])
def test_auto_runs_the_chosen_routine(shape, kind):
    """The products "auto" executes are those of the chosen routine (the default schedule's certified restart
    in float32: one, after iteration 2)."""
    schedule = PE5
    x = jnp.zeros(shape, jnp.float32)
    n, m = shape
    side = "left" if n <= m else "right"
    counted = executed_matmul_flops(lambda x: spectral_sign(x, "auto", schedule), x)
    assert counted == routine_flops(kind, side, min(n, m), max(n, m), 5, 1 if kind == "gram" else 0)


def _qk_inputs(rng, dtype=np.float64):
    return [jnp.asarray(rng.standard_normal((3, 16, 4)), dtype) for _ in range(4)]


def test_emitted_rule_function_with_gram_equals_standard():
    args = _qk_inputs(np.random.default_rng(1))
    want = emitted.halfsplit.halfsplit_qk(*args, eps=0.1, damping=1e-3, msign="newton_schulz")
    for msign, restarts in [("gram_newton_schulz", None), ("gram_newton_schulz", (1, 3)), ("auto", ())]:
        got = emitted.halfsplit.halfsplit_qk(*args, eps=0.1, damping=1e-3, msign=msign, restarts=restarts)
        for w, g in zip(want, got, strict=True):
            assert np.max(np.abs(np.asarray(w) - np.asarray(g))) <= 1e-12, (msign, restarts)


def test_stored_layout_entry_point_takes_gram_and_restarts():
    rng = np.random.default_rng(2)
    w_q, w_k, g_q, g_k = (jnp.asarray(rng.standard_normal((16, 8))) for _ in range(4))
    want = emitted.gqa.gqa_qk(w_q, w_k, g_q, g_k, head_dim=4, eps=0.1, msign="newton_schulz")
    got = emitted.gqa.gqa_qk(w_q, w_k, g_q, g_k, head_dim=4, eps=0.1, msign="gram_newton_schulz", restarts=(2,))
    for w, g in zip(want, got, strict=True):
        assert np.max(np.abs(np.asarray(w) - np.asarray(g))) <= 1e-12


@pytest.mark.parametrize("kwargs,needle", [
    ({"msign": "gram"}, "msign must be one of"),
    ({"msign": "gram_newton_schulz", "restarts": (5,)}, "restarts must be None or a tuple"),
    ({"msign": "gram_newton_schulz", "restarts": (2, 2)}, "restarts must be None or a tuple"),
    ({"msign": "gram_newton_schulz", "restarts": 2}, "restarts must be None or a tuple"),
    ({"msign": "newton_schulz", "restarts": (2,)}, "used only by msign='gram_newton_schulz'"),
    ({"msign": "auto", "gram_aspect": 0.5}, "gram_aspect must be None or a finite number >= 1"),
])
def test_bad_msign_or_restarts_give_one_clear_error(kwargs, needle):
    args = _qk_inputs(np.random.default_rng(3))
    with pytest.raises(ValueError) as info:
        emitted.halfsplit.halfsplit_qk(*args, eps=0.1, **kwargs)
    message = str(info.value)
    assert needle in message and "halfsplit_qk" in message and "\n" not in message


def _model(rng):
    return {"attn": {"wq": rng.standard_normal((16, 8)), "wk": rng.standard_normal((16, 8)),
                     "wo": rng.standard_normal((16, 8)), "wv": rng.standard_normal((8, 16))},
            "mlp": rng.standard_normal((16, 48)), "square": rng.standard_normal((16, 16))}


def _pairs(params):
    return [QKPair("attn/wq", "attn/wk", 2, 2), OVPair("attn/wo", "attn/wv", 2, 2)]


@pytest.mark.parametrize("msign", ["gram_newton_schulz", "auto"])
def test_optimizer_with_gram_equals_standard(msign):
    rng = np.random.default_rng(4)
    params = _model(rng)
    grads = {k: (jnp.asarray(rng.standard_normal(v.shape)) if not isinstance(v, dict)
                 else {j: jnp.asarray(rng.standard_normal(w.shape)) for j, w in v.items()}) for k, v in params.items()}

    def update(msign):
        opt = compositional_muon(0.05, pairs=_pairs, msign=msign)
        return opt.update(grads, opt.init(params), params)[0]

    want, got = update("newton_schulz"), update(msign)
    for path in [("attn", "wq"), ("attn", "wk"), ("attn", "wo"), ("attn", "wv"), ("mlp",), ("square",)]:
        w, g = want, got
        for key in path:
            w, g = w[key], g[key]
        assert np.max(np.abs(np.asarray(w) - np.asarray(g))) <= 1e-12, path


def test_optimizer_refuses_unknown_msign():
    with pytest.raises(ValueError, match="msign must be one of"):
        compositional_muon(0.05, pairs=_pairs, msign="gram")


def test_default_restarts_fit_the_schedule():
    assert jax_spectral_sign.default_restarts(5) == (2,) and jax_spectral_sign.default_restarts(2) == ()
    assert GRAM_ASPECT == 1.5
