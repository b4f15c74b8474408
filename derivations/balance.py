"""The balancing gauge of a factorized product ``M = W_Q W_Kᵀ``, derived with the engine.

Problem. ``M`` is unchanged by the gauge ``(W_Q, W_K) → (W_Q S⁻ᵀ, W_K S)``, ``S`` invertible
(``d_h × d_h``). Find ``S`` for which both new factors have the same Gram matrix,

    (W_Q S⁻ᵀ)ᵀ (W_Q S⁻ᵀ) = (W_K S)ᵀ (W_K S),

with side condition: ``W_Q`` and ``W_K`` have full column rank (so ``A = W_QᵀW_Q`` and
``B = W_KᵀW_K = C_K²`` are symmetric positive definite). The module derives, every step checked
in float64 on random instances and in mpmath at 50 digits:

* ``balance.congruence``: ``S (Gram_K' − Gram_Q') Sᵀ = P B P − A`` with ``P = S Sᵀ``; congruence
  by the invertible ``S`` keeps the zero, so the balance condition is the Riccati equation
  ``P B P = A`` for the symmetric positive definite ``P``;
* ``balance.whitening``: with ``P = C_K⁻¹ Z C_K⁻¹`` (a bijection of SPD matrices),
  ``P B P − A = C_K⁻¹ (Z² − C_K A C_K) C_K⁻¹``, so ``Z² = NᵀN`` with ``N = C_Q C_K``
  (``NᵀN = C_K A C_K``) and, by uniqueness of the SPD square root, ``Z = (NᵀN)^{1/2}``;
* ``balance.riccati``: the back-substituted ``P* = C_K⁻¹ (NᵀN)^{1/2} C_K⁻¹`` solves ``P B P = A``;
* ``balance.factor``: ``P* = S* S*ᵀ`` with ``S* = C_K⁻¹ (NᵀN)^{1/4}`` (the power split in halves;
  any ``S* O`` with ``O`` orthogonal balances too: the residual gauge that fixes both Grams);
* ``balance.inverse_transpose``: ``S*⁻ᵀ = C_K (NᵀN)^{-1/4}``;
* ``balance.equal_grams`` and ``balance.product``: the balanced factors
  ``W_Q' = W_Q C_K (NᵀN)^{-1/4}``, ``W_K' = W_K C_K⁻¹ (NᵀN)^{1/4}`` have equal Grams, both
  ``(NᵀN)^{1/2}``, and ``W_Q' W_K'ᵀ = W_Q W_Kᵀ``.

:func:`balanced_factors` is what :func:`numerics.optimizer.gauge_balance.balance` computes
(``tests/rules/test_balance.py`` compares them at 50 digits). The powers of SPD matrices are one node,
:class:`SPDPower`, with its own rules for every interpreter; the lemmas B1–B7 are generic identities of
such powers, registered with the other lemma families in :mod:`derivations.lemmas.spd_powers`.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from sympy import Rational
from sympy.matrices.expressions import Inverse, MatAdd, MatMul, Transpose, ZeroMatrix

from derivations import lemmas as L
from derivations.engine.derivation import Context, DerivationError, identity_chain
from derivations.engine.rule import EmittedFunction, RuleModule
from derivations.lemmas.spd_powers import (
    CONGRUENCE,
    GRAM_OF_PRODUCT,
    INVERSE_CANCEL,
    POLAR_FORM,
    POWER_ADD,
    POWER_INVERSE,
    POWER_SPLIT,
    SPDPower,
)
from derivations.printing.codegen import DerivedOutput
from derivations.vocabulary.algebra import product, total, transpose
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import FULL_COLUMN_RANK, SPD, FactMatrix, GramInvSqrt, GramSqrt, dimension

# ---- the problem ----------------------------------------------------------------------------
d, d_Q, d_h = dimension("d"), dimension("d_Q"), dimension("d_h")
W_Q = FactMatrix("W_Q", d_Q, d_h, [FULL_COLUMN_RANK])  # own row count: a GQA group's stacked query heads
W_K = FactMatrix("W_K", d, d_h, [FULL_COLUMN_RANK])
S = FactMatrix("S", d_h, d_h, [FULL_COLUMN_RANK])  # the gauge: square of full rank, i.e. invertible
Z = FactMatrix("Z", d_h, d_h, [SPD])  # the whitened unknown of the Riccati equation
C_K, C_K_inv = GramSqrt(W_K), GramInvSqrt(W_K)


def transformed(s, s_inv_t):
    """``(W_Q S⁻ᵀ, W_K S)``: the gauge-transformed factors (the problem statement)."""
    return product(W_Q, s_inv_t), product(W_K, s)


def gram_gap(s, s_inv_t):
    """``(W_K S)ᵀ(W_K S) − (W_Q S⁻ᵀ)ᵀ(W_Q S⁻ᵀ)``: zero exactly for a balancing gauge."""
    q, k = transformed(s, s_inv_t)
    return total(product(transpose(k), k), product(-1, transpose(q), q))


def context() -> Context:
    return Context(check_dims=[{d_Q: 6, d: 5, d_h: 2}, {d_Q: 5, d: 7, d_h: 3}, {d_Q: 4, d: 4, d_h: 4}],
                   symbolic_dims={d_Q: 3, d: 3, d_h: 2}, mpmath_dims={d_Q: 5, d: 4, d_h: 2})


@cache
def congruence():
    """``S (Gram_K' − Gram_Q') Sᵀ = S Sᵀ B S Sᵀ − A``: the Riccati form of the balance condition."""
    start = product(S, gram_gap(S, Transpose(Inverse(S))), transpose(S))
    der = identity_chain("balance.congruence", "Balance: the equal-Gram condition as a Riccati equation", start,
                         context(), statement="S [(W_K S)ᵀ(W_K S) − (W_Q S⁻ᵀ)ᵀ(W_Q S⁻ᵀ)] Sᵀ; S invertible, so "
                                              "the bracket vanishes iff this does")
    der.apply(L.RING)
    der.apply(INVERSE_CANCEL)
    return der


def riccati_coefficients():
    """``(B, A)`` of ``P B P = A``, ``P = S Sᵀ``, read off :func:`congruence`'s result."""
    formula = congruence().formula
    terms = formula.args if isinstance(formula, MatAdd) else (formula,)
    b = a = None
    for t in terms:
        coeff, mats = t.as_coeff_matrices()
        if coeff == 1 and len(mats) > 4 and list(mats[:2]) == [S, S.T] and list(mats[-2:]) == [S, S.T]:
            b = product(*mats[2:-2])
        elif coeff == -1 and not t.has(S):
            a = product(*mats)
    if a is None or b is None or len(terms) != 2:
        raise DerivationError(f"{formula} is not S Sᵀ B S Sᵀ − A")
    return b, a


