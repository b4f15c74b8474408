"""``python -m derivations.hostile``: the hostile battery over every registered rule, its size or its findings.

Every public function of every rule's emitted modules (the shipped JAX module where there is one, else a fresh
``--emit jax``; a fresh ``--emit numpy``; where PyTorch is installed, the shipped PyTorch module) goes through
:mod:`derivations.printing.battery`, driven by nothing but the rule's declaration. Without ``--run`` it prints
the number of cases per rule and target; with ``--run`` it runs them (``--seed`` and ``--batch`` draw fresh
variants) and prints one line per finding: a traceback, a silent wrong result or a refusal of a representable
result. Exit status 1 when there is a finding, 2 for bad input.

Examples::

    python -m derivations.hostile                      # the battery's size
    python -m derivations.hostile --run --rule gqa --seed 3 --batch 3,2
"""

from __future__ import annotations

import importlib
import sys
from functools import cache

import jax

from derivations import registry
from derivations.cli import render, torch_installed
from derivations.printing.battery import pair_of, run, size
from derivations.printing.battery_cases import DTYPES
from derivations.printing.battery_subjects import Subject, subjects
from derivations.printing.validation import load_source
from derivations.regenerate import shipped
from foundation.commandline import OneLineParser, UsageError, int_option, usage_error, write_result

PROG = "derivations.hostile"


@cache
def modules(rule: str) -> dict:
    """``{"jax": module, "numpy": module, "torch": module}`` of ``rule``: the shipped JAX module, the NumPy one
    printed now and, where PyTorch is installed, the shipped PyTorch module (else each printed now)."""
    module = registry.rule_module(rule)
    jax_module = importlib.import_module(f"numerics.emitted.{rule}") if rule in shipped() \
        else load_source(render(module, "jax"), f"hostile_{rule}_jax")
    out = {"jax": jax_module, "numpy": load_source(render(module, "numpy"), f"hostile_{rule}_numpy")}
    if torch_installed():
        out["torch"] = importlib.import_module(f"numerics.emitted.{rule}_torch") if rule in shipped() \
            else load_source(render(module, "torch"), f"hostile_{rule}_torch")
    return out


def rule_subjects(rule: str) -> list[Subject]:
    """Every public function of ``rule``'s two emitted modules as a battery subject (none: no functions)."""
    module = registry.rule_module(rule)
    return subjects(module, modules(rule)) if module.functions() else []


def _batch(text: str) -> tuple[int, ...]:
    try:
        batch = tuple(int(b) for b in text.split(","))
    except ValueError:
        batch = ()
    if not batch or any(b < 1 or b > 16 for b in batch) or len(batch) > 3:
        raise UsageError(f"--batch {text!r}: one to three sizes from 1 to 16, separated by commas")
    return batch


def report(rules: list[str], run_it: bool, seed: int, batch: tuple, dtypes: list[str] | None) -> tuple[str, int]:
    """The text and the number of findings (0 without ``run_it``)."""
    lines, total, found = [], 0, 0
    for rule in rules:
        subs = rule_subjects(rule)
        for target in DTYPES:
            chosen = [(s, d) for s in subs if s.target == target for d in DTYPES[target] if not dtypes or d in dtypes]
            if not chosen:
                continue
            if not run_it:
                count = sum(size(s, d, batch) for s, d in chosen)
                total += count
                lines.append(f"{rule} {target}: {len({s.name for s, _ in chosen})} functions, {count} cases")
                continue
            findings = [f for s, d in chosen for f in run(s, d, seed, batch, pair_of(s, subs))]
            wrong = [f for f in findings if f.status != "ok"]
            total, found = total + len(findings), found + len(wrong)
            lines.append(f"{rule} {target}: {len(findings)} cases, {len(wrong)} findings")
            lines += ["  " + f.line() for f in wrong]
    lines.append(f"total: {total} cases" + (f", {found} findings" if run_it else ""))
    return "\n".join(lines) + "\n", found


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog=f"python -m {PROG}", description=__doc__.split("\n")[0])
    p.add_argument("--run", action="store_true", help="run the battery (default: print its size)")
    p.add_argument("--rule", action="append", choices=registry.rule_names(), help="only this rule (repeatable)")
    p.add_argument("--dtype", action="append", choices=DTYPES["jax"], help="only this dtype (repeatable)")
    p.add_argument("--seed", type=int_option(0, 2**32 - 1, "a seed"), default=0)
    p.add_argument("--batch", default="2", help="leading batch axes, e.g. 3,2 (default 2)")
    try:
        args = p.parse_args(argv)
        batch = _batch(args.batch)
    except UsageError as exc:
        return usage_error(PROG, exc)
    jax.config.update("jax_enable_x64", True)
    text, found = report(args.rule or list(registry.rule_names()), args.run, args.seed, batch, args.dtype)
    return write_result(PROG, text, 1 if found else 0)


if __name__ == "__main__":
    sys.exit(main())
