"""Lemma objects, their self-check, and the one traversal driver every lemma's rewrite runs on."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sympy import Basic
from sympy.matrices.expressions import MatrixSymbol

from derivations.lemmas.statement import Clause, Statement, known, size_problems, size_symbols
from derivations.vocabulary.algebra import map_bottom_up, product, total
from derivations.vocabulary.evaluate import evaluate, free_symbols, relative_error
from derivations.vocabulary.nodes import (
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    FactMatrix,
    PolarFactor,
    _Derived,
    dimension,
    facts_of,
    positive_symbol,
)
from foundation.compute.reference import NumpyBackend

SELF_CHECK_TOL = 1e-8  # relative error a lemma's self-check tolerates (float64, well-conditioned instances)


class NotApplicable(ValueError):
    """A lemma found nothing to rewrite, or a side condition is not known to hold (the message says which)."""


@dataclass(frozen=True)
class Case:
    """One instance of a lemma's statement, ``lhs = rhs``, that its self-check exercises.

    ``params`` are the keyword arguments the rewrite needs (``variable=``, ``matrix=`` …);
    ``substitution = (X, expr)`` binds ``X := expr`` when evaluating (a change of variables);
    ``rewrites=False`` marks a part of the statement that the rewrite does not perform (it is
    still evaluated on both sides).
    """

    lhs: Basic
    rhs: Basic
    params: dict = field(default_factory=dict)
    substitution: tuple | None = None
    rewrites: bool = True


@dataclass
class SelfCheck:
    """Outcome of a lemma's self-check: the worst error of each sub-check and the failures."""

    lemma: str
    errors: dict
    failures: list
    tolerance: float = SELF_CHECK_TOL
    #: ``{part: (dims, …)}``: the sizes each part of the self-check evaluated at (``statement``, ``cases``)
    sizes: dict = field(default_factory=dict)

    @property
    def error(self) -> float:
        return max(self.errors.values(), default=0.0)

    @property
    def passed(self) -> bool:
        return not self.failures

    def __float__(self):
        return self.error

    def __format__(self, spec):
        return format(self.error, spec)


@dataclass(frozen=True)
class Offer:
    """One step that ``derive()``'s search may take with a lemma.

    ``label`` names it in the search's reports (empty: ``Lemma <number> (<title>)``); ``params`` are the
    step's keyword arguments; ``method`` is the :class:`~derivations.engine.derivation.Derivation` method
    that takes it: ``apply`` (``der.apply(lemma, **params)``) or another method of the derivation called
    with ``params`` alone (``change_variables`` for Lemma 4).
    """

    label: str = ""
    params: dict = field(default_factory=dict)
    method: str = "apply"


@dataclass(frozen=True)
class Applies:
    """Where a lemma applies in ``derive()``'s search.

    ``offers(view) -> [Offer]`` lists the steps worth trying from the search state ``view`` (a
    :class:`SearchView`; an empty list where the lemma cannot apply); the search tries the lemmas in
    increasing ``order`` (the registered lemmas use 10–60, a researcher's lemmas default to 100).
    """

    offers: Callable[[Any], list]
    order: int = 100


def everywhere(view: Any) -> list[Offer]:
    """The offer of a lemma without parameters: try it on every state (it says itself, by raising
    :class:`NotApplicable`, where it does not apply)."""
    return [Offer()]


@dataclass
class SearchView:
    """What a lemma's :class:`Applies` sees of one state of ``derive()``'s search.

    ``derivation`` is the derivation so far (its ``state`` a problem), ``gradients`` the chain-rule
    definitions the search may name, ``notes`` lines the search prints when it fails (a move not
    offered, and why).
    """

    derivation: Any
    gradients: dict = field(default_factory=dict)
    notes: set = field(default_factory=set)

    @property
    def state(self) -> Any:
        return self.derivation.state

    @property
    def variable(self) -> MatrixSymbol:
        return self.derivation.state.variable

    @property
    def parts(self) -> list:
        """The state's matrix-valued and scalar parts (the objective and the constraint of a problem)."""
        return [p for p in self.derivation.state.parts() if hasattr(p, "atoms")]

    def note(self, text: str) -> None:
        self.notes.add(text)

    @staticmethod
    def free_matrices(expr: Basic) -> set:
        """Matrix symbols outside derived nodes (what a substitution can reach)."""
        out = set()

        def walk(e):
            if isinstance(e, _Derived):
                return
            if isinstance(e, MatrixSymbol):
                out.add(e)
                return
            for a in e.args:
                walk(a)

        walk(expr)
        return out

    def fresh_variable(self) -> MatrixSymbol:
        """A new variable of the current variable's shape, ``Z_<suffix>`` numbered past the names in use."""
        der, variable = self.derivation, self.variable
        used = {str(s) for p in der.start.parts() if hasattr(p, "atoms") for s in p.atoms(MatrixSymbol)}
        used |= {str(old) for old, _ in der._substitutions} | {str(variable)}
        suffix = str(variable.name).rsplit("_", 1)[-1]
        k = 0
        while True:
            name = f"Z_{suffix}" + ("" if k == 0 else f"{k}")
            if name not in used:
                return MatrixSymbol(name, *variable.shape)
            k += 1


