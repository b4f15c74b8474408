"""Lemma 1: steepest descent in the operator-norm ball (Muon), certified by duality."""

from __future__ import annotations

import mpmath
import numpy as np
from sympy.matrices.expressions import MatrixSymbol

from derivations.lemmas.base import _NP, Lemma, NotApplicable
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, tidy
from derivations.vocabulary.evaluate import evaluate
from derivations.vocabulary.nodes import Inner, Msign, NuclearNorm, OpNorm, dimension, positive_symbol


# ---- Lemma 1: linear steepest descent (Muon) ----------------------------------------------
def _lsd_rewrite(problem_expr, **_):
    raise NotApplicable("Lemma 1 is applied by Derivation.solve, not as a rewrite")


def _lsd_solution(a, beta):
    """``(−β msign(A), −β ‖A‖_*)``: the argmin and the optimal value that Lemma 1 states."""
    return tidy(product(-beta, Msign(a))), -beta * NuclearNorm(a)


def singular_values(a, backend):
    """Singular values of ``a`` from an SVD of the backend's own (float64 LAPACK or mpmath)."""
    if backend.name == "mpmath":
        return [v for v in mpmath.svd_r(a, compute_uv=False)]
    return [float(v) for v in np.linalg.svd(np.asarray(a, dtype=float), compute_uv=False)]


def operator_ball_certificate(a, z, value, beta, backend, rng=None, directions=None) -> dict:
    """Duality certificate that ``z`` solves ``min ⟨a, Z⟩ s.t. ‖Z‖_op ≤ β`` with optimal ``value``.

    Weak duality (Hölder): every feasible ``Z`` has ``⟨a, Z⟩ ≥ −‖a‖_* ‖Z‖_op ≥ −β ‖a‖_*``, so a
    feasible ``z`` with ``⟨a, z⟩ = −β ‖a‖_*`` is optimal, whatever formula produced it. The nuclear
    norm comes from an SVD here, independently of the claimed solution. Relative errors:

    * ``feasible``: ``max(0, ‖z‖_op − β) / β``;
    * ``attains the dual bound``: ``|⟨a, z⟩ + β ‖a‖_*|`` (a suboptimal ``z`` stays above it);
    * ``stated value``: ``|value + β ‖a‖_*|``;
    * ``no improving direction`` (float64, with ``rng``): moving ``z`` along random directions
      (``directions(rng)`` draws them; default Gaussian) and scaling back into the ball never
      lowers ``⟨a, ·⟩`` (a first-order test of the optimality condition).
    """
    dual = -beta * sum(singular_values(a, backend))
    scale = max(1.0, abs(float(dual)))
    attained = backend.inner(a, z)
    out = {"feasible": max(0.0, float(backend.op_norm(z) - beta)) / float(beta),
           "attains the dual bound": abs(float(attained - dual)) / scale,
           "stated value": abs(float(value - dual)) / scale}
    if rng is not None and backend.name == "float64":
        out["no improving direction"] = no_improving_direction(a, z, beta, backend.op_norm, backend, rng, directions,
                                                               scale)
    return out


def no_improving_direction(a, z, beta, norm, backend, rng, directions=None, scale=1.0) -> float:
    """First-order optimality test of ``z`` on ``min ⟨a, Z⟩ s.t. norm(Z) ≤ β``: moving ``z`` along random
    directions (``directions(rng)``; default Gaussian) and scaling back into the ball never lowers
    ``⟨a, ·⟩``. Returns the largest relative improvement found (0 when none)."""
    draw = directions or (lambda g: g.standard_normal(np.shape(z)))
    attained, worst = backend.inner(a, z), 0.0
    for _ in range(6):
        d = draw(rng)
        for t in (1e-3, 1e-1):
            y = z + t * d * max(1.0, float(np.max(np.abs(z))))
            y = y * min(1.0, float(beta) / float(norm(y)))
            worst = max(worst, (attained - backend.inner(a, y)) / scale)
    return max(0.0, worst - 1e-12)


def _lsd_check(rng, lemma):
    """Lemma 1's solution, certified by duality on random tall, square and wide ``A``.

    The lemma's ``solution`` function builds ``(argmin, value)`` symbolically; both are evaluated
    and checked with :func:`operator_ball_certificate` (nuclear norm from an SVD, feasibility,
    attained dual bound, stated value, no improving direction).
    """
    errors = {}
    beta = positive_symbol("beta")
    for rows, cols in ((6, 4), (5, 5), (3, 7)):
        a = MatrixSymbol("A", rows, cols)
        argmin, value = lemma.solution(a, beta)
        env = {a: rng.standard_normal((rows, cols)), beta: float(rng.uniform(0.5, 2.0))}
        z, v = evaluate(argmin, env), evaluate(value, env)
        for name, err in operator_ball_certificate(env[a], np.asarray(z), v, env[beta], _NP, rng).items():
            errors[name] = max(errors.get(name, 0.0), err)
    return errors


def _lsd_statement() -> Statement:
    """Lemma 1 is an argmin, not an identity: its statement is the three facts it follows from, each checked
    exactly. ``Z* = −β msign(A)`` attains ``⟨A, Z*⟩ = −β ‖A‖_*``; it is feasible, ``‖Z*‖_op ≤ β``; and every
    ``Z`` has ``⟨A, Z⟩ ≥ −‖A‖_* ‖Z‖_op`` (Hölder), so no ``Z`` of the ball goes below ``−β ‖A‖_*``. A step that
    cites it is a solve step, certified by duality on its instances (not matched by the trusted kernel)."""
    m, n = dimension("m"), dimension("n")
    a, z, beta = MatrixSymbol("A", m, n), MatrixSymbol("Z", m, n), positive_symbol("beta")
    best = product(-beta, Msign(a))
    return Statement((Clause(Inner(a, best), -beta * NuclearNorm(a)), Clause(OpNorm(best), beta, "<="),
                      Clause(-NuclearNorm(a) * OpNorm(z), Inner(a, z), "<=")),
                     sizes=({m: 6, n: 4}, {m: 20, n: 16}))


LINEAR_STEEPEST_DESCENT = Lemma(
    key="linear_steepest_descent", number="1", title="Linear steepest descent (Muon)",
    statement=_lsd_statement(),
    conditions=(r"\text{hence } \operatorname*{argmin}_{\|Z\|_{\mathrm{op}} \le \beta} \langle A, Z\rangle"
                r" = -\beta \operatorname{msign}(A) \text{ with value } -\beta \|A\|_{*}",),
    rewrite=_lsd_rewrite, check=_lsd_check, solution=_lsd_solution,
    not_modelled="certified by duality (nuclear norm from an SVD), not symbolically",
)
