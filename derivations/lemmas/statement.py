"""A lemma's statement as one SymPy object: clauses over pattern symbols, side conditions as data.

A :class:`Statement` is the single source of what a lemma says. Its clauses are relations
``lhs = rhs`` (or ``lhs ≤ rhs``) between matrix expressions of the vocabulary whose free symbols
are the lemma's *pattern symbols* (every matrix and scalar symbol, their dimensions included).
Side conditions are data: the structural facts the pattern matrices carry (``U`` has orthonormal
columns), the signs of the pattern scalars (``c > 0``), and explicit :class:`Condition` objects
(``C`` invertible: ``W`` of full column rank *or* ``λ > 0``). From the statement:

* the LaTeX on the proof pages and in ``--emit latex|text`` is printed (:meth:`Statement.latex`);
* the self-check evaluates every clause on random instances that satisfy the conditions, in
  float64 at several sizes (one with every dimension at least 16, each giving every dimension its own
  value, so that no matrix of two dimensions is square: :func:`size_problems`) and in mpmath at 50 digits
  (:meth:`Statement.check`);
* every step that cites the lemma is matched against the clauses by the trusted kernel
  (:mod:`derivations.lemmas.kernel`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import mpmath
import numpy as np
from sympy import Add, Basic, Mul, Pow, S, Symbol, expand, preorder_traversal, sympify
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixSymbol, Transpose

from derivations.vocabulary.algebra import map_bottom_up, rebuild, tidy
from derivations.vocabulary.evaluate import InstanceSampler, evaluate, free_symbols, relative_error
from derivations.vocabulary.latex_notation import latex
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ISOTROPIC_COLUMNS,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    _GramNode,
    facts_of,
)
from foundation.compute.reference import MpmathBackend, NumpyBackend

#: digits of the high-precision evaluation, and the error it tolerates
STATEMENT_DPS = 50
STATEMENT_MP_TOL = 1e-40
#: relative error of the float64 evaluation (well-conditioned instances)
STATEMENT_TOL = 1e-8

#: how a structural fact reads in a side condition (``{}`` is the matrix)
FACT_TEXT = {
    FULL_COLUMN_RANK: r"{} \text{{ has full column rank}}",
    FULL_ROW_RANK: r"{} \text{{ has full row rank}}",
    ORTHONORMAL_COLUMNS: r"{} \text{{ has orthonormal columns}}",
    ORTHONORMAL_ROWS: r"{} \text{{ has orthonormal rows}}",
    SYMMETRIC: r"{} \text{{ symmetric}}",
    SPD: r"{} \text{{ symmetric positive definite}}",
    ISOTROPIC_COLUMNS: r"{} \text{{ has orthogonal columns of equal norm}}",
}


@dataclass(frozen=True)
class Clause:
    """``lhs = rhs`` (``relation="="``) or ``lhs ≤ rhs`` (``"<="``, an inequality between scalars)."""

    lhs: Basic
    rhs: Basic
    relation: str = "="
    defines: bool = False  # a definition a step brings (``X = Z C⁻¹``): matched against the step's own
    where: tuple | None = None  # ``(X, expr)``: the clause holds with ``X := expr`` (a change of variables)

    def __post_init__(self):
        if self.relation not in ("=", "<="):
            raise ValueError(f"a clause's relation is '=' or '<=', got {self.relation!r}")
        if self.relation == "=" and getattr(self.lhs, "shape", None) != getattr(self.rhs, "shape", None):
            raise ValueError(f"clause {self.lhs} = {self.rhs}: the sides have different shapes")

    def latex(self) -> str:
        op = "=" if self.relation == "=" else r"\le"
        text = f"{latex(self.lhs)} {op} {latex(self.rhs)}"
        if self.where is None:
            return text
        return rf"{text}\ \text{{for}}\ {latex(self.where[0])} = {latex(self.where[1])}"


@dataclass(frozen=True)
class Condition:
    """A side condition that the pattern symbols' facts do not carry: ``fact`` of ``subject``.

    ``fact`` is a structural fact of the vocabulary (``full_column_rank`` …), ``"positive"`` or
    ``"invertible"`` (a Gram root: its base has full rank on its side, or its damping is positive).
    ``alternatives`` are conditions any one of which suffices instead (``W`` full rank *or* ``λ > 0``).
    """

    fact: str
    subject: Basic
    alternatives: tuple = ()

    def latex(self) -> str:
        text = _condition_text(self.fact, self.subject)
        return r"\ \text{or}\ ".join([text, *(c.latex() for c in self.alternatives)])

    def holds(self, binding: dict) -> bool:
        """Whether the condition is known to hold for the instance ``binding`` (pattern → expression)."""
        subject = self.subject.xreplace(binding)
        return known(self.fact, subject) or any(c.holds(binding) for c in self.alternatives)


def _condition_text(fact: str, subject: Basic) -> str:
    if fact == "positive":
        return f"{latex(subject)} > 0"
    if fact == "invertible" and isinstance(subject, _GramNode):
        rank = "column" if subject.side == "right" else "row"
        return (rf"{latex(subject)} \text{{ invertible: }} {latex(subject.base)} \text{{ has full {rank} rank or }} "
                rf"{latex(subject.damping)} > 0")
    if fact == "invertible":
        return rf"{latex(subject)} \text{{ invertible}}"
    return FACT_TEXT[fact].format(latex(subject))


#: facts an identity matrix has
IDENTITY_FACTS = frozenset({FULL_COLUMN_RANK, FULL_ROW_RANK, ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS, SYMMETRIC, SPD,
                            ISOTROPIC_COLUMNS})


def known(fact: str, expr: Basic) -> bool:
    """``fact`` holds for ``expr`` by what the expression carries (its facts, its sign, its construction)."""
    if isinstance(expr, Identity):
        return fact in IDENTITY_FACTS or fact == "invertible"
    if fact == "positive":
        return bool(expr.is_positive)
    if fact == "invertible":
        if not isinstance(expr, _GramNode):
            return False
        need = FULL_COLUMN_RANK if expr.side == "right" else FULL_ROW_RANK
        return need in facts_of(expr.base) or bool(expr.damping.is_positive)
    if fact in (FULL_COLUMN_RANK, FULL_ROW_RANK) and known("invertible", expr):
        return True  # an invertible matrix has full rank
    full_rank = {FULL_COLUMN_RANK, FULL_ROW_RANK}
    if fact in full_rank and facts_of(expr) & full_rank and expr.shape[0] == expr.shape[1]:
        return True  # a square matrix of full column rank has full row rank, and conversely
    if fact in (FULL_COLUMN_RANK, FULL_ROW_RANK) and isinstance(expr, MatMul):
        coeff, mats = expr.as_coeff_matrices()  # full-rank factors, full-rank product: A B x = 0 ⇒ B x = 0 ⇒ x = 0
        return bool(coeff.is_nonzero) and all(known(fact, m) for m in mats)
    return fact in facts_of(expr)


@dataclass(frozen=True)
class Statement:
    """A lemma's statement: ``clauses`` over pattern symbols, with ``conditions`` and check ``sizes``.

    ``optional``: pattern matrices that an instance may leave out (an identity factor), so that
    ``⟨G, A X B⟩ = ⟨Aᵀ G Bᵀ, X⟩`` also covers ``⟨G, X B⟩``. ``sizes``: the dimension values the
    self-check evaluates at (at least two, the last with every matrix dimension ≥ 16, each giving every
    dimension its own value: :func:`size_problems`); the first is the one evaluated in mpmath.
    """

    clauses: tuple
    conditions: tuple = ()
    optional: frozenset = field(default_factory=frozenset)
    #: ``"ring"``: a step is an instance when both sides have one normal form in the free ring that the
    #: clauses generate (distributivity, collection, associativity); ``"rewrite"``: when both sides, with
    #: the clauses applied left to right wherever they match until none does, have one normal form in the
    #: free ring (a chain of instances in one step); ``"induction"``: each claim ``old = new`` of the step parameters
    #: named in ``claims`` is proven from the derivation's definitions and the claims proven before it, and the step
    #: is its start with the claims (and its own definitions) applied; otherwise clause by clause
    closure: str = ""
    #: pattern matrices that stand for one matrix symbol or its transpose only (never a product or a node)
    leaves: frozenset = field(default_factory=frozenset)
    #: the step parameters that carry a step's own definitions (``{name: definition or its factors}``): each must be
    #: an instance of a definition clause (``defines=True``), and then counts as a clause ``name = definition``
    defined_by: tuple = ()
    #: integer pattern symbols that are no matrix dimension (a block size), bound like dimensions
    integers: frozenset = field(default_factory=frozenset)
    #: ``closure="induction"``: the step parameters that carry its claims ``{old: new}`` (equalities of symbols)
    claims: tuple = ()
    sizes: tuple = field(default=(), compare=False)  # dicts: not part of equality or hashing
    #: symbols defined by others (``R = X Xᵀ``) and fixed scalars, for the random instances
    definitions: dict = field(default_factory=dict, compare=False)
    scalars: dict = field(default_factory=dict, compare=False)
    #: ``(env, rng, backend, dims) -> (env, overridden)``: completes a random instance (a lemma's ``instance``)
    prepare: Callable | None = field(default=None, compare=False)
    #: ``(lhs, env, backend, dims) -> value | None``: a clause's left side computed by a method independent of the
    #: nodes' own numerics (a Gram power from the SVD of its factor), which the self-check compares with the right
    #: side, so that a statement whose two sides share one evaluation can still fail
    reference: Callable | None = field(default=None, compare=False)

    def __post_init__(self):
        if not self.clauses or not all(isinstance(c, Clause) for c in self.clauses):
            raise ValueError("a statement needs at least one Clause")
        unknown = (set(self.optional) | set(self.leaves)) - set(self.variables)
        if unknown:
            raise ValueError(f"optional or leaf symbols {sorted(map(str, unknown))} are not in the statement")
        if self.closure not in ("", "ring", "rewrite", "induction"):
            raise ValueError(f"a statement's closure is '', 'ring', 'rewrite' or 'induction', got {self.closure!r}")

    @property
    def variables(self) -> tuple:
        """The pattern symbols: every matrix and scalar symbol of the clauses, by name."""
        return tuple(sorted(free_symbols(*self._sides()), key=str))

    @property
    def dimensions(self) -> tuple:
        """The dimension symbols of the pattern matrices."""
        dims = {d for e in self._sides() for m in e.atoms(MatrixSymbol) for d in m.shape if isinstance(d, Symbol)}
        return tuple(sorted(dims, key=str))

    @property
    def pattern_dimensions(self) -> frozenset:
        """What the kernel binds like a dimension: the matrix dimensions and the integer pattern symbols."""
        return frozenset(self.dimensions) | self.integers

    def _sides(self) -> list:
        return [s for c in self.clauses for s in (c.lhs, c.rhs)]

    # ---- printing -------------------------------------------------------------------------
    def latex(self) -> str:
        """The clauses, as one LaTeX formula (no delimiters)."""
        return r",\quad ".join(c.latex() for c in self.clauses)

    def condition_latex(self) -> tuple[str, ...]:
        """The side conditions, each as LaTeX: the pattern symbols' facts and signs, then the explicit ones."""
        out = []
        for v in self.variables:
            if isinstance(v, MatrixSymbol):
                out += [FACT_TEXT[f].format(latex(v)) for f in sorted(facts_of(v)) if f in FACT_TEXT]
            elif v.is_positive:
                out.append(f"{latex(v)} > 0")
            elif v.is_nonnegative:
                out.append(rf"{latex(v)} \ge 0")
        return tuple(out) + tuple(c.latex() for c in self.conditions)

    # ---- the self-check -------------------------------------------------------------------
    def check(self, rng: np.random.Generator, trials: int = 2) -> dict:
        """Worst error of the clauses on random instances: ``{sub-check: error}``.

        For ``=`` the error is the relative difference of the sides; for ``≤`` it is how far the
        left side exceeds the right one, relative to the right. Sub-checks: ``statement (float64,
        m=7 n=3 …)`` per size and ``statement (mpmath 50 digits)``.
        """
        if all(c.defines for c in self.clauses):
            return {}  # definitions only (the chain rule): the lemma's own check compares them with autodiff
        problems = self.size_problems()
        if problems:
            raise ValueError(f"the statement {self.latex()} cannot be checked at these sizes: {'; '.join(problems)}")
        errors = {}
        for dims in self.sizes:
            label = "statement (float64, " + " ".join(f"{k}={v}" for k, v in sorted(dims.items(), key=str)) + ")"
            errors[label] = max(self._error(rng, dims, NumpyBackend()) for _ in range(trials))
        with mpmath.workdps(STATEMENT_DPS):
            err = self._error(rng, self.sizes[0], MpmathBackend(STATEMENT_DPS))
        errors[f"statement (mpmath {STATEMENT_DPS} digits)"] = err
        return errors

    def size_problems(self) -> list[str]:
        """Why :attr:`sizes` cannot check the clauses (empty when they can): :func:`size_problems` of the integer
        symbols the clauses use, and the last size with a matrix dimension below 16."""
        problems = size_problems(self.sizes, self.size_symbols, self._sides())
        small = sorted(str(d) for d in self.dimensions if self.sizes and self.sizes[-1].get(d, 0) < 16)
        if small:
            problems.append(f"the last size gives {', '.join(small)} less than 16 (it is the one with every matrix "
                            "dimension >= 16)")
        return problems

    @property
    def size_symbols(self) -> frozenset:
        """The integer symbols of the clauses (:func:`size_symbols`), which the sizes give values."""
        return size_symbols(*self._sides(), *(e for c in self.clauses if c.where for e in c.where))

    @staticmethod
    def tolerance(subcheck: str) -> float:
        """The error a sub-check of :meth:`check` tolerates."""
        return STATEMENT_MP_TOL if "mpmath" in subcheck else STATEMENT_TOL

    def _error(self, rng, dims, backend) -> float:
        sampler = InstanceSampler(dims, self.definitions, self.scalars)
        env = sampler.sample(rng, self.variables, backend)
        if self.prepare is not None:
            env, _ = self.prepare(env, rng, backend, dims)
        worst = 0.0
        for clause in self.clauses:
            if clause.defines:
                continue
            if clause.where is not None:
                old, expr = clause.where
                env = {**env, old: evaluate(expr, env, backend, dims)}
            # fixed scalars enter the clauses themselves: a node's exponent is a number, never a variable
            lhs = clause.lhs.xreplace(self.scalars)
            a = None if self.reference is None else self.reference(lhs, env, backend, dims)
            a = evaluate(lhs, env, backend, dims) if a is None else a
            b = evaluate(clause.rhs.xreplace(self.scalars), env, backend, dims)
            if clause.relation == "=":
                worst = max(worst, relative_error(a, b, backend))
            else:
                excess = float(a) - float(b)
                worst = max(worst, max(0.0, excess) / max(1.0, abs(float(b))))
        return worst


