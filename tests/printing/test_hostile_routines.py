"""Hostile inputs to the emitted modules and the compute routines they call.

* Ill-conditioned partners: the Gram roots must not square the condition number. ``halfsplit_qk``
  with a partner of condition number κ is compared with the exact rule evaluated at 60 digits; the
  relative error must stay below ``4·eps·κ`` up to the numerical rank cut (singular values at or
  below ``max(d, d_h)·eps·σ_max``), and above the cut the result is the pseudo-inverse rule. The
  planted mistake (every batch forced onto the Gram-eigenvalue route) fails the same check.
* Empty batches, zero widths, ``Fraction`` scalars and mixed dtypes (bad scalars under ``jit``: test_nonfinite.py).
* The edges of the number range: gradients and weights scaled towards the subnormals give the
  right answer or one clear error, never a silently wrong number; the planted mistakes (msign
  arguments not unit-scaled, the balancing gauge's groups not rescaled) fail.
* Schedules: every one runs as one loop whatever its length (the same program), longer than
  ``MAX_SCHEDULE_STEPS`` they are refused naming ``schedule`` (whatever msign is).
* The number range of every output: huge weights and tiny eps give the right update or one underflow line naming
  the function and its arguments' sizes, in every function (they were all zero); float16 outputs among
  the subnormals are refused, ordinary ones are not; balance_qk forms no Gram matrix (its error grows
  like eps·κ^(1/2)); the stored-layout entry points name their own arguments; boolean scalars are refused.
  Each with its planted mistake.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

from derivations import balance, registry
from derivations import halfsplit as halfsplit_rule
from derivations.balance import SPDPower
from derivations.cli import render
from derivations.hostile import rule_subjects
from derivations.printing import battery_cases
from derivations.printing.battery import pair_of, run
from derivations.printing.codegen import DerivedOutput
from derivations.regenerate import shipped
from derivations.vocabulary.nodes import PolarFactor
from foundation.compute import jax_damped_gram, jax_exact_scaling, jax_msign, jax_output_checks
from foundation.compute import numpy_routines as NK
from tests.conftest import load_module
from tests.emitted_inputs import example_call

RULES = shipped()

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = sorted({name: (rule, name) for rule in reversed(RULES)
                    for name in importlib.import_module(f"numerics.emitted.{rule}").__all__}.values())


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


# ---- ill-conditioned partners ---------------------------------------------------------------
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


def _standalone_copy(rule, name):
    """``python -m derivations.<rule> --emit jax --standalone`` loaded as its own module: its routines and constants
    are its own globals, so a routine planted there changes this copy only."""
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(render(registry.rule_module(rule), "jax", standalone=True))
    return load_module(path, name)


def test_planted_gram_route_squares_the_condition_number(tmp_path):
    """Forcing the eigenvalues of the formed Gram matrix (the old routine) fails the accuracy check."""
    planted = _standalone_copy("halfsplit", "planted_gram_route_halfsplit")
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


def _lapack_inputs_of_the_svd_route(module, monkeypatch, call_lapack=True):
    """Whether each matrix the SVD route of ``module.gram_eigh`` hands to LAPACK is finite (one flag per
    call), for a batch of an ill-conditioned partner (which sends the batch there) and one holding an Inf."""
    seen, inner = [], module.right_singular

    def recording(a):
        jax.debug.callback(lambda ok: seen.append(bool(ok)), jnp.all(jnp.isfinite(a)))
        if call_lapack:
            return inner(a)
        n = a.shape[-1]  # a planted copy: no LAPACK
        return jnp.zeros((*a.shape[:-2], n), a.dtype), jnp.zeros((*a.shape[:-2], n, n), a.dtype)

    monkeypatch.setattr(module, "right_singular", recording)
    rng = np.random.default_rng(8)
    w = np.stack([_partner(rng, 1e6), rng.standard_normal((D, DH))])
    w[1, 3, 2] = np.inf
    r, _, _ = module.gram_eigh(jnp.asarray(w), 0.0, "right")
    return seen, np.asarray(r)


def test_the_svd_route_hands_lapack_finite_matrices_only(monkeypatch, tmp_path):
    """The SVD route zeroes a non-finite partner before LAPACK (a NaN in ``dgesdd`` could spin forever) with the
    flag of the Gram matrix: the scaled partner is all NaN or finite with entries below 2. Planted: unguarded."""
    seen, r = _lapack_inputs_of_the_svd_route(jax_damped_gram, monkeypatch)
    assert seen == [True, True] and np.all(np.isfinite(r[0])) and np.all(np.isnan(r[1]))
    source = Path(jax_damped_gram.__file__).read_text()
    assert source.count("jnp.where(ok, a, 0)") == 1
    (tmp_path / "planted_gram.py").write_text(source.replace("jnp.where(ok, a, 0)", "a"))
    planted = load_module(tmp_path / "planted_gram.py", "planted_unguarded_svd_route")
    seen, _ = _lapack_inputs_of_the_svd_route(planted, monkeypatch, call_lapack=False)
    assert seen == [True, False]


def test_rank_cut_is_on_singular_values_not_their_squares():
    """``gram_eigh`` (JAX and NumPy) keeps σ just above ``max(m, n)·eps·σ_max`` and zeroes those below."""
    rng = np.random.default_rng(4)
    u, _ = np.linalg.qr(rng.standard_normal((D, DH)))
    gram_eigh = jax.jit(jax_damped_gram.gram_eigh, static_argnums=2)  # one program per dtype, not one per op
    for dtype in (np.float32, np.float64):
        tol = D * np.finfo(dtype).eps
        sigma = np.array([1.0, 0.5, 8 * tol, tol / 8])
        w = (u * sigma).astype(dtype)
        r, _, k = gram_eigh(jnp.asarray(w), 0.0, "right")
        r = np.sort(np.asarray(r, np.float64) * 2.0 ** -np.asarray(k)[..., 0])
        assert r[0] == 0 and r[1] == pytest.approx(8 * tol, rel=1e-2), (dtype, r)
        if dtype == np.float64:
            rn, _, s = NK.gram_eigh(w, 0.0, "right")
            rn = np.sort(rn * s[..., 0])
            assert rn[0] == 0 and rn[1] == pytest.approx(8 * tol, rel=1e-6)
    # the NumPy reference routine: C⁻¹ accurate to eps·κ at κ = 1e12 (the Gram route would lose it all)
    w = _partner(rng, 1e12)
    ci = NK.psd_power(NK.gram_eigh(w, 0.0, "right"), -0.5)
    with mpmath.workdps(50):
        m = mpmath.matrix(w.tolist())
        e, q = mpmath.eigsy(m.T * m)
        exact = np.array((q * mpmath.diag([1 / mpmath.sqrt(x) for x in e]) * q.T).tolist(), dtype=np.float64)
    assert np.linalg.norm(ci - exact) / np.linalg.norm(exact) <= 4 * np.finfo(np.float64).eps * 1e12


# ---- empty batches, zero widths, scalars, dtypes ----------------------------------------------
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


# ---- the edges of the number range -------------------------------------------------------------
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


@pytest.mark.parametrize("scale", [1e-10, 1e-20])
def test_balance_keeps_equal_grams_for_tiny_weights(scale):
    from numerics.emitted.balance import balance_qk
    rng = np.random.default_rng(5)
    w_q, w_k = ((rng.standard_normal((2, rows, 4)) * scale).astype(np.float32) for rows in (12, 6))
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
    # 1e-20: the Gram roots and polar factors rescale themselves, but N = W_Q C_K (about 1e-40) underflows
    w_q, w_k = (np.random.default_rng(5).standard_normal(s) * 1e-20 for s in ((12, 4), (6, 4)))
    w_q, w_k = (np.asarray(jnp.asarray(w, jnp.float32), np.float64) for w in (w_q, w_k))
    q, k = (np.asarray(x, np.float64) for x in bal.balance_qk(*(jnp.asarray(w, jnp.float32) for w in (w_q, w_k))))
    assert _rel((q @ k.T,), (w_q @ w_k.T,)) > 1e-2  # the product is lost (flushed to zero)


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
            x, k = (np.asarray(v) for v in jax.jit(jax_exact_scaling.pow2_normalize)(jnp.asarray(a)))
            top = np.max(np.abs(x), axis=(-2, -1))
            assert np.all((top >= 1) & (top < 2)), (dtype, c, top)
            assert np.array_equal(x, np.ldexp(a, k).astype(dtype)), (dtype, c)



def _pow2_scale_failures(scale):
    """Where ``scale(x, n)`` is not ``x · 2**n`` exactly (normal x and result), ``±0`` below the normal range,
    ``±Inf`` above it, NaN kept, for every float dtype and shifts far past each exponent range."""
    rng = np.random.default_rng(7)
    failures = []
    for dtype, reach in ((jnp.float16, 40), (jnp.bfloat16, 300), (jnp.float32, 300), (jnp.float64, 2500)):
        info = jnp.finfo(dtype)
        x = np.ldexp(rng.uniform(1, 2, 400) * rng.choice([-1, 1], 400),
                     rng.integers(int(info.minexp), int(info.maxexp), 400))
        x[:3] = (np.nan, 0.0, float(info.smallest_subnormal))  # NaN kept; zero and subnormal give 0
        n = rng.integers(-reach, reach, 400).astype(np.int32)
        got = np.asarray(jax.jit(scale)(jnp.asarray(x, dtype), jnp.asarray(n))).astype(np.float64)
        stored = np.asarray(jnp.asarray(x, dtype)).astype(np.float64)
        with np.errstate(over="ignore"):
            want = np.ldexp(stored, n)
        want = np.where(np.abs(want) < float(info.tiny), np.copysign(0.0, stored), want)
        want = np.where(np.abs(want) > float(info.max), np.copysign(np.inf, stored), want)
        want[2] = 0.0
        if not np.array_equal(got, want, equal_nan=True) or np.any(np.signbit(got[3:]) != np.signbit(want[3:])):
            failures.append(jnp.dtype(dtype).name)
    return failures


def test_pow2_scale_moves_the_exponent_exactly_whatever_the_shift():
    """``pow2_scale`` works on the bits: exact in range, ±0 below it, ±Inf above it, in every dtype; a planted
    scaling by a multiplication with ``2**n`` formed in the dtype (which overflows to Inf or flushes to 0 for
    shifts past the exponent range, however small the product) is caught."""
    assert _pow2_scale_failures(jax_exact_scaling.pow2_scale) == []
    planted = lambda x, n: x * jnp.exp2(n.astype(x.dtype))  # noqa: E731
    assert _pow2_scale_failures(planted) == ["float16", "bfloat16", "float32", "float64"]


# ---- schedule length --------------------------------------------------------------------------
def _lowered(schedule_steps):
    step = (3.4445, -4.775, 2.0315)
    schedule = jax_msign.schedule_array((step,) * schedule_steps)
    fresh = lambda x, c: jax_msign.newton_schulz(x, c)  # noqa: E731  (a new function: no cached trace)
    text = jax.jit(fresh).lower(jnp.ones((6, 4)), schedule).as_text()
    return text.count("stablehlo.while"), text.count("call @")


def test_every_schedule_runs_as_one_loop_whatever_its_length():
    """The steps run in one loop whose body is compiled once: the program is the same for 2, 5 and 100 steps
    (unrolled, every step would compile ops of its own; a planted unrolled scan is caught)."""
    programs = [_lowered(n) for n in (2, 5, jax_msign.MAX_SCHEDULE_STEPS)]
    assert programs[0] == programs[1] == programs[2] and programs[0][0] == 1


def test_planted_unrolled_scan_is_caught(monkeypatch):
    scan = jax.lax.scan
    monkeypatch.setattr(jax.lax, "scan", lambda *a, **k: scan(*a, **{**k, "unroll": True}))
    programs = [_lowered(n) for n in (2, 5)]
    assert not (programs[0] == programs[1] and programs[0][0] == 1)


@pytest.mark.parametrize("rule,name", [f for f in FUNCTIONS if "schedule" in inspect.signature(_fn(*f)).parameters])
def test_schedules_longer_than_the_cap_are_refused(rule, name):
    fn = _fn(rule, name)
    args, kwargs = example_call(np.random.default_rng(0), name)
    too_long = ((3.4445, -4.775, 2.0315),) * (jax_msign.MAX_SCHEDULE_STEPS + 1)
    for schedule in (too_long, np.asarray(too_long)):
        with pytest.raises(ValueError, match=r"schedule has 101 steps, more than MAX_SCHEDULE_STEPS = 100"):
            fn(*args, **{**kwargs, "schedule": schedule})
    with pytest.raises(ValueError, match="schedule has 101 steps"):  # the length is static under jit too
        jax.jit(lambda s: fn(*args, **{**kwargs, "schedule": s}))(jnp.asarray(too_long))


@pytest.mark.e2e  # a Python process with a time limit (a hang fails instead of stopping the suite)
def test_the_longest_schedule_compiles_as_a_loop():
    """A 100-step schedule through an emitted function and the optimizer's roots finishes (a hang fails)."""
    code = textwrap.dedent("""
        import numpy as np, jax, jax.numpy as jnp
        from numerics.emitted.halfsplit import halfsplit_qk
        from foundation.compute.gram_roots import gram_inv_sqrt
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
    """``eps=10**400`` and a schedule coefficient ``10**400`` once raised OverflowError tracebacks."""
    from numerics.emitted.halfsplit import halfsplit_qk
    rng = np.random.default_rng(0)
    w_q, w_k, g_q, g_k = (jnp.asarray(rng.standard_normal((6, 2))) for _ in range(4))
    for kwargs, needle in (({"eps": 10**400}, "eps must be finite"), ({"eps": 0.1, "damping": 10**400},
                                                                        "damping must be finite"),
                           ({"eps": 0.1, "schedule": ((10**400, 1, 1),)}, "finite floats")):
        with pytest.raises(ValueError, match=needle) as err:
            halfsplit_qk(w_q, w_k, g_q, g_k, **kwargs)
        assert "\n" not in str(err.value)


# ---- the number range of every output, 16-bit outputs, balance ------------------------------------------
def _battery_findings(rule, name, planted, dtype, promises=("scale",), batch=()):
    """The battery's findings for the JAX function ``name`` of ``rule`` with its call taken from ``planted``."""
    subjects = rule_subjects(rule)
    subject = next(s for s in subjects if s.name == name and s.target == "jax")
    pair = pair_of(subject, subjects)  # the NumPy function: the reference of outputs that are not homogeneous
    subject = replace(subject, call=getattr(planted, name))
    return [f.line() for f in run(subject, dtype, 0, batch, pair, promises, exact=False) if f.status != "ok"]


def _planted_without_lost_flag(rule):
    """The emitted module with ``pow2_unscale`` never flagging an underflow (the output's exponent ignored)."""
    planted = _standalone_copy(rule, f"planted_no_lost_{rule}")
    planted.pow2_unscale = lambda x, n, dtype=None: (planted.pow2_scale(x.astype(planted.compute_dtype(x.dtype)), n),
                                                     jnp.asarray(False))
    return planted


def test_planted_lost_flag_is_what_catches_huge_weights_and_tiny_eps():
    """Without the underflow flag, huge weights and a tiny eps give all-zero updates without an error (the
    battery's scale ladder, tests/printing/test_battery.py, holds every function to right-or-refused)."""
    bad = _battery_findings("halfsplit", "halfsplit_qk", _planted_without_lost_flag("halfsplit"), "float32")
    assert any("W_K x 2^124: wrong" in b for b in bad) and any("eps x 2^-124: wrong" in b for b in bad), bad
    bad = _battery_findings("sylvester", "sylvester_qk", _planted_without_lost_flag("sylvester"), "float32")
    assert any("eps x 2^-124: wrong" in b for b in bad), bad


def test_planted_exempt_float16_is_silently_wrong(monkeypatch):
    """With 16-bit outputs judged as their float32 values (exempt, as before), eps at 2^-24 of the example's (an
    update below the smallest normal float16 number) passes and is far off; the shipped module refuses it."""
    monkeypatch.setattr(battery_cases, "ladder", lambda dtype: (24,))
    from numerics.emitted import halfsplit
    assert _battery_findings("halfsplit", "halfsplit_qk", halfsplit, "float16") == []
    planted = load_module(ROOT / "numerics" / "emitted" / "halfsplit.py", "planted_exempt_float16")
    unscale = planted.pow2_unscale
    planted.pow2_unscale = lambda x, n, dtype=None: unscale(x, n)  # the output's own dtype ignored
    bad = _battery_findings("halfsplit", "halfsplit_qk", planted, "float16")
    assert any("eps x 2^-24: wrong" in b for b in bad), bad


def test_planted_group_flag_is_what_catches_arguments_far_apart():
    """``lora_horizontal_projection`` in float32 with ``m_B`` at 2^124 beside ``B``, ``A`` and ``m_A`` of about 1: one
    scaling group brought them to 2^-125, among the subnormals XLA flushes, and the update came back 3-21 % off
    without an error; ``group_underflow`` now refuses it (and the same call in the NumPy target), naming the
    arguments' sizes. Planted: no group flag."""
    from numerics.emitted import lora
    assert _battery_findings("lora", "lora_horizontal_projection", lora, "float32", batch=(2,)) == []
    planted = _standalone_copy("lora", "planted_no_group_flag_lora")
    planted.group_underflow = lambda arrays: jnp.asarray(False)
    bad = _battery_findings("lora", "lora_horizontal_projection", planted, "float32", batch=(2,))
    assert any("m_B x 2^124: wrong relative error" in b for b in bad), bad


def test_underflow_limits():
    assert jax_output_checks.underflow_limit(jnp.float16) == float(jnp.finfo(jnp.float16).tiny)
    limit = jax_output_checks.underflow_limit
    assert limit(jnp.bfloat16) == limit(jnp.float32) == 2.0 ** -107
    assert jax_output_checks.underflow_limit(jnp.float64) == 2.0 ** (-1022 + 52 - 4)


def test_float16_rounding_error_decides_the_underflow():
    """pow2_unscale flags a float16 output whose rounding error exceeds eps (relative, Frobenius), only that."""
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.standard_normal((2, 6, 3)), jnp.float32)
    unscale = jax.jit(jax_output_checks.pow2_unscale, static_argnums=2)  # one program for every shift
    for n, lost in ((0, False), (-14, False), (-15, False), (-19, True), (-24, True)):
        y, flag = unscale(x, jnp.asarray(n, jnp.int32), jnp.float16)
        err = np.linalg.norm(np.asarray(y.astype(jnp.float16), np.float64) - np.asarray(y, np.float64))
        assert bool(flag) == lost == (err > np.finfo(np.float16).eps * np.linalg.norm(np.asarray(y))), (n, err)


