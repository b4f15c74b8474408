"""The inverse p-th root routines, JAX and PyTorch: against eigh, batched, scale-free, non-finite input refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coeffsearch import inverse_root_registry
from foundation.compute import jax_inverse_root as J
from foundation.compute import jax_runtime
from foundation.compute.jax_inverse_root import inverse_root, inverse_root_eigh, matrix_power, root_scale

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

SCHEDULES = {p: np.asarray(inverse_root_registry.get("newton_schulz", p).as_floats()) for p in (2, 4)}
root = jax.jit(inverse_root, static_argnums=1)  # one compilation per (shape, p)
root_eigh = jax.jit(inverse_root_eigh, static_argnums=1)


def spd_batch(shape=(2, 3), n=6, seed=0, scale_exponents=(-30, 30)):
    """SPD matrices (batch ``shape``) with Frobenius-normalized eigenvalues in ``[1e-3, 1]``, at random scales."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((*shape, n, n)))
    lam = np.exp(rng.uniform(np.log(1e-2), 0, (*shape, n)))
    x = (q * lam[..., None, :]) @ np.swapaxes(q, -1, -2)
    x = x * 2.0 ** rng.integers(*scale_exponents, (*shape, 1, 1))
    return (x + np.swapaxes(x, -1, -2)) / 2


def eigh_root(x, p):
    e, v = np.linalg.eigh(x)
    return (v * e[..., None, :] ** (-1 / p)) @ np.swapaxes(v, -1, -2)


def relative(got, want):
    """``‖got − want‖₂ / ‖want‖₂`` per matrix."""
    return np.linalg.norm(got - want, 2, axis=(-2, -1)) / np.linalg.norm(want, 2, axis=(-2, -1))


@pytest.mark.parametrize("p", [2, 4])
def test_jax_matches_eigh_batched_at_any_scale(p):
    x = spd_batch()
    want = eigh_root(x, p)
    got = np.asarray(root(jnp.asarray(x), p, jnp.asarray(SCHEDULES[p])))
    # the certified root errors: 3.2e-9 (p = 2), 1.03e-7 (p = 4)
    assert got.shape == x.shape and relative(got, want).max() < 2e-7
    assert relative(np.asarray(root_eigh(jnp.asarray(x), p)), want).max() < 1e-12


def test_jax_batch_equals_one_matrix_at_a_time():
    x = spd_batch((3,), n=5, seed=1)
    whole = np.asarray(root(jnp.asarray(x), 2, jnp.asarray(SCHEDULES[2])))
    single = jax.jit(inverse_root, static_argnums=1)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(single(jnp.asarray(x[i]), 2, jnp.asarray(SCHEDULES[2]))), whole[i],
                                   rtol=1e-12, atol=0)


def test_scale_is_exact_powers_of_two_and_matrix_power():
    x = jnp.asarray(spd_batch((1,), n=4, seed=2)[0]) * 2.0**-50
    a, j = jax.jit(root_scale, static_argnums=1)(x, 4)
    np.testing.assert_array_equal(np.asarray(a) * 2.0 ** (-4 * int(j[0, 0])), np.asarray(x))
    t = jnp.asarray(spd_batch((1,), n=4, seed=3)[0])
    np.testing.assert_allclose(np.asarray(matrix_power(t, 4)), np.linalg.matrix_power(np.asarray(t), 4), rtol=1e-12)


def test_a_planted_wrong_coefficient_shows_against_eigh():
    """The comparison with eigh can fail: the last step's c_0 changed in its fourth digit. (An early step's error
    would be corrected: ``M_k = Y_k^p M_0`` holds whatever the factors, so later steps that drive ``M`` to ``I``
    still give the root.)"""
    x = spd_batch((2,), n=6, seed=4)
    bad = SCHEDULES[2].copy()
    bad[-1, 0] += 1e-3
    assert relative(np.asarray(root(jnp.asarray(x), 2, jnp.asarray(bad))), eigh_root(x, 2)).min() > 5e-4


