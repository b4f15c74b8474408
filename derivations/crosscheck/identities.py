"""Identities with assumptions (``identity LHS RHS --assume 'W: orthonormal columns'``): the facts
parsed, new names declared on first use, shapes inferred across every formula, and sizes drawn that
satisfy the facts and the formulas (a Gram inverse root or an inverse needs full rank), tall, wide and
square where they allow.

A new name is a matrix when it is declared one (``--assume 'm_Q: matrix'``, a fact, a size), when it is
used as one (transposed: ``x^T``, ``x.T``, ``x^{-T}``; the argument of a matrix function: ``msign``,
``inv``, ``sqrtm``, ``tr``, …; inside ``<A, B>``, a norm or a block row), or else when the part of its
name before the first underscore has a capital letter (``G_Q``, ``dW_Q``). It is a scalar when declared
one (``c: positive``), when used as one (a divisor, the argument of ``sqrt``), or else (``epsilon``,
``c_K``). The names read as scalars are listed with every verdict (:func:`scalar_names`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from sympy import Integer, Symbol
from sympy.matrices.expressions import Inverse, MatMul, MatrixSymbol

from derivations.crosscheck.formula import Builder
from derivations.crosscheck.formula_syntax import Node, parse_tree
from derivations.crosscheck.inputs import BadInput
from derivations.crosscheck.targets import Target, _preorder
from derivations.engine.vocabulary import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    FactMatrix,
    GramInvSqrt,
    GramPower,
    PolarFactor,
    dimension,
    positive_symbol,
)

_FACT_WORDS = {
    "orthonormal columns": ORTHONORMAL_COLUMNS, "orthonormal rows": ORTHONORMAL_ROWS,
    "orthogonal": ORTHONORMAL_COLUMNS, "symmetric": SYMMETRIC, "spd": SPD,
    "symmetric positive definite": SPD, "positive definite": SPD, "full column rank": FULL_COLUMN_RANK,
    "full row rank": FULL_ROW_RANK, "tall": FULL_COLUMN_RANK, "wide": FULL_ROW_RANK,
}
_SCALAR_WORDS = {"positive", "scalar", "real", "nonnegative", "integer"}
#: functions whose arguments are matrices (``sqrt`` is the scalar square root)
_MATRIX_FUNCTIONS = {"msign", "inv", "sqrtm", "tr", "trace", "transpose", "blockdiag"}


@dataclass
class Assumptions:
    facts: dict = field(default_factory=dict)  # name -> set of facts
    shapes: dict = field(default_factory=dict)  # name -> (rows, cols)
    scalars: set = field(default_factory=set)
    square: set = field(default_factory=set)
    matrices: set = field(default_factory=set)  # declared matrices (``m_Q: matrix``), whatever their case

    def declared_matrix(self, name: str) -> bool:
        """Whether ``name`` is declared a matrix: ``matrix``, ``square``, a size or a structural fact."""
        return name in self.matrices or name in self.facts or name in self.shapes or name in self.square


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
            elif word == "matrix":
                out.matrices.add(name)
            else:
                known = ", ".join(sorted(_FACT_WORDS) + sorted(_SCALAR_WORDS) + ["matrix", "square", "RxC"])
                raise BadInput(f"--assume {item!r}: unknown fact {word!r}; known: {known}")
    for name in sorted(out.scalars):
        if out.declared_matrix(name):
            raise BadInput(f"--assume: {name!r} is declared both a scalar and a matrix; keep one")
    return out


def name_uses(trees) -> tuple[dict, dict]:
    """``(matrix uses, scalar uses)``: for each name, the column of its first use that needs a matrix
    (transposed, the argument of a matrix function, inside ``<A, B>``, a norm or a block row) or a scalar
    (a divisor, the argument of ``sqrt``)."""
    matrix, scalar = {}, {}

    def bare(node):
        while node.kind == "neg" or node.kind == "pow" and node.value == -1:
            node = node.args[0]
        return node.value if node.kind == "name" else None

    stack = list(trees)
    while stack:
        n = stack.pop()
        wanted = []
        if n.kind == "T" or n.kind in ("inner", "norm", "hstack") or (
                n.kind == "call" and n.value in _MATRIX_FUNCTIONS):
            wanted = [(matrix, a) for a in n.args]
        elif n.kind == "call" and n.value == "sqrt":
            wanted = [(scalar, a) for a in n.args]
        elif n.kind == "mul":
            wanted = [(scalar, t) for op, t in n.args if op == "/"]
        for uses, arg in wanted:
            name = bare(arg)
            if name is not None:
                uses.setdefault(name, arg.col)
        stack.extend(a for a in (n.args if n.kind not in ("add", "mul") else (t for _, t in n.args))
                     if isinstance(a, Node))
    return matrix, scalar


class _Unify(Exception):
    def __init__(self, a, b):
        self.pair = (a, b)


class _UnifyingBuilder(Builder):
    """Declares new names on first use (see the module docstring for which are matrices) and infers shapes."""

    def __init__(self, assumptions: Assumptions, merged: dict, uses: tuple = ({}, {})):
        super().__init__({}, self._declare)
        self.assumptions = assumptions
        self.merged = merged  # dimension symbol -> representative
        self.matrix_uses, self.scalar_uses = uses

    def _dim(self, d):
        while d in self.merged:
            d = self.merged[d]
        return d

    def _declare(self, name, col):
        a = self.assumptions
        if name in ("I",):
            return None
        if name in a.scalars:
            is_matrix = False
        elif a.declared_matrix(name) or name in self.matrix_uses:
            is_matrix = True
        elif name in self.scalar_uses:
            is_matrix = False
        else:
            is_matrix = any(ch.isupper() for ch in name.split("_")[0])
        if not is_matrix:
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


def build_with_inference(texts, assumptions: Assumptions, equal=()):
    """Build every text with shared, inferred shapes: a shape clash between two free dimensions is an
    equation (the two are merged and the build restarts), and so is each pair of indices ``(i, j)`` in
    ``equal`` (the two sides of an identity have one shape); returns the expressions and the builder."""
    trees = [parse_tree(t) for t in texts]
    uses = name_uses(trees)
    for name in sorted(set(uses[0]) & set(uses[1])):
        if name not in assumptions.scalars and not assumptions.declared_matrix(name):
            raise BadInput(f"{name!r} is used as a matrix (column {uses[0][name]}: transposed or the argument of a "
                           f"matrix function) and as a scalar (column {uses[1][name]}: a divisor or under sqrt); "
                           f"declare which with --assume '{name}: matrix' or --assume '{name}: scalar'")
    merged = {}
    for _ in range(400):
        builder = _UnifyingBuilder(assumptions, merged, uses)
        try:
            exprs = [builder.build(t) for t in trees]
            for i, j in equal:
                _unify_shapes(builder, exprs[i], exprs[j])
        except _Unify as u:
            a, b = u.pair
            merged[b] = a
            continue
        return exprs, builder
    raise BadInput("shape inference did not converge")


def _unify_shapes(builder, a, b):
    """Raise :class:`_Unify` for the first free dimension of ``a``'s shape that differs from ``b``'s."""
    if getattr(a, "is_Matrix", False) and getattr(b, "is_Matrix", False):
        for k in (0, 1):
            x, y = builder._dim(a.shape[k]), builder._dim(b.shape[k])
            if x != y and isinstance(x, Symbol) and isinstance(y, Symbol):
                raise _Unify(x, y)


def rank_needs(exprs) -> list:
    """``(rows, cols)`` pairs with ``rows ≥ cols`` needed for the formulas to be defined: the base of an
    undamped Gram inverse root ``(WᵀW)^{-1/2}`` (or of ``U_W``, of a negative Gram power) has full rank on
    its side, and the inverse of a product ``M_1 ⋯ M_k`` (``n × n``) needs every inner size at least ``n``."""
    need = []
    for e in exprs:
        for node in _preorder(e):
            if isinstance(node, (GramInvSqrt, PolarFactor)) or (isinstance(node, GramPower) and node.exponent < 0):
                if node.damping == 0:
                    r, c = node.base.shape
                    need.append((r, c) if node.side == "right" else (c, r))
            elif isinstance(node, Inverse) and isinstance(node.arg, MatMul):
                n = node.arg.shape[0]
                mats = [m for m in node.arg.args if getattr(m, "is_Matrix", False)]
                need += [(m.shape[1], n) for m in mats[:-1]]
    return need


def _fact_needs(mats) -> list:
    need = []
    for m in mats:
        f = getattr(m, "facts", frozenset())
        if f & {ORTHONORMAL_COLUMNS, FULL_COLUMN_RANK}:
            need.append((m.shape[0], m.shape[1]))
        if f & {ORTHONORMAL_ROWS, FULL_ROW_RANK}:
            need.append((m.shape[1], m.shape[0]))
    return need


def _orientations(mats, sizes) -> set:
    """``(matrix, −1 | 0 | 1)``: which matrices are wide, square or tall at ``sizes``."""
    out = set()
    for m in mats:
        r, c = (int(k.xreplace(sizes)) for k in m.shape)
        out.add((str(m), (r > c) - (r < c)))
    return out


def _sizes_for(exprs, count=3, seed=0, low=2, high=5) -> list[dict]:
    """Concrete sizes for the free dimensions of ``exprs`` that satisfy the facts and the formulas
    (:func:`rank_needs`), chosen so that every matrix is tall, wide and square on some instance where
    the needs allow (a square-only check would miss ``A A⁺ = I``, which fails for tall ``A``)."""
    mats = sorted({m for e in exprs for m in e.atoms(MatrixSymbol)}, key=str)
    dims = sorted({d for m in mats for d in m.shape if isinstance(d, Symbol)}, key=str)
    need = _fact_needs(mats) + rank_needs(exprs)
    free = [m for m in mats if any(isinstance(k, Symbol) for k in m.shape) and m.shape[0] != m.shape[1]]
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(2000):
        if len(pool) == 40 or not dims and pool:
            break
        sizes = {d: int(rng.integers(low, high + 1)) for d in dims}
        if all(int(r.xreplace(sizes)) >= int(c.xreplace(sizes)) for r, c in need) and sizes not in pool:
            pool.append(sizes)
    if not pool:
        raise BadInput("no sizes satisfy the assumptions and the formulas (orthonormal or full-rank columns, "
                       "and the inverse roots of Gram matrices, need at least as many rows as columns)")
    out, covered = [], set()
    while pool and len(out) < count:  # greedy: the draw that shows the most new (matrix, orientation) pairs
        best = max(pool, key=lambda z: len(_orientations(free, z) - covered))
        out.append(best)
        covered |= _orientations(free, best)
        pool.remove(best)
    return out


def _symbolic_sizes(exprs) -> dict:
    """Small sizes (2 or 3) for the symbolic proof, with as few square matrices as the formulas allow."""
    mats = sorted({m for e in exprs for m in e.atoms(MatrixSymbol)}, key=str)
    options = _sizes_for(exprs, count=8, low=2, high=3)
    return max(options, key=lambda z: sum(1 for _, o in _orientations(mats, z) if o != 0))


def scalar_names(namespace: dict) -> list:
    """The names of ``namespace`` read as scalars, sorted (listed with every identity and chain verdict)."""
    return sorted(name for name, obj in namespace.items() if not getattr(obj, "is_Matrix", False))


def identity_target(lhs: str, rhs: str, assumptions: Assumptions):
    """``(target, candidate)`` for the identity ``lhs = rhs`` with inferred shapes."""
    (left, right), builder = build_with_inference([lhs, rhs], assumptions, equal=[(0, 1)])
    if getattr(left, "is_Matrix", False) != getattr(right, "is_Matrix", False) or (
            left.is_Matrix and tuple(left.shape) != tuple(right.shape)):
        def show(e):
            return f"{e.shape[0]}×{e.shape[1]}" if e.is_Matrix else "a scalar"
        raise BadInput(f"the two sides have different shapes: {show(left)} and {show(right)}")
    sizes = _sizes_for([left, right])
    small = _symbolic_sizes([left, right])
    target = Target("identity", left, builder.namespace, {}, {}, sizes, small)
    return target, right


__all__ = ["Assumptions", "build_with_inference", "identity_target", "name_uses", "parse_assumptions", "rank_needs",
           "scalar_names"]
