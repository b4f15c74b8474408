"""Hostile inputs to the optimizer: no NaN/Inf update reaches the parameters,
and bad declarations get one clear error naming the argument or the parameter.

Each test plants the mistake its fix exists to catch: the guard monkeypatched off, the old refusals
of NumPy scalars, raw errors from internal names.
"""

import re
from decimal import Decimal
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from numerics import optimizer
from numerics.optimizer import OVPair, QKPair, SkipNonFiniteState, compositional_muon

D, H, DH = 16, 2, 4


def pairs_of(kv=H):
    return lambda params: [QKPair("attn/wq", "attn/wk", H, kv), OVPair("attn/wo", "attn/wv", H, kv)]


def model(seed=0, dtype=jnp.float32, qk_scale=1.0, kv=H):
    rng = np.random.default_rng(seed)
    shapes = {"wq": (D, H * DH), "wk": (D, kv * DH), "wo": (D, H * DH), "wv": (kv * DH, D)}
    attn = {k: jnp.asarray(rng.standard_normal(s) * (qk_scale if k in ("wq", "wk") else 1.0), dtype)
            for k, s in shapes.items()}
    return {"attn": attn, "mlp": jnp.asarray(rng.standard_normal((D, 3 * D)), dtype),
            "bias": jnp.asarray(rng.standard_normal(D), dtype)}


def grads(params, seed=1, dtype=None):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(rng.standard_normal(x.shape), dtype or x.dtype), params)


def finite(tree):
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree))


def tiny_float16(scale=1e-6):
    """float16 W_Q, W_K near ``scale`` with damping = 0: ``C_K⁻¹ ~ 1/σ_min(W_K)``.

    At 1e-6 the direction (computed in float32: up to 3e5) is not representable in float16, and
    with learning rate 1 neither is the update: NaN/Inf is the only float16 result, whatever the
    arithmetic. (At 1e-5, the hostile case below, the float32 direction peaks at 3.2e4; float16 arithmetic
    overflows on the way.)
    """
    return model(dtype=jnp.float16, qk_scale=scale)


def assert_skipped_and_counted(opt, params, g, update=None):
    """One step: every update zero, params unchanged and finite, the inner state as it was, one skip counted."""
    state = opt.init(params)
    updates, new = (update or opt.update)(g, state, params)
    after = optax.apply_updates(params, updates)
    assert finite(after), "a NaN/Inf update reached the parameters"
    assert all(bool(jnp.all(u == 0)) for u in jax.tree.leaves(updates))
    guard = new[-1]
    assert isinstance(guard, SkipNonFiniteState)
    assert (int(guard.notfinite_count), bool(guard.last_finite), int(guard.total_notfinite)) == (1, False, 1)
    for a, b in zip(jax.tree.leaves(state[:-1]), jax.tree.leaves(new[:-1]), strict=False):  # momentum and counts kept
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    return new


# ---- a non-finite update never reaches the parameters -----------------------------------------
def test_float16_tiny_weights_undamped_direction_overflows():
    """The input is hostile: the direction itself (no guard in scale_by_compositional_muon) is NaN/Inf."""
    params = tiny_float16()
    del params["bias"]  # the direction alone takes matrices only
    direction = optimizer.scale_by_compositional_muon(pairs_of(), damping=0.0)
    d, _ = direction.update(grads(params), direction.init(params), params)
    assert not finite(d["attn"]["wq"])


def test_optax_apply_if_finite_would_apply_an_update_that_overflows_from_a_finite_gradient():
    """Why the guard is the project's own and not ``optax.apply_if_finite``: optax checks the gradient before
    its inner transformation runs, so a finite float16 gradient whose update overflows (as the direction of
    tiny weights does, above; here a scale by 1e5 past float16's 65504) is applied and the parameters become
    Inf; :func:`skip_nonfinite_updates` checks the update and skips the step."""
    params = {"w": jnp.ones((2, 3), jnp.float16)}
    g, overflowing = {"w": jnp.ones((2, 3), jnp.float16)}, optax.scale(1e5)
    theirs = optax.apply_if_finite(overflowing, max_consecutive_errors=np.iinfo(np.int32).max)
    u, state = theirs.update(g, theirs.init(params), params)
    assert finite(g) and bool(state.last_finite) and not finite(optax.apply_updates(params, u))
    assert_skipped_and_counted(optimizer.skip_nonfinite_updates(overflowing), params, g)