# ---- balance_qk: no formed Gram matrix, so the condition number is not squared ---------------------------
def _exact_balance(w_q, w_k):
    """``(U_N (NᵀN)^{1/4}, U_K (NᵀN)^{1/4})``, ``N = W_Q C_K``, at 40 digits (SVDs; no cut: full rank)."""
    with mpmath.workdps(40):
        q, k = mpmath.matrix(w_q.tolist()), mpmath.matrix(w_k.tolist())
        _, s, vt = mpmath.svd_r(k, full_matrices=False)
        c = sum((vt[i, :].T * vt[i, :] * s[i] for i in range(k.cols)), mpmath.zeros(k.cols, k.cols))
        out = []
        for x in (q * c, k):
            u, sx, vx = mpmath.svd_r(x, full_matrices=False)
            out.append(u * vx)
        n = q * c
        _, sn, vn = mpmath.svd_r(n, full_matrices=False)
        quarter = sum((vn[i, :].T * vn[i, :] * mpmath.sqrt(sn[i]) for i in range(n.cols)), mpmath.zeros(n.cols, n.cols))
        return tuple(np.array((u * quarter).tolist(), dtype=np.float64) for u in out)


BALANCE_KAPPAS = [(np.float32, (1e3, 1e4, 1e5)), (np.float64, (1e6, 1e8))]


