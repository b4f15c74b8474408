"""The Shampoo family in the optax optimizer: Shampoo's accumulation, the derived step, training a small model.

Each step is compared with the published algorithm written out here in NumPy (``L_t = δI + Σ G Gᵀ``,
``R_t = δI + Σ GᵀG``, then the derived whitened step); a planted accumulation that forgets the past, and one that
averages where Shampoo sums, must fail that comparison.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from numerics.optimizer import whitened as W
from tests.hand_formulas import msign, spd_power

DELTA = 1e-3


def _reference(grads, sides):
    """Shampoo's preconditioners after ``grads`` and the derived direction at the last gradient (no momentum)."""
    m, n = grads[0].shape
    left, right = DELTA * np.eye(m), DELTA * np.eye(n)
    for g in grads:
        left, right = left + g @ g.T, right + g.T @ g
    g = grads[-1]
    if sides == "two":
        lq, rq = spd_power(left, -0.25), spd_power(right, -0.25)
        return lq @ msign(lq @ g @ rq) @ rq
    lh = spd_power(left, -0.5)
    return lh @ msign(lh @ g)


def _directions(grads, sides, **options):
    tx = W.scale_by_whitened_descent(sides, precondition_eps=DELTA, msign="svd", **options)
    params = {"w": jnp.zeros(grads[0].shape, jnp.float64)}
    state, update = tx.init(params), jax.jit(tx.update)  # one compile for the three steps
    for g in grads:
        out, state = update({"w": jnp.asarray(g)}, state, params)
    return np.asarray(out["w"])


@pytest.fixture(scope="module")
def grads():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((6, 4)) for _ in range(3)]


@pytest.mark.parametrize("sides", W.SIDES)
def test_steps_follow_shampoos_accumulation_and_the_derived_rule(grads, sides):
    got = _directions(grads, sides)  # float64: the suite runs JAX in x64 mode
    want = _reference(grads, sides)
    assert np.abs(got - want).max() <= 1e-9 * np.abs(want).max()


def test_a_wrong_accumulation_is_caught(grads, monkeypatch):
    """Planted: preconditioners that keep only the last gradient, then an average where Shampoo sums."""
    want = _reference(grads, "two")
    for wrong in (lambda old, outer, beta2: DELTA * jnp.eye(outer.shape[0]) + outer,
                  lambda old, outer, beta2: 0.5 * old + 0.5 * outer):
        monkeypatch.setattr(W, "accumulate", wrong)
        got = _directions(grads, "two")
        assert np.abs(got - want).max() > 1e-3 * np.abs(want).max()


def test_newton_schulz_roots_agree_with_eigh(grads):
    eigh = _directions(grads, "two")
    iterated = _directions(grads, "two", root="newton_schulz")
    assert np.abs(iterated - eigh).max() <= 1e-4 * np.abs(eigh).max()


def _model_loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


def test_a_small_model_trains():
    """Two-sided, inverse roots by the certified iteration (the steps above check both sides with eigh)."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((64, 8)), jnp.float32)
    y = jnp.asarray(np.sin(np.asarray(x) @ rng.standard_normal((8, 2))), jnp.float32)
    params = {"w1": jnp.asarray(rng.standard_normal((8, 16)) / 3, jnp.float32), "b1": jnp.zeros(16, jnp.float32),
              "w2": jnp.asarray(rng.standard_normal((16, 2)) / 4, jnp.float32), "b2": jnp.zeros(2, jnp.float32)}
    tx = W.whitened_descent(0.05, sides="two", root="newton_schulz", momentum=0.5)
    state = tx.init(params)

    @jax.jit
    def step(params, state):
        loss, g = jax.value_and_grad(_model_loss)(params, x, y)
        updates, state = tx.update(g, state, params)
        return optax.apply_updates(params, updates), state, loss

    first = None
    for _ in range(40):
        params, state, loss = step(params, state)
        first = loss if first is None else first
    final = _model_loss(params, x, y)
    assert np.isfinite(final) and final < 0.5 * first


def test_vectors_take_adamw():
    params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
    grads = {"w": jnp.full((3, 2), 0.5), "b": jnp.asarray([1.0, -2.0])}
    ours = W.whitened_descent(0.1)
    updates, _ = jax.jit(ours.update)(grads, ours.init(params), params)
    adam = optax.adamw(0.1, weight_decay=0.0)
    expected, _ = adam.update({"b": grads["b"]}, adam.init({"b": params["b"]}), {"b": params["b"]})
    assert np.allclose(updates["b"], expected["b"])


@pytest.mark.parametrize(("option", "value", "message"), [
    ("sides", "three", "sides must be one of"), ("root", "cholesky", "root must be one of"),
    ("beta2", 1.5, "beta2 must be None"), ("precondition_eps", 0.0, "precondition_eps must be > 0"),
    ("momentum", 1.0, "momentum must be in"),
])
def test_bad_options_are_refused_in_one_line(option, value, message):
    with pytest.raises(ValueError, match=message):
        W.whitened_descent(0.1, **{option: value})
