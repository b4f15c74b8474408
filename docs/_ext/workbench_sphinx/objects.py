"""The live objects the pages are printed from: rule modules, their derivations, lemmas, schedules.

Nothing here is cached on disk. Each rule module's derivations are built once per build;
building a derivation runs the float64 checks the engine records for every step, and the docs
then run each step's mpmath check at 50 digits (a few seconds for every rule), so a step whose
check fails stops the build (the message names the derivation).

Building the derivations is most of the build's time, and it is pure Python (SymPy, mpmath), so a
thread of the Sphinx process would hold the interpreter lock the pages need. From the start of the
read phase (:func:`preload`) the rule modules are built in ``workbench_derivation_workers`` worker
processes (default 2, one per core of the machine the docs are built on; 0 builds them in the Sphinx process;
``spawn``: a fresh interpreter, no forked JAX runtime) and sent back pickled (``cloudpickle``: the
lemmas carry lambdas), while the pages that do not show derivations are read first
(:func:`read_order`). A page that needs the catalogue waits for it; a derivation that fails in a
worker stops the build with the worker's message, naming the derivation.
"""

from __future__ import annotations

import importlib
import multiprocessing
import pickle
import re
import threading
import traceback
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import cache

import cloudpickle
from sphinx.errors import ExtensionError

from derivations import Derivation, registry
from derivations import lemmas as lemma_module

RULE_PACKAGE = "derivations"


class UnknownName(ExtensionError):
    """A directive names an object that does not exist; the message lists the known names."""


class FailedDerivation(ExtensionError):
    """A derivation could not be built, or one of its recorded checks did not pass."""


def unknown(kind: str, name: str, known) -> UnknownName:
    return UnknownName(f"unknown {kind} {name!r}; known {kind}s: {', '.join(sorted(known))}")


@dataclass
class RuleEntry:
    """One rule module: its command-line description, derivations and emitted functions."""

    module: object
    rule: object  # derivations.engine.rule.RuleModule
    derivations: list
    functions: list

    @property
    def name(self) -> str:
        return self.rule.name


def _rule_module_names() -> list[str]:
    """The registered rule modules (:func:`derivations.registry.rule_names`, sorted)."""
    return list(registry.rule_names())


def _failing_derivation_name(tb) -> str | None:
    """The name of the derivation whose method raised (read off the traceback's frames)."""
    name = None
    for frame, _ in traceback.walk_tb(tb):
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Derivation):
            name = candidate.name
    return name


def _check_recorded(der, module_name: str):
    problems = der.integrity()  # the steps as they passed their checks, and the state their result
    if problems:
        raise FailedDerivation(f"{problems[0]} (module {module_name})")
    for step in der.steps:
        check = step.check
        if check is None:
            raise FailedDerivation(f"derivation {der.name} (module {module_name}): step {step.index} "
                                   f"({step.kind}) has no recorded check")
        if getattr(check, "passed", True) is False:
            raise FailedDerivation(f"derivation {der.name} (module {module_name}): step {step.index} "
                                   f"({step.kind}, lemma {step.lemma.number}) failed its check")


def load_rule(module_path: str) -> RuleEntry:
    """Import ``module_path``, build its derivations and emitted functions, verify their checks."""
    return _load_rule(module_path)


@cache
def _load_rule(module_path: str) -> RuleEntry:
    module = importlib.import_module(module_path)
    rule = module.rule_module()
    try:
        ders = list(rule.derivations())
        functions = list(rule.functions())
    except Exception as exc:  # a failing step check, a lemma that no longer applies, …
        which = _failing_derivation_name(exc.__traceback__)
        where = f"derivation {which}" if which else "a derivation"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FailedDerivation(f"{where} of module {module_path} could not be built: "
                               f"{type(exc).__name__}: {first}") from exc
    for der in ders:
        _check_recorded(der, module_path)
        with_mpmath(der, module_path)
    return RuleEntry(module, rule, ders, functions)


def with_mpmath(der, module_path: str):
    """Run every step's 50-digit check now (building a derivation runs only float64) and keep the
    recorded float64 evidence; a step that fails at 50 digits stops the build, naming it."""
    if any(step.check.mpmath_error is not None for step in der.steps) or not der.context.mpmath_dims:
        return
    recorded = [step.check for step in der.steps]
    try:
        fresh = der.check(trials=0, mp=True, seed=0)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise FailedDerivation(f"derivation {der.name} (module {module_path}) fails its 50-digit check: "
                               f"{first}") from exc
    for step, old, new in zip(der.steps, recorded, fresh, strict=True):
        step.check = replace(old, mpmath_error=new.mpmath_error)


