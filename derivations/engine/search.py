"""``derive(problem)``: find a checked derivation by best-first search over the applicable lemmas.

A node of the search is a :class:`~derivations.engine.derivation.Derivation` (every step already checked).
Its successors are drawn from the lemmas (:func:`search_lemmas`): every registered lemma says where it
applies (``Lemma.applies``: an ordered list of offers, each a step with its parameters read off the state),
and a researcher's own lemmas join them (``derive(..., lemmas=[...])``). The registered ones offer

* the partners that can be polar-substituted (matrices known to have full rank; Lemma 6a),
* the Gram roots that can be absorbed by a change of variables (either side; Lemma 4), and an invertible
  whitening beside the variable that the objective lacks, moved into it (an SPD power or a data matrix's Gram
  root; Lemma 4i), the restriction to the row space of a wide partner of full row rank (Lemma Rw), a scalar of
  known sign taken out of a norm (Lemma Hn),
* the isometry and transposition rewrites of every norm family whose norm allows them (Lemmas 2, T, 2u,
  Tn, and 2r for the RMS→RMS norm, with its aspect scale), the adjoint move onto the variable (Lemma 3),
  the polar factor written through its partner (Lemma 6b), the chain rule that names the available
  factor gradients (Lemma CR, any number of partners),

and the engine adds the solve step once the problem is ``min ⟨A, Z⟩ s.t. c‖Z‖ ≤ β`` for a known norm
family and a scale ``c > 0``, and the back-substitution of every change of variables.

A lemma that does not apply (a side condition not known to hold), a step whose numerical check fails and
a lemma whose own code raises all prune the branch. The goal is a solution in the original variable that
uses only the available symbols (the factor gradients, not the never-formed loss gradient ``G_M``); the
priority is ``steps so far + an estimate of the steps left`` (A*-style with an admissible-in-spirit count
of the obstacles still in the state: factors around the variable, unavailable symbols, polar factors,
pending substitutions). Every failure is a :class:`SearchFailed`: its first line says why the most
promising branch (fewest obstacles left) stopped, the next what to do there (:mod:`derivations.engine.diagnosis`),
then where the last branches stopped, each state printed simplified (``C_A C_A⁻¹`` cancelled).
"""

from __future__ import annotations

import heapq
import itertools
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
from sympy import Basic, MatMul, preorder_traversal, srepr
from sympy.matrices.expressions import MatrixSymbol, Transpose

from derivations import lemmas as L
from derivations.engine import norms
from derivations.engine.derivation import (
    Context,
    Derivation,
    DerivationError,
    Problem,
    Solution,
    StepCheckFailed,
)
from derivations.engine.diagnosis import diagnose
from derivations.engine.norms import unscaled
from derivations.vocabulary.algebra import rewrite_adjacent
from derivations.vocabulary.nodes import (
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    PolarFactor,
)


class SearchFailed(DerivationError):
    """No derivation reached the goal; the message lists what was tried and where each branch stopped, and, where the
    diagnosis finds it, what to do (``hint``: the nearest missing move and the lemma or docs page that provides it)."""

    def __init__(self, message: str, report: list, hint: str | None = None):
        super().__init__(message)
        self.report = report
        self.hint = hint  # the nearest missing move, where the diagnosis finds one (also in the message)


@dataclass
class Move:
    """One candidate step: a label for reports and a function that applies it to a derivation."""

    label: str
    run: Callable[..., Any] = field(repr=False)  # applied as run(derivation)
    key: str = ""  # the key of the lemma that offered it (empty: the solve step, the back-substitution)


def _fork(der: Derivation) -> Derivation:
    return der.fork()


def _matrices(expr):
    return {m for m in expr.atoms(MatrixSymbol)}


def _parts(state):
    return [p for p in state.parts() if hasattr(p, "atoms")]


def default_available(problem: Problem, context: Context) -> set:
    """Symbols a result may use: the problem's own, the defined factor gradients, minus what those
    definitions are defined *from* (the loss gradient of the product, never formed)."""
    symbols = set().union(*(p.free_symbols for p in (problem.objective, problem.constraint, problem.budget)))
    defined_from = (set().union(*(d.free_symbols for d in context.definitions.values())) if context.definitions
                    else set())
    partners = {s for s in defined_from if isinstance(s, FactMatrix) or not isinstance(s, MatrixSymbol)}  # and scalars
    return (symbols | set(context.definitions) | partners) - (defined_from - partners) - {problem.variable}


