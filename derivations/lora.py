"""LoRA pair ``W = W₀ + B A`` (``B``: ``d_out × r``, ``A``: ``r × d_in``), its rules derived by search.

Only the adapter factors move; ``W₀`` is frozen and the first-order change of ``W`` is
``ΔW ≈ ΔB A + B ΔA``. With ``G_W = ∂L/∂W`` (never formed), the stored factor gradients are
``G_B = G_W Aᵀ`` and ``G_A = Bᵀ G_W`` (chain rule). Every update rule below is found by
:func:`derivations.derive` from its problem, stated through the public API; the gauge facts are checked identity
chains (lemma by lemma), as for QK.

* Half-split (``lora.B``, ``lora.A``): each half of ``ΔW`` gets half the budget,
  ``min ⟨G_W, ΔB A⟩ s.t. ‖ΔB A‖_op ≤ ε/2`` and ``min ⟨G_W, B ΔA⟩ s.t. ‖B ΔA‖_op ≤ ε/2``; what moves:
  ``B`` and ``A``, whitened by their partner's Gram root (``C_A = (A Aᵀ)^{1/2}`` for the wide ``A``,
  ``C_B = (BᵀB)^{1/2}``). Side conditions: ``A`` has full row rank, ``B`` full column rank.
* The ``B = 0`` start (``lora.damped_B``, ``lora.damped_A``): LoRA initializes ``B = 0``, where ``B`` has no
  full column rank and the undamped ``A`` problem is degenerate: ``‖B ΔA‖ = 0`` and ``⟨G_W, B ΔA⟩ = 0`` for
  every ``ΔA``, so every ``ΔA`` is a minimizer (none is singled out) and the undamped formula
  ``C_B⁻¹ msign(C_B⁻¹ G_A)`` divides by a singular Gram; near ``B = 0`` its size grows like
  ``1/σ_min(B)``. The damped rules solve their own problems exactly, with the budget in the damped
  whitened norm, ``‖ΔB C_{A,λ}‖_op ≤ ε/2`` and ``‖C_{B,λ} ΔA‖_op ≤ ε/2`` (``C_{B,λ} = (BᵀB + λI)^{1/2}``,
  invertible for ``λ > 0`` whatever ``B`` is). At ``B = 0``: ``ΔA = 0`` (``G_A = 0``) and ``B`` takes the
  whole first step, ``ΔB = −(ε/2) msign(G_B C_{A,λ}⁻¹) C_{A,λ}⁻¹``; ``--check`` measures both and the
  undamped blow-up.
* The joint form (``lora.joint``): one spectral sign over both halves side by side,
  ``‖[ΔB A | ΔAᵀ Bᵀ]‖_op ≤ ε/2``. The halves ``ΔB A`` (``d_out × d_in``) and ``(B ΔA)ᵀ`` (``d_in × d_out``) sit
  side by side only when ``d_out = d_in``: the joint form exists for square adapters (it identifies the
  output space with the input space, as the joint QK rule identifies the two sides of ``W_Q W_Kᵀ``), and
  then it is the block-whitened problem with the stacked variable ``Δ = [ΔB | ΔAᵀ]`` and the block-diagonal
  partner ``P = blockdiag(Aᵀ, B)``. For ``d_out ≠ d_in`` a one-sign form couples the two halves only in the
  whitened ``r``-space, whose coordinates depend on the gauge; this module does not offer it.
* The ``GL(r)`` gauge (``lora.vertical`` … ``lora.balance``): ``(B S, S⁻¹ A)`` leaves ``B A`` unchanged;
  the vertical directions ``(B X, −X A)``, the horizontality condition ``BᵀΔ_B = Δ_A Aᵀ``, the raw gradients
  horizontal, the momentum projection (``BᵀB X + X A Aᵀ = m_A Aᵀ − Bᵀ m_B``, the orthogonal projection: checked
  against dense least squares), and the balancing gauge: the LoRA gauge is the QK gauge of
  ``(W_Q, W_K) = (B, Aᵀ)`` (with ``S_QK = S⁻ᵀ``), so :mod:`derivations.balance` balances the pair and
  ``lora.balance`` shows its Grams equal (``B'ᵀB' = A'A'ᵀ``). ``--check`` measures how damping breaks the
  ``GL(r)`` equivariance of the half-split rule, ``ΔB(B S, S⁻¹A) = ΔB(B, A) S`` at ``λ = 0``.

Emitted: ``lora_halfsplit(B, A, G_B, G_A, eps=, damping=)`` and ``lora_horizontal_projection(B, A, m_B, m_A)``
on the stored layouts ``B (..., d_out, r)``, ``A (..., r, d_in)``. Balancing is
``numerics.emitted.balance.balance_qk(B, Aᵀ)`` (returns ``(B', A'ᵀ)``); the joint form of a square adapter is
``numerics.emitted.joint.joint_qk(B, Aᵀ, G_B, G_Aᵀ)`` (returns ``(ΔB, ΔAᵀ)``).

Run ``python -m derivations.lora --help``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import scipy.linalg
from sympy import Add, Rational
from sympy.matrices.expressions import MatrixSymbol

from derivations import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    Context,
    Derivation,
    EmittedFunction,
    FactMatrix,
    GramSqrt,
    Inner,
    OpNorm,
    Problem,
    RuleModule,
    balance,
    derive,
    dimension,
    identity_chain,
    positive_symbol,
    product,
    total,
    transpose,
)
from derivations import lemmas as L
from derivations.printing.codegen import DerivedOutput
from derivations.sylvester import sylvester_operator
from derivations.vocabulary.algebra import with_damping
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import BLOCK_DIAGONAL, RegularizedSylvester

d_out, d_in, r = dimension("d_out"), dimension("d_in"), dimension("r")
eps, lam = positive_symbol("epsilon"), positive_symbol("lambda")
BUDGET = eps * Rational(1, 2)

B = FactMatrix("B", d_out, r, [FULL_COLUMN_RANK])
A = FactMatrix("A", r, d_in, [FULL_ROW_RANK])  # wide: the LoRA down-projection
G_W = MatrixSymbol("G_W", d_out, d_in)  # ∂L/∂W, never formed
G_B, G_A = MatrixSymbol("G_B", d_out, r), MatrixSymbol("G_A", r, d_in)
dB, dA = MatrixSymbol("dB", d_out, r), MatrixSymbol("dA", r, d_in)
#: the stored factor gradients, by the chain rule through W = W₀ + B A
GRADIENTS = {G_B: product(G_W, transpose(A)), G_A: product(transpose(B), G_W)}


def context() -> Context:
    """Check sizes: tall output, wide input, square, and ``r = d``; symbolic at small sizes."""
    return Context(definitions=GRADIENTS,
                   check_dims=[{d_out: 7, d_in: 5, r: 2}, {d_out: 4, d_in: 9, r: 3}, {d_out: 3, d_in: 3, r: 3}],
                   symbolic_dims={d_out: 3, d_in: 3, r: 2}, mpmath_dims={d_out: 5, d_in: 4, r: 2})


def b_problem(constraint=None) -> Problem:
    """``min ⟨G_W, ΔB A⟩ s.t. ‖ΔB A‖_op ≤ ε/2`` (or the given constraint, e.g. the damped whitened norm)."""
    change = product(dB, A)
    return Problem(dB, Inner(G_W, change), OpNorm(change) if constraint is None else constraint, BUDGET)


def a_problem(constraint=None) -> Problem:
    """``min ⟨G_W, B ΔA⟩ s.t. ‖B ΔA‖_op ≤ ε/2`` (or the given constraint)."""
    change = product(B, dA)
    return Problem(dA, Inner(G_W, change), OpNorm(change) if constraint is None else constraint, BUDGET)


@cache
def b_side() -> Derivation:
    """``ΔB = −(ε/2) msign(G_B C_A⁻¹) C_A⁻¹``, found by search (``A`` whitened from the left: ``A = C_A U_A``)."""
    return derive(b_problem(), context(), name="lora.B", title="LoRA half-split: B update",
                  statement="half budget ε/2 on the B half of ΔW = ΔB A + B ΔA")


@cache
def a_side() -> Derivation:
    """``ΔA = −(ε/2) C_B⁻¹ msign(C_B⁻¹ G_A)``, found by search."""
    return derive(a_problem(), context(), name="lora.A", title="LoRA half-split: A update",
                  statement="half budget ε/2 on the A half of ΔW = ΔB A + B ΔA")


B_ANY = FactMatrix("B", d_out, r)  # no facts: B = 0 allowed (the LoRA start)
A_ANY = FactMatrix("A", r, d_in)
GRADIENTS_ANY = {G_B: product(G_W, transpose(A_ANY)), G_A: product(transpose(B_ANY), G_W)}


def damped_context() -> Context:
    """As :func:`context`, with partners that carry no rank fact."""
    return Context(definitions=GRADIENTS_ANY, check_dims=context().check_dims,
                   symbolic_dims=context().symbolic_dims, mpmath_dims=context().mpmath_dims)


@cache
def damped_b() -> Derivation:
    """``ΔB = −(ε/2) msign(G_B C_{A,λ}⁻¹) C_{A,λ}⁻¹``, exact for ``‖ΔB C_{A,λ}‖_op ≤ ε/2``, ``λ > 0``, any ``A``."""
    change = product(dB, A_ANY)
    problem = Problem(dB, Inner(G_W, change), OpNorm(product(dB, GramSqrt(A_ANY, lam, "left"))), BUDGET)
    return derive(problem, damped_context(), name="lora.damped_B", title="LoRA damped: B update (any A)",
                  statement="budget ε/2 in the damped whitened norm ‖ΔB C_{A,λ}‖_op, λ > 0")


@cache
def damped_a() -> Derivation:
    """``ΔA = −(ε/2) C_{B,λ}⁻¹ msign(C_{B,λ}⁻¹ G_A)``, exact for ``‖C_{B,λ} ΔA‖_op ≤ ε/2``, ``λ > 0``, any ``B``
    (``B = 0``: ``ΔA = 0``)."""
    change = product(B_ANY, dA)
    problem = Problem(dA, Inner(G_W, change), OpNorm(product(GramSqrt(B_ANY, lam), dA)), BUDGET)
    return derive(problem, damped_context(), name="lora.damped_A",
                  title="LoRA damped: A update (any B, B = 0 included)",
                  statement="budget ε/2 in the damped whitened norm ‖C_{B,λ} ΔA‖_op, λ > 0")


# ---- the joint form (square adapters) ---------------------------------------------------------
d_sq, m2, n2 = dimension("d"), dimension("m"), dimension("n")  # d = d_out = d_in; m = 2r, n = 2d
#: blockdiag(Aᵀ, B): the block-diagonal partner of the stacked variable [ΔB | ΔAᵀ]
P = FactMatrix("P", n2, m2, [FULL_COLUMN_RANK, BLOCK_DIAGONAL])
G_tilde = MatrixSymbol("G_tilde", d_sq, n2)  # [G_W | G_Wᵀ]
G_stack = MatrixSymbol("G", d_sq, m2)  # [G_B | G_Aᵀ] = G̃ P (chain rule)
#: sizes of the module's other symbols at the joint's checks (a square adapter; the cross-checker samples them all)
SQUARE = {d_out: 4, d_in: 4, r: 2}
Delta = MatrixSymbol("Delta", d_sq, m2)  # [ΔB | ΔAᵀ]


@cache
def joint() -> Derivation:
    """``[ΔB | ΔAᵀ] = −(ε/2) msign(G C_P⁻¹) C_P⁻¹``, ``G = [G_B | G_Aᵀ]``, ``C_P = blockdiag(C_A, C_B)``: found
    by search from ``min ⟨G̃, Δ Pᵀ⟩ s.t. ‖Δ Pᵀ‖_op ≤ ε/2`` (``Δ Pᵀ = [ΔB A | ΔAᵀ Bᵀ]``,
    ``⟨G̃, Δ Pᵀ⟩ = ⟨G_W, ΔB A + B ΔA⟩``)."""
    change = product(Delta, transpose(P))
    ctx = Context(definitions={G_stack: product(G_tilde, P)},
                  check_dims=[{d_sq: 6, m2: 4, n2: 12, **SQUARE}, {d_sq: 5, m2: 6, n2: 10, **SQUARE}],
                  symbolic_dims={d_sq: 3, m2: 2, n2: 4, **SQUARE}, mpmath_dims={d_sq: 4, m2: 4, n2: 8, **SQUARE})
    return derive(Problem(Delta, Inner(G_tilde, change), OpNorm(change), BUDGET), ctx, name="lora.joint",
                  title="LoRA joint form (square adapter): one sign over both halves",
                  statement="‖[ΔB A | ΔAᵀ Bᵀ]‖_op ≤ ε/2 with Δ = [ΔB | ΔAᵀ], P = blockdiag(Aᵀ, B), d_out = d_in")


# ---- the GL(r) gauge -------------------------------------------------------------------------
X = MatrixSymbol("X", r, r)  # a gauge generator (the tangent of S at I)
D_B, D_A = MatrixSymbol("Delta_B", d_out, r), MatrixSymbol("Delta_A", r, d_in)
m_B, m_A = MatrixSymbol("m_B", d_out, r), MatrixSymbol("m_A", r, d_in)


def vertical(x):
    """``(B x, −x A)``: the tangent of the gauge orbit ``(B S, S⁻¹ A)`` at ``S = I + t x`` (the problem statement)."""
    return product(B, x), product(-1, x, A)


def tangent(db, da):
    """First-order change of ``W``: ``ΔB A + B ΔA``."""
    return total(product(db, A), product(B, da))


def horizontality_residual(db, da):
    """``BᵀΔ_B − Δ_A Aᵀ``: zero exactly for horizontal pairs (derived in :func:`horizontality`)."""
    return total(product(transpose(B), db), product(-1, da, transpose(A)))


def gauge_context(defs=None) -> Context:
    return Context(definitions=defs or {}, check_dims=[{d_out: 6, d_in: 5, r: 2}, {d_out: 4, d_in: 7, r: 3},
                                                       {d_out: 3, d_in: 3, r: 3}],
                   symbolic_dims={d_out: 3, d_in: 3, r: 2}, mpmath_dims={d_out: 4, d_in: 5, r: 2})


@cache
def vertical_invisible():
    der = identity_chain("lora.vertical", "LoRA gauge: vertical directions leave W unchanged",
                         tangent(*vertical(X)), gauge_context(), statement="T(B X, −X A) = B X A − B X A")
    der.apply(L.RING)
    return der


@cache
def horizontality():
    vb, va = vertical(X)
    der = identity_chain("lora.horizontality", "LoRA gauge: the Frobenius-horizontality condition",
                         Inner(D_B, vb) + Inner(D_A, va), gauge_context(),
                         statement="⟨(Δ_B, Δ_A), (B X, −X A)⟩; zero for all X iff BᵀΔ_B = Δ_A Aᵀ")
    der.apply(L.ADJOINT_MOVE, variable=X)
    return der


@cache
def gradients_horizontal():
    der = identity_chain("lora.gradients", "LoRA gauge: raw factor gradients are horizontal",
                         horizontality_residual(G_B, G_A), gauge_context(GRADIENTS), statement="BᵀG_B − G_A Aᵀ")
    der.apply(L.CHAIN_RULE, gradients=GRADIENTS, reverse=True)
    der.apply(L.RING)
    return der


def adjoint_of_vertical(db, da):
    """``V*(Δ_B, Δ_A)``: the coefficient of ``X`` in the derived horizontality identity."""
    formula = horizontality().formula
    terms = formula.args if isinstance(formula, Add) else (formula,)
    coeffs = [t.args[0] if t.args[1] == X else t.args[1] for t in terms]
    return total(*coeffs).xreplace({D_B: db, D_A: da})


@cache
def normal_operator():
    """``V*(V(X)) = BᵀB X + X A Aᵀ``, collected by the engine's normal form."""
    return identity_chain("lora.normal_operator", "LoRA horizontal projection: the normal operator V*V",
                          adjoint_of_vertical(*vertical(X)), gauge_context(),
                          statement="V*(V(X)) with V(X) = (B X, −X A) and V* read off the horizontality identity")


