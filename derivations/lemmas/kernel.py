"""The trusted kernel: is a step an instance of the statement of the lemma it cites?

A rewrite step turns ``before`` into ``after``. It counts as an instance of a lemma's
:class:`~derivations.lemmas.statement.Statement` when ``after`` is ``before`` with some of its
subexpressions replaced, each replacement ``σ(lhs) → σ(rhs)`` (or ``σ(rhs) → σ(lhs)``) for one
clause of the statement under one substitution ``σ`` of its pattern symbols, and the side
conditions hold for ``σ`` by what the expressions carry. Expressions are compared in the sound
normal form of :func:`derivations.engine.algebra.tidy` (flattened products and sums, transposes
pushed inward, identities dropped): nothing else is taken on trust.

The matcher (:func:`match`) is first-order with two liberties that the statements need:
a pattern matrix in a product may stand for a run of factors (``X`` matches ``A B``), and an
*optional* pattern matrix may stand for no factor at all (``⟨G, A X B⟩`` covers ``⟨G, X B⟩``).
Sums are matched up to the order of their terms; a *leaf* pattern matrix stands for one matrix symbol only.

Beyond one replacement per subexpression: a ``closure="ring"`` statement admits sides with one free-ring normal
form; a ``closure="rewrite"`` statement admits sides that its clauses, applied left to right until none applies
(a chain of instances), bring to one normal form; a step's own definitions (``defined_by``) must be instances of
the statement's definition clauses and then unfold like clauses (an abbreviation fixes the sizes its name leaves
free); a ``closure="induction"`` statement admits a step whose claims ``old = new`` follow one after the other from
the derivation's definitions; a ``restrict`` step must replace the whole
constraint ``σ(lhs)`` by ``σ(rhs)`` for a bound ``lhs ≤ rhs``, its objective unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import permutations

from sympy import Add, Basic, Mul, S, Symbol
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixSymbol, Transpose

from derivations.engine.algebra import map_bottom_up, product, rebuild, replace_free, tidy, total, transpose
from derivations.engine.vocabulary import facts_of
from derivations.lemmas.statement import Clause, Statement, follows, known, ring_normal_form

MAX_SEGMENT = 6  # factors a pattern matrix may stand for
MAX_PERMUTED = 6  # terms of a sum matched up to order
MAX_REWRITES = 64  # passes of a ``closure="rewrite"`` statement's clauses over one side of a step


def _is_matrix(e) -> bool:
    return bool(getattr(e, "is_Matrix", False))


def _factors(e) -> tuple[Basic, list]:
    if isinstance(e, MatMul):
        c, mats = e.as_coeff_matrices()
        return c, list(mats)
    if _is_matrix(e):
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
        elif isinstance(p, (Add, Mul)) and not _is_matrix(p) and self._all_bound(p, b):
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
            if not _is_matrix(e) or not all(self._known(f, e) for f in facts_of(p)) or not self._leaf(p, e):
                return
            found = self._shape(p, e, b)
            if found is not None:
                yield {**found, p: e}
        elif not _is_matrix(e) and (not p.is_positive or e.is_positive) and (not p.is_nonnegative or e.is_nonnegative):
            yield {**b, p: e}

    def _product(self, p, e, b) -> Iterator[dict]:
        pc, pm = _factors(p)
        ec, em = _factors(e)
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
        free = [x for x in ps if x in self.variables and x not in b and not _is_matrix(x)]
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


class InstanceChecker:
    """Decides whether ``before → after`` is made of instances of a statement's clauses."""

    def __init__(self, statement, extra_clauses=(), assumed=()):
        self.statement = statement
        pattern = Matcher(statement.variables, statement.pattern_dimensions, statement.optional, assumed,
                          statement.leaves)
        concrete = Matcher((), ())  # a step's own definitions have no pattern symbols
        self.clauses = ([(c, pattern) for c in statement.clauses if c.relation == "=" and not c.defines]
                        + [(c, concrete) for c in extra_clauses])
        self.used: list = []

    def replaced(self, b: Basic, a: Basic) -> bool:
        """``b → a`` is one clause instance (either direction), its side conditions holding, or the
        transpose of one (an equation stays true when both sides are transposed)."""
        if self._replaced(b, a):
            return True
        return _is_matrix(b) and _is_matrix(a) and self._replaced(transpose(b), transpose(a))

    def _replaced(self, b: Basic, a: Basic) -> bool:
        for clause, matcher in self.clauses:
            for lhs, rhs in ((clause.lhs, clause.rhs), (clause.rhs, clause.lhs)):
                for bound in matcher.match(lhs, b, {}):
                    binding = next((x for x in matcher.match(rhs, tidy(a), bound)
                                    if not matcher.variables or self._conditions(x)), None)
                    if binding is not None:
                        self.used.append((clause, binding))
                        return True
        return False

    def rewritten(self, b: Basic, a: Basic) -> bool:
        """``a`` is ``b`` with *every* instance of one clause's side (a whole node, or a run of product
        factors) replaced by the other side, in normal form: several replacements whose scalars merge
        into one coefficient (``C_W = c I`` twice) are one step."""
        target = tidy(a)
        for clause, matcher in self.clauses:
            for lhs, rhs in ((clause.lhs, clause.rhs), (clause.rhs, clause.lhs)):
                found = []

                def replace(e, lhs=lhs, rhs=rhs, matcher=matcher, found=found, clause=clause):
                    for binding in matcher.match(lhs, e, {}):
                        if all(v in binding for v in matcher.variables if rhs.has(v)) and (
                                not matcher.variables or self._conditions(binding)):
                            found.append((clause, binding))
                            return substitute(rhs, binding)
                    return e

                if tidy(map_bottom_up(b, replace, enter_derived=True)) == target and found:
                    self.used.extend(found)
                    return True
        return False

    def _conditions(self, binding) -> bool:
        """The side conditions on the symbols this instance binds (a clause of the other side binds others)."""
        bound = set(binding)
        return all(c.holds(binding) for c in self.statement.conditions
                   if c.subject.atoms(MatrixSymbol, Symbol) - self.statement.pattern_dimensions <= bound)

    def explains(self, b: Basic, a: Basic) -> bool:
        """``a`` is ``b`` with subexpressions replaced by clause instances."""
        b, a = tidy(b), tidy(a)
        if b == a or self.replaced(b, a):
            return True
        if _is_matrix(b) and _is_matrix(a) and (isinstance(b, MatMul) or isinstance(a, MatMul)):
            return self._products(b, a)
        if isinstance(b, (MatAdd, Add)) and isinstance(a, (MatAdd, Add)):
            return self._sums(b, a)
        if isinstance(b, Mul) and isinstance(a, Mul):
            return self._sums(b, a, combine=Mul)
        if type(b) is type(a) and len(b.args) == len(a.args) and b.args:
            return all(self.explains(x, y) for x, y in zip(b.args, a.args, strict=True))
        return False

    def _products(self, b, a) -> bool:
        bc, bm = _factors(b)
        ac, am = _factors(a)
        if bc != ac:
            return False
        memo: dict = {}

        def aligned(i, j) -> bool:
            if (i, j) in memo:
                return memo[(i, j)]
            memo[(i, j)] = False
            if i == len(bm) and j == len(am):
                memo[(i, j)] = True
                return True
            ok = False
            if i < len(bm) and j < len(am) and self.explains(bm[i], am[j]):
                ok = aligned(i + 1, j + 1)
            for i2 in range(i + 1, min(len(bm), i + MAX_SEGMENT) + 1):
                if ok:
                    break
                for j2 in range(j, min(len(am), j + MAX_SEGMENT) + 1):
                    if (i2 - i, j2 - j) == (1, 1):
                        continue
                    seg_a = product(*am[j:j2]) if j2 > j else Identity(bm[i].rows)
                    if self.replaced(product(*bm[i:i2]), seg_a) and aligned(i2, j2):
                        ok = True
                        break
            if not ok and i < len(bm) and j < len(am):
                for j2 in range(j + 2, min(len(am), j + MAX_SEGMENT) + 1):
                    if self.replaced(bm[i], product(*am[j:j2])) and aligned(i + 1, j2):
                        ok = True
                        break
            memo[(i, j)] = ok
            return ok

        return aligned(0, 0)

    def _sums(self, b, a, combine=None) -> bool:
        bt, at = list(b.args), list(a.args)
        common = [t for t in bt if t in at]
        rest_b = [t for t in bt if t not in common]
        rest_a = [t for t in at if t not in common]
        join = combine or (total if _is_matrix(b) else Add)
        if not rest_b or not rest_a:
            return False
        if common and self.replaced(join(*rest_b), join(*rest_a)):
            return True
        if len(rest_b) == len(rest_a) and len(rest_b) <= MAX_PERMUTED:
            return any(all(self.explains(x, y) for x, y in zip(rest_b, order, strict=True))
                       for order in permutations(rest_a))
        return False