def _balance_errors(balance_qk, dtype, kappas):
    rng = np.random.default_rng(7)
    errors = {}
    for kappa in kappas:
        w_k = _partner(rng, kappa).astype(dtype)
        w_q = rng.standard_normal((2 * D, DH)).astype(dtype)
        want = _exact_balance(w_q.astype(np.float64), w_k.astype(np.float64))
        errors[kappa] = _rel(_outs(balance_qk(jnp.asarray(w_q), jnp.asarray(w_k))), want)
    return errors


@pytest.mark.parametrize("dtype,kappas", BALANCE_KAPPAS, ids=["float32", "float64"])
def test_balance_error_grows_like_eps_root_kappa(dtype, kappas):
    """The balanced factors' own sensitivity is about eps·κ^(1/2); forming C_K W_QᵀW_Q C_K gave eps·κ²-like errors
    (float32 κ = 1e4: 1.6e-2; float64 κ = 1e8: 7e-5)."""
    balance_qk = _fn("balance", "balance_qk")
    eps = np.finfo(dtype).eps
    errors = _balance_errors(balance_qk, dtype, kappas)
    assert all(e <= 8 * eps * (np.sqrt(k) + 10) for k, e in errors.items()), errors


def test_planted_gram_formed_balance_squares_the_condition_number(tmp_path):
    """The balanced factors printed from the Gram-matrix form (W_Q C_K (C_K W_QᵀW_Q C_K)^(-1/4), ...) fail."""
    q, k = balance.balanced_factors()
    source = balance.equal_grams()
    fn = replace(balance.emitted_functions()[0], outputs=[("W_Q_bal", DerivedOutput(q, source, "balance.W_Q")),
                                                          ("W_K_bal", DerivedOutput(k, source, "balance.W_K"))])
    path = tmp_path / "gram_balance.py"
    path.write_text(render(replace(balance.rule_module(), functions=lambda: [fn]), "jax"))
    assert "C_K @ W_Q.mT @ W_Q @ C_K" in path.read_text()
    planted = load_module(path, "planted_gram_balance")
    errors = _balance_errors(planted.balance_qk, np.float32, (1e4,))
    assert errors[1e4] > 8 * np.finfo(np.float32).eps * (1e2 + 10), errors