def projection_coefficient():
    """``X`` with ``V*V(X) = −V*(m)``: the Sylvester equation ``BᵀB X + X A Aᵀ = m_A Aᵀ − Bᵀ m_B``."""
    left, right, damping = sylvester_operator(normal_operator().formula, X, side="inner")
    v_star = adjoint_of_vertical(m_B, m_A)
    negated = [product(-1, t) for t in (v_star.args if isinstance(v_star, Add) else (v_star,))]
    return RegularizedSylvester(left, right, damping, total(*negated), "inner")


def projected():
    """``m + V(X)``: the orthogonal projection of ``(m_B, m_A)`` onto the horizontal space."""
    vb, va = vertical(projection_coefficient())
    return total(m_B, vb), total(m_A, va)


@cache
def projection_horizontal():
    der = identity_chain("lora.projection", "LoRA gauge: the projected momentum is horizontal",
                         horizontality_residual(*projected()), gauge_context(),
                         statement="Bᵀ(m_B + B X) − (m_A − X A)Aᵀ with X from the Sylvester equation")
    der.apply(L.RING)
    der.apply(L.SYLVESTER_EQUATION)
    der.apply(L.RING)
    return der


@cache
def projection_same_change():
    der = identity_chain("lora.projection_change", "LoRA gauge: the projection does not change W to first order",
                         tangent(*projected()), gauge_context(), statement="T(m_B + B X, m_A − X A)")
    der.apply(L.RING)
    return der


