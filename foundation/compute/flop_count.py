"""Matmul flops a JAX function executes, counted by running its program (the flop model's check).

:func:`executed_matmul_flops` traces ``fn`` to a jaxpr and evaluates it primitive by primitive, adding
``2 · batch · contracted · free(lhs) · free(rhs)`` for every ``dot_general`` it executes: ``cond`` runs
only the branch taken, ``scan`` its body once per iteration, ``jit`` its callee. So the count is of the
products that run, with the restart flags, the first product of a fresh ``Q`` and the skipped update
of ``R`` in :mod:`foundation.compute.gram_newton_schulz` decided by the data. The matrices themselves
are not computed: only values of at most :data:`CONCRETE_MAX_SIZE` entries that do not depend on the
input (the schedule's flags, loop counters) are, and every other value is carried as its shape and
dtype. A branch that the input's values would decide makes the count run the whole program on them
instead. :func:`routine_flops` counts the project's two Newton–Schulz routines;
:mod:`derivations.lemmas.gram` (Lemma GK) checks the derived flop formulas against it.
"""

import math
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jax_core

from foundation.compute.gram_newton_schulz import gram_newton_schulz_oriented
from foundation.compute.jax_msign import newton_schulz


def _dot_flops(eqn) -> int:
    """``2 · batch · contracted · free(lhs) · free(rhs)`` of a ``dot_general``."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    ls, rs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    free_l = math.prod(d for i, d in enumerate(ls) if i not in lc and i not in lb)
    free_r = math.prod(d for i, d in enumerate(rs) if i not in rc and i not in rb)
    return 2 * math.prod(ls[i] for i in lb) * math.prod(ls[i] for i in lc) * free_l * free_r


#: values with at most this many entries that do not depend on the input are computed (flags, counters)
CONCRETE_MAX_SIZE = 64


class _Shape:
    """A value the count carries as its shape and dtype only (its entries are never computed)."""

    def __init__(self, aval):
        self.aval = aval

    def __getitem__(self, _):  # one iteration's slice of a scanned operand
        return _Shape(self.aval.update(shape=self.aval.shape[1:]))


class _DataDependent(Exception):
    """A ``cond`` whose branch the input's values decide: the count must run the program on them."""


def _shapes(eqn) -> list:
    return [_Shape(v.aval) for v in eqn.outvars]


def _stacked(ys: list, j: int):
    """The ``j``-th scanned output of every iteration, stacked (as a shape when any of them is one)."""
    first = ys[0][j]
    if any(isinstance(y[j], _Shape) for y in ys):
        aval = first.aval if isinstance(first, _Shape) else jax.typeof(first)
        return _Shape(aval.update(shape=(len(ys), *aval.shape)))
    return jnp.stack([y[j] for y in ys])


