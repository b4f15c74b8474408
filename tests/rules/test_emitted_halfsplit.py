"""The emitted JAX half-split module, tested as a user would call it."""

import ast
import re

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import coeffsearch
from foundation.compute.spectra import log_spaced_spectrum, random_orthonormal, with_singular_values
from tests import hand_formulas as hand


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))


def instance(rng, batch, d, d_h, cond=10.0):
    """Factors with prescribed conditioning; gradients from a random G_M by the chain rule."""
    shape = tuple(batch)
    W_Q = np.empty(shape + (d, d_h))
    W_K = np.empty(shape + (d, d_h))
    G_M = rng.standard_normal(shape + (d, d))
    for idx in np.ndindex(*shape):
        W_Q[idx] = with_singular_values(rng, d, d_h, log_spaced_spectrum(rng, d_h, cond))
        W_K[idx] = with_singular_values(rng, d, d_h, log_spaced_spectrum(rng, d_h, cond))
    G_Q = G_M @ W_K
    G_K = np.swapaxes(G_M, -1, -2) @ W_Q
    return W_Q, W_K, G_Q, G_K, G_M


# The shapes come from a small set, so that the 25 examples share about 8 compilations instead of compiling one
# program each (a compile is 1-3 s); they cover a single column, square and tall partners, with and without
# two leading batch axes. The values (spectra, condition, ε, seed) stay drawn.
@settings(max_examples=25, deadline=None)
@given(d_h=st.sampled_from([1, 4]), extra=st.sampled_from([0, 5]), batch=st.sampled_from([[], [3, 2]]),
       cond=st.sampled_from([1.0, 3.0, 100.0]), eps=st.floats(1e-3, 10.0), seed=st.integers(0, 2**31))
def test_matches_hand_formula_svd_x64(halfsplit_jax, d_h, extra, batch, cond, eps, seed):
    rng = np.random.default_rng(seed)
    W_Q, W_K, G_Q, G_K, _ = instance(rng, batch, d_h + extra, d_h, cond)
    dQ, dK = halfsplit_jax.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=eps, msign="svd")
    hQ, hK = hand.halfsplit(W_Q, W_K, G_Q, G_K, eps)
    assert dQ.dtype == jnp.float64 and dQ.shape == W_Q.shape
    assert rel(dQ, hQ) < 1e-10 and rel(dK, hK) < 1e-10


def test_budget_is_tight_and_value_is_optimal(halfsplit_jax):
    rng = np.random.default_rng(1)
    eps = 0.3
    W_Q, W_K, G_Q, G_K, G_M = instance(rng, (4,), 24, 6, cond=30.0)
    dQ, dK = (np.asarray(x) for x in halfsplit_jax.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=eps, msign="svd"))
    for h in range(4):
        assert np.linalg.norm(dQ[h] @ W_K[h].T, 2) == pytest.approx(eps / 2, rel=1e-12)
        assert np.linalg.norm(W_Q[h] @ dK[h].T, 2) == pytest.approx(eps / 2, rel=1e-12)
        U_K = W_K[h] @ hand.inv_sqrt(W_K[h].T @ W_K[h])
        value = -(eps / 2) * np.linalg.norm(G_M[h] @ U_K, "nuc")
        assert np.sum(G_Q[h] * dQ[h]) == pytest.approx(value, rel=1e-12)
        # optimality: no feasible direction does better (Hölder bound, sampled)
        for _ in range(50):
            Y = rng.standard_normal(dQ[h].shape)
            Y *= (eps / 2) / np.linalg.norm(Y @ W_K[h].T, 2)
            assert np.sum(G_Q[h] * Y) >= value - 1e-12