def is_instance(statement, before, after, extra_clauses=(), assumed=()) -> tuple[bool, list]:
    """Whether every part ``before[i] → after[i]`` is made of instances of ``statement``'s clauses
    (and of ``extra_clauses``: definitions a step brings, like a change of variables' ``X = Z C⁻¹``).
    Returns ``(verdict, [(clause, binding), …])`` with the instances used."""
    checker = InstanceChecker(statement, extra_clauses, assumed)
    ok = all(checker.explains(b, a) or checker.rewritten(b, a) for b, a in zip(before, after, strict=True))
    return ok, checker.used


def _defines(statement, lhs, rhs) -> bool:
    """``lhs = rhs`` (a step's definition) is an instance of one of the statement's definition clauses."""
    matcher = Matcher(statement.variables, statement.pattern_dimensions, statement.optional, leaves=statement.leaves)
    return any(True for c in statement.clauses if c.defines for binding in matcher.match(c.lhs, lhs, {})
               for _ in matcher.match(c.rhs, tidy(rhs), binding))


def _back_substituted(statement, b, a, depth: int = 3) -> bool:
    """``a`` is a definition clause's right side ``Z C⁻¹`` with the new variable ``Z`` bound to ``b`` (or to
    such a back-substitution of ``b``: several changes of variables undone at once)."""
    b, a = tidy(b), tidy(a)
    if b == a:
        return True
    if depth == 0:
        return False
    matcher = Matcher(statement.variables, statement.pattern_dimensions, statement.optional, leaves=statement.leaves)
    for c in statement.clauses:
        if not c.defines:
            continue
        new = [v for v in c.rhs.atoms(MatrixSymbol) if v in matcher.variables and v != c.lhs and v.shape == c.lhs.shape]
        for binding in matcher.match(c.rhs, a, {}):
            if any(_back_substituted(statement, b, binding.get(v, v), depth - 1) for v in new):
                return True
    return False


