"""Shapes and operation counts (the classics' lemmas): associativity and the cost of a product, entry
counts, polynomial algebra in the dimensions, and the rank bounds. The bounds are inequalities
(``before ≤ after``) with a self-check of their own; the other lemmas are rewrites checked like the
other families. The nodes they rewrite (``Flops``, ``Entries``, ``Rank``, ``Group``, ``min``) are in
:mod:`derivations.vocabulary.spectral_nodes`.
"""

from __future__ import annotations

import dataclasses

import sympy
from sympy import S
from sympy.matrices.expressions import MatMul, MatrixSymbol, Transpose

from derivations.lemmas.base import _SMALL, Case, Lemma, NotApplicable, _fresh, _k, _m, _n, rewrite_nodes, stated_by
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product
from derivations.vocabulary.evaluate import InstanceSampler, evaluate, free_symbols
from derivations.vocabulary.nodes import dimension
from derivations.vocabulary.spectral_nodes import Entries, Flops, Group, Least, Rank, _Count


def _sampler(**extra):
    """The self-check sizes of the classics' lemmas (those of :mod:`derivations.lemmas.spectral`, ``r = 2``)."""
    return InstanceSampler({**_SMALL, dimension("r"): 2, **extra})


# ---- association and cost ---------------------------------------------------------------------------------
def _assoc_rewrite(expr, **_):
    """``(A B) C → A (B C)``: the first parenthesized pair regrouped to the right."""
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        for i in range(len(mats) - 1):
            g = mats[i]
            if isinstance(g, Group) and isinstance(g.arg, MatMul):
                inner = g.arg.as_coeff_matrices()
                a, rest = inner[1][0], product(inner[0], *inner[1][1:])
                return product(coeff, *mats[:i], a, Group(product(rest, mats[i + 1])), *mats[i + 2:]), []
        return None

    return rewrite_nodes(expr, rule, "no product (A B) C to regroup")


def _assoc_ids():
    a, b, c = _fresh("A", _m, _k), _fresh("B", _k, _m), _fresh("C", _m, _n)
    return [(product(Group(product(a, b)), c), product(a, Group(product(b, c))))], _sampler()


ASSOCIATIVITY = Lemma(
    key="associativity", number="A", title="Associativity of the matrix product",
    statement=stated_by(_assoc_ids),
    rewrite=_assoc_rewrite, identities=_assoc_ids, not_modelled="the grouping node is not in the explicit model",
)


def product_cost(expr):
    """``(cost, shape)`` of evaluating ``expr`` as written: ``2 m k p`` per product of an ``m × k`` and a
    ``k × p`` operand (a multiplication and an addition per term of each entry), groups first."""
    if isinstance(expr, Group):
        return product_cost(expr.arg)
    if isinstance(expr, MatMul):
        _, mats = expr.as_coeff_matrices()
        total_cost, shape = product_cost(mats[0])
        for m in mats[1:]:
            c, s = product_cost(m)
            total_cost += c + 2 * shape[0] * shape[1] * s[1]
            shape = (shape[0], s[1])
        return total_cost, shape
    if isinstance(expr, Transpose):
        c, (rows, cols) = product_cost(expr.arg)
        return c, (cols, rows)
    if getattr(expr, "is_Matrix", False) and not expr.atoms(MatMul):
        return S.Zero, tuple(expr.shape)
    raise NotApplicable(f"no cost model for {expr}")


def _flops_rewrite(expr, **_):
    """``flops(X) →`` the sum over the products of ``X`` of ``2 m k p``, read off the shapes."""
    def rule(e):
        if isinstance(e, Flops):
            return product_cost(e.args[0])[0], [("a product of an m×k and a k×p matrix costs m·p·k "
                                                 "multiplications and m·p·k additions")]
        return None

    return rewrite_nodes(expr, rule, "no flop count")


def _flops_ids():
    a, b, c = _fresh("A", _m, _k), _fresh("B", _k, _m), _fresh("C", _m, _n)
    return [(Flops(product(Group(product(a, b)), c)), 2 * _m * _k * _m + 2 * _m * _m * _n),
            (Flops(product(a, Group(product(b, c)))), 2 * _k * _m * _n + 2 * _m * _k * _n)], _sampler()


