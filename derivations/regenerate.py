"""Regenerate and check the emitted JAX and PyTorch modules that the products ship in ``numerics/emitted/``.

``python -m derivations.regenerate --regenerate`` writes ``python -m derivations.<rule> --emit jax``
(default schedule and msign) as ``<rule>.py`` and, where PyTorch is installed, ``--emit torch`` as
``<rule>_torch.py`` for every registered rule module that emits functions; ``--check`` exits 1 when a
shipped copy differs from a fresh emission, is missing, or belongs to no rule module. Without PyTorch the
PyTorch copies are left as they are and not checked (the output says so). The rules come from
:mod:`derivations.registry`; nothing here lists them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from derivations import registry
from derivations.cli import TranslationFailed, check_translation, emit_gate, render, torch_installed, verified_functions
from derivations.engine.derivation import UncheckedDerivation
from derivations.vocabulary.interpret import MissingRule
from foundation.commandline import OneLineParser, UsageError, progress, stdout_closed, usage_error, write_result

#: where the shipped copies live (the generated package :mod:`numerics.emitted`)
SHIPPED_DIR = registry.PACKAGE_DIR.parent / "numerics" / "emitted"


#: the file name of a shipped copy after its rule's name, by target
SUFFIXES = {"jax": "", "torch": "_torch"}


def targets() -> tuple[str, ...]:
    """The targets shipped here that this process can emit: JAX, and PyTorch where it is installed."""
    return ("jax", "torch") if torch_installed() else ("jax",)


def path_of(rule: str, directory: Path | None = None, target: str = "jax") -> Path:
    """Where the shipped copy of ``rule``'s emitted ``target`` module lives."""
    return (directory or SHIPPED_DIR) / f"{rule}{SUFFIXES[target]}.py"


def emit(rule: str, target: str = "jax") -> str | None:
    """A fresh emission of ``rule`` (what ``--emit target`` prints), or None when it emits no function."""
    module = registry.rule_module(rule)
    try:
        return render(module, target) if verified_functions(module) else None
    except MissingRule as exc:  # a node without a printing rule or a homogeneity degree
        raise Refused(f"{rule}: {exc}") from None


def shipped(directory: Path | None = None) -> tuple[str, ...]:
    """The rules with a shipped copy of any target (files of the generated package, ``__init__`` excluded)."""
    stems = [p.stem for p in (directory or SHIPPED_DIR).glob("*.py") if not p.stem.startswith("_")]
    return tuple(sorted({stem.removesuffix(SUFFIXES["torch"]) for stem in stems}))


def stale(rules: tuple[str, ...] | None = None, directory: Path | None = None, quiet: bool = True) -> list[str]:
    """The rules whose shipped copy is missing, differs from a fresh emission, or has no rule module (``quiet``
    false: a progress bar on a terminal's stderr, one step per rule)."""
    rules = registry.rule_names() if rules is None else rules
    out = []
    for rule in progress(rules, desc="emitting", unit="rule", quiet=quiet):
        for target in targets():
            text, path = emit(rule, target), path_of(rule, directory, target)
            if text is None:
                continue
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                out.append(rule + SUFFIXES[target])
    out += [r for r in shipped(directory) if r not in registry.rule_names()]
    return out


class Refused(Exception):
    """A rule's emission is refused: a lemma its derivations cite fails its self-check, a derivation is not what
    its checked steps give, or an emitted function disagrees with its checked formula (translation validation)."""


def regenerate(rules: tuple[str, ...] | None = None, directory: Path | None = None, quiet: bool = True) -> list[str]:
    """Write a fresh emission of every rule that emits functions; returns the rules whose file changed (``quiet``
    false: a progress bar on a terminal's stderr, one step per rule).

    Nothing is written when a lemma cited by any of them fails its self-check, or an emitted function does not
    compute its checked formula (:func:`~derivations.cli.check_translation`) (:class:`Refused`)."""
    rules = registry.rule_names() if rules is None else rules
    fresh = {}
    for rule in progress(rules, desc="emitting", unit="rule", quiet=quiet):
        module = registry.rule_module(rule)
        try:
            if not verified_functions(module):
                continue
        except UncheckedDerivation as exc:
            raise Refused(f"{rule}: {exc}") from None
        refused = emit_gate(module)
        if refused:
            raise Refused(f"{rule}: {refused[0]}")
        try:
            for target in targets():
                text = fresh[(rule, target)] = render(module, target)
                check_translation(module, target, text)
        except TranslationFailed as exc:
            raise Refused(str(exc)) from None
        except MissingRule as exc:  # a node without a printing rule or a homogeneity degree
            raise Refused(f"{rule}: {exc}") from None
    changed = []
    for (rule, target), text in fresh.items():
        path = path_of(rule, directory, target)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(rule + SUFFIXES[target])
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python -m derivations.regenerate --regenerate|--check``; returns the exit status (1: stale, 2: bad input)."""
    prog = "derivations.regenerate"
    if stdout_closed(prog):
        return 2
    p = OneLineParser(prog="python -m derivations.regenerate",
                      description="Regenerate or check the emitted JAX and PyTorch modules shipped in "
                                  "numerics/emitted/.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--regenerate", action="store_true", help="write a fresh emission of every rule")
    what.add_argument("--check", action="store_true", help="exit 1 if a shipped copy differs from a fresh emission")
    p.add_argument("--rule", action="append", choices=registry.rule_names(),
                   help="only this rule (repeatable; default: all)")
    try:
        args = p.parse_args(argv)
    except UsageError as exc:
        return usage_error(prog, exc)
    rules = tuple(args.rule) if args.rule else registry.rule_names()
    unchecked = "" if torch_installed() else " (PyTorch copies not checked: PyTorch is not installed)"
    if args.regenerate:
        try:
            changed = regenerate(rules, quiet=False)
        except Refused as exc:
            sys.stderr.write(f"{prog}: not regenerated: {exc}\n")
            return 1
        return write_result(prog, f"regenerated {len(rules)} rule modules; changed: {', '.join(changed) or 'none'}"
                                  f"{unchecked}\n", 0)
    try:
        bad = stale(rules, quiet=False)
    except Refused as exc:
        sys.stderr.write(f"{prog}: not checked: {exc}\n")
        return 1
    if bad:
        return write_result(prog, f"stale emitted modules: {', '.join(bad)}; run python -m derivations.regenerate "
                                  "--regenerate\n", 1)
    return write_result(prog, f"all emitted modules of {len(rules)} rule modules are fresh{unchecked}\n", 0)


if __name__ == "__main__":
    sys.exit(main())
