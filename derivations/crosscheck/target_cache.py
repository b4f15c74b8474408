"""A cache of targets and derivation names: building a derivation re-checks every step (seconds).

Stored as JSON over a closed set of node types (never pickle, never eval), keyed by a hash of the
sources of derivations/ and numerics/, so any change to a rule, a lemma or the engine rebuilds it. Each
entry also carries its key, that hash and a digest of its contents, all checked before it is used
(:func:`_cache_read`): an entry copied from another cache, written by other sources, truncated or edited by
accident is rebuilt, not trusted. The digest is an unkeyed hash, not a signature: whoever can write the cache
file can rewrite an entry together with its digest, and such an entry is used. The cache directory
(``$XDG_CACHE_HOME`` or ``~/.cache``) must be as trusted as the code; ``--no-cache`` rebuilds from the rules.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os

from sympy import Add, Basic, Mul, Pow, Rational, Symbol, Tuple
from sympy.core.symbol import Str
from sympy.matrices.expressions import Identity, Inverse, MatAdd, MatMul, MatrixSymbol, Transpose, ZeroMatrix

from derivations import registry
from derivations.crosscheck.inputs import BadInput, read_input
from derivations.parsing.targets import Target
from derivations.vocabulary.nodes import (
    BlockDiag,
    FactMatrix,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    HStack,
    Inner,
    IsotropicScale,
    Msign,
    NuclearNorm,
    OpNorm,
    PolarFactor,
    Projector,
    RegularizedSylvester,
)

_NODE_TYPES = {c.__name__: c for c in (
    MatrixSymbol, FactMatrix, Identity, MatMul, MatAdd, Transpose, Inverse, Msign, GramSqrt, GramInvSqrt,
    GramPower, PolarFactor, Projector, HStack, BlockDiag, Inner, OpNorm, NuclearNorm, IsotropicScale,
    RegularizedSylvester, Mul, Add, Pow, Tuple, ZeroMatrix)}


def _to_json(e):
    if isinstance(e, Str):
        return {"str": e.name}
    if isinstance(e, Symbol):
        return {"sym": e.name, "assume": {k: v for k, v in e.assumptions0.items() if v is not None}}
    if isinstance(e, Rational):
        return {"num": str(e)}
    name = type(e).__name__
    if _NODE_TYPES.get(name) is not type(e):
        raise TypeError(f"no JSON form for {name}")
    return {"node": name, "args": [_to_json(a) for a in e.args]}


def _from_json(obj):
    if "str" in obj:
        return Str(obj["str"])
    if "sym" in obj:
        return Symbol(obj["sym"], **{k: bool(v) for k, v in obj["assume"].items()})
    if "num" in obj:
        return Rational(obj["num"])
    cls = _NODE_TYPES[obj["node"]]
    args = [_from_json(a) for a in obj["args"]]
    if cls in (MatMul, MatAdd, Mul, Add):
        return cls(*args, evaluate=False)
    return cls(*args)


@functools.cache
def _source_hash() -> str:
    """Hash of the ``derivations`` and ``numerics`` sources as imported (read once per process)."""
    root = os.path.dirname(registry.PACKAGE_DIR)
    h = hashlib.sha256()
    for package in ("derivations", "numerics"):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, package))):
            for f in sorted(files):
                if f.endswith(".py"):
                    with open(os.path.join(dirpath, f), "rb") as fh:
                        h.update(f.encode() + fh.read())
    return h.hexdigest()[:16]


def _cache_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "optimizer-workbench", f"crosscheck-{_source_hash()}.json")


def target_to_json(t: Target) -> dict:
    def dims(d):
        return [[_to_json(k), v] for k, v in d.items()]
    return {"name": t.name, "expr": _to_json(t.expr),
            "namespace": {k: _to_json(v) for k, v in t.namespace.items()},
            "definitions": [[_to_json(k), _to_json(v)] for k, v in t.definitions.items()],
            "scalars": [[_to_json(k), float(v)] for k, v in t.scalars.items()],
            "sizes": [dims(sz) for sz in t.sizes], "symbolic_dims": dims(t.symbolic_dims or {})}


def target_from_json(obj: dict) -> Target:
    def dims(pairs):
        return {_from_json(k): int(v) for k, v in pairs}
    return Target(obj["name"], _from_json(obj["expr"]),
                  {k: _from_json(v) for k, v in obj["namespace"].items()},
                  {_from_json(k): _from_json(v) for k, v in obj["definitions"]},
                  {_from_json(k): v for k, v in obj["scalars"]},
                  [dims(sz) for sz in obj["sizes"]], dims(obj["symbolic_dims"]) or None)


CACHE_MAX_BYTES = 64 * 1024 * 1024  # a cache file larger than this is ignored (and replaced on the next write)



def _entry_digest(key: str, source: str, value) -> str:
    text = json.dumps([key, source, value], sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _valid_entry(key: str, entry):
    """``(True, value)`` when ``entry`` was written for ``key`` by the current sources and is intact."""
    if not (isinstance(entry, dict) and set(entry) == {"key", "source", "digest", "value"}):
        return False, None
    if entry["key"] != key or entry["source"] != _source_hash():
        return False, None
    try:
        ok = entry["digest"] == _entry_digest(key, entry["source"], entry["value"])
    except (TypeError, ValueError, RecursionError):
        return False, None
    return ok, entry["value"] if ok else None


def _cache_data() -> dict:
    """The cache file's entries, or {} (no file, not a regular file, too large, not JSON, not an object)."""
    try:
        raw = read_input(_cache_path(), CACHE_MAX_BYTES, "cache")
        data = json.loads(raw.decode("utf-8"))
    except (BadInput, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _cache_read(key: str):
    """The cached value under ``key``, or None: no cache, an unreadable or corrupted file, or an entry that
    was not written for ``key`` by the current sources (its source hash and its digest are checked, so a
    stale, foreign, truncated or accidentally edited entry is rebuilt, never used; see the module docstring for
    what an unkeyed digest cannot catch)."""
    ok, value = _valid_entry(key, _cache_data().get(key))
    return value if ok else None


def _cache_write(key: str, value) -> None:
    """Store ``value`` under ``key`` with the source hash and a digest (atomically; entries that fail the
    check and caches of older sources are removed); a cache that can't be written is skipped."""
    path = _cache_path()
    try:
        entry = {"key": key, "source": _source_hash(), "digest": _entry_digest(key, _source_hash(), value),
                 "value": value}
        data = {k: v for k, v in _cache_data().items() if _valid_entry(k, v)[0]}
        data[key] = entry
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, allow_nan=False)
        os.replace(tmp, path)
        for old in os.listdir(os.path.dirname(path)):  # caches of older sources
            if old.startswith("crosscheck-") and old.endswith(".json") and old != os.path.basename(path):
                os.remove(os.path.join(os.path.dirname(path), old))
    except (OSError, ValueError, TypeError, RecursionError):
        return


def load_target(name: str) -> Target | None:
    """The cached target of ``name``, or None (no cache, stale sources, an entry that fails its checks or
    does not rebuild into a target called ``name``)."""
    entry = _cache_read(name)
    if entry is None:
        return None
    try:
        target = target_from_json(entry)
    except Exception:  # noqa: BLE001 — cache contents are untrusted: anything that fails means rebuild
        return None
    if target.name != name or not isinstance(target.expr, Basic):
        return None
    return target


def store_target(t: Target) -> None:
    """Cache ``t`` if it survives the JSON round trip unchanged."""
    try:
        obj = target_to_json(t)
        back = target_from_json(json.loads(json.dumps(obj)))
    except (TypeError, ValueError, KeyError):
        return
    if back.expr != t.expr or back.namespace != t.namespace or back.definitions != t.definitions:
        return
    _cache_write(t.name, obj)


__all__ = ["load_target", "store_target", "target_from_json", "target_to_json"]
