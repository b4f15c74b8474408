"""Newton–Schulz coefficient schedules in arbitrary precision.

* :class:`Schedule` and :class:`Recipe` — the one schedule type (literal or recipe, validated once), defined on the
  ground floor (:mod:`foundation.schedule`) and re-exported here;
* :mod:`coeffsearch.registry` — published schedules with sources; :func:`resolve` also reads JSON;
* :mod:`coeffsearch.provenance` — each shipped schedule's printed digits (compared exactly) and a stated property;
* :mod:`foundation.minimax` — greedy per-step minimax (Remez) with cushion and safety factor (ground floor);
* :mod:`coeffsearch.band` — one fixed polynomial into a band (global search, certified);
* :mod:`coeffsearch.certify` — outward-rounded interval certificates, re-checkable JSON;
* :mod:`coeffsearch.validate`, :mod:`coeffsearch.compare` — runs on real matrices, tables, plots.

Command line: ``python -m coeffsearch --help``.
"""

from coeffsearch.registry import DEFAULT, get, names, register, resolve
from foundation.schedule import Recipe, Schedule

__all__ = ["DEFAULT", "Recipe", "Schedule", "get", "names", "register", "resolve"]