def test_balance_emits_no_gram_matrix():
    """The emitted balance_qk is printed from balance.stable_query/stable_key: SVDs, no formed NᵀN."""
    source = inspect.getsource(importlib.import_module("numerics.emitted.balance")._balance_qk)
    assert "polar_factor(" in source and "jnp.linalg.eigh" not in source and "W_Q.mT @ W_Q" not in source
    for der in (balance.stable_query(), balance.stable_key()):
        assert not der.formula.has(SPDPower) and der.formula.has(PolarFactor), der.formula


# ---- errors name the function the user called and its arguments ------------------------------------------
ADAPTERS = [("joint", "joint_qk"), ("gqa", "gqa_qk"), ("hybrid_ov", "hybrid_ov")]


def _adapter_messages(module, name):
    fn = getattr(module, name)
    args, kwargs = example_call(np.random.default_rng(0), name)
    names = list(inspect.signature(fn).parameters)[:len(args)]
    messages = {}
    for i, arg in enumerate(names):
        bad = [np.where(np.arange(a.size).reshape(a.shape) == 0, np.nan, a) if j == i else a
               for j, a in enumerate(args)]
        with pytest.raises(ValueError) as err:
            fn(*bad, **kwargs)
        messages[arg] = str(err.value)
    tiny = [(a * 1e36).astype(np.float32) if j < 2 else a.astype(np.float32) for j, a in enumerate(args)]
    with pytest.raises(ValueError) as err:
        fn(*tiny, **{**kwargs, "msign": "svd"})
    messages["underflow"] = str(err.value)
    for key, value in (("eps", -1.0), ("damping", float("nan"))):
        with pytest.raises(ValueError) as err:
            fn(*args, **{**kwargs, key: value})
        messages[key] = str(err.value)
    return names, messages