def _restricted(statement, before, after) -> bool:
    """A restriction ``(objective, constraint) → (objective, constraint')``: the objective unchanged and the whole
    constraint ``σ(lhs)`` replaced by ``σ(rhs)`` for a clause ``lhs ≤ rhs`` (the side conditions holding), so
    that ``constraint' ≤ β`` implies ``constraint ≤ β``: the feasible set only shrinks."""
    if len(before) != 2 or len(after) != 2 or tidy(before[0]) != tidy(after[0]):
        return False
    checker = InstanceChecker(statement)
    matcher = Matcher(statement.variables, statement.pattern_dimensions, statement.optional, leaves=statement.leaves)
    return any(checker._conditions(binding) for clause in statement.clauses if clause.relation == "<="
               for bound in matcher.match(clause.lhs, tidy(before[1]), {})
               for binding in matcher.match(clause.rhs, tidy(after[1]), bound))


def _parts(e) -> Iterator[tuple[Basic, Callable]]:
    """``(part, put)``: ``e`` itself and every run of two or more factors of a product, each with the
    function that puts a replacement for it back into ``e``."""
    yield e, lambda new: new
    if isinstance(e, MatMul):
        c, mats = _factors(e)
        for i in range(len(mats)):
            for j in range(i + 2, min(len(mats), i + MAX_SEGMENT) + 1):
                if (i, j) != (0, len(mats)) or c != 1:  # the whole run too when a coefficient stands before it
                    yield product(*mats[i:j]), lambda new, i=i, j=j: product(c, *mats[:i], new, *mats[j:])


def rewrite_normal_form(statement, expr, extra_clauses=()) -> Basic | None:
    """``expr`` with ``statement``'s clauses applied left to right (``σ(lhs) → σ(rhs)``, the side conditions
    holding for ``σ``) and ``extra_clauses`` (a step's own definitions, ``name → definition``) to whole nodes and
    runs of product factors, pass after pass, until none applies: a chain of clause instances. ``None`` when the
    chain does not end within :data:`MAX_REWRITES` passes."""
    checker = InstanceChecker(statement, extra_clauses)

    def once(e):
        for part, put in _parts(e):
            for clause, matcher in checker.clauses:
                for binding in matcher.match(clause.lhs, part, {}):
                    if all(v in binding for v in matcher.variables if clause.rhs.has(v)) and checker._conditions(
                            binding):
                        return put(substitute(clause.rhs, binding))
        return e

    def deep_tidy(e):  # the normal form of tidy, inside derived nodes too (a power's base)
        return map_bottom_up(e, lambda x: rebuild(x, x.args) if isinstance(x, (MatMul, MatAdd, Transpose)) else x,
                             enter_derived=True)

    expr = deep_tidy(expr)
    for _ in range(MAX_REWRITES):
        new = deep_tidy(map_bottom_up(expr, once, enter_derived=True))
        if new == expr:
            return expr
        expr = new
    return None


