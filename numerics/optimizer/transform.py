"""The optax transformations of Compositional Muon: the direction and the gauge step.

:func:`scale_by_compositional_muon` forms the momentum ``m ← β m + (1 − β) g`` (bias-corrected, with
Nesterov's look-ahead, as ``optax.contrib.scale_by_muon``), optionally projects each pair's momentum
onto the horizontal space of its gauge (:func:`_project_pair`), and returns the direction: the
named pair rule of :mod:`numerics.optimizer.rules` at ``ε = 2`` with the sign flipped, and
``√max(1, fan_out/fan_in) msign(m)`` for every other matrix. :func:`rebalance_pairs` moves each pair
along its gauge after the step (``u ← balance(W + u) − W``). :func:`check_finite_gradients` refuses
NaN/Inf gradients and :func:`skip_nonfinite_updates` keeps a NaN/Inf update from the parameters.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax
from optax.contrib import MuonDimensionNumbers

from numerics.emitted import gauge as _gauge
from numerics.emitted import halfsplit as _halfsplit
from numerics.optimizer.gauge_balance import balance

from .batching import (
    STATIC,
    Positions,
    array_key,
    checked_positions,
    largest_stack,
    same_key_batches,
    slot_positions,
    stacked_call,
    unnamed,
)
from .framework_pairs import merged_pair
from .head_axes import head_axes_dimension_numbers
from .nonfinite import fail_unless_all
from .options import (
    GAUGES,
    GRAM_ROOTS,
    MSIGN_METHODS,
    DirectionOptions,
    check_damping_range,
    check_gradients_match,
    check_preconditioning,
    check_schedule_bounded,
    damping_ok,
    flag,
    momentum_dtype,
    real_scalar,
    resolve_schedule,
    schedule_for,
    shown_path,
)
from .pairs import Pairs, Plan, grouped_pair, named_leaves, pair_declaration, path_name, plan_pairs, ungrouped_pair
from .rules import LORA_RULES, OV_RULES, QK_RULES, group_direction, ov_direction, qk_direction


class CompositionalMuonState(NamedTuple):
    """``count``: steps taken; ``mu``: momentum of every matrix the transformation updates; ``slots``: the
    positions ``0 … n − 1`` (int32 scalars) at which the stacked calls of same-shape layers are split, held
    here so that under ``jit`` they are runtime values and every layer shares one compiled op
    (:mod:`.batching`); ``()`` when no call stacks more than one matrix."""

    count: jax.Array
    mu: Any
    slots: tuple = ()


def check_options(qk_rule: str, ov_rule: str, gauge: str, gram_roots: str, msign: str,
                  lora_rule: str = "half_split") -> None:
    """Refuse an unknown rule, gauge, Gram-root method or ``msign`` method, listing the choices."""
    for name, value, choices in (("qk_rule", qk_rule, QK_RULES), ("ov_rule", ov_rule, OV_RULES),
                                 ("lora_rule", lora_rule, LORA_RULES)):
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"compositional_muon: {name} must be one of {choices}, got {value!r}")
    if gauge not in GAUGES:
        raise ValueError(f"compositional_muon: gauge must be one of {GAUGES}, got {gauge!r}")
    if gram_roots not in GRAM_ROOTS:
        raise ValueError(f"compositional_muon: gram_roots must be one of {GRAM_ROOTS}, got {gram_roots!r}")
    if not isinstance(msign, str) or msign not in MSIGN_METHODS:
        raise ValueError(f"compositional_muon: msign must be one of {MSIGN_METHODS}, got {msign!r}")


def direction_dtype(param_dtype: Any, moment_dtype: Any) -> Any:
    """The dtype a matrix's direction is computed in: the parameter's when it has 32 or 64 bits, else the
    wider of the parameter's and the momentum's, at most float32 (bf16 weights with float32 momentum)."""
    param_dtype = jnp.dtype(param_dtype)
    if param_dtype.itemsize >= 4:
        return param_dtype
    wider = jnp.promote_types(param_dtype, moment_dtype)
    return wider if jnp.dtype(wider).itemsize <= 4 else jnp.dtype(jnp.float32)


def given_for(given: dict, name: str) -> Any:
    """The dimension numbers ``given`` (``{path: MuonDimensionNumbers or None}``) hold for the parameter at
    ``name``: its own entry, or that of the nearest subtree above it (a prefix tree, which optax maps over the
    params: ``{"w1": dims}`` holds for ``w1/a`` and ``w1/b``); ``None`` when there is neither."""
    parts = name.split("/")
    for k in range(len(parts), 0, -1):
        prefix = "/".join(parts[:k])
        if prefix in given:
            return given[prefix]
    return None


def dimension_numbers_by_path(weight_dimension_numbers: Any, params: Any) -> dict:
    """``{path: MuonDimensionNumbers or None}`` from a ``MuonDimensionNumbers`` (every matrix), a pytree of
    them (``None`` leaves: not a Muon matrix; a full tree or a prefix of the params', :func:`given_for`) or a
    function of the params giving either. ``None`` (not given): the flax attention kernels with head axes as
    their ``(d, H·d_h)`` matrices (:mod:`.head_axes`), every other matrix by its last two axes."""
    if weight_dimension_numbers is None:
        return head_axes_dimension_numbers(params)
    dn = weight_dimension_numbers(params) if callable(weight_dimension_numbers) else weight_dimension_numbers
    if dn is None:
        return {}
    if isinstance(dn, MuonDimensionNumbers):
        return {name: dn for name in named_leaves(params)}
    is_leaf = lambda x: x is None or isinstance(x, (MuonDimensionNumbers, optax.MaskedNode))  # noqa: E731
    given = {}
    for path, x in jax.tree_util.tree_flatten_with_path(dn, is_leaf=is_leaf)[0]:
        if x is not None and not isinstance(x, (MuonDimensionNumbers, optax.MaskedNode)):
            raise TypeError(f"compositional_muon: muon_weight_dimension_numbers must hold MuonDimensionNumbers or "
                            f"None, got {x!r} at {path_name(path)!r}")
        given[path_name(path)] = None if isinstance(x, optax.MaskedNode) else x
    return {name: given_for(given, name) for name in named_leaves(params)}


def _muon_reshape(x: jax.Array, dims: Any, name: str):
    """``(to, back)``: ``x`` as a batch of ``(fan_in, fan_out)`` matrices by its dimension numbers, and back."""
    if dims is None:
        return (lambda y: y), (lambda y: y)
    red = tuple(a % x.ndim for a in ((dims.reduction_axis,) if isinstance(dims.reduction_axis, int)
                                      else dims.reduction_axis))
    outs = tuple(a % x.ndim for a in ((dims.output_axis,) if isinstance(dims.output_axis, int)
                                       else dims.output_axis))
    if set(red) & set(outs) or not red or not outs:
        raise ValueError(f"compositional_muon: the dimension numbers of {name!r} (shape {tuple(x.shape)}) need "
                         f"disjoint, non-empty reduction and output axes, got {dims}")
    batch = tuple(a for a in range(x.ndim) if a not in red and a not in outs)
    order = batch + red + outs
    shape = tuple(x.shape[a] for a in order)
    flat = (*shape[:len(batch)], math.prod(shape[len(batch):len(batch) + len(red)]),
            math.prod(shape[len(batch) + len(red):]))
    inverse = tuple(sorted(range(x.ndim), key=lambda i: order[i]))
    return (lambda y: y.transpose(order).reshape(flat)), (lambda y: y.reshape(shape).transpose(inverse))


def check_matrix_dtypes(params: Any, what: str = "matrix") -> None:
    """Refuse a parameter that the direction would update but is not real floating point (complex, integer).

    Muon and the attention rules are derived for real matrices; a complex matrix is refused naming its
    path (select it for AdamW with ``adamw_params`` instead, whose optax update supports complex numbers).
    """
    for name, x in named_leaves(params).items():
        dtype = getattr(x, "dtype", None)
        if dtype is not None and not jnp.issubdtype(dtype, jnp.floating):
            raise TypeError(f"compositional_muon: the {what} parameter {shown_path(name)} has dtype "
                            f"{jnp.dtype(dtype).name}; "
                            f"Muon and the attention rules take real floating point only (select it for AdamW "
                            f"with adamw_params, or store it as real and imaginary parts)")


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


@dataclass(frozen=True)
class StepSettings:
    """What one direction step of :func:`scale_by_compositional_muon` was built with (checked once there).

    ``beta``, ``consistent_rms`` and ``options.damping`` may be traced (``optax.inject_hyperparams``).
    """

    beta: Any
    nesterov: bool
    qk_rule: str
    ov_rule: str
    lora_rule: str
    gauge: str
    adaptive: bool
    consistent_rms: Any
    options: DirectionOptions


def _direction_dtypes(plan: Plan, params: dict, mu: dict) -> dict:
    """``{path: dtype}`` each direction is computed in (:func:`direction_dtype`); a pair's (a group's) members
    share the widest of theirs, because the rules take one dtype."""
    ct = {k: direction_dtype(params[k].dtype, x.dtype) for k, x in mu.items()}
    for rec in plan.records:
        common = functools.reduce(jnp.promote_types, [ct[m] for m in rec.members])
        ct.update({m: common for m in rec.members})
    return ct


def _project_momentum(plan: Plan, w: dict, mu: Any, ct: dict, damping: Any) -> Any:
    """The momentum with every attention pair's part projected onto its gauge's horizontal space."""
    m = named_leaves(mu)
    for pair in plan.pairs:
        a, b = pair.first, pair.second
        ha, hb = _project_pair(pair.kind, *merged_pair(pair, w[a], w[b]),  # head axes: their 2-D layout
                               *merged_pair(pair, m[a].astype(ct[a]), m[b].astype(ct[b])), pair.heads,
                               pair.kv_heads, pair.head_dim, pair.kernels, damping)
        m[a], m[b] = ha.reshape(m[a].shape).astype(m[a].dtype), hb.reshape(m[b].shape).astype(m[b].dtype)
    return jax.tree_util.tree_unflatten(jax.tree.structure(mu), [m[k] for k in named_leaves(mu)])


def _momentum_estimate(mu: Any, updates: Any, count: Any, beta: Any, nesterov: bool) -> Any:
    """The bias-corrected momentum, with Nesterov's look-ahead as ``optax.contrib.scale_by_muon`` forms it."""
    if not nesterov:
        return optax.tree.bias_correction(mu, beta, count)
    return jax.tree.map(lambda m, g: beta * m + (1 - beta) * g,
                        optax.tree.bias_correction(mu, beta, optax.safe_increment(count)),
                        optax.tree.bias_correction(updates, beta, count))


