"""Gram Newton–Schulz derived from the standard odd-polynomial iteration, with its flop counts.

J. Zhang, N. Amsel, B. Chen, T. Dao (2026), *Gram Newton–Schulz* (public code: Dao-AILab/gram-newton-schulz).
For ``X`` of shape ``n × m`` with ``n ≤ m`` every odd quintic step ``p_t(X) = a_t X + b_t X XᵀX + c_t X (XᵀX)²``
is ``q_t(R) X`` with ``R = XXᵀ``, ``q_t(R) = a_t I + b_t R + c_t R²`` (Lemma GF); the Gram matrix of
``q(R) X`` is ``q(R) R q(R) = R q(R)²`` (GG, GC). Unrolling three steps (GU), replacing the iterates'
Gram matrices ``A_t = X_t X_tᵀ`` by the recurrence ``R_0 = X_0 X_0ᵀ``, ``R_{t+1} = q_t(R_t) R_t q_t(R_t)``
(GR) and naming ``Q_0 = I``, ``Q_{t+1} = q_t(R_t) Q_t`` (GT) gives ``X_3 = Q_3 X_0``: after ``R_0`` every
product is ``n × n``. A restart after iteration 2 continues from ``Y_2 = Q_2 X_0`` with the Gram matrix
``G_2 = Y_2 Y_2ᵀ`` recomputed, and ends in the same ``Q_3 X_0`` (GX). The right orientation (``S = XᵀX``,
``X_T = X_0 Q_T``) is derived the same way. Three steps stand for any number: each lemma is one
induction step, checked on random instances.

Flop model (used by ``python -m benchmarks.gram`` and the restart search): a product of a ``p × q`` and
a ``q × r`` matrix costs ``2pqr`` flops; sums, scalings, the normalization and the identity are free, and
no symmetry is exploited (the routines compute full products). With ``T`` quintic steps and ``K``
restarts the standard iteration costs ``T (4n²m + 2n³)`` and the Gram form
``4(K + 1) n²m + 2n³ (4T − 3K − 3)``; both are derived from the products the routines execute (Lemma
GK), and each step's check runs the project's routines (:func:`foundation.compute.jax_msign.newton_schulz`,
:func:`foundation.compute.gram_newton_schulz.gram_newton_schulz`) and counts their products.

Run ``python -m derivations.gram_ns --help``. The JAX routine is
:mod:`foundation.compute.gram_newton_schulz`. This module emits no functions of its own (``--emit jax|numpy`` is
refused); every emitted rule function and the optimizer take ``msign="gram_newton_schulz"`` (restart positions
as data, by default one restart after iteration 2, the published choice) or ``msign="auto"``, which picks the
Gram form exactly when the cost difference above, ``(T − K − 1)(4n²m − 6n³)``, is negative for fewer than
``T − 1`` restarts, i.e. when the long side exceeds 1.5 × the short side
(:mod:`foundation.compute.jax_spectral_sign`). Default restarts are certified per dtype
(``certified_restarts``): for ``polar-express-5`` after iteration 2 in float32, after 1 and 3 in float16,
and none in bfloat16 (``python -m coeffsearch restarts polar-express-5 --dtype bfloat16`` finds no certified
positions under its rounding model), where ``"auto"`` runs the standard iteration. The standard iteration
stays the optimizer's default.
"""

from __future__ import annotations

from functools import cache

from sympy import Symbol
from sympy.matrices.expressions import MatrixSymbol

from derivations.engine.derivation import Context, Derivation, identity_chain
from derivations.engine.rule import RuleModule
from derivations.lemmas.counting import PRODUCT_COST, SCALAR_ALGEBRA
from derivations.lemmas.gram import (
    EXECUTED_PRODUCTS,
    GRAM_FACTOR,
    GRAM_RECURRENCE,
    GRAM_UPDATE,
    POLYNOMIALS_COMMUTE,
    RESTART,
    RESTARTS,
    SIDES,
    TELESCOPING,
    UNROLL,
    RoutineFlops,
    gram_polynomial,
    gram_symbol,
    odd_step,
)
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.nodes import dimension

n, m = dimension("n"), dimension("m")  # X is n × m with n ≤ m (the right orientation holds its transpose)
T = dimension("T")  # quintic steps
K = RESTARTS  # restarts, 0 ≤ K ≤ T − 1
STEPS = 3  # the unrolled iterations; the restart comes after iteration RESTART_AFTER
RESTART_AFTER = 2
COEFFS = tuple(tuple(Symbol(f"{c}_{t}", real=True) for c in "abc") for t in range(STEPS))


def _shape(side):
    return (n, m) if side == "left" else (m, n)


def _gram(x, side):
    return product(x, transpose(x)) if side == "left" else product(transpose(x), x)


def _step(poly, x, side):
    """``q X`` (left) or ``X q`` (right)."""
    return product(poly, x) if side == "left" else product(x, poly)


