"""Sylvester-regularized QK rule: the overdetermined system and its regularized normal equation.

The first-order product change ``T(ΔQ, ΔK) = ΔQ W_Kᵀ + W_Q ΔKᵀ`` has rank at most ``2 d_h``, so it
cannot reach the full-rank Muon target ``D = −ε msign(G_M)``. The module derives, with the engine:

* the adjoint ``T*(H) = (H W_K, Hᵀ W_Q)`` from ``⟨H, T(ΔQ, ΔK)⟩`` (linearity, adjoint moves);
* with the minimum-norm ansatz ``(ΔQ, ΔK) = T*(H)`` (minimum-norm solutions lie in the range of
  ``T*``), the singular Sylvester equation ``W_QW_Qᵀ H + H W_KW_Kᵀ = D``; regularized as
  ``(W_QW_Qᵀ + λI) H + H (W_KW_Kᵀ + λI) = D``, the achieved product change is ``D − 2λH``.

The emitted ``sylvester_qk`` solves the regularized equation either with the rank-``d_h``
structure (thin SVDs of the factors, ``O(d² d_h)``) or densely (Bartels–Stewart, ``O(d³)``).
"""

from __future__ import annotations

from functools import cache

from sympy import Add
from sympy.matrices.expressions import MatrixSymbol

from . import lemmas as L
from .algebra import product, total, transpose
from .engine import Context, identity_chain
from .vocabulary import FULL_COLUMN_RANK, FactMatrix, Inner, Msign, RegularizedSylvester, dimension, positive_symbol

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


def solution():
    """``H_λ`` solving the regularized equation with right-hand side ``D = −ε msign(G_M)``."""
    return RegularizedSylvester(W_Q, W_K, lam, TARGET)


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
    return [adjoint(), achieved_change()]


def emitted_functions():
    from .printing.codegen import DerivedOutput, EmittedFunction
    q, k = adjoint_components(solution())
    return [EmittedFunction(
        "sylvester_qk", "Sylvester-regularized QK update (minimum-norm step towards −ε msign(G_M))",
        [W_Q, W_K, G_M], [("dW_Q", DerivedOutput(q, adjoint(), "sylvester.dW_Q", [achieved_change()])),
                          ("dW_K", DerivedOutput(k, adjoint(), "sylvester.dW_K", [achieved_change()]))],
        ["H solves (W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = −ε msign(G_M); the achieved product change "
         "is −ε msign(G_M) − 2λH. solver='structured' uses the rank-d_h factors (O(d² d_h)), "
         "'dense' uses jax.scipy.linalg.solve_sylvester (O(d³))."],
        options={"solver": ("structured", ("structured", "dense"))}, positive_damping=True)]


def rule_module():
    from .cli import RuleModule
    return RuleModule(name="sylvester", title="Sylvester-regularized QK rule of Compositional Muon",
                      derivations=derivations, functions=emitted_functions,
                      scalars={eps: "eps", lam: "damping"}, description=__doc__.split("\n\n")[0],
                      examples=["python -m derivations.sylvester --emit jax > sylvester_jax.py",
                                "python -m derivations.sylvester --check"])


if __name__ == "__main__":
    import sys

    from .cli import main
    sys.exit(main(rule_module()))
