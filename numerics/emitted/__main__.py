"""``python -m numerics.emitted --regenerate | --check``: keep the shipped emitted modules fresh."""

from __future__ import annotations

import sys

from derivations.stdout import OneLineParser

from . import RULES, regenerate, stale


def main(argv=None) -> int:
    from derivations.stdout import stdout_closed  # >&-: one line and exit 2, not a silent run
    if stdout_closed("numerics.emitted"):
        return 2
    p = OneLineParser(prog="python -m numerics.emitted",
                description="Regenerate or check the emitted JAX modules shipped in numerics/emitted/.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--regenerate", action="store_true", help="write a fresh emission of every rule")
    what.add_argument("--check", action="store_true", help="exit 1 if a shipped copy differs from a fresh emission")
    p.add_argument("--rule", action="append", choices=RULES, help="only this rule (repeatable; default: all)")
    args = p.parse_args(argv)
    rules = tuple(args.rule) if args.rule else RULES
    if args.regenerate:
        changed = regenerate(rules)
        print(f"regenerated {len(rules)} modules; changed: {', '.join(changed) or 'none'}")
        return 0
    bad = stale(rules)
    if bad:
        print(f"stale emitted modules: {', '.join(bad)}; run python -m numerics.emitted --regenerate")
        return 1
    print(f"all {len(rules)} emitted modules are fresh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