#: the LoRA pair as a QK pair: W_Q = B, W_K = Aᵀ (stored tall, so that the QK balance applies verbatim)
A_T = FactMatrix("A_T", d_in, r, [FULL_COLUMN_RANK])


def balanced_pair():
    """``(B', A'ᵀ)``: the QK balance (:mod:`derivations.balance`) of ``(W_Q, W_K) = (B, Aᵀ)``. The QK gauge
    ``(W_Q S⁻ᵀ, W_K S)`` is the LoRA gauge ``(B T, T⁻¹ A)`` with ``T = S⁻ᵀ``."""
    sub = {balance.W_Q: B, balance.W_K: A_T}
    return tuple(f.xreplace(sub) for f in balance.balanced_factors())


@cache
def balanced():
    """Theorem: the balanced LoRA factors have equal Grams, ``B'ᵀB' = A' A'ᵀ`` (``A'ᵀ`` stored tall)."""
    b_bal, a_t_bal = balanced_pair()
    der = identity_chain("lora.balance", "LoRA gauge: the balanced factors have equal Grams",
                         total(product(transpose(b_bal), b_bal), product(-1, transpose(a_t_bal), a_t_bal)),
                         gauge_context(), statement="B'ᵀB' − A'A'ᵀ with (B', A'ᵀ) the QK balance of (B, Aᵀ)")
    der.apply(balance.POWER_ADD)
    der.apply(L.RING)
    return der


