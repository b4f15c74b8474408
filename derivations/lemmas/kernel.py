"""The trusted kernel: is a derivation step an instance of the statement of the lemma it cites?

This module is the kernel: 564 lines, 43 functions and methods, none of cyclomatic complexity over 15
(``tests/lemmas/test_kernel_complexity.py`` holds both). The engine asks :func:`step_instance` once per step; it
dispatches on the kind of step to one small verdict helper each.

What it checks (σ: a substitution of the statement's pattern symbols under which the side conditions hold):

* ``rewrite`` and ``change_of_variables``, clause by clause (:class:`InstanceChecker`): ``after`` is ``before``
  with subexpressions replaced, each ``σ(lhs) → σ(rhs)`` (or back) for one equality clause; a change of variables
  ``old = new`` must itself be an instance of a definition clause, and is applied to ``before`` first. By the
  statement's closure instead: ``"ring"``, both sides as given have one free-ring normal form; ``"rewrite"``, the
  clauses applied left to right until none applies (at most :data:`MAX_REWRITES` passes) give both sides one normal
  form; ``"induction"``, the step's claims ``old = new`` follow one after the other from the derivation's
  definitions, and the step is its start with them applied.
* ``restrict``: the objective unchanged, the whole constraint ``σ(lhs)`` replaced by ``σ(rhs)`` for a bound
  ``lhs ≤ rhs``. ``back_substitute``: exactly the derivation's recorded changes of variables undone.
* a step's own definitions (``defined_by``, a chain rule's gradients): each an instance of a definition clause,
  equal to the derivation's definition of that name, of equal shapes, never naming an independent symbol; a change
  of variables' new name is fresh. An abbreviation fixes the sizes its name leaves free.

Any other kind of step, and a lemma whose statement is text, is ``n/a`` here (checked at random instances only).

What it trusts, unchecked:

* the lemma statements: their clauses are taken as true (each is evaluated at random instances by
  :meth:`Statement.check <derivations.lemmas.statement.Statement.check>`, not proven);
* SymPy's expression trees (construction, structural equality, ``xreplace``, ``expand`` of scalar coefficients)
  and its sign assumptions (``is_positive``, ``is_nonzero``);
* :mod:`derivations.vocabulary.algebra`: the sound normal form :func:`~derivations.vocabulary.algebra.tidy` (flattened
  products and sums, transposes pushed inward, identities dropped), in which expressions are compared, and its tree
  helpers (``product``, ``replace_free``, ``map_bottom_up``);
* the first-order matcher :class:`~derivations.lemmas.matcher.Matcher` and its ``substitute``;
* from :mod:`derivations.lemmas.statement`: ``Condition.holds`` (side conditions decided from the facts the
  expressions carry), ``ring_normal_form`` and ``follows``;
* the expressions a step declares to have every fact its clauses need (``params["targets"]``, msign's polar
  form): taken as given, and named in the step's status.

Nothing here evaluates a matrix: no numeric evaluation is trusted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import permutations

from sympy import Add, Basic, Mul, Symbol
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixSymbol, Transpose

from derivations.lemmas.matcher import MAX_PERMUTED, MAX_SEGMENT, Matcher, is_matrix, matrix_factors, substitute
from derivations.lemmas.statement import Clause, Statement, follows, ring_normal_form
from derivations.vocabulary.algebra import map_bottom_up, product, rebuild, replace_free, tidy, total, transpose

MAX_REWRITES = 64  # passes of a ``closure="rewrite"`` statement's clauses over one side of a step


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
        return is_matrix(b) and is_matrix(a) and self._replaced(transpose(b), transpose(a))

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
                found: list = []

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
        if is_matrix(b) and is_matrix(a) and (isinstance(b, MatMul) or isinstance(a, MatMul)):
            return self._products(b, a)
        if isinstance(b, (MatAdd, Add)) and isinstance(a, (MatAdd, Add)):
            return self._sums(b, a)
        if isinstance(b, Mul) and isinstance(a, Mul):
            return self._sums(b, a, combine=Mul)
        if type(b) is type(a) and len(b.args) == len(a.args) and b.args:
            return all(self.explains(x, y) for x, y in zip(b.args, a.args, strict=True))
        return False

    def _products(self, b, a) -> bool:
        """Products whose factors align left to right (:class:`_Alignment`). With two coefficients, their ratio (a
        scalar commutes with every factor) is carried by one factor of the side with the larger coefficient, so that
        a clause instance may take it along (``τ G_M W_K → G_Q`` for ``G_Q = τ G_M W_K``)."""
        bc, bm = matrix_factors(b)
        ac, am = matrix_factors(a)
        if bc == ac:
            return _Alignment(self, bm, am).aligned(0, 0)
        if bc == 0 or ac == 0 or min(len(bm), len(am)) < 2:  # one factor: a clause instance (explains) or nothing
            return False
        if ac == 1:
            return any(_Alignment(self, _carried(bm, i, bc), am).aligned(0, 0) for i in range(len(bm)))
        return any(_Alignment(self, bm, _carried(am, i, ac / bc)).aligned(0, 0) for i in range(len(am)))

    def _sums(self, b, a, combine=None) -> bool:
        """Sums (or scalar products, ``combine=Mul``) whose terms outside the common ones are one clause instance
        together, or explain each other one to one in some order."""
        common, rest_b, rest_a = _unshared(list(b.args), list(a.args))
        join = combine or (total if is_matrix(b) else Add)
        if not rest_b or not rest_a:
            return False
        if common and self.replaced(join(*rest_b), join(*rest_a)):
            return True
        return self._in_some_order(rest_b, rest_a)

    def _in_some_order(self, rest_b, rest_a) -> bool:
        """Each term of ``rest_b`` explains one of ``rest_a``, in some order (at most ``MAX_PERMUTED`` terms)."""
        if len(rest_b) != len(rest_a) or len(rest_b) > MAX_PERMUTED:
            return False
        return any(all(self.explains(x, y) for x, y in zip(rest_b, order, strict=True))
                   for order in permutations(rest_a))


def _carried(mats: list, i: int, coeff) -> list:
    """``mats`` with the scalar ``coeff`` multiplied into the factor at ``i`` (the product's value unchanged)."""
    return [*mats[:i], product(coeff, mats[i]), *mats[i + 1:]]


def _unshared(bt: list, at: list) -> tuple[list, list, list]:
    """``(common, rest_b, rest_a)``: the terms of ``bt`` also in ``at``, and what each side has besides them."""
    common = [t for t in bt if t in at]
    return common, [t for t in bt if t not in common], [t for t in at if t not in common]


class _Alignment:
    """Whether the factors ``bm`` of one product turn into the factors ``am`` of the other, left to right: each
    next factor explained by the other's next factor, a run of factors replaced by a run (a clause instance, the
    empty run being an identity), or one factor by a run of two or more. Memoised over positions ``(i, j)``; a
    position met again while it is being decided counts as not aligned."""

    def __init__(self, checker: InstanceChecker, bm: list, am: list):
        self.checker, self.bm, self.am = checker, bm, am
        self.memo: dict = {}

    def aligned(self, i: int, j: int) -> bool:
        """``bm[i:]`` turns into ``am[j:]``."""
        if (i, j) in self.memo:
            return self.memo[(i, j)]
        self.memo[(i, j)] = False
        ok = ((i == len(self.bm) and j == len(self.am)) or self._one_to_one(i, j) or self._run_to_run(i, j)
              or self._one_to_run(i, j))
        self.memo[(i, j)] = ok
        return ok

    def _one_to_one(self, i: int, j: int) -> bool:
        bm, am = self.bm, self.am
        return i < len(bm) and j < len(am) and self.checker.explains(bm[i], am[j]) and self.aligned(i + 1, j + 1)

    def _run_to_run(self, i: int, j: int) -> bool:
        bm, am = self.bm, self.am
        for i2 in range(i + 1, min(len(bm), i + MAX_SEGMENT) + 1):
            for j2 in range(j, min(len(am), j + MAX_SEGMENT) + 1):
                if (i2 - i, j2 - j) == (1, 1):
                    continue
                seg_a = product(*am[j:j2]) if j2 > j else Identity(bm[i].rows)
                if self.checker.replaced(product(*bm[i:i2]), seg_a) and self.aligned(i2, j2):
                    return True
        return False

    def _one_to_run(self, i: int, j: int) -> bool:
        bm, am = self.bm, self.am
        if i >= len(bm) or j >= len(am):
            return False
        return any(self.checker.replaced(bm[i], product(*am[j:j2])) and self.aligned(i + 1, j2)
                   for j2 in range(j + 2, min(len(am), j + MAX_SEGMENT) + 1))


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


def back_substitution(solution, substitutions) -> Basic:
    """The argmin in the original variable: each recorded change of variables ``(old, new, back)`` (``old = back``,
    ``back`` in ``new``) undone, the last one first, starting from the solution's argmin."""
    for _old, new, back in reversed(substitutions):
        solution = tidy(replace_free(back, new, solution))
    return solution


def _back_substitution_failure(statement, before, after, substitutions) -> str | None:
    """Why ``after`` is not ``before`` with exactly the derivation's recorded changes of variables undone (``None``
    when it is): each recorded substitution must be an instance of the statement's definition, the optimal value must
    be unchanged, and the argmin must be :func:`back_substitution` of the solution's, no other partner and no factor
    applied twice."""
    if not substitutions:
        return "the derivation has no change of variables to undo"
    for old, _new, back in substitutions:
        if not _defines(statement, old, back):
            return f"the recorded substitution {old} = {back} is not an instance of the statement's definition"
    if tidy(before[1]) != tidy(after[1]):
        return f"the optimal value changed from {before[1]} to {after[1]}"
    want = back_substitution(before[0], substitutions)
    if tidy(after[0]) != want:
        undone = ", ".join(f"{old} = {back}" for old, _new, back in substitutions)
        return f"the argmin {after[0]} is not the solution with the recorded substitutions ({undone}) undone: {want}"
    return None


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
        c, mats = matrix_factors(e)
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


def step_definitions(statement, params) -> list[tuple]:
    """The definitions a step brings, ``[(name, definition)]``: a chain-rule step's factor gradients and the
    statement's ``defined_by`` parameters (an abbreviation ``{definition: name}`` read as ``name = definition``)."""
    out = []
    for key in ("gradients", *getattr(statement, "defined_by", ())):
        for name, definition in (params.get(key) or {}).items():
            if isinstance(definition, MatrixSymbol) and not isinstance(name, MatrixSymbol):
                name, definition = definition, name  # an abbreviation ``{definition: name}``
            out.append((name, product(*definition) if isinstance(definition, tuple) else definition))  # its factors
    return out


def _own_definitions(statement, params, context, independent=frozenset()) -> tuple[list, str | None]:
    """The step's own definitions as clauses ``name = definition``, or the reason one is refused: each must be an
    instance of a definition clause, agree with the derivation's own definition of its name, if any, and never name
    an ``independent`` symbol (one the derivation started from without a definition: a definition introduces a fresh
    name, it cannot make an independent matrix equal to a product)."""
    extra = []
    for name, definition in step_definitions(statement, params):
        if not _defines(statement, name, definition):
            return [], f"the definition {name} = {definition} is not an instance of the statement's definition"
        if name in context and tidy(context[name]) != tidy(definition):  # the chain rule's gradients too
            return [], f"the definition {name} = {definition} is not the derivation's {name} = {context[name]}"
        if name not in context and name in independent:
            return [], (f"the definition {name} = {definition} redefines {name}, an independent symbol of the "
                        "derivation (free in its start, defined nowhere): a definition may only introduce a fresh "
                        "name")
        if name.shape != definition.shape:
            return [], f"the definition {name} = {definition} relates matrices of different shapes"
        extra.append(Clause(name, definition))
    return extra, None


def step_instance(lemma, kind: str, before, after, *, substitution=None, params=None,
                  definitions=None, independent=frozenset(), fresh=()) -> tuple[str, str | None]:
    """The kernel's verdict on one step: ``(status, failure)``.

    ``status`` says how the step was shown to be an instance of ``lemma``'s statement (or why that
    does not apply); ``failure`` is ``None`` or the reason the step is *not* an instance. A step's own
    definitions (a change of variables' ``X = Z C⁻¹``, a chain-rule step's factor gradients) must be
    instances of the statement's definition clauses; the change of variables is then applied
    everywhere outside derived nodes, and a factor gradient's definition may be replaced by its name. A definition
    in a ``defined_by`` parameter, and a chain-rule factor gradient, must also agree with the derivation's own
    ``definitions`` of that name.
    A statement with ``closure="ring"`` admits a step whose sides have one normal form in the free ring.

    ``independent``: the symbols the derivation started from without a definition; no definition may name one, and no
    name a step introduces (``fresh``: a change of variables' new variable) may be one or occur in ``before``. A
    back-substitution (``substitution``: the derivation's recorded changes of variables ``(old, new, back)``) is an
    instance only as exactly those substitutions undone (:func:`back_substitution`).
    """
    statement = lemma.statement
    if not isinstance(statement, Statement):
        return "n/a: the statement is text", None
    if kind == "back_substitute":
        return _back_substitute_verdict(statement, before, after, substitution or ())
    failure = _not_fresh(fresh, independent, before)
    if failure is not None:
        return "", failure
    if kind == "restrict":
        return _restrict_verdict(statement, before, after)
    if kind not in ("rewrite", "change_of_variables"):
        return f"n/a: a {kind.replace('_', ' ')} step", None
    return _rewrite_step(statement, kind, before, after, substitution, params, definitions, independent)


def _rewrite_step(statement, kind, before, after, substitution, params, definitions,
                  independent) -> tuple[str, str | None]:
    """A ``rewrite`` or ``change_of_variables`` step, by the statement's closure: ``"ring"``; else the change of
    variables applied, the sizes the abbreviations fix substituted and the step's own definitions admitted, then
    ``"induction"``, ``"rewrite"`` or clause by clause."""
    if statement.closure == "ring":
        return _ring_verdict(before, after)
    if kind == "change_of_variables":
        before, failure = _change_of_variables(statement, before, substitution)
        if failure is not None:
            return "", failure
    before, after, params, context, sizes = _at_abbreviated_sizes(statement, before, after, params or {},
                                                                  definitions or {})
    extra, failure = _own_definitions(statement, params, context, independent)
    if failure is not None:
        return "", failure
    if statement.closure == "induction":
        return _induction(statement, before, after, params, context, extra)
    if statement.closure == "rewrite":  # the step's own definitions unfold (name → definition) with the clauses
        return _rewrite_verdict(statement, before, after, extra, sizes)
    return _clause_verdict(statement, before, after, extra, params)


# ---- one verdict per kind of step (each ``(status, failure)``, as step_instance returns) --------------------------
def _back_substitute_verdict(statement, before, after, substitutions) -> tuple[str, str | None]:
    """A back-substitution: exactly the recorded changes of variables undone (:func:`_back_substitution_failure`)."""
    failure = _back_substitution_failure(statement, before, after, substitutions)
    return ("", failure) if failure else ("instance of the definition: the recorded substitutions undone", None)


def _not_fresh(fresh, independent, before) -> str | None:
    """Why a name the step introduces is not fresh (an independent symbol, or free in ``before``), or ``None``."""
    taken = [n for n in fresh if n in independent or any(n in getattr(b, "free_symbols", ()) for b in before)]
    if not taken:
        return None
    return (f"the new variable {taken[0]} is not fresh: it is already a symbol of the derivation (a change of "
            f"variables must introduce a new name)")


def _restrict_verdict(statement, before, after) -> tuple[str, str | None]:
    """A restriction: the constraint replaced by a bound's larger side (:func:`_restricted`)."""
    if _restricted(statement, before, after):
        return "instance of a bound: the new constraint implies the old", None
    return "", ("the new constraint is not an instance of a bound c_old ≤ c_new of the statement (the objective "
                "unchanged)")


def _ring_verdict(before, after) -> tuple[str, str | None]:
    """``closure="ring"``: every part has one normal form in the free ring on both sides."""
    if all(ring_normal_form(b) == ring_normal_form(a) for b, a in zip(before, after, strict=True)):
        return "instance: one normal form in the free ring", None
    return "", "the two sides differ in the free ring (not a consequence of the ring axioms)"


def _change_of_variables(statement, before, substitution) -> tuple[list, str | None]:
    """``before`` with the change of variables ``old = new`` applied outside derived nodes, or the reason it is
    refused: ``old = new`` must be an instance of the statement's definition."""
    old, new = substitution
    if not _defines(statement, old, new):
        return before, f"the substitution {old} = {new} is not an instance of the statement's definition"
    return [replace_free(b, old, new) for b in before], None


def _at_abbreviated_sizes(statement, before, after, params: dict, context: dict) -> tuple:
    """``(before, after, params, context, sizes)`` at the sizes the step's abbreviations fix
    (:func:`_abbreviated_sizes`): the step holds where its abbreviations are defined, so their names' free
    dimensions are the definitions'. Unchanged when they fix none."""
    sizes = _abbreviated_sizes(statement, params)
    if not sizes:
        return before, after, params, context, sizes
    before, after = [b.xreplace(sizes) for b in before], [a.xreplace(sizes) for a in after]
    params = {k: ({n.xreplace(sizes): v.xreplace(sizes) for n, v in p.items()} if k in statement.defined_by else p)
              for k, p in params.items()}
    context = {n.xreplace(sizes): v.xreplace(sizes) for n, v in context.items()}
    return before, after, params, context, sizes


def _rewrite_verdict(statement, before, after, extra, sizes) -> tuple[str, str | None]:
    """``closure="rewrite"``: the clauses and the step's own definitions, applied left to right until none applies
    (:func:`rewrite_normal_form`), give both sides of every part one normal form in the free ring."""
    forms = [(rewrite_normal_form(statement, b, extra), rewrite_normal_form(statement, a, extra))
             for b, a in zip(before, after, strict=True)]
    if not all(x is not None and y is not None and ring_normal_form(x) == ring_normal_form(y) for x, y in forms):
        return "", "the clauses, applied left to right, do not give both sides one normal form"
    where = f" (at {', '.join(f'{k} = {v}' for k, v in sizes.items())}, as the abbreviations fix)" if sizes else ""
    return f"instance: the clauses, applied left to right, give both sides one normal form{where}", None


def _clause_verdict(statement, before, after, extra, params) -> tuple[str, str | None]:
    """Clause by clause: every part is made of clause instances (:func:`is_instance`); the status names the clauses
    used, and the side conditions the step declares (``params["targets"]``: facts the rule module declares, msign's
    polar form)."""
    assumed = tuple(params.get("targets") or ())
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
    claims = {old: new for key in statement.claims for old, new in (params.get(key) or {}).items()}
    if not claims:
        return "", "the step states no claims to prove"
    failure = _unproven_claim(claims, definitions) or _claims_not_applied(before, after, extra, claims)
    if failure is not None:
        return "", failure
    plural = "s" if len(claims) > 1 else ""
    return f"instance: {len(claims)} claim{plural} proven by induction from the definitions", None


def _unproven_claim(claims: dict, definitions) -> str | None:
    """Why the claims cannot be proven in some order, each following (:func:`follows`) from the definitions and
    the claims proven before it, or ``None`` when they all are."""
    pending = dict(claims)
    proven: dict = {}  # the claims proven so far, which later claims may use
    while pending:
        done = {old: new for old, new in pending.items() if follows(old, new, definitions, proven)}
        if not done:
            old, new = next(iter(pending.items()))
            return (f"the claim {old} = {new} does not follow from the derivation's definitions and the claims "
                    f"proven before it")
        proven.update(done)
        pending = {old: new for old, new in pending.items() if old not in done}
    return None


def _claims_not_applied(before, after, extra, claims: dict) -> str | None:
    """Why some part of ``after`` is not its ``before`` with the step's own definitions (``extra``) and then the
    claims substituted (equal in the normal form or in the free ring), or ``None``."""
    for b, a in zip(before, after, strict=True):
        for clause in extra:
            b = replace_free(b, clause.lhs, clause.rhs)
        for old, new in claims.items():
            b = replace_free(b, old, new)
        if tidy(b) != tidy(a) and ring_normal_form(b) != ring_normal_form(a):
            return "the step is not its start with the claims and its definitions applied"
    return None


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


__all__ = ["InstanceChecker", "Matcher", "back_substitution", "is_instance", "proof_status", "ring_normal_form",
           "step_definitions", "step_instance", "substitute"]
