"""The emitted JAX modules that the optimizer calls, shipped as generated files.

Each file here is exactly what ``python -m derivations.<rule> --emit jax`` prints (default
schedule and msign); nothing in it is written by hand. Regenerate all of them with

    python -m numerics.emitted --regenerate

and check that the shipped copies equal a fresh emission with ``python -m numerics.emitted
--check`` (``tests/test_optimizer.py`` runs the same comparison).
"""

from __future__ import annotations

import importlib
from pathlib import Path

#: rule modules of :mod:`derivations` whose JAX emission is shipped here
RULES = ("halfsplit", "joint", "hybrid_ov", "gqa", "gauge", "sylvester", "balance")

HERE = Path(__file__).resolve().parent


def path_of(rule: str) -> Path:
    """Where the shipped copy of ``rule``'s emitted module lives."""
    return HERE / f"{rule}.py"


def emit(rule: str) -> str:
    """A fresh emission of ``rule`` (the text ``python -m derivations.<rule> --emit jax`` prints)."""
    from derivations.cli import render
    module = importlib.import_module(f"derivations.{rule}")
    return render(module.rule_module(), "jax")


def stale(rules=RULES) -> list[str]:
    """The rules whose shipped copy is missing or differs from a fresh emission."""
    out = []
    for rule in rules:
        shipped = path_of(rule)
        if not shipped.exists() or shipped.read_text(encoding="utf-8") != emit(rule):
            out.append(rule)
    return out


def regenerate(rules=RULES) -> list[str]:
    """Write a fresh emission of every rule; returns the rules whose file changed."""
    changed = []
    for rule in rules:
        text = emit(rule)
        shipped = path_of(rule)
        if not shipped.exists() or shipped.read_text(encoding="utf-8") != text:
            shipped.write_text(text, encoding="utf-8")
            changed.append(rule)
    return changed