@dataclass(frozen=True)
class Lemma:
    """A named rewrite rule with its statement, side conditions and self-check.

    ``identities() -> (cases, sampler)``: instances of the statement (``Case`` or ``(lhs, rhs)``
    pairs) that the self-check evaluates on both sides and feeds to ``rewrite`` inside random
    surrounding expressions. ``check(rng) -> {sub-check: error}`` replaces that for lemmas that
    are not rewrites (Lemma 1). ``algebraic``: the explicit symbolic model of
    :mod:`derivations.engine.symbolic` encodes everything the lemma uses, so a symbolic disagreement
    refutes a step; otherwise ``not_modelled`` says why the symbolic check does not apply.
    ``instance(env, rng, backend, dims, **params) -> (env, overridden)`` replaces sampled values
    where the lemma's facts are not identities of the sampled matrices (the chain rule: gradients
    from automatic differentiation). ``solution(A, β) -> (argmin, value)`` for Lemma 1. ``applies`` says
    where ``derive()``'s search tries the lemma (:class:`Applies`); a lemma without it is not a search move
    unless a researcher passes it to ``derive(..., lemmas=[...])`` (then it is tried on every state).

    Examples:
      Lemma 2 drops a factor with orthonormal columns from an operator norm, and says which side
      condition it used; where the fact is not known it refuses:

      >>> from sympy.matrices.expressions import MatrixSymbol
      >>> from derivations import ORTHONORMAL_COLUMNS, FactMatrix, OpNorm, dimension, product
      >>> from derivations import lemmas as L
      >>> m, n = dimension("m"), dimension("n")
      >>> U, Z = FactMatrix("U", m, n, [ORTHONORMAL_COLUMNS]), MatrixSymbol("Z", n, n)
      >>> lemma = L.ORTHONORMAL_INVARIANCE
      >>> print(f"Lemma {lemma.number}: {lemma.title}")
      Lemma 2: Isometries leave the operator norm
      >>> lemma.apply(OpNorm(product(U, Z)))
      (||Z||_op, ['U has orthonormal columns'])
      >>> lemma.apply(OpNorm(product(MatrixSymbol("A", m, n), Z)))
      Traceback (most recent call last):
      ...
      derivations.lemmas.base.NotApplicable: no operator norm with an outer factor known to have orthonormal columns

      Its self-check evaluates the statement in float64 at two sizes and in mpmath at 50 digits:

      >>> import numpy as np
      >>> lemma.self_check(np.random.default_rng(0), trials=1).passed
      True
    """

    key: str
    number: str
    title: str
    statement: Statement | str  # the SymPy statement (a LaTeX string only for lemmas not yet stated in SymPy)
    conditions: tuple = ()  # LaTeX side conditions beyond those the Statement carries as data
    rewrite: Callable[..., Any] | None = field(default=None, repr=False, compare=False)
    # () -> ([Case | (lhs, rhs)], sampler)
    identities: Callable[[], Any] | None = field(default=None, repr=False, compare=False)
    check: Callable[..., dict] | None = field(default=None, repr=False, compare=False)  # (rng) -> {sub-check: error}
    algebraic: bool = False
    not_modelled: str = "uses facts the explicit symbolic model does not encode"
    instance: Callable[..., Any] | None = field(default=None, repr=False, compare=False)
    solution: Callable[..., Any] | None = field(default=None, repr=False, compare=False)
    applies: Applies | None = field(default=None, repr=False, compare=False)  # where derive() tries it

    def __post_init__(self):
        if not isinstance(self.number, str) or not self.number.strip():
            raise ValueError(f"lemma {self.key!r} ({self.title}) declares no number: every lemma is cited by a number "
                             "of its own")

    @property
    def statement_latex(self) -> str:
        """The statement as LaTeX (no delimiters), printed from the :class:`Statement` where there is one."""
        return self.statement.latex() if isinstance(self.statement, Statement) else self.statement

    @property
    def condition_latex(self) -> tuple[str, ...]:
        """The side conditions as LaTeX: the statement's (data) and then any further ones."""
        own = self.statement.condition_latex() if isinstance(self.statement, Statement) else ()
        return tuple(own) + tuple(c for c in self.conditions if c not in own)

    def _statement_latex(self) -> str:
        """The statement with its side conditions, as one LaTeX formula (no delimiters)."""
        if not self.condition_latex:
            return self.statement_latex
        return rf"{self.statement_latex}\qquad \text{{if }} " + r",\ ".join(self.condition_latex)

    def _repr_latex_(self) -> str:
        """Jupyter: the statement (and its side conditions) as display math."""
        return f"$${self._statement_latex()}$$"

    def _repr_markdown_(self) -> str:
        """Jupyter: ``**Lemma N — title.**`` then the statement and side conditions as math."""
        return (f"**Lemma {markdown_text(self.number)} — {markdown_text(self.title)}.** "
                f"(`{self.key}`)\n\n$${self._statement_latex()}$$\n")

    def apply(self, expr: Basic, **params: Any) -> tuple[Basic, list[str]]:
        """Rewrite ``expr``; returns ``(new_expr, instantiated side conditions)``."""
        if self.rewrite is None:
            raise NotApplicable(f"lemma {self.number} ({self.title}) has no rewrite")
        new, conditions = self.rewrite(expr, **params)
        return new, conditions

    def cases(self) -> tuple[list[Case], Any]:
        """``([Case], sampler)`` of the self-check."""
        if self.identities is None:
            raise ValueError(f"lemma {self.number} ({self.title}) states no identities to check")
        raw, sampler = self.identities()
        return [c if isinstance(c, Case) else Case(*c) for c in raw], sampler

    def check_sizes(self) -> dict[str, tuple]:
        """The sizes the self-check evaluates at: ``{"statement": …, "cases": …}``.

        ``statement``: the :class:`Statement`'s sizes (absent for a text statement or definitions only);
        ``cases``: the cases' sampler size and a second one (:func:`second_size`), absent for a lemma whose
        own ``check`` replaces the cases.
        """
        out: dict[str, tuple] = {}
        if isinstance(self.statement, Statement) and not all(c.defines for c in self.statement.clauses):
            out["statement"] = tuple(self.statement.sizes)
        if self.check is None and self.identities is not None:
            out["cases"] = _case_sizes(*self.cases())
        return out

    def size_problems(self) -> list[str]:
        """Why the self-check's sizes cannot check this lemma, one line each naming the lemma (empty when they
        can): two sizes at least, every dimension its own value in each (:func:`~derivations.lemmas.statement.\
size_problems`), and the statement's last size with every matrix dimension ≥ 16."""
        found = []
        if isinstance(self.statement, Statement) and not all(c.defines for c in self.statement.clauses):
            found += [("statement", p) for p in self.statement.size_problems()]
        if self.check is None and self.identities is not None:
            cases, sampler = self.cases()
            exprs = [*(e for c in cases for e in (c.lhs, c.rhs, *(c.substitution or ()))),
                     *(getattr(sampler, "definitions", {}) or {}).values()]
            found += [("cases", p) for p in size_problems(_case_sizes(cases, sampler), size_symbols(*exprs), exprs)]
        return [f"lemma {self.number} ({self.title}) self-check sizes of the {part}: {p}" for part, p in found]

    def self_check(self, rng: np.random.Generator, trials: int = 3) -> SelfCheck:
        """Check the statement *and the rewrite code* on random instances.

        For every case, at two sizes (:meth:`check_sizes`): both sides of the statement agree numerically
        (sub-check ``statement``); the rewrite fires on the bare left-hand side (``rewrite fires``); and,
        inside random surrounding expressions (bare, multiplied on either side, summed, scaled), the rewritten
        expression has the value of the original (``rewrite preserves value``). A context in which
        the rewrite declines is skipped; the bare one must fire. A lemma whose sizes could let a clause true
        only for square matrices pass (two dimensions of one value, fewer than two sizes) fails without
        being evaluated (:meth:`size_problems`).
        """
        problems = self.size_problems()
        if problems:
            return SelfCheck(self.number, {}, problems)
        errors: dict[str, float] = {}
        failures: list = []
        tolerance = {}
        if isinstance(self.statement, Statement):
            for name, err in self.statement.check(rng).items():
                errors[name], tolerance[name] = err, Statement.tolerance(name)
        if self.check is not None:
            for _ in range(trials):
                for name, err in self.check(rng, self).items():
                    errors[name] = max(errors.get(name, 0.0), float(err))
        else:
            cases, sampler = self.cases()
            for dims in _case_sizes(cases, sampler):
                at = dataclasses.replace(sampler, dims=dims) if dims != sampler.dims else sampler
                for i, case in enumerate(cases, 1):
                    self._check_case(i, case, at, rng, trials, errors, failures)
        for name, err in errors.items():
            tol = tolerance.get(name, SELF_CHECK_TOL)
            if not err <= tol:
                failures.append(f"lemma {self.number} ({self.title}) self-check, sub-check '{name}': "
                                f"error {err:.3e} > {tol:.0e}")
        return SelfCheck(self.number, errors, list(dict.fromkeys(failures)), sizes=self.check_sizes())

    def _values(self, exprs, case, sampler, rng, params):
        env = sampler.sample(rng, free_symbols(*exprs, *(case.substitution or ())))
        if self.instance is not None:
            env, _ = self.instance(env, rng, _NP, sampler.dims, **params)
        if case.substitution is not None:
            old, expr = case.substitution
            env[old] = evaluate(expr, env, dims=sampler.dims)
        return [np.asarray(evaluate(e, env, dims=sampler.dims)) for e in exprs]

    def _check_case(self, i, case, sampler, rng, trials, errors, failures):
        def record(name, err):
            errors[name] = max(errors.get(name, 0.0), float(err))

        for _ in range(trials):
            a, b = self._values([case.lhs, case.rhs], case, sampler, rng, case.params)
            record("statement", relative_error(a, b, _NP))
        if not case.rewrites:
            return
        for label, wrapped in _contexts(case.lhs):
            try:
                new, _ = self.apply(wrapped, **case.params)
            except NotApplicable as exc:
                if label == "bare":
                    failures.append(f"lemma {self.number} ({self.title}) self-check, case {i}: the rewrite "
                                    f"does not fire on its own left-hand side {case.lhs}: {exc}")
                continue
            if new == wrapped:
                if label == "bare":
                    failures.append(f"lemma {self.number} ({self.title}) self-check, case {i}: the rewrite "
                                    f"left {case.lhs} unchanged")
                continue
            for _ in range(trials):
                a, b = self._values([wrapped, new], case, sampler, rng, case.params)
                record("rewrite preserves value", relative_error(a, b, _NP))


