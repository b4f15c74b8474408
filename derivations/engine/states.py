"""The states of a derivation and what its checks record: :class:`Problem`, :class:`Solution`,
:class:`Claim`, :class:`Step`, :class:`CheckResult`, and the check settings of a :class:`Context`.

:mod:`derivations.engine.derivation` re-exports them and builds :class:`~derivations.engine.derivation.Derivation`
on them; the public names are re-exported by :mod:`derivations`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sympy import Expr
from sympy.matrices.expressions import MatrixSymbol

from derivations import lemmas as L
from derivations.engine.latex import latex, state_latex
from derivations.engine.symbolic import size_label


@dataclass(frozen=True)
class Problem:
    r"""``min_X objective(X)`` subject to ``constraint(X) ≤ budget``.

    Examples:
      Muon's problem, the steepest descent direction under the operator norm:

      >>> from sympy.matrices.expressions import MatrixSymbol
      >>> from derivations import Inner, OpNorm, Problem, dimension, positive_symbol
      >>> m, n = dimension("m"), dimension("n")
      >>> G, X = MatrixSymbol("G", m, n), MatrixSymbol("X", m, n)
      >>> problem = Problem(X, Inner(G, X), OpNorm(X), positive_symbol("epsilon"))
      >>> print(problem.objective, "subject to", problem.constraint, "<=", problem.budget)
      <G, X> subject to ||X||_op <= epsilon
      >>> print(problem._repr_latex_())    # what Jupyter shows
      $$\min_{X}\ \left\langle G,\, X \right\rangle\quad \text{s.t.}\quad ...$$
    """

    variable: MatrixSymbol
    objective: Expr
    constraint: Expr
    budget: Expr

    def parts(self) -> tuple[Expr, Expr]:
        return (self.objective, self.constraint)

    def with_parts(self, objective: Expr, constraint: Expr, variable: MatrixSymbol | None = None) -> Problem:
        return replace(self, objective=objective, constraint=constraint,
                       variable=variable or self.variable)

    def _repr_latex_(self) -> str:
        """Jupyter: ``min_X ⟨G, L(X)⟩ s.t. ‖L(X)‖ ≤ β`` as display math (the LaTeX printer's notation)."""
        return f"$${state_latex(self)}$$"

    def _repr_markdown_(self) -> str:
        """Jupyter: the problem as display math, with its variable named."""
        return f"Problem in ${latex(self.variable)}$:\n\n$${state_latex(self)}$$\n"


@dataclass(frozen=True)
class Solution:
    """``argmin`` and optimal ``value`` of a problem in ``variable``."""

    variable: MatrixSymbol
    argmin: Expr
    value: Expr

    def parts(self) -> tuple[Expr, Expr]:
        return (self.argmin, self.value)

    def with_parts(self, argmin: Expr, value: Expr, variable: MatrixSymbol | None = None) -> Solution:
        return replace(self, argmin=argmin, value=value, variable=variable or self.variable)


@dataclass(frozen=True)
class Claim:
    """An expression being rewritten into an equal one (an identity chain)."""

    expr: Expr

    def parts(self) -> tuple[Expr]:
        return (self.expr,)

    def with_parts(self, expr: Expr, variable: MatrixSymbol | None = None) -> Claim:
        return Claim(expr)


@dataclass
class CheckResult:
    """Evidence for one step: worst error per sub-check, symbolic verdict, and the failure if any."""

    float64_error: float
    mpmath_error: float | None
    symbolic: str
    trials: int
    subchecks: dict = field(default_factory=dict)
    failure: str | None = None
    instance: str = ""  # the trusted kernel's verdict: how the step is an instance of its lemma's statement

    @property
    def passed(self) -> bool:
        return self.failure is None


@dataclass
class Step:
    """One application of a lemma (or of a solve/back-substitution)."""

    index: int
    kind: str
    lemma: L.Lemma
    before: Problem | Solution | Claim
    after: Problem | Solution | Claim
    conditions: list
    note: str = ""
    substitution: tuple | None = None
    check: CheckResult | None = None
    params: dict = field(default_factory=dict)
    symbolic: str | None = None  # the symbolic verdict (deterministic: computed once)
    instance: str | None = None  # the trusted kernel's instance verdict (deterministic: computed once)


@dataclass
class Context:
    """What the checks need: definitions of derived symbols, check sizes, fixed scalars.

    ``check_dims``: the sizes of the random float64 instances (one dict per size); ``symbolic_dims``:
    the sizes of the explicit matrices of symbols; ``mpmath_dims``: the size of the 50-digit instance;
    ``definitions``: derived symbols in terms of others (a factor gradient by the chain rule).

    Examples:
      >>> from derivations import Context, dimension
      >>> m, n = dimension("m"), dimension("n")
      >>> Context(check_dims=[{m: 4, n: 3}, {m: 3, n: 3}], mpmath_dims={m: 3, n: 2}).problems()
      []

      A ``1 × 1`` block commutes with everything, so a size below 2 could hide a mistake:

      >>> Context(check_dims=[{m: 1, n: 3}]).problems()
      ["check size (m=1, n=3) has a dimension below 2: {'m': 1}"]
    """

    definitions: dict = field(default_factory=dict)
    check_dims: list = field(default_factory=list)
    scalars: dict = field(default_factory=dict)
    symbolic_dims: dict = field(default_factory=dict)
    mpmath_dims: dict = field(default_factory=dict)

    def problems(self) -> list[str]:
        """Check sizes that could hide a mistake: a dimension below 2 (``1 × 1`` blocks commute)."""
        out = []
        for label, dims in [("check size", d) for d in self.check_dims] + [("symbolic size", self.symbolic_dims),
                                                                            ("mpmath size", self.mpmath_dims)]:
            small = {str(k): v for k, v in dims.items() if v < 2}
            if small:
                out.append(f"{label} {size_label(dims)} has a dimension below 2: {small}")
        return out
