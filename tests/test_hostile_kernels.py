"""Hostile inputs to the emitted kernels (issue 17, items 4, 6, 7 and the schedule length of 8).

* Ill-conditioned partners: the Gram roots must not square the condition number. ``halfsplit_qk``
  with a partner of condition number κ is compared with the exact rule evaluated at 60 digits; the
  relative error must stay below ``4·eps·κ`` up to the numerical rank cut (singular values at or
  below ``max(d, d_h)·eps·σ_max``), and above the cut the result is the pseudo-inverse rule. The
  planted mistake (every batch forced onto the Gram-eigenvalue route) fails the same check.
* Empty batches, zero widths, ``Fraction`` scalars, mixed dtypes and bad scalars under ``jit``.
* The edges of the number range: gradients and weights scaled towards the subnormals give the
  right answer or one clear error, never a silently wrong number; the planted mistakes (msign
  arguments not unit-scaled, the balancing gauge's groups not rescaled) fail.
* Schedules: longer than ``NS_UNROLL_STEPS`` they run as a loop, longer than
  ``MAX_SCHEDULE_STEPS`` they are refused naming ``schedule``.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

from derivations.regenerate import shipped
from numerics.kernels import jax_kernels as K
from numerics.kernels import numpy_kernels as NK
from tests.conftest import load_module
from tests.emitted_inputs import example_call

RULES = shipped()

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = sorted({name: (rule, name) for rule in reversed(RULES)
                    for name in importlib.import_module(f"numerics.emitted.{rule}").__all__}.values())
#: positions of the gradient-like arguments (the update does not depend on their scale, except the
#: projection, which is linear in them) and of the weights
GRADIENTS = {"halfsplit_qk": (2, 3), "isotropic_qk": (2, 3), "halfsplit_v": (1,), "hybrid_v": (1,),
             "gqa_query": (1,), "gqa_key": (1,), "gqa_value": (1,), "gqa_qk": (2, 3), "joint_whitened": (1,),
             "joint_qk": (2, 3), "hybrid_o": (1,), "hybrid_ov": (2, 3), "sylvester_qk": (2,),
             "horizontal_projection": (2, 3)}
WEIGHTS = {"halfsplit_qk": (0, 1), "isotropic_qk": (0, 1), "halfsplit_v": (0,), "hybrid_v": (0,),
           "gqa_query": (0,), "gqa_key": (0,), "gqa_value": (0,), "gqa_qk": (0, 1), "joint_whitened": (0,),
           "joint_qk": (0, 1), "hybrid_o": (0,), "hybrid_ov": (0, 1), "balance_qk": (0, 1)}
OVERFLOW_OR_UNDERFLOW = ("overflowed", "underflows")


def _fn(rule, name):
    return getattr(importlib.import_module(f"numerics.emitted.{rule}"), name)


def _outs(result):
    return tuple(np.asarray(r, np.float64) for r in (result if isinstance(result, tuple) else (result,)))


def _rel(got, want):
    """Largest relative Frobenius error over outputs, each taken relative to its own max (no squares overflow)."""
    errs = []
    for g, w in zip(got, want, strict=True):
        top = np.max(np.abs(w))
        errs.append(0.0 if top == 0 and not np.any(g) else np.linalg.norm((g - w) / top) / np.linalg.norm(w / top))
    return max(errs)


# ---- item 4: ill-conditioned partners -------------------------------------------------------
D, DH = 16, 4


def _partner(rng, kappa):
    u, _ = np.linalg.qr(rng.standard_normal((D, DH)))
    v, _ = np.linalg.qr(rng.standard_normal((DH, DH)))
    return (u * np.geomspace(1.0, 1.0 / kappa, DH)) @ v.T


def _exact_query_update(w_k, g_q, eps, drop=0):
    """``-(ε/2) msign(G C⁺) C⁺`` at 60 digits; ``C⁺``: pseudo-inverse root without the ``drop`` smallest σ."""
    with mpmath.workdps(60):
        w, g = mpmath.matrix(w_k.tolist()), mpmath.matrix(g_q.tolist())
        _, s, vt = mpmath.svd_r(w, full_matrices=False)
        order = sorted(range(DH), key=lambda i: -s[i])[:DH - drop]
        cinv = sum((vt[i, :].T * vt[i, :] / s[i] for i in order), mpmath.zeros(DH, DH))
        x = g * cinv
        u2, s2, vt2 = mpmath.svd_r(x, full_matrices=False)
        top = max(s2)
        ms = sum((u2[:, i] * vt2[i, :] for i in range(DH) if s2[i] > top * mpmath.mpf(10) ** -40), mpmath.zeros(D, DH))
        out = (-mpmath.mpf(eps) / 2) * ms * cinv
        return np.array(out.tolist(), dtype=np.float64)


def _query_errors(halfsplit_qk, dtype, kappas, seed=0, drop=0):
    rng = np.random.default_rng(seed)
    errors = {}
    for kappa in kappas:
        w_k = _partner(rng, kappa).astype(dtype)
        w_q, g_q, g_k = (rng.standard_normal((D, DH)).astype(dtype) for _ in range(3))
        want = _exact_query_update(w_k.astype(np.float64), g_q.astype(np.float64), 0.1, drop)
        got = halfsplit_qk(*(jnp.asarray(x) for x in (w_q, w_k, g_q, g_k)), eps=0.1, msign="svd")[0]
        errors[kappa] = _rel(_outs(got), (want,))
    return errors


CONDITIONED = [(np.float32, (1e2, 1e3, 3.3e3, 1e4, 1e5)), (np.float64, (1e4, 1e6, 3e7, 1e8, 1e10, 1e12, 1e14))]


@pytest.mark.parametrize("dtype,kappas", CONDITIONED, ids=["float32", "float64"])
def test_ill_conditioned_partner_error_grows_like_eps_kappa(dtype, kappas):
    from numerics.emitted.halfsplit import halfsplit_qk
    eps = np.finfo(dtype).eps
    assert max(kappas) < 1 / (D * eps)  # all below the numerical rank cut
    errors = _query_errors(halfsplit_qk, dtype, kappas)
    bad = {k: e for k, e in errors.items() if not e <= 4 * eps * (k + 10)}
    assert not bad, f"relative error above 4·eps·κ: {bad}"


@pytest.mark.parametrize("dtype,kappa", [(np.float32, 1e7), (np.float64, 1e16)])
def test_beyond_the_numerical_rank_cut_the_update_is_the_pseudo_inverse_rule(dtype, kappa):
    """σ_min/σ_max below max(d, d_h)·eps: the smallest direction is cut (and only it)."""
    from numerics.emitted.halfsplit import halfsplit_qk
    eps = np.finfo(dtype).eps
    assert 1 / kappa < D * eps
    kept = kappa ** (2 / 3)  # condition number of what stays (geometric spectrum, d_h = 4)
    errors = _query_errors(halfsplit_qk, dtype, [kappa], drop=1)
    assert errors[kappa] <= 4 * eps * kept, errors


def test_planted_gram_route_squares_the_condition_number(tmp_path):
    """Forcing the eigenvalues of the formed Gram matrix (the old kernel) fails the accuracy check."""
    planted = load_module(ROOT / "numerics" / "emitted" / "halfsplit.py", "planted_gram_route_halfsplit")
    planted.GRAM_ROUTE_RATIO = 0.0  # every batch "well conditioned": eigh of WᵀW
    errors = _query_errors(planted.halfsplit_qk, np.float32, (1e3, 3.3e3))
    eps = np.finfo(np.float32).eps
    assert all(e > 4 * eps * (k + 10) for k, e in errors.items()), errors  # about eps·κ² instead


def test_both_routes_in_one_batch():
    """One ill-conditioned matrix sends the whole batch to the SVD route; both answers stay exact."""
    from numerics.emitted.halfsplit import halfsplit_qk
    rng = np.random.default_rng(3)
    w_k = np.stack([rng.standard_normal((D, DH)), _partner(rng, 1e10)])
    w_q, g_q, g_k = (rng.standard_normal((2, D, DH)) for _ in range(3))
    got = np.asarray(halfsplit_qk(*(jnp.asarray(x) for x in (w_q, w_k, g_q, g_k)), eps=0.1, msign="svd")[0])
    for i in range(2):
        want = _exact_query_update(w_k[i], g_q[i], 0.1)
        assert _rel((got[i],), (want,)) <= 4 * np.finfo(np.float64).eps * 1e10


def test_rank_cut_is_on_singular_values_not_their_squares():
    """``gram_eigh`` (JAX and NumPy) keeps σ just above ``max(m, n)·eps·σ_max`` and zeroes those below."""
    rng = np.random.default_rng(4)
    u, _ = np.linalg.qr(rng.standard_normal((D, DH)))
    for dtype in (np.float32, np.float64):
        tol = D * np.finfo(dtype).eps
        sigma = np.array([1.0, 0.5, 8 * tol, tol / 8])
        w = (u * sigma).astype(dtype)
        r, _, k = K.gram_eigh(jnp.asarray(w), 0.0, "right")
        r = np.sort(np.asarray(r, np.float64) * 2.0 ** -np.asarray(k)[..., 0])
        assert r[0] == 0 and r[1] == pytest.approx(8 * tol, rel=1e-2), (dtype, r)
        if dtype == np.float64:
            rn, _, s = NK.gram_eigh(w, 0.0, "right")
            rn = np.sort(rn * s[..., 0])
            assert rn[0] == 0 and rn[1] == pytest.approx(8 * tol, rel=1e-6)
    # the NumPy reference kernel: C⁻¹ accurate to eps·κ at κ = 1e12 (the Gram route would lose it all)
    w = _partner(rng, 1e12)
    ci = NK.psd_power(NK.gram_eigh(w, 0.0, "right"), -0.5)
    with mpmath.workdps(50):
        m = mpmath.matrix(w.tolist())
        e, q = mpmath.eigsy(m.T * m)
        exact = np.array((q * mpmath.diag([1 / mpmath.sqrt(x) for x in e]) * q.T).tolist(), dtype=np.float64)
    assert np.linalg.norm(ci - exact) / np.linalg.norm(exact) <= 4 * np.finfo(np.float64).eps * 1e12


# ---- item 6: empty batches, zero widths, scalars, dtypes --------------------------------------
@pytest.mark.parametrize("rule,name", FUNCTIONS)
def test_empty_batch_gives_an_empty_result(rule, name):
    fn = _fn(rule, name)
    args, kwargs = example_call(np.random.default_rng(0), name)
    full = _outs(fn(*args, **kwargs))
    for lead in ((0,), (3, 0)):
        got = _outs(fn(*(np.zeros(lead + np.shape(a)) for a in args), **kwargs))
        assert [g.shape for g in got] == [lead + f.shape for f in full], (name, lead)


@pytest.mark.parametrize("rule,name", FUNCTIONS)
def test_zero_width_is_refused_naming_the_argument(rule, name):
    fn = _fn(rule, name)
    args, kwargs = example_call(np.random.default_rng(0), name)
    for i in range(len(args)):
        for axis in (-1, -2):
            call = [np.zeros(np.shape(a)[:axis] + (0,) + (np.shape(a)[axis + 1:] if axis == -2 else ()))
                    if j == i else a for j, a in enumerate(args)]
            with pytest.raises(ValueError) as info:
                fn(*call, **kwargs)
            msg = str(info.value)
            assert "\n" not in msg and ("= 0" in msg or "empty matrix" in msg), (name, i, axis, msg)


@pytest.mark.parametrize("rule,name", FUNCTIONS)
def test_fraction_scalars_are_real_numbers(rule, name):
    fn = _fn(rule, name)
    args, kwargs = example_call(np.random.default_rng(0), name)
    frac = {k: Fraction(v).limit_denominator(1000) for k, v in {**kwargs, "damping": 0.25}.items()
            if k in ("eps", "damping", "group_size")}
    want = _outs(fn(*args, **{**kwargs, **{k: float(v) for k, v in frac.items()}}))
    got = _outs(fn(*args, **{**kwargs, **frac}))
    assert _rel(got, want) == 0.0


def test_joint_qk_refuses_mixed_dtypes():
    from numerics.emitted.joint import joint_qk
    args, kwargs = example_call(np.random.default_rng(0), "joint_qk")
    for i in range(4):
        call = [a.astype(np.float32) if j == i else a for j, a in enumerate(args)]
        with pytest.raises(TypeError, match="cast all inputs to one dtype"):
            joint_qk(*call, **kwargs)


@pytest.mark.parametrize("rule,name", FUNCTIONS)
def test_bad_scalars_under_jit_give_nan(rule, name):
    """Under an outer jit nothing can be refused: a negative damping (or eps) makes the result NaN."""
    fn = _fn(rule, name)
    args, kwargs = example_call(np.random.default_rng(0), name)
    bad = [("damping", -0.1)] + ([("eps", -0.1)] if "eps" in kwargs else [])
    for key, value in bad:
        def call(*a, v, key=key):
            return fn(*a, **{**kwargs, key: v})
        outs = _outs(jax.jit(call, static_argnames="key")(*args, v=value))
        assert all(np.all(np.isnan(o)) for o in outs), (name, key)
        with pytest.raises(ValueError, match=key):  # outside jit: refused
            fn(*args, **{**kwargs, key: value})


# ---- item 7: the edges of the number range -----------------------------------------------------
def _scaled_case(name, positions, c, dtype, degree):
    """``(scaled result or error text, float64 result on the unscaled inputs, the output's scale)``."""
    rule = {n: r for r, n in FUNCTIONS}[name]
    fn = _fn(rule, name)
    args, kwargs = example_call(np.random.default_rng(1), name)
    kwargs = {**kwargs, **({"eps": 1e-3} if "eps" in kwargs else {}),
              **({"msign": "svd"} if "eps" in kwargs else {})}
    scaled = [np.asarray(a * c if i in positions else a).astype(dtype) for i, a in enumerate(args)]
    base = [s.astype(np.float64) / c if i in positions else s.astype(np.float64) for i, s in enumerate(scaled)]
    want = _outs(fn(*base, **kwargs))
    try:
        got = _outs(fn(*scaled, **kwargs))
    except ValueError as e:
        return str(e), want
    return tuple(g / c ** degree if degree > 0 else g * c ** -degree if degree < 0 else g for g in got), want


F32_TINY = (1e-37, 1e-38, 1e-39, 1e-41, 1e-44)
F64_TINY = (1e-307, 1e-308, 1e-310, 1e-315)


def _refusable(dtype, c):
    """Scales at which a clear over/underflow error is acceptable: results or roots near the subnormals."""
    info = np.finfo(dtype)
    return c < info.tiny * 2.0 ** (info.nmant + 4)


@pytest.mark.parametrize("name", sorted(GRADIENTS))
@pytest.mark.parametrize("dtype,scales", [(np.float32, F32_TINY + (1e30,)), (np.float64, F64_TINY + (1e300,))],
                         ids=["float32", "float64"])
def test_tiny_and_huge_gradients(name, dtype, scales):
    """The update ignores the gradient's scale: right at any scale (subnormal float32 gradients too).

    The projection is linear in the momenta: right, or refused as an underflow once the result itself
    comes near the subnormal range.
    """
    degree = 1 if name == "horizontal_projection" else 0
    for c in scales:
        got, want = _scaled_case(name, GRADIENTS[name], c, dtype, degree)
        if isinstance(got, str):
            assert degree == 1 and _refusable(dtype, c) and "underflows" in got and "\n" not in got, (name, c, got)
            continue
        assert _rel(got, want) <= 50 * np.finfo(dtype).eps, (name, c, _rel(got, want))


#: the smallest weight scale at which each rule must still be right (its roots and update representable)
RIGHT_DOWN_TO = {np.float32: 1e-38, np.float64: 1e-308}
RIGHT_DOWN_TO_SPECIAL = {"balance_qk": {np.float32: 1e-30, np.float64: 1e-290},  # the result scales with W
                         "isotropic_qk": {np.float32: 1e-37, np.float64: 1e-307}}  # c_W itself near tiny


@pytest.mark.parametrize("name", sorted(WEIGHTS))
@pytest.mark.parametrize("dtype,scales", [(np.float32, (1e-10, 1e-30) + F32_TINY), (np.float64, (1e-150,) + F64_TINY)],
                         ids=["float32", "float64"])
def test_tiny_weights_right_or_a_clear_error(name, dtype, scales):
    """Right whenever the roots and the update are representable, else one clear line; never wrong.

    balance_qk's equal Grams at ×1e-10 in float32 were 65 % off; weights of 1e-38 gave a zero update.
    """
    degree = 1 if name == "balance_qk" else -1
    floor = RIGHT_DOWN_TO_SPECIAL.get(name, RIGHT_DOWN_TO)[dtype]
    for c in scales:
        got, want = _scaled_case(name, WEIGHTS[name], c, dtype, degree)
        if isinstance(got, str):
            assert any(w in got for w in OVERFLOW_OR_UNDERFLOW) and "\n" not in got, (name, c, got)
            assert c < floor, (name, c, got)
            continue
        assert _rel(got, want) <= 200 * np.finfo(dtype).eps, (name, c, _rel(got, want))


@pytest.mark.parametrize("solver", ["structured", "dense"])
def test_sylvester_at_any_weight_scale(solver):
    """Weights scaled by ``c`` and λ by ``c²``: the update scales by ``1/c`` (dense: ×1e17 was 194 % off)."""
    from numerics.emitted.sylvester import sylvester_qk
    args, _ = example_call(np.random.default_rng(0), "sylvester_qk")
    for dtype, c, tol in ((np.float32, 1e-15, 1e-4), (np.float32, 1e17, 1e-4), (np.float64, 1e-150, 1e-12),
                          (np.float64, 1e150, 1e-12)):
        w = [(a * c).astype(dtype) for a in args[:2]]
        g = args[2].astype(dtype)
        got = sylvester_qk(*w, g, eps=1e-3, damping=0.1 * c * c, msign="svd", solver=solver)
        want = sylvester_qk(*(x.astype(np.float64) / c for x in w), g.astype(np.float64), eps=1e-3, damping=0.1,
                            msign="svd", solver="structured")
        assert _rel(tuple(np.asarray(x, np.float64) * c for x in got), _outs(want)) < tol, (dtype, c)


def test_balance_keeps_equal_grams_for_tiny_weights():
    from numerics.emitted.balance import balance_qk
    rng = np.random.default_rng(5)
    w_q, w_k = ((rng.standard_normal((2, rows, 4)) * 1e-10).astype(np.float32) for rows in (12, 6))
    q, k = (np.asarray(x, np.float64) for x in balance_qk(jnp.asarray(w_q), jnp.asarray(w_k)))
    gq, gk = np.swapaxes(q, -1, -2) @ q, np.swapaxes(k, -1, -2) @ k
    assert np.linalg.norm(gq - gk) / np.linalg.norm(gk) < 1e-4
    prod, want = q @ np.swapaxes(k, -1, -2), w_q.astype(np.float64) @ np.swapaxes(w_k.astype(np.float64), -1, -2)
    assert np.linalg.norm(prod - want) / np.linalg.norm(want) < 1e-5


def test_planted_range_mistakes_are_caught():
    """Without unit-scaled msign arguments tiny gradients go wrong; without rescaled groups balance does."""
    half = load_module(ROOT / "numerics" / "emitted" / "halfsplit.py", "planted_unscaled_halfsplit")
    half.unit_scale = lambda a, axes=(-2, -1): a
    args, kwargs = example_call(np.random.default_rng(1), "halfsplit_qk")
    kwargs = {**kwargs, "msign": "svd"}
    args32 = [a.astype(np.float32) for a in args]
    tiny = args32[:2] + [(a * 1e-38).astype(np.float32) for a in args[2:]]
    got, want = _outs(half.halfsplit_qk(*tiny, **kwargs)), _outs(half.halfsplit_qk(*args32, **kwargs))
    assert _rel(got, want) > 1e-2
    bal = load_module(ROOT / "numerics" / "emitted" / "balance.py", "planted_unscaled_balance")
    bal.scale_group = lambda arrays, damping, multiple: (arrays, damping, jnp.zeros((), jnp.int32))
    w_q, w_k = (np.random.default_rng(5).standard_normal(s) * 1e-10 for s in ((12, 4), (6, 4)))
    q, k = (np.asarray(x, np.float64) for x in bal.balance_qk(*(jnp.asarray(w, jnp.float32) for w in (w_q, w_k))))
    gq, gk = q.T @ q, k.T @ k
    assert np.linalg.norm(gq - gk) / np.linalg.norm(gk) > 1e-2


def test_scalars_outside_the_dtype_range_are_refused():
    from numerics.emitted.halfsplit import halfsplit_qk
    from numerics.emitted.sylvester import sylvester_qk
    args, kwargs = example_call(np.random.default_rng(0), "halfsplit_qk")
    a32 = [a.astype(np.float32) for a in args]
    for key, value in (("eps", 1e-40), ("damping", 1e-45), ("damping", 1e39), ("eps", 1e300)):
        with pytest.raises(ValueError, match=f"{key} = .* outside the normal range of float32"):
            halfsplit_qk(*a32, **{**kwargs, key: value})
    s_args, s_kwargs = example_call(np.random.default_rng(0), "sylvester_qk")
    with pytest.raises(ValueError, match="damping = 1e-40 is outside"):
        sylvester_qk(*(a.astype(np.float32) for a in s_args), **{**s_kwargs, "damping": 1e-40})


def test_pow2_normalize_is_exact_for_subnormals():
    rng = np.random.default_rng(6)
    for dtype, scales in ((np.float32, (1e-45, 1e-40, 1e-38, 1.0, 1e38)), (np.float64, (5e-324, 1e-310, 1.0, 1e300))):
        for c in scales:
            a = (rng.standard_normal((2, 5, 3)) * c).astype(dtype)
            x, k = (np.asarray(v) for v in jax.jit(K.pow2_normalize)(jnp.asarray(a)))
            top = np.max(np.abs(x), axis=(-2, -1))
            assert np.all((top >= 1) & (top < 2)), (dtype, c, top)
            assert np.array_equal(x, np.ldexp(a, k).astype(dtype)), (dtype, c)


# ---- item 8: schedule length ------------------------------------------------------------------
def _lowered(schedule_steps):
    step = (3.4445, -4.775, 2.0315)
    text = jax.jit(K.newton_schulz).lower(jnp.ones((6, 4)), K.schedule_array((step,) * schedule_steps)).as_text()
    return text.count("stablehlo.while"), text.count("call @")


def test_long_schedules_loop_and_short_ones_unroll():
    """Up to NS_UNROLL_STEPS the steps are unrolled (the default schedules' numbers stay); beyond, one loop."""
    short = [_lowered(n) for n in (5, K.NS_UNROLL_STEPS)]
    assert short[0][0] == short[1][0] == 0 and short[1][1] > short[0][1]  # unrolled: grows with the schedule
    long = [_lowered(n) for n in (K.NS_UNROLL_STEPS + 1, K.MAX_SCHEDULE_STEPS)]
    assert long[0] == long[1] and long[0][0] == 1  # one while loop, the same program for any length


@pytest.mark.parametrize("rule,name", [f for f in FUNCTIONS if "schedule" in inspect.signature(_fn(*f)).parameters])
def test_schedules_longer_than_the_cap_are_refused(rule, name):
    fn = _fn(rule, name)
    args, kwargs = example_call(np.random.default_rng(0), name)
    too_long = ((3.4445, -4.775, 2.0315),) * (K.MAX_SCHEDULE_STEPS + 1)
    for schedule in (too_long, np.asarray(too_long)):
        with pytest.raises(ValueError, match=r"schedule has 101 steps, more than MAX_SCHEDULE_STEPS = 100"):
            fn(*args, **{**kwargs, "schedule": schedule})
    with pytest.raises(ValueError, match="schedule has 101 steps"):  # the length is static under jit too
        jax.jit(lambda s: fn(*args, **{**kwargs, "schedule": s}))(jnp.asarray(too_long))


def test_the_longest_schedule_compiles_as_a_loop():
    """A 100-step schedule through an emitted function and the optimizer's roots finishes (a hang fails)."""
    code = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp
        from numerics.emitted.halfsplit import halfsplit_qk
        from numerics.kernels.gram_roots import gram_inv_sqrt
        rng = np.random.default_rng(0)
        a = [jnp.asarray(rng.standard_normal((2, 32, 8)), jnp.float32) for _ in range(4)]
        step = (1.5, -0.5)  # the cubic: converges, then stays at 1
        out = halfsplit_qk(*a, eps=0.1, schedule=(step,) * 100)
        ref = halfsplit_qk(*a, eps=0.1, msign="svd")
        assert all(float(jnp.max(jnp.abs(o - r))) < 1e-3 * float(jnp.max(jnp.abs(r))) for o, r in zip(out, ref))
        c = gram_inv_sqrt(a[0], 1.0, ((1.5, -0.5),) * 100)
        assert bool(jnp.all(jnp.isfinite(c)))
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_integers_beyond_every_float_are_refused_in_one_line():
    """Audit: ``eps=10**400`` and a schedule coefficient ``10**400`` raised OverflowError tracebacks."""
    from numerics.emitted.halfsplit import halfsplit_qk
    rng = np.random.default_rng(0)
    w_q, w_k, g_q, g_k = (jnp.asarray(rng.standard_normal((6, 2))) for _ in range(4))
    for kwargs, needle in (({"eps": 10**400}, "eps must be finite"), ({"eps": 0.1, "damping": 10**400},
                                                                        "damping must be finite"),
                           ({"eps": 0.1, "schedule": ((10**400, 1, 1),)}, "finite floats")):
        with pytest.raises(ValueError, match=needle) as err:
            halfsplit_qk(w_q, w_k, g_q, g_k, **kwargs)
        assert "\n" not in str(err.value)