def derivations():
    """Every derivation of this module, in reading order."""
    return [b_side(), a_side(), damped_b(), damped_a(), joint(), vertical_invisible(), horizontality(),
            gradients_horizontal(), normal_operator(), projection_horizontal(), projection_same_change(), balanced()]


def emitted_functions():
    q, k = projected()
    return [
        EmittedFunction(
            "lora_halfsplit", "Half-split LoRA update of Compositional Muon (W = W0 + B A)",
            [B, A, G_B, G_A], [("dB", b_side()), ("dA", a_side())],
            [("B (..., d_out, r), A (..., r, d_in), G_B = G_W Aᵀ, G_A = Bᵀ G_W (the stored gradients). Each half of "
              "ΔW gets ε/2: ‖ΔB C_A‖_op = ‖C_B ΔA‖_op = ε/2 with C_A = (A Aᵀ + λI)^(1/2), C_B = (BᵀB + λI)^(1/2), "
              "hence ‖ΔB A‖_op, ‖B ΔA‖_op ≤ ε/2 (equality at λ = 0). At the LoRA start B = 0: with damping > 0 "
              "ΔA = 0 and B takes the first step (lora.damped_A, lora.damped_B); with damping = 0 the pseudo-inverse "
              "root also gives ΔA = 0 at B = 0 exactly, but ‖ΔA‖ grows like 1/σ_min(B) for small nonzero B.")]),
        EmittedFunction(
            "lora_horizontal_projection", "Project LoRA momentum buffers onto the horizontal space (gauge-fixed)",
            [B, A, m_B, m_A],
            [("m_B_h", DerivedOutput(q, projection_horizontal())),
             ("m_A_h", DerivedOutput(k, projection_horizontal()))],
            ["X solves (BᵀB + λI) X + X (A Aᵀ + λI) = m_A Aᵀ − Bᵀ m_B; exact at λ = 0: the result satisfies "
             "Bᵀ m_B_h = m_A_h Aᵀ and changes W as (m_B, m_A) does, to first order."],
            needs_eps=False),
    ]