@cache
def whitening():
    """``P B P − A`` at ``P = C_K⁻¹ Z C_K⁻¹`` is ``C_K⁻¹ (Z Z − C_K A C_K) C_K⁻¹``."""
    b, a = riccati_coefficients()
    if b != product(transpose(W_K), W_K):
        raise DerivationError(f"the Riccati coefficient {b} is not W_KᵀW_K = C_K²")
    p = product(C_K_inv, Z, C_K_inv)
    der = identity_chain("balance.whitening", "Balance: the whitened Riccati equation", total(product(p, b, p),
                                                                                             product(-1, a)),
                         context(), statement="P B P − A at P = C_K⁻¹ Z C_K⁻¹ (a bijection of SPD matrices)")
    der.apply(POWER_ADD)
    der.apply(CONGRUENCE, factor=C_K_inv)
    return der


def whitened_solution():
    """``Z* = Y^{1/2}`` from ``Z Z = Y`` (the unique SPD square root), ``Y`` read off :func:`whitening`."""
    formula = whitening().formula
    coeff, mats = formula.as_coeff_matrices() if isinstance(formula, MatMul) else (None, ())
    inner = mats[1] if len(mats) == 3 and coeff == 1 else None
    terms = inner.args if isinstance(inner, MatAdd) else ()
    square = product(Z, Z)
    rest = [t for t in terms if t != square]
    if len(terms) != 2 or len(rest) != 1 or not isinstance(rest[0], MatMul) or rest[0].as_coeff_matrices()[0] != -1:
        raise DerivationError(f"{formula} is not C_K⁻¹ (Z Z − Y) C_K⁻¹")
    return SPDPower(product(*rest[0].as_coeff_matrices()[1]), Rational(1, 2))