def test_float16_tiny_weights_step_is_skipped_and_counted_eagerly_and_under_jit():
    params, opt = tiny_float16(), compositional_muon(1.0, pairs=pairs_of(), damping=0.0)
    assert_skipped_and_counted(opt, params, grads(params))
    state = assert_skipped_and_counted(opt, params, grads(params), update=jax.jit(opt.update))
    update = jax.jit(opt.update)
    _, state = update(grads(params, 2), state, params)  # skipped again: two in a row
    assert (int(state[-1].notfinite_count), int(state[-1].total_notfinite)) == (2, 2)
    healthy = model(dtype=jnp.float16, qk_scale=0.3)  # a finite step resets the run, keeps the total
    u, state = update(grads(healthy, 3), state, healthy)
    assert finite(u) and any(bool(jnp.any(x != 0)) for x in jax.tree.leaves(u))
    guard = state[-1]
    assert (int(guard.notfinite_count), bool(guard.last_finite), int(guard.total_notfinite)) == (0, True, 2)


def test_float16_near_1e_5_never_writes_nan():
    """A hostile input (float16 W_Q, W_K near 1e-5, damping 0, learning rate 0.01): finite params either way."""
    params, opt = tiny_float16(1e-5), compositional_muon(0.01, pairs=pairs_of(), damping=0.0)
    update = jax.jit(opt.update)
    state = opt.init(params)
    for seed in range(3):
        u, state = update(grads(params, seed), state, params)
        params = optax.apply_updates(params, u)
        assert finite(params)
    assert int(state[-1].total_notfinite) + int(state[1].inner_states["cm"].inner_state[0].count) == 3


def test_guard_off_lets_nan_into_the_parameters(monkeypatch):
    """Planted mistake: the old behaviour (no check of the update) writes NaN into W_Q and W_K."""
    monkeypatch.setattr(optimizer.nonfinite, "_all_finite", lambda named: jnp.asarray(True))
    params, opt = tiny_float16(), compositional_muon(1.0, pairs=pairs_of(), damping=0.0)
    with pytest.raises(AssertionError, match="reached the parameters"):
        assert_skipped_and_counted(opt, params, grads(params))


def test_raise_mode_names_the_parameter_eagerly_and_under_jit():
    params = tiny_float16()
    opt = compositional_muon(1.0, pairs=pairs_of(), damping=0.0, on_nonfinite="raise")
    state = opt.init(params)
    message = r"the update of 'attn/w[qk]' \(float16\) contains NaN or Inf.*the step was not applied"
    with pytest.raises(ValueError, match=message) as raised:
        opt.update(grads(params), state, params)
    # both factors of the pair are NaN: the others are named, and said to share the result of one call
    assert re.search(r"\(also 1 more: 'attn/w[qk]'; parameters updated in one stacked call share a NaN/Inf "
                     r"result, so it may have arisen in any of them\)", str(raised.value)), str(raised.value)
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(jax.jit(opt.update)(grads(params), state, params))
    healthy = model(dtype=jnp.float16, qk_scale=0.3)  # no error when the update is finite
    u, _ = jax.jit(opt.update)(grads(healthy), opt.init(healthy), healthy)
    assert finite(jax.block_until_ready(u))
    with pytest.raises(ValueError, match="on_nonfinite must be one of"):
        compositional_muon(0.01, on_nonfinite="ignore")