@pytest.mark.parametrize("rule,name", ADAPTERS)
def test_stored_layout_errors_name_the_entry_point_and_its_arguments(rule, name):
    """joint_qk with a NaN W_Q said "joint_whitened: P contains NaN or Inf" (P, G and the core are internal)."""
    names, messages = _adapter_messages(importlib.import_module(f"numerics.emitted.{rule}"), name)
    for arg in names:
        assert messages[arg] == f"{name}: {arg} contains NaN or Inf", messages[arg]
    assert messages["underflow"].startswith(f"{name}: the result underflows float32"), messages["underflow"]
    assert all(f"max|{arg}| = " in messages["underflow"] for arg in names), messages["underflow"]
    assert messages["eps"].startswith(f"{name}: eps must be") and messages["damping"].startswith(f"{name}: damping")


def test_planted_adapter_without_caller_names_internal_symbols():
    planted = load_module(ROOT / "numerics" / "emitted" / "joint.py", "planted_no_caller_joint")
    check = planted.raise_if_not_finite
    planted.raise_if_not_finite = lambda function, status, arrays, caller=None: check(function, status, arrays)
    fn = planted.joint_qk
    args, kwargs = example_call(np.random.default_rng(0), "joint_qk")
    with pytest.raises(ValueError, match="joint_whitened: P contains NaN or Inf"):
        fn(np.full_like(args[0], np.nan), *args[1:], **kwargs)


