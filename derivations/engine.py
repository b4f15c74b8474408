"""The derivation engine: problems, steps, checks.

A :class:`Derivation` starts from a :class:`Problem` (a matrix variable, a linear objective
``⟨G, L(X)⟩``, an operator-norm constraint with a budget) or from an expression (for an
identity chain), and advances by applying lemmas. Every application records a :class:`Step`
(state before, lemma, state after, instantiated side conditions) and every step is checked:

* numerically in float64 on random instances that satisfy the side conditions (several sizes,
  the square case included), and in mpmath at 50 digits on one instance;
* symbolically on explicit small matrices where the identity is algebraic
  (:mod:`derivations.symbolic`);
* a solve step by feasibility, tightness, the attained value, and random feasible points that
  must not do better; the final back-substitution against the *original* problem.

A failing check raises :class:`StepCheckFailed`, naming the step and showing the counterexample.
Rule modules only state problems and choose lemmas; the result is whatever the lemmas produce.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import mpmath
import numpy as np
from sympy import Expr, srepr
from sympy.matrices.expressions import MatrixSymbol

from numerics.reference import MpmathBackend, NumpyBackend

from . import lemmas as L
from .algebra import product, replace_free, tidy
from .evaluate import InstanceSampler, evaluate, free_symbols
from .symbolic import prove_equal
from .vocabulary import GramSqrt, Inner, Msign, NuclearNorm, OpNorm

FLOAT64_TOL = 1e-9
MPMATH_DPS = 50
MPMATH_TOL = 1e-35


class DerivationError(ValueError):
    """A lemma could not be applied where the rule module asked for it."""


class StepCheckFailed(AssertionError):
    """A step's numerical check failed; the message names the step and the counterexample."""


@dataclass(frozen=True)
class Problem:
    """``min_X objective(X)`` subject to ``constraint(X) ≤ budget``."""

    variable: MatrixSymbol
    objective: Expr
    constraint: Expr
    budget: Expr

    def parts(self):
        return (self.objective, self.constraint)

    def with_parts(self, objective, constraint, variable=None):
        return replace(self, objective=objective, constraint=constraint,
                       variable=variable or self.variable)


@dataclass(frozen=True)
class Solution:
    """``argmin`` and optimal ``value`` of a problem in ``variable``."""

    variable: MatrixSymbol
    argmin: Expr
    value: Expr

    def parts(self):
        return (self.argmin, self.value)

    def with_parts(self, argmin, value, variable=None):
        return replace(self, argmin=argmin, value=value, variable=variable or self.variable)


@dataclass(frozen=True)
class Claim:
    """An expression being rewritten into an equal one (an identity chain)."""

    expr: Expr

    def parts(self):
        return (self.expr,)

    def with_parts(self, expr, variable=None):
        return Claim(expr)


@dataclass
class CheckResult:
    """Evidence for one step."""

    float64_error: float
    mpmath_error: float | None
    symbolic: str
    trials: int
    passed: bool


@dataclass
class Step:
    """One application of a lemma (or of a solve/back-substitution)."""

    index: int
    kind: str
    lemma: L.Lemma
    before: object
    after: object
    conditions: list
    note: str = ""
    substitution: tuple | None = None
    check: CheckResult | None = None


@dataclass
class Context:
    """What the checks need: definitions of derived symbols, check sizes, fixed scalars."""

    definitions: dict = field(default_factory=dict)
    check_dims: list = field(default_factory=list)
    scalars: dict = field(default_factory=dict)
    symbolic_dims: dict = field(default_factory=dict)
    mpmath_dims: dict = field(default_factory=dict)