def test_hybrid_v_side_matches_hand_formula_and_is_tight(halfsplit_jax):
    rng = np.random.default_rng(2)
    W_O = with_singular_values(rng, 20, 5, [3.0, 2.0, 1.0, 0.5, 0.1])
    G_M = rng.standard_normal((20, 20))
    G_V = W_O.T @ G_M
    dV = np.asarray(halfsplit_jax.halfsplit_v(W_O, G_V, eps=0.4, msign="svd"))
    assert rel(dV, hand.hybrid_v(W_O, G_V, 0.4)) < 1e-10
    assert np.linalg.norm(W_O @ dV, 2) == pytest.approx(0.2, rel=1e-12)
    C_Oi = hand.inv_sqrt(W_O.T @ W_O)
    assert np.sum(G_V * dV) == pytest.approx(-0.2 * np.linalg.norm(C_Oi @ G_V, "nuc"), rel=1e-12)


def test_product_step_closed_form(halfsplit_jax):
    rng = np.random.default_rng(3)
    W_Q, W_K, G_Q, G_K, G_M = instance(rng, (), 16, 4, cond=5.0)
    dQ, dK = (np.asarray(x) for x in halfsplit_jax.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=0.2, msign="svd"))
    assert rel(dQ @ W_K.T + W_Q @ dK.T, hand.product_step(G_M, W_Q, W_K, 0.2)) < 1e-10


def test_gauge_equivariance_undamped(halfsplit_jax):
    rng = np.random.default_rng(4)
    W_Q, W_K, _, _, G_M = instance(rng, (), 18, 5, cond=4.0)
    R = rng.standard_normal((5, 5)) + 3 * np.eye(5)
    Rinv_T = np.linalg.inv(R).T
    W_Q2, W_K2 = W_Q @ R, W_K @ Rinv_T
    assert np.allclose(W_Q2 @ W_K2.T, W_Q @ W_K.T)
    dQ, dK = halfsplit_jax.halfsplit_qk(W_Q, W_K, G_M @ W_K, G_M.T @ W_Q, eps=0.1, msign="svd")
    dQ2, dK2 = halfsplit_jax.halfsplit_qk(W_Q2, W_K2, G_M @ W_K2, G_M.T @ W_Q2, eps=0.1, msign="svd")
    # the products and the achieved product step are invariant; the factor steps transform
    assert rel(dQ2, np.asarray(dQ) @ R) < 1e-9
    assert rel(dK2, np.asarray(dK) @ Rinv_T) < 1e-9


def test_damping_breaks_gauge_but_stays_close_for_small_damping(halfsplit_jax):
    rng = np.random.default_rng(5)
    W_Q, W_K, _, _, G_M = instance(rng, (), 18, 5, cond=4.0)
    R = np.diag([1.0, 2.0, 0.5, 3.0, 1.0])
    W_Q2, W_K2 = W_Q @ R, W_K @ np.linalg.inv(R).T
    errs = []
    for lam in (1e-8, 1e-2, 1.0):
        dQ, _ = halfsplit_jax.halfsplit_qk(W_Q, W_K, G_M @ W_K, G_M.T @ W_Q, eps=0.1, damping=lam, msign="svd")
        dQ2, _ = halfsplit_jax.halfsplit_qk(W_Q2, W_K2, G_M @ W_K2, G_M.T @ W_Q2, eps=0.1, damping=lam,
                                            msign="svd")
        errs.append(rel(dQ2, np.asarray(dQ) @ R))
    assert errs[0] < 1e-6 < errs[1] < errs[2]


@pytest.mark.parametrize("method", ["svd", "newton_schulz"])
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32, jnp.bfloat16])
def test_rank_deficient_partner_and_zero_gradient_are_finite_with_damping(halfsplit_jax, method, dtype):
    rng = np.random.default_rng(6)
    W_Q = with_singular_values(rng, 16, 4, [1.0, 0.5, 0.0, 0.0][:2])  # rank 2 of 4
    W_K = np.zeros((16, 4))  # rank 0
    G_Q = rng.standard_normal((16, 4))
    G_K = np.zeros((16, 4))
    args = [jnp.asarray(x, dtype) for x in (W_Q, W_K, G_Q, G_K)]
    dQ, dK = halfsplit_jax.halfsplit_qk(*args, eps=0.1, damping=1e-3, msign=method)
    assert dQ.dtype == dtype and dK.dtype == dtype
    assert bool(jnp.all(jnp.isfinite(dQ))) and bool(jnp.all(jnp.isfinite(dK)))
    assert float(jnp.max(jnp.abs(dK))) == 0.0  # zero gradient, zero step
    (dV,) = (halfsplit_jax.halfsplit_v(args[1], jnp.zeros((4, 16), dtype), eps=0.1, damping=1e-3,
                                       msign=method),)
    assert bool(jnp.all(dV == 0))


