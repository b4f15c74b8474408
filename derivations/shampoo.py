"""The Shampoo family as steepest descent under whitened operator norms, derived from the problems as stated.

Shampoo (Gupta, Koren and Singer, "Shampoo: Preconditioned Stochastic Tensor Optimization", ICML 2018) keeps
``L = εI + Σ G Gᵀ`` and ``R = εI + Σ GᵀG`` and steps along ``L^{-1/4} G R^{-1/4}``; Bernstein and Newhouse
("Old optimizer, new norm", 2024) read it, without accumulation, as steepest descent under the operator norm.
Here the norm is stated with the preconditioners and the engine derives the step:

* two-sided: ``min ⟨G, ΔW⟩ s.t. ‖L^{1/4} ΔW R^{1/4}‖_op ≤ ε`` gives
  ``ΔW = −ε L^{-1/4} msign(L^{-1/4} G R^{-1/4}) R^{-1/4}``;
* one-sided: ``‖L^{1/2} ΔW‖_op ≤ ε`` gives ``ΔW = −ε L^{-1/2} msign(L^{-1/2} G)``;
* activation-aware: ``‖ΔW X‖_op ≤ ε`` for a layer ``Y = W X`` with inputs ``X`` (``n × b``, full row rank)
  gives ``ΔW = −ε msign(G C_X⁻¹) C_X⁻¹``, ``C_X = (X Xᵀ)^{1/2}``: the output change ``ΔW X`` has operator norm
  ``ε`` on the batch.

Each objective is the plain ``⟨G, ΔW⟩``; the whitening enters it by a change of variables (Lemma 4i).

Run ``python -m derivations.shampoo --help``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from sympy import Rational
from sympy.matrices.expressions import MatrixSymbol

from derivations import (
    FULL_ROW_RANK,
    SPD,
    Context,
    EmittedFunction,
    FactMatrix,
    Inner,
    OpNorm,
    Problem,
    RuleModule,
    SPDPower,
    derive,
    dimension,
    evaluate_on,
    positive_symbol,
    product,
)
from foundation.compute.spectra import random_orthonormal

m, n, b = dimension("m"), dimension("n"), dimension("b")
eps = positive_symbol("epsilon")
L = FactMatrix("L", m, m, [SPD])  # left preconditioner, m × m
R = FactMatrix("R", n, n, [SPD])  # right preconditioner, n × n
X = FactMatrix("X", n, b, [FULL_ROW_RANK])  # the layer's inputs, one column per token
G, dW = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n)
QUARTER, HALF = Rational(1, 4), Rational(1, 2)

#: check sizes: tall, wide and square weights; more tokens than inputs
CONTEXT = Context(check_dims=[{m: 5, n: 3, b: 7}, {m: 3, n: 4, b: 6}, {m: 4, n: 4, b: 9}],
                  mpmath_dims={m: 3, n: 2, b: 4}, symbolic_dims={m: 3, n: 2, b: 4})


def _steepest(name: str, title: str, constraint, statement: str):
    return derive(Problem(dW, Inner(G, dW), OpNorm(constraint), eps), CONTEXT, name=f"shampoo.{name}", title=title,
                  statement=statement)


@cache
def two_sided():
    """``ΔW = −ε L^{-1/4} msign(L^{-1/4} G R^{-1/4}) R^{-1/4}``."""
    return _steepest("two_sided", "Two-sided whitened steepest descent (Shampoo's norm)",
                     product(SPDPower(L, QUARTER), dW, SPDPower(R, QUARTER)),
                     "‖L^{1/4} ΔW R^{1/4}‖_op ≤ ε, L and R symmetric positive definite")


@cache
def one_sided():
    """``ΔW = −ε L^{-1/2} msign(L^{-1/2} G)``."""
    return _steepest("one_sided", "One-sided whitened steepest descent", product(SPDPower(L, HALF), dW),
                     "‖L^{1/2} ΔW‖_op ≤ ε, L symmetric positive definite")


@cache
def activation_aware():
    """``ΔW = −ε msign(G C_X⁻¹) C_X⁻¹`` with ``C_X = (X Xᵀ)^{1/2}``."""
    return _steepest("activation_aware", "Activation-aware steepest descent", product(dW, X),
                     "‖ΔW X‖_op ≤ ε: the change of the layer's outputs on the batch X (full row rank)")


def derivations():
    return [two_sided(), one_sided(), activation_aware()]


def _spd(rng, k: int, spread: float) -> np.ndarray:
    q = random_orthonormal(rng, k, k)
    return (q * np.geomspace(1.0, spread, k)) @ q.T


def _power(a: np.ndarray, p: float) -> np.ndarray:
    w, v = np.linalg.eigh(a)
    return (v * w ** p) @ v.T


def measurements(rng):
    """Each derived step on the boundary of its ball (norm = ε) and at the value the dual norm predicts, and
    Shampoo's own direction without accumulation equal to ``msign(G)`` (Bernstein and Newhouse)."""
    out = []
    for rows, cols in ((64, 32), (48, 48)):
        g, lm, rm = rng.standard_normal((rows, cols)), _spd(rng, rows, 1e-3), _spd(rng, cols, 1e-2)
        step = evaluate_on(two_sided().formula, {"G": g, "L": lm, "R": rm, "epsilon": 0.5})
        white = _power(lm, 0.25) @ step @ _power(rm, 0.25)
        out.append((f"{rows} × {cols}, two-sided: ‖L^(1/4) ΔW R^(1/4)‖_op / ε (= 1)", np.linalg.norm(white, 2) / 0.5,
                    (1 - 1e-9, 1 + 1e-9)))
        dual = np.linalg.norm(_power(lm, -0.25) @ g @ _power(rm, -0.25), "nuc")
        out.append((f"{rows} × {cols}, two-sided: ⟨G, ΔW⟩ / (−ε ‖L^(-1/4) G R^(-1/4)‖_*) (= 1)",
                    float(np.sum(g * step)) / (-0.5 * dual), (1 - 1e-9, 1 + 1e-9)))
        acts = rng.standard_normal((cols, 3 * cols))
        step = evaluate_on(activation_aware().formula, {"G": g, "X": acts, "epsilon": 0.5})
        out.append((f"{rows} × {cols}, activation-aware: ‖ΔW X‖_op / ε (= 1)",
                    np.linalg.norm(step @ acts, 2) / 0.5, (1 - 1e-9, 1 + 1e-9)))
        u, _, vt = np.linalg.svd(g, full_matrices=False)
        shampoo = _power(g @ g.T + 1e-12 * np.eye(rows), -0.25) @ g @ _power(g.T @ g + 1e-12 * np.eye(cols), -0.25)
        out.append((f"{rows} × {cols}: Shampoo's L^(-1/4) G R^(-1/4) at L = GGᵀ, R = GᵀG vs msign(G) (relative)",
                    np.linalg.norm(shampoo - u @ vt) / np.linalg.norm(u @ vt), 1e-8))
    return out