def _abbreviated_sizes(statement, params) -> dict:
    """The sizes a step's abbreviations fix: ``P`` (``n × m``) abbreviating ``blockdiag(W_K, W_Q)`` (``2d × 2d_h``)
    is defined only where ``n = 2d`` and ``m = 2d_h``, so each free dimension of the name is bound to the
    definition's."""
    out = {}
    for key in statement.defined_by:
        for expr, name in (params.get(key) or {}).items():  # an abbreviation ``{definition: name}``
            if isinstance(name, MatrixSymbol) and not isinstance(expr, MatrixSymbol):
                out.update({a: b for a, b in zip(name.shape, expr.shape, strict=True) if a != b and a.is_Symbol})
    return out


def _own_definitions(statement, params, context) -> tuple[list, str | None]:
    """The step's own definitions as clauses ``name = definition``, or the reason one is refused: each must be an
    instance of a definition clause and agree with the derivation's own definition of its name, if any."""
    extra = []
    for key in ("gradients", *statement.defined_by):
        for name, definition in (params.get(key) or {}).items():
            if isinstance(definition, MatrixSymbol) and not isinstance(name, MatrixSymbol):
                name, definition = definition, name  # an abbreviation ``{definition: name}``
            definition = product(*definition) if isinstance(definition, tuple) else definition  # its factors
            if not _defines(statement, name, definition):
                return [], f"the definition {name} = {definition} is not an instance of the statement's definition"
            if name in context and tidy(context[name]) != tidy(definition):  # the chain rule's gradients too
                return [], f"the definition {name} = {definition} is not the derivation's {name} = {context[name]}"
            if name.shape != definition.shape:
                return [], f"the definition {name} = {definition} relates matrices of different shapes"
            extra.append(Clause(name, definition))
    return extra, None


def step_instance(lemma, kind: str, before, after, *, substitution=None, params=None,
                  definitions=None) -> tuple[str, str | None]:
    """The kernel's verdict on one step: ``(status, failure)``.

    ``status`` says how the step was shown to be an instance of ``lemma``'s statement (or why that
    does not apply); ``failure`` is ``None`` or the reason the step is *not* an instance. A step's own
    definitions (a change of variables' ``X = Z C⁻¹``, a chain-rule step's factor gradients) must be
    instances of the statement's definition clauses; the change of variables is then applied
    everywhere outside derived nodes, and a factor gradient's definition may be replaced by its name. A definition
    in a ``defined_by`` parameter, and a chain-rule factor gradient, must also agree with the derivation's own
    ``definitions`` of that name.
    A statement with ``closure="ring"`` admits a step whose sides have one normal form in the free ring.
    """
    statement = lemma.statement
    if not isinstance(statement, Statement):
        return "n/a: the statement is text", None
    if kind == "back_substitute":
        ok = all(_back_substituted(statement, b, a) for b, a in zip(before, after, strict=True))
        return ("instance of the definition", None) if ok else (
            "", "the back-substitution is not the statement's definition applied to the solution")
    if kind == "restrict":
        return ("instance of a bound: the new constraint implies the old", None) if _restricted(
            statement, before, after) else ("", "the new constraint is not an instance of a bound c_old ≤ c_new of "
                                                "the statement (the objective unchanged)")
    if kind not in ("rewrite", "change_of_variables"):
        return f"n/a: a {kind.replace('_', ' ')} step", None
    if statement.closure == "ring":
        same = all(ring_normal_form(b) == ring_normal_form(a) for b, a in zip(before, after, strict=True))
        return ("instance: one normal form in the free ring", None) if same else (
            "", "the two sides differ in the free ring (not a consequence of the ring axioms)")
    if kind == "change_of_variables":
        old, new = substitution
        if not _defines(statement, old, new):
            return "", f"the substitution {old} = {new} is not an instance of the statement's definition"
        before = [replace_free(b, old, new) for b in before]
    context, params = definitions or {}, params or {}
    sizes = _abbreviated_sizes(statement, params)
    if sizes:  # the step holds where its abbreviations are defined: their names' free dimensions are the definitions'
        before, after = [b.xreplace(sizes) for b in before], [a.xreplace(sizes) for a in after]
        params = {k: ({n.xreplace(sizes): v.xreplace(sizes) for n, v in p.items()} if k in statement.defined_by else p)
                  for k, p in params.items()}
        context = {n.xreplace(sizes): v.xreplace(sizes) for n, v in context.items()}
    extra, failure = _own_definitions(statement, params, context)
    if failure is not None:
        return "", failure
    if statement.closure == "induction":
        return _induction(statement, before, after, params, context, extra)
    if statement.closure == "rewrite":  # the step's own definitions unfold (name → definition) with the clauses
        forms = [(rewrite_normal_form(statement, b, extra), rewrite_normal_form(statement, a, extra))
                 for b, a in zip(before, after, strict=True)]
        same = all(x is not None and y is not None and ring_normal_form(x) == ring_normal_form(y) for x, y in forms)
        where = f" (at {', '.join(f'{k} = {v}' for k, v in sizes.items())}, as the abbreviations fix)" if sizes else ""
        return (f"instance: the clauses, applied left to right, give both sides one normal form{where}", None) if same \
            else ("", "the clauses, applied left to right, do not give both sides one normal form")
    assumed = tuple((params or {}).get("targets") or ())  # facts the rule module declares (msign's polar form)
    ok, used = is_instance(statement, before, after, extra, assumed)
    if not ok:
        return "", "the step is not made of instances of the statement's clauses"
    clauses = sorted({statement.clauses.index(c) + 1 for c, _ in used if c in statement.clauses})
    status = (f"instance of clause{'s' if len(clauses) > 1 else ''} {', '.join(map(str, clauses))}"
              if clauses else "instance of the definitions")
    if assumed:
        status += f" (side conditions of {', '.join(map(str, assumed))} declared by the step)"
    return status, None