class Derivation:
    """A chain of checked steps from a problem (or an expression) to a result."""

    def __init__(self, name: str, title: str, start, context: Context, *, statement: str = ""):
        self.name = name
        self.title = title
        self.statement = statement
        self.start = start
        self.state = start
        self.context = context
        self.steps: list[Step] = []
        self._substitutions: list[tuple] = []  # (old variable, expression in the new variable)

    # ---- building -------------------------------------------------------------------------
    def _record(self, kind, lemma, after, conditions, note="", substitution=None):
        step = Step(len(self.steps) + 1, kind, lemma, self.state, after, list(conditions), note,
                    substitution)
        step.check = self._check_step(step, trials=1, mp=False)
        self.steps.append(step)
        self.state = after
        return self

    def apply(self, lemma: L.Lemma, note: str = "", **params):
        """Rewrite every part of the current state with ``lemma``."""
        parts, conditions, changed = [], [], False
        for part in self.state.parts():
            try:
                new, conds = lemma.apply(part, **params)
            except L.NotApplicable:
                new, conds = part, []
            changed |= new != part
            parts.append(new)
            conditions.extend(conds)
        if not changed:
            raise DerivationError(f"step {len(self.steps) + 1}: lemma {lemma.number} ({lemma.title}) "
                                  f"does not apply to {self._describe(self.state)}")
        return self._record("rewrite", lemma, self.state.with_parts(*parts),
                            list(dict.fromkeys(conditions)), note)

    def change_variables(self, new: MatrixSymbol, factor: GramSqrt, side: str = "right", note: str = ""):
        """Lemma 4: ``Z = X C`` (right) or ``Z = C X`` (left) for the problem's variable ``X``."""
        problem = self._need(Problem, "change variables")
        old = problem.variable
        parts, conditions = [], []
        for part in problem.parts():
            out, conds = L.CHANGE_OF_VARIABLES.apply(part, variable=old, new=new, factor=factor, side=side)
            parts.append(out)
            conditions.extend(conds)
        inv = L.GramInvSqrt(*factor.args)
        back = product(new, inv) if side == "right" else product(inv, new)
        self._substitutions.append((old, back))
        after = problem.with_parts(*parts, variable=new)
        return self._record("change_of_variables", L.CHANGE_OF_VARIABLES, after,
                            list(dict.fromkeys(conditions)), note or f"{new} = {_ssub(old, factor, side)}",
                            substitution=(old, back))

    def solve(self, note: str = ""):
        """Lemma 1 on ``min ⟨A, Z⟩ s.t. ‖Z‖_op ≤ β``."""
        problem = self._need(Problem, "solve")
        z = problem.variable
        obj, con = problem.objective, problem.constraint
        if not (isinstance(con, OpNorm) and con.args[0] == z):
            raise DerivationError(f"step {len(self.steps) + 1}: Lemma 1 needs the constraint ‖{z}‖_op ≤ β, "
                                  f"got {con}")
        if not isinstance(obj, Inner) or z not in obj.args or obj.args[0].has(z) == obj.args[1].has(z):
            raise DerivationError(f"step {len(self.steps) + 1}: Lemma 1 needs the objective ⟨A, {z}⟩, got {obj}")
        a = obj.args[0] if obj.args[1] == z else obj.args[1]
        beta = problem.budget
        after = Solution(z, tidy(product(-beta, Msign(a))), -beta * NuclearNorm(a))
        return self._record("solve", L.LINEAR_STEEPEST_DESCENT, after, [f"β = {beta} > 0"], note)

    def back_substitute(self, note: str = ""):
        """Undo every change of variables: the argmin in the original variable."""
        sol = self._need(Solution, "back-substitute")
        argmin, variable = sol.argmin, sol.variable
        for old, back in reversed(self._substitutions):
            argmin = tidy(replace_free(back, variable, argmin))
            variable = old
        after = Solution(variable, argmin, sol.value)
        return self._record("back_substitute", L.CHANGE_OF_VARIABLES, after,
                            ["the change of variables is a bijection"], note or "undo the changes of variables")

    def _need(self, kind, what):
        if not isinstance(self.state, kind):
            raise DerivationError(f"cannot {what}: the current state is a {type(self.state).__name__}")
        return self.state

    @property
    def result(self):
        return self.state

    @property
    def formula(self) -> Expr:
        """The derived expression: the argmin of a solved problem, or the end of an identity chain."""
        return self.state.argmin if isinstance(self.state, Solution) else self.state.expr

    def lemmas_used(self):
        return list(dict.fromkeys(s.lemma for s in self.steps))

    def fingerprint(self) -> str:
        """A short hash of the start and every step's result (stable across runs)."""
        h = hashlib.sha256()
        for part in self.start.parts():
            h.update(srepr(part).encode())
        for s in self.steps:
            h.update(s.lemma.key.encode())
            for part in s.after.parts():
                h.update(srepr(part).encode())
        return h.hexdigest()[:12]

    @staticmethod
    def _describe(state):
        return "; ".join(str(p) for p in state.parts())

    # ---- checking -------------------------------------------------------------------------
    def check(self, trials: int = 5, mp: bool = True, seed: int = 0) -> list[CheckResult]:
        """Re-check every step (float64 on ``trials`` instances per size, mpmath once)."""
        rng = np.random.default_rng(seed)
        results = []
        for step in self.steps:
            step.check = self._check_step(step, trials, mp, rng)
            results.append(step.check)
        return results

    def _check_step(self, step: Step, trials: int, mp: bool, rng=None) -> CheckResult:
        rng = rng if rng is not None else np.random.default_rng(step.index)
        worst, count = 0.0, 0
        for dims in self.context.check_dims:
            sampler = InstanceSampler(dims, self.context.definitions, self.context.scalars)
            for _ in range(trials):
                err, env = self._step_error(step, sampler, rng, NumpyBackend())
                count += 1
                if not err <= FLOAT64_TOL:
                    raise StepCheckFailed(self._failure(step, err, env, dims, "float64", FLOAT64_TOL))
                worst = max(worst, err)
        mp_err = None
        if mp and self.context.mpmath_dims:
            sampler = InstanceSampler(self.context.mpmath_dims, self.context.definitions, self.context.scalars)
            with mpmath.workdps(MPMATH_DPS):
                err, env = self._step_error(step, sampler, rng, MpmathBackend(MPMATH_DPS))
            mp_err = float(err)
            if not mp_err <= MPMATH_TOL:
                raise StepCheckFailed(self._failure(step, mp_err, env, self.context.mpmath_dims,
                                                    f"mpmath {MPMATH_DPS} digits", MPMATH_TOL))
        symbolic = "n/a"
        if step.kind in ("rewrite", "change_of_variables") and self.context.symbolic_dims:
            symbolic = prove_equal(list(zip(step.before.parts(), step.after.parts())),
                                   self.context.symbolic_dims, self.context.definitions,
                                   step.substitution)
        return CheckResult(worst, mp_err, symbolic, count, True)

    def _failure(self, step, err, env, dims, where, tol):
        shown = []
        with np.printoptions(precision=4, suppress=True, linewidth=120):
            for k, v in sorted(env.items(), key=lambda kv: str(kv[0])):
                shown.append(f"  {k} =\n{np.array(v.tolist() if hasattr(v, 'tolist') else v, dtype=float)}")
        return (f"step {step.index} ({step.kind}, lemma {step.lemma.number}: {step.lemma.title}) "
                f"fails its {where} check: error {err:.3e} > {tol:.0e} at sizes "
                f"{ {str(k): v for k, v in dims.items()} }\n  before: {self._describe(step.before)}\n"
                f"  after:  {self._describe(step.after)}\n counterexample:\n" + "\n".join(shown))

    def _step_error(self, step, sampler, rng, backend):
        ev = lambda e, env: evaluate(e, env, backend, sampler.dims)
        rel = lambda a, b: _rel(a, b, backend)
        before, after = step.before, step.after
        if step.kind == "solve":
            return self._solve_error(before, after, sampler, rng, backend)
        if step.kind == "back_substitute":
            return self._solve_error(self.start, after, sampler, rng, backend, original=True)
        syms = free_symbols(*before.parts(), *after.parts())
        if step.substitution is not None:
            old, back = step.substitution
            syms = (syms | free_symbols(back)) - {old}
        env = sampler.sample(rng, syms, backend)
        if step.substitution is not None:
            old, back = step.substitution
            env[old] = ev(back, env)
        err = 0.0
        for b, a in zip(before.parts(), after.parts()):
            err = max(err, rel(ev(b, env), ev(a, env)))
        return err, env

    def _solve_error(self, problem, sol, sampler, rng, backend, original=False):
        ev = lambda e, env: evaluate(e, env, backend, sampler.dims)
        syms = free_symbols(problem.objective, problem.constraint, problem.budget, sol.argmin, sol.value)
        syms.discard(problem.variable)
        env = sampler.sample(rng, syms, backend)
        env[problem.variable] = ev(sol.argmin, env)
        value, budget = ev(sol.value, env), ev(problem.budget, env)
        scale = max(1.0, abs(float(value)))
        err = abs(float(ev(problem.objective, env) - value)) / scale          # attains the value
        err = max(err, abs(float(ev(problem.constraint, env) - budget)) / float(budget))  # tight
        if backend.name == "float64":  # no random feasible point does better
            x_star = env[problem.variable]
            for _ in range(20):
                y = rng.standard_normal(np.shape(x_star))
                env[problem.variable] = y
                y = y * (budget / ev(problem.constraint, env))
                env[problem.variable] = y
                err = max(err, max(0.0, value - ev(problem.objective, env)) / scale)
            env[problem.variable] = x_star
        return err, env


def _rel(a, b, backend):
    if isinstance(a, (np.ndarray, mpmath.matrix)):
        diff = backend.max_abs(a - b)
        scale = max(1, backend.max_abs(b))
    else:
        diff, scale = abs(a - b), max(1, abs(b))
    return diff / scale


def _ssub(old, factor, side):
    return f"{old} {factor.label()}" if side == "right" else f"{factor.label()} {old}"


def identity_chain(name: str, title: str, expr: Expr, context: Context, statement: str = "") -> Derivation:
    """A derivation that rewrites ``expr`` into an equal expression (a theorem)."""
    return Derivation(name, title, Claim(tidy(expr)), context, statement=statement)
