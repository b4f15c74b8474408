"""Sylvester-regularized QK rule: the overdetermined system and its regularized normal equation.

The first-order product change ``T(ΔQ, ΔK) = ΔQ W_Kᵀ + W_Q ΔKᵀ`` has rank at most ``2 d_h``, so it
cannot reach the full-rank Muon target ``D = −ε msign(G_M)``. The module derives, with the engine:

* the adjoint ``T*(H) = (H W_K, Hᵀ W_Q)`` from ``⟨H, T(ΔQ, ΔK)⟩`` (linearity, adjoint moves);
* the step as the solution of the regularized least-squares problem
  ``min ‖T(ΔQ, ΔK) − D‖_F² + μ‖(ΔQ, ΔK)‖_F²`` (``μ = 2λ``): its normal equations give
  ``(T*T + μI)⁻¹ T* D``, and the push-through identity ``(T*T + μI)⁻¹ T* = T* (TT* + μI)⁻¹`` turns
  it into ``T*(H)`` with ``(TT* + μI) H = D``. The engine computes ``TT* + μI`` from the adjoint
  (``T(T*(H)) + μH``, collected by the ring lemma) and the Sylvester operator is read off it:
  ``(W_QW_Qᵀ + λI) H + H (W_KW_Kᵀ + λI) = D``, so nothing about ``H`` is typed by hand;
* the achieved product change ``T(T*(H)) = D − 2λH``.

``--check`` also solves the least-squares problem independently (vectorized ``T``, dense normal
equations) and reports the distance to the derived step.

The emitted ``sylvester_qk`` solves the regularized equation either with the rank-``d_h``
structure (thin SVDs of the factors, ``O(d² d_h)``) or densely (Bartels–Stewart, ``O(d³)``).
"""

from __future__ import annotations

import contextlib
from functools import cache

import numpy as np
from sympy import Add, S
from sympy.matrices.expressions import MatAdd, MatMul, MatrixSymbol

from derivations import lemmas as L
from derivations.engine.derivation import Context, DerivationError, identity_chain
from derivations.engine.rule import EmittedFunction, RuleModule
from derivations.printing.codegen import DerivedOutput
from derivations.vocabulary.algebra import product, total, transpose
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FactMatrix,
    Inner,
    Msign,
    RegularizedSylvester,
    dimension,
    positive_symbol,
)

d, d_h = dimension("d"), dimension("d_h")
eps = positive_symbol("epsilon")
lam = positive_symbol("lambda")
W_Q = FactMatrix("W_Q", d, d_h, [FULL_COLUMN_RANK])
W_K = FactMatrix("W_K", d, d_h, [FULL_COLUMN_RANK])
G_M = MatrixSymbol("G_M", d, d)
H = MatrixSymbol("H", d, d)
dQ = MatrixSymbol("dW_Q", d, d_h)
dK = MatrixSymbol("dW_K", d, d_h)
TARGET = product(-eps, Msign(G_M))  # D = −ε msign(G_M), the unconstrained Muon step on M
MU = 2 * lam  # weight of ‖(ΔQ, ΔK)‖_F² in the regularized least squares


def forward(dq, dk):
    """``T(ΔQ, ΔK) = ΔQ W_Kᵀ + W_Q ΔKᵀ``: the problem statement's linear map."""
    return total(product(dq, transpose(W_K)), product(W_Q, transpose(dk)))


def context() -> Context:
    return Context(check_dims=[{d: 6, d_h: 2}, {d: 5, d_h: 3}], symbolic_dims={d: 3, d_h: 2},
                   mpmath_dims={d: 4, d_h: 2}, scalars={})


@cache
def adjoint():
    """``⟨H, T(ΔQ, ΔK)⟩ = ⟨H W_K, ΔQ⟩ + ⟨Hᵀ W_Q, ΔK⟩``, i.e. ``T*(H) = (H W_K, Hᵀ W_Q)``."""
    der = identity_chain("sylvester.adjoint", "Sylvester rule: the adjoint of T", Inner(H, forward(dQ, dK)),
                         context(), statement="⟨H, T(ΔQ, ΔK)⟩ for T(ΔQ, ΔK) = ΔQ W_Kᵀ + W_Q ΔKᵀ")
    der.apply(L.INNER_LINEARITY)
    der.apply(L.ADJOINT_MOVE, variable=dQ)
    der.apply(L.ADJOINT_MOVE, variable=dK)
    return der


def adjoint_components(h):
    """``T*(h)`` read off the adjoint derivation: the coefficients of ``ΔQ`` and ``ΔK``."""
    terms = adjoint().formula.args if isinstance(adjoint().formula, Add) else (adjoint().formula,)
    parts = {}
    for t in terms:
        coeff, var = t.args if t.args[1] in (dQ, dK) else t.args[::-1]
        parts[var] = coeff.xreplace({H: h})
    return parts[dQ], parts[dK]


@cache
def normal_operator():
    """``(TT* + μI)(H) = T(T*(H)) + μH`` with ``μ = 2λ``, ``T*`` read off :func:`adjoint`."""
    q, k = adjoint_components(H)
    der = identity_chain("sylvester.normal_operator", "Sylvester rule: the regularized normal operator TT* + μI",
                         total(forward(q, k), product(MU, H)), context(),
                         statement="T(T*(H)) + μH with μ = 2λ: the operator T T* + μI of the push-through form "
                                   "T*(T T* + μI)⁻¹, already collected by the normal form")
    with contextlib.suppress(DerivationError):  # nothing left to collect: the normal form is the collected operator
        der.apply(L.RING)
    return der


