"""``python -m derivations.crosscheck``: the command line of the cross-checker (a derivation and a
hand formula, an identity, a chain file, or ``--list``). Exit status 0 equal (a chain: every step holds),
1 different (a chain: a step fails or is refused), 2 bad input, 3 a chain not proven: no step fails, but one
was not established (a solution whose optimality, or a change of variables whose reach, was not checked)."""

from __future__ import annotations

import argparse
import json
import sys

from derivations.crosscheck import chain, checker, identities, rule_lookup
from derivations.crosscheck.inputs import CHAIN_MAX_BYTES, BadInput
from derivations.crosscheck.verdict import format_verdict
from derivations.parsing.formula_syntax import FormulaError
from foundation.commandline import OneLineParser, UsageError, progress, stdout_closed, usage_error, write_result


def _parser() -> OneLineParser:
    p = OneLineParser(
        prog="python -m derivations.crosscheck",
        description="Cross-check a hand-derived formula, an identity or a chain of steps.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python -m derivations.crosscheck halfsplit.query '(-eps/2)*msign(G_Q*C_K^-1)*C_K^-1'\n"
               "  python -m derivations.crosscheck halfsplit.query '-eps msign(G_Q C_K^{-1}) C_K^{-1}' --json\n"
               "  python -m derivations.crosscheck identity 'msign(W@A)' 'W@msign(A)' "
               "--assume 'W: orthonormal columns'\n"
               "  python -m derivations.crosscheck --chain derivation.md\n"
               "  python -m derivations.crosscheck --list\n"
               "exit status: 0 equal (--chain: every step holds), 1 different (--chain: a step fails or is "
               f"refused), 2 bad input,\n  {chain.EXIT_NOT_PROVEN} --chain: not proven (no step fails, but a step "
               "was not established: a solution's optimality\n  or whether a change of variables reaches every "
               "point was not checked)")
    p.add_argument("args", nargs="*", metavar="DERIVATION FORMULA | identity LHS RHS")
    p.add_argument("--chain", metavar="FILE", help="check every step of the display math in a Markdown/LaTeX file "
                                                   f"(a regular file of at most {CHAIN_MAX_BYTES:,} bytes)")
    p.add_argument("--assume", action="append", default=[], metavar="'NAME: FACT'",
                   help="a fact for identities and chains (orthonormal columns/rows, symmetric, spd, "
                        "full column/row rank, square, matrix, scalar, positive, RxC); repeatable. A new name "
                        "is a matrix when declared or used as one (transposed, in msign/inv/sqrtm/tr) or "
                        "capitalised (G_Q), else a scalar; the scalars are listed with the verdict")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (verdict, method, scale, diagnosis, counterexample; the "
                        "counterexample's relative_difference is ||candidate - derived||_F / ||derived||_F "
                        "on its instance: 1.0 for twice the derived result; with --list: the names)")
    p.add_argument("--list", action="store_true", help="list the derivation names")
    p.add_argument("--no-cache", action="store_true",
                   help="rebuild the derivation (or, with --list, all of them) instead of reading the cache "
                        "(~/.cache/optimizer-workbench: each entry carries the hash of the sources and a digest, "
                        "checked before use; a stale, foreign or damaged entry is rebuilt)")
    return p


def run(argv: list[str] | None = None) -> tuple[int, str]:
    """``(exit status, stdout text)``; raises :class:`UsageError` for a bad command line, :class:`BadInput`
    or :class:`FormulaError` for bad input."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # a formula may start with a minus sign ('-(eps/2)*msign(...)'): a leading space keeps argparse
    # from reading it as an option (the formula grammar ignores the space); only --long options and -h exist
    argv = [f" {a}" if a.startswith("-") and not a.startswith("--") and a != "-h" else a for a in argv]
    args = _parser().parse_args(argv)
    if args.list:
        with progress(desc="building derivations", quiet=args.json) as bar:
            names = sorted(rule_lookup.derivation_names(use_cache=not args.no_cache, progress=bar))
        return 0, json.dumps(names, indent=2) + "\n" if args.json else "\n".join(names) + "\n"
    if args.chain:
        if args.args:
            raise BadInput("--chain takes a file and no positional arguments")
        report = chain.check_chain_file(args.chain, identities.parse_assumptions(args.assume))
        return report.exit_status, (json.dumps(report.as_json(), indent=2) + "\n" if args.json
                                    else report.text())
    if args.args[:1] == ["identity"]:
        if len(args.args) != 3:
            raise BadInput("identity takes two formulas: identity LHS RHS")
        target, cand = identities.identity_target(args.args[1], args.args[2], identities.parse_assumptions(args.assume))
        with progress(desc="evaluating", quiet=args.json) as bar:
            verdict = checker.compare(target, cand, progress=bar)
        verdict.scalars = identities.scalar_names(target.namespace)
        what = "identity"
    else:
        if len(args.args) != 2:
            raise BadInput("give DERIVATION FORMULA, identity LHS RHS, or --chain FILE (see --help)")
        if args.assume:
            raise BadInput("--assume is for identities and chains; a derivation carries its own facts")
        with progress(desc="evaluating", quiet=args.json) as bar:
            verdict = checker.check_derivation(*args.args, use_cache=not args.no_cache, progress=bar)
        what = args.args[0]
    text = json.dumps(verdict.as_json(), indent=2) + "\n" if args.json else format_verdict(verdict, what)
    return (0 if verdict.verdict == "equal" else 1), text


def main(argv: list[str] | None = None) -> int:
    prog = "derivations.crosscheck"
    if stdout_closed(prog):  # >&-: one line and exit 2 before any work (and for --help)
        return 2
    try:
        status, text = run(argv)
    except (UsageError, BadInput, FormulaError) as exc:
        return usage_error(prog, " ".join(str(exc).split()))
    except RecursionError:
        return usage_error(prog, "input nested too deeply")
    return write_result(prog, text, status)