def _declared_directions(plan: Plan, w: dict, g: dict, s: StepSettings, options: DirectionOptions,
                         at: Positions = STATIC) -> dict:
    """``{path: direction}`` of every declared pair and group: the named rule at ``ε = 2``, sign flipped.

    Pairs and groups of one layout and shape (every layer's) run as one stacked call (:mod:`.batching`)."""
    out = {}

    def layout(pair: Any) -> tuple:
        return unnamed(pair), array_key(w[pair.first], w[pair.second], g[pair.first], g[pair.second])

    for batch in same_key_batches(plan.pairs, layout):
        pair = batch[0]
        direction = functools.partial(qk_direction if pair.kind == "qk" else ov_direction,
                                      s.qk_rule if pair.kind == "qk" else s.ov_rule)
        found = stacked_call(lambda *x, pair=pair, direction=direction: direction(*x, pair, options),
                             [(w[p.first], w[p.second], g[p.first], g[p.second]) for p in batch], at)
        for p, (da, db) in zip(batch, found, strict=True):
            out[p.first], out[p.second] = -da, -db
    out.update(_group_directions(plan, w, g, s, options, at))
    if s.adaptive:  # each factor's direction times its inner product with the momentum
        out = {k: jnp.sum(g[k] * d) * d for k, d in out.items()}
    return out


