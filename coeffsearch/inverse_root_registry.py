"""Registered inverse-root schedules (:class:`coeffsearch.inverse_roots.RootSchedule`), by name and root ``p``.

A rule says ``root="newton_schulz"`` and gets the certified schedule for its ``p``; ``"newton"`` is the
classical coupled Newton iteration. Each registered schedule has a shipped certificate,
``coeffsearch/certificates/inverse-root-<name>-p<p>.json`` (:func:`certificate_path`), which the tests
re-check.
"""

from __future__ import annotations

from pathlib import Path

from coeffsearch.inverse_roots import RootSchedule, classical

CERTIFICATES = Path(__file__).resolve().parent / "certificates"
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
    return CERTIFICATES / f"inverse-root-{name}-p{p}.json"


for _p, _steps in ((2, 12), (4, 11)):
    register(classical(_p, _steps))

register(RootSchedule(
    "newton_schulz", 2, ("1e-3", "1"), (
        ("3.603993786268285", "-3.4901358632211643"),
        ("2.4511489680064646", "-1.1345298453590893"),
        ("2.168395376085427", "-0.9092975545878246"),
        ("1.730385877184733", "-0.6291706844985605"),
        ("1.520152825333929", "-0.5108895465684502"),
        ("1.5001415392355577", "-0.5000762149236743"),
        ("1.5000000069303927", "-0.5000000037296107"),
    ),
    "greedy per-step search (python -m coeffsearch inverse-root-search --p 2 --lower 1e-3 --steps 7), "
    "linear factors: 19 products against the 34 of 12 Newton steps, for a smaller certified root error"))
register(RootSchedule(
    "newton_schulz", 4, ("1e-3", "1"), (
        ("2.1114904944816155", "-1.7363172531206907"),
        ("1.6722178510308514", "-0.5792268285238596"),
        ("1.46071139566748", "-0.3845937964869952"),
        ("1.2833614378461708", "-0.26891821307919367"),
        ("1.2506447561363827", "-0.25035833841789845"),
        ("1.2500002311269502", "-0.2500001284006459"),
    ),
    "greedy per-step search (python -m coeffsearch inverse-root-search --p 4 --lower 1e-3 --steps 6), "
    "linear factors: 21 products against the 41 of 11 Newton steps, for a smaller certified root error"))
