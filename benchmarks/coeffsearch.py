"""Benchmark: a full 8-step degree-5 greedy minimax schedule with its certificate, at 30 and 60 digits.

    python -m benchmarks.coeffsearch [--repeats N]

Polar Express's parameters (l = 1e-3, cushion 0.02407327424182761). The last line is the ratio of
the 60-digit time to the 30-digit time.
"""

from __future__ import annotations

import statistics
import sys
import time

from coeffsearch.certify import certify
from foundation.commandline import OneLineParser, UsageError, int_option, progress, stdout_closed, usage_error
from foundation.minimax import greedy_schedule

MAX_REPEATS = 100  # about 2 s per repeat


def one(dps: int) -> tuple:
    t0 = time.perf_counter()
    doc = greedy_schedule("1e-3", 8, degree=5, cushion="0.02407327424182761", dps=dps)
    t1 = time.perf_counter()
    certify(doc.steps, "1e-3", "1", prec=int(dps * 3.33) + 20)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def main(argv=None) -> int:
    if stdout_closed("benchmarks.coeffsearch"):
        return 2
    p = OneLineParser(prog="python -m benchmarks.coeffsearch", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int_option(1, MAX_REPEATS, "a count"), default=5,
                   help=f"timed runs per precision, 1 to {MAX_REPEATS} (default 5)")
    try:
        args = p.parse_args(argv)
    except UsageError as exc:
        return usage_error("benchmarks.coeffsearch", exc)
    print(f"{'digits':>6} {'minimax s':>10} {'certify s':>10} {'total s':>9}  (median of {args.repeats})")
    totals = {}
    for dps in (30, 60):
        runs = [one(dps) for _ in progress(range(args.repeats), desc=f"{dps} digits", unit="schedule")]
        m = statistics.median(r[0] for r in runs)
        c = statistics.median(r[1] for r in runs)
        totals[dps] = m + c
        print(f"{dps:>6} {m:>10.3f} {c:>10.3f} {m + c:>9.3f}")
    print(f"60-digit/30-digit time ratio: {totals[60] / totals[30]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