class Searcher:
    """Best-first search from a problem to a checked solution (see the module docstring)."""

    def __init__(self, problem: Problem, context: Context, *, name: str, title: str, statement: str = "",
                 available: Iterable[Basic] | None = None, max_expansions: int = 400, max_depth: int = 14,
                 gradients: dict | None = None, lemmas: Iterable[L.Lemma] = ()):
        self.problem, self.context = problem, context
        self.lemmas = search_lemmas(lemmas)
        self.best: tuple | None = None  # (rank, path, state, why) of the most promising branch that stopped
        self.best_state: Derivation | None = None  # its derivation, which the diagnosis reads (engine.diagnosis)
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
        for part in (unscaled(st).constraint, st.objective):
            for arg in part.args:
                if getattr(arg, "is_Matrix", False) and arg.has(z) and arg != z:
                    factors = arg.as_coeff_matrices()[1] if isinstance(arg, MatMul) else [arg]
                    h += max(1, len([f for f in factors if f not in (z, Transpose(z))]))
        return h + len(self._unavailable(st.objective, der)) + len(st.objective.atoms(PolarFactor))

    # ---- moves: drawn from the lemmas, each saying where it applies -------------------------
    def moves(self, der: Derivation) -> list[Move]:
        st = der.state
        if isinstance(st, Solution):
            return self._back_substitution_moves(der)
        st = cast(Problem, st)  # a search starts from a Problem: never a Claim
        view = L.SearchView(der, self.gradients, self.notes)
        out = self._solve_moves(st)
        for lemma in self.lemmas:
            applies = lemma.applies or _USER_DEFAULT
            try:
                offers = list(applies.offers(view))
            except Exception as exc:  # noqa: BLE001 (a researcher's offers function: reported, never raised)
                self.notes.add(f"Lemma {lemma.number} ({lemma.title}): its applies.offers failed: "
                               f"{type(exc).__name__}: {exc}")
                continue
            out += [Move(offer.label or f"Lemma {lemma.number} ({lemma.title})", _runner(lemma, offer), lemma.key)
                    for offer in offers]
        return out

    def _back_substitution_moves(self, der: Derivation) -> list[Move]:
        """A solution in a substituted variable: back to the original one."""
        if der._substitutions and cast(Solution, der.state).variable != self.problem.variable:
            return [Move("back-substitute", lambda d: d.back_substitute())]
        return []

    @staticmethod
    def _solve_moves(st) -> list[Move]:
        """The solve step, once the problem is ``min ⟨A, Z⟩ s.t. c‖Z‖ ≤ β`` for a known norm family (``c > 0``)."""
        ball = unscaled(st)
        try:
            norms.ball_parts(ball)
        except norms.NotABall as exc:  # reported where the branch stops: why it cannot be solved yet
            return [Move("solve", lambda d, exc=exc: _raise(exc))]
        family = norms.family_of(ball.constraint)
        return [Move(f"solve ({family.key if family else '?'} ball)", _solve)]

    # ---- the search -----------------------------------------------------------------------
    def run(self) -> Derivation:
        """Search with a light check (one size, float64, no symbolic step), then replay the path found
        with every check of the context: the returned derivation is checked like a scripted one."""
        light = replace(self.context, check_dims=self.context.check_dims[:1], symbolic_dims={}, mpmath_dims={})
        t0 = time.perf_counter()
        found = self._search(self._start(light))
        t1 = time.perf_counter()
        der = self._start(self.context)
        for i, move in enumerate(found, 1):
            try:
                move.run(der)
            except Exception as exc:  # noqa: BLE001 (the full checks of the replay: a SearchFailed, never bare)
                raise SearchFailed(f"derive: the path found for {self.name} failed at replay with every check, "
                                   f"step {i} ({move.label}): {_reason(exc, der.state)}\n{exc}",
                                   [(_path(found[:i]), str(exc))]) from exc
        der.search_stats = {"expanded": self.expanded, "search_seconds": t1 - t0,
                            "replay_seconds": time.perf_counter() - t1, "path": [m.label for m in found]}
        return der

    def _start(self, context: Context) -> Derivation:
        try:
            return Derivation(self.name, self.title, self.problem, context, statement=self.statement)
        except DerivationError as exc:
            raise SearchFailed(f"derive: cannot start {self.name}: {exc}", []) from None

    def _search(self, start: Derivation) -> list:
        counter = itertools.count()
        frontier: list[tuple[int, int, int, Derivation, tuple]] = [(self.estimate(start), 0, next(counter), start, ())]
        seen = {self._key(start.state)}
        while frontier:
            *_, der, path = heapq.heappop(frontier)
            if self.is_goal(der):
                return list(path)
            if self.expanded >= self.max_expansions:
                self._stopped(der, path, "not expanded: the expansion budget is spent")
                break
            if len(path) >= self.max_depth:
                self._stopped(der, path, f"depth limit {self.max_depth}")
                continue
            self.expanded += 1
            children, stops = self._expand(der, seen)
            for move, child in children:
                # weighted A*: steps so far + twice the obstacles left (greedier than A*, shorter paths
                # than pure greedy); the checks keep every branch sound
                h = self.estimate(child)
                heapq.heappush(frontier, (len(child.steps) + 2 * h, h, next(counter), child, (*path, move)))
            if not children:
                self._stopped(der, path, "dead end", stops)
        hint = self.hint()  # diagnosed once, for the message and the exception
        raise SearchFailed(self._failure_message(hint), self.report, hint)

    def _expand(self, der: Derivation, seen: set) -> tuple[list, list]:
        """``([(move, child)], [why each other move stopped])``: the new states one move away."""
        children, stops = [], []
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
            except Exception as exc:  # noqa: BLE001 (a lemma's own code failed: the branch stops, the search goes on)
                stops.append(f"{move.label}: {type(exc).__name__}: {_reason(exc, der.state)}")
                continue
            key = self._key(child.state)
            if key not in seen:
                seen.add(key)
                children.append((move, child))
        return children, stops

    def _stopped(self, der: Derivation, path: tuple, what: str, stops: list | None = None) -> None:
        """Record where a branch stopped (the state, and the reasons, shown simplified), and keep the most
        promising one: fewest obstacles left, then the deepest."""
        shown = _display_map(der.state)
        state = _shown(Derivation._describe(der.state), shown)
        if stops is None:
            self.report.append((_path(path), f"{what} at {state}"))
            why = what
        else:
            stops = [_shown(s, shown) for s in stops]
            listed = "\n      ".join(stops) if stops else "no lemma applies"
            self.report.append((_path(path), f"{what} at {state}:\n      {listed}"))
            why = _main_reason(stops)
        rank = (self.estimate(der), -len(path))
        if self.best is None or rank < self.best[0]:
            self.best = (rank, _path(path), state, why)
            self.best_state = der

    def _failure_message(self, hint: str | None) -> str:
        """First line: why the most promising branch stopped; then what to do (``hint``), the last branches and the
        notes."""
        head = f"derive: no derivation of {self.name} found"
        if self.best is not None:
            (h, _), path, state, why = self.best
            head += (f": the most promising branch (after [{path}], {h} obstacles left) stopped at {state}: "
                     f"{why}")
        lines = [head, *([f"  what to do: {hint}"] if hint else [])]
        lines += [(f"  searched for a solution in {self.problem.variable} using only "
                        f"{sorted(map(str, self.available))} ({self.expanded} states expanded). "
                        f"Where the {min(6, len(self.report))} last of {len(self.report)} branches stopped:")]
        for p, why in self.report[-6:]:
            lines.append(f"  after [{p}]: {why}")
        lines += [f"  note: {note}" for note in sorted(self.notes)]
        return "\n".join(lines)

    def hint(self) -> str | None:
        """The nearest missing move from where the most promising branch stopped (:func:`diagnose`)."""
        if self.best_state is None:
            return None
        der = self.best_state
        try:
            offered = {move.key for move in self.moves(der)} if isinstance(der.state, Problem) else set()
            return diagnose(der.state, offered, self.available, self.gradients)
        except Exception:  # noqa: BLE001 (a hint is advice: a failure to find one never hides the search's report)
            return None

    @staticmethod
    def _key(state):
        return (type(state).__name__, str(getattr(state, "variable", "")), tuple(srepr(p) for p in _parts(state)))


