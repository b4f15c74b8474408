"""The optimizer update across processes (``jax.distributed``) and head-parallel with ``shard_map``.

Two ways to spread the Compositional Muon update over devices, both equal to the single-device update:

* **GSPMD across processes.** :mod:`numerics.sharding` places parameters, gradients and state on a
  :class:`~jax.sharding.Mesh` with ``NamedSharding`` and lets XLA partition the one ``jit`` program. With
  ``jax.distributed`` the mesh holds every process's devices; each process builds the same global arrays
  (:func:`global_put`, from host data that every process holds) and runs the same program.
  :func:`compare_distributed` checks every shard a process holds against the update computed unsharded on
  one of its own devices.
* **Head-parallel with** ``shard_map``. Compositional Muon is head-parallel for the query/key pair: every
  ``qk_rule`` (``half_split``, ``joint``, ``isotropic``, ``sylvester``) acts head by head, and the
  grouped-query forms (``kv_heads < heads``) kv group by kv group, so each device runs the rule on its own
  heads with no communication. Not per head: the hybrid OV rule's O side (one spectral sign over all heads'
  ``W_O``), Muon's sign of a whole matrix (and its ``√max(1, fan_out/fan_in)`` scale, read from the shape)
  and the non-finite guard (one decision for the whole step). :func:`head_parallel` therefore shards the
  query/key members over the ``"heads"`` axis, keeps the output/value pair and the other parameters whole
  on each device (stacked layers may still be split over ``"layers"``: every rule batches over leading
  axes), and makes the guard's decision global with one ``pmin``.

Bad declarations (a process count that does not divide the devices, heads that do not divide the mesh
axis) raise :class:`DeclarationError`, one line naming the parameter and what was expected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from numerics import sharding
from numerics.optimizer import OVPair, QKPair, SkipNonFiniteState, compositional_muon, path_name


class DeclarationError(ValueError):
    """A launch or mesh declaration that cannot work; its message is one line naming the parameter."""


def check_processes(num_processes: int, devices: int, what: str = "the mesh", name: str = "num_processes") -> None:
    """``num_processes`` must be a positive divisor of ``devices`` (every process holds as many devices);
    ``name`` is how the caller's user spells the parameter."""
    if not isinstance(num_processes, int) or num_processes < 1 or devices % num_processes:
        divisors = [n for n in range(1, devices + 1) if devices % n == 0]
        raise DeclarationError(f"{name} {num_processes!r} does not divide the {devices} devices of {what}; "
                               f"expected one of {divisors}")


def check_heads(heads: int, kv_heads: int, axis_size: int, axis: str = "heads",
                names: tuple[str, str] = ("heads", "kv_heads")) -> None:
    """Head-parallel needs whole heads and whole kv groups per device: ``axis_size`` divides both counts.
    ``names`` is how the caller's user spells the two parameters."""
    for name, count in zip(names, (heads, kv_heads), strict=True):
        if not isinstance(count, int) or count < 1 or count % axis_size:
            raise DeclarationError(f"{name} {count!r} is not a multiple of the mesh's {axis!r} axis size {axis_size}; "
                                   f"expected {name} {axis_size}, {2 * axis_size}, {3 * axis_size}, ...")
    if heads % kv_heads:
        raise DeclarationError(f"{names[1]} {kv_heads} does not divide {names[0]} {heads}; expected a divisor of "
                               f"{heads}")


def global_put(host: Mapping[str, Any], shardings: Mapping[str, NamedSharding]) -> dict[str, jax.Array]:
    """Global arrays from host arrays that every process holds in full: each process fills only its shards."""
    def array(host_array: Any, where: NamedSharding) -> jax.Array:
        full = np.asarray(host_array)
        return jax.make_array_from_callback(full.shape, where, lambda index: full[index])

    return {k: array(v, shardings[k]) for k, v in host.items()}


def worst_shard_difference(reference: Mapping[str, Any], result: Mapping[str, jax.Array]) -> float:
    """Max over parameters of ``max|Δ| / max|reference|`` on the shards of ``result`` this process holds."""
    worst = 0.0
    for k, ref in reference.items():
        full = np.asarray(ref, np.float64)
        scale = float(np.max(np.abs(full))) + 1e-30
        for shard in result[k].addressable_shards:
            diff = np.abs(np.asarray(shard.data, np.float64) - full[shard.index])
            worst = max(worst, float(np.max(diff, initial=0.0)) / scale)
    return worst


def bitwise_equal(reference: Mapping[str, Any], result: Mapping[str, jax.Array]) -> bool:
    """Whether every shard of ``result`` this process holds equals ``reference`` bit for bit."""
    return all(np.array_equal(np.asarray(s.data), np.asarray(ref)[s.index])
               for k, ref in reference.items() for s in result[k].addressable_shards)


