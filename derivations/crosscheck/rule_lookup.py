"""A derivation of the rule modules found by its name (``halfsplit.query``), and the list of every
name (``--list``), cached with the targets (:mod:`derivations.crosscheck.target_cache`)."""

from __future__ import annotations

import importlib
import os
import re

from derivations import registry
from derivations.crosscheck.inputs import BadInput
from derivations.crosscheck.target_cache import _cache_read, _cache_write

RULE_MODULES = registry.derivation_sources()


NAMES_KEY = "derivation names"  # no derivation name has a space


def derivation_names(use_cache: bool = True, progress=None) -> dict:
    """``{name: module name}`` of every derivation of the rule modules.

    Building them all checks every step (about 35 s, most of it the symbolic checks), so the names
    are cached with the targets, keyed by a hash of the sources; ``progress``: a bar updated once per rule
    module built (:func:`foundation.commandline.progress`).
    """
    cached = _cache_read(NAMES_KEY) if use_cache else None
    if isinstance(cached, dict) and cached and all(isinstance(v, str) and v in RULE_MODULES for v in cached.values()):
        return cached
    out = {}
    if progress is not None:
        progress.reset(total=len(RULE_MODULES))
    for mod_name in RULE_MODULES:
        for der in _module(mod_name).derivations():
            out[der.name] = mod_name
        if progress is not None:
            progress.update(1)
    if use_cache:
        _cache_write(NAMES_KEY, out)
    return out


def _builders(mod):
    """The module's cached zero-argument functions, in source order (each builds one derivation)."""
    found = []
    for value in vars(mod).values():
        fn = getattr(value, "__wrapped__", None)
        if (callable(value) and hasattr(value, "cache_info") and getattr(fn, "__module__", None) == mod.__name__
                and fn.__code__.co_argcount == 0):
            found.append((fn.__code__.co_firstlineno, value))
    return [f for _, f in sorted(found, key=lambda t: t[0])]


def _module(name):
    return importlib.import_module(f"derivations.{name}")


def _owner_modules(name: str, use_cache: bool = True) -> list:
    """The rule module that builds the derivation ``name``: the one its prefix names, or, for a prefix that
    names another module of the package (``projection.normal_operator`` is built in ``gauge``'s list), the
    one the derivation names give (cached, or built once)."""
    prefix = name.split(".")[0]
    if prefix in RULE_MODULES:
        return [prefix]
    here = registry.PACKAGE_DIR
    if re.fullmatch(r"[a-z][a-z0-9_]*", prefix) and os.path.isfile(os.path.join(here, f"{prefix}.py")):
        owner = derivation_names(use_cache).get(name)
        if owner in RULE_MODULES:
            return [owner]
    return []


def find_derivation(name: str, use_cache: bool = True):
    """The derivation called ``name`` and its rule module; ``BadInput`` listing the known names."""
    prefix = name.split(".")[0]
    owners = _owner_modules(name, use_cache)
    if not owners:
        raise BadInput(f"unknown derivation {name!r}: names start with one of "
                       f"{', '.join(m + '.' for m in RULE_MODULES)} (--list prints them all)")
    for mod_name in owners:
        mod = _module(mod_name)
        for build in _builders(mod):  # one derivation at a time: most names are found after one build
            der = build()
            if getattr(der, "name", None) == name:
                return der, mod
        for der in mod.derivations():
            if der.name == name:
                return der, mod
    if prefix in RULE_MODULES:
        known = ", ".join(der.name for der in _module(prefix).derivations())
        raise BadInput(f"unknown derivation {name!r}; {prefix} has: {known}")
    raise BadInput(f"unknown derivation {name!r} (--list prints the derivation names)")



__all__ = ["RULE_MODULES", "derivation_names", "find_derivation"]
