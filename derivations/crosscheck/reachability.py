"""Whether a change of variables in a chain reaches every point of the new variable's space.

A step from ``min_X f(X) s.t. ‖N(X)‖ ≤ β`` to ``min_Z g(Z) s.t. ‖M(Z)‖ ≤ β`` with ``Z = S(X)``, where
``g(S(X)) = f(X)`` and ``M(S(X)) = N(X)``, shows the two problems equivalent only when ``S`` reaches every
``Z``: the minimum over ``X`` is the minimum of ``g`` over the achievable set ``{S(X)}``, and over all of
``Z`` it is a relaxation whose minimiser need not be achievable. The Compositional Muon paper (§2.1) is the
example: with ``Z = ΔW_Q W_Kᵀ`` (``d × d``) every achievable ``Z`` has rank at most ``d_h < d`` (``2 d_h`` for the
sum of both halves), so ``Z* = −(ε/2) msign(G_M)``, of rank ``d``, is not the update of any ``ΔW_Q``.

The check, on random instances at every size the chain is drawn at (tall, wide and square where the
facts allow): ``S`` is affine in ``X``, ``vec S(X) = c + J vec X`` (``c = S(0)``, the columns of ``J`` are
``S(E_ij) − c`` for the basis matrices ``E_ij``, confirmed at a random ``X``), and ``J`` has rank
``dim Z = rows(Z)·cols(Z)`` (singular values above ``RANK_TOL`` times the largest, in float64). A map that is
not affine, or a variable with structural facts (a symmetric ``Z`` ranges over a subspace), is not decided:
the step is then *not proven*. :func:`in_range` asks the same of a concluded minimiser: ``vec Z* − c`` must
be in the column space of ``J``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sympy import S
from sympy.matrices.expressions import MatrixSymbol

from derivations.crosscheck.evaluation import Instance, _instances
from derivations.parsing.targets import Target
from derivations.vocabulary.evaluate import EvaluationError, evaluate
from derivations.vocabulary.nodes import facts_of
from foundation.compute.reference import NumpyBackend

RANK_TOL = 1e-9  # a singular value of J below this times the largest is zero (float64, random instances)
AFFINE_TOL = 1e-8  # relative: S(X) at a random X against c + J vec X


@dataclass
class Reach:
    """The answer: ``status`` is ``"surjective"`` (every size drawn), ``"obstructed"`` (the rank of ``J`` is
    below ``dim Z`` at some size: ``text`` names it) or ``"unknown"`` (``text`` says why)."""

    status: str
    text: str
    sizes: list = field(default_factory=list)  # the sizes checked, as {name: n}


def _size_text(sizes: dict) -> str:
    return ", ".join(f"{k} = {n}" for k, n in sorted(sizes.items(), key=lambda kv: str(kv[0])))


def _shape(m: MatrixSymbol, sizes: dict) -> tuple:
    return tuple(int(S(k).xreplace(sizes)) for k in m.shape)


def _eval(expr, env: dict, sizes: dict) -> np.ndarray | None:
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(evaluate(expr, env, NumpyBackend(), sizes), dtype=float)
    except (EvaluationError, ZeroDivisionError, np.linalg.LinAlgError, ValueError, OverflowError, TypeError):
        return None
    return out if np.all(np.isfinite(out)) else None


def _linear_map(x: MatrixSymbol, sub, inst: Instance):
    """``(c, J, ok, r)``: ``vec S(X) = c + J vec X`` on ``inst`` (``ok`` false when ``S`` is not affine in ``X``
    there), and ``r`` the rank of ``S(X)`` at a random ``X`` (the largest rank an achievable point has, for
    almost every draw); None when ``S`` cannot be evaluated on the instance."""
    rows, cols = _shape(x, inst.sizes)
    env = dict(inst.env64)
    x0 = np.asarray(env.get(x, np.random.default_rng(inst.seed).standard_normal((rows, cols))), dtype=float)
    env[x] = np.zeros((rows, cols))
    c = _eval(sub, env, inst.sizes)
    if c is None:
        return None
    columns = []
    for i in range(rows):
        for j in range(cols):
            env[x] = np.zeros((rows, cols))
            env[x][i, j] = 1.0
            v = _eval(sub, env, inst.sizes)
            if v is None:
                return None
            columns.append((v - c).ravel())
    jac = np.stack(columns, axis=1) if columns else np.zeros((c.size, 0))
    env[x] = x0
    at = _eval(sub, env, inst.sizes)
    if at is None:
        return None
    want = c.ravel() + jac @ x0.ravel()
    scale = max(np.abs(at).max(initial=0.0), np.abs(want).max(initial=0.0), 1e-300)
    affine = bool(np.abs(at.ravel() - want).max(initial=0.0) <= AFFINE_TOL * scale)
    return c.ravel(), jac, affine, _rank(at.reshape(c.shape) if at.ndim == 2 else at.reshape(1, -1))


def _rank(jac: np.ndarray) -> int:
    if jac.size == 0:
        return 0
    s = np.linalg.svd(np.atleast_2d(jac), compute_uv=False)
    return int(np.sum(s > RANK_TOL * s[0])) if s[0] > 0 else 0


def _one_per_size(target: Target, exprs) -> list:
    seen, out = [], []
    for inst in _instances(target, exprs):
        if inst.sizes not in seen:
            seen.append(inst.sizes)
            out.append(inst)
    return out


def reachability(x: MatrixSymbol, z: MatrixSymbol, sub, namespace: dict, sizes: list, shown: str) -> Reach:
    """Whether ``Z = sub`` (``shown`` as the user wrote it) reaches every ``Z`` as ``X`` ranges over its
    space, at each of ``sizes`` (see the module docstring)."""
    if facts_of(x) or facts_of(z):
        return Reach("unknown", f"{x} or {z} carries structural facts, so its space is not all matrices of its "
                                "shape; whether the change of variables reaches every feasible point was not checked")
    if not sub.has(x):
        return Reach("obstructed", f"the change of variables {z} = {shown} does not depend on {x}: it reaches "
                                   f"one point, not every {z}")
    target = Target("change of variables", sub, namespace, {}, {}, sizes, None)
    checked = []
    for inst in _one_per_size(target, [sub]):
        got = _linear_map(x, sub, inst)
        if got is None:
            continue
        _, jac, affine, top = got
        if not affine:
            return Reach("unknown", f"{z} = {shown} is not affine in {x}; whether it reaches every {z} (its range) "
                                    "was not checked")
        rows, cols = _shape(z, inst.sizes)
        rank = _rank(jac)
        if rank < rows * cols:
            low = (f"; every achievable {z} has rank at most {top} < {min(rows, cols)} = min({rows}, {cols})"
                   if top < min(rows, cols) else "")
            return Reach("obstructed", (
                f"the change of variables {z} = {shown} does not reach every {z}: at {_size_text(inst.sizes)} the map "
                f"{x} ↦ {shown} is linear of rank {rank} < {rows * cols} = {rows}×{cols}, the dimension of {z}'s "
                f"space, so the achievable set {{{shown}}} is a proper subspace (a rank obstruction{low}) and the "
                f"problem in {z} is a relaxation whose minimiser need not be achievable"), [inst.sizes])
        checked.append(inst.sizes)
    if not checked:
        return Reach("unknown", f"{z} = {shown} could not be evaluated on a random instance; whether it reaches "
                                f"every {z} was not checked")
    return Reach("surjective", f"reaches every {z} ({x} ↦ {shown} is linear of rank dim {z} at {len(checked)} "
                               f"size{'s' if len(checked) > 1 else ''})", checked)


def in_range(x: MatrixSymbol, sub, point, namespace: dict, sizes: list, shown: str, name: str) -> Reach:
    """Whether ``point`` (a concluded minimiser ``name``) is ``sub`` at some ``X``: ``vec point − c`` in the
    column space of ``J`` (least squares, residual below ``AFFINE_TOL`` relative), at each of ``sizes``."""
    target = Target("achievable set", sub, namespace, {}, {}, sizes, None)
    checked = []
    for inst in _one_per_size(target, [sub, point]):
        got = _linear_map(x, sub, inst)
        value = _eval(point, inst.env64, inst.sizes)
        if got is None or value is None:
            continue
        c, jac, affine, _ = got
        if not affine:
            return Reach("unknown", f"{shown} is not affine in {x}; whether {name} is achievable was not checked")
        want = value.ravel() - c
        coef = np.linalg.lstsq(jac, want, rcond=None)[0] if jac.size else np.zeros(0)
        resid = np.abs((jac @ coef if jac.size else 0) - want).max(initial=0.0)
        if resid > AFFINE_TOL * max(np.abs(value).max(initial=0.0), 1e-300):
            return Reach("obstructed", (
                f"{name} is not in the achievable set {{{shown}}}: at {_size_text(inst.sizes)} no {x} gives it "
                f"(least-squares residual {resid:.2g}; the map has rank {_rank(jac)} < {value.size})"), [inst.sizes])
        checked.append(inst.sizes)
    if not checked:
        return Reach("unknown", f"whether {name} is achievable ({shown} at some {x}) could not be evaluated")
    return Reach("surjective", f"{name} is achievable: it is {shown} at some {x} on every size drawn", checked)


__all__ = ["AFFINE_TOL", "RANK_TOL", "Reach", "in_range", "reachability"]