@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 2e-4), (jnp.bfloat16, 6e-2)])
def test_lower_precision_close_to_float64(halfsplit_jax, dtype, tol):
    rng = np.random.default_rng(7)
    W_Q, W_K, G_Q, G_K, _ = instance(rng, (2, 3), 32, 8, cond=3.0)
    ref = hand.halfsplit(W_Q, W_K, G_Q, G_K, 0.1)
    out = halfsplit_jax.halfsplit_qk(*(jnp.asarray(x, dtype) for x in (W_Q, W_K, G_Q, G_K)), eps=0.1,
                                     msign="svd")
    assert out[0].dtype == dtype
    assert rel(np.asarray(out[0], np.float64), ref[0]) < tol


def test_newton_schulz_lands_in_the_schedule_band(halfsplit_jax):
    """The whitened gradient's singular values map to p∘…∘p(σ/‖A‖_F): inside the promised band."""
    rng = np.random.default_rng(8)
    sched = coeffsearch.get("polar-express-5").as_floats()
    W_Q, W_K, G_Q, G_K, _ = instance(rng, (3,), 40, 8, cond=5.0)
    dQ_ns, _ = halfsplit_jax.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=2.0, msign="newton_schulz", schedule=sched)
    CKi = hand.inv_sqrt(np.swapaxes(W_K, -1, -2) @ W_K)
    A = G_Q @ CKi
    S = np.asarray(dQ_ns) @ np.linalg.inv(CKi) / -1.0  # = msign_NS(A) since eps/2 = 1
    for h in range(3):
        sig = np.linalg.svd(A[h], compute_uv=False)
        x = sig / np.linalg.norm(A[h])  # exact Frobenius normalization (after max-abs scaling)
        for step in sched:
            x = sum(c * x ** (2 * k + 1) for k, c in enumerate(step))
        got = np.linalg.svd(S[h], compute_uv=False)
        assert np.allclose(np.sort(got), np.sort(x), rtol=1e-9, atol=1e-12)
        lo = (np.linalg.svd(A[h], compute_uv=False).min() / np.linalg.norm(A[h]))
        grid = np.geomspace(lo, 1.0, 20001)
        for step in sched:
            grid = sum(c * grid ** (2 * k + 1) for k, c in enumerate(step))
        assert grid.min() - 1e-12 <= got.min() and got.max() <= grid.max() + 1e-12


def test_numpy_reference_agrees_with_jax(halfsplit_jax, halfsplit_numpy):
    rng = np.random.default_rng(9)
    W_Q, W_K, G_Q, G_K, _ = instance(rng, (2,), 12, 3)
    a = halfsplit_jax.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=0.5, damping=0.01, msign="svd")
    b = halfsplit_numpy.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=0.5, damping=0.01)
    assert rel(a[0], b[0]) < 1e-12 and rel(a[1], b[1]) < 1e-12
    assert rel(halfsplit_numpy.isotropic_qk(W_Q, W_K, G_Q, G_K, eps=0.5)[0],
               hand.isotropic(W_K, G_Q, 0.5)) < 1e-12