def test_non_finite_input_refused_and_nan_under_jit():
    x = np.eye(3)
    x[0, 1] = np.nan
    with pytest.raises(ValueError, match="inverse_root: x contains NaN or Inf"):
        inverse_root(jnp.asarray(x), 2, SCHEDULES[2])
    with pytest.raises(ValueError, match="inverse_root_eigh: x contains NaN or Inf"):
        inverse_root_eigh(jnp.asarray(x), 2)
    assert np.isnan(np.asarray(jax.jit(inverse_root, static_argnums=1)(jnp.asarray(x), 2, SCHEDULES[2]))).all()


@pytest.mark.parametrize("x,p,match", [
    (np.ones((3, 4)), 2, "square matrix"),
    (np.eye(3), 0, "p must be a whole number"),
    (np.eye(3), 2.0, "p must be a whole number"),
    (np.eye(3, dtype=np.int32), 2, "real floating point"),
])
def test_bad_arguments_one_clear_error(x, p, match):
    with pytest.raises((ValueError, TypeError), match=match):
        inverse_root(jnp.asarray(x), p, SCHEDULES[2])


def test_both_runtimes_export_the_routines():
    assert {"inverse_root", "inverse_root_eigh", "root_scale", "matrix_power"} <= set(jax_runtime.__all__)
    assert jax_runtime.inverse_root is inverse_root


def test_torch_mirrors_jax():
    torch = pytest.importorskip("torch")
    from foundation.compute import torch_inverse_root, torch_runtime

    assert torch_runtime.inverse_root is torch_inverse_root.inverse_root
    x = spd_batch((2,), n=6, seed=5)
    for p in (2, 4):
        want = np.asarray(root(jnp.asarray(x), p, jnp.asarray(SCHEDULES[p])))
        got = torch_runtime.inverse_root(torch.as_tensor(x), p, tuple(map(tuple, SCHEDULES[p]))).numpy()
        assert relative(got, want).max() < 1e-12
        assert relative(torch_runtime.inverse_root_eigh(torch.as_tensor(x), p).numpy(), eigh_root(x, p)).max() < 1e-12
    bf = torch_runtime.inverse_root(torch.as_tensor(x, dtype=torch.bfloat16), 2, tuple(map(tuple, SCHEDULES[2])))
    assert bf.dtype == torch.bfloat16
    bad = torch.as_tensor(x).clone()
    bad[0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="inverse_root: x contains NaN or Inf"):
        torch_runtime.inverse_root(bad, 2, tuple(map(tuple, SCHEDULES[2])))


def _spd_power_errors(power):
    """Relative errors of ``power`` (``X^p`` for p = −1/4, 1/2, 1/3) at the ends of float32's range, against eigh."""
    x = spd_batch(shape=(2,), scale_exponents=(0, 1))[0]
    out = []
    for scale in (-124, 0, 124):
        for p in (-0.25, 0.5, 1 / 3):
            e, v = np.linalg.eigh(x)
            want = (v * e ** p) @ v.T * 2.0 ** (scale * p)
            got = np.asarray(power((x * 2.0 ** scale).astype(np.float32), p), np.float64)
            out.append(float(relative(got, want)))
    return out


def test_spd_power_is_right_at_any_scale(monkeypatch):
    """``spd_power`` scales by exact powers of two before its eigh; planted: without that, a float32 matrix near the
    top of the range overflows when it is symmetrized and one near the bottom loses its eigenvalues."""
    assert max(_spd_power_errors(J.spd_power)) < 1e-5
    monkeypatch.setattr(J, "root_scale", lambda x, q: (x.astype(jnp.float32), jnp.zeros((1, 1), jnp.int32)))
    monkeypatch.setattr(J, "pow2_normalize", lambda x: (x.astype(jnp.float32), jnp.zeros((1, 1), jnp.int32)))
    assert not max(_spd_power_errors(J.spd_power)) < 1e-5  # NaN or a large error