#: how the inverse roots are computed: by eigendecomposition, or by the certified matmul-only coupled iteration
ROOT = {"root": ("eigh", ("eigh", "newton_schulz"))}
ROOT_NOTE = ("root='eigh' takes the inverse roots by an eigendecomposition; root='newton_schulz' by the certified "
             "matmul-only coupled iteration, certified for eigenvalues within a factor 1000 of the Frobenius norm "
             "(python -m coeffsearch certify on its schedule gives its error band).")


def emitted_functions():
    return [
        EmittedFunction("shampoo_two_sided", "Two-sided whitened steepest descent (Shampoo's norm)", [G, L, R],
                        [("dW", two_sided())],
                        ["L (..., m, m) and R (..., n, n) are symmetric positive definite preconditioners, e.g. "
                         "Shampoo's εI + Σ GGᵀ and εI + Σ GᵀG; ‖L^{1/4} ΔW R^{1/4}‖_op = ε.", ROOT_NOTE], options=ROOT),
        EmittedFunction("shampoo_one_sided", "One-sided whitened steepest descent", [G, L], [("dW", one_sided())],
                        ["L (..., m, m) is a symmetric positive definite preconditioner; ‖L^{1/2} ΔW‖_op = ε.",
                         ROOT_NOTE], options=ROOT),
        EmittedFunction("activation_aware", "Activation-aware steepest descent", [G, X],
                        [("dW", activation_aware())],
                        ["X (..., n, b) holds the layer's inputs, one column per token (full row rank, b ≥ n); "
                         "‖ΔW X‖_op = ε."]),
    ]


def rule_module():
    return RuleModule(name="shampoo", title="The Shampoo family: whitened steepest descent",
                      derivations=derivations, functions=emitted_functions, scalars={eps: "eps"},
                      measurements=measurements, description=__doc__.split("\n\n")[0],
                      examples=["python -m derivations.shampoo --check", "python -m derivations.shampoo --emit text"])


if __name__ == "__main__":
    import sys

    from derivations.cli import main
    sys.exit(main(rule_module()))
