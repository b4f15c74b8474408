"""Newton–Schulz coefficient schedules in arbitrary precision.

* :mod:`coeffsearch.schedule` — the one :class:`Schedule` type (literal or recipe, validated once);
* :mod:`coeffsearch.registry` — published schedules with sources; :func:`resolve` also reads JSON;
* :mod:`coeffsearch.provenance` — each shipped schedule's printed digits (compared exactly) and a stated property;
* :mod:`coeffsearch.minimax` — greedy per-step minimax (Remez) with cushion and safety factor;
* :mod:`coeffsearch.band` — one fixed polynomial into a band (global search, certified);
* :mod:`coeffsearch.certify` — outward-rounded interval certificates, re-checkable JSON;
* :mod:`coeffsearch.validate`, :mod:`coeffsearch.compare` — runs on real matrices, tables, plots.

Command line: ``python -m coeffsearch --help``.
"""

import importlib
from typing import Any

#: public name -> the module that defines it, loaded on first use: importing the layer-1 schedule type
#: (``coeffsearch.schedule``) runs this file, and must not pull in the layer-4 registry with it
_PUBLIC = {
    **dict.fromkeys(("DEFAULT", "get", "names", "register", "resolve"), "registry"),
    **dict.fromkeys(("Recipe", "Schedule"), "schedule"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        globals()[name] = value  # once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
