"""Newton–Schulz coefficient schedules: the registry of published ones (more to come)."""

from .registry import DEFAULT, Schedule, get, names, register

__all__ = ["DEFAULT", "Schedule", "get", "names", "register"]
