"""Matmul flops a JAX function executes, counted by running its program (the flop model's check).

:func:`executed_matmul_flops` traces ``fn`` to a jaxpr and evaluates it primitive by primitive, adding
``2 · batch · contracted · free(lhs) · free(rhs)`` for every ``dot_general`` it executes: ``cond`` runs
only the branch taken, ``scan`` its body once per iteration, ``jit`` its callee. So the count is of the
products that run, with the restart flags, the first product of a fresh ``Q`` and the skipped update
of ``R`` in :mod:`numerics.kernels.gram_newton_schulz` decided by the data. :func:`kernel_flops` counts
the project's two Newton–Schulz kernels; :mod:`derivations.lemmas.gram` (Lemma GK) checks the derived
flop formulas against it.
"""

import math
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jax_core

from numerics.kernels.gram_newton_schulz import gram_newton_schulz_oriented
from numerics.kernels.jax_msign import newton_schulz


def _dot_flops(eqn) -> int:
    """``2 · batch · contracted · free(lhs) · free(rhs)`` of a ``dot_general``."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    ls, rs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    free_l = math.prod(d for i, d in enumerate(ls) if i not in lc and i not in lb)
    free_r = math.prod(d for i, d in enumerate(rs) if i not in rc and i not in rb)
    return 2 * math.prod(ls[i] for i in lb) * math.prod(ls[i] for i in lc) * free_l * free_r


def _run_counting(jaxpr, consts, args, count):
    """Evaluate ``jaxpr`` primitive by primitive, adding the flops of every executed ``dot_general``.

    Higher-order primitives run their sub-programs here too: ``cond`` only the branch taken, ``scan``
    its body once per iteration, ``jit`` its callee, so the count is of what runs, not of what is traced.
    """
    env = {}

    def read(v):
        return v.val if isinstance(v, jax_core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        name, params = eqn.primitive.name, eqn.params
        if name == "dot_general":
            count[0] += _dot_flops(eqn)
            outs = eqn.primitive.bind(*ins, **params)
        elif name == "cond":
            branch = params["branches"][int(ins[0])]
            outs = _run_counting(branch.jaxpr, branch.consts, ins[1:], count)
        elif name in ("jit", "pjit", "closed_call"):
            sub = params.get("jaxpr") or params["call_jaxpr"]
            outs = _run_counting(sub.jaxpr, sub.consts, ins, count)
        elif name == "scan":
            body, nc, nk = params["jaxpr"], params["num_consts"], params["num_carry"]
            fixed, carry, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
            order = range(params["length"])
            ys = []
            for i in (reversed(order) if params["reverse"] else order):
                o = _run_counting(body.jaxpr, body.consts, [*fixed, *carry, *[x[i] for x in xs]], count)
                carry, y = o[:nk], o[nk:]
                ys.append(y)
            if params["reverse"]:
                ys.reverse()
            outs = [*carry, *[jnp.stack([y[j] for y in ys]) for j in range(len(ys[0]) if ys else 0)]]
        elif name in ("while", "custom_jvp_call", "custom_vjp_call"):
            raise NotImplementedError(f"the flop counter does not run {name} (counted kernels use cond, scan and jit)")
        else:
            outs = eqn.primitive.bind(*ins, **params)
        if not eqn.primitive.multiple_results:
            outs = [outs]
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


def executed_matmul_flops(fn, *args) -> int:
    """Flops of the matrix products ``fn(*args)`` executes (``2pqr`` per ``p × q`` by ``q × r`` product)."""
    closed = jax.make_jaxpr(fn)(*args)
    count = [0]
    _run_counting(closed.jaxpr, closed.consts, list(args), count)
    return count[0]


#: the quintic the counted kernels run (any coefficients: the count depends on the shapes only)
COUNTED_QUINTIC = (1.875, -1.25, 0.375)
KINDS = ("standard", "gram")
SIDES = ("left", "right")


def restart_positions(steps: int, restarts: int) -> tuple:
    """``restarts`` distinct positions in ``[1, steps − 1]``, spread by a seeded draw (the count must not
    depend on where the restarts are)."""
    rng = np.random.default_rng([steps, restarts])
    return tuple(sorted(int(s) for s in rng.choice(np.arange(1, steps), size=restarts, replace=False)))


@cache
def kernel_flops(kind: str, side: str, n: int, m: int, steps: int, restarts: int = 0) -> int:
    """Matmul flops the project's kernel executes on an ``n × m`` input (``side="left"``) or its
    transpose (``"right"``; ``kind`` one of :data:`KINDS`) for a ``steps``-step quintic schedule:
    :func:`numerics.kernels.jax_msign.newton_schulz` (``kind="standard"``) or
    :func:`numerics.kernels.gram_newton_schulz.gram_newton_schulz_oriented` with ``restarts`` restarts at
    :func:`restart_positions`."""
    if kind not in KINDS or side not in SIDES:
        raise ValueError(f"kind must be one of {KINDS} and side one of {SIDES}, got {kind!r}, {side!r}")
    x = jnp.zeros((n, m) if side == "left" else (m, n), jnp.float32)
    schedule = (COUNTED_QUINTIC,) * steps
    if kind == "standard":
        return executed_matmul_flops(lambda x: newton_schulz(x, schedule), x)
    positions = restart_positions(steps, restarts)
    return executed_matmul_flops(lambda x: gram_newton_schulz_oriented(x, schedule, positions, side == "left"), x)