def size_symbols(*exprs) -> frozenset:
    """The integer symbols of ``exprs``: the matrix dimensions (``W`` is ``m × n``), and dimensions or block sizes
    that enter as numbers (``m k + k n``, ``min(m, n)``)."""
    return frozenset(s for e in exprs for s in getattr(e, "atoms", lambda *_: ())(Symbol) if s.is_integer)


def size_label(dims: dict) -> str:
    """``k=5 m=7 n=3``: a size assignment, sorted by name."""
    return " ".join(f"{k}={v}" for k, v in sorted(dims.items(), key=lambda kv: str(kv[0])))


def square_shapes(dims: dict, exprs) -> list[str]:
    """The matrices of ``exprs`` (every matrix-valued subexpression) whose two dimensions differ as expressions but
    are equal at the size ``dims`` (``E`` of ``m × (k + n)`` at ``m = 40, n = 16, k = 24``), as ``E (m × (k + n))``."""
    found = {}
    for e in exprs:
        for node in preorder_traversal(e) if isinstance(e, Basic) else ():
            shape = getattr(node, "shape", None) if _is_matrix(node) else None
            if not shape or shape[0] == shape[1]:
                continue
            rows, cols = (sympify(sympify(d).xreplace(dims)) for d in shape)
            if rows.is_number and cols.is_number and rows == cols:
                found.setdefault(str(node), f"{node} of shape ({shape[0]}, {shape[1]})")
    return list(found.values())