def _induction(statement, before, after, params, definitions, extra) -> tuple[str, str | None]:
    """``closure="induction"``: the step's claims ``{old: new}`` are proven one after the other, each from the
    derivation's definitions and the claims before it (the base case: both definitions agree; the induction step:
    they agree once the iterate is unfolded and the earlier claims applied, which is the statement's one-step
    identity in the free ring), and the step is its start with its own definitions and the claims applied."""
    pending = {old: new for key in statement.claims for old, new in (params.get(key) or {}).items()}
    if not pending:
        return "", "the step states no claims to prove"
    claims, proven = dict(pending), {}
    while pending:
        done = {old: new for old, new in pending.items() if follows(old, new, definitions, proven)}
        if not done:
            old, new = next(iter(pending.items()))
            return "", (f"the claim {old} = {new} does not follow from the derivation's definitions and the claims "
                        f"proven before it")
        proven.update(done)
        pending = {old: new for old, new in pending.items() if old not in done}
    for b, a in zip(before, after, strict=True):
        for clause in extra:
            b = replace_free(b, clause.lhs, clause.rhs)
        for old, new in claims.items():
            b = replace_free(b, old, new)
        if tidy(b) != tidy(a) and ring_normal_form(b) != ring_normal_form(a):
            return "", "the step is not its start with the claims and its definitions applied"
    plural = "s" if len(claims) > 1 else ""
    return f"instance: {len(claims)} claim{plural} proven by induction from the definitions", None


def proof_status(steps) -> dict:
    """How far the steps are proven: ``{"for all sizes": n, "at instances": m, "why": {reason: count}}``.

    A step is proven *for all sizes* (modulo the statement of the lemma it cites) when this kernel matched
    it, with symbolic dimensions, against that statement (its ``instance`` verdict); every other step is
    checked at random instances only, for the reason counted in ``why``.
    """
    why: dict[str, int] = {}
    proven = 0
    for step in steps:
        status = step.instance or ""
        if status.startswith("instance"):
            proven += 1
            continue
        reason = status.removeprefix("n/a: ")
        if step.kind == "solve":
            reason = "a solve step (certified by duality)"
        elif reason == "the statement is text":
            reason = f"Lemma {step.lemma.number}'s statement is not yet a SymPy object"
        why[reason] = why.get(reason, 0) + 1
    return {"for all sizes": proven, "at instances": len(steps) - proven, "why": why}


__all__ = ["InstanceChecker", "Matcher", "is_instance", "proof_status", "ring_normal_form", "step_instance",
           "substitute"]
