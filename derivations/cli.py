"""The command line shared by every rule module: ``python -m derivations.<rule> --emit … | --check``."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import coeffsearch
from coeffsearch.polynomial import MAX_SCHEDULE_STEPS
from derivations.commandline import STDOUT_CLOSED, OneLineParser, UsageError, usage_error, write_result
from derivations.engine.derivation import DerivationError, StepCheckFailed
from derivations.printing.codegen import UnsafeText, lemmas_used
from derivations.printing.jax_printer import emit_jax
from derivations.printing.latex import document_latex
from derivations.printing.numpy_printer import emit_numpy
from derivations.printing.text import derivation_text, lemma_text
from numerics.kernels.jax_msign import MSIGN_METHODS

EMIT_TARGETS = ("jax", "numpy", "latex", "text")
#: the most random instances per size that ``--check --trials`` runs (about 0.2 s each for halfsplit)
MAX_TRIALS = 1000


@dataclass
class RuleModule:
    """What a rule module hands to the command line."""

    name: str
    title: str
    derivations: Callable  # () -> list[Derivation]
    functions: Callable  # () -> list[EmittedFunction]
    scalars: dict
    measurements: Callable | None = None  # (rng) -> list[(label, value, limit)]: value <= limit, or limit None
    description: str = ""
    examples: list = field(default_factory=list)
    #: () -> (source, public names) appended to the emitted JAX module (layout adapters)
    jax_extra: Callable | None = None


def _parser(rule: RuleModule) -> OneLineParser:
    p = OneLineParser(prog=f"python -m derivations.{rule.name}", description=rule.description or rule.title,
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="examples:\n" + "\n".join(f"  {e}" for e in rule.examples) if rule.examples else None)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--emit", choices=EMIT_TARGETS, help="print the result as code or the derivation as text/LaTeX")
    what.add_argument("--check", action="store_true", help="re-check every step numerically and print a table")
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--msign", choices=MSIGN_METHODS, default="newton_schulz",
                   help="default msign method of the emitted JAX code (default: newton_schulz)")
    p.add_argument("--schedule", default=coeffsearch.DEFAULT, metavar="NAME|FILE",
                   help=f"default Newton–Schulz schedule of the emitted JAX code: one of "
                        f"{', '.join(coeffsearch.names())}, or a JSON file from python -m coeffsearch "
                        f"(default: {coeffsearch.DEFAULT}); a file's path and name use letters, digits, spaces "
                        f"and _ . / ~ , : + = @ - only, and it has at most "
                        f"{MAX_SCHEDULE_STEPS} steps")
    p.add_argument("--trials", type=int, default=5,
                   help=f"--check: random instances per size, 1 to {MAX_TRIALS} (default 5)")
    p.add_argument("--seed", type=int, default=0, help="--check: random seed (default 0)")
    p.add_argument("--json", action="store_true", help="--check: print the table as JSON")
    return p


def render(rule: RuleModule, target: str, msign: str = "newton_schulz",
           schedule_name: str = coeffsearch.DEFAULT) -> str:
    """The text ``--emit target`` prints."""
    command = f"python -m derivations.{rule.name} --emit {target}"
    functions = rule.functions()
    if target == "jax":
        if schedule_name != coeffsearch.DEFAULT:
            command += f" --schedule {shlex.quote(schedule_name)}"
        if msign != "newton_schulz":
            command += f" --msign {msign}"
        sched = coeffsearch.resolve(schedule_name)
        extra_source, extra_names = rule.jax_extra() if rule.jax_extra else ("", ())
        return emit_jax(rule.title, command, functions, sched, msign, rule.scalars, extra_source, extra_names)
    if target == "numpy":
        return emit_numpy(rule.title, command, functions, rule.scalars)
    ders = rule.derivations()
    lemmas = lemmas_used(functions) or cited_lemmas(ders)
    if target == "latex":
        return document_latex(rule.title, ders, lemmas)
    return "\n".join(derivation_text(d) for d in ders) + "\n" + lemma_text(lemmas)


def check_table(rule: RuleModule, trials: int, seed: int) -> dict:
    """Re-check every step and the self-check of every lemma the derivations use.

    Rows carry each step's worst error per sub-check, its symbolic verdict and, for a failing
    step, the failure (derivation, step, kind, lemma, sub-check, counterexample). ``ok`` is False
    when any step or lemma self-check failed.
    """
    rows = []
    ders = rule.derivations()
    for der in ders:
        der.check(trials=trials, seed=seed, strict=False)
        for s in der.steps:
            rows.append({"derivation": der.name, "step": s.index, "lemma": s.lemma.number,
                         "rule": s.lemma.title, "kind": s.kind,
                         "float64_error": s.check.float64_error, "mpmath_error": s.check.mpmath_error,
                         "symbolic": s.check.symbolic, "instances": s.check.trials,
                         "subchecks": s.check.subchecks, "status": "ok" if s.check.passed else "FAIL",
                         "failure": s.check.failure})
    rng = np.random.default_rng(seed)
    lemmas = self_check_rows(cited_lemmas(ders), rng)
    measurements = measurement_rows(rule.measurements(rng) if rule.measurements else [])
    ok = all(r["status"] == "ok" for r in rows + lemmas) and all(m["status"] != "FAIL" for m in measurements)
    return {"ok": ok, "steps": rows, "lemmas": lemmas, "measurements": measurements}


def cited_lemmas(ders: list) -> list:
    """Every lemma the derivations cite, once each, in the order first cited."""
    return list(dict.fromkeys(lem for der in ders for lem in der.lemmas_used()))


def self_check_rows(lemmas: list, rng: np.random.Generator) -> list[dict]:
    """One row per lemma: its self-check (statement and rewrite code on random instances)."""
    rows = []
    for lem in lemmas:
        result = lem.self_check(rng)
        rows.append({"lemma": lem.number, "rule": lem.title, "self_check_error": result.error,
                     "subchecks": result.errors, "status": "ok" if result.passed else "FAIL",
                     "failures": result.failures})
    return rows


def emit_gate(rule: RuleModule, seed: int = 0) -> list[str]:
    """Why ``--emit`` must refuse: the failing self-checks of the lemmas the rule's derivations cite
    (empty when every one passes). Code is emitted only from steps whose lemmas hold."""
    rows = self_check_rows(cited_lemmas(rule.derivations()), np.random.default_rng(seed))
    return [f for row in rows for f in row["failures"]]


def measurement_rows(measured: list[tuple]) -> list[dict]:
    """Gate each ``(label, value, limit)``: ``ok`` when ``value <= limit``, or ``low <= value <= high`` for a
    ``(low, high)`` limit (NaN fails either way); a ``None`` limit marks a
    number shown for context only (such as the Gram gap before balancing), never a result."""
    rows = []
    for label, value, limit in measured:
        value = float(value)
        low, high = limit if isinstance(limit, tuple) else (None, limit)
        inside = (low is None or value >= low) and (high is None or value <= high)  # NaN is never inside
        status = "reported" if limit is None else "ok" if inside else "FAIL"
        rows.append({"measurement": label, "value": value, "limit": limit, "status": status})
    return rows


def limit_text(limit: float | tuple) -> str:
    """``<= 1.0e-10`` or ``[1.0e+00, 1.0e+00]``: a measurement's limit as printed."""
    if isinstance(limit, tuple):
        return f"[{limit[0]:.6g}, {limit[1]:.6g}]"
    return f"<= {limit:.1e}"