def host_problem(layers: int, d: int, heads: int, kv_heads: int, head_dim: int, steps: int, seed: int = 0):
    """``(params, [grads per step])`` as host NumPy arrays, the same in every process for the same seed."""
    rng = np.random.default_rng(seed)
    params = {k: np.asarray(v) for k, v in sharding.attention_block(rng, layers, d, heads, kv_heads, head_dim).items()}
    grads = [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in params.items()} for _ in range(steps)]
    return params, grads


def run_steps(opt: optax.GradientTransformation, params: Any, grads: list, update: Callable | None = None,
              init: Callable | None = None) -> list:
    """The updates of ``len(grads)`` steps from a fresh state (``update``/``init``: ``opt``'s, jitted, by default)."""
    update = update or jax.jit(opt.update)
    state = (init or opt.init)(params)
    outs = []
    for g in grads:
        u, state = update(g, state, params)
        outs.append(u)
    return outs


# ---- head-parallel with shard_map -------------------------------------------------------------
def head_specs(layers_axis: str | None = "layers", heads_axis: str = "heads") -> dict[str, P]:
    """``shard_map`` specs of :func:`numerics.sharding.attention_block`'s parameters for :func:`head_parallel`:
    the query/key pair's columns (whole heads) over ``heads_axis``, everything else whole; stacked matrices
    over ``layers_axis`` (``None``: not split). The gains, ``(layers, d)``, stay whole: a 2-D array is one
    matrix to Muon (it goes to AdamW only with ``adamw_params``), so its rows are not independent."""
    return {"wq": P(layers_axis, None, heads_axis), "wk": P(layers_axis, None, heads_axis),
            "wo": P(layers_axis), "wv": P(layers_axis), "w1": P(layers_axis), "gain": P()}


def _spec_of(path, specs: Mapping[str, P]) -> P:
    """The spec of a state leaf: its parameter's spec when a suffix of its path names one, else replicated."""
    for i in range(len(path)):
        name = path_name(path[i:])
        if name in specs:
            return specs[name]
    return P()


def state_specs(state: Any, specs: Mapping[str, P]) -> Any:
    """Specs for an optimizer state: the momentum of a parameter as the parameter, counts and guards whole."""
    return jax.tree_util.tree_map_with_path(lambda path, _: _spec_of(path, specs), state)


def _global_guard(update: Callable, axes: tuple[str, ...]) -> Callable:
    """``update`` (a :func:`~numerics.optimizer.compositional_muon` update, run per device) with one skip decision
    for all devices: a step any device found non-finite is skipped on every device, as the unsharded update
    skips the whole step (zero updates, states kept, the skip counted)."""

    def run(grads, state, params):
        if not (isinstance(state, tuple) and state and isinstance(state[-1], SkipNonFiniteState)):
            raise ValueError(f"head_parallel: make_optimizer must return a compositional_muon optimizer, whose state "
                             f"ends with its non-finite guard (a SkipNonFiniteState); got a state of type "
                             f"{type(state).__name__}")
        updates, new = update(grads, state, params)
        *inner, guard = new
        ok = jax.lax.pmin(guard.last_finite.astype(jnp.int32), axes) > 0
        updates = jax.tree.map(lambda u: jnp.where(ok, u, jnp.zeros_like(u)), updates)
        inner = jax.tree.map(lambda n, o: jnp.where(ok, n, o), tuple(inner), tuple(state[:-1]))
        return updates, (*inner, state[-1].after(ok))

    return run