def _main_reason(stops: list) -> str:
    """The stop that says most: a move pruned by its check, else one that failed for another reason than
    finding nothing to rewrite, else the first; with how many other moves were tried."""
    if not stops:
        return "no lemma applies"
    checked = [s for s in stops if "pruned by its check" in s]
    failed = [s for s in stops if not re.search(r": (no |nothing)", s)]
    main = (checked or failed or stops)[0]
    return main + (f" ({len(stops) - 1} other moves stopped too, listed below)" if len(stops) > 1 else "")


def cancel_roots(expr: Basic) -> Basic:
    """``expr`` with every adjacent ``C C⁻¹`` and ``C⁻¹ C`` of one Gram root cancelled (for reports only: a
    derivation keeps its steps as taken)."""
    for g in sorted(expr.atoms(GramSqrt), key=str):
        if type(g) is GramSqrt:
            inv = GramInvSqrt(*g.args)
            expr = rewrite_adjacent(expr, [g, inv], [])[0]
            expr = rewrite_adjacent(expr, [inv, g], [])[0]
    return expr


def _display_map(state) -> dict:
    """``{text of a product: text of it simplified}`` for every product in ``state`` that :func:`cancel_roots`
    changes, longest first (so a reason that quotes a part of the state is simplified too)."""
    out = {}
    for part in _parts(state):
        for sub in preorder_traversal(part):
            if isinstance(sub, MatMul) and sub.atoms(GramInvSqrt):
                new = cancel_roots(sub)
                if new != sub:
                    out[str(sub)] = str(new)
    return dict(sorted(out.items(), key=lambda kv: -len(kv[0])))