def context(definitions=None, symbolic=False) -> Context:
    """Wide, wider and square check sizes; symbolic sizes only for the one-step identities."""
    return Context(definitions=definitions or {}, check_dims=[{n: 3, m: 5}, {n: 2, m: 6}, {n: 4, m: 4}],
                   symbolic_dims={n: 2, m: 3} if symbolic else {}, mpmath_dims={n: 2, m: 3})


class Iteration:
    """The symbols of ``STEPS`` steps of both forms in one orientation, and their definitions.

    Standard: ``X_{t+1} = q_t(A_t) X_t`` with ``A_t = X_t X_tᵀ``. Gram form: ``R_0 = X_0 X_0ᵀ``,
    ``R_{t+1} = q_t(R_t) R_t q_t(R_t)``, ``Q_1 = q_0(R_0)``, ``Q_{t+1} = q_t(R_t) Q_t``. Restart after
    iteration ``s``: ``Y_s = Q_s X_0`` and ``G_s = Y_s Y_sᵀ``. (Right orientation: transposes, ``X q``.)
    """

    def __init__(self, side: str):
        self.side = side
        s = RESTART_AFTER
        self.x = [MatrixSymbol(f"X_{t}", *_shape(side)) for t in range(STEPS + 1)]
        self.a = [gram_symbol(f"A_{t}", n) for t in range(STEPS)]
        self.r = [gram_symbol(f"R_{t}", n) for t in range(STEPS)]
        self.q = {t: gram_symbol(f"Q_{t}", n) for t in range(1, STEPS + 1)}
        self.y, self.g = MatrixSymbol(f"Y_{s}", *_shape(side)), gram_symbol(f"G_{s}", n)
        self.qa = [gram_polynomial(self.a[t], COEFFS[t]) for t in range(STEPS)]
        self.qr = [gram_polynomial(self.r[t], COEFFS[t]) for t in range(STEPS)]
        defs = {}
        for t in range(STEPS):
            defs[self.a[t]] = _gram(self.x[t], side)
            defs[self.x[t + 1]] = _step(self.qa[t], self.x[t], side)
        defs[self.r[0]] = _gram(self.x[0], side)
        for t in range(STEPS - 1):
            defs[self.r[t + 1]] = product(self.qr[t], self.r[t], self.qr[t])
        self.products = {self.q[1]: (self.qr[0],)}
        for t in range(1, STEPS):
            self.products[self.q[t + 1]] = ((self.qr[t], self.q[t]) if side == "left" else (self.q[t], self.qr[t]))
        defs.update({sym: product(*factors) for sym, factors in self.products.items()})
        defs[self.y] = _step(self.q[s], self.x[0], side)
        defs[self.g] = _gram(self.y, side)
        self.definitions = defs

    def statement(self) -> str:
        left = self.side == "left"
        return ("X_{t+1} = q_t(A_t) X_t, A_t = X_t X_tᵀ; R_0 = X_0 X_0ᵀ, R_{t+1} = q_t(R_t) R_t q_t(R_t), "
                "Q_{t+1} = q_t(R_t) Q_t" if left else
                "X_{t+1} = X_t q_t(A_t), A_t = X_tᵀ X_t; R_0 = X_0ᵀ X_0, R_{t+1} = q_t(R_t) R_t q_t(R_t), "
                "Q_{t+1} = Q_t q_t(R_t)") + ", q_t(R) = a_t I + b_t R + c_t R²"


@cache
def iteration(side: str) -> Iteration:
    return Iteration(side)


def _label(side):
    return "XXᵀ" if side == "left" else "XᵀX"


@cache
def one_step(side: str) -> Derivation:
    """``a X + b X XᵀX + c X (XᵀX)² = q(R) X`` (left, ``R = XXᵀ``) or ``X q(S)`` (right, ``S = XᵀX``)."""
    x = MatrixSymbol("X", *_shape(side))
    r = gram_symbol("R", n)
    der = identity_chain(f"gram_ns.step_{side}", f"Gram Newton–Schulz: one quintic step through {_label(side)}",
                         odd_step(x, COEFFS[0]), context({r: _gram(x, side)}, symbolic=True),
                         statement=f"p(X) = a_0 X + b_0 X XᵀX + c_0 X (XᵀX)², R = {_label(side)}")
    der.apply(GRAM_FACTOR, matrix=x, gram=r, side=side, note="group the odd powers on the short side")
    return der


@cache
def gram_update(side: str) -> Derivation:
    """The Gram matrix of the next iterate: ``q(R) R q(R) = R q(R)²``."""
    x = MatrixSymbol("X", *_shape(side))
    r = gram_symbol("R", n)
    nxt = _step(gram_polynomial(r, COEFFS[0]), x, side)
    start = _gram(nxt, side)
    der = identity_chain(f"gram_ns.gram_{side}", f"Gram Newton–Schulz: the Gram matrix of the next iterate "
                         f"({_label(side)})", start, context({r: _gram(x, side)}, symbolic=True),
                         statement=f"the Gram matrix of {nxt}, R = {_label(side)}")
    der.apply(GRAM_UPDATE, matrix=x, gram=r, side=side, note="q(R) is symmetric: R is")
    der.apply(POLYNOMIALS_COMMUTE, matrix=r, note="R commutes with q(R)")
    return der