@pytest.mark.parametrize("where", ["layer6/w", "layer11/w", "head", "bias"])
def test_a_nonfinite_gradient_is_named_among_many_same_shape_leaves_under_jit(where):
    """The gradient check reduces same-shape leaves stacked (one reduction per shape and dtype, not per leaf)
    and names the culprit on the host: the leaf named is the one with the NaN, wherever it sits in its group
    (a planted grouping that dropped a group's later members, or named a group's first, fails here)."""
    params = {f"layer{i}": {"w": jnp.ones((4, 6))} for i in range(12)}
    params.update(head=jnp.ones((6, 4)), bias=jnp.ones(4, jnp.float64))
    grads = jax.tree.map(jnp.ones_like, params)
    if where == "layer6/w" or where == "layer11/w":
        grads[where.split("/")[0]]["w"] = grads[where.split("/")[0]]["w"].at[2, 3].set(jnp.nan)
    else:
        grads[where] = grads[where].at[0].set(jnp.inf)
    check = optimizer.check_finite_gradients()
    assert bool(optimizer.nonfinite._all_finite(optimizer.pairs.named_leaves(params)))
    assert not bool(jax.jit(optimizer.nonfinite._all_finite)(optimizer.pairs.named_leaves(grads)))
    message = rf"the gradient of '{where}' contains NaN or Inf$"
    with pytest.raises(ValueError, match=message):
        check.update(grads, check.init(params))
    with pytest.raises(Exception, match=rf"the gradient of '{where}' contains NaN or Inf \(jit the step"):
        jax.block_until_ready(jax.jit(check.update)(grads, check.init(params)))
    with pytest.raises(ValueError, match=message):
        optimizer.checked_jit(check.update)(grads, check.init(params))

def test_nan_gradient_without_the_gradient_check_is_skipped():
    """check_finite=False: the NaN reaches the update, which is skipped; the momentum is not poisoned."""
    params = model()
    g = grads(params)
    g["attn"]["wk"] = g["attn"]["wk"].at[0, 0].set(jnp.nan)
    opt = compositional_muon(0.01, pairs=pairs_of(), check_finite=False)
    state = assert_skipped_and_counted(opt, params, g)
    assert finite(state)


DIVERGENT = ((1e30, 1e30, 1e30),) * 5


def test_divergent_schedule_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"ns_coeffs diverge: Newton–Schulz step 1 of 5 maps"):
        compositional_muon(0.01, DIVERGENT, pairs=pairs_of())
    with pytest.raises(ValueError, match=r"step 6 of 6"):  # stays bounded for 5 steps, then passes 100
        compositional_muon(0.01, ((1.0, 0.0, 0.0),) * 5 + ((101.0, 0.0, 0.0),))
    for name in ("muon", "polar-express", "polar-express-5", "cans", "you", "cesista", "quintic", "cubic"):
        compositional_muon(0.01, name)  # every registry schedule passes
    compositional_muon(0.01, (3.4445, -4.7750, 2.0315), 5)  # optax.contrib.muon's


def test_divergent_schedule_past_the_construction_check_is_skipped(monkeypatch):
    """The construction check samples; the guard still stops whatever comes out NaN/Inf."""
    monkeypatch.setattr(optimizer.transform, "check_schedule_bounded", lambda schedule: schedule)
    params = model()
    assert_skipped_and_counted(compositional_muon(0.01, DIVERGENT, pairs=pairs_of()), params, grads(params))
    opt = compositional_muon(0.01, DIVERGENT, pairs=pairs_of(), on_nonfinite="raise")
    with pytest.raises(ValueError, match=r"the update of 'attn/w[kovq]' \(float32\) contains NaN or Inf"):
        opt.update(grads(params), opt.init(params), params)


def test_damping_infinite_in_the_compute_dtype_is_refused_at_init():
    """1e300 is a float64 number but inf in float32, where every Gram root of a float32 pair becomes NaN."""
    for dtype in (jnp.float32, jnp.float16):
        params = model(dtype=dtype)
        with pytest.raises(ValueError, match=r"damping = 1e\+300 is infinite in float32, the dtype in which the qk "
                                             r"pair \('attn/wq', 'attn/wk'\)"):
            compositional_muon(0.01, pairs=pairs_of(), damping=1e300).init(params)
    params = model(dtype=jnp.float64)  # representable there: a finite (tiny) step
    opt = compositional_muon(0.01, pairs=pairs_of(), damping=1e300)
    u, state = opt.update(grads(params), opt.init(params), params)
    assert finite(u) and bool(state[-1].last_finite)
    params = model()  # the largest float32 damping still gives a finite step
    opt = compositional_muon(0.01, pairs=pairs_of(), damping=float(jnp.finfo(jnp.float32).max))
    u, state = opt.update(grads(params), opt.init(params), params)
    assert finite(u) and bool(state[-1].last_finite)


