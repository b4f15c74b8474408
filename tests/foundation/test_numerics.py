"""Compute routines shared by the emitted code and the checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import coeffsearch
from foundation.compute import numpy_routines as NK
from foundation.compute.jax_damped_gram import gram_eigh, psd_power
from foundation.compute.jax_msign import msign_svd, newton_schulz
from foundation.compute.reference import MpmathBackend, NumpyBackend
from foundation.compute.spectra import log_spaced_spectrum, random_orthonormal, with_singular_values

#: jitted once per shape and schedule length (the coefficients are data); eagerly, every primitive of the unrolled
#: iteration was compiled for every new shape
NEWTON_SCHULZ = jax.jit(newton_schulz)


# Shapes from a small set (single row or column, square, wide, tall), so that the 30 examples share their
# compilations; rank, spectrum, seed and schedule stay drawn.
@settings(max_examples=30, deadline=None)
@given(rows=st.sampled_from([1, 2, 5, 12]), cols=st.sampled_from([1, 5, 12]), rank=st.integers(0, 12),
       seed=st.integers(0, 2**31), name=st.sampled_from(["muon", "polar-express-5", "you", "cesista", "quintic"]))
def test_newton_schulz_maps_each_singular_value_by_the_composed_polynomial(rows, cols, rank, seed, name):
    rng = np.random.default_rng(seed)
    rank = min(rank, rows, cols)
    sigma = log_spaced_spectrum(rng, rank, 50.0) if rank else np.zeros(0)
    a = with_singular_values(rng, rows, cols, sigma) if rank else np.zeros((rows, cols))
    sched = coeffsearch.get(name).as_floats()
    out = np.asarray(NEWTON_SCHULZ(jnp.asarray(a), sched))
    x = sigma / np.linalg.norm(a) if rank else sigma  # normalized by max|a_ij|, then exactly by ‖·‖_F
    for step in sched:
        x = sum(c * x ** (2 * k + 1) for k, c in enumerate(step))
    got = np.linalg.svd(out, compute_uv=False)[:rank] if rank else np.zeros(0)
    assert np.allclose(np.sort(got), np.sort(x), rtol=1e-8, atol=1e-10)
    if rank < min(rows, cols):  # zero singular values stay zero (partial isometry)
        assert np.linalg.matrix_rank(out, tol=1e-8) == rank


def test_msign_svd_is_a_partial_isometry():
    rng = np.random.default_rng(0)
    a = with_singular_values(rng, 9, 6, [3.0, 1.0, 1e-3])
    for s in (np.asarray(msign_svd(jnp.asarray(a))), NK.msign_svd(a)):
        assert np.allclose(np.linalg.svd(s, compute_uv=False), [1, 1, 1, 0, 0, 0], atol=1e-10)
        assert np.allclose(s @ s.T @ s, s)


def test_psd_power_inverse_root_and_floor():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((10, 4))
    ci = np.asarray(psd_power(gram_eigh(jnp.asarray(w), 0.0, "right"), -0.5, jnp.float64))
    assert np.allclose(ci @ (w.T @ w) @ ci, np.eye(4))
    zero = np.asarray(psd_power(gram_eigh(jnp.zeros((10, 4)), 0.0, "right"), -0.5, jnp.float64))
    assert np.all(zero == 0)  # pseudo-inverse: a zero partner has a zero inverse root
    left = np.asarray(psd_power(gram_eigh(jnp.asarray(w.T), 0.5, "left"), 0.5, jnp.float64))
    assert np.allclose(left @ left, w.T @ w + 0.5 * np.eye(4))


def test_mpmath_backend_agrees_with_float64():
    import mpmath
    rng = np.random.default_rng(2)
    a = rng.standard_normal((5, 3))
    with mpmath.workdps(40):
        mp = MpmathBackend(40)
        m = mp.asarray(a)
        assert float(mp.op_norm(m)) == pytest.approx(np.linalg.norm(a, 2), rel=1e-14)
        assert float(mp.nuclear_norm(m)) == pytest.approx(np.linalg.norm(a, "nuc"), rel=1e-14)
        s = mp.msign(m)
        assert np.allclose(np.array(s.tolist(), dtype=float), NumpyBackend.msign(a), atol=1e-14)


def test_spectra_helpers():
    rng = np.random.default_rng(3)
    q = random_orthonormal(rng, 7, 3)
    assert np.allclose(q.T @ q, np.eye(3))
    s = log_spaced_spectrum(rng, 5, 100.0)
    assert s.max() == 1.0 and s.min() == pytest.approx(0.01)
    with pytest.raises(ValueError):
        with_singular_values(rng, 3, 2, [1, 1, 1])


def test_registry():
    assert coeffsearch.get("muon").as_floats()[0] == (3.4445, -4.775, 2.0315)
    assert coeffsearch.get("you").as_floats()[0][0] == 3955 / 1024
    with pytest.raises(KeyError, match="unknown schedule"):
        coeffsearch.get("adam")
