"""Gram schedules searched jointly with their restart positions (``python -m coeffsearch.joint_search``).

A candidate is a base schedule of quintic steps (a registered one), its first ``T`` steps, a safety factor
``s`` (each step ``p(x/s)``: ``c_j / s^{2j+1}``; Zhang, Amsel, Chen, Dao 2026 use Polar Express with
``s = 1.05``, one point of this space) and a set of restart positions. For a dtype and a band (bound (b),
``max |x_T − 1|`` on ``[l, 1]``, at most ``D``) the fastest certified candidate is the one with the fewest
flops at aspect 1:4 (where the Gram form runs), then the fewest matrix products of the Gram routine
(:func:`gram_products`), then the smallest certified (b). For each (base, ``T``, ``s``) every number of
restarts is searched (:func:`coeffsearch.restarts.search`; a restart trades three small products for two
large ones).

Products of :func:`foundation.compute.gram_newton_schulz.gram_newton_schulz` for ``T`` steps of degree
``2k + 1`` with restarts ``K``: the Gram matrix (``n × m``, "large"), per step ``k − 1`` Horner products,
one ``Q`` product unless the step starts a segment, two products for ``R`` unless it ends one (all
``n × n``, "small"), per restart ``X ← Q X`` and its Gram matrix (large), and the final ``Q X`` (large).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from coeffsearch import registry, restarts
from coeffsearch.registry import safety_divided
from coeffsearch.restart_model import DEFAULT_GROWTH, DTYPES, Model, Uncertifiable, default_lower
from foundation.commandline import FileRefused, OneLineParser, UsageError, usage_error, write_text_file

#: the bases searched: registered quintic schedules (Polar Express's 8 steps gives every prefix length)
BASES = ("polar-express", "polar-express-5", "gram-polar-express", "muon", "cesista", "cans")
SAFETIES = ("1", "1.01", "1.02", "1.05")
LENGTHS = (4, 5, 6)
ASPECT = 4  # flops are compared at m = 4n (a 1:4 layer)
#: the band per dtype: the certified (b) of the Gram default it replaces (polar-express-5 after 2 in float32,
#: after 1 and 3 in float16; in bfloat16, where polar-express-5 certifies nothing, muon after 1, 2 and 3 on
#: [2^-7, 1]): "the same output band"
DEFAULT_BANDS = {"float32": 0.1414097, "float16": 0.58820098, "bfloat16": 0.86774078}


def gram_products(steps, positions) -> tuple:
    """``(large, small)`` matrix products of the Gram routine for ``steps`` with restarts at ``positions``."""
    count = len(steps)
    large, small = 1, 0
    for t, step in enumerate(steps):
        fresh = t == 0 or t in positions
        ends = t == count - 1 or (t + 1) in positions
        small += max(len(step) - 2, 0) + (0 if fresh else 1) + (0 if ends else 2)
        large += 2 if t in positions else 0
    return large + 1, small


def flops(steps, positions, aspect: int = ASPECT) -> int:
    """Flops in units of ``2n³`` for an ``n × aspect·n`` input (a large product is ``aspect`` units)."""
    large, small = gram_products(steps, positions)
    return large * aspect + small


@dataclass
class Found:
    """One certified candidate."""

    base: str
    length: int
    safety: str
    steps: tuple
    positions: tuple
    certificate: dict

    @property
    def products(self) -> int:
        return sum(gram_products(self.steps, self.positions))

    @property
    def deviation(self) -> float:
        return float(self.certificate["deviation"]["bound"])

    @property
    def key(self) -> tuple:
        return (flops(self.steps, self.positions), self.products, self.deviation)


def candidates(bases=BASES, safeties=SAFETIES, lengths=LENGTHS):
    """``(base, T, s, steps)`` for every base with at least ``T`` steps."""
    for base in bases:
        full = registry.get(base).steps
        for length in lengths:
            if length > len(full):
                continue
            for safety in safeties:
                steps = full[:length] if safety == "1" else safety_divided(full[:length], safety)
                yield base, length, safety, tuple(tuple(s) for s in steps)


def search(dtype: str, band: float, bases=BASES, safeties=SAFETIES, lengths=LENGTHS, log=None) -> tuple:
    """``(fastest Found within the band or None, every Found)`` for ``dtype``: per candidate and number of
    restarts ``K`` the certified positions with the smallest (b) (all sets of ``K`` positions cost alike)."""
    found = []
    model = Model(dtype, DEFAULT_GROWTH, default_lower(1e-3, dtype))
    for base, length, safety, steps in candidates(bases, safeties, lengths):
        for k in range(length):
            try:
                chosen, _ = restarts.search("", steps, model, restarts=k)
            except Uncertifiable:
                continue
            item = Found(base, length, safety, steps, chosen.positions, chosen.certificate)
            found.append(item)
            if log:
                log(f"{dtype} {base} T={length} s={safety}: restarts {chosen.positions}, (b) <= {item.deviation:.4g}, "
                    f"{item.products} products")
    within = [f for f in found if f.deviation <= band]
    return (min(within, key=lambda f: f.key) if within else None), found


def _is_factor(text: str) -> bool:
    try:
        return 1 <= float(text) <= 2
    except ValueError:
        return False


def main(argv=None) -> int:
    """Search each dtype and print (and with ``--certificates DIR`` write) the fastest certified schedule per dtype."""
    p = OneLineParser(prog="python -m coeffsearch.joint_search", description=__doc__.split("\n")[0])
    p.add_argument("--dtype", choices=(*DTYPES, "all"), default="all")
    p.add_argument("--band", type=float, help="largest certified (b) max |x_T - 1| (default: the replaced default's, "
                                              "DEFAULT_BANDS)")
    p.add_argument("--safeties", default=",".join(SAFETIES))
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    p.add_argument("--bases", default=",".join(BASES))
    p.add_argument("--certificates", metavar="DIR", help="write each dtype's chosen certificate as "
                                                          "DIR/searched-DTYPE.json (named searched-DTYPE)")
    try:
        a = p.parse_args(argv)
        bases = tuple(b for b in a.bases.split(",") if b)
        unknown = [b for b in bases if b not in registry.names()]
        if unknown:
            raise UsageError(f"argument --bases: unknown schedule {unknown[0]!r}")
        if a.band is not None and not 0 < a.band < 1:
            raise UsageError(f"argument --band: must be in (0, 1), got {a.band}")
        safeties = tuple(s for s in a.safeties.split(",") if s)
        if not all(_is_factor(s) for s in safeties):
            raise UsageError(f"argument --safeties: factors >= 1 separated by commas, got {a.safeties!r}")
        if not all(t.isdigit() and 1 <= int(t) <= 8 for t in a.lengths.split(",")):
            raise UsageError(f"argument --lengths: step counts 1 to 8 separated by commas, got {a.lengths!r}")
        lengths = tuple(int(t) for t in a.lengths.split(","))
    except UsageError as exc:
        return usage_error("coeffsearch.joint_search", exc)
    for dtype in (DTYPES if a.dtype == "all" else (a.dtype,)):
        band = a.band if a.band is not None else DEFAULT_BANDS[dtype]
        best, _ = search(dtype, band, bases, safeties, lengths, log=lambda line: print(line, file=sys.stderr))
        if best is None:
            print(f"{dtype}: nothing certified within the band {band}")
            continue
        print(f"{dtype}: {best.base}, {best.length} steps, safety {best.safety}, restarts after "
              f"{', '.join(map(str, best.positions)) or 'none'}: {best.products} products, (b) <= {best.deviation}")
        if a.certificates:
            cert = {**best.certificate, "name": f"searched-{dtype}"}
            path = os.path.join(a.certificates, f"searched-{dtype}.json")
            try:
                write_text_file(path, json.dumps(cert, indent=1) + "\n", "--certificates")
            except FileRefused as exc:
                return usage_error("coeffsearch.joint_search", exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
