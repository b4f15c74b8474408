"""The rounding model of Gram Newton–Schulz with restarts, propagated per singular value.

Gram Newton–Schulz (J. Zhang, N. Amsel, B. Chen, T. Dao 2026; ``python -m derivations.gram_ns``) runs
an odd-polynomial schedule on the Gram matrix: per singular value ``σ`` of the normalized input its
eigenvalue ``r_0 = σ²`` follows ``r_{t+1} = r_t q_t(r_t)²`` and ``Q`` accumulates ``Q_{t+1} = Q_t q_t(r_t)``
(``q_t(r) = c_0 + c_1 r + … + c_k r^k``); the result is ``x_T = Q_T σ``. A restart before step ``s``
forms ``x_s = Q_s x``, recomputes ``r_s = x_s²`` and resets ``Q = 1``. The authors choose the positions
with a scalar model evaluated on a grid with one fixed negative eigenvalue; :mod:`coeffsearch.restarts`
certifies them under this model (:data:`MODEL`), for a dtype of unit roundoff ``u`` (float16 ``2⁻¹¹``,
bfloat16 ``2⁻⁸``, float32 ``2⁻²⁴``), a stated growth factor ``g`` (default 1) and an accumulation length
``n`` (default 1: each product is accumulated in a wider format and rounded once to the dtype; ``n`` terms
accumulated in the dtype itself round by at most ``γ_n = n u / (1 − n u)``, Higham 2002, §3.1):

* the normalized input is itself rounded to the dtype, ``x_0 = σ(1 + θ) + η``, and so is every restart
  ``x_s = Q x (1 + θ) + η``: besides the relative ``θ``, a shift ``η ∈ [−ν, ν]`` of either sign,
  ``ν = s·u`` (default ``s = 1``: rounding every entry of a matrix of Frobenius norm 1 relatively moves
  each singular value by at most ``‖ΔX‖_2 ≤ ‖ΔX‖_F ≤ u``, Weyl's inequality);
* every formation of the Gram matrix from ``x`` (at the start and at each restart) rounds relatively and
  shifts the eigenvalue by a spurious amount of either sign: ``r = x²(1 + θ) + e`` with ``e ∈ [−δ, δ]``,
  ``δ = g·u`` (``‖X‖_F = 1``, so ``u`` is one unit roundoff of the largest possible eigenvalue);
* every matrix product rounds relatively by a factor ``1 + θ``: the ``k − 1`` products of Horner's rule
  for ``q`` (for a quintic step ``q̃ = c_0 + (c_1 r + c_2 r²)(1 + θ)``), ``Q ← Q q``, both products of
  ``r ← q (r q)``, ``x_s = Q x`` and the final ``Q x``;

with every ``|θ| ≤ γ_n`` (for ``n = 1``, ``γ_1 = u / (1 − u)``).

Every ``θ`` and ``e`` is independent and arbitrary within its interval. :func:`propagate` runs the model
on an interval of ``σ`` in either arithmetic of :mod:`coeffsearch.restart_arithmetic`: the state is the
segment's start ``x``, the virtual iterate ``y = Q x`` and the drift ``d = r − y²`` of the Gram
eigenvalue, so that the step ``y ← y q(y² + d)`` is enclosed by the exact image of ``p(y) = y q(y²)``
plus a mean-value term in ``d``; ``Q`` is the product of the ``q`` intersected with ``y / x``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mpmath
import numpy as np
from mpmath import iv

#: unit roundoff ``u = 2^-p`` of each dtype (round to nearest)
UNIT_ROUNDOFF_BITS = {"float16": 11, "bfloat16": 8, "float32": 24}
DTYPES = tuple(UNIT_ROUNDOFF_BITS)
DEFAULT_GROWTH = "1"
DEFAULT_SHIFT = "1"
MAX_DEVIATION = 1  # criterion (b): every σ in [l, 1] ends in (0, 2)
MODEL = ("input and restarts rounded, x_0 = σ(1+θ) + η, x_s = Q x (1+θ) + η, η ∈ [−ν, ν], ν = s·u; "
         "Gram formation r = x²(1+θ) + e, e ∈ [−δ, δ], δ = g·u; every matrix product "
         "rounds relatively (Horner for q, Q ← Q q, r ← q (r q), restart x_s = Q x, final Q x); every |θ| <= "
         "γ_n = n·u/(1 − n·u), n the accumulation length; all θ, e independent")
MAX_ACCUMULATION = 2 ** 16  # --accumulation: at most this (and n·u < 1)
CRITERIA = "(a) max |Q_t| over σ ∈ [0, 1] < 1/u; (b) max |x_T − 1| over σ ∈ [l, 1] < 1"


class RestartError(ValueError):
    """Bad input for the restart search (a usage error: one line, exit 2)."""


class Uncertifiable(RestartError):
    """No restart positions (of those tried) can be certified; the message names σ and the bound."""


def propagate(ar, steps, flags, sigma, theta_q, theta_r, theta_h, spurious, instance=False, shift=None):
    """The model on ``sigma`` (an interval per piece): ``(max |Q_t| per piece, step of that max, x_T)``.

    Per step ``t``: ``theta_q[t]`` is the relative rounding ``θ`` of the products that form ``Q`` (and
    ``x_s = Q x`` at a restart before ``t``; ``theta_q[T]`` that of the final ``Q x``), ``theta_r[t]`` that
    of the products forming the Gram eigenvalue (its formation, and ``r ← q (r q)``), ``theta_h[t]`` that
    of Horner's products for ``q``, ``spurious[t]`` the eigenvalue ``e`` added at a formation: intervals
    (``[−γ_n, γ_n]``, ``[−δ, δ]``), or points when ``instance`` (a model instance, evaluated as such).
    ``theta_q[0]`` rounds the input: ``x_0 = σ(1 + θ_q[0])`` (no product of ``Q`` uses it: step 0 never
    restarts and starts a fresh ``Q``). ``shift[t]`` is the shift ``η`` of the singular value where ``x``
    is rounded: the input (``t = 0``) and a restart before step ``t`` (None: no shift).

    The state is the segment's start ``x``, the virtual iterate ``y = Q x`` and the drift ``d = r − y²``
    of the Gram eigenvalue: ``y ← y q(y² + d)`` is enclosed as ``p(y) + y d q'(ξ)`` (``p(y) = y q(y²)``,
    ``ξ`` between ``y²`` and ``y² + d``) with the exact image of ``p``, so the dependence of ``r`` on
    ``y`` costs nothing; ``d ← q² (d (1+θ_r)² + y² ((1+θ_r)² − (1+θ_q)²))``; ``Q`` is the product of
    the ``q`` intersected with ``y / x``.
    """
    x = sigma * (theta_q[0] + 1)
    if shift is not None:
        x = x + shift[0]
    y = x
    d = ar.square(x) * theta_r[0] + spurious[0]
    q_acc, q_max, q_step = None, None, None
    last = [t == len(steps) - 1 or flags[t + 1] for t in range(len(steps))]
    for t, step in enumerate(steps):
        grow_q, grow_r = theta_q[t] + 1, theta_r[t] + 1
        if flags[t]:
            x = y * grow_q if shift is None else y * grow_q + shift[t]
            y = x
            d = ar.square(x) * theta_r[t] + spurious[t]
            q_acc = None
        y2 = ar.square(y)
        r = y2 + d
        eta = ar.horner_term(step, r, theta_h[t], instance)
        qt = ar.q_image(step, r) + eta
        moved = ar.p_image(step, y) + y * d * ar.q_prime(step, ar.hull(y2, r)) + y * eta
        if q_acc is None:
            q_acc, factor = qt, 1
        else:
            q_acc, factor = q_acc * qt * grow_q, grow_q
            moved = moved * grow_q
        q_acc = ar.narrow(q_acc, moved, x)
        size = ar.upper_abs(q_acc)
        if q_max is None:
            q_max, q_step = size, np.zeros_like(size, dtype=int) if isinstance(size, np.ndarray) else 0
        elif isinstance(size, np.ndarray):
            q_step = np.where(size > q_max, t, q_step)
            q_max = np.maximum(q_max, size)
        elif size > q_max:
            q_max, q_step = size, t
        if not last[t]:
            d = ar.square(qt) * (d * grow_r * grow_r + y2 * (grow_r * grow_r + (-1) * factor * factor))
        y = moved
    return q_max, q_step, y * (theta_q[len(steps)] + 1)


@dataclass(frozen=True)
class Model:
    """The dtype (its unit roundoff ``u``), the growth factor ``g`` (``δ = g·u``), the lower end ``l`` of (b),
    the accumulation length ``n`` (``|θ| ≤ γ_n``) and the shift factor ``s`` (``ν = s·u``)."""

    dtype: str
    growth: str = DEFAULT_GROWTH
    lower: str = "1e-3"
    accumulation: int = 1
    shift: str = DEFAULT_SHIFT

    def __post_init__(self):
        if self.dtype not in UNIT_ROUNDOFF_BITS:
            raise RestartError(f"argument --dtype: unknown dtype {self.dtype!r}; one of {', '.join(DTYPES)}")
        g, lo = _decimal(self.growth, "--growth"), _decimal(self.lower, "--lower")
        if not 0 <= g <= 2 ** UNIT_ROUNDOFF_BITS[self.dtype]:
            raise RestartError(f"argument --growth: must be in [0, 1/u] = [0, {2 ** UNIT_ROUNDOFF_BITS[self.dtype]}] "
                               f"for {self.dtype} (δ = g·u is at most 1), got {self.growth}")
        if not 0 < lo < 1:
            raise RestartError(f"argument --lower: must be in (0, 1), got {self.lower}")
        s = _decimal(self.shift, "--shift")
        if not 0 <= s <= 2 ** UNIT_ROUNDOFF_BITS[self.dtype]:
            raise RestartError(f"argument --shift: must be in [0, 1/u] = [0, {2 ** UNIT_ROUNDOFF_BITS[self.dtype]}] "
                               f"for {self.dtype}, got {self.shift}")
        n = self.accumulation
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ACCUMULATION:
            raise RestartError(f"argument --accumulation: must be an integer in [1, {MAX_ACCUMULATION}], got {n!r}")
        if n >= 2 ** UNIT_ROUNDOFF_BITS[self.dtype]:
            raise RestartError(f"argument --accumulation: n·u must be below 1 (γ_n = n·u/(1 − n·u)); n = {n} in "
                               f"{self.dtype} needs n < {2 ** UNIT_ROUNDOFF_BITS[self.dtype]}")
        object.__setattr__(self, "lower", repr(lo))  # the binary number the partition holds exactly

    @property
    def u(self) -> mpmath.mpf:
        return mpmath.ldexp(1, -UNIT_ROUNDOFF_BITS[self.dtype])

    def rounding(self):
        """``γ_n = n u / (1 − n u)`` as an interval enclosure: the bound on every ``|θ|``."""
        nu = iv.mpf(self.accumulation) * iv.mpf(self.u)
        return nu / (1 - nu)

    def nu(self):
        """``ν = s·u`` as an interval enclosure: the bound on every shift ``|η|``."""
        return iv.mpf(self.shift) * iv.mpf(self.u)

    def delta(self):
        """``δ = g·u`` as an interval enclosure."""
        return iv.mpf(self.growth) * iv.mpf(self.u)


def _decimal(text, what) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise RestartError(f"argument {what}: not a number: {text!r}") from None
    if not math.isfinite(v):
        raise RestartError(f"argument {what}: must be finite, got {text}")
    return v


def default_lower(design, dtype: str) -> str:
    """The lower end ``l`` of bound (b) when none is given: the schedule's design ``l`` (else ``1e-3``), but at
    least ``2u`` (a singular value below ``ν = u`` may be moved to 0 by the rounding of the input alone, so
    no bound (b) below 1 holds there; bfloat16: ``2⁻⁷``)."""
    lower = float(design) if design else 1e-3
    floor = 2.0 ** (1 - UNIT_ROUNDOFF_BITS[dtype])
    return repr(lower) if lower >= floor else repr(floor)


def check_positions(positions, steps: int) -> tuple:
    """Restart positions as a sorted tuple; :class:`RestartError` for one outside ``[1, steps − 1]``."""
    out = []
    for s in positions:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= steps - 1:
            raise RestartError(f"restart position {s} is outside the schedule: a restart comes after iteration s "
                               f"with 1 <= s <= {steps - 1} for a {steps}-step schedule")
        out.append(s)
    if len(set(out)) != len(out):
        raise RestartError(f"restart positions {tuple(positions)} repeat a position")
    return tuple(sorted(out))


def positions_to_flags(positions, steps):
    """One flag per step: True for a step that starts with a restart (after iteration ``t``, before step ``t``)."""
    return [t in positions for t in range(steps)]


def describe(name, positions, model) -> str:
    """``muon with restarts after iterations 1, 2 in float16 (δ = 1·u)``: the subject of a refusal."""
    where = ("restarts after iterations " + ", ".join(map(str, positions))) if positions else "no restart"
    accumulated = (f", n = {model.accumulation}" if model.accumulation != 1 else "") + (
        f", ν = {model.shift}·u" if model.shift != DEFAULT_SHIFT else "")
    return f"{name or 'the schedule'} with {where} in {model.dtype} (δ = {model.growth}·u{accumulated})"