def head_parallel(make_optimizer: Callable[[int, int], optax.GradientTransformation], mesh: Mesh,
                  params: Mapping[str, Any], specs: Mapping[str, P], heads: int, kv_heads: int,
                  heads_axis: str = "heads") -> tuple[Callable, Callable]:
    """``(init, update)`` of the optimizer run head-parallel under ``shard_map`` on ``mesh``.

    ``make_optimizer(local_heads, local_kv_heads)`` builds the optimizer for the heads one device holds (its
    pair declarations name those counts); ``specs`` says how each parameter is split (:func:`head_specs`:
    only the query/key members over ``heads_axis``, the axis holding whole heads). Both functions are jitted;
    ``update(grads, state, params)`` equals the unsharded optimizer's update for the same data.
    """
    n = mesh.shape[heads_axis]
    check_heads(heads, kv_heads, n, heads_axis)
    opt = make_optimizer(heads // n, kv_heads // n)
    local = {k: jax.ShapeDtypeStruct(_local_shape(np.shape(v), specs[k], mesh), v.dtype) for k, v in params.items()}
    s_specs = state_specs(jax.eval_shape(opt.init, local), specs)
    p_specs = dict(specs)
    init = jax.jit(jax.shard_map(opt.init, mesh=mesh, in_specs=(p_specs,), out_specs=s_specs))
    # check_vma=False: the whole parameters' updates and the counts are computed alike on every device from
    # whole inputs, but the optimizer's own guard mixes in the local heads' finiteness, which the type check
    # reads as varying; _global_guard makes that decision the same on every device
    update = jax.shard_map(_global_guard(opt.update, tuple(mesh.axis_names)), mesh=mesh,
                           in_specs=(p_specs, s_specs, p_specs), out_specs=(p_specs, s_specs), check_vma=False)
    return init, jax.jit(update)


def _local_shape(shape: tuple[int, ...], spec: P, mesh: Mesh) -> tuple[int, ...]:
    """The block of ``shape`` one device holds under ``spec``."""
    out = list(shape)
    for i, axes in enumerate(spec):
        for axis in (axes if isinstance(axes, tuple) else (axes,)):
            if axis is not None:
                out[i] //= mesh.shape[axis]
    return tuple(out)


def check_mesh(mesh_shape: tuple[int, int], heads: int, kv_heads: int) -> None:
    """The declarations :func:`compare` needs, checked before any device work: ``mesh_shape`` two positive sizes
    whose product the process count divides and the devices fill, whole heads and kv groups per device."""
    if len(mesh_shape) != 2 or any(not isinstance(n, int) or n < 1 for n in mesh_shape):
        raise DeclarationError(f"mesh_shape={mesh_shape!r} is not two positive sizes; expected (layers, heads), "
                               f"e.g. (2, 4)")
    layers_axis, heads_axis = mesh_shape
    check_processes(jax.process_count(), layers_axis * heads_axis, f"the mesh {layers_axis} x {heads_axis}")
    if jax.device_count() != layers_axis * heads_axis:
        raise DeclarationError(f"mesh_shape={mesh_shape} has {layers_axis * heads_axis} devices, the "
                               f"{jax.process_count()} process(es) hold {jax.device_count()}; expected a mesh of "
                               f"all {jax.device_count()} devices")
    check_heads(heads, kv_heads, heads_axis)


def compare(layers: int = 2, d: int = 32, heads: int = 8, kv_heads: int = 4, head_dim: int = 4, steps: int = 2,
            mesh_shape: tuple[int, int] = (2, 4), seed: int = 0, **options) -> dict[str, Any]:
    """The update spread over every device of every process, both ways, against the unsharded update.

    Every process calls it (after ``jax.distributed.initialize``, or alone); the unsharded update runs on one
    of its own devices, and each process checks the shards it holds. ``mesh_shape`` is ``(layers, heads)``
    and must use all devices. Returns ``{"gspmd": max relative difference of the GSPMD-sharded update
    (:mod:`numerics.sharding`'s specs), "head_parallel": that of :func:`head_parallel`, "bitwise": {way:
    bool}, "spec": W_Q's update spec, "devices": n, "processes": n}``.
    """
    check_mesh(mesh_shape, heads, kv_heads)
    params, grads = host_problem(layers, d, heads, kv_heads, head_dim, steps, seed)
    opt = compositional_muon(0.02, pairs=sharding.block_pairs(heads, kv_heads), **options)
    here = jax.local_devices()[0]
    plain = run_steps(opt, jax.device_put(params, here), [jax.device_put(g, here) for g in grads])
    m = sharding.mesh(*mesh_shape)
    gspmd = {k: NamedSharding(m, s) for k, s in sharding.specs().items()}
    spread = {"gspmd": run_steps(opt, global_put(params, gspmd), [global_put(g, gspmd) for g in grads])}

    def make(h: int, kv: int) -> optax.GradientTransformation:
        return compositional_muon(0.02, pairs=lambda p: [QKPair("wq", "wk", h, kv),
                                                         OVPair("wo", "wv", heads, kv_heads)], **options)

    specs = head_specs()
    init, update = head_parallel(make, m, params, specs, heads, kv_heads)
    split = {k: NamedSharding(m, s) for k, s in specs.items()}
    spread["head_parallel"] = run_steps(opt, global_put(params, split), [global_put(g, split) for g in grads],
                                        update, init)
    out: dict[str, Any] = {way: max(worst_shard_difference(a, b) for a, b in zip(plain, us, strict=True))
                           for way, us in spread.items()}
    out["bitwise"] = {way: all(bitwise_equal(a, b) for a, b in zip(plain, us, strict=True))
                      for way, us in spread.items()}
    out.update(spec=tuple(spread["gspmd"][-1]["wq"].sharding.spec), devices=jax.device_count(),
               processes=jax.process_count())
    return out
