"""Identities with assumptions (``identity LHS RHS --assume 'W: orthonormal columns'``): the facts
parsed, new names declared on first use (capitalised: matrices, else scalars), shapes inferred
across every formula, and sizes drawn that satisfy the facts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from sympy import Integer, Symbol
from sympy.matrices.expressions import MatrixSymbol

from derivations.crosscheck.formula import Builder
from derivations.crosscheck.formula_syntax import parse_tree
from derivations.crosscheck.inputs import BadInput
from derivations.crosscheck.targets import Target
from derivations.engine.vocabulary import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    FactMatrix,
    dimension,
    positive_symbol,
)

_FACT_WORDS = {
    "orthonormal columns": ORTHONORMAL_COLUMNS, "orthonormal rows": ORTHONORMAL_ROWS,
    "orthogonal": ORTHONORMAL_COLUMNS, "symmetric": SYMMETRIC, "spd": SPD,
    "symmetric positive definite": SPD, "positive definite": SPD, "full column rank": FULL_COLUMN_RANK,
    "full row rank": FULL_ROW_RANK, "tall": FULL_COLUMN_RANK, "wide": FULL_ROW_RANK,
}
_SCALAR_WORDS = {"positive", "scalar", "real", "nonnegative"}


@dataclass
class Assumptions:
    facts: dict = field(default_factory=dict)  # name -> set of facts
    shapes: dict = field(default_factory=dict)  # name -> (rows, cols)
    scalars: set = field(default_factory=set)
    square: set = field(default_factory=set)


def parse_assumptions(items) -> Assumptions:
    """``"W: orthonormal columns"``, ``"S: spd"``, ``"c: positive"``, ``"X: 4x3"`` (comma-separated facts)."""
    out = Assumptions()
    for item in items or ():
        if ":" not in item:
            raise BadInput(f"--assume {item!r}: write NAME: FACT, e.g. \"W: orthonormal columns\"")
        name, facts = (s.strip() for s in item.split(":", 1))
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
            raise BadInput(f"--assume {item!r}: {name!r} is not a name")
        for word in (w.strip().lower() for w in facts.split(",") if w.strip()):
            if m := re.fullmatch(r"(\d+)\s*x\s*(\d+)", word):
                r, c = int(m.group(1)), int(m.group(2))
                if not (1 <= r <= 64 and 1 <= c <= 64):
                    raise BadInput(f"--assume {item!r}: sizes must be between 1 and 64")
                out.shapes[name] = (r, c)
            elif word in _FACT_WORDS:
                out.facts.setdefault(name, set()).add(_FACT_WORDS[word])
                if word == "orthogonal" or _FACT_WORDS[word] in (SYMMETRIC, SPD):
                    out.square.add(name)
            elif word in _SCALAR_WORDS:
                out.scalars.add(name)
            elif word == "square":
                out.square.add(name)
            else:
                known = ", ".join(sorted(_FACT_WORDS) + sorted(_SCALAR_WORDS) + ["square", "RxC"])
                raise BadInput(f"--assume {item!r}: unknown fact {word!r}; known: {known}")
    return out


class _Unify(Exception):
    def __init__(self, a, b):
        self.pair = (a, b)


class _UnifyingBuilder(Builder):
    """Declares new names on first use (capitalised: matrices, else scalars) and infers shapes."""

    def __init__(self, assumptions: Assumptions, merged: dict):
        super().__init__({}, self._declare)
        self.assumptions = assumptions
        self.merged = merged  # dimension symbol -> representative

    def _dim(self, d):
        while d in self.merged:
            d = self.merged[d]
        return d

    def _declare(self, name, col):
        a = self.assumptions
        if name in ("I",):
            return None
        is_matrix = any(ch.isupper() for ch in name.split("_")[0])
        if name in a.scalars or not is_matrix and name not in a.facts and name not in a.shapes:
            return positive_symbol(name)
        if name in a.shapes:
            rows, cols = (Integer(k) for k in a.shapes[name])
        else:
            rows, cols = self._dim(dimension(f"rows({name})")), self._dim(dimension(f"cols({name})"))
        if name in a.square:
            cols = rows
        return FactMatrix(name, rows, cols, sorted(a.facts.get(name, ())))

    def same(self, x, y, message, col):
        x, y = self._dim(x), self._dim(y)
        if x != y and isinstance(x, Symbol) and isinstance(y, Symbol):
            raise _Unify(x, y)
        super().same(x, y, message, col)


def build_with_inference(texts, assumptions: Assumptions):
    """Build every text with shared, inferred shapes: a shape clash between two free dimensions is an
    equation (the two are merged and the build restarts); returns the expressions and the builder."""
    trees = [parse_tree(t) for t in texts]
    merged = {}
    for _ in range(400):
        builder = _UnifyingBuilder(assumptions, merged)
        try:
            exprs = [builder.build(t) for t in trees]
        except _Unify as u:
            a, b = u.pair
            merged[b] = a
            continue
        return exprs, builder
    raise BadInput("shape inference did not converge")


def _sizes_for(exprs, count=3, seed=0, low=2, high=5) -> list[dict]:
    """Concrete sizes for the free dimensions of ``exprs``, tall where a fact needs it."""
    mats = {m for e in exprs for m in e.atoms(MatrixSymbol)}
    dims = sorted({d for m in mats for d in m.shape if isinstance(d, Symbol)}, key=str)
    need = []  # (rows, cols): rows >= cols
    for m in mats:
        f = getattr(m, "facts", frozenset())
        if f & {ORTHONORMAL_COLUMNS, FULL_COLUMN_RANK}:
            need.append((m.shape[0], m.shape[1]))
        if f & {ORTHONORMAL_ROWS, FULL_ROW_RANK}:
            need.append((m.shape[1], m.shape[0]))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2000):
        if len(out) == count or not dims and out:
            break
        sizes = {d: int(rng.integers(low, high + 1)) for d in dims}
        if all(int(r.xreplace(sizes)) >= int(c.xreplace(sizes)) for r, c in need) and sizes not in out:
            out.append(sizes)
    if not out:
        raise BadInput("no sizes satisfy the assumptions (orthonormal columns need at least as many rows)")
    return out


def identity_target(lhs: str, rhs: str, assumptions: Assumptions):
    """``(target, candidate)`` for the identity ``lhs = rhs`` with inferred shapes."""
    (left, right), builder = build_with_inference([lhs, rhs], assumptions)
    if getattr(left, "is_Matrix", False) != getattr(right, "is_Matrix", False) or (
            left.is_Matrix and tuple(left.shape) != tuple(right.shape)):
        def show(e):
            return f"{e.shape[0]}×{e.shape[1]}" if e.is_Matrix else "a scalar"
        raise BadInput(f"the two sides have different shapes: {show(left)} and {show(right)}")
    sizes = _sizes_for([left, right])
    small = _sizes_for([left, right], count=1, low=2, high=3)[0]
    target = Target("identity", left, builder.namespace, {}, {}, sizes, small)
    return target, right


__all__ = ["Assumptions", "build_with_inference", "identity_target", "parse_assumptions"]
