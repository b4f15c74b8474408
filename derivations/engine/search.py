"""``derive(problem)``: find a checked derivation by best-first search over the applicable lemmas.

A node of the search is a :class:`~derivations.engine.derivation.Derivation` (every step already checked).
Its successors are the lemmas that apply to its state, with their parameters read off the state:

* the partners that can be polar-substituted (matrices known to have full rank),
* the Gram roots that can be absorbed by a change of variables (either side),
* the isometry, transposition and adjoint rewrites, the polar factor written through its partner
  (either way), the chain rule that names the available factor gradients,
* the solve step once the problem is ``min ⟨A, Z⟩ s.t. ‖Z‖ ≤ β`` for a known norm family, and the
  back-substitution of every change of variables.

A lemma that does not apply (a side condition not known to hold) and a step whose numerical check
fails both prune the branch. The goal is a solution in the original variable that uses only the
available symbols (the factor gradients, not the never-formed loss gradient ``G_M``); the priority
is ``steps so far + an estimate of the steps left`` (A*-style with an admissible-in-spirit count of
the obstacles still in the state: factors around the variable, unavailable symbols, polar factors,
pending substitutions). When the search fails, :class:`SearchFailed` lists what was tried and where
each branch stopped.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, cast

from sympy import Basic, MatMul, S, srepr
from sympy.matrices.expressions import MatrixSymbol, Transpose

from derivations import lemmas as L
from derivations.engine import norms
from derivations.engine.algebra import product, transpose
from derivations.engine.derivation import Context, Derivation, DerivationError, Problem, Solution, StepCheckFailed
from derivations.engine.vocabulary import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    PolarFactor,
    _Derived,
    facts_of,
)


class SearchFailed(DerivationError):
    """No derivation reached the goal; the message lists what was tried and where each branch stopped."""

    def __init__(self, message: str, report: list):
        super().__init__(message)
        self.report = report


@dataclass
class Move:
    """One candidate step: a label for reports and a function that applies it to a derivation."""

    label: str
    run: Callable[..., Any] = field(repr=False)  # applied as run(derivation)


def _fork(der: Derivation) -> Derivation:
    new = copy.copy(der)
    new.steps = list(der.steps)
    new._substitutions = list(der._substitutions)
    return new


def _matrices(expr):
    return {m for m in expr.atoms(MatrixSymbol)}


def _free_matrices(expr):
    """Matrix symbols outside derived nodes (what a polar substitution can reach)."""
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


def _parts(state):
    return [p for p in state.parts() if hasattr(p, "atoms")]


def _fresh_variable(der: Derivation, variable: MatrixSymbol) -> MatrixSymbol:
    used = {str(s) for p in _parts(der.start) for s in p.atoms(MatrixSymbol)}
    used |= {str(old) for old, _ in der._substitutions} | {str(variable)}
    suffix = str(variable.name).rsplit("_", 1)[-1]
    for k in itertools.count():
        name = f"Z_{suffix}" + ("" if k == 0 else f"{k}")
        if name not in used:
            return MatrixSymbol(name, *variable.shape)


def default_available(problem: Problem, context: Context) -> set:
    """Symbols a result may use: the problem's own, the defined factor gradients, minus what those
    definitions are defined *from* (the loss gradient of the product, never formed)."""
    symbols = set().union(*(p.free_symbols for p in (problem.objective, problem.constraint, problem.budget)))
    defined_from = (set().union(*(d.free_symbols for d in context.definitions.values())) if context.definitions
                    else set())
    partners = {s for s in defined_from if isinstance(s, FactMatrix)}
    return (symbols | set(context.definitions) | partners) - (defined_from - partners) - {problem.variable}


class Searcher:
    """Best-first search from a problem to a checked solution (see the module docstring)."""

    def __init__(self, problem: Problem, context: Context, *, name: str, title: str, statement: str = "",
                 available: Iterable[Basic] | None = None, max_expansions: int = 400, max_depth: int = 14,
                 gradients: dict | None = None):
        self.problem, self.context = problem, context
        self.name, self.title, self.statement = name, title, statement
        self.available = set(available) if available is not None else default_available(problem, context)
        self.gradients = dict(context.definitions if gradients is None else gradients)
        self.max_expansions, self.max_depth = max_expansions, max_depth
        self.expanded = 0
        self.report: list[tuple[str, str]] = []  # (path, where the branch stopped)
        self.notes: set[str] = set()  # moves not offered, and why

    # ---- goal and estimate ----------------------------------------------------------------
    def _unavailable(self, expr, der=None) -> set:
        mats = {s for s in expr.free_symbols if isinstance(s, MatrixSymbol)}
        internal = {der.state.variable} | {old for old, _ in der._substitutions} if der is not None else set()
        return mats - self.available - internal

    def is_goal(self, der: Derivation) -> bool:
        st = der.state
        return (isinstance(st, Solution) and st.variable == self.problem.variable
                and not self._unavailable(st.argmin))

    def estimate(self, der: Derivation) -> int:
        """Obstacles left: pending solve and back-substitution, factors around the variable,
        unavailable symbols, polar factors still to express through their partners."""
        st = der.state
        if isinstance(st, Solution):
            return (st.variable != self.problem.variable) + len(self._unavailable(st.argmin))
        st = cast(Problem, st)  # a search starts from a Problem: never a Claim
        z = st.variable
        h = 1 + (z != self.problem.variable)
        for part in (st.constraint, st.objective):
            for arg in part.args:
                if getattr(arg, "is_Matrix", False) and arg.has(z) and arg != z:
                    factors = arg.as_coeff_matrices()[1] if isinstance(arg, MatMul) else [arg]
                    h += max(1, len([f for f in factors if f not in (z, Transpose(z))]))
        return h + len(self._unavailable(st.objective, der)) + len(st.objective.atoms(PolarFactor))

    # ---- moves: one helper per kind ---------------------------------------------------------
    def moves(self, der: Derivation) -> list[Move]:
        st = der.state
        if isinstance(st, Solution):
            return self._back_substitution_moves(der)
        st = cast(Problem, st)  # a search starts from a Problem: never a Claim
        z, parts = st.variable, _parts(st)
        return [*self._solve_moves(st), *self._polar_substitution_moves(z, parts),
                *self._change_of_variables_moves(der, z, parts), *self._rewrite_moves(z),
                *self._polar_inverse_moves(parts), *self._chain_rule_moves()]

    def _back_substitution_moves(self, der: Derivation) -> list[Move]:
        """A solution in a substituted variable: back to the original one."""
        if der._substitutions and cast(Solution, der.state).variable != self.problem.variable:
            return [Move("back-substitute", lambda d: d.back_substitute())]
        return []

    @staticmethod
    def _solve_moves(st) -> list[Move]:
        """The solve step, once the problem is ``min ⟨A, Z⟩ s.t. ‖Z‖ ≤ β`` for a known norm family."""
        try:
            norms.ball_parts(st)
        except norms.NotABall:
            return []
        family = norms.family_of(st.constraint)
        return [Move(f"solve ({family.key if family else '?'} ball)", _solve)]

    def _polar_substitution_moves(self, z, parts) -> list[Move]:
        """``W = U C`` for every free matrix known to have full rank (or damped), either side."""
        atoms = set().union(*(p.atoms(GramSqrt, GramInvSqrt, PolarFactor) for p in parts))
        out = []
        for w in sorted(set().union(*(_free_matrices(p) for p in parts)), key=str):
            if w != z:
                out += self._polar_substitutions_of(w, z, parts, atoms)
        return out

    def _polar_substitutions_of(self, w, z, parts, atoms) -> list[Move]:
        facts = facts_of(w)
        if not facts & {FULL_COLUMN_RANK, FULL_ROW_RANK} and w.is_Matrix and any(
                p.has(product(z, transpose(w))) or p.has(product(w, z)) for p in parts):
            self.notes.add(f"{w} is not known to have full rank: no polar substitution, it cannot be whitened")
        out = []
        # W = U_λ C_λ for the dampings its Gram roots already carry (0 for the undamped problem)
        dampings = sorted({S.Zero} | {g.damping for g in atoms if g.base == w}, key=str)
        for lam in dampings:
            if any(g.base == w and g.damping == lam and isinstance(g, (PolarFactor, GramInvSqrt)) for g in atoms):
                continue  # substituted already: W = U_W C_W again would only cycle
            for side, fact in (("right", FULL_COLUMN_RANK), ("left", FULL_ROW_RANK)):
                if fact in facts or (lam != 0 and lam.is_positive):
                    out.append(Move(f"Lemma {L.POLAR_SUBSTITUTION.number} ({w}, {side}"
                                    + (f", λ = {lam})" if lam != 0 else ")"),
                                    lambda d, w=w, side=side, lam=lam: d.apply(
                                        L.POLAR_SUBSTITUTION, matrix=w, side=side, damping=lam)))
        return out

    @staticmethod
    def _change_of_variables_moves(der: Derivation, z, parts) -> list[Move]:
        """A Gram root absorbed into a new variable, either side."""
        out = []
        for g in sorted(set().union(*(p.atoms(GramSqrt) for p in parts)), key=str):
            for side in ("right", "left"):
                new = _fresh_variable(der, z)
                out.append(Move(f"change of variables {new} = {g.label()} {z} ({side})",
                                lambda d, g=g, side=side, new=new: d.change_variables(new, g, side=side)))
        return out

    @staticmethod
    def _rewrite_moves(z) -> list[Move]:
        """The rewrites without parameters (isometry, transposition, norms), and the adjoint onto ``z``."""
        out = [Move(f"Lemma {lemma.number} ({lemma.title})", lambda d, lemma=lemma: d.apply(lemma))
               for lemma in invariance_lemmas()]
        out.append(Move(f"Lemma {L.ADJOINT_MOVE.number} (adjoint onto {z})",
                        lambda d, z=z: d.apply(L.ADJOINT_MOVE, variable=z)))
        return out

    @staticmethod
    def _polar_inverse_moves(parts) -> list[Move]:
        """Every polar factor written through its partner."""
        return [Move(f"Lemma {L.POLAR_INVERSE.number} (U_{u.base} through {u.base})",
                     lambda d, u=u: d.apply(L.POLAR_INVERSE, matrix=u.base, damping=u.damping, side=u.side,
                                            reverse=True))
                for u in sorted({u for p in parts for u in p.atoms(PolarFactor)}, key=str)]

    def _chain_rule_moves(self) -> list[Move]:
        """The chain rule that names the available factor gradients."""
        if not self.gradients:
            return []
        return [Move(f"Lemma {L.CHAIN_RULE.number} (name the factor gradients)",
                     lambda d: d.apply(L.CHAIN_RULE, gradients=self.gradients))]

    # ---- the search -----------------------------------------------------------------------
    def run(self) -> Derivation:
        """Search with a light check (one size, float64, no symbolic step), then replay the path found
        with every check of the context: the returned derivation is checked like a scripted one."""
        light = replace(self.context, check_dims=self.context.check_dims[:1], symbolic_dims={}, mpmath_dims={})
        t0 = time.perf_counter()
        found = self._search(Derivation(self.name, self.title, self.problem, light, statement=self.statement))
        t1 = time.perf_counter()
        der = Derivation(self.name, self.title, self.problem, self.context, statement=self.statement)
        for move in found:
            move.run(der)
        der.search_stats = {"expanded": self.expanded, "search_seconds": t1 - t0,
                            "replay_seconds": time.perf_counter() - t1, "path": [m.label for m in found]}
        return der

    def _search(self, start: Derivation) -> list:
        counter = itertools.count()
        frontier: list[tuple[int, int, int, Derivation, tuple]] = [(self.estimate(start), 0, next(counter), start, ())]
        seen = {self._key(start.state)}
        while frontier:
            *_, der, path = heapq.heappop(frontier)
            if self.is_goal(der):
                return list(path)
            if self.expanded >= self.max_expansions:
                self.report.append((_path(path), "not expanded: the expansion budget is spent"))
                break
            if len(path) >= self.max_depth:
                self.report.append((_path(path), f"depth limit {self.max_depth}"))
                continue
            self.expanded += 1
            successors = 0
            stops = []
            for move in self.moves(der):
                child = _fork(der)
                try:
                    move.run(child)
                except StepCheckFailed as exc:
                    stops.append(f"{move.label}: pruned by its check ({_reason(exc, der.state)})")
                    continue
                except (DerivationError, L.NotApplicable, ValueError, TypeError) as exc:
                    stops.append(f"{move.label}: {_reason(exc, der.state)}")
                    continue
                key = self._key(child.state)
                if key in seen:
                    continue
                seen.add(key)
                successors += 1
                # weighted A*: steps so far + twice the obstacles left (greedier than A*, shorter paths
                # than pure greedy); the checks keep every branch sound
                h = self.estimate(child)
                heapq.heappush(frontier, (len(child.steps) + 2 * h, h, next(counter), child,
                                          (*path, move)))
            if not successors:
                why = "\n      ".join(stops) if stops else "no lemma applies"
                self.report.append((_path(path), f"dead end at {Derivation._describe(der.state)}:\n      {why}"))
        lines = [(f"derive: no derivation of {self.name} reached a solution in {self.problem.variable} using only "
                  f"{sorted(map(str, self.available))} ({self.expanded} states expanded). "
                  f"Where the {min(6, len(self.report))} last of {len(self.report)} branches stopped:")]
        for p, why in self.report[-6:]:
            lines.append(f"  after [{p}]: {why}")
        lines += [f"  note: {note}" for note in sorted(self.notes)]
        raise SearchFailed("\n".join(lines), self.report)

    @staticmethod
    def _key(state):
        return (type(state).__name__, str(getattr(state, "variable", "")), tuple(srepr(p) for p in _parts(state)))


def _reason(exc, state, width: int = 140) -> str:
    """Why a move failed: the first line of the message after the state it restates, shortened."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    described = Derivation._describe(state)
    if described in text:
        text = text.split(described, 1)[1].lstrip(": ") or text
    return text if len(text) <= width else text[:width - 1] + "…"


