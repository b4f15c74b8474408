"""The derivation engine: problems, steps, checks.

A :class:`Derivation` starts from a :class:`Problem` (a matrix variable, a linear objective
``⟨G, L(X)⟩``, an operator-norm constraint ``‖L(X)‖_op ≤ β``) or from an expression (for an
identity chain), and advances by applying lemmas. Every application records a :class:`Step`
(state before, lemma, state after, instantiated side conditions) and every step is checked:

* numerically in float64 on random instances that satisfy the side conditions (several sizes,
  every dimension at least 2), and in mpmath at 50 digits on one instance. A lemma may supply its
  own instances: the chain rule's gradients come from automatic differentiation of a random
  loss (``jax.grad``; complex steps in mpmath), not from the definitions it rewrites with;
* symbolically on explicit matrices of symbols at fixed small sizes, for lemmas whose facts the
  explicit model encodes (``Lemma.algebraic``): agreement is reported as "verified symbolically
  at sizes (…)", disagreement fails the step;
* a restriction step (a lemma with ``restricts``, e.g. Lemma K) by ``c_before(X) ≤ c_after(X)`` on random
  ``X`` with the objective unchanged: the feasible set shrinks;
* a solve step, and the final back-substitution against the *original* problem (after a reduction
  step, the reduced one, plus feasibility for the original), by duality: on
  each instance the nuclear norm of the (range-projected) objective gradient is computed from an
  SVD, independently of the claimed solution; the argmin must be feasible and attain the dual
  bound ``−β‖A‖_*`` (by Hölder's inequality no feasible point does better), the stated value must
  equal it, and random feasible directions must not improve the objective
  (:mod:`derivations.engine.duality`).

A failing check raises :class:`StepCheckFailed` naming the derivation, the step (number and
kind), the lemma and the sub-check, with a counterexample (``check(strict=False)`` records it in
:class:`CheckResult` instead). Misuse of the API raises :class:`DerivationError` with the same
context. Rule modules only state problems and choose lemmas; the result is whatever the lemmas
produce.
"""

from __future__ import annotations

import copy
import hashlib
from functools import lru_cache
from typing import Any, cast

import mpmath
import numpy as np
from sympy import Expr, srepr
from sympy.matrices.expressions import MatrixSymbol

from derivations import lemmas as L
from derivations.engine.duality import duality_certificate_errors
from derivations.engine.latex import check_text, latex_text, state_latex
from derivations.engine.norms import families, family_of, solve_lemma, unscaled
from derivations.engine.states import CheckResult, Claim, Context, Problem, Solution, Step
from derivations.engine.step_digest import digest
from derivations.engine.symbolic import size_label, verify_equal
from derivations.lemmas.base import markdown_text
from derivations.lemmas.kernel import proof_status, step_definitions, step_instance
from derivations.vocabulary.algebra import product, replace_free, tidy
from derivations.vocabulary.evaluate import EvaluationError, InstanceSampler, evaluate, free_symbols
from derivations.vocabulary.nodes import GramInvSqrt, GramSqrt, Inner
from foundation.compute.reference import MpmathBackend, NumpyBackend

FLOAT64_TOL = 1e-9
MPMATH_DPS = 50
MPMATH_TOL = 1e-35
SIDES = ("right", "left")


class DerivationError(ValueError):
    """A lemma could not be applied where the rule module asked for it (the message says where and why)."""


class UncheckedDerivation(DerivationError):
    """A derivation whose result is not what its checked steps give (a replaced state, a step added or edited after
    its check): nothing may be printed or emitted from it. The message names the derivation and the step."""


class StepCheckFailed(AssertionError):
    """A step's check failed; the message names derivation, step, kind, lemma, sub-check and counterexample."""


class _Failure(Exception):
    """A sub-check failed inside :meth:`Derivation._check_step`."""

    def __init__(self, subcheck, message):
        super().__init__(message)
        self.subcheck = subcheck


