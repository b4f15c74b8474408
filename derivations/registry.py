"""The one registry of rule modules, discovered: nothing in the project lists them by hand.

A *rule module* is a module at the top of :mod:`derivations` that defines ``rule_module()`` (what
``python -m derivations.<rule>`` runs: derivations, emitted functions, checks). A *derivation
source* defines ``derivations()`` (every rule module does; :mod:`derivations.classics` only that).
Both are found by reading the package's files, without importing them, so listing is cheap and a
broken module cannot hide the others. The command line, the cross-checker, the regeneration and
freshness check of emitted modules, the docs and the tests all ask here.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

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