class Catalogue:
    """Every rule module of a build, by short name, and every derivation, by its dotted name."""

    def __init__(self, module_paths: list[str]):
        self.module_paths = module_paths
        self._rules: dict[str, RuleEntry] | None = None
        self._lock = threading.Lock()  # one builder at a time
        self._pending: dict[str, Future] = {}
        self._pool: ProcessPoolExecutor | None = None

    def start_workers(self, workers: int) -> None:
        """Build every rule module in ``workers`` worker processes from now on (:func:`built_in_worker`)."""
        with self._lock:
            if self._rules is not None or self._pool is not None or workers < 1:
                return
            self._pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
            self._pending = {path: self._pool.submit(built_in_worker, path) for path in self.module_paths}

    def stop_workers(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _entry(self, path: str) -> RuleEntry:
        future = self._pending.pop(path, None)
        if future is None:
            return load_rule(path)
        outcome = pickle.loads(future.result())
        if outcome[0] == "failed":
            raise FailedDerivation(outcome[1])
        module = importlib.import_module(path)
        return RuleEntry(module, module.rule_module(), outcome[1], outcome[2])

    @property
    def rules(self) -> dict[str, RuleEntry]:
        with self._lock:
            if self._rules is None:
                rules = {}
                for path in self.module_paths:
                    entry = self._entry(path)
                    rules[entry.name] = entry
                self._rules = rules
                self.stop_workers()
        return self._rules

    def rule(self, name: str) -> RuleEntry:
        if name not in self.rules:
            raise unknown("rule module", name, self.rules)
        return self.rules[name]

    @property
    def derivations(self) -> dict:
        """Derivation name → derivation (a derivation shared by two modules appears once)."""
        out = {}
        for entry in self.rules.values():
            for der in entry.derivations:
                out.setdefault(der.name, der)
        return out

    def derivation(self, name: str):
        ders = self.derivations
        if name not in ders:
            raise unknown("derivation", name, ders)
        return ders[name]

    def home(self, der) -> str:
        """The rule module a derivation belongs to (its name's prefix, else the first that lists it)."""
        prefix = der.name.split(".")[0]
        if prefix in self.rules:
            return prefix
        for entry in self.rules.values():
            if any(d.name == der.name for d in entry.derivations):
                return entry.name
        raise unknown("derivation", der.name, self.derivations)

    def lemmas(self) -> list:
        """Every lemma: the lemma module's list, then any other lemma a derivation applies; two lemmas that share a
        number (two headings "Lemma 1m" on the reference) stop the build, naming both."""
        seen = {}
        for lem in getattr(lemma_module, "ALL_LEMMAS", ()):
            seen.setdefault(lem.key, lem)
        for der in self.derivations.values():
            for lem in der.lemmas_used():
                seen.setdefault(lem.key, lem)
        clashes = lemma_module.duplicate_numbers(seen.values())
        if clashes:
            raise FailedDerivation("; ".join(clashes))
        return list(seen.values())

    def users(self, lemma) -> list:
        """Derivations that apply ``lemma``, in catalogue order."""
        return [der for der in self.derivations.values()
                if any(s.lemma.key == lemma.key for s in der.steps)]


def default_rule_modules() -> list[str]:
    return [f"{RULE_PACKAGE}.{name}" for name in _rule_module_names()]


_CATALOGUES: dict = {}


def catalogue(config) -> Catalogue:
    """The build's catalogue (``workbench_rule_modules``, default: every rule module found)."""
    paths = tuple(config.workbench_rule_modules or default_rule_modules())
    if paths not in _CATALOGUES:
        _CATALOGUES[paths] = Catalogue(list(paths))
    return _CATALOGUES[paths]


def built_in_worker(module_path: str) -> bytes:
    """In a worker process: :func:`load_rule` pickled, as ``("ok", derivations, functions)`` or
    ``("failed", message)``."""
    try:
        entry = load_rule(module_path)
    except FailedDerivation as exc:
        return cloudpickle.dumps(("failed", str(exc)))
    return cloudpickle.dumps(("ok", entry.derivations, entry.functions))


def preload(app, env, docnames, directives: dict) -> None:
    """``env-before-read-docs``: build the catalogue in worker processes while pages are read (``directives``:
    the extension's ``{name: class}``, for :func:`read_order`)."""
    if docnames:
        catalogue(app.config).start_workers(app.config.workbench_derivation_workers)
        read_order(env, docnames, directives)


def stop_workers(app, exception) -> None:
    """``build-finished``: no worker outlives the build (one is still running if the build failed early)."""
    for cat in _CATALOGUES.values():
        cat.stop_workers()


def _directive_pattern(names) -> re.Pattern:
    """A line that starts one of the directives ``names`` (never matches for none)."""
    return re.compile(r"^\.\. (" + "|".join(map(re.escape, sorted(names))) + r")::" if names else r"(?!)",
                      re.MULTILINE)


def read_order(env, docnames: list, directives: dict) -> None:
    """Reorder ``docnames`` in place: pages that run code and need no derivation first, then the other pages
    that need none, then the pages printed from the catalogue (the output does not depend on the order).

    ``directives`` (``{name: class}``) says which is which: a class with ``reads_catalogue`` prints from the
    catalogue (its page waits for it), one with ``runs_code`` runs code while its page is read (XLA
    compilations; a notebook's kernel too), which is time the catalogue's workers overlap.
    """
    reads = _directive_pattern([n for n, cls in directives.items() if getattr(cls, "reads_catalogue", False)])
    runs = _directive_pattern([n for n, cls in directives.items() if getattr(cls, "runs_code", False)])

    def key(item):
        position, docname = item
        path = env.doc2path(docname)
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        notebook = path.suffix == ".ipynb"
        return (bool(reads.search(text)), not (notebook or runs.search(text)), position)
    docnames[:] = [name for _, name in sorted(enumerate(docnames), key=key)]
