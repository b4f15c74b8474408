"""The one registry of rule modules, discovered: nothing in the project lists them by hand.

A *rule module* is a module at the top of :mod:`derivations` that defines ``rule_module()`` (what
``python -m derivations.<rule>`` runs: derivations, emitted functions, checks). A *derivation
source* defines ``derivations()`` (every rule module does; :mod:`derivations.classics` only that).
Both are found by reading the package's files, without importing them, so listing is cheap and a
broken module cannot hide the others. The command line, the cross-checker, the regeneration and
freshness check of emitted modules, the docs and the tests all ask here, and here too for every lemma
the workbench can cite (:func:`every_lemma`).
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

from derivations import lemmas as L
from derivations.engine import norms

PACKAGE_DIR = Path(__file__).resolve().parent


def _defining(function: str, directory: Path = PACKAGE_DIR) -> tuple[str, ...]:
    pattern = re.compile(rf"^def {function}\(\)", re.MULTILINE)  # no parameters: not this module's helpers
    found = []
    for path in sorted(directory.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if pattern.search(text):
            found.append(path.stem)
    return tuple(found)


@cache
def rule_names() -> tuple[str, ...]:
    """Names of the rule modules (``halfsplit``, ``joint``, …), sorted.

    Examples:
      >>> from derivations.registry import rule_names
      >>> "halfsplit" in rule_names()
      True
    """
    return _defining("rule_module")


@cache
def derivation_sources() -> tuple[str, ...]:
    """Names of the modules that define ``derivations()``: the rule modules and the classics."""
    return _defining("derivations")


def load(name: str):
    """The module ``derivations.<name>`` of a registered rule or derivation source."""
    if name not in rule_names() and name not in derivation_sources():
        raise KeyError(f"no rule module {name!r}: known are {', '.join(rule_names())}")
    return importlib.import_module(f"derivations.{name}")


def rule_module(name: str):
    """The :class:`~derivations.engine.rule.RuleModule` of rule ``name``.

    Examples:
      >>> from derivations.registry import rule_module
      >>> rule_module("halfsplit").title
      'Half-split QK rule of Compositional Muon'
      >>> rule_module("nope")
      Traceback (most recent call last):
      ...
      KeyError: "no rule module 'nope': known are ..."
    """
    if name not in rule_names():
        raise KeyError(f"no rule module {name!r}: known are {', '.join(rule_names())}")
    return load(name).rule_module()


def every_lemma() -> list:
    """Every lemma the workbench can cite, each once: the lemma families' (:func:`derivations.lemmas.registered`),
    the norm families' invariances, the solve lemma of each norm family, and any lemma a module of this registry
    defines. Their numbers and keys are unique (:func:`derivations.lemmas.duplicate_numbers` finds none; a norm
    family's solve lemma with a number in use is refused when it is made).

    Examples:
      >>> from derivations import lemmas
      >>> from derivations.registry import every_lemma
      >>> found = every_lemma()
      >>> [lem.number for lem in found if lem.key.startswith("steepest_descent")]
      ['1f', '1n', '1m', '1r', '1c']
      >>> lemmas.duplicate_numbers(found)
      []
    """
    found = [*L.registered(), *norms.NORM_LEMMAS, *(norms.solve_lemma(f) for f in norms.families())]
    for name in derivation_sources():
        found += [v for v in vars(load(name)).values() if isinstance(v, L.Lemma)]
    out: list = []
    for lemma in found:
        if not any(lemma is seen for seen in out):
            out.append(lemma)
    return out