def riccati_solution():
    """``P* = C_K⁻¹ Z* C_K⁻¹``: the whitening substitution undone."""
    return product(C_K_inv, whitened_solution(), C_K_inv)


@cache
def riccati():
    """Theorem: ``P* B P* − A = 0``."""
    b, a = riccati_coefficients()
    p = riccati_solution()
    der = identity_chain("balance.riccati", "Balance: the derived P solves the Riccati equation",
                         total(product(p, b, p), product(-1, a)), context(),
                         statement="P* B P* − A with P* = C_K⁻¹ (C_K A C_K)^{1/2} C_K⁻¹")
    der.apply(POWER_ADD)
    der.apply(L.RING)
    return der


@cache
def factor():
    """``P* = S* S*ᵀ``: the power split in two symmetric halves."""
    der = identity_chain("balance.factor", "Balance: the gauge as a factor of P", riccati_solution(), context(),
                         statement="P* = C_K⁻¹ (NᵀN)^{1/2} C_K⁻¹, NᵀN = C_K W_QᵀW_Q C_K")
    der.apply(POWER_SPLIT)
    return der


def gauge():
    """``S*``: the left half of :func:`factor`'s ``S* S*ᵀ``."""
    formula = factor().formula
    mats = list(formula.as_coeff_matrices()[1]) if isinstance(formula, MatMul) else []
    half = len(mats) // 2
    left, right = product(*mats[:half]), product(*mats[half:])
    if not mats or len(mats) % 2 or transpose(left) != right:
        raise DerivationError(f"{formula} is not S Sᵀ")
    return left


@cache
def inverse_transpose():
    """``S*⁻ᵀ`` as a product of powers."""
    der = identity_chain("balance.inverse_transpose", "Balance: the inverse transpose of the gauge",
                         Transpose(Inverse(gauge())), context(), statement="S*⁻ᵀ for S* = C_K⁻¹ (NᵀN)^{1/4}")
    der.apply(POWER_INVERSE)
    return der


def balanced_factors():
    """``(W_Q S*⁻ᵀ, W_K S*)``: the balanced pair (what :func:`numerics.optimizer.gauge_balance.balance` computes)."""
    return transformed(gauge(), inverse_transpose().formula)


@cache
def equal_grams():
    """Theorem: the balanced factors have equal Grams (``balance.congruence``'s bracket vanishes)."""
    der = identity_chain("balance.equal_grams", "Balance: the balanced factors have equal Grams",
                         gram_gap(gauge(), inverse_transpose().formula), context(),
                         statement="(W_K S*)ᵀ(W_K S*) − (W_Q S*⁻ᵀ)ᵀ(W_Q S*⁻ᵀ)")
    der.apply(POWER_ADD)
    der.apply(L.RING)
    if not isinstance(der.formula, ZeroMatrix):
        raise DerivationError(f"balance.equal_grams ends in {der.formula}, not 0: the gauge does not balance")
    return der


@cache
def product_kept():
    """Theorem: ``W_Q' W_K'ᵀ = W_Q W_Kᵀ``."""
    q, k = balanced_factors()
    der = identity_chain("balance.product", "Balance: the product is unchanged", product(q, transpose(k)),
                         context(), statement="(W_Q S*⁻ᵀ)(W_K S*)ᵀ")
    der.apply(POWER_ADD)
    if der.formula != product(W_Q, transpose(W_K)):
        raise DerivationError(f"balance.product ends in {der.formula}, not W_Q W_Kᵀ")
    return der