def failures(table: dict) -> list[str]:
    """Every failure message of a check table (steps, lemma self-checks, then gated measurements)."""
    return [r["failure"] for r in table["steps"] if r["failure"]] + [
        f for r in table["lemmas"] for f in r["failures"]] + [
        f"measurement '{m['measurement']}' is {m['value']:.3e}, outside its limit {limit_text(m['limit'])}"
        for m in table["measurements"] if m["status"] == "FAIL"]


def format_table(table: dict) -> str:
    head = (f"{'derivation':<28} {'step':>4} {'lemma':>5} {'kind':<19} {'float64':>9} {'mpmath50':>9} "
            f"{'symbolic':<44} status")
    out = [head, "-" * len(head)]
    for r in table["steps"]:
        mp = "" if r["mpmath_error"] is None else f"{r['mpmath_error']:.1e}"
        symbolic = r["symbolic"].split(":")[0] if not r["symbolic"].startswith("verified") else r["symbolic"]
        out.append(f"{r['derivation']:<28} {r['step']:>4} {r['lemma']:>5} {r['kind']:<19} "
                   f"{r['float64_error']:>9.1e} {mp:>9} {symbolic:<44} {r['status']}")
    out += ["", f"{'lemma self-check (statement and rewrite code)':<56} {'max error':>10}  status"]
    for r in table["lemmas"]:
        out.append(f"{'Lemma ' + r['lemma'] + ': ' + r['rule']:<56} {r['self_check_error']:>10.1e}  {r['status']}")
    if table["measurements"]:
        out += ["", "measurements"]
        out += [f"  {m['measurement']}: {m['value']:.3e}"
                + (f" (limit {limit_text(m['limit'])}) {m['status']}" if m["limit"] is not None else " (context)")
                for m in table["measurements"]]
    n, k = len(table["steps"]), len(table["lemmas"])
    bad = sum(r["status"] != "ok" for r in table["steps"])
    bad_lemmas = sum(r["status"] != "ok" for r in table["lemmas"])
    out += ["", f"{n - bad}/{n} steps passed, {k - bad_lemmas}/{k} lemma self-checks passed"]
    return "\n".join(out) + "\n"