def size_problems(sizes, symbols, exprs=()) -> list[str]:
    """Why the size assignments ``sizes`` (``{dimension: value}`` each) cannot check a claim about the integer
    symbols ``symbols``, in the expressions ``exprs`` (empty when they can).

    A self-check needs two assignments at least that differ on ``symbols``, each giving every symbol a value and
    no two symbols one value, and none making a matrix of ``exprs`` square that its shape leaves non-square
    (:func:`square_shapes`). A square matrix there lets a clause true only for square matrices pass
    (``P_W = I``: the projector ``W (WᵀW)⁻¹ Wᵀ`` onto the range of ``W`` is the identity exactly when ``W`` is
    square and invertible).
    """
    problems = []
    if len(sizes) < 2:
        problems.append(f"{len(sizes)} size(s): a self-check runs at two sizes at least")
    for dims in sizes:
        missing = sorted(str(s) for s in symbols if s not in dims)
        if missing:
            problems.append(f"the size ({size_label(dims)}) gives no value to {', '.join(missing)}")
        by_value: dict = {}
        for k, v in dims.items():
            by_value.setdefault(v, []).append(str(k))
        clashes = [" = ".join(sorted(names)) + f" = {v}" for v, names in by_value.items() if len(names) > 1]
        if clashes:
            problems.append(f"the size ({size_label(dims)}) gives {'; '.join(clashes)}: matrices of two distinct "
                            "dimensions are square there, so a clause true only for square matrices passes; give "
                            "every dimension its own value")
        square = [] if clashes else square_shapes(dims, exprs)  # two dimensions of one value say it already
        if square:
            problems.append(f"the size ({size_label(dims)}) makes {', '.join(square[:3])}"
                            f"{f' and {len(square) - 3} more' if len(square) > 3 else ''} square: a clause true only "
                            "for square matrices passes there; choose sizes that keep them non-square")
    distinct = {tuple(sorted(((str(s), dims.get(s)) for s in symbols), key=str)) for dims in sizes}
    if len(sizes) >= 2 and symbols and len(distinct) < 2:
        problems.append(f"every size gives {', '.join(sorted(map(str, symbols)))} the same values: a self-check runs "
                        "at two different sizes at least")
    return problems


