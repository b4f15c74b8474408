"""Signatures of the emitted functions of a page, with the keyword arguments they share said once.

Every emitted function takes the same tail of keyword-only arguments (``damping=0.0``,
``msign='newton_schulz'``, ``schedule=NS_SCHEDULE``, …). A rule page prints each signature with
those left out and ``...`` in their place, and one sentence above the functions lists them
(:func:`shared_sentence`), naming any function that takes only some of them.
"""

from __future__ import annotations

import ast
import copy

from . import rst


def keyword_defaults(args: ast.arguments) -> list[str]:
    """The keyword-only arguments with a default, as ``name=default``."""
    return [f"{a.arg}={ast.unparse(d)}" for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
            if d is not None]


def shared_keywords(signatures: dict) -> list[str]:
    """``name=default`` pairs that two or more of ``signatures`` (name → ``ast.arguments``) take, in
    the order they first appear (none when a function has ``**kwargs``: ``...`` could not follow it)."""
    if any(args.kwarg is not None for args in signatures.values()):
        return []
    count: dict = {}
    for args in signatures.values():
        for pair in keyword_defaults(args):
            count[pair] = count.get(pair, 0) + 1
    return [pair for pair, n in count.items() if n >= 2]


def short_signature(name: str, args: ast.arguments, shared) -> str:
    """``def name(…)`` with the ``shared`` keyword arguments left out and ``...`` in their place."""
    kept = copy.deepcopy(args)
    pairs = [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
             if d is None or f"{a.arg}={ast.unparse(d)}" not in shared]
    kept.kwonlyargs = [copy.deepcopy(a) for a, _ in pairs]
    kept.kw_defaults = [copy.deepcopy(d) for _, d in pairs]
    text = ast.unparse(kept)
    if len(pairs) < len(args.kwonlyargs):
        star = "" if (kept.kwonlyargs or kept.vararg is not None) else "*, "
        text = f"{text}, {star}..." if text else f"{star}..."
    return f"def {name}({text})"


def shared_sentence(signatures: dict, shared) -> list[str]:
    """The sentence that says what ``...`` stands for, and which functions take only some of it."""
    if not shared:
        return []
    partial: dict = {}
    for name, args in signatures.items():
        own = keyword_defaults(args)
        taken = [p for p in shared if p in own]
        if taken and len(taken) < len(shared):
            partial.setdefault(tuple(p for p in shared if p not in own), []).append(name)
    exceptions = "; ".join(f"{', '.join(rst.literal(n) for n in names)} "
                           f"{'take' if len(names) > 1 else 'takes'} all but "
                           f"{', '.join(rst.literal(p) for p in missing)}" for missing, names in partial.items())
    return [f"In the signatures below, {rst.literal('...')} stands for the keyword arguments "
            + ", ".join(rst.literal(p) for p in shared) + (f" ({exceptions})" if exceptions else "") + ".", ""]