def test_isotropic_is_exact_for_isotropic_partner(halfsplit_jax):
    rng = np.random.default_rng(10)
    W_K = 1.7 * random_orthonormal(rng, 20, 5)
    W_Q = rng.standard_normal((20, 5))
    G_Q, G_K = rng.standard_normal((20, 5)), rng.standard_normal((20, 5))
    exact = halfsplit_jax.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=0.2, msign="svd")[0]
    iso = halfsplit_jax.isotropic_qk(W_Q, W_K, G_Q, G_K, eps=0.2, msign="svd")[0]
    assert rel(iso, exact) < 1e-12 and rel(iso, hand.isotropic(W_K, G_Q, 0.2)) < 1e-12


BAD_CALLS = [
    (dict(W_K=np.zeros((5, 3, 2))), "W_K has leading (batch) shape"),
    (dict(G_Q=np.zeros((3, 8, 2))), "G_Q has d_h = 2"),
    (dict(W_Q=np.zeros(8)), "W_Q must have shape"),
    (dict(W_Q=np.zeros((3, 2, 8)), W_K=np.zeros((3, 2, 8)), G_Q=np.zeros((3, 2, 8)), G_K=np.zeros((3, 2, 8))),
     "are the weights transposed"),
    (dict(W_Q=np.full((3, 8, 3), np.nan)), "W_Q contains NaN or Inf"),
    (dict(eps=-1.0), "eps must be finite and >= 0"),
    (dict(damping=float("nan")), "damping must be finite and >= 0"),
    (dict(msign="qr"), "msign must be one of"),
    (dict(schedule=((1.5, "x"),)), "each schedule step"),
    (dict(schedule="muon"), "schedule must be a non-empty tuple"),
    (dict(schedule=()), "schedule must be a non-empty tuple"),
    (dict(G_K=np.zeros((3, 8, 3), np.float32)), "cast all inputs to one dtype"),
]


@pytest.mark.parametrize("override,message", BAD_CALLS)
def test_bad_input_names_the_argument(halfsplit_jax, override, message):
    args = dict(W_Q=np.ones((3, 8, 3)), W_K=np.ones((3, 8, 3)), G_Q=np.ones((3, 8, 3)), G_K=np.ones((3, 8, 3)),
                eps=0.1, damping=0.0, msign="newton_schulz")
    args.update(override)
    pos = [args.pop(k) for k in ("W_Q", "W_K", "G_Q", "G_K")]
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        halfsplit_jax.halfsplit_qk(*pos, **args)


def test_emitted_module_is_deterministic_clean_and_imports_only_its_runtime(halfsplit_source, tmp_path):
    import subprocess
    import sys

    from derivations import halfsplit
    from derivations.cli import render
    assert render(halfsplit.rule_module(), "jax") == halfsplit_source
    tree = ast.parse(halfsplit_source)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"jax", "jax.numpy", "functools", "foundation.compute.jax_runtime"}  # standalone: see
    # tests/printing/test_standalone_emission.py
    for name in ("halfsplit.query", "halfsplit.key", "Lemma 1", "Lemma 2", "Lemma 4", "polar-express-5"):
        assert name in halfsplit_source
    path = tmp_path / "halfsplit_jax.py"
    path.write_text(halfsplit_source)
    ruff = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", str(path)],
                          capture_output=True, text=True, check=False)
    assert ruff.returncode == 0, ruff.stdout


def test_runs_under_outer_jit_and_vmap(halfsplit_jax):
    import jax
    rng = np.random.default_rng(11)
    W_Q, W_K, G_Q, G_K, _ = instance(rng, (2,), 12, 3)
    step = jax.jit(lambda *a: halfsplit_jax.halfsplit_qk(*a, eps=0.1, msign="svd"))
    out = step(W_Q, W_K, G_Q, G_K)
    ref = hand.halfsplit(W_Q, W_K, G_Q, G_K, 0.1)
    assert rel(out[0], ref[0]) < 1e-10
    vm = jax.vmap(lambda *a: halfsplit_jax.halfsplit_qk(*a, eps=0.1, msign="svd", check_finite=False))
    assert rel(vm(W_Q, W_K, G_Q, G_K)[1], ref[1]) < 1e-10