def _flops_statement():
    """The cost of a product as written, clause by clause: a matrix symbol (or its transpose) costs nothing;
    ``X B`` (``B`` a matrix symbol, ``X`` the factors before it) costs ``X`` and ``2 m k n``; ``X (Y)`` costs
    ``X``, ``Y`` and ``2 m k n``; a parenthesized ``(X)`` costs ``X``. Applied left to right until none applies
    (``closure="rewrite"``), they give the count of any product of matrix symbols, grouped or not.
    The statement's self-check evaluates each clause with ``X``, ``Y`` matrix symbols; the lemma's cases
    evaluate whole grouped products (``(A B) C`` and ``A (B C)``), so the clauses' left-to-right reading of
    an ungrouped product is exercised too."""
    a, b = _fresh("A", _m, _k), _fresh("B", _k, _n)
    x, y = _fresh("X", _m, _k), _fresh("Y", _k, _n)
    cost = 2 * _m * _k * _n
    clauses = (Clause(Flops(a), S.Zero), Clause(Flops(product(x, b)), Flops(x) + cost),
               Clause(Flops(product(x, Group(y))), Flops(x) + Flops(y) + cost), Clause(Flops(Group(x)), Flops(x)))
    sizes = (dict(_sampler().dims), {_m: 16, _n: 17, _k: 18})
    return Statement(clauses, closure="rewrite", leaves=frozenset({a, b}), sizes=sizes)


PRODUCT_COST = Lemma(
    key="product_cost", number="Fl", title="Cost of a matrix product",
    statement=_flops_statement(),
    conditions=(r"A, B \text{ matrix symbols (or their transposes)}",
                r"\text{a product without parentheses is evaluated left to right}"),
    rewrite=_flops_rewrite, identities=_flops_ids, not_modelled="a count, checked by executing the products",
)


def _entries_rewrite(expr, **_):
    """``#(X) → rows(X) · cols(X)``."""
    def rule(e):
        if isinstance(e, Entries):
            rows, cols = e.args[0].shape
            return rows * cols, []
        return None

    return rewrite_nodes(expr, rule, "no entry count")


def _entries_ids():
    a, b = _fresh("A", _m, _k), _fresh("B", _k, _n)
    return [(Entries(a), _m * _k), (Entries(a) + Entries(b), _m * _k + _k * _n)], _sampler()


ENTRY_COUNT = Lemma(
    key="entry_count", number="N", title="Entries of a matrix",
    statement=stated_by(_entries_ids),
    rewrite=_entries_rewrite, identities=_entries_ids, not_modelled="a count, checked on the values",
)


def _algebra_rewrite(expr, *, how="factor", **_):
    """The scalar part rewritten by SymPy's ``factor`` (or ``expand``, ``cancel``)."""
    fn = {"factor": sympy.factor, "expand": sympy.expand, "cancel": sympy.cancel}[how]
    if getattr(expr, "is_Matrix", False) or expr.atoms(_Count) or expr.atoms(MatrixSymbol):
        raise NotApplicable("scalar algebra applies to expressions in the dimensions only")
    new = fn(expr)
    if new == expr:
        raise NotApplicable(f"{how} leaves {expr} unchanged")
    return new, []


def _algebra_ids():
    return [Case(_m * _k + _k * _n, _k * (_m + _n), {"how": "factor"}),
            Case(_k * (_m + _n), _m * _k + _k * _n, {"how": "expand"})], _sampler()


SCALAR_ALGEBRA = Lemma(
    key="scalar_algebra", number="Q", title="Polynomial algebra in the dimensions",
    statement=dataclasses.replace(stated_by(_algebra_ids), closure="ring"),
    rewrite=_algebra_rewrite, identities=_algebra_ids, not_modelled="polynomials in the dimensions",
)


