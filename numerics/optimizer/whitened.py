"""The Shampoo family as an optax optimizer: whitened steepest descent on every matrix, vectors by AdamW.

Each matrix ``W`` (``m × n``) keeps Shampoo's preconditioners (Gupta, Koren and Singer, "Shampoo: Preconditioned
Stochastic Tensor Optimization", ICML 2018, Algorithm 1)::

    L_t = L_{t-1} + G_t G_tᵀ,   R_t = R_{t-1} + G_tᵀ G_t,   L_0 = δ I_m,   R_0 = δ I_n

(``beta2 < 1``: the exponential moving averages ``L_t = β₂ L_{t-1} + (1 − β₂) G_t G_tᵀ`` of distributed Shampoo,
Anil et al. 2020, from the same ``δ I``), and steps along the rule derived in ``derivations.shampoo`` from the
plain problem ``min ⟨G, ΔW⟩`` under the whitened norm:

* ``sides="two"``: ``‖L^{1/4} ΔW R^{1/4}‖_op ≤ η`` gives ``ΔW = −η L^{-1/4} msign(L^{-1/4} M R^{-1/4}) R^{-1/4}``;
* ``sides="one"``: ``‖L^{1/2} ΔW‖_op ≤ η`` gives ``ΔW = −η L^{-1/2} msign(L^{-1/2} M)`` (no ``R`` is kept).

``M`` is the momentum of the gradients (``momentum = 0``, the published algorithm: ``M = G_t``). The inverse
roots are computed by ``root``: ``"eigh"`` (an eigendecomposition) or ``"newton_schulz"`` (the certified
matmul-only coupled iteration of ``coeffsearch``). The activation-aware rule of ``derivations.shampoo`` needs the
layer's inputs, which an optimizer does not see; it is emitted, not run here.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from numerics.emitted import shampoo as _shampoo

SIDES = ("two", "one")
ROOTS = ("eigh", "newton_schulz")


class WhitenedState(NamedTuple):
    """Shampoo's preconditioners of every matrix (a scalar placeholder for the rest) and the momentum."""

    count: jax.Array
    left: Any
    right: Any
    mu: Any


def _is_matrix(x: Any) -> bool:
    return getattr(x, "ndim", 0) == 2


def _check(sides: Any, root: Any, beta2: Any, precondition_eps: Any, momentum: Any) -> None:
    if sides not in SIDES:
        raise ValueError(f"whitened_descent: sides must be one of {SIDES}, got {sides!r}")
    if root not in ROOTS:
        raise ValueError(f"whitened_descent: root must be one of {ROOTS}, got {root!r}")
    if beta2 is not None and not 0.0 < float(beta2) < 1.0:
        raise ValueError(f"whitened_descent: beta2 must be None (Shampoo's sum) or in (0, 1), got {beta2!r}")
    if not float(precondition_eps) > 0.0:
        raise ValueError(f"whitened_descent: precondition_eps must be > 0, got {precondition_eps!r}")
    if not 0.0 <= float(momentum) < 1.0:
        raise ValueError(f"whitened_descent: momentum must be in [0, 1), got {momentum!r}")


def accumulate(old: jax.Array, outer: jax.Array, beta2: float | None) -> jax.Array:
    """Shampoo's ``L ← L + G Gᵀ`` (``beta2=None``) or the moving average ``β₂ L + (1 − β₂) G Gᵀ``."""
    return old + outer if beta2 is None else beta2 * old + (1.0 - beta2) * outer


def scale_by_whitened_descent(sides: Literal["two", "one"] = "two", *, beta2: float | None = None,
                              precondition_eps: float = 1e-6, momentum: float = 0.0,
                              root: Literal["eigh", "newton_schulz"] = "eigh",
                              msign: Literal["newton_schulz", "svd"] = "newton_schulz") -> optax.GradientTransformation:
    """The direction of whitened descent on every 2-D leaf (before the learning rate): the emitted rule's step at
    ``ε = 1`` with its sign flipped, so that ``optax.scale_by_learning_rate(η)`` makes the step ``−η ·`` direction
    with ``‖L^{1/4} ΔW R^{1/4}‖_op = η`` (``‖L^{1/2} ΔW‖_op = η`` one-sided). Other leaves pass through."""
    _check(sides, root, beta2, precondition_eps, momentum)

    def eye_like(x: jax.Array, side: int | None) -> jax.Array:
        """``δI`` on ``side`` of a matrix; a scalar placeholder for the rest (and for no side)."""
        if side is None or not _is_matrix(x):
            return jnp.zeros([], jnp.float32)
        return precondition_eps * jnp.eye(x.shape[side], dtype=jnp.promote_types(x.dtype, jnp.float32))

    def init_fn(params):
        left = jax.tree.map(lambda x: eye_like(x, 0), params)
        right = jax.tree.map(lambda x: eye_like(x, 1 if sides == "two" else None), params)
        return WhitenedState(jnp.zeros([], jnp.int32), left, right, jax.tree.map(jnp.zeros_like, params))

    def direction(g, m, lm, rm):
        if not _is_matrix(g):
            return g, lm, rm
        g32 = g.astype(lm.dtype)
        lm = accumulate(lm, g32 @ g32.T, beta2)
        kw = {"eps": 1.0, "msign": msign, "root": root, "check_finite": False}
        if sides == "two":
            rm = accumulate(rm, g32.T @ g32, beta2)
            step = _shampoo.shampoo_two_sided(m.astype(lm.dtype), lm, rm, **kw)
        else:
            step = _shampoo.shampoo_one_sided(m.astype(lm.dtype), lm, **kw)
        return (-step).astype(g.dtype), lm, rm

    def update_fn(updates, state, params=None):
        del params
        mu = jax.tree.map(lambda g, old: momentum * old + g, updates, state.mu)
        flat_g, tree = jax.tree.flatten(updates)
        flat = zip(flat_g, tree.flatten_up_to(mu), tree.flatten_up_to(state.left), tree.flatten_up_to(state.right),
                   strict=True)
        out = [direction(*leaf) for leaf in flat]
        new, left, right = (tree.unflatten([o[i] for o in out]) for i in range(3))
        return new, WhitenedState(optax.safe_increment(state.count), left, right, mu)

    return optax.GradientTransformation(init_fn, update_fn)


def whitened_descent(learning_rate: optax.ScalarOrSchedule, *, sides: Literal["two", "one"] = "two",
                     beta2: float | None = None, precondition_eps: float = 1e-6, momentum: float = 0.0,
                     weight_decay: float = 0.0, root: Literal["eigh", "newton_schulz"] = "eigh",
                     msign: Literal["newton_schulz", "svd"] = "newton_schulz",
                     adam_b1: float = 0.9, adam_b2: float = 0.999) -> optax.GradientTransformation:
    """Whitened descent (``derivations.shampoo``'s rules) on every 2-D parameter and ``optax.adamw`` on the rest,
    both at ``learning_rate``, with decoupled ``weight_decay``."""
    white = optax.chain(scale_by_whitened_descent(sides, beta2=beta2, precondition_eps=precondition_eps,
                                                  momentum=momentum, root=root, msign=msign),
                        optax.add_decayed_weights(weight_decay), optax.scale_by_learning_rate(learning_rate))
    adam = optax.adamw(learning_rate, b1=adam_b1, b2=adam_b2, weight_decay=weight_decay)
    return optax.multi_transform({"white": white, "adam": adam},
                                 lambda params: jax.tree.map(lambda x: "white" if _is_matrix(x) else "adam", params))