def _group_directions(plan: Plan, w: dict, g: dict, s: StepSettings, options: DirectionOptions,
                      at: Positions = STATIC) -> dict:
    """``{path: direction}`` of the LoRA pairs and MLA blocks, those of one layout and shape as one stacked call
    that runs as the batch's first group (whose paths its errors name)."""
    out = {}

    def operands(group: Any) -> tuple:
        return (*(w[m] for m in group.members), *(g[m] for m in group.members))

    for batch in same_key_batches(plan.groups, lambda group: (unnamed(group), array_key(*operands(group)))):
        first = batch[0].members

        def group_rule(*arrays: jax.Array, group: Any = batch[0], first: tuple = first) -> tuple:
            n = len(first)
            found = group_direction(s.lora_rule, dict(zip(first, arrays[:n], strict=True)),
                                    dict(zip(first, arrays[n:], strict=True)), group, options)
            return tuple(found[m] for m in first)

        for group, ds in zip(batch, stacked_call(group_rule, [operands(grp) for grp in batch], at), strict=True):
            out.update({m: -d for m, d in zip(group.members, ds, strict=True)})
    return out


def _muon_directions(g: dict, dims: dict, s: StepSettings, at: Positions = STATIC) -> dict:
    """``{path: √max(1, fan_out/fan_in) msign(m)}`` (or ``optax.contrib.muon``'s ``adaptive``/``consistent_rms``
    forms) of every matrix in ``g``; the matrices of one shape (after their dimension numbers) share one stacked
    ``msign`` call (:mod:`.batching`)."""
    out, matrices = {}, {}
    for name, x in g.items():
        if x.ndim < 2:
            raise ValueError(f"scale_by_compositional_muon: {name!r} has shape {tuple(x.shape)}, not a matrix; "
                             f"compositional_muon gives vectors to AdamW, this transformation takes matrices only")
        if x.size == 0:  # (0, n) or (n, 0): nothing to orthogonalize, the update is empty too
            out[name] = jnp.zeros_like(x)
            continue
        to_matrix, from_matrix = _muon_reshape(x, dims.get(name), name)
        matrices[name] = (to_matrix(x), from_matrix)
    schedule = schedule_for(_halfsplit, s.options.schedule)
    wide = {name: _wide(y) for name, (y, _) in matrices.items()}  # msign(Yᵀ) = msign(Y)ᵀ: tall ones join wide ones
    for batch in same_key_batches(matrices, lambda name: array_key(wide[name])):
        signs = stacked_call(lambda y: (_halfsplit.spectral_sign(y, s.options.msign, schedule),),
                             [(wide[name],) for name in batch], at)
        for name, (sign,) in zip(batch, signs, strict=True):
            y, from_matrix = matrices[name]
            sign = sign if sign.shape == y.shape else sign.mT
            out[name] = _muon_scaled(g[name], from_matrix(sign), y.shape[-2], y.shape[-1], s)
    return out


