"""msign is scale-free, so the routines must not lose a matrix to its scale under ``jit``.

Dividing by ``max|x_ij|`` compiles on the CPU to a multiply by the reciprocal, which is subnormal
(flushed to zero) once ``max|x_ij| > 2**126`` in float32: the output was an all-zero matrix with no
error. The routines now scale by an exact power of two (``pow2_normalize``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coeffsearch.registry import get
from foundation.compute.jax_spectral_sign import spectral_sign

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

SCHEDULE = tuple(tuple(float(c) for c in step) for step in get("polar-express-5").steps)


@pytest.mark.parametrize("method", ["newton_schulz", "gram_newton_schulz", "svd"])
@pytest.mark.parametrize("exponent", [126, 127, -126, -130])
@pytest.mark.parametrize("shape", [(6, 16), (16, 6)])
def test_msign_under_jit_ignores_an_extreme_float32_scale(method, exponent, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x /= np.abs(x).max()  # max entry 1, so every entry times 2**exponent is representable
    f = jax.jit(lambda a: spectral_sign(a, method, SCHEDULE))
    unit = np.asarray(f(jnp.asarray(x)))
    scaled = np.asarray(f(jnp.asarray(np.ldexp(x, exponent))))
    assert np.all(np.isfinite(scaled)), (method, exponent)
    assert np.linalg.norm(unit) > 1  # ‖msign‖_F² = rank = 6: the unit-scale result is not the zero matrix
    # below 2**-126 the entries are subnormal: rounded to 2**-149, about 2e-6 of the largest at -130
    np.testing.assert_allclose(scaled, unit, atol=1e-5 if exponent > -127 else 1e-4)


def test_the_reciprocal_of_a_huge_maximum_is_flushed_under_jit():
    """The mechanism the test above guards against, so it cannot go stale unnoticed: if XLA stops
    flushing, this fails and the reason for exact power-of-two scaling should be re-read."""
    x = jnp.asarray(np.ldexp(np.array([[1.5, 0.5], [0.25, 0.75]], np.float32), 126))
    divided = jax.jit(lambda a: a / jnp.max(jnp.abs(a)))(x)
    assert not np.any(np.asarray(divided)), "XLA no longer flushes 1/max; the power-of-two scaling is still exact"