def _is_matrix(e) -> bool:
    return bool(getattr(e, "is_Matrix", False))


# ---- the free ring's normal form ---------------------------------------------------------------
def _atom(e):
    """A node that is not ring structure, keyed by its class and its arguments' normal forms."""
    if not e.args or isinstance(e, (MatrixSymbol, Identity)):
        return e
    def key(a):
        algebraic = _is_matrix(a) or getattr(a, "is_commutative", None) and not a.is_Atom
        return ring_normal_form(a) if algebraic else a

    return (type(e).__name__, *(key(a) for a in e.args))


def _poly(e) -> dict:
    """``e`` as ``{word: coefficient}``: words of matrix atoms (order kept) and sorted scalar atoms."""
    e = tidy(e)
    if isinstance(e, (MatAdd, Add)):
        out: dict = {}
        for t in e.args:
            for w, c in _poly(t).items():
                out[w] = out.get(w, 0) + c
        return out
    if isinstance(e, (MatMul, Mul)):
        out = {((), ()): S.One}
        for f in e.args:
            nxt: dict = {}
            for (w1, s1), c1 in out.items():
                for (w2, s2), c2 in _poly(f).items():
                    key = (w1 + w2, tuple(sorted(s1 + s2, key=str)))
                    nxt[key] = nxt.get(key, 0) + c1 * c2
            out = nxt
        return out
    if e.is_number or isinstance(e, Symbol):
        return {((), ()): e}
    if isinstance(e, Pow) and not _is_matrix(e) and e.exp.is_Integer and e.exp > 0:  # scalars commute
        return _poly(Mul(*[e.base] * int(e.exp), evaluate=False))
    if getattr(e, "is_ZeroMatrix", False):
        return {}
    atom = _atom(e)
    return {((atom,), ()): S.One} if _is_matrix(e) else {((), (atom,)): S.One}