@lru_cache(maxsize=4096)
def _state_text(state) -> str:
    """A state as text, printed once (SymPy's printer is slow; a search restates each state it fails to rewrite)."""
    return "; ".join(str(p) for p in state.parts())


class Derivation:
    """A chain of checked steps from a problem (or an expression) to a result.

    Examples:
      Muon's update, derived in one step: the solve applies Lemma 1 and certifies the result by duality
      on random float64 instances (a failing check raises :class:`StepCheckFailed`):

      >>> from sympy.matrices.expressions import MatrixSymbol
      >>> from derivations import Context, Derivation, Inner, OpNorm, Problem, dimension, positive_symbol
      >>> m, n = dimension("m"), dimension("n")
      >>> G, X = MatrixSymbol("G", m, n), MatrixSymbol("X", m, n)
      >>> problem = Problem(X, Inner(G, X), OpNorm(X), positive_symbol("epsilon"))
      >>> der = Derivation("muon", "Muon's update", problem, Context(check_dims=[{m: 4, n: 3}, {m: 3, n: 3}]))
      >>> der.solve().formula
      (-epsilon)*msign(G)
      >>> step = der.steps[0]
      >>> print(step.kind, "by Lemma", step.lemma.number, "-", step.lemma.title, "- passed:", step.check.passed)
      solve by Lemma 1 - Linear steepest descent (Muon) - passed: True
      >>> print(der._repr_markdown_().splitlines()[0])    # what Jupyter shows: the steps as a table
      **Muon's update** (`muon`)
    """

    def __init__(self, name: str, title: str, start: Problem | Claim, context: Context, *, statement: str = ""):
        self.name = name
        self.title = title
        self.statement = statement
        self.start = start
        self.state: Problem | Solution | Claim = start
        self.context = context
        self.steps: list[Step] = []
        self.search_stats: dict[str, Any] | None = None  # set by derivations.engine.search.derive
        self._substitutions: list[tuple] = []  # (old variable, expression in the new variable)
        self._checked: dict[int, str] = {}  # step index -> digest of the step as it passed its check (private)
        bad = context.problems()
        if bad:
            raise DerivationError(f"{name}: " + "; ".join(bad))

    # ---- building -------------------------------------------------------------------------
    def _where(self, kind, lemma) -> str:
        """``halfsplit.key step 4 (rewrite), lemma T (Transposition invariance)``."""
        return f"{self.name} step {len(self.steps) + 1} ({kind}), lemma {lemma.number} ({lemma.title})"

    def _record(self, kind, lemma, after, conditions, note="", substitution=None, params=None):
        step = Step(len(self.steps) + 1, kind, lemma, self.state, after, list(conditions), note,
                    substitution, params=dict(params or {}))
        step.check = self._check_step(step, trials=1, mp=False)
        self.steps.append(step)
        self.state = after
        return self

    def apply(self, lemma: L.Lemma, note: str = "", **params: Any) -> Derivation:
        """Rewrite every part of the current state with ``lemma``."""
        if not isinstance(lemma, L.Lemma):
            raise DerivationError(f"{self.name} step {len(self.steps) + 1}: apply() takes a Lemma, got {lemma!r}")
        where = self._where("rewrite", lemma)
        parts, conditions, changed, reasons = [], [], False, []
        for part in self.state.parts():
            try:
                new, conds = lemma.apply(part, **params)
            except L.NotApplicable as exc:
                new, conds = part, []
                reasons.append(str(exc))
            except TypeError as exc:
                raise DerivationError(f"{where}: wrong parameters {sorted(params)}: {exc}") from None
            except (ValueError, AttributeError) as exc:  # shapes that do not fit (sympy ShapeError), bad params
                raise DerivationError(f"{where}: the rewrite failed on {part}: {exc}") from None
            changed |= new != part
            parts.append(new)
            conditions.extend(conds)
        if not changed:
            why = "; ".join(dict.fromkeys(reasons)) or "the rewrite left every part unchanged"
            raise DerivationError(f"{where} did not apply to {self._describe(self.state)}: {why}")
        kind = "rewrite"
        restricts = getattr(lemma, "restricts", False)  # a stronger constraint (derivations.lemmas.blocks)
        if restricts or getattr(lemma, "reduces", False):  # or an equal reformulation of the problem
            kind = "restrict" if restricts else kind
            if not isinstance(self.state, Problem) or self._substitutions:
                raise DerivationError(f"{where}: a reduction acts on the original problem, before any change of "
                                      "variables (the back-substitution certifies the reduced problem)")
            if restricts and parts[0] != self.state.objective:
                raise DerivationError(f"{where}: a restriction replaces the constraint and leaves the objective alone")
        return self._record(kind, lemma, self.state.with_parts(*parts),
                            list(dict.fromkeys(conditions)), note, params=params)

    def change_variables(self, new: MatrixSymbol, factor: Expr, side: str = "right", note: str = "",
                         lemma: L.Lemma | None = None) -> Derivation:
        """Lemma 4: ``Z = X C`` (right) or ``Z = C X`` (left) for the problem's variable ``X`` and a Gram root ``C``;
        with ``lemma=WHITENING_CHANGE`` (Lemma 4i), any invertible whitening (the objective takes its inverse)."""
        lemma = lemma or L.CHANGE_OF_VARIABLES
        where = self._where("change_of_variables", lemma)
        problem = self._need(Problem, "change variables", where)
        old = problem.variable
        inv = _undo(lemma, factor)
        if side not in SIDES:
            raise DerivationError(f"{where}: side must be one of {SIDES}, got {side!r}")
        if inv is None:
            raise DerivationError(f"{where}: the factor must be a Gram root C_W (Lemma 4) or an invertible SPD power "
                                  f"(Lemma 4i), got {factor}")
        if any(new in free_symbols(*state.parts()) for state in (self.start, *(st.after for st in self.steps))):
            raise DerivationError(f"{where}: the new variable {new} is already a symbol of the derivation; a change "
                                  "of variables introduces a fresh name")
        reshapes = int(getattr(lemma, "reshapes", False))  # Lemma Rw: the new variable may have other rows
        if getattr(new, "shape", (None, None))[reshapes:] != old.shape[reshapes:]:
            raise DerivationError(f"{where}: the new variable {new} must have the shape of {old} "
                                  f"({old.shape[0]} x {old.shape[1]}), got {getattr(new, 'shape', None)}")
        if factor.shape[int(side != "right")] != (old.shape[1] if side == "right" else old.shape[0]):
            raise DerivationError(f"{where}: {factor} is {factor.shape[0]} x {factor.shape[1]}, which cannot multiply "
                                  f"{old} ({old.shape[0]} x {old.shape[1]}) on the {side}")
        parts, conditions = [], []
        for part in problem.parts():
            try:
                out, conds = lemma.apply(part, variable=old, new=new, factor=factor, side=side)
            except L.NotApplicable as exc:
                raise DerivationError(f"{where} did not apply to {part}: {exc}") from None
            except ValueError as exc:
                raise DerivationError(f"{where}: the substitution failed on {part}: {exc}") from None
            parts.append(out)
            conditions.extend(conds)
        back = product(new, inv) if side == "right" else product(inv, new)
        after = problem.with_parts(*parts, variable=new)
        self._record("change_of_variables", lemma, after, list(dict.fromkeys(conditions)),
                     note or f"{new} = {_ssub(old, factor, side)}", substitution=(old, back))
        self._substitutions.append((old, back))
        return self

    def solve(self, note: str = "", lemma: L.Lemma | None = None) -> Derivation:
        """Steepest descent in a norm ball: ``min ⟨A, Z⟩ s.t. ‖Z‖ ≤ β`` for a norm of
        :data:`derivations.engine.norms.FAMILIES` (Lemma 1 for the operator norm; ``lemma`` may override,
        with a ``solution`` function), through the family's dual norm. A constraint ``c ‖Z‖ ≤ β`` with a
        scalar ``c > 0`` free of ``Z`` is the ball ``‖Z‖ ≤ β/c`` (:func:`unscaled`)."""
        ball = unscaled(self.state) if isinstance(self.state, Problem) else self.state
        family = family_of(ball.constraint) if isinstance(ball, Problem) else None
        lemma = lemma or (solve_lemma(family) if family is not None else L.LINEAR_STEEPEST_DESCENT)
        where = self._where("solve", lemma)
        state = self._need(Problem, "solve", where)
        problem = cast(Problem, ball)
        z = problem.variable
        obj, con = problem.objective, problem.constraint
        if family is None or con.args[0] != z:
            raise DerivationError(f"{where}: Lemma {lemma.number} needs the constraint ‖{z}‖ ≤ β for a norm family "
                                  f"({', '.join(f.key for f in families())}), got {con} "
                                  f"(a change of variables or an isometry step is missing)")
        if not isinstance(obj, Inner) or z not in obj.args or obj.args[0].has(z) == obj.args[1].has(z):
            raise DerivationError(f"{where}: Lemma 1 needs the objective ⟨A, {z}⟩ with A free of {z}, got {obj}")
        if lemma.solution is None:
            raise DerivationError(f"{where}: lemma {lemma.number} has no solution function")
        a = obj.args[0] if obj.args[1] == z else obj.args[1]
        beta = problem.budget
        argmin, value = lemma.solution(a, beta)
        scaled = [] if problem is state else [f"{state.budget / beta} > 0: the constraint's scale"]
        return self._record("solve", lemma, Solution(z, argmin, value), [f"β = {beta} > 0", *scaled], note)

    def back_substitute(self, note: str = "") -> Derivation:
        """Undo every change of variables: the argmin in the original variable."""
        lemma = next((s.lemma for s in self.steps if s.kind == "change_of_variables"
                      and s.lemma is not L.CHANGE_OF_VARIABLES), L.CHANGE_OF_VARIABLES)  # Lemma 4i states Lemma 4's too
        where = self._where("back_substitute", lemma)
        sol = self._need(Solution, "back-substitute", where)
        argmin, variable = sol.argmin, sol.variable
        for old, back in reversed(self._substitutions):
            argmin = tidy(replace_free(back, variable, argmin))
            variable = old
        if isinstance(self.start, Problem) and variable != self.start.variable:
            raise DerivationError(f"{where}: the substitutions end in {variable}, not in the problem's "
                                  f"variable {self.start.variable}")
        after = Solution(variable, argmin, sol.value)
        return self._record("back_substitute", lemma, after,
                            ["the change of variables is a bijection"], note or "undo the changes of variables")

    def _need(self, kind, what, where):
        if not isinstance(self.state, kind):
            hint = {Problem: "solve() has already run, or this is an identity chain",
                    Solution: "solve() has not run yet"}.get(kind, "")
            raise DerivationError(f"{where}: cannot {what}: the current state is a {type(self.state).__name__}, "
                                  f"not a {kind.__name__}" + (f" ({hint})" if hint else ""))
        return self.state

    @property
    def result(self) -> Problem | Solution | Claim:
        return self.state

    @property
    def formula(self) -> Expr:
        """The derived expression: the argmin of a solved problem, or the end of an identity chain."""
        if isinstance(self.state, Solution):
            return self.state.argmin
        if isinstance(self.state, Claim):
            return self.state.expr
        raise DerivationError(f"{self.name}: no formula yet: the problem has not been solved")

    def lemmas_used(self) -> list[L.Lemma]:
        return list(dict.fromkeys(s.lemma for s in self.steps))

    def proof_status(self) -> dict:
        """How far each step is proven (:func:`derivations.lemmas.kernel.proof_status`)."""
        for step in self.steps:
            self._instance(step)
        return proof_status(self.steps)

    def _digest(self, step: Step) -> str:
        """What a check vouches for: the step's kind, lemma, states, substitution and parameters, and the
        derivation's definitions (a hash of their ``srepr``; a later edit of any of them changes it)."""
        return digest((step.index, step.kind, step.lemma.key, *step.before.parts(), *step.after.parts(),
                       step.substitution, step.params, self.context.definitions))

    def integrity(self) -> list[str]:
        """Why the result is not what the checked steps give (empty when it is): the steps must follow one another
        from the start, each as it passed its check in this derivation, and the state must be the last step's."""
        where = f"{self.name}: not checked:"
        chain = [self.start, *(s.after for s in self.steps)]
        for i, step in enumerate(self.steps):
            name = f"step {i + 1} ({step.kind}, lemma {step.lemma.number})"
            if step.index != i + 1 or step.before != chain[i]:
                return [f"{where} {name} does not continue the derivation (it was added or edited by hand)"]
            if self._checked.get(step.index) != self._digest(step):
                return [f"{where} {name} is not the step that passed its check (added, edited or failed)"]
        if self.state != chain[-1]:
            last = f"step {len(self.steps)}" if self.steps else "the start"
            return [f"{where} the state is not the result of {last}: it was replaced after the steps were checked"]
        return []

    def verified(self) -> Derivation:
        """``self``, after :meth:`integrity` found nothing; else :class:`UncheckedDerivation` (one line). The printers,
        the emitters and the docs take their formulas only through this."""
        problems = self.integrity()
        if problems:
            raise UncheckedDerivation(problems[0])
        return self

    def fork(self) -> Derivation:
        """A copy that can take further steps without changing this one (the search's branches)."""
        new = copy.copy(self)
        new.steps, new._substitutions, new._checked = list(self.steps), list(self._substitutions), dict(self._checked)
        return new

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

    _describe = staticmethod(_state_text)

    # ---- notebook display ---------------------------------------------------------------------
    def _repr_latex_(self) -> str:
        """Jupyter: the chain of states as one aligned display, each step tagged with its lemma."""
        rows = [rf"&{state_latex(self.start)}"]
        rows += [rf"\Rightarrow\ &{state_latex(s.after)} &&\text{{Lemma {latex_text(s.lemma.number)}}}"
                 for s in self.steps]
        return "$$\\begin{aligned}" + r" \\ ".join(rows) + r"\end{aligned}$$"

    def _repr_markdown_(self) -> str:
        """Jupyter: title and name, the start, a table of the steps (lemma, side conditions, the check
        recorded) and the result."""
        head = f"**{markdown_text(self.title)}** (`{self.name}`)"
        if self.statement:
            head += f": {markdown_text(self.statement)}"
        lines = [head, "", f"$${state_latex(self.start)}$$", ""]
        if self.steps:
            lines += ["| step | lemma | side conditions | check |", "|---|---|---|---|"]
            for s in self.steps:
                conditions = "; ".join(markdown_text(c) for c in s.conditions) or "none"
                lemma = f"{markdown_text(s.lemma.number)}: {markdown_text(s.lemma.title)}"
                lines.append(f"| {s.index} | {lemma} | {conditions} | {check_text(s.check)} |")
            lines += ["", f"$${state_latex(self.state)}$$"]
        return "\n".join(lines) + "\n"

    # ---- checking -------------------------------------------------------------------------
    def check(self, trials: int = 5, mp: bool = True, seed: int = 0, strict: bool = True) -> list[CheckResult]:
        """Re-check every step (float64 on ``trials`` instances per size, mpmath once).

        ``strict``: raise :class:`StepCheckFailed` at the first failing step; otherwise record the
        failure in the step's :class:`CheckResult` (``passed`` is False) and go on.
        """
        rng = np.random.default_rng(seed)
        results = []
        for step in self.steps:
            step.instance = None  # the trusted kernel decides again: a step cannot carry its own verdict in
            step.check = self._check_step(step, trials, mp, rng, strict)
            results.append(step.check)
        return results

    def _check_step(self, step: Step, trials: int, mp: bool, rng=None, strict: bool = True) -> CheckResult:
        rng = rng if rng is not None else np.random.default_rng(step.index)
        worst, count = 0.0, 0
        subchecks: dict[str, float] = {}
        mp_err = None
        try:
            instance = self._instance(step)
            for dims in self.context.check_dims:
                sampler = InstanceSampler(dims, self.context.definitions, self.context.scalars)
                for _ in range(trials):
                    errs, env = self._instance_errors(step, sampler, rng, NumpyBackend())
                    count += 1
                    self._gate(step, errs, env, dims, "float64", FLOAT64_TOL, subchecks)
                    worst = max([worst, *errs.values()])
            if mp and self.context.mpmath_dims:
                sampler = InstanceSampler(self.context.mpmath_dims, self.context.definitions, self.context.scalars)
                with mpmath.workdps(MPMATH_DPS):
                    errs, env = self._instance_errors(step, sampler, rng, MpmathBackend(MPMATH_DPS))
                self._gate(step, errs, env, self.context.mpmath_dims, f"mpmath {MPMATH_DPS} digits", MPMATH_TOL, {})
                mp_err = max(errs.values())
            symbolic = self._symbolic(step)
        except _Failure as exc:
            self._checked.pop(step.index, None)
            if strict:
                raise StepCheckFailed(str(exc)) from None
            return CheckResult(worst, mp_err, step.symbolic or "", count, subchecks, str(exc), step.instance or "")
        self._checked[step.index] = self._digest(step)
        return CheckResult(worst, mp_err, symbolic, count, subchecks, instance=instance)

    def independent(self) -> frozenset:
        """The matrices the derivation starts from without a definition (no step may redefine one)."""
        free = free_symbols(*self.start.parts())
        return frozenset(m for m in free if isinstance(m, MatrixSymbol) and m not in self.context.definitions)

    def _instance(self, step: Step) -> str:
        """The trusted kernel's verdict: the step is an instance of its lemma's statement."""
        if step.instance is not None:
            return step.instance
        earlier = self.steps[:step.index - 1]
        definitions = dict(self.context.definitions)  # the context's, then what earlier steps defined
        for s in earlier:
            for name, definition in step_definitions(s.lemma.statement, s.params):
                definitions.setdefault(name, definition)
        substitution = step.substitution
        if step.kind == "back_substitute":  # the changes of variables the derivation recorded, never the step's own
            substitution = tuple((s.substitution[0], cast(Problem, s.after).variable, s.substitution[1])
                                 for s in earlier if s.kind == "change_of_variables" and s.substitution is not None)
        fresh = (cast(Problem, step.after).variable,) if step.kind == "change_of_variables" else ()
        status, failure = step_instance(step.lemma, step.kind, step.before.parts(), step.after.parts(),
                                        substitution=substitution, params=step.params, definitions=definitions,
                                        independent=self.independent(), fresh=fresh)
        if failure is None:
            step.instance = status
            return status
        raise _Failure("instance", f"{self._header(step, 'instance of the statement')}: {failure}\n  before: "
                       f"{self._describe(step.before)}\n  after:  {self._describe(step.after)}")

    def _symbolic(self, step: Step) -> str:
        if step.symbolic is not None:
            return step.symbolic
        if step.kind in ("solve", "back_substitute"):
            step.symbolic = "n/a: certified by duality"
        elif step.kind == "restrict":
            step.symbolic = "n/a: an inequality, checked on random instances"
        elif not self.context.symbolic_dims:
            step.symbolic = "n/a: no symbolic sizes"
        elif not step.lemma.algebraic:
            step.symbolic = f"not modelled: {step.lemma.not_modelled}"
        else:
            verdict = verify_equal(list(zip(step.before.parts(), step.after.parts(), strict=False)),
                                   self.context.symbolic_dims, self.context.definitions, step.substitution)
            if verdict.status == "refuted":
                raise _Failure("symbolic", self._header(step, "symbolic") + f": {verdict}\n"
                               f"  before: {self._describe(step.before)}\n  after:  {self._describe(step.after)}")
            step.symbolic = str(verdict)
        return step.symbolic

    def _header(self, step, subcheck) -> str:
        return (f"{self.name} step {step.index} ({step.kind}), lemma {step.lemma.number} ({step.lemma.title}): "
                f"sub-check '{subcheck}' failed")

    def _gate(self, step, errs, env, dims, where, tol, subchecks):
        for name, err in errs.items():
            subchecks[name] = max(subchecks.get(name, 0.0), float(err))
            if not err <= tol:
                raise _Failure(name, self._failure(step, name, err, env, dims, where, tol))

    def _failure(self, step, subcheck, err, env, dims, where, tol):
        shown = []
        with np.printoptions(precision=4, suppress=True, linewidth=120):
            for k, v in sorted(env.items(), key=lambda kv: str(kv[0])):
                try:
                    shown.append(f"  {k} =\n{np.array(v.tolist() if hasattr(v, 'tolist') else v, dtype=float)}")
                except (TypeError, ValueError):
                    shown.append(f"  {k} = {v}")
        return (f"{self._header(step, subcheck)} in {where}: error {float(err):.3e} > {tol:.0e} at sizes "
                f"{size_label(dims)}\n  before: {self._describe(step.before)}\n"
                f"  after:  {self._describe(step.after)}\n counterexample:\n" + "\n".join(shown))

    def _instance_errors(self, step, sampler, rng, backend):
        """``({sub-check: error}, env)`` of one random instance; evaluation failures are failures."""
        try:
            if step.kind == "solve":
                return self._solve_errors(step, sampler, rng, backend)
            if step.kind == "back_substitute":
                return self._certify(step, sampler, rng, backend)
            if step.kind == "restrict":
                return self._restriction_errors(step, sampler, rng, backend)
            return self._rewrite_errors(step, sampler, rng, backend)
        except (EvaluationError, np.linalg.LinAlgError, ZeroDivisionError, ValueError, L.NotApplicable) as exc:
            raise _Failure("evaluation", f"{self._header(step, 'evaluation')}: could not evaluate at sizes "
                                         f"{size_label(sampler.dims)}: {type(exc).__name__}: {exc}") from None

    @staticmethod
    def _solve_errors(step, sampler, rng, backend):
        """The duality certificate of a solve step; for a scaled constraint ``c ‖Z‖ ≤ β``, that of the ball
        ``‖Z‖ ≤ β/c``, and the stated constraint evaluated at the argmin: ``|c ‖Z*‖ − β| / β`` (sub-check)."""
        ball = unscaled(step.before)
        errs, env = duality_certificate_errors(ball, step.after, sampler, rng, backend)
        if ball is step.before:
            return errs, env
        beta, met = (evaluate(e, env, backend, sampler.dims) for e in (step.before.budget, step.before.constraint))
        errs["stated constraint tight"] = abs(float(met - beta)) / float(beta)
        return errs, env

    def restricted_problem(self) -> Problem | Solution | Claim:
        """The problem the result solves: the start, or the state after the last reduction step (a
        restriction to a stronger constraint, or an equal reformulation such as a concatenation)."""
        restricted = [s for s in self.steps if s.kind == "restrict" or getattr(s.lemma, "reduces", False)]
        return restricted[-1].after if restricted else self.start

    def _certify(self, step, sampler, rng, backend):
        """Duality certificate against the (restricted) original problem; after a restriction also
        ``feasible for the original problem``: ``max(0, c(X*) − β) / β`` for the start's constraint."""
        problem = self.restricted_problem()
        reductions = [s for s in self.steps if s.kind == "restrict" or getattr(s.lemma, "reduces", False)]
        prepare = None
        if reductions and reductions[-1].lemma.instance is not None:  # the reduction's own bindings (Lemma J)
            last = reductions[-1]

            def prepare(env):
                missing = free_symbols(*self.start.parts(), self.start.budget) - set(env)
                fresh = sampler.sample(rng, missing, backend)
                env = {**env, **{k: fresh[k] for k in missing}}
                env, overridden = last.lemma.instance(env, rng, backend, sampler.dims, **last.params)
                for sym, definition in sampler.definitions.items():
                    if sym not in overridden:
                        env[sym] = evaluate(definition, env, backend, sampler.dims)
                return env
        errs, env = duality_certificate_errors(unscaled(problem), step.after, sampler, rng, backend, prepare)
        if problem is not self.start:
            def ev(e):
                return evaluate(e, env, backend, sampler.dims)
            beta = ev(self.start.budget)
            errs["feasible for the original problem"] = max(0.0, float(ev(self.start.constraint) - beta)) / float(beta)
        return errs, env

    def _restriction_errors(self, step, sampler, rng, backend):
        """A restriction on one random instance (the variable drawn at random too): the objective is
        unchanged and the new constraint bounds the old one from above, ``c_before(X) ≤ c_after(X)``, so
        the new feasible set lies inside the old."""
        def ev(e, env):
            return evaluate(e, env, backend, sampler.dims)
        (obj_b, con_b), (obj_a, con_a) = step.before.parts(), step.after.parts()
        env = sampler.sample(rng, free_symbols(obj_b, con_b, obj_a, con_a), backend)
        c_b, c_a = ev(con_b, env), ev(con_a, env)
        return {"objective unchanged": float(_rel(ev(obj_b, env), ev(obj_a, env), backend)),
                "constraint tightened": max(0.0, float(c_b - c_a)) / max(1.0, abs(float(c_a)))}, env

    def _rewrite_errors(self, step, sampler, rng, backend):
        def ev(e, env):
            return evaluate(e, env, backend, sampler.dims)
        before, after = step.before, step.after
        syms = free_symbols(*before.parts(), *after.parts())
        if step.substitution is not None:
            old, back = step.substitution
            syms = (syms | free_symbols(back)) - {old}
        env = sampler.sample(rng, syms, backend)
        if step.lemma.instance is not None:  # the lemma's own instances (the chain rule: autodiff)
            env, overridden = step.lemma.instance(env, rng, backend, sampler.dims, **step.params)
            named = {name for name, _ in step_definitions(step.lemma.statement, step.params)}
            clobbered = sorted(str(m) for m in set(overridden) & named & self.independent() if m in syms)
            if clobbered:  # a defined name's values would stand in for an independent matrix of the step
                raise _Failure("independent symbols", f"{self._header(step, 'independent symbols')}: the lemma's "
                               f"instance gives {', '.join(clobbered)} the values of its definition, but it is "
                               "independent in the derivation's start")
            for sym, definition in sampler.definitions.items():
                if sym not in overridden:
                    env[sym] = ev(definition, env)
        if step.substitution is not None:
            old, back = step.substitution
            env[old] = ev(back, env)
        err = 0.0
        for b, a in zip(before.parts(), after.parts(), strict=False):
            err = max(err, _rel(ev(b, env), ev(a, env), backend))
        return {"before = after": float(err)}, env