# ---- rank bounds (inequalities: before ≤ after) ------------------------------------------------------
def _bound_check(pairs_fn):
    def check(rng, lemma):
        pairs, sampler = pairs_fn()
        worst, fired = 0.0, 0.0
        for case in pairs:
            env = sampler.sample(rng, free_symbols(case.lhs, case.rhs))
            lhs, rhs = (float(evaluate(e, env, dims=sampler.dims)) for e in (case.lhs, case.rhs))
            worst = max(worst, max(0.0, lhs - rhs))
            new, _ = lemma.apply(case.lhs, **case.params)
            got = float(evaluate(new, env, dims=sampler.dims))
            fired = max(fired, abs(got - float(evaluate(case.rhs, env, dims=sampler.dims))))
        return {"lhs ≤ rhs": worst, "rewrite gives the bound": fired}
    return check


def _rank_product_rewrite(expr, **_):
    """``rank(A B …) → rank(A)``: the column space of a product lies in that of its first factor."""
    def rule(e):
        if isinstance(e, Rank) and isinstance(e.args[0], MatMul):
            _, mats = e.args[0].as_coeff_matrices()
            if len(mats) > 1:
                return Rank(mats[0]), [f"the column space of {e.args[0]} lies in that of {mats[0]}"]
        return None

    return rewrite_nodes(expr, rule, "no rank of a product")


def _rank_product_ids():
    a, b = _fresh("A", _m, _n), _fresh("B", _n, _k)
    return [Case(Rank(product(a, b)), Rank(a)), Case(Rank(product(b.T, a.T)), Rank(b.T))], _sampler()


RANK_PRODUCT = Lemma(
    key="rank_product", number="ρ", title="Rank of a product",
    statement=stated_by(_rank_product_ids, relation="<="),
    rewrite=_rank_product_rewrite, identities=_rank_product_ids, check=_bound_check(_rank_product_ids),
    not_modelled="an inequality",
)


def _rank_shape_rewrite(expr, **_):
    """``rank(A) → min(rows, cols)`` read off the shape of ``A``."""
    def rule(e):
        if isinstance(e, Rank):
            rows, cols = e.args[0].shape
            return Least(rows, cols), [f"{e.args[0]} is {rows}×{cols}"]
        return None

    return rewrite_nodes(expr, rule, "no rank")


def _rank_shape_ids():
    a = _fresh("A", _m, _n)
    return [Case(Rank(a), Least(_m, _n)), Case(Rank(a.T), Least(_n, _m))], _sampler()


RANK_SHAPE = Lemma(
    key="rank_shape", number="ρs", title="Rank is at most each dimension",
    statement=stated_by(_rank_shape_ids, relation="<="),
    rewrite=_rank_shape_rewrite, identities=_rank_shape_ids, check=_bound_check(_rank_shape_ids),
    not_modelled="an inequality",
)


def _min_rewrite(expr, *, keep, **_):
    """``min(x, y, …) → keep`` (one of the arguments)."""
    def rule(e):
        if isinstance(e, Least) and keep in e.args:
            return keep, []
        return None

    return rewrite_nodes(expr, rule, f"no min with the argument {keep}")


def _min_ids():
    return [Case(Least(_m, _n), _n, {"keep": _n}), Case(Least(_m, _n), _m, {"keep": _m})], _sampler()


MIN_BOUND = Lemma(
    key="min_bound", number="m", title="A minimum is at most each argument",
    statement=stated_by(_min_ids, relation="<="), rewrite=_min_rewrite, identities=_min_ids,
    check=_bound_check(_min_ids),
    not_modelled="an inequality",
)


#: lemmas whose steps are bounds (``before ≤ after``), not equalities
BOUND_LEMMAS = frozenset({RANK_PRODUCT.key, RANK_SHAPE.key, MIN_BOUND.key})

__all__ = [
    "ASSOCIATIVITY",
    "BOUND_LEMMAS",
    "ENTRY_COUNT",
    "MIN_BOUND",
    "PRODUCT_COST",
    "RANK_PRODUCT",
    "RANK_SHAPE",
    "SCALAR_ALGEBRA",
    "product_cost",
]