@cache
def stable_query():
    """``W_Q' = U_N (NᵀN)^{1/4}``, ``N = W_Q C_K``: the balanced query factor as the emitted code computes it.

    ``(NᵀN)^{1/4}`` and ``U_N`` come from the singular values and vectors of ``N`` itself (the JAX and NumPy
    routines), so no Gram matrix is formed and the condition number is not squared.
    """
    der = identity_chain("balance.stable_query", "Balance: the balanced query factor without a formed Gram matrix",
                         balanced_factors()[0], context(),
                         statement="W_Q' = W_Q S*⁻ᵀ = W_Q C_K (C_K W_QᵀW_Q C_K)^{-1/4}")
    der.apply(GRAM_OF_PRODUCT)
    der.apply(POLAR_FORM)
    return der


@cache
def stable_key():
    """``W_K' = U_K (NᵀN)^{1/4}``: the balanced key factor as the emitted code computes it
    (see :func:`stable_query`)."""
    der = identity_chain("balance.stable_key", "Balance: the balanced key factor without a formed Gram matrix",
                         balanced_factors()[1], context(),
                         statement="W_K' = W_K S* = W_K C_K⁻¹ (C_K W_QᵀW_Q C_K)^{1/4}")
    der.apply(GRAM_OF_PRODUCT)
    der.apply(L.POLAR_INVERSE, matrix=W_K)
    return der


def derivations():
    return [congruence(), whitening(), riccati(), factor(), inverse_transpose(), equal_grams(), product_kept(),
            stable_query(), stable_key()]


def measurements(rng):
    """Gram gap and product change of the derived balanced pair on one random unbalanced instance."""

    w_q, w_k = 4 * rng.standard_normal((9, 3)), rng.standard_normal((9, 3)) / 4
    values = {"W_Q": w_q, "W_K": w_k}
    q, k = (evaluate_on(x, values) for x in balanced_factors())
    return [("Gram gap of the balanced factors, relative",
             float(np.abs(q.T @ q - k.T @ k).max() / np.abs(k.T @ k).max()), 1e-10),
            ("Gram gap before balancing, relative", float(np.abs(w_q.T @ w_q - w_k.T @ w_k).max()
                                                          / np.abs(w_k.T @ w_k).max()), None),
            ("product change by balancing, relative", float(np.abs(q @ k.T - w_q @ w_k.T).max()
                                                            / np.abs(w_q @ w_k.T).max()), 1e-10)]


def emitted_functions():
    related = [congruence(), whitening(), riccati(), factor(), inverse_transpose(), product_kept()]
    return [EmittedFunction(
        "balance_qk", "Balance the factors of M = W_Q W_Kᵀ along the gauge (equal Grams, same product)",
        [W_Q, W_K], [("W_Q_bal", DerivedOutput(stable_query().formula, equal_grams(), "balance.W_Q",
                                               [*related, stable_query()])),
                     ("W_K_bal", DerivedOutput(stable_key().formula, equal_grams(), "balance.W_K",
                                               [*related, stable_key()]))],
        [("Both results have the Gram matrix (NᵀN)^(1/2), N = W_Q C_K, and W_Q_bal W_K_balᵀ = W_Q W_Kᵀ (exact at "
          "damping = 0, the default). W_Q may have its own row count d_Q: a GQA group's query heads stacked "
          "row-wise against the shared key head. The factors are computed as U_N (NᵀN)^(1/4) and U_K (NᵀN)^(1/4) "
          "(balance.stable_query, balance.stable_key) from the singular values and vectors of N and W_K: no Gram "
          "matrix is formed, so the condition number is not squared; singular values at or below "
          "max(rows, d_h)·eps·σ_max are cut (pseudo-inverse) in C_K⁻¹, U_K and U_N.")],
        needs_eps=False)]


def rule_module():
    return RuleModule(name="balance", title="Balancing gauge of the QK factorization",
                      derivations=derivations, functions=emitted_functions, scalars={}, measurements=measurements,
                      description=__doc__.split("\n\n")[0],
                      examples=["python -m derivations.balance --emit text", "python -m derivations.balance --check"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