def test_stored_layout_dtype_errors_name_the_stored_argument():
    gqa_qk = _fn("gqa", "gqa_qk")
    args, kwargs = example_call(np.random.default_rng(0), "gqa_qk")
    with pytest.raises(TypeError, match="gqa_qk: W_Q must be real floating point, got dtype int64"):
        gqa_qk(*[a.astype(np.int64) for a in args], **kwargs)


# ---- scalars and schedules refused as documented -------------------------------------------------------
@pytest.mark.parametrize("value", [np.bool_(True), np.bool_(False), jnp.asarray(True)],
                         ids=["np_true", "np_false", "jnp"])
def test_boolean_scalars_are_refused(value):
    """np.bool_ passed as eps/damping (halfsplit_qk, sylvester_qk) was taken as 1.0: documented as refused."""
    for fn, name in ((_fn("halfsplit", "halfsplit_qk"), "halfsplit_qk"),
                     (_fn("sylvester", "sylvester_qk"), "sylvester_qk")):
        args, kwargs = example_call(np.random.default_rng(0), name)
        for key in ("eps", "damping"):
            with pytest.raises(TypeError, match=f"{name}: {key} must be a real number, got the boolean"):
                fn(*args, **{**kwargs, key: value})
    with pytest.raises(TypeError, match="eps must be a real number, got the boolean"):
        NK.validate_arrays("f", {"W": ("d", "d_h")}, {"W": np.ones((3, 2))}, {"eps": np.bool_(True)})


def test_schedule_cap_holds_whatever_msign_is(tmp_path):
    """A module written by --emit jax --msign svd accepted a 101-step schedule; the packaged ones refuse it."""
    path = tmp_path / "svd_default.py"
    path.write_text(render(halfsplit_rule.rule_module(), "jax", msign="svd"))
    svd_default = load_module(path, "svd_default_halfsplit")
    args, kwargs = example_call(np.random.default_rng(0), "halfsplit_qk")
    too_long = ((1.5, -0.5),) * (jax_msign.MAX_SCHEDULE_STEPS + 1)
    for fn, extra in ((svd_default.halfsplit_qk, {}), (_fn("halfsplit", "halfsplit_qk"), {"msign": "svd"})):
        with pytest.raises(ValueError, match="schedule has 101 steps, more than MAX_SCHEDULE_STEPS"):
            fn(*args, **{**kwargs, **extra, "schedule": too_long})