def _shown(text: str, shown: dict) -> str:
    for old, new in shown.items():
        text = text.replace(old, new)
    return text


def _reason(exc, state, width: int = 140) -> str:
    """Why a move failed: the first line of the message after the state it restates, shortened."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    described = Derivation._describe(state)
    if described in text:
        text = text.split(described, 1)[1].lstrip(": ") or text
    if isinstance(exc, StepCheckFailed) and "sub-check '" in text:  # the move's label already names step and lemma
        text = text[text.index("sub-check '"):]
    return text if len(text) <= width else text[:width - 1] + "…"


def _path(path) -> str:
    return " → ".join(m.label for m in path) if path else "start"


def _raise(exc: Exception):
    raise exc


def _solve(der: Derivation):
    return der.solve()  # the engine picks the norm family's solve lemma and certifies it by duality


def _runner(lemma: L.Lemma, offer: L.Offer) -> Callable[[Derivation], Any]:
    """The step an offer stands for: ``der.apply(lemma, **params)``, or the derivation method it names."""
    if offer.method == "apply":
        return lambda d: d.apply(lemma, **offer.params)
    if offer.method not in _STEP_METHODS:
        raise SearchFailed(f"derive: lemma {lemma.number} ({lemma.title}) offers a step by {offer.method!r}; "
                           f"known: {sorted(_STEP_METHODS)}", [])
    return lambda d: getattr(d, offer.method)(**offer.params)


#: the derivation methods an offer may name besides ``apply`` (they record their own lemma)
_STEP_METHODS = frozenset({"change_variables"})
#: where a researcher's lemma without ``applies`` is tried: on every state, after the registered lemmas
_USER_DEFAULT = L.Applies(L.everywhere, order=100)


def search_lemmas(extra: Iterable[L.Lemma] = ()) -> list[L.Lemma]:
    """The lemmas ``derive()`` draws its moves from, in the order it tries them.

    Every registered lemma that says where it applies (``Lemma.applies``): the families of
    :mod:`derivations.lemmas`, looked up by name when the search starts (a lemma replaced there takes
    effect, as tests plant mistakes), and the norm families' invariance lemmas; then ``extra``, a
    researcher's lemmas (one with the key of a registered lemma replaces it). Sorted by
    ``applies.order`` (a lemma without ``applies`` counts as 100), ties in that order.
    """
    live: dict[str, L.Lemma] = {}
    for lemma in (*(v for v in vars(L).values() if isinstance(v, L.Lemma)), *L.ALL_LEMMAS, *norms.NORM_LEMMAS):
        live.setdefault(lemma.key, lemma)
    chosen = {k: v for k, v in live.items() if v.applies is not None}
    for lemma in extra:
        chosen.pop(lemma.key, None)
        chosen[lemma.key] = lemma
    ranked = sorted(enumerate(chosen.values()), key=lambda iv: ((iv[1].applies or _USER_DEFAULT).order, iv[0]))
    return [lemma for _, lemma in ranked]


def _checked_lemmas(lemmas) -> list[L.Lemma]:
    """A researcher's lemmas: each a :class:`Lemma` whose self-check (when it states one) passes."""
    if lemmas is None:
        return []
    if isinstance(lemmas, L.Lemma) or not isinstance(lemmas, Iterable):
        raise SearchFailed(f"derive: lemmas= takes a list of Lemma objects, got {lemmas!r}", [])
    out = list(lemmas)
    for lemma in out:
        if not isinstance(lemma, L.Lemma):
            raise SearchFailed(f"derive: lemmas= takes Lemma objects, got {lemma!r} ({type(lemma).__name__})", [])
        if lemma.identities is None and lemma.check is None:
            continue  # no statement to check: its steps are still checked like every step
        result = lemma.self_check(np.random.default_rng(0))
        if not result.passed:
            raise SearchFailed(f"derive: lemma {lemma.number} ({lemma.title}) fails its self-check, so it cannot "
                               f"join the search: {result.failures[0]}", [])
    return out


