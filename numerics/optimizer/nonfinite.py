"""The non-finite guard: no NaN or Inf from a gradient or an update reaches the parameters.

:func:`check_finite_gradients` refuses NaN/Inf gradients, naming the parameter; :func:`skip_nonfinite_updates`
skips a step whose update has a NaN or Inf (as ``optax.apply_if_finite``) or, with ``on_nonfinite="raise"``,
also names it. Eagerly the error is a ``ValueError``; under ``jax.jit`` a host callback that runs only on
failure raises it; :func:`checked_jit` makes it a one-line ``ValueError`` under ``jit`` too.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import checkify

from .options import NONFINITE_POLICIES, check_gradients_match, shown_path
from .pairs import named_leaves


def check_finite_gradients() -> optax.GradientTransformation:
    """Raise ``ValueError`` naming the first parameter whose gradient has a NaN or Inf.

    Eagerly, and in a step jitted by :func:`checked_jit`, the error is a one-line ``ValueError``.
    Under a plain ``jax.jit`` it is raised from a host callback that runs only when a gradient is
    non-finite (:func:`_all_finite` on the hot path), and JAX reports it as a multi-line
    ``JaxRuntimeError`` carrying the same message. Either way no NaN reaches the params.
    """

    def message(bad):
        return (f"compositional_muon.update: the gradient of {shown_path(bad[0])} contains NaN or Inf"
                + (f" (also {len(bad) - 1} more)" if len(bad) > 1 else ""))

    def update_fn(updates, state, params=None):
        del params
        _fail_unless_finite(named_leaves(updates), message)
        return updates, state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def _all_finite(named: dict) -> jax.Array:
    """Whether every entry of every array of ``{name: array}`` is finite, as a boolean scalar.

    One reduction per shape and dtype over the arrays of that shape stacked (XLA fuses the stacking into it),
    not one per array: a model of many layers then adds no compiled op per parameter to the step. Stacking
    along a new axis keeps the sharding that same-shape arrays share (a flattened concatenation would not).
    """
    groups: dict = {}
    for x in named.values():
        groups.setdefault((tuple(jnp.shape(x)), jnp.result_type(x)), []).append(x)
    ok = jnp.asarray(True)
    for arrays in groups.values():
        ok = ok & jnp.all(jnp.isfinite(jnp.stack(arrays) if len(arrays) > 1 else arrays[0]))
    return ok


def _nonfinite_names(named: dict) -> list:
    """The names of the arrays of ``{name: array}`` (concrete) that hold a NaN or Inf, in order."""
    return [name for name, x in named.items() if not np.all(np.isfinite(np.asarray(x)))]


def _fail_unless_finite(named: dict, message: Callable[[list], str]) -> jax.Array:
    """:func:`_all_finite` of ``named``; unless it holds, ``ValueError(message(names of the non-finite arrays))``.

    As :func:`fail_unless_all`, but under a plain ``jit`` the hot path has only :func:`_all_finite`: the
    arrays go to the host callback, which names them, only when it runs (on failure).
    """
    if getattr(_TRACING, "checked", False):
        flags = jnp.stack([jnp.all(jnp.isfinite(x)) for x in named.values()])
        fail_unless_all(flags, tuple(named), message)
        return jnp.all(flags)
    ok = _all_finite(named)
    _raise_unless(ok, list(named.values()), lambda arrays: _nonfinite_names(dict(zip(named, arrays, strict=True))),
                  message)
    return ok


_TRACING = threading.local()  # .checked: True while checked_jit traces (its checks are functionalized)
_CHECK_FAILED = " (`check` failed)"  # the suffix checkify appends to a failed check's message


def fail_unless_all(flags, names, message: Callable[[list], str]) -> None:
    """Raise ``ValueError(message(names of the leaves whose flag is False))`` unless every flag holds.

    Eagerly at once. While :func:`checked_jit` traces, one ``checkify.check`` per leaf (the step runs
    on, and ``checked_jit`` raises the first failed check's message as a ``ValueError`` afterwards).
    Under a plain ``jit``, from a host callback inside a ``lax.cond`` that runs only on failure: JAX
    reports its ``ValueError`` as a multi-line ``JaxRuntimeError`` carrying the message.
    """
    if isinstance(flags, jax.core.Tracer) and getattr(_TRACING, "checked", False):
        for i, name in enumerate(names):  # checkify formats the message: braces in a path are escaped
            checkify.check(flags[i], message([name]).replace("{", "{{").replace("}", "}}"))
        return
    _raise_unless(jnp.all(flags), flags, lambda values: [n for n, f in zip(names, values, strict=True) if not bool(f)],
                  message)


def _raise_unless(ok, operands, bad_names: Callable[[Any], list], message: Callable[[list], str]) -> None:
    """``ValueError(message(bad_names(operands)))`` unless ``ok``: at once when ``ok`` is concrete, else (under a
    plain ``jit``) from a host callback inside a ``lax.cond`` that runs only on failure and receives the
    operands then."""
    if not isinstance(ok, jax.core.Tracer):
        if not bool(ok):
            raise ValueError(message(bad_names(operands)))
        return

    def fail(values):
        bad = bad_names(values)
        if bad:  # under vmap the cond is a select: this runs for every example, the finite ones too
            hint = " (jit the step with numerics.optimizer.checked_jit for this error as one line)"
            raise ValueError(message(bad) + hint)

    jax.lax.cond(ok, lambda xs: None, lambda xs: jax.debug.callback(fail, xs), operands)


def checked_jit(fn: Callable, **jit_kwargs: Any) -> Callable:
    """``jax.jit(fn, **jit_kwargs)`` whose optimizer errors are one-line ``ValueError`` s.

    A NaN/Inf gradient (``check_finite=True``) or update (``on_nonfinite="raise"``) is detected inside
    the compiled program; a plain ``jax.jit`` can only report it through a host callback, which JAX
    turns into a multi-line ``JaxRuntimeError``. Here ``fn`` is traced with the checks functionalized
    (``jax.experimental.checkify``): the compiled step returns an error value with its outputs, and a
    failed check is raised as ``ValueError`` naming the parameter, e.g. ``compositional_muon.update:
    the gradient of 'attn/wv' contains NaN or Inf``. Use it in place of ``jax.jit`` on a training
    step or on ``opt.update`` (the update's NaN/Inf guard has already kept the step from the
    parameters; the step's outputs are not returned when it raises). Other ``checkify.check`` s in
    ``fn`` are raised the same way. Call ``opt.update`` inside ``fn`` directly, not through another
    ``jax.jit`` traced outside ``checked_jit`` (that one keeps its host callback).
    """
    jitted = jax.jit(checkify.checkify(fn), **jit_kwargs)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        outer = getattr(_TRACING, "checked", False)
        _TRACING.checked = True  # read while jit traces fn (the first call of each signature)
        try:
            err, out = jitted(*args, **kwargs)
        finally:
            _TRACING.checked = outer
        exc = err.get_exception()
        if exc is not None:
            text = str(exc)
            raise ValueError(text[: -len(_CHECK_FAILED)] if text.endswith(_CHECK_FAILED) else text)
        return out

    return run


class SkipNonFiniteState(NamedTuple):
    """Skipped steps, with the fields of ``optax.ApplyIfFiniteState``.

    ``notfinite_count``: consecutive steps skipped up to now (0 after an applied step);
    ``last_finite``: whether the last step's update was finite, i.e. applied; ``total_notfinite``:
    steps skipped in all.
    """

    notfinite_count: jax.Array
    last_finite: jax.Array
    total_notfinite: jax.Array

    def after(self, ok: jax.Array) -> SkipNonFiniteState:
        """The counts after a step that was applied (``ok``) or skipped: a skip adds one to both counts
        (saturating, as ``optax.safe_increment``), an applied step resets the consecutive one."""
        return SkipNonFiniteState(
            notfinite_count=jnp.where(ok, jnp.zeros([], jnp.int32), optax.safe_increment(self.notfinite_count)),
            last_finite=ok,
            total_notfinite=jnp.where(ok, self.total_notfinite, optax.safe_increment(self.total_notfinite)))


def skip_nonfinite_updates(*transforms: optax.GradientTransformation, on_nonfinite: str = "skip",
                           hint: str = "") -> optax.GradientTransformation:
    """``optax.chain(*transforms)`` whose NaN/Inf updates never reach the parameters.

    The chain's final update is checked (:func:`_all_finite`, under ``jit`` too). A step with a NaN or Inf
    anywhere is skipped as a whole, as ``optax.apply_if_finite`` skips one: every update is zero and every state
    of the chain stays as it was (momentum, counts, schedules), and the step is counted in a
    :class:`SkipNonFiniteState`, the state's last element (so ``state[i]`` is still the state of
    ``transforms[i]``). Unlike ``apply_if_finite`` there is no count after which a non-finite update goes
    through. With ``on_nonfinite="raise"`` the step is skipped and a ``ValueError`` names the first parameter
    whose update is NaN/Inf (eagerly and under :func:`checked_jit`; under a plain ``jit`` from a host callback
    that runs only on failure, as :func:`check_finite_gradients`); ``hint`` ends that message.

    Not ``optax.apply_if_finite`` itself: it checks the gradient before its inner transformation runs, so a
    finite gradient whose update overflows (a float16 direction of tiny weights) would reach the parameters.
    """
    if on_nonfinite not in NONFINITE_POLICIES:
        raise ValueError(f"compositional_muon: on_nonfinite must be one of {NONFINITE_POLICIES}, got {on_nonfinite!r}")

    def init_fn(params):
        zero = jnp.zeros([], jnp.int32)
        return (*(t.init(params) for t in transforms),
                SkipNonFiniteState(notfinite_count=zero, last_finite=jnp.array(True), total_notfinite=zero))

    def update_fn(updates, state, params=None):
        check_gradients_match(updates, params)
        *inner, guard = state
        new_inner = []
        for t, s in zip(transforms, inner, strict=False):
            updates, s = t.update(updates, s, params)
            new_inner.append(s)
        named = named_leaves(updates)
        if params is not None:  # what optax.apply_updates writes: the step in the parameter's dtype
            held = named_leaves(params)
            named = {n: u.astype(held[n].dtype) if n in held and hasattr(held[n], "dtype") else u
                     for n, u in named.items()}
        if on_nonfinite == "raise":
            dtypes = {n: jnp.dtype(x.dtype).name for n, x in named.items()}

            def message(bad):
                more = ""
                if len(bad) > 1:  # same-shape layers run as one call (batching.py): they share a NaN/Inf result
                    shown = ", ".join(repr(n) for n in bad[1:4]) + (", …" if len(bad) > 4 else "")
                    more = (f" (also {len(bad) - 1} more: {shown}; parameters updated in one stacked call share a "
                            "NaN/Inf result, so it may have arisen in any of them)")
                return (f"compositional_muon.update: the update of {shown_path(bad[0])} ({dtypes[bad[0]]}) contains "
                        f"NaN or Inf{more}; the step was not applied{hint}")

            ok = _fail_unless_finite(named, message)
        else:
            ok = _all_finite(named)
        if isinstance(ok, jax.core.Tracer) or not bool(ok):
            updates = jax.tree.map(lambda u: jnp.where(ok, u, jnp.zeros_like(u)), updates)
            new_inner = jax.tree.map(lambda new, old: jnp.where(ok, new, old), tuple(new_inner), tuple(inner))
        return updates, (*new_inner, guard.after(ok))

    return optax.GradientTransformation(init_fn, update_fn)