def main(rule: RuleModule, argv: list[str] | None = None) -> int:
    prog = f"derivations.{rule.name}"
    try:
        args = _parser(rule).parse_args(argv)
        try:
            coeffsearch.resolve(args.schedule)
        except KeyError as exc:
            raise UsageError(f"argument --schedule: {exc.args[0]}") from None
        except ValueError as exc:
            raise UsageError(f"argument --schedule: {exc}") from None
        if not 1 <= args.trials <= MAX_TRIALS:
            raise UsageError(f"argument --trials: must be >= 1 and <= {MAX_TRIALS}, got {args.trials}")
        if not 0 <= args.seed < 2**63:
            raise UsageError(f"argument --seed: must be an integer in [0, 2**63), got {args.seed}")
        if args.out and os.path.isdir(args.out):
            raise UsageError(f"argument --out: {args.out} is a directory")
        if args.out is None and sys.stdout is None:  # >&-: refuse before the work, not after it
            raise UsageError(STDOUT_CLOSED)
        if args.check:
            try:
                table = check_table(rule, args.trials, args.seed)
            except (StepCheckFailed, DerivationError) as exc:  # a derivation fails while it is built
                sys.stderr.write(f"{prog}: check failed: {exc}\n")
                return 1
            for message in failures(table):
                sys.stderr.write(f"{prog}: check failed: {message}\n")
            text = json.dumps(table, indent=2) + "\n" if args.json else format_table(table)
            return write_result(prog, text, 0 if table["ok"] else 1, args.out)
        try:
            if args.emit in ("jax", "numpy") and not rule.functions():
                raise UsageError(f"--emit {args.emit}: {rule.name} emits no functions (its derivations are checked "
                                 "with --check and printed with --emit text|latex)")
            refused = emit_gate(rule)
            if refused:
                sys.stderr.write(f"{prog}: not emitted: {refused[0]}"
                                 + (f" (and {len(refused) - 1} more)" if len(refused) > 1 else "") + "\n")
                return 1
            text = render(rule, args.emit, args.msign, args.schedule)
        except (StepCheckFailed, DerivationError) as exc:  # never emit what did not check
            sys.stderr.write(f"{prog}: not emitted: {exc}\n")
            return 1
        except UnsafeText as exc:  # text that would not stay inert in the emitted code
            raise UsageError(f"not emitted: {exc}") from None
        return write_result(prog, text, 0, args.out)
    except UsageError as exc:
        return usage_error(prog, exc)