def derive(problem: Problem, context: Context, *, name: str = "derived", title: str = "Derived update",
           statement: str = "", available: Iterable[Basic] | None = None, gradients: dict | None = None,
           max_expansions: int = 400, lemmas: Iterable[L.Lemma] | None = None) -> Derivation:
    """A checked derivation of ``problem`` found by best-first search over the lemmas.

    Args:
        problem: ``min ⟨G, L(X)⟩ s.t. ‖L'(X)‖ ≤ β`` in the matrix variable ``problem.variable``.
        context: check sizes and the definitions of the factor gradients (``G_Q = G_M W_K``, or with
            any number of partners, ``G_W = Aᵀ G_M B`` for the middle factor of ``A W Bᵀ``).
        name, title, statement: how the derivation is named in reports and emitted modules.
        available: symbols the result may contain (default: the problem's symbols and the defined
            factor gradients, without the symbols those are defined from).
        gradients: the chain-rule definitions to name (default: ``context.definitions``).
        max_expansions: states expanded before giving up.
        lemmas: a researcher's own :class:`~derivations.lemmas.Lemma` objects, searched with the registered
            ones (:func:`search_lemmas`): tried where their ``applies`` says (without it, on every state),
            each step checked like every other, and cited in the steps that use them. A lemma that states a
            self-check must pass it first.

    Returns:
        a :class:`~derivations.engine.derivation.Derivation` whose every step is checked, with
        ``search_stats`` (states expanded, seconds spent searching and replaying with every check,
        the path of lemmas).

    Raises:
        SearchFailed: no branch reached the goal (the first line says why the most promising one stopped, the
            line ``what to do:`` the nearest missing move and the lemma or docs page that provides it, also in
            ``hint``; the message then lists where the last branches stopped), or the search could not start.
    """
    for arg, value, kind in (("problem", problem, Problem), ("context", context, Context)):
        if not isinstance(value, kind):
            raise SearchFailed(f"derive: {arg} must be a {kind.__name__}, got {value!r} ({type(value).__name__})", [])
    try:
        return Searcher(problem, context, name=name, title=title, statement=statement, available=available,
                        gradients=gradients, max_expansions=max_expansions, lemmas=_checked_lemmas(lemmas)).run()
    except SearchFailed:
        raise
    except Exception as exc:  # noqa: BLE001 (every failure of derive is a SearchFailed, never a bare exception)
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise SearchFailed(f"derive: the search for {name} stopped on {type(exc).__name__}: {first}", []) from exc