@cache
def telescoping(side: str) -> Derivation:
    """``X_3 = Q_3 X_0`` (left) or ``X_0 Q_3`` (right): the standard iterate from the Gram recurrence."""
    it = iteration(side)
    der = identity_chain(f"gram_ns.telescoping_{side}",
                         f"Gram Newton–Schulz: {STEPS} standard steps are one product Q ({_label(side)})",
                         it.x[STEPS], context(it.definitions), statement=it.statement())
    der.apply(UNROLL, iterates={it.x[t + 1]: it.definitions[it.x[t + 1]] for t in range(STEPS)},
              note="the standard iteration, written out")
    der.apply(GRAM_RECURRENCE, grams=dict(zip(it.a, it.r, strict=True)),
              note="the Gram matrices by the n × n recurrence (Lemma GG at each step)")
    der.apply(TELESCOPING, products=it.products, note="the steps' polynomials accumulate into Q")
    return der


@cache
def restart(side: str) -> Derivation:
    """A restart after iteration 2 gives the same ``Q_3 X_0``: ``q_2(G_2) Y_2`` with ``Y_2 = Q_2 X_0``."""
    it = iteration(side)
    s = RESTART_AFTER
    start = _step(gram_polynomial(it.g, COEFFS[s]), it.y, side)
    der = identity_chain(f"gram_ns.restart_{side}",
                         f"Gram Newton–Schulz: a restart after iteration {s} ({_label(side)})", start,
                         context(it.definitions),
                         statement=(f"restart after iteration {s}: Y_{s} = "
                                    + (f"Q_{s} X_0" if side == "left" else f"X_0 Q_{s}")
                                    + f", G_{s} = {'Y Yᵀ' if side == 'left' else 'YᵀY'} recomputed, Q reset to I; "
                                    + it.statement()))
    der.apply(RESTART, restarted={it.y: it.definitions[it.y]}, grams={it.g: it.r[s]},
              note=f"the recomputed Gram matrix equals the recurrence's R_{s} in exact arithmetic")
    der.apply(TELESCOPING, products=it.products, note="the same product Q")
    return der


def flops_context() -> Context:
    return Context(check_dims=[{n: 3, m: 7, T: 5}, {n: 2, m: 5, T: 3}, {n: 4, m: 4, T: 4}],
                   mpmath_dims={n: 2, m: 3, T: 3})


@cache
def flops(kind: str, side: str = "left") -> Derivation:
    """Matmul flops of ``T`` quintic steps with ``K`` restarts (``kind`` ``standard`` or ``gram``)."""
    title = {"standard": "the standard iteration", "gram": "the Gram form"}[kind]
    der = identity_chain(f"gram_ns.flops_{kind}_{side}", f"Flops of {title} ({_label(side)})",
                         RoutineFlops(kind, side, n, m, T, K), flops_context(),
                         statement=f"X is {'n × m' if side == 'left' else 'm × n'}, n ≤ m; {T} quintic steps"
                                   + (f", {K} restarts" if kind == "gram" else ""))
    der.apply(EXECUTED_PRODUCTS, note="the products the routine runs")
    der.apply(PRODUCT_COST, note="2pqr per product, from the shapes")
    der.apply(SCALAR_ALGEBRA, how="factor")
    return der


def derivations() -> list[Derivation]:
    """Every derivation of this module, in reading order (both orientations)."""
    out = []
    for side in SIDES:
        out += [one_step(side), gram_update(side), telescoping(side), restart(side)]
    for side in SIDES:
        out += [flops("standard", side), flops("gram", side)]
    return out


def flop_count(kind: str, rows: int, cols: int, steps: int, restarts: int = 0) -> int:
    """The derived flop count (``flops(kind).formula``) of an ``rows × cols`` matrix, either orientation."""
    short, long_ = sorted((rows, cols))
    if not 0 <= restarts <= max(steps - 1, 0):
        raise ValueError(f"restarts must be in [0, {steps - 1}] for {steps} steps, got {restarts}")
    value = flops(kind).formula.subs({n: short, m: long_, T: steps, K: restarts})
    return int(value)


#: the shapes the flop model is measured at: single weight matrices and per-head batches
SHAPES = ((768, 3072), (4096, 14336), (2048, 11059), (768, 64), (4096, 128))


def measurements(rng):
    """Flop-model ratios gram/standard at :data:`SHAPES` (5 steps, 1 restart): below 1, the Gram form is
    cheaper at every one of them."""
    del rng
    return [(f"flop model gram/standard at {a} x {b}, 5 steps, 1 restart",
             flop_count("gram", a, b, 5, 1) / flop_count("standard", a, b, 5), 1.0) for a, b in SHAPES]


def rule_module():
    return RuleModule(name="gram_ns", title="Gram Newton–Schulz, derived from the standard iteration",
                      derivations=derivations, functions=list, scalars={}, measurements=measurements,
                      description=__doc__.split("\n\n")[0],
                      examples=["python -m derivations.gram_ns --check", "python -m derivations.gram_ns --emit text",
                                "python -m derivations.gram_ns --emit latex"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