def ring_normal_form(e) -> frozenset:
    """``e`` in the free (noncommutative) ring over its atoms: distributed, collected, associated (a hashable
    set of ``(word, coefficient)``)."""
    terms = ((w, expand(c)) for w, c in _poly(e).items())
    return frozenset((w, c) for w, c in terms if c != 0)


# ---- definitions unfolded (the kernel's induction) ---------------------------------------------
MAX_UNFOLD = 64  # nested definitions one unfolding follows


def unfolded(e, definitions: dict, proven: dict, depth: int = 0) -> Basic:
    """``e`` with every defined symbol that stands as a factor (of a product or a transpose, outside sums and derived
    nodes) replaced by its definition, recursively, and the proven claims applied elsewhere (inside a polynomial
    ``a I + b R + c R²``): every replacement is an equality. Raises ``RecursionError`` on a cyclic definition."""
    if depth > MAX_UNFOLD:
        raise RecursionError("the definitions do not end")
    if e in proven:
        return unfolded(proven[e], definitions, proven, depth + 1)
    if isinstance(e, MatrixSymbol) and e in definitions:
        return unfolded(definitions[e], definitions, proven, depth + 1)
    if isinstance(e, (MatMul, Transpose)):
        return rebuild(e, [unfolded(a, definitions, proven, depth + 1) for a in e.args])
    return tidy(map_bottom_up(e, lambda x: proven.get(x, x)))


def follows(old, new, definitions: dict, proven: dict) -> bool:
    """The claim ``old = new`` follows from the derivation's definitions of both and the claims ``proven`` before
    it: both definitions, unfolded (:func:`unfolded`), have one normal form in the free ring."""
    if old not in definitions or new not in definitions:
        return False
    try:
        a, b = (unfolded(tidy(definitions[s]), definitions, proven) for s in (old, new))
    except RecursionError:
        return False
    return a == b or ring_normal_form(a) == ring_normal_form(b)
