"""First-order matching of expressions against a statement's pattern symbols, for the trusted kernel
(:mod:`derivations.lemmas.kernel`).

The matcher (:meth:`Matcher.match`) is first-order with two liberties that the statements need:
a pattern matrix in a product may stand for a run of factors (``X`` matches ``A B``), and an
*optional* pattern matrix may stand for no factor at all (``⟨G, A X B⟩`` covers ``⟨G, X B⟩``).
Sums are matched up to the order of their terms; a *leaf* pattern matrix stands for one matrix symbol only.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import permutations

from sympy import Add, Basic, Mul, S
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixSymbol, Transpose

from derivations.lemmas.statement import known
from derivations.vocabulary.algebra import product, tidy, transpose
from derivations.vocabulary.nodes import facts_of

MAX_SEGMENT = 6  # factors a pattern matrix may stand for
MAX_PERMUTED = 6  # terms of a sum matched up to order


def is_matrix(e) -> bool:
    """Whether ``e`` is a matrix expression (SymPy's ``is_Matrix``)."""
    return bool(getattr(e, "is_Matrix", False))


def matrix_factors(e) -> tuple[Basic, list]:
    """``(scalar coefficient, [matrix factors])`` of a product; a lone matrix is one factor, a scalar none."""
    if isinstance(e, MatMul):
        c, mats = e.as_coeff_matrices()
        return c, list(mats)
    if is_matrix(e):
        return S.One, [e]
    return e, []


class Matcher:
    """Matches expressions against one statement's pattern symbols."""

    def __init__(self, variables, dimensions, optional=frozenset(), assumed=frozenset(), leaves=frozenset()):
        self.variables = frozenset(variables)
        self.leaves = frozenset(leaves)  # pattern matrices that stand for a matrix symbol or its transpose only
        self.assumed = frozenset(assumed)  # expressions a step declares to have every fact it needs
        self.dimensions = frozenset(dimensions)
        self.optional = frozenset(optional)

    # ---- dimensions -----------------------------------------------------------------------
    def _dim(self, p, e, b) -> dict | None:
        if p in self.dimensions and p not in b:
            return {**b, p: e}
        if isinstance(p, Mul) and len(p.args) == 2 and p.args[0].is_Integer and p.args[1] in self.dimensions and (
                p.args[1] not in b and (e / p.args[0]).as_coeff_Mul()[0].is_Integer):  # ``2 b`` binds ``b = e / 2``
            return {**b, p.args[1]: e / p.args[0]}
        # a bound dimension compares by its value (never re-bound, even where that value is named like a pattern's)
        return b if p.xreplace({k: v for k, v in b.items() if k in self.dimensions}) == e else None

    def _shape(self, p, e, b) -> dict | None:
        for pd, ed in zip(p.shape, e.shape, strict=True):
            b = self._dim(pd, ed, b)
            if b is None:
                return None
        return b

    def _leaf(self, p, e) -> bool:
        return p not in self.leaves or isinstance(e.arg if isinstance(e, Transpose) else e, MatrixSymbol)

    def _known(self, fact, e) -> bool:
        return e in self.assumed or known(fact, e)

    # ---- matching -------------------------------------------------------------------------
    def match(self, p: Basic, e: Basic, b: dict) -> Iterator[dict]:
        """Every extension of the binding ``b`` under which ``p`` equals ``e`` (in normal form)."""
        if p in self.variables:
            yield from self._bind(p, e, b)
        elif isinstance(p, (Add, Mul)) and not is_matrix(p) and self._all_bound(p, b):
            if tidy(p.xreplace(b)) == tidy(e):  # a scalar of bound symbols (an exponent ``p/2``): its value
                yield b
        elif isinstance(p, Transpose):
            target = e.arg if isinstance(e, Transpose) else transpose(e)
            yield from self.match(p.arg, target, b)
        elif isinstance(p, MatMul):
            yield from self._product(p, e, b)
        elif isinstance(p, (MatAdd, Add)):
            yield from self._sum(p, e, b)
        elif isinstance(p, Mul):
            yield from self._scalar_product(p, e, b)
        elif isinstance(p, Identity):
            if isinstance(e, Identity):
                found = self._dim(p.rows, e.rows, b)
                if found is not None:
                    yield found
        elif p in self.dimensions or not p.args:
            yield from self._atom(p, e, b)
        elif type(p) is type(e) and len(p.args) == len(e.args):
            labels = getattr(type(p), "label_args", ())  # a node's print labels (a block's name): no mathematics
            yield from self._args([e.args[i] if i in labels else a for i, a in enumerate(p.args)], list(e.args), b)

    def _all_bound(self, p, b) -> bool:
        return p.free_symbols & (self.variables | self.dimensions) <= set(b)

    def _atom(self, p, e, b) -> Iterator[dict]:
        if p in self.dimensions:  # an integer pattern symbol outside a shape (a block size)
            found = self._dim(p, e, b)
            if found is not None:
                yield found
        elif p == e or p.xreplace({k: v for k, v in b.items() if k in self.dimensions}) == e:
            yield b

    def _args(self, ps, es, b) -> Iterator[dict]:
        if not ps:
            yield b
            return
        for b2 in self.match(ps[0], es[0], b):
            yield from self._args(ps[1:], es[1:], b2)

    def _bind(self, p, e, b) -> Iterator[dict]:
        if p in b:
            if tidy(b[p]) == tidy(e):
                yield b
            return
        if isinstance(p, MatrixSymbol):
            if not is_matrix(e) or not all(self._known(f, e) for f in facts_of(p)) or not self._leaf(p, e):
                return
            found = self._shape(p, e, b)
            if found is not None:
                yield {**found, p: e}
        elif not is_matrix(e) and (not p.is_positive or e.is_positive) and (not p.is_nonnegative or e.is_nonnegative):
            yield {**b, p: e}

    def _product(self, p, e, b) -> Iterator[dict]:
        pc, pm = matrix_factors(p)
        ec, em = matrix_factors(e)
        if not em:
            return
        if pc == 1 and ec != 1:  # a scalar commutes: any factor may carry it (a pattern matrix takes it along)
            for j in range(len(em)):
                yield from self._sequence(pm, [*em[:j], product(ec, em[j]), *em[j + 1:]], b)
            return
        for b2 in self._coefficient(pc, ec, b):
            yield from self._sequence(pm, em, b2)

    def _coefficient(self, pc, ec, b) -> Iterator[dict]:
        if pc == ec:
            yield b
        elif pc != 1:
            yield from self.match(pc, ec, b)

    def _runs(self, head, var, em, b) -> Iterator[tuple[int, dict]]:
        """The runs ``em[:k]`` an unbound pattern matrix can stand for (``k = 0``: an absent optional one)."""
        if var in self.optional:
            unbound = var.rows in self.dimensions and var.rows not in b  # (a concrete dimension may share its name)
            size = em[0].rows if em else None if unbound else var.rows.xreplace(b)
            found = None if size is None else self._shape(var, Identity(size), b)
            if found is not None:
                yield 0, {**found, var: Identity(size)}
        for k in range(1, min(len(em), MAX_SEGMENT) + 1):
            run = product(*em[:k])
            value = transpose(run) if isinstance(head, Transpose) else run
            found = self._shape(var, value, b)
            if found is not None and all(self._known(f, value) for f in facts_of(var)) and self._leaf(var, value):
                yield k, {**found, var: value}

    def _sequence(self, pm, em, b) -> Iterator[dict]:
        if not pm:
            if not em:
                yield b
            return
        head, rest = pm[0], pm[1:]
        var = head.arg if isinstance(head, Transpose) else head
        if var in self.variables and var not in b:
            for k, b2 in self._runs(head, var, em, b):
                yield from self._sequence(rest, em[k:], b2)
            return
        if var in self.variables and isinstance(b.get(var), Identity):  # an absent optional factor
            yield from self._sequence(rest, em, b)
        if not em:
            return
        if var in self.variables:  # a bound pattern matrix stands for the same run again
            want = tidy(transpose(b[var]) if isinstance(head, Transpose) else b[var])
            for k in range(2, min(len(em), MAX_SEGMENT) + 1):
                if tidy(product(*em[:k])) == want:
                    yield from self._sequence(rest, em[k:], b)
        for b2 in self.match(head, em[0], b):
            yield from self._sequence(rest, em[1:], b2)

    def _sum(self, p, e, b) -> Iterator[dict]:
        ps, es = list(p.args), list(e.args) if isinstance(e, (MatAdd, Add)) else [e]
        if len(ps) != len(es) or len(es) > MAX_PERMUTED:
            return
        for order in permutations(es):
            yield from self._args(ps, list(order), b)

    def _scalar_product(self, p, e, b) -> Iterator[dict]:
        ps = list(p.args)
        es = list(e.args) if isinstance(e, Mul) else [e]
        free = [x for x in ps if x in self.variables and x not in b and not is_matrix(x)]
        fixed = [x for x in ps if x not in free]
        if len(fixed) > len(es) or len(free) > 1 or (not free and len(fixed) != len(es)) or len(es) > MAX_PERMUTED:
            return
        for order in permutations(range(len(es)), len(fixed)):
            for b2 in self._args(fixed, [es[i] for i in order], b):
                left = [es[i] for i in range(len(es)) if i not in order]
                if free:
                    yield {**b2, free[0]: Mul(*left)}
                elif not left:
                    yield b2


def substitute(expr: Basic, binding: dict) -> Basic:
    """``expr`` with the pattern symbols replaced, in normal form."""
    return tidy(expr.xreplace(binding))