def _wide(y: jax.Array) -> jax.Array:
    """``y`` with its last two axes ordered short side first (``y`` itself when it is not tall)."""
    return y.mT if y.shape[-2] > y.shape[-1] else y


def _muon_scaled(x: jax.Array, sign: jax.Array, fan_in: int, fan_out: int, s: StepSettings) -> jax.Array:
    """A Muon matrix's direction from its ``msign``: ``optax.contrib.muon``'s ``adaptive`` inner product, then
    ``√max(1, fan_out/fan_in)``, or ``r √max(fan_in, fan_out)`` with ``consistent_rms = r``."""
    if s.adaptive:  # optax.contrib.muon's: the sign times its inner product with the momentum
        sign = jnp.sum(x * sign) * sign
    scale = (s.consistent_rms * math.sqrt(max(fan_in, fan_out)) if s.consistent_rms is not None
             else math.sqrt(max(1.0, fan_out / fan_in)))
    return scale * sign


def _checked_damping(plan: Plan, params: Any, damping: Any, positive: bool) -> Any:
    """``damping``, checked now when concrete, or when the step runs when traced (then NaN if bad)."""
    check_damping_range(plan, params, damping)  # a traced damping: only the pairs' own (LoRAPair.damping)
    if not isinstance(damping, jax.core.Tracer):
        return damping
    ok = damping_ok(plan, params, damping, positive=positive)
    fail_unless_all(ok[None], ("damping",), lambda bad: (
        f"compositional_muon.update: the injected damping is not a finite number {'> 0' if positive else '>= 0'} "
        f"that is 0 or normal in the dtype of every pair's Gram roots; the step was not applied"))
    return jnp.where(ok, damping, jnp.nan)  # a bad damping makes the pairs' step NaN: it is skipped