def sylvester_operator(expr, h, side: str = "outer"):
    """``(A, B, λ)`` of the regularized Sylvester operator applied to ``h``, read off ``expr``:
    ``A Aᵀ h + h B Bᵀ + 2λ h`` (``side="outer"``) or ``AᵀA h + h BᵀB + 2λ h`` (``"inner"``)."""
    terms = expr.args if isinstance(expr, MatAdd) else (expr,)
    found = {"damping": S.Zero}
    for t in terms:
        coeff, mats = t.as_coeff_matrices() if isinstance(t, MatMul) else (S.One, [t])
        mats = list(mats)
        if mats == [h]:
            found["damping"] = coeff / 2
            continue
        if coeff != 1 or len(mats) != 3 or h not in (mats[0], mats[2]):
            break
        pair = mats[:2] if mats[2] == h else mats[1:]
        if pair[1] != transpose(pair[0]):
            break
        found["left" if mats[2] == h else "right"] = pair[0] if side == "outer" else pair[1]  # A Aᵀ or AᵀA
    if set(found) != {"left", "right", "damping"} or len(terms) > 3:
        form = "A Aᵀ {h} + {h} B Bᵀ" if side == "outer" else "AᵀA {h} + {h} BᵀB"
        raise DerivationError(f"{expr} is not {form.format(h=h)} + 2λ {h}")
    return found["left"], found["right"], found["damping"]


def solution():
    """``H_λ = (TT* + μI)⁻¹ D``: the operator read off :func:`normal_operator`, ``D = −ε msign(G_M)``."""
    left, right, damping = sylvester_operator(normal_operator().formula, H)
    return RegularizedSylvester(left, right, damping, TARGET)


def least_squares_step(w_q, w_k, d_target, mu):
    """The minimizer of ``‖T(ΔQ, ΔK) − D‖_F² + μ‖(ΔQ, ΔK)‖_F²`` by dense normal equations on vectorized ``T``
    (independent of the derivation: ``T`` built column by column from :func:`forward`)."""

    n, k = w_q.shape
    cols = []
    for which in range(2):
        for idx in range(n * k):
            e = np.zeros(n * k)
            e[idx] = 1.0
            z = np.zeros((n, k))
            args = (e.reshape(n, k), z) if which == 0 else (z, e.reshape(n, k))
            cols.append(np.ravel(evaluate_on(forward(dQ, dK), {"W_Q": w_q, "W_K": w_k, "dW_Q": args[0],
                                                                  "dW_K": args[1]})))
    t = np.stack(cols, axis=1)
    x = np.linalg.solve(t.T @ t + mu * np.eye(t.shape[1]), t.T @ np.ravel(d_target))
    return x[:n * k].reshape(n, k), x[n * k:].reshape(n, k)


def measurements(rng):
    """Distance of the derived step to the least-squares minimizer solved independently."""

    w_q, w_k, g_m = rng.standard_normal((7, 2)), rng.standard_normal((7, 2)), rng.standard_normal((7, 7))
    values = {"W_Q": w_q, "W_K": w_k, "G_M": g_m, "epsilon": 0.5, "lambda": 0.3}
    q, k = adjoint_components(solution())
    got = [evaluate_on(x, values) for x in (q, k)]
    ref = least_squares_step(w_q, w_k, evaluate_on(TARGET, values), 2 * 0.3)
    err = max(np.max(np.abs(a - b)) / np.max(np.abs(b)) for a, b in zip(got, ref, strict=False))
    return [("derived step vs dense normal equations of the regularized least squares, relative error", err, 1e-10)]


@cache
def achieved_change():
    """Theorem: with ``(ΔQ, ΔK) = T*(H_λ)``, ``T(ΔQ, ΔK) = D − 2λ H_λ``."""
    q, k = adjoint_components(solution())
    der = identity_chain("sylvester.achieved_change", "Sylvester rule: the achieved product change",
                         forward(q, k), context(),
                         statement="T(T*(H_λ)) with H_λ from the regularized Sylvester equation "
                                   "(minimum-norm ansatz (ΔQ, ΔK) = T*(H))")
    der.apply(L.SYLVESTER_EQUATION)
    return der


def derivations():
    return [adjoint(), normal_operator(), achieved_change()]


def emitted_functions():
    q, k = adjoint_components(solution())
    related = [normal_operator(), achieved_change()]
    return [EmittedFunction(
        "sylvester_qk", "Sylvester-regularized QK update (minimum-norm step towards −ε msign(G_M))",
        [W_Q, W_K, G_M], [("dW_Q", DerivedOutput(q, adjoint(), "sylvester.dW_Q", related)),
                          ("dW_K", DerivedOutput(k, adjoint(), "sylvester.dW_K", related))],
        [("H solves (W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = −ε msign(G_M); the achieved product change "
          "is −ε msign(G_M) − 2λH. solver='structured' uses the rank-d_h factors (O(d² d_h)), "
          "'dense' uses jax.scipy.linalg.solve_sylvester (O(d³)).")],
        options={"solver": ("structured", ("structured", "dense"))}, positive_damping=True)]


def rule_module():
    return RuleModule(name="sylvester", title="Sylvester-regularized QK rule of Compositional Muon",
                      derivations=derivations, functions=emitted_functions,
                      scalars={eps: "eps", lam: "damping"}, measurements=measurements,
                      description=__doc__.split("\n\n")[0],
                      examples=["python -m derivations.sylvester --emit jax > sylvester_jax.py",
                                "python -m derivations.sylvester --check"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
