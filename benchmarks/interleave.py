"""Interleaved timing: every candidate runs once per round, so machine drift hits all of them alike.

On a shared 2-core machine the speed drifts by 10–40 % between minutes; a ratio of two medians
taken over the same rounds still moves with it. The ratio reported is the median over rounds of
``time(a) / time(b)`` within one round (a paired estimate).
"""

from __future__ import annotations

import statistics
import time

import jax

from foundation.commandline import progress

#: the ranges of the benchmarks' shared integer options (:func:`foundation.commandline.int_option`):
#: timed rounds, and OpenBLAS threads (0: the library default)
MAX_REPEATS = 1000
MAX_THREADS = 256


def time_once(fn) -> float:
    """Seconds for one call of ``fn()``, waiting for its device results."""
    t = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t


def interleaved(fns: dict, repeats: int, warmup: int = 2, quiet: bool = False) -> dict:
    """``{name: [seconds per round]}``: ``warmup`` untimed calls each (compilation), then ``repeats`` rounds
    (counted by a progress bar on a terminal's stderr, updated between rounds, outside the timed calls; none
    when ``quiet``: a command passes ``--json``)."""
    for fn in fns.values():
        for _ in range(warmup):
            jax.block_until_ready(fn())
    times = {name: [] for name in fns}
    for _ in progress(range(repeats), desc=f"timing {', '.join(fns)}", unit="round", quiet=quiet):
        for name, fn in fns.items():
            times[name].append(time_once(fn))
    return times


def paired_ratio(a: list, b: list) -> float:
    """Median over rounds of ``a[i] / b[i]``."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))