def test_subnormal_damping_is_refused_at_init():
    """1e-40 is subnormal in float32: XLA flushes it to 0 on the CPU, so the step would silently be undamped."""
    with pytest.raises(ValueError, match=r"damping = 1e-40 is subnormal in float32.*use 0 or a damping in "
                                         r"\[1.18e-38, 3.4e\+38\]"):
        compositional_muon(0.01, pairs=pairs_of(), damping=1e-40).init(model())
    compositional_muon(0.01, pairs=pairs_of(), damping=1e-40).init(model(dtype=jnp.float64))


# ---- declarations ----------------------------------------------------------------------------
@pytest.mark.parametrize("damping", [np.float32(1e-2), np.float64(1e-2), jnp.float32(1e-2), np.array(1e-2),
                                     Fraction(1, 100), 0, np.int64(0)])
def test_damping_accepts_any_real_scalar(damping):
    params = model()
    del params["bias"]  # the direction alone takes matrices only
    g = grads(params)
    ref = optimizer.scale_by_compositional_muon(pairs_of(), damping=float(damping))
    got = optimizer.scale_by_compositional_muon(pairs_of(), damping=damping)
    want, _ = ref.update(g, ref.init(params), params)
    have, _ = got.update(g, got.init(params), params)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(have), strict=False):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    compositional_muon(0.01, pairs=pairs_of(), damping=damping).init(params)


@pytest.mark.parametrize("damping, error, message", [
    (True, TypeError, "damping must be a real number, got True"),
    (np.bool_(True), TypeError, "damping must be a real number"),
    (1 + 0j, TypeError, r"damping must be a real number, got \(1\+0j\)"),
    (np.complex64(1), TypeError, "of dtype complex64"),
    ("0.01", TypeError, "damping must be a real number, got '0.01'"),
    (None, TypeError, "damping must be a real number, got None"),
    (np.ones(2), TypeError, r"damping must be a real scalar, got an array of shape \(2,\)"),
    (float("nan"), ValueError, "damping must be finite and >= 0, got nan"),
    (float("inf"), ValueError, "damping must be finite and >= 0, got inf"),
    (-1e-3, ValueError, "damping must be finite and >= 0, got -0.001"),
    (np.float32(-1), ValueError, "damping must be finite and >= 0"),
])
def test_bad_damping_is_refused_naming_it(damping, error, message):
    with pytest.raises(error, match=message):
        compositional_muon(0.01, damping=damping)


def test_colliding_path_names_are_refused_naming_both():
    params = {"a/b": jnp.ones((4, 4)), "a": {"b": jnp.ones((4, 4))}}
    opt = compositional_muon(0.01)
    message = r"the parameters at \['a'\]\['b'\] and \['a/b'\] have the same path name 'a/b'"
    with pytest.raises(ValueError, match=message):
        opt.init(params)
    with pytest.raises(ValueError, match=message):
        compositional_muon(0.01, pairs=lambda p: [QKPair("a/b", "a/b", 1)]).init(params)


def test_pairs_declarations():
    params = model()
    g = grads(params)
    as_list = [QKPair("attn/wq", "attn/wk", H), OVPair("attn/wo", "attn/wv", H)]

    def step(pairs):
        opt = compositional_muon(0.01, pairs=pairs)
        return opt.update(g, opt.init(params), params)[0]

    want = step(pairs_of())
    for decl in (as_list, tuple(as_list), lambda p: tuple(as_list)):
        for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(step(decl)), strict=False):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    one = step(QKPair("attn/wq", "attn/wk", H))  # a single pair
    np.testing.assert_array_equal(np.asarray(one["attn"]["wq"]), np.asarray(want["attn"]["wq"]))
    assert finite(step(None))  # no pairs: every matrix is Muon's
    for bad in (3, "attn/wq", [QKPair("attn/wq", "attn/wk", H), "attn/wo"], {"q": "attn/wq"}):
        with pytest.raises(TypeError, match="pairs must be a function params -> \\[QKPair | OVPair, ...\\], a list"):
            compositional_muon(0.01, pairs=bad)
    with pytest.raises(TypeError, match=r"pairs\(params\) must return a list of QKPair/OVPair, got None"):
        compositional_muon(0.01, pairs=lambda p: None).init(params)
    with pytest.raises(TypeError, match=r"names \['attn/wq'\]; parameters are named by '/'-joined path strings"):
        compositional_muon(0.01, pairs=[QKPair(["attn/wq"], "attn/wk", H)]).init(params)


