"""Registered inverse-root schedules (:class:`coeffsearch.inverse_roots.RootSchedule`), by name and root ``p``.

A rule says ``root="newton_schulz"`` and gets the certified schedule for its ``p``; ``"newton"`` is the
classical coupled Newton iteration. Each registered schedule has a shipped certificate,
``coeffsearch/certificates/inverse_roots/<name>-p<p>.json`` (:func:`certificate_path`), which the tests
re-check.
"""

from __future__ import annotations

from pathlib import Path

from coeffsearch.inverse_roots import RootSchedule, classical

CERTIFICATES = Path(__file__).resolve().parent / "certificates" / "inverse_roots"
_REGISTRY: dict[tuple[str, int], RootSchedule] = {}
#: the name a rule gets when it names no schedule
DEFAULT = "newton_schulz"


def register(schedule: RootSchedule) -> RootSchedule:
    """Add ``schedule`` under ``(name, p)``; a pair registers once."""
    key = (schedule.name, schedule.p)
    if key in _REGISTRY:
        raise ValueError(f"inverse-root schedule {schedule.name!r} for p = {schedule.p} is already registered")
    _REGISTRY[key] = schedule
    return schedule


def get(name: str, p: int) -> RootSchedule:
    """The registered schedule ``name`` for the inverse ``p``-th root; ``KeyError`` lists what is registered."""
    try:
        return _REGISTRY[(name, p)]
    except KeyError:
        known = ", ".join(f"{n} (p = {q})" for n, q in sorted(_REGISTRY))
        raise KeyError(f"no inverse-root schedule {name!r} for p = {p}; registered: {known}") from None


def entries() -> list[tuple[str, int]]:
    """The registered ``(name, p)`` pairs, sorted."""
    return sorted(_REGISTRY)


def certificate_path(name: str, p: int) -> Path:
    """Where the shipped certificate of ``(name, p)`` lies."""
    return CERTIFICATES / f"{name}-p{p}.json"


for _p, _steps in ((2, 12), (4, 11)):
    register(classical(_p, _steps))

register(RootSchedule(
    "newton_schulz", 2, ("1e-3", "1"), (
        ("3.603993786268285", "-3.4901358632211643"),
        ("2.451148968006465", "-1.13452984535909"),
        ("2.168395376085428", "-0.9092975545878255"),
        ("1.7303858771847325", "-0.6291706844985601"),
        ("1.5201528253339296", "-0.5108895465684509"),
        ("1.5001415392355675", "-0.5000762149236838"),
        ("1.500000006929883", "-0.5000000037291008"),
    ),
    "greedy per-step search (python -m coeffsearch inverse-root-search --p 2 --lower 1e-3 --steps 7), "
    "linear factors: 19 products against the 34 of 12 Newton steps, for a smaller certified root error"))
register(RootSchedule(
    "newton_schulz", 4, ("1e-3", "1"), (
        ("2.1114904944816155", "-1.7363172531206907"),
        ("1.6722178510308519", "-0.5792268285238604"),
        ("1.4607113956674804", "-0.3845937964869955"),
        ("1.2833614378461706", "-0.2689182130791934"),
        ("1.2506447561363805", "-0.2503583384178961"),
        ("1.2500002311267555", "-0.25000012840045116"),
    ),
    "greedy per-step search (python -m coeffsearch inverse-root-search --p 4 --lower 1e-3 --steps 6), "
    "linear factors: 21 products against the 41 of 11 Newton steps, for a smaller certified root error"))
