"""The optax transformations of Compositional Muon: the direction, the gauge step and the non-finite guard.

:func:`scale_by_compositional_muon` forms the momentum ``m ← β m + (1 − β) g`` (bias-corrected, with
Nesterov's look-ahead, as ``optax.contrib.scale_by_muon``), optionally projects each pair's momentum
onto the horizontal space of its gauge (:func:`_project_pair`), and returns the direction: the
named pair rule of :mod:`numerics.optimizer.rules` at ``ε = 2`` with the sign flipped, and
``√max(1, fan_out/fan_in) msign(m)`` for every other matrix. :func:`rebalance_pairs` moves each pair
along its gauge after the step (``u ← balance(W + u) − W``). :func:`check_finite_gradients` refuses
NaN/Inf gradients and :func:`skip_nonfinite_updates` keeps a NaN/Inf update from the parameters.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from numerics.emitted import gauge as _gauge
from numerics.emitted import halfsplit as _halfsplit
from numerics.gauge_balance import balance

from .options import (
    GAUGES,
    GRAM_ROOTS,
    MSIGN_METHODS,
    NONFINITE_POLICIES,
    DirectionOptions,
    check_damping_range,
    check_schedule_bounded,
    real_scalar,
    resolve_schedule,
    schedule_for,
)
from .pairs import Pairs, grouped_pair, named_leaves, pair_declaration, plan_pairs, ungrouped_pair
from .rules import OV_RULES, QK_RULES, ov_direction, qk_direction


class CompositionalMuonState(NamedTuple):
    """``count``: steps taken; ``mu``: momentum of every matrix the transformation updates."""

    count: jax.Array
    mu: Any


def check_options(qk_rule: str, ov_rule: str, gauge: str, gram_roots: str, msign: str) -> None:
    """Refuse an unknown rule, gauge, Gram-root method or ``msign`` method, listing the choices."""
    if qk_rule not in QK_RULES:
        raise ValueError(f"compositional_muon: qk_rule must be one of {QK_RULES}, got {qk_rule!r}")
    if ov_rule not in OV_RULES:
        raise ValueError(f"compositional_muon: ov_rule must be one of {OV_RULES}, got {ov_rule!r}")
    if gauge not in GAUGES:
        raise ValueError(f"compositional_muon: gauge must be one of {GAUGES}, got {gauge!r}")
    if gram_roots not in GRAM_ROOTS:
        raise ValueError(f"compositional_muon: gram_roots must be one of {GRAM_ROOTS}, got {gram_roots!r}")
    if not isinstance(msign, str) or msign not in MSIGN_METHODS:
        raise ValueError(f"compositional_muon: msign must be one of {MSIGN_METHODS}, got {msign!r}")


def _project_pair(kind: str, w_a: jax.Array, w_b: jax.Array, m_a: jax.Array, m_b: jax.Array, heads: int,
                  kv_heads: int, head_dim: int, kernels: bool, damping: float) -> tuple[jax.Array, jax.Array]:
    """The momentum of one pair projected onto the horizontal space of its gauge, group by group.

    For shared heads the projection is the emitted single-head projection of the stacked pair
    ``(Q̄_g, K_g)`` with momentum ``(m̄_Q,g, m_K,g)`` (:func:`grouped_pair`). The emitted function takes
    equal row counts, so ``K_g`` and ``m_K,g`` enter zero-padded to ``G·d`` rows: the projection sees
    them only through ``K_gᵀK_g`` and ``m_K,gᵀK_g``, which padding leaves unchanged, and the padded
    rows of the result are ``0 − 0·Xᵀ = 0``.
    """
    bar_w, wk = grouped_pair(kind, w_a, w_b, heads, kv_heads, head_dim, kernels)
    bar_m, mk = grouped_pair(kind, m_a, m_b, heads, kv_heads, head_dim, kernels)
    d = wk.shape[-2]
    pad = [(0, 0)] * (wk.ndim - 2) + [(0, bar_w.shape[-2] - d), (0, 0)]
    hq, hk = _gauge.horizontal_projection(bar_w, jnp.pad(wk, pad), bar_m, jnp.pad(mk, pad), damping=damping,
                                          check_finite=False)
    return ungrouped_pair(kind, hq, hk[..., :d, :], heads, kernels)


def scale_by_compositional_muon(
    pairs: Pairs | None = None,
    ns_coeffs: Any = "polar-express-5",
    ns_steps: int = 5,
    beta: float = 0.95,
    mu_dtype: Any = None,
    *,
    nesterov: bool = True,
    qk_rule: Literal["half_split", "joint", "isotropic", "sylvester"] = "half_split",
    ov_rule: Literal["hybrid"] = "hybrid",
    damping: float = 1e-2,
    gauge: Literal["none", "horizontal_projection", "rebalance"] = "none",
    msign: Literal["newton_schulz", "svd"] = "newton_schulz",
    gram_roots: Literal["eigh"] = "eigh",
) -> optax.GradientTransformation:
    """The direction of Compositional Muon (before weight decay and the learning rate).

    Pairs get the derived rule at budget ``ε = 2`` with the sign flipped, i.e. a direction whose
    halves have operator norm 1; other matrices get ``√max(1, fan_out/fan_in) msign(m)``.
    ``optax.scale_by_learning_rate(η)`` then makes the step ``−η ·`` direction. Expects
    ``update(updates, state, params)`` with ``params``. The direction of each matrix is computed
    and returned in its parameter's dtype (gradients and momentum of another dtype, e.g. float64
    gradients of float32 weights, are cast to it first); the momentum keeps optax's dtype rules.
    Nothing here skips a NaN/Inf direction: :func:`compositional_muon` does (``on_nonfinite``).
    """
    schedule = check_schedule_bounded(resolve_schedule(ns_coeffs, ns_steps))
    check_options(qk_rule, ov_rule, gauge, gram_roots, msign)
    pairs = pair_declaration(pairs)
    damping = real_scalar("damping", damping)
    if qk_rule == "sylvester" and not damping > 0:
        raise ValueError("compositional_muon: qk_rule='sylvester' needs damping > 0 (the regularization "
                         f"weight 2λ of its least-squares problem), got {damping!r}")
    options = DirectionOptions(eps=2.0, damping=damping, msign=msign, schedule=schedule)

    def init_fn(params):
        check_damping_range(plan_pairs(pairs, params), params, damping)  # errors at init, naming the parameter
        mu = jax.tree.map(lambda x: jnp.zeros_like(x, dtype=mu_dtype or x.dtype), params)
        return CompositionalMuonState(count=jnp.zeros([], jnp.int32), mu=mu)

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("compositional_muon: update needs the params: call update(grads, state, params)")
        plan = plan_pairs(pairs, params)
        check_damping_range(plan, params, damping)
        mu = optax.tree.update_moment(updates, state.mu, beta, 1)
        count = optax.safe_increment(state.count)
        p = named_leaves(params)
        if gauge == "horizontal_projection":
            m = named_leaves(mu)
            for pair in plan.pairs:
                a, b = pair.first, pair.second
                ha, hb = _project_pair(pair.kind, p[a], p[b], m[a].astype(p[a].dtype), m[b].astype(p[b].dtype),
                                       pair.heads, pair.kv_heads, pair.head_dim, pair.kernels, damping)
                m[a], m[b] = ha.astype(m[a].dtype), hb.astype(m[b].dtype)
            mu = jax.tree_util.tree_unflatten(jax.tree.structure(mu), [m[k] for k in named_leaves(mu)])
        if nesterov:
            mu_hat = jax.tree.map(lambda m, g: beta * m + (1 - beta) * g,
                                  optax.tree.bias_correction(mu, beta, optax.safe_increment(count)),
                                  optax.tree.bias_correction(updates, beta, count))
        else:
            mu_hat = optax.tree.bias_correction(mu, beta, count)
        g = {k: x.astype(p[k].dtype) for k, x in named_leaves(mu_hat).items()}  # the rules take one dtype
        out = {}
        for pair in plan.pairs:
            a, b = pair.first, pair.second
            if pair.kind == "qk":
                da, db = qk_direction(qk_rule, p[a], p[b], g[a], g[b], pair, options)
            else:
                da, db = ov_direction(ov_rule, p[a], p[b], g[a], g[b], pair, options)
            out[a], out[b] = -da, -db
        for name, x in g.items():
            if name not in out:
                if x.ndim < 2:
                    raise ValueError(f"scale_by_compositional_muon: {name!r} has shape {tuple(x.shape)}, not a "
                                     f"matrix; compositional_muon gives vectors to AdamW, this transformation "
                                     f"takes matrices only")
                fan_in, fan_out = x.shape[-2], x.shape[-1]
                sign = _halfsplit.spectral_sign(x, msign, schedule_for(_halfsplit, schedule))
                out[name] = math.sqrt(max(1.0, fan_out / fan_in)) * sign
        treedef = jax.tree.structure(mu_hat)
        new = jax.tree_util.tree_unflatten(treedef, [out[k].astype(p[k].dtype) for k in g])
        mu = optax.tree.cast(mu, mu_dtype)
        return new, CompositionalMuonState(count=count, mu=mu)

    return optax.GradientTransformation(init_fn, update_fn)


def rebalance_pairs(pairs: Pairs | None) -> optax.GradientTransformation:
    """Final step of ``gauge="rebalance"``: ``u ← balance(W + u) − W`` on every pair.

    Head by head; a shared key (value) head is balanced against its group's stacked query (output)
    heads ``Q̄_g`` (:func:`numerics.optimizer.pairs.grouped_pair`): ``Q̄_gᵀQ̄_g = Σ_{h∈g} W_{Q,h}ᵀW_{Q,h}``
    equals ``K_gᵀK_g`` after the step, and every product ``W_{Q,h} K_gᵀ`` is unchanged.
    """

    pairs = pair_declaration(pairs)

    def update_fn(updates, state, params=None):
        plan = plan_pairs(pairs, params)
        p, u = named_leaves(params), named_leaves(updates)
        for pair in plan.pairs:
            a, b, kind = pair.first, pair.second, pair.kind
            bar_q, k = grouped_pair(kind, p[a] + u[a], p[b] + u[b], pair.heads, pair.kv_heads, pair.head_dim,
                                    pair.kernels)
            bar_q, k = balance(bar_q, k)  # shared heads: balanced with their stacked group
            na, nb = ungrouped_pair(kind, bar_q, k, pair.heads, pair.kernels)
            u[a], u[b] = na - p[a], nb - p[b]
        return jax.tree_util.tree_unflatten(jax.tree.structure(updates), list(u.values())), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


# ---- the non-finite guard -------------------------------------------------------------------
def check_finite_gradients() -> optax.GradientTransformation:
    """Raise ``ValueError`` naming the first parameter whose gradient has a NaN or Inf.

    Eagerly the error is a ``ValueError``; under ``jit`` it is raised from a host callback that runs
    only when a gradient is non-finite (one fused reduction per leaf on the hot path), and JAX
    reports it as a runtime error carrying the same message. Either way no NaN reaches the params.
    """

    def fail(flags, names):
        bad = [n for n, ok in zip(names, flags, strict=False) if not ok]
        raise ValueError(f"compositional_muon.update: the gradient of {bad[0]!r} contains NaN or Inf"
                         + (f" (also {len(bad) - 1} more)" if len(bad) > 1 else ""))

    def update_fn(updates, state, params=None):
        del params
        named = named_leaves(updates)
        _fail_unless_all(_finite_flags(named), tuple(named), fail)
        return updates, state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def _finite_flags(named: dict):
    """One boolean per leaf of ``{name: array}``: every entry finite (one fused reduction per leaf)."""
    return jnp.stack([jnp.all(jnp.isfinite(x)) for x in named.values()]) if named else jnp.ones(0, bool)


def _fail_unless_all(flags, names, fail):
    """Call ``fail(per-leaf bools, names)`` (which raises) unless every flag holds.

    Eagerly at once; under ``jit`` from a host callback inside a ``lax.cond``, so it runs only on
    failure and JAX reports its ``ValueError`` as a runtime error carrying the same message.
    """
    if not isinstance(flags, jax.core.Tracer):
        if not bool(jnp.all(flags)):
            fail([bool(f) for f in flags], names)
        return
    jax.lax.cond(jnp.all(flags), lambda f: None,
                 lambda f: jax.debug.callback(lambda v: fail(list(v), names), f), flags)


class SkipNonFiniteState(NamedTuple):
    """Skipped steps, with the fields of ``optax.ApplyIfFiniteState``.

    ``notfinite_count``: consecutive steps skipped up to now (0 after an applied step);
    ``last_finite``: whether the last step's update was finite, i.e. applied; ``total_notfinite``:
    steps skipped in all.
    """

    notfinite_count: jax.Array
    last_finite: jax.Array
    total_notfinite: jax.Array


def skip_nonfinite_updates(*transforms: optax.GradientTransformation, on_nonfinite: str = "skip",
                           hint: str = "") -> optax.GradientTransformation:
    """``optax.chain(*transforms)`` whose NaN/Inf updates never reach the parameters.

    The chain's final update is checked leaf by leaf (one fused reduction per leaf, under ``jit``
    too). A step with a NaN or Inf anywhere is skipped as a whole, as ``optax.apply_if_finite``
    skips one: every update is zero and every state of the chain stays as it was (momentum,
    counts, schedules), and the step is counted in a :class:`SkipNonFiniteState`, the state's last
    element (so ``state[i]`` is still the state of ``transforms[i]``). Unlike ``apply_if_finite``
    there is no count after which a non-finite update goes through. With ``on_nonfinite="raise"``
    the step is skipped and a ``ValueError`` names the first parameter whose update is NaN/Inf
    (eagerly; under ``jit`` from a host callback that runs only on failure, as
    :func:`check_finite_gradients`); ``hint`` ends that message.
    """
    if on_nonfinite not in NONFINITE_POLICIES:
        raise ValueError(f"compositional_muon: on_nonfinite must be one of {NONFINITE_POLICIES}, got {on_nonfinite!r}")

    def init_fn(params):
        zero = jnp.zeros([], jnp.int32)
        return (*(t.init(params) for t in transforms),
                SkipNonFiniteState(notfinite_count=zero, last_finite=jnp.array(True), total_notfinite=zero))

    def update_fn(updates, state, params=None):
        *inner, guard = state
        new_inner = []
        for t, s in zip(transforms, inner, strict=False):
            updates, s = t.update(updates, s, params)
            new_inner.append(s)
        named = named_leaves(updates)
        flags = _finite_flags(named)
        if on_nonfinite == "raise":
            dtypes = {n: jnp.dtype(x.dtype).name for n, x in named.items()}

            def fail(ok, names):
                bad = [n for n, f in zip(names, ok, strict=False) if not f]
                raise ValueError(f"compositional_muon.update: the update of {bad[0]!r} ({dtypes[bad[0]]}) contains "
                                 f"NaN or Inf" + (f" (also {len(bad) - 1} more)" if len(bad) > 1 else "")
                                 + f"; the step was not applied{hint}")

            _fail_unless_all(flags, tuple(named), fail)
        ok = jnp.all(flags)
        if isinstance(ok, jax.core.Tracer) or not bool(ok):
            updates = jax.tree.map(lambda u: jnp.where(ok, u, jnp.zeros_like(u)), updates)
            new_inner = jax.tree.map(lambda new, old: jnp.where(ok, new, old), tuple(new_inner), tuple(inner))
        guard = SkipNonFiniteState(
            notfinite_count=jnp.where(ok, jnp.zeros([], jnp.int32), optax.safe_increment(guard.notfinite_count)),
            last_finite=ok,
            total_notfinite=jnp.where(ok, guard.total_notfinite, optax.safe_increment(guard.total_notfinite)))
        return updates, (*new_inner, guard)

    return optax.GradientTransformation(init_fn, update_fn)