def measurements(rng):
    """The ``B = 0`` start, the undamped blow-up near it, the gauge (projection against least squares,
    balance, equivariance against damping) and the joint form against half-split."""
    out = []
    a, gw = rng.standard_normal((3, 9)), rng.standard_normal((7, 9))
    for damping in (1e-3, 1e-1):
        values = {"A": a, "B": np.zeros((7, 3)), "G_B": gw @ a.T, "G_A": np.zeros((3, 9)), "epsilon": 1.0,
                  "lambda": damping}
        db, da = evaluate_on(damped_b().formula, values), evaluate_on(damped_a().formula, values)
        out.append((f"B = 0, damping {damping:g}: ‖ΔA‖_F (zero: A waits for B)", float(np.linalg.norm(da)), 1e-12))
        out.append((f"B = 0, damping {damping:g}: ‖ΔB A‖_op / (ε/2) (B takes the step; at most 1)",
                    float(np.linalg.norm(db @ a, 2) / 0.5), 1 + 1e-10))
    for scale in (1e-1, 1e-3, 1e-5):
        b = scale * rng.standard_normal((7, 3))
        da = evaluate_on(a_side().formula, {"B": b, "G_A": b.T @ gw, "epsilon": 1.0})
        out.append((f"undamped, ‖B‖ ~ {scale:g}: ‖ΔA‖_op (grows like 1/σ_min(B))", float(np.linalg.norm(da, 2)), None))
    out += _gauge_measurements(rng) + _joint_measurements(rng)
    return out


