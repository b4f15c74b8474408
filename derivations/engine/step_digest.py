"""What a passed check vouches for, as a hash: SHA-256 over the ``srepr`` of a step's parts.

A derivation records the digest of each step as the step passes its check; the printers take a derivation only
when every step still has its recorded digest (:meth:`derivations.engine.derivation.Derivation.verified`).
SymPy objects are immutable, so the ``srepr`` of each is computed once and remembered by the object itself (its
entry holds it, so its ``id`` is not reused meanwhile); a replaced part is a new object with its own text.
"""

from __future__ import annotations

import hashlib

from sympy import Basic, srepr

_SEEN: dict[int, tuple[Basic, str]] = {}
_SEEN_LIMIT = 200_000  # the searches make many expressions: forget them all now and then


def digest(items) -> str:
    """SHA-256 hex digest of the texts of ``items``, each ended by a NUL byte."""
    h = hashlib.sha256()
    for item in items:
        h.update(text_of(item).encode())
        h.update(b"\0")
    return h.hexdigest()


def text_of(item) -> str:
    """``srepr`` of a SymPy object, containers part by part, ``repr`` of anything else."""
    if isinstance(item, Basic):
        hit = _SEEN.get(id(item))
        if hit is not None and hit[0] is item:
            return hit[1]
        if len(_SEEN) > _SEEN_LIMIT:
            _SEEN.clear()
        try:
            text = srepr(item)
        except Exception:  # noqa: BLE001 - an object SymPy's printer does not know
            text = repr(item)
        _SEEN[id(item)] = (item, text)
        return text
    if isinstance(item, (tuple, list)):
        return f"{type(item).__name__}({', '.join(text_of(x) for x in item)})"
    if isinstance(item, dict):
        return "{" + ", ".join(f"{text_of(k)}: {text_of(v)}" for k, v in item.items()) + "}"
    return repr(item)