def _path(path) -> str:
    return " → ".join(m.label for m in path) if path else "start"


def _solve(der: Derivation):
    return der.solve()  # the engine picks the norm family's solve lemma and certifies it by duality


def invariance_lemmas():
    """The rewrites without parameters that simplify a norm or an inner product."""
    return (L.ORTHONORMAL_INVARIANCE, L.TRANSPOSITION, *norms.NORM_LEMMAS)


def derive(problem: Problem, context: Context, *, name: str = "derived", title: str = "Derived update",
           statement: str = "", available: Iterable[Basic] | None = None, gradients: dict | None = None,
           max_expansions: int = 400) -> Derivation:
    """A checked derivation of ``problem`` found by best-first search over the lemmas.

    Args:
        problem: ``min ⟨G, L(X)⟩ s.t. ‖L'(X)‖ ≤ β`` in the matrix variable ``problem.variable``.
        context: check sizes and the definitions of the factor gradients (``G_Q = G_M W_K``).
        name, title, statement: how the derivation is named in reports and emitted modules.
        available: symbols the result may contain (default: the problem's symbols and the defined
            factor gradients, without the symbols those are defined from).
        gradients: the chain-rule definitions to name (default: ``context.definitions``).
        max_expansions: states expanded before giving up.

    Returns:
        a :class:`~derivations.engine.derivation.Derivation` whose every step is checked, with
        ``search_stats`` (states expanded, seconds spent searching and replaying with every check,
        the path of lemmas).

    Raises:
        SearchFailed: no branch reached the goal; the message lists where each branch stopped.
    """
    return Searcher(problem, context, name=name, title=title, statement=statement, available=available,
                    gradients=gradients, max_expansions=max_expansions).run()