def _gauge_measurements(rng):
    b, a, mb, ma = (rng.standard_normal(s) for s in ((8, 3), (3, 6), (8, 3), (3, 6)))
    values = {"B": b, "A": a, "m_B": mb, "m_A": ma}
    got = [evaluate_on(x, values) for x in projected()]
    ref = least_squares_projection(b, a, mb, ma)
    out = [("projection vs dense least squares over the vertical directions, relative error",
            float(max(np.abs(g - f).max() / np.abs(f).max() for g, f in zip(got, ref, strict=True))), 1e-10)]
    b_bal, a_t_bal = (evaluate_on(x, {"B": 4 * b, "A_T": a.T / 4}) for x in balanced_pair())
    out.append(("balance: Gram gap ‖B'ᵀB' − A'A'ᵀ‖ / ‖A'A'ᵀ‖ (before: "
                f"{np.abs(16 * b.T @ b - a @ a.T / 16).max() / np.abs(a @ a.T / 16).max():.3g})",
                float(np.abs(b_bal.T @ b_bal - a_t_bal.T @ a_t_bal).max() / np.abs(a_t_bal.T @ a_t_bal).max()), 1e-10))
    out.append(("balance: product change ‖B'A' − BA‖ / ‖BA‖",
                float(np.abs(b_bal @ a_t_bal.T - b @ a).max() / np.abs(b @ a).max()), 1e-10))
    s = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    gw = rng.standard_normal((8, 6))
    for lam in (0.0, 1e-4, 1e-2, 1.0):
        def db(b_, a_, lam=lam):
            return evaluate_on(with_damping(b_side().formula, lam), {"A": a_, "G_B": gw @ a_.T, "epsilon": 1.0})
        ref = db(b, a) @ s
        out.append((f"half-split GL(r) equivariance ‖ΔB(BS, S⁻¹A) − ΔB(B, A) S‖ / ‖ΔB S‖, damping {lam:g}",
                    float(np.linalg.norm(db(b @ s, np.linalg.solve(s, a)) - ref) / np.linalg.norm(ref)),
                    1e-10 if lam == 0 else None))  # damping breaks the equivariance: shown, not a result
    return out