def _rel(a, b, backend):
    matrix = isinstance(a, (np.ndarray, mpmath.matrix))
    diff, scale = (backend.max_abs(a - b), backend.max_abs(b)) if matrix else (abs(a - b), abs(b))
    return diff / max(1, scale)


def _undo(lemma, factor):
    """``F`` with ``X = F Z`` (left) or ``X = Z F`` (right) for a change of variables by ``lemma`` through ``factor``:
    the inverse (Lemmas 4, 4i), the right inverse ``Wᵀ (W Wᵀ)⁻¹`` (Lemma Rw), or ``None``."""
    if lemma is L.CHANGE_OF_VARIABLES:
        return GramInvSqrt(*factor.args) if isinstance(factor, GramSqrt) else None
    return L.right_inverse_of(factor) if getattr(lemma, "reshapes", False) else L.inverse_of(factor)


def _ssub(old, factor, side):
    label = factor.label() if hasattr(factor, "label") else str(factor)
    return f"{old} {label}" if side == "right" else f"{label} {old}"


def identity_chain(name: str, title: str, expr: Expr, context: Context, statement: str = "") -> Derivation:
    """A derivation that rewrites ``expr`` into an equal expression (a theorem)."""
    return Derivation(name, title, Claim(tidy(expr)), context, statement=statement)