def _run_counting(jaxpr, consts, args, count, concrete: bool):
    """Evaluate ``jaxpr`` primitive by primitive, adding the flops of every executed ``dot_general``.

    Higher-order primitives run their sub-programs here too: ``cond`` only the branch taken, ``scan``
    its body once per iteration, ``jit`` its callee, so the count is of what runs, not of what is traced.
    ``concrete=False``: a value that depends on a :class:`_Shape`, or has more than :data:`CONCRETE_MAX_SIZE`
    entries, is a :class:`_Shape`; a ``cond`` on one raises :class:`_DataDependent`.
    """
    env = {}

    def read(v):
        return v.val if isinstance(v, jax_core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        name, params = eqn.primitive.name, eqn.params
        abstract = not concrete and (any(isinstance(x, _Shape) for x in ins) or any(
            math.prod(v.aval.shape) > CONCRETE_MAX_SIZE for v in eqn.outvars if hasattr(v.aval, "shape")))
        if name == "dot_general":
            count[0] += _dot_flops(eqn)
            outs = _shapes(eqn) if abstract else [eqn.primitive.bind(*ins, **params)]
        elif name == "cond":
            if isinstance(ins[0], _Shape):
                raise _DataDependent("a cond whose branch the input decides")
            branch = params["branches"][int(ins[0])]
            outs = _run_counting(branch.jaxpr, branch.consts, ins[1:], count, concrete)
        elif name in ("jit", "pjit", "closed_call"):
            sub = params.get("jaxpr") or params["call_jaxpr"]
            outs = _run_counting(sub.jaxpr, sub.consts, ins, count, concrete)
        elif name == "scan":
            body, nc, nk = params["jaxpr"], params["num_consts"], params["num_carry"]
            fixed, carry, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
            order = range(params["length"])
            ys = []
            for i in (reversed(order) if params["reverse"] else order):
                o = _run_counting(body.jaxpr, body.consts, [*fixed, *carry, *[x[i] for x in xs]], count, concrete)
                carry, y = o[:nk], o[nk:]
                ys.append(y)
            if params["reverse"]:
                ys.reverse()
            outs = [*carry, *[_stacked(ys, j) for j in range(len(ys[0]) if ys else 0)]]
        elif name in ("while", "custom_jvp_call", "custom_vjp_call"):
            raise NotImplementedError(f"the flop counter does not run {name} (counted routines use cond, scan and jit)")
        elif abstract:
            outs = _shapes(eqn)
        else:
            outs = eqn.primitive.bind(*ins, **params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


def executed_matmul_flops(fn, *args, concrete: bool = False) -> int:
    """Flops of the matrix products ``fn(*args)`` executes (``2pqr`` per ``p × q`` by ``q × r`` product).

    The branches taken are decided without computing the matrices (see the module docstring), unless the
    input's values decide one or ``concrete`` is set: then the program runs on ``args`` themselves.

    >>> import jax.numpy as jnp
    >>> executed_matmul_flops(lambda x: x @ x.T @ x, jnp.ones((3, 5)))    # 2·3·5·3 + 2·3·3·5
    180
    """
    closed = jax.make_jaxpr(fn)(*args)
    if not concrete:
        try:
            count = [0]
            _run_counting(closed.jaxpr, closed.consts, [_Shape(jax.typeof(a)) for a in args], count, False)
            return count[0]
        except _DataDependent:
            pass
    count = [0]
    _run_counting(closed.jaxpr, closed.consts, list(args), count, True)
    return count[0]


#: the quintic the counted routines run (any coefficients: the count depends on the shapes only)
COUNTED_QUINTIC = (1.875, -1.25, 0.375)
KINDS = ("standard", "gram")
SIDES = ("left", "right")


def restart_positions(steps: int, restarts: int) -> tuple:
    """``restarts`` distinct positions in ``[1, steps − 1]``, spread by a seeded draw (the count must not
    depend on where the restarts are)."""
    rng = np.random.default_rng([steps, restarts])
    return tuple(sorted(int(s) for s in rng.choice(np.arange(1, steps), size=restarts, replace=False)))


@cache
def routine_flops(kind: str, side: str, n: int, m: int, steps: int, restarts: int = 0) -> int:
    """Matmul flops the project's routine executes on an ``n × m`` input (``side="left"``) or its
    transpose (``"right"``; ``kind`` one of :data:`KINDS`) for a ``steps``-step quintic schedule:
    :func:`foundation.compute.jax_msign.newton_schulz` (``kind="standard"``) or
    :func:`foundation.compute.gram_newton_schulz.gram_newton_schulz_oriented` with ``restarts`` restarts at
    :func:`restart_positions`."""
    if kind not in KINDS or side not in SIDES:
        raise ValueError(f"kind must be one of {KINDS} and side one of {SIDES}, got {kind!r}, {side!r}")
    x = jnp.zeros((n, m) if side == "left" else (m, n), jnp.float32)
    schedule = (COUNTED_QUINTIC,) * steps
    if kind == "standard":
        return executed_matmul_flops(lambda x: newton_schulz(x, schedule), x)
    positions = restart_positions(steps, restarts)
    return executed_matmul_flops(lambda x: gram_newton_schulz_oriented(x, schedule, positions, side == "left"), x)
