"""Newton–Schulz coefficient schedules in arbitrary precision.

* :mod:`coeffsearch.schedule` — the one :class:`Schedule` type (literal or recipe, validated once);
* :mod:`coeffsearch.registry` — published schedules with sources; :func:`resolve` also reads JSON;
* :mod:`coeffsearch.minimax` — greedy per-step minimax (Remez) with cushion and safety factor;
* :mod:`coeffsearch.band` — one fixed polynomial into a band (global search, certified);
* :mod:`coeffsearch.certify` — outward-rounded interval certificates, re-checkable JSON;
* :mod:`coeffsearch.validate`, :mod:`coeffsearch.compare` — runs on real matrices, tables, plots.

Command line: ``python -m coeffsearch --help``.
"""

from coeffsearch.registry import DEFAULT, get, names, register, resolve
from coeffsearch.schedule import Recipe, Schedule

__all__ = ["DEFAULT", "Recipe", "Schedule", "get", "names", "register", "resolve"]
