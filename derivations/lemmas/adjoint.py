"""Adjoint moves and linearity of the inner product (Lemma 3, Lemma L)."""

from __future__ import annotations

from sympy import Add, S, Symbol
from sympy.matrices.expressions import MatAdd, MatMul, Transpose

from derivations.lemmas.base import _SMALL, Applies, Case, Lemma, Offer, _fresh, _k, _m, _n, rewrite_nodes, stated_by
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.evaluate import InstanceSampler
from derivations.vocabulary.nodes import Inner, dimension


# ---- Lemma 3: adjoint moves ---------------------------------------------------------------
def _adjoint_rewrite(expr, *, variable, **_):
    def rule(e):
        if not isinstance(e, Inner) or e.args[1] == variable:
            return None
        g, x = e.args
        if g.has(variable) and not x.has(variable):
            g, x = x, g  # ⟨A, B⟩ = ⟨B, A⟩
        coeff, mats = x.as_coeff_matrices() if isinstance(x, MatMul) else (S.One, [x])
        mats = list(mats)
        hits = [i for i, m in enumerate(mats) if m == variable or m == Transpose(variable)]
        if len(hits) != 1 or any(m.has(variable) for i, m in enumerate(mats) if i != hits[0]):
            return None
        i = hits[0]
        moved = product(coeff, *[transpose(m) for m in reversed(mats[:i])], g,
                        *[transpose(m) for m in reversed(mats[i + 1:])])
        if mats[i] != variable:  # ⟨A, Xᵀ⟩ = ⟨Aᵀ, X⟩
            moved = transpose(moved)
        return Inner(moved, variable), []

    return rewrite_nodes(expr, rule, f"no inner product ⟨G, L {variable} R⟩ to move onto {variable}")


def _adjoint_ids():
    g = _fresh("G", _m, _k)
    x = _fresh("X", _m, _n)
    b = _fresh("B", _n, _k)
    a = _fresh("A", _m, _m)
    f, h = _fresh("F", _k, _k), _fresh("H", _m, _k)
    pairs = [(Inner(g, x * b), Inner(g * b.T, x)), (Inner(g, a * x * b), Inner(a.T * g * b.T, x)),
             (Inner(f, b.T * x.T * h), Inner(h * f.T * b.T, x))]
    return [Case(lhs, rhs, {"variable": x}) for lhs, rhs in pairs], InstanceSampler(_SMALL)


def _adjoint_statement() -> Statement:
    """``⟨G, c A X B⟩ = ⟨c Aᵀ G Bᵀ, X⟩`` (A, B may be absent), the same for ``Xᵀ``, and with the sides swapped."""
    p, q = dimension("p"), dimension("q")
    g, a, x, b = _fresh("G", _m, _k), _fresh("A", _m, p), _fresh("X", p, q), _fresh("B", q, _k)
    y, c = _fresh("Y", q, p), Symbol("c", real=True)
    return Statement(
        (Clause(Inner(g, c * a * x * b), Inner(c * a.T * g * b.T, x)),
         Clause(Inner(g, c * a * y.T * b), Inner(c * b * g.T * a, y)),
         Clause(Inner(c * a * x * b, g), Inner(c * a.T * g * b.T, x))),
        optional=frozenset({a, b}),
        sizes=({_m: 7, p: 5, q: 3, _k: 4}, {_m: 24, p: 20, q: 16, _k: 18}))


ADJOINT_MOVE = Lemma(
    key="adjoint_move", number="3", title="Adjoint moves",
    statement=_adjoint_statement(),
    rewrite=_adjoint_rewrite, identities=_adjoint_ids, algebraic=True,
    applies=Applies(lambda view: [Offer(f"Lemma 3 (adjoint onto {view.variable})", {"variable": view.variable})],
                    order=40),
)




# ---- linearity of the inner product ---------------------------------------------------------
def _linearity_rewrite(expr, **_):
    def rule(e):
        if isinstance(e, Inner) and isinstance(e.args[1], MatAdd):
            return Add(*[Inner(e.args[0], t) for t in e.args[1].args]), []
        return None

    return rewrite_nodes(expr, rule, "no inner product with a sum to split")


def _linearity_ids():
    a, b, c = _fresh("A", _k, _n), _fresh("B", _k, _n), _fresh("C", _k, _n)
    return [(Inner(a, MatAdd(b, c)), Inner(a, b) + Inner(a, c))], InstanceSampler(_SMALL)


INNER_LINEARITY = Lemma(
    key="inner_linearity", number="L", title="Linearity of the inner product",
    statement=stated_by(_linearity_ids),
    rewrite=_linearity_rewrite, identities=_linearity_ids, algebraic=True,
)