def test_unknown_msign_is_refused_at_construction_naming_msign():
    for make in (compositional_muon, optimizer.scale_by_compositional_muon):
        with pytest.raises(ValueError, match=r"compositional_muon: msign must be one of \('newton_schulz', 'svd', "
                                             r"'gram_newton_schulz', 'auto'\), got 'polar'"):
            make(0.01, msign="polar") if make is compositional_muon else make(msign="polar")


@pytest.mark.parametrize("kv, gauge", [(H, "none"), (1, "none"), (H, "horizontal_projection")])
def test_float64_gradients_of_float32_weights_are_cast(kv, gauge):
    """The direction is computed in the parameter's dtype: the same step as float32 gradients, in float32."""
    params = model(kv=kv)
    g64 = grads(params, dtype=jnp.float64)
    opt = compositional_muon(0.01, pairs=pairs_of(kv), gauge=gauge)
    state = opt.init(params)
    got, _ = opt.update(g64, state, params)
    want, _ = opt.update(jax.tree.map(lambda x: x.astype(jnp.float32), g64), state, params)
    del want["bias"], got["bias"]  # AdamW's: optax promotes it to float64, as optax.adamw does
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=False):
        assert a.dtype == b.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-6)


def test_pair_of_mixed_dtypes_is_refused_naming_both():
    params = model()
    params["attn"]["wk"] = params["attn"]["wk"].astype(jnp.float64)
    with pytest.raises(TypeError, match=r"'attn/wq' is float32 but 'attn/wk' is float64"):
        compositional_muon(0.01, pairs=pairs_of()).init(params)
    params["attn"]["wk"] = params["attn"]["wk"].astype(jnp.int32)
    with pytest.raises(TypeError, match=r"'attn/wk' must be real floating point, got dtype int32"):
        compositional_muon(0.01, pairs=pairs_of()).init(params)


def test_direction_alone_refuses_vectors_naming_them():
    params = model()
    direction = optimizer.scale_by_compositional_muon(pairs_of())
    with pytest.raises(ValueError, match=r"'bias' has shape \(16,\), not a matrix"):
        direction.update(grads(params), direction.init(params), params)


def test_integers_beyond_floats_and_string_coefficients_are_refused():
    """``damping=10**400`` once raised OverflowError, string coefficients a bare float() error."""
    with pytest.raises(ValueError, match="damping must be finite"):
        compositional_muon(0.1, pairs=None, damping=10**400)
    for coeffs in (("a", 1, 1), (("a", 1, 1),), ((10**400, 1, 1),), ((True, 1.0, 1.0),)):
        with pytest.raises(ValueError, match="ns_coeffs must hold finite real numbers|finite coefficients"):
            compositional_muon(0.1, pairs=None, ns_coeffs=coeffs)
    opt = compositional_muon(0.1, pairs=None, ns_coeffs=np.array([[3.4445, -4.775, 2.0315]] * 5))
    assert opt is not None


# ---- sizes, keys, gradient trees, dtypes and flags the optimizer is given -------------------------
def test_ns_steps_is_bounded_naming_it():
    """``ns_steps=10**7`` once hung (the schedule was built and checked step by step)."""
    abc = (3.4445, -4.775, 2.0315)
    for steps in (101, 3000, 10**7):
        with pytest.raises(ValueError, match=rf"ns_steps = {steps} is more than MAX_SCHEDULE_STEPS = 100"):
            optimizer.resolve_schedule(abc, steps)
    assert len(optimizer.resolve_schedule(abc, 100)) == 100
    assert len(optimizer.resolve_schedule(abc, np.int64(5))) == 5
    for coeffs in (((1.5, -0.5),) * 101, (1.0,) * 33, ((1.0,) * 33,)):
        with pytest.raises(ValueError, match="a Newton–Schulz schedule has at most 100 steps of at most 32 "
                                             "coefficients"):
            compositional_muon(0.01, coeffs)
    with pytest.raises(ValueError, match="ns_steps = 10000000 is more than"):
        compositional_muon(0.01, abc, 10**7)


