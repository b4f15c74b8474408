"""Both sides of a comparison evaluated on random instances, and when two values agree.

Instances are drawn so that the target's side conditions hold (the structural facts its matrices
carry, its definitions such as ``G_Q = G_M W_K``) and evaluated in mpmath at ``DPS`` digits (a
disagreement again at ``RECHECK_DPS``), or in float64 for a screen. Agreement is relative to the
magnitudes of both sides (:func:`_agree`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mpmath
import numpy as np
from sympy import S
from sympy.matrices.expressions import MatMul

from derivations.parsing.targets import Target, _preorder
from derivations.vocabulary.evaluate import EvaluationError, InstanceSampler, evaluate, free_symbols
from derivations.vocabulary.nodes import GramInvSqrt, GramPower, GramSqrt, _GramNode
from foundation.compute.reference import MpmathBackend, NumpyBackend

DPS = 50
# Every comparison is relative to the magnitudes of both sides (see :func:`_agree`), so it is the same
# for a pair of sides and for the pair scaled by any power of ten. The tolerance leaves 20 of the 50
# digits to the conditioning of the evaluation (SVDs and eigendecompositions of well-conditioned
# random instances lose a few digits; 20 is ample).
EQUAL_TOL = 10.0 ** (20 - DPS)  # relative, at DPS digits
RECHECK_DPS = 2 * DPS  # a disagreement is evaluated again at this precision (see _agree_rechecked)
INSTANCES_PER_SIZE = 2


@dataclass
class Instance:
    sizes: dict
    env64: dict
    envmp: dict
    sampler: InstanceSampler | None = None
    syms: frozenset = frozenset()
    seed: int = 0
    _higher: dict = field(default_factory=dict, repr=False)

    def env_at(self, dps: int) -> dict:
        """The same instance (same draws, facts and definitions imposed) at ``dps`` digits."""
        if dps == DPS or self.sampler is None:
            return self.envmp
        if dps not in self._higher:
            with mpmath.workdps(dps):
                self._higher[dps] = self.sampler.sample(np.random.default_rng(self.seed), self.syms,
                                                        MpmathBackend(dps))
        return self._higher[dps]


def _instances(target: Target, exprs, seed=0) -> list[Instance]:
    syms = free_symbols(*exprs, *target.definitions.values())
    out = []
    for k, sizes in enumerate(target.sizes):
        sampler = InstanceSampler(sizes, target.definitions, target.scalars)
        for j in range(INSTANCES_PER_SIZE):
            s = 1000 * seed + 10 * k + j
            env64 = sampler.sample(np.random.default_rng(s), syms, NumpyBackend())
            with mpmath.workdps(DPS):
                envmp = sampler.sample(np.random.default_rng(s), syms, MpmathBackend(DPS))
            out.append(Instance(sizes, env64, envmp, sampler, frozenset(syms), s))
    return out


def _full_rank_form(expr, sizes: dict):
    """``expr`` with every undamped Gram root ``(W Wᵀ)^p`` (``p > 0``) whose Gram matrix is rank-deficient by
    shape (``W`` tall) written as ``W (WᵀW)^{p−1} Wᵀ``, and ``(WᵀW)^p`` of a wide ``W`` as ``Wᵀ (W Wᵀ)^{p−1} W``:
    the same matrix, but its eigendecomposition is of the full-rank Gram. An eigendecomposition of the
    singular one gives the zero eigenvalues as ±10^-DPS, whose roots (10^-DPS/2) would leave half the digits
    (``msign(A) Aᵀ − (A Aᵀ)^{1/2}`` would be 1e-25, not 1e-50, for a tall ``A``)."""
    swap = {}
    for node in _preorder(expr):
        if not isinstance(node, _GramNode) or node.damping != 0 or not node.exponent > 0:
            continue
        rows, cols = (S(S(k).xreplace(sizes)) for k in node.base.shape)
        if not (rows.is_Integer and cols.is_Integer):
            continue
        if (rows > cols) if node.side == "left" else (cols > rows):
            w, q = node.base, node.exponent - 1
            other = "right" if node.side == "left" else "left"
            root = (GramInvSqrt(w, 0, other) if q == -S.Half else GramSqrt(w, 0, other) if q == S.Half
                    else GramPower(w, 0, other, q))
            swap[node] = MatMul(w, root, w.T) if node.side == "left" else MatMul(w.T, root, w)
    return expr.xreplace(swap) if swap else expr


class NotConverged(ArithmeticError):
    """An iteration of the evaluation (mpmath's SVD or eigensolver) did not converge on an instance: the
    instance says nothing about the formula (:func:`_value` with ``strict``)."""


def _value(expr, inst: Instance, mp: bool, dps: int = DPS, strict: bool = False):
    """``expr`` on ``inst`` (mpmath at ``dps`` digits, or float64); None when it cannot be evaluated or is
    not finite. An iteration that does not converge is None too, or with ``strict`` :class:`NotConverged`.
    Gram roots singular by shape are evaluated in their full-rank form (:func:`_full_rank_form`), or as
    written when that form is not defined (``W`` itself rank-deficient)."""
    full = _full_rank_form(expr, inst.sizes)
    if full is not expr:
        out = _value_as_written(full, inst, mp, dps, strict)
        if out is not None:
            return out
    return _value_as_written(expr, inst, mp, dps, strict)


def _value_as_written(expr, inst: Instance, mp: bool, dps: int, strict: bool):
    try:
        if mp:
            with mpmath.workdps(dps):
                out = evaluate(expr, inst.env_at(dps), MpmathBackend(dps), inst.sizes)
        else:
            with np.errstate(all="ignore"):
                out = evaluate(expr, inst.env64, NumpyBackend(), inst.sizes)
    except (EvaluationError, ZeroDivisionError, np.linalg.LinAlgError, ValueError, OverflowError):
        return None
    except RecursionError:
        raise
    except RuntimeError as exc:  # mpmath: "svd: no convergence to an eigenvalue after 150 iterations"
        if strict:
            raise NotConverged(str(exc)) from None
        return None
    return out if _finite(out) else None


def _flat(v) -> list:
    """The entries of a value as mpmath numbers (float64 entries converted exactly)."""
    if isinstance(v, mpmath.matrix):
        return [v[i, j] for i in range(v.rows) for j in range(v.cols)]
    if isinstance(v, np.ndarray):
        return [mpmath.mpf(float(x)) for x in v.ravel()]
    if isinstance(v, (float, int, np.floating, np.integer)):
        return [mpmath.mpf(float(v))]
    return [v]


def _finite(v) -> bool:
    try:
        return all(mpmath.isfinite(x) for x in _flat(v))
    except (TypeError, ValueError):
        return False


def _max_abs(values) -> mpmath.mpf:
    return max((abs(x) for x in values), default=mpmath.mpf(0))


def _difference(a, b) -> tuple:
    """``(max|a − b|, max(max|a|, max|b|))`` entrywise, at ``DPS`` digits (each subtraction is correctly
    rounded, so the difference is accurate relative to itself whatever the magnitudes)."""
    with mpmath.workdps(DPS):
        fa, fb = _flat(a), _flat(b)
        if len(fa) != len(fb):
            raise ValueError("values of different sizes")
        return _max_abs([x - y for x, y in zip(fa, fb, strict=False)]), max(_max_abs(fa), _max_abs(fb))


def _agree(a, b, tol) -> bool:
    """``max|a − b| ≤ tol · max(max|a|, max|b|)``: relative to the magnitudes of both sides, so scaling both
    by any factor leaves the answer unchanged. Both sides exactly zero agree; one side exactly zero and the
    other not never agree (the difference is then the whole of the larger side). Non-finite values never
    agree."""
    if a is None or b is None or not (_finite(a) and _finite(b)):
        return False
    diff, scale = _difference(a, b)
    if scale == 0:
        return True
    return diff <= tol * scale


def _agree_rechecked(ref, cand, inst, a, b) -> bool:
    """Whether a pair that disagrees at ``DPS`` digits is rounding, not a difference: evaluated again on the
    same instance at ``RECHECK_DPS`` digits, the two sides agree, or their difference has shrunk by at
    least ``10^-(RECHECK_DPS - DPS)/2`` (rounding shrinks with the precision; a true difference does not,
    whatever its scale). This keeps true identities whose sides cancel to (near) zero, e.g.
    ``msign(A) Aᵀ − (A Aᵀ)^{1/2} = 0``, from being called different by their rounding."""
    if a is None or b is None:
        return False
    a2, b2 = _value(ref, inst, True, RECHECK_DPS), _value(cand, inst, True, RECHECK_DPS)
    if a2 is None or b2 is None:
        return False
    if _agree(a2, b2, EQUAL_TOL):
        return True
    d1, _ = _difference(a, b)
    d2, _ = _difference(a2, b2)
    return d2 <= mpmath.mpf(10) ** (-((RECHECK_DPS - DPS) // 2)) * d1


def relative_difference(cand, derived) -> float | None:
    """``‖cand − derived‖_F / ‖derived‖_F`` (``|cand − derived| / |derived|`` for scalars): 1.0 for a
    candidate twice the derived result, 0.5 for half of it, 2.0 for its negative. 0.0 when both are
    exactly zero; None when the derived value is zero and the candidate is not, or either is missing."""
    if cand is None or derived is None:
        return None
    with mpmath.workdps(DPS):
        fc, fd = _flat(cand), _flat(derived)
        num = mpmath.sqrt(mpmath.fsum((x - y) ** 2 for x, y in zip(fc, fd, strict=False)))
        den = mpmath.sqrt(mpmath.fsum(y ** 2 for y in fd))
        if den == 0:
            return 0.0 if num == 0 else None
        return float(num / den)


def _ratio(a, b):
    """Least-squares ``c`` with ``a ≈ c b`` and the residual ``max|a − c b| / max|a|`` (0 for ``a = 0``)."""
    with mpmath.workdps(DPS):
        fa, fb = _flat(a), _flat(b)
        if not all(mpmath.isfinite(x) for x in fa + fb):
            return None, float("inf")
        bb = mpmath.fsum(y * y for y in fb)
        if not bb:
            return None, float("inf")
        c = mpmath.fsum(x * y for x, y in zip(fa, fb, strict=False)) / bb
        top = _max_abs(fa)
        if top == 0:
            return c, 0.0
        return c, float(_max_abs([x - c * y for x, y in zip(fa, fb, strict=False)]) / top)


def _same(values, tol) -> bool:
    """All ``values`` equal to ``tol`` relative to the largest of them (all zero: equal)."""
    top = _max_abs(values)
    return top == 0 or _max_abs([v - values[0] for v in values]) <= tol * top



def _in_float_range(v) -> bool:
    """Every nonzero entry of ``v`` well inside float64's range (a screen in float64 is then faithful)."""
    if v is None:
        return True
    return all(x == 0 or mpmath.mpf(10) ** -150 < abs(x) < mpmath.mpf(10) ** 150 for x in _flat(v))



__all__ = ["DPS", "EQUAL_TOL", "RECHECK_DPS", "Instance", "NotConverged", "relative_difference"]