def least_squares_projection(b, a, mb, ma):
    """``m + V(X*)`` with ``X* = argmin ‖m + V(X)‖_F²`` by dense least squares on vectorized ``V``."""
    k = b.shape[1]
    cols = []
    for idx in range(k * k):
        e = np.zeros(k * k)
        e[idx] = 1.0
        vb, va = (evaluate_on(v, {"B": b, "A": a, "X": e.reshape(k, k)}) for v in vertical(X))
        cols.append(np.concatenate([np.ravel(vb), np.ravel(va)]))
    v = np.stack(cols, axis=1)
    m = np.concatenate([np.ravel(mb), np.ravel(ma)])
    x, *_ = np.linalg.lstsq(v, -m, rcond=None)
    res = m + v @ x
    return res[:mb.size].reshape(mb.shape), res[mb.size:].reshape(ma.shape)


def _joint_measurements(rng):
    """Square adapters: the joint update's halves, and its distance from half-split."""
    out = []
    for label, rank in (("r = 3 of d = 12", 3), ("r = 6 of d = 12", 6)):
        b, a, gw = rng.standard_normal((12, rank)), rng.standard_normal((rank, 12)), rng.standard_normal((12, 12))
        gb, ga = gw @ a.T, b.T @ gw
        delta = evaluate_on(joint().formula, {"P": scipy.linalg.block_diag(a.T, b),
                                              "G": np.concatenate([gb, ga.T], axis=1), "epsilon": 1.0})
        db, da = delta[:, :rank], delta[:, rank:].T
        halves = np.concatenate([db @ a, da.T @ b.T], axis=1)
        out.append((f"joint, {label}: ‖[ΔB A | ΔAᵀBᵀ]‖_op / (ε/2) (= 1: the budget is spent)",
                    float(np.linalg.norm(halves, 2) / 0.5), (1 - 1e-10, 1 + 1e-10)))
        half = evaluate_on(b_side().formula, {"A": a, "G_B": gb, "epsilon": 1.0})
        out.append((f"joint vs half-split ΔB, {label}, relative difference",
                    float(np.linalg.norm(db - half) / np.linalg.norm(half)), None))
    return out


def rule_module():
    return RuleModule(name="lora", title="LoRA rules of Compositional Muon (W = W₀ + B A)",
                      derivations=derivations, functions=emitted_functions, scalars={eps: "eps"},
                      measurements=measurements, description=__doc__.split("\n\n")[0],
                      examples=["python -m derivations.lora --emit jax > lora_jax.py",
                                "python -m derivations.lora --emit text",
                                "python -m derivations.lora --check"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