@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (3, 0, 4)])
def test_empty_matrix_parameter_gets_the_empty_update(shape):
    """A (0, 4) or (4, 0) matrix once raised 'zero-size array to reduction operation'."""
    params = {"w": jnp.ones(shape, jnp.float32),
              "v": jnp.asarray(np.random.default_rng(0).standard_normal((4, 4)), jnp.float32)}
    opt = compositional_muon(0.1)
    for update in (opt.update, jax.jit(opt.update)):
        u, state = update(grads(params), opt.init(params), params)
        assert u["w"].shape == shape and u["w"].dtype == jnp.float32
        assert finite(u) and bool(jnp.any(u["v"] != 0)) and bool(state[-1].last_finite)


def test_dict_keys_that_cannot_be_ordered_are_refused_naming_them():
    """Keys 0 and '0' once gave JAX's 'Comparator raised exception while sorting' error."""
    params = {0: jnp.ones((4, 4)), "0": jnp.ones((4, 4))}
    message = r"the dict at the top level has keys \[0, '0'\] of types that cannot be ordered"
    for check_finite in (True, False):
        with pytest.raises(ValueError, match=message):
            compositional_muon(0.1, check_finite=check_finite).init(params)
    opt = compositional_muon(0.1)
    good = {"a": jnp.ones((4, 4))}
    with pytest.raises(ValueError, match=r"the dict at \['a'\]\['x'\] has keys \[1, 'y'\]"):
        opt.update({"a": {"x": {1: jnp.ones(2), "y": jnp.ones(2)}}}, opt.init(good), good)


def test_gradients_that_do_not_match_the_params_are_refused_naming_the_leaf():
    """A missing gradient leaf once gave a raw pytree structure error."""
    params = model()
    opt = compositional_muon(0.01, pairs=pairs_of())
    state = opt.init(params)
    g = grads(params)
    del g["mlp"]
    with pytest.raises(ValueError, match=r"compositional_muon.update: the gradients do not match the params: no "
                                         r"gradient for the parameter 'mlp'"):
        opt.update(g, state, params)
    g = grads(params)
    g["extra"] = jnp.ones(3)
    with pytest.raises(ValueError, match=r"a gradient at 'extra', which is not a parameter"):
        opt.update(g, state, params)
    g = grads(params)
    del g["attn"]["wk"], g["attn"]["wq"]
    direction = optimizer.scale_by_compositional_muon(pairs_of())
    del params["bias"], g["bias"]
    with pytest.raises(ValueError, match=r"no gradient for the parameter 'attn/wk' \(and 1 more\)"):
        direction.update(g, direction.init(params), params)


def test_complex_matrix_parameter_is_refused_at_init_naming_it():
    """A complex matrix was once silently skipped every step (its update counted non-finite)."""
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4)), jnp.complex64)
    with pytest.raises(TypeError, match=r"the matrix parameter 'w' has dtype complex64; Muon and the attention rules "
                                        r"take real floating point only"):
        compositional_muon(0.01).init({"w": w})
    opt = compositional_muon(0.01, adamw_params=lambda path, x: path == "w")  # AdamW takes complex numbers
    u, state = opt.update({"w": w * (1 + 2j)}, opt.init({"w": w}), {"w": w})
    assert bool(jnp.all(u["w"] != 0)) and bool(state[-1].last_finite)


def test_flags_must_be_bools():
    """``check_finite='yes'`` and ``nesterov='no'`` were once taken as True."""
    for name in ("check_finite", "nesterov"):
        for value in ("yes", "no", 1, None):
            with pytest.raises(TypeError, match=rf"compositional_muon: {name} must be True or False, got "):
                compositional_muon(0.01, **{name: value})
    with pytest.raises(TypeError, match="nesterov must be True or False, got 'no'"):
        optimizer.scale_by_compositional_muon(nesterov="no")
    compositional_muon(0.01, nesterov=np.bool_(False), check_finite=False)