def scale_by_compositional_muon(
    pairs: Pairs | None = None,
    ns_coeffs: Any = "polar-express-5",
    ns_steps: int | None = None,
    beta: float = 0.95,
    mu_dtype: Any = None,
    *,
    nesterov: bool = True,
    qk_rule: Literal["half_split", "joint", "isotropic", "sylvester"] = "half_split",
    ov_rule: Literal["hybrid"] = "hybrid",
    damping: float = 1e-2,
    gauge: Literal["none", "horizontal_projection", "rebalance"] = "none",
    msign: Literal["newton_schulz", "svd", "gram_newton_schulz", "auto"] = "newton_schulz",
    gram_roots: Literal["eigh"] = "eigh",
    adaptive: bool = False,
    consistent_rms: Any = None,
    weight_dimension_numbers: Any = None,
    lora_rule: Literal["half_split", "joint"] = "half_split",
    preconditioning: Literal["frobenius"] = "frobenius",
) -> optax.GradientTransformation:
    """The direction of Compositional Muon (before weight decay and the learning rate).

    ``adaptive``, ``consistent_rms`` and ``weight_dimension_numbers`` are ``optax.contrib.muon``'s:
    ``adaptive`` scales each matrix's direction ``D`` by ``⟨m̂, D⟩`` (the dual norm of the momentum,
    Bernstein and Newhouse 2024), pairs included; ``consistent_rms = r`` replaces the Muon matrices'
    factor ``√max(1, fan_out/fan_in)`` by ``r √max(fan_in, fan_out)`` (Liu et al. 2025; pairs keep their
    derived budget); ``weight_dimension_numbers`` (a ``MuonDimensionNumbers``, a pytree of them, or a
    function of the params giving one) says which axes of a Muon matrix are its rows (reduction) and
    columns (output), the others batched, as in optax. ``preconditioning``: ``"frobenius"`` only
    (``optax.contrib.scale_by_muon``'s default, Newton–Schulz from ``X/‖X‖_F``); its other starts are refused.

    Pairs get the derived rule at budget ``ε = 2`` with the sign flipped, i.e. a direction whose
    halves have operator norm 1; LoRA pairs the rule named ``lora_rule`` and MLA blocks the rules of
    ``derivations.mla``, at the same ``ε``; other matrices get ``√max(1, fan_out/fan_in) msign(m)``.
    ``optax.scale_by_learning_rate(η)`` then makes the step ``−η ·`` direction. Expects
    ``update(updates, state, params)`` with ``params``. The direction of each matrix is returned in
    its parameter's dtype. It is computed in that dtype when it has 32 or 64 bits (float64 gradients
    of float32 weights are cast to float32), and in float32 for 16-bit weights whose momentum is
    float32 (mixed precision, as ``optax.contrib.muon`` computes in the momentum's dtype). The
    momentum keeps the dtype it was created with (``mu_dtype``, default the parameter's), so the
    state's dtypes never change between steps. ``damping`` may be a traced scalar
    (``optax.inject_hyperparams`` under ``jit``): its range is then checked when the step runs, and a
    bad value is refused like a NaN gradient (the step is not applied). Nothing here skips a NaN/Inf
    direction: :func:`compositional_muon` does (``on_nonfinite``).
    """
    schedule = check_schedule_bounded(resolve_schedule(ns_coeffs, ns_steps))
    check_options(qk_rule, ov_rule, gauge, gram_roots, msign, lora_rule)
    check_preconditioning(preconditioning)
    if consistent_rms is not None:
        consistent_rms = real_scalar("consistent_rms", consistent_rms, traced=True)
    pairs = pair_declaration(pairs)
    mu_dtype = momentum_dtype(mu_dtype)
    damping = real_scalar("damping", damping, traced=True)
    if qk_rule == "sylvester" and not isinstance(damping, jax.core.Tracer) and not damping > 0:
        raise ValueError("compositional_muon: qk_rule='sylvester' needs damping > 0 (the regularization "
                         f"weight 2λ of its least-squares problem), got {damping!r}")
    settings = StepSettings(beta=beta, nesterov=flag("nesterov", nesterov), qk_rule=qk_rule, ov_rule=ov_rule,
                            lora_rule=lora_rule, gauge=gauge, adaptive=flag("adaptive", adaptive),
                            consistent_rms=consistent_rms,
                            options=DirectionOptions(eps=2.0, damping=damping, msign=msign, schedule=schedule))

    def init_fn(params):
        check_damping_range(plan_pairs(pairs, params), params, damping)  # errors at init, naming the parameter
        check_matrix_dtypes(params)
        mu = jax.tree.map(lambda x: jnp.zeros_like(x, dtype=x.dtype if mu_dtype is None else mu_dtype), params)
        return CompositionalMuonState(count=jnp.zeros([], jnp.int32), mu=mu,
                                      slots=slot_positions(largest_stack(jax.tree.leaves(params))))

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("compositional_muon: update needs the params: call update(grads, state, params)")
        check_gradients_match(updates, params)
        at = checked_positions(state.slots)
        plan = plan_pairs(pairs, params)
        dims = dimension_numbers_by_path(weight_dimension_numbers, params)
        lam = _checked_damping(plan, params, damping, positive=qk_rule == "sylvester")
        check_matrix_dtypes(params)
        mu = optax.tree.update_moment(updates, state.mu, beta, 1)
        count = optax.safe_increment(state.count)
        p = named_leaves(params)
        ct = _direction_dtypes(plan, p, named_leaves(mu))
        w = {k: p[k].astype(ct[k]) for k in ct}
        if gauge == "horizontal_projection":
            mu = _project_momentum(plan, w, mu, ct, lam)
        mu_hat = _momentum_estimate(mu, updates, count, beta, settings.nesterov)
        g = {k: x.astype(ct[k]) for k, x in named_leaves(mu_hat).items()}  # the rules take one dtype
        out = _declared_directions(plan, w, g, settings, replace(settings.options, damping=lam), at)
        out.update(_muon_directions({k: x for k, x in g.items() if k not in out}, dims, settings, at))
        new = jax.tree_util.tree_unflatten(jax.tree.structure(mu_hat), [out[k].astype(p[k].dtype) for k in g])
        mu = jax.tree.map(lambda new_mu, old: new_mu.astype(old.dtype), mu, state.mu)  # the state keeps its dtypes
        return new, CompositionalMuonState(count=count, mu=mu, slots=state.slots)

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
            bar_q, k = grouped_pair(kind, *merged_pair(pair, p[a] + u[a], p[b] + u[b]), pair.heads, pair.kv_heads,
                                    pair.head_dim, pair.kernels)
            bar_q, k = balance(bar_q, k)  # shared heads: balanced with their stacked group
            na, nb = ungrouped_pair(kind, bar_q, k, pair.heads, pair.kernels)
            u[a], u[b] = na.reshape(p[a].shape) - p[a], nb.reshape(p[b].shape) - p[b]
        return jax.tree_util.tree_unflatten(jax.tree.structure(updates), list(u.values())), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)