#: characters that Markdown (and a notebook's math) would read as markup
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|$~])")


def markdown_text(text: str) -> str:
    """Plain text as Markdown that shows exactly these characters (the notebook reprs of lemmas,
    derivations and verdicts): every Markdown (and ``$`` math) character escaped, whitespace collapsed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def rewrite_nodes(expr, rule, nothing: str, *, enter_derived: bool = False, normalize=None):
    """The traversal driver of the node-wise lemmas.

    ``rule(node)`` returns ``None`` (no match here) or ``(replacement, side conditions)``; it is
    applied to every node, children first (derived nodes such as ``C_W`` are leaves unless
    ``enter_derived``), and ``normalize`` tidies the result. Returns ``(new_expr, conditions)``; when
    no node matched, raises :class:`NotApplicable` with ``nothing`` (the reason, for the reports).
    """
    conditions, hits = [], 0

    def visit(e):
        nonlocal hits
        found = rule(e)
        if found is None:
            return e
        hits += 1
        conditions.extend(found[1])
        return found[0]

    new = map_bottom_up(expr, visit, enter_derived=enter_derived)
    if not hits:
        raise NotApplicable(nothing)
    return (normalize(new) if normalize else new), list(dict.fromkeys(conditions))


def _contexts(lhs):
    """``lhs`` bare and inside random-valued surroundings (fresh symbols, sampled like the rest)."""
    out = [("bare", lhs)]
    if getattr(lhs, "is_Matrix", False):
        rows, cols = lhs.shape
        f, h, e = (MatrixSymbol("F_ctx", rows, rows), MatrixSymbol("H_ctx", cols, cols),
                   MatrixSymbol("E_ctx", rows, cols))
        out += [("left", product(f, lhs)), ("right", product(lhs, h)), ("both", product(f, lhs, h)),
                ("sum", total(lhs, e)), ("scaled sum", total(product(positive_symbol("s_ctx"), lhs), e))]
    else:
        c, s = positive_symbol("c_ctx"), positive_symbol("s_ctx")
        out += [("scaled", c * lhs), ("affine", c * lhs + s)]
    return out



_NP = NumpyBackend()

# ---- symbols used by the self-checks -------------------------------------------------------
_m, _n, _k = dimension("m"), dimension("n"), dimension("k")
_SMALL = {_m: 7, _n: 3, _k: 5}
_LARGE = {_m: 40, _n: 16, _k: 25}  # every dimension >= 16, no two of m, n, k, n + k equal (the second size)


def second_size(small: dict, exprs) -> dict:
    """The second size a self-check evaluates ``exprs`` at, after ``small``: the large standard size for the
    small one; otherwise every matrix dimension of ``exprs`` (or, where they hold no matrix, every integer
    symbol: ``m k + k n``) grown by 16, so that each is at least 16, their order is kept (a tall matrix stays
    tall) and distinct values stay distinct; counts that size no matrix (a step count ``T``) stay."""
    if small == _SMALL:
        return dict(_LARGE)
    exprs = list(exprs)
    shapes = {d for e in exprs for m in getattr(e, "atoms", lambda *_: ())(MatrixSymbol) for d in m.shape
              if getattr(d, "is_Symbol", False)}
    grow = shapes or size_symbols(*exprs)
    return {d: v + 16 if d in grow else v for d, v in small.items()}


def _case_sizes(cases, sampler) -> tuple[dict, dict]:
    """The sizes a lemma's cases are evaluated at: the sampler's and :func:`second_size`."""
    small = dict(sampler.dims)
    exprs = [e for c in cases for e in (c.lhs, c.rhs, *(c.substitution or ()))]
    return small, second_size(small, [*exprs, *(getattr(sampler, "definitions", {}) or {}).values()])


def stated_by(identities, sizes=None, relation: str = "=", instance=None) -> Statement:
    """The statement whose clauses are a lemma's self-check identities (each a general instance, its
    side conditions carried by its symbols), checked at the sizes of ``sizes`` (default: the sampler's
    size and :func:`second_size`). ``relation="<="`` for a bound (each case ``lhs ≤ rhs``); ``instance`` is
    the lemma's hook that completes a random instance (see :class:`Lemma`)."""
    raw, sampler = identities()
    clauses: list = []
    for c in (c if isinstance(c, Case) else Case(*c) for c in raw):
        if not any({c.lhs, c.rhs} == {k.lhs, k.rhs} for k in clauses):
            clauses.append(Clause(c.lhs, c.rhs, relation, where=c.substitution))
    small = dict(getattr(sampler, "dims", None) or _SMALL)
    large = second_size(small, [e for c in clauses for e in (c.lhs, c.rhs, *(c.where or ()))])
    return Statement(tuple(clauses), sizes=sizes or (small, large),
                     definitions=dict(getattr(sampler, "definitions", {}) or {}),
                     scalars=dict(getattr(sampler, "scalars", {}) or {}), prepare=instance)


def _tall(name, *facts):
    return FactMatrix(name, _m, _n, facts)


def _fresh(name, rows, cols):
    return MatrixSymbol(name, rows, cols)


# ---- helpers ------------------------------------------------------------------------------
def _orthonormal_cols(e) -> bool:
    return ORTHONORMAL_COLUMNS in facts_of(e)


def _orthonormal_rows(e) -> bool:
    return ORTHONORMAL_ROWS in facts_of(e)


def _invertibility(c) -> str:
    side = "column" if c.side == "right" else "row"
    rank = f"{c.label()} invertible: {c.base} has full {side} rank"
    return rank if c.damping == 0 else f"{rank}, or λ = {c.damping} > 0"


def _full_rank_known(c) -> bool:
    """The Gram root ``c`` is invertible by what it carries (the statements' condition, one rule)."""
    return known("invertible", c)


def _isometry_condition(u) -> str:
    if isinstance(u, PolarFactor):
        return (f"{u} has orthonormal {'columns' if u.side == 'right' else 'rows'}: "
                f"{u.base} has full rank and λ = 0")
    return f"{u} has orthonormal columns"