def test_decimal_damping_is_the_nearest_float():
    """``Decimal('0.01')`` was once refused although it is a real number."""
    assert optimizer.real_scalar("damping", Decimal("0.01")) == 0.01
    assert optimizer.real_scalar("damping", Decimal("1e-3")) == 1e-3
    for bad, message in ((Decimal("NaN"), "finite and >= 0"), (Decimal("sNaN"), "finite and >= 0"),
                         (Decimal("-1"), "finite and >= 0"), (Decimal("Infinity"), "finite and >= 0"),
                         (Decimal("1e400"), r"finite, got Decimal\(.1E\+400.\), too large for a float")):
        with pytest.raises(ValueError, match=f"damping must be {message}"):
            compositional_muon(0.01, damping=bad)
    compositional_muon(0.01, pairs=pairs_of(), damping=Decimal("0.01")).init(model())


def _inf_gradient(params, where=("attn", "wv")):
    g = grads(params)
    g[where[0]][where[1]] = g[where[0]][where[1]].at[0, 0].set(jnp.inf)
    return g


def test_checked_jit_reports_a_nonfinite_gradient_as_one_line():
    """Under jit the error was once a multi-line JaxRuntimeError from a CPU callback."""
    params = model()
    opt = compositional_muon(0.01, pairs=pairs_of())
    state = opt.init(params)
    update = optimizer.checked_jit(opt.update)
    with pytest.raises(ValueError) as info:
        update(_inf_gradient(params), state, params)
    assert str(info.value) == "compositional_muon.update: the gradient of 'attn/wv' contains NaN or Inf"
    got, new = update(grads(params), state, params)  # a finite step: the same numbers as jax.jit
    want, _ = jax.jit(opt.update)(grads(params), state, params)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # plain jit still stops the step, with the message inside JAX's runtime error
    with pytest.raises(Exception, match=r"the gradient of 'attn/wv' contains NaN or Inf \(jit the step with "
                                        r"numerics.optimizer.checked_jit") as info:
        jax.block_until_ready(jax.jit(opt.update)(_inf_gradient(params), state, params))
    assert not isinstance(info.value, ValueError)


def test_checked_jit_on_a_training_step_and_in_raise_mode():
    params = {"attn": model()["attn"], "mlp": model()["mlp"], "weird{key}": jnp.ones((4, 4))}
    opt = compositional_muon(0.01, pairs=pairs_of())

    def train_step(params, state, x):
        def loss(p):
            attn = sum(jnp.sum(w) for w in jax.tree.leaves(p["attn"]))
            return jnp.sum((x @ p["mlp"]) ** 2) + attn + jnp.sum(jnp.log(p["weird{key}"]))

        g = jax.grad(loss)(params)
        u, state = opt.update(g, state, params)
        return optax.apply_updates(params, u), state

    step = optimizer.checked_jit(train_step)
    state = opt.init(params)
    new, state = step(params, state, jnp.ones((2, D)))
    assert finite(new)
    bad = dict(params, **{"weird{key}": params["weird{key}"].at[0, 0].set(0.0)})  # d log(x)/dx = 1/x: Inf at 0
    with pytest.raises(ValueError, match=r"^compositional_muon.update: the gradient of 'weird\{key\}' contains NaN "
                                         r"or Inf$"):
        step(bad, state, jnp.ones((2, D)))
    tiny = tiny_float16()
    raising = compositional_muon(1.0, pairs=pairs_of(), damping=0.0, on_nonfinite="raise")
    with pytest.raises(ValueError, match=r"^compositional_muon.update: the update of 'attn/w[qk]' \(float16\) "
                                         r"contains NaN or Inf.*the step was not applied"):
        optimizer.checked_jit(raising.update)(grads(tiny), raising.init(tiny), tiny)


def test_checked_jit_without_functionalized_checks_gives_the_runtime_error(monkeypatch):
    """Planted mistake: checks traced as plain jit's host callbacks cannot come out as one ValueError."""

    class Never:  # checked_jit's flag is never set
        checked = property(lambda self: False, lambda self, value: None)

    monkeypatch.setattr(optimizer.nonfinite, "_TRACING", Never())
    params = model()
    opt = compositional_muon(0.01, pairs=pairs_of())
    with pytest.raises(Exception, match="the gradient of 'attn/wv' contains NaN or Inf") as info:
        optimizer.checked_jit(opt.update)(_inf_gradient(params), opt.init(params), params)
    assert not isinstance(info.value, ValueError)
