"""Identities with assumptions (``identity LHS RHS --assume 'W: orthonormal columns'``): the facts
parsed, new names declared on first use, shapes inferred across every formula, and sizes drawn that
satisfy the facts and the formulas (a Gram inverse root or an inverse needs full rank), tall, wide and
square where they allow.

A new name is a matrix when it is declared one (``--assume 'm_Q: matrix'``, a fact, a size), when it is
used as one (transposed: ``x^T``, ``x.T``, ``x^{-T}``; the argument of a matrix function: ``msign``,
``inv``, ``sqrtm``, ``tr``, …; inside ``<A, B>``, a norm or a block row), or else when the part of its
name before the first underscore has a capital letter (``G_Q``, ``dW_Q``). It is a scalar when declared
one (``c: positive``), when used as one (a divisor, the argument of ``sqrt``), or else (``epsilon``,
``c_K``). The names read as scalars are listed with every verdict (:func:`scalar_names`).

A name used as an index (``σ_{r+1}``, the bounds of a sum over singular values, ``I_n``) is a size, drawn
with the others, and so is a size declared in ``--assume 'W: d x d_h'`` or ``--assume 'r: integer'``; a
declared size is never merged with another declared size (``W: d x d_h`` and ``W W`` do not compose).
``C_X`` and ``U_X`` are ``(XᵀX)^{1/2}`` and ``X (XᵀX)^{-1/2}`` when a matrix ``X`` or ``W_X`` appears in the
formulas (the names the cross-checker prints for them), else new matrices. Definitions (``L = G G^T; …``,
``… where L = …``) are seen by every formula."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
from sympy import Integer, S, Symbol, cancel, fraction
from sympy.matrices.expressions import Identity, Inverse, MatAdd, MatMul, MatrixSymbol

from derivations.crosscheck.inputs import BadInput
from derivations.parsing.formula import Builder, gram_of
from derivations.parsing.formula_notation import mentions_sigma
from derivations.parsing.formula_syntax import FormulaError, Node, parse_tree
from derivations.parsing.notation import SUM_TERMS
from derivations.parsing.notation_nodes import SingularSum
from derivations.parsing.targets import Target, _preorder
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    FactMatrix,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    PolarFactor,
    dimension,
    positive_symbol,
)
from derivations.vocabulary.spectral_nodes import PsdPower, Singular, SingularValue, SvdFactor

_FACT_WORDS = {
    "orthonormal columns": ORTHONORMAL_COLUMNS, "orthonormal rows": ORTHONORMAL_ROWS,
    "orthogonal": ORTHONORMAL_COLUMNS, "symmetric": SYMMETRIC, "spd": SPD,
    "symmetric positive definite": SPD, "positive definite": SPD, "full column rank": FULL_COLUMN_RANK,
    "full row rank": FULL_ROW_RANK, "tall": FULL_COLUMN_RANK, "wide": FULL_ROW_RANK,
}
_SCALAR_WORDS = {"positive", "scalar", "real", "nonnegative"}
#: functions whose arguments are matrices (``sqrt`` is the scalar square root)
_MATRIX_FUNCTIONS = {"msign", "inv", "sqrtm", "tr", "trace", "transpose", "blockdiag", "vec", "kron", "rank", "svd"}
_SIZE = r"(\d+|[A-Za-z][A-Za-z0-9_]*)"
_SHAPE = re.compile(rf"{_SIZE}\s*(?:×|\*|\\times)\s*{_SIZE}|(\d+)\s*x\s*(\d+)|{_SIZE}\s+x\s+{_SIZE}")


@dataclass
class Assumptions:
    facts: dict = field(default_factory=dict)  # name -> set of facts
    shapes: dict = field(default_factory=dict)  # name -> (rows, cols)
    scalars: set = field(default_factory=set)
    square: set = field(default_factory=set)
    matrices: set = field(default_factory=set)  # declared matrices (``m_Q: matrix``), whatever their case
    dims: set = field(default_factory=set)  # sizes named in declared shapes (``W: d x d_h``)

    def declared_matrix(self, name: str) -> bool:
        """Whether ``name`` is declared a matrix: ``matrix``, ``square``, a size or a structural fact."""
        return name in self.matrices or name in self.facts or name in self.shapes or name in self.square


def parse_assumptions(items) -> Assumptions:
    """``"W: orthonormal columns"``, ``"S: spd"``, ``"c: positive"``, ``"X: 4x3"``, ``"W: d x d_h"``, ``"A: n × r"``
    (comma-separated facts; a size is a number from 1 to 64 or a name)."""
    out = Assumptions()
    for item in items or ():
        if ":" not in item:
            raise BadInput(f"--assume {item!r}: write NAME: FACT, e.g. \"W: orthonormal columns\"")
        name, facts = (s.strip() for s in item.split(":", 1))
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
            raise BadInput(f"--assume {item!r}: {name!r} is not a name")
        for raw in (w.strip() for w in facts.split(",") if w.strip()):
            _add_fact(out, name, raw, item)
    for name in sorted(out.scalars):
        if out.declared_matrix(name):
            raise BadInput(f"--assume: {name!r} is declared both a scalar and a matrix; keep one")
    for name in sorted(out.dims):
        if out.declared_matrix(name) or name in out.scalars:
            raise BadInput(f"--assume: {name!r} is a size (in a shape, or an integer) and also declared a matrix or "
                           "a scalar")
    return out


def _add_fact(out: Assumptions, name: str, raw: str, item: str):
    """One comma-separated fact of ``--assume item`` about ``name``."""
    word = raw.lower()
    if m := _SHAPE.fullmatch(raw):
        out.shapes[name] = _shape(item, [g for g in m.groups() if g is not None])
        out.dims |= {k for k in out.shapes[name] if isinstance(k, str)}
    elif word in _FACT_WORDS:
        out.facts.setdefault(name, set()).add(_FACT_WORDS[word])
        if word == "orthogonal" or _FACT_WORDS[word] in (SYMMETRIC, SPD):
            out.square.add(name)
    elif word in ("integer", "size", "index"):  # a whole number: drawn with the sizes (σ_{r+1}, \sum_{i>r})
        out.dims.add(name)
    elif word in _SCALAR_WORDS:
        out.scalars.add(name)
    elif word == "square":
        out.square.add(name)
    elif word == "matrix":
        out.matrices.add(name)
    else:
        known = ", ".join(sorted(_FACT_WORDS) + sorted(_SCALAR_WORDS)
                          + ["integer", "size", "matrix", "square", "RxC", "R x C"])
        raise BadInput(f"--assume {item!r}: unknown fact {word!r}; known: {known}")


def _shape(item: str, sizes: list) -> tuple:
    """``(rows, cols)`` of a declared shape: numbers 1 to 64 (as int) or size names (as str)."""
    out = []
    for k in sizes:
        if k.isdigit():
            if not 1 <= int(k) <= 64:
                raise BadInput(f"--assume {item!r}: sizes must be between 1 and 64")
            out.append(int(k))
        else:
            out.append(k)
    return tuple(out)


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
        if n.kind in ("T", "inner", "norm", "hstack", "kron") or (n.kind == "call" and n.value in _MATRIX_FUNCTIONS):
            wanted = [(matrix, a) for a in n.args]
        elif n.kind == "sv":  # σ_k(X)
            wanted = [(matrix, a) for a in n.args[1:]]
        elif n.kind == "call" and n.value == "matrix_power":
            wanted = [(matrix, n.args[0])]
        elif n.kind == "call" and n.value in ("sqrt", "min", "max"):
            wanted = [(scalar, a) for a in n.args]
        elif n.kind == "mul":
            wanted = [(scalar, t) for op, t in n.args if op == "/"]
        for uses, arg in wanted:
            name = bare(arg)
            if name is not None:
                uses.setdefault(name, arg.col)
        stack.extend(_children(n))
    return matrix, scalar


def _children(n: Node) -> list:
    return [a for a in (n.args if n.kind not in ("add", "mul") else (t for _, t in n.args)) if isinstance(a, Node)]


def _names(tree) -> set:
    out, stack = set(), [tree] if tree is not None else []
    while stack:
        n = stack.pop()
        if n.kind == "name":
            out.add(n.value)
        stack.extend(_children(n))
    return out


def size_names(trees) -> tuple[set, set]:
    """``(sizes, term counts)``: the names used as an index or a bound (``σ_{r+1}``, ``\\sum_{i>r} σ_i``,
    ``I_n``), which are sizes, and the names that are the upper bound of a sum over heads
    (``\\sum_{h=1}^{H}``), which are the number of terms it is expanded to."""
    sizes, counts, indices = set(), set(), set()
    stack = list(trees)
    while stack:
        n = stack.pop()
        if n.kind == "sv":
            sizes |= _names(n.args[0]) - {"max", "min"}
        elif n.kind == "sigma_part":
            sizes |= _names(n.args[0])
        elif n.kind == "sum":
            body, bound, upper = n.args
            indices.add(n.value[0])
            if mentions_sigma(body, n.value[0]):
                sizes |= _names(bound) | _names(upper)
            elif upper is not None and upper.kind == "name":
                counts.add(upper.value)
        elif n.kind == "name" and (m := re.fullmatch(r"I_([A-Za-z][A-Za-z0-9_]*)", n.value)):
            sizes.add(m.group(1))
        stack.extend(_children(n))
    return sizes - indices, counts


class _Unify(Exception):
    def __init__(self, a, b):
        self.pair = (a, b)


class _UnifyingBuilder(Builder):
    """Declares new names on first use (see the module docstring for which are matrices) and infers shapes."""

    def __init__(self, assumptions: Assumptions, merged: dict, uses: tuple = ({}, {}),
                 sizes: tuple = (frozenset(), frozenset()), names: frozenset = frozenset()):
        super().__init__({}, self._declare)
        self.assumptions = assumptions
        self.merged = merged  # dimension symbol -> representative (a symbol or a number)
        self.matrix_uses, self.scalar_uses = uses
        self.size_names, counts = sizes
        self.all_names = names
        self.eyes = 0
        for name in sorted(counts):  # \sum_{h=1}^{H}: H is the number of terms the sum is expanded to
            self.namespace[name] = Integer(SUM_TERMS)

    def _dim(self, d):
        while d in self.merged:
            d = self.merged[d]
        return d

    def _resolve(self, e):
        if isinstance(e, Symbol):
            return self._dim(e)
        syms = getattr(e, "free_symbols", set())
        return e.xreplace({s: self._dim(s) for s in syms}) if syms else e

    def _declare(self, name, col):
        a = self.assumptions
        if name in ("I",):
            return None
        if self.index_mode or name in self.size_names or name in a.dims:
            if a.declared_matrix(name) or name in self.matrix_uses or name in a.scalars:
                raise FormulaError(f"{name} is used as a size (an index, a bound or in a shape) and declared or "
                                   "used as a matrix or a scalar", col)
            return dimension(name)
        if (root := self._root(name, col)) is not None:
            return root
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
            rows, cols = (Integer(k) if isinstance(k, int) else dimension(k) for k in a.shapes[name])
        else:
            rows, cols = self._dim(dimension(f"rows({name})")), self._dim(dimension(f"cols({name})"))
        if name in a.square:
            cols = rows
        return FactMatrix(name, rows, cols, sorted(a.facts.get(name, ())))

    def _root(self, name, col):
        """``C_X``/``U_X`` of a matrix ``X`` or ``W_X`` of the formulas, as the cross-checker prints them."""
        m = re.fullmatch(r"([CU])_(\w+)", name)
        a = self.assumptions
        if m is None or name in a.scalars or a.declared_matrix(name):
            return None
        for base in (f"W_{m.group(2)}", m.group(2)):
            if base in self.all_names and base not in a.scalars:
                x = self._b_name(Node("name", col, value=base))
                if getattr(x, "is_Matrix", False):
                    return GramSqrt(x) if m.group(1) == "C" else PolarFactor(x)
        return None

    def sized_eye(self, col):
        self.eyes += 1
        return Identity(self._dim(dimension(f"size(I#{self.eyes})")))

    @staticmethod
    def _free(d) -> bool:
        return isinstance(d, Symbol) and str(d).startswith(("rows(", "cols(", "size("))

    def solve(self, x, y):
        """``(representative, free size)`` that makes the sizes ``x`` and ``y`` equal, or None: a free size (a
        matrix's inferred rows or columns) takes the other side's size or number; declared sizes are fixed."""
        x, y = self._resolve(x), self._resolve(y)
        if x == y:
            return None
        num, den = fraction(cancel(x / y))
        for free, other in ((den, num), (num, den)):
            if self._free(free) and (isinstance(other, Symbol) or other.is_Integer and other > 0):
                return other, free
        return None

    def same(self, x, y, message, col):
        pair = self.solve(x, y)
        if pair is not None:
            raise _Unify(*pair)
        x, y = self._resolve(x), self._resolve(y)
        if x != y and any(e.is_Mul and any(self._free(f) for f in e.args) for e in (x, y)):
            message += " (sizes that are products, as of a Kronecker product, are not inferred: declare them, e.g. " \
                       "--assume 'A: m x n')"
        super().same(x, y, message, col)


def build_with_inference(texts, assumptions: Assumptions, equal=(), definitions=()):
    """Build every text with shared, inferred shapes: a shape clash between two free dimensions is an
    equation (the two are merged and the build restarts), and so is each pair of indices ``(i, j)`` in
    ``equal`` (the two sides of an identity have one shape); ``definitions`` (``def`` nodes, as from
    :func:`~derivations.parsing.formula_syntax.parse_definition`) and the texts' own definitions are seen
    by every text. Returns the expressions and the builder."""
    trees = [parse_tree(t) for t in texts]
    defs = list(definitions) + [d for t in trees if t.kind == "let" for d in t.args[:-1]]
    uses = name_uses(trees + defs)
    for name in sorted(set(uses[0]) & set(uses[1])):
        if name not in assumptions.scalars and not assumptions.declared_matrix(name):
            raise BadInput(f"{name!r} is used as a matrix (column {uses[0][name]}: transposed or the argument of a "
                           f"matrix function) and as a scalar (column {uses[1][name]}: a divisor or under sqrt); "
                           f"declare which with --assume '{name}: matrix' or --assume '{name}: scalar'")
    sizes = size_names(trees + defs)
    names = frozenset(set().union(*(_names(t) for t in trees + defs)))
    merged = {}
    for _ in range(400):
        builder = _UnifyingBuilder(assumptions, merged, uses, sizes, names)
        try:
            for d in defs:
                builder.define(d)
            exprs = [builder.build(t, bare_eye=True) for t in trees]
            for i, j in equal:  # a lone I or 0 takes the other side's shape
                exprs[i] = builder.conform(exprs[i], exprs[j], trees[i].col)
                exprs[j] = builder.conform(exprs[j], exprs[i], trees[j].col)
                _unify_shapes(builder, exprs[i], exprs[j])
            for e, t in zip(exprs, trees, strict=True):
                builder.conform(e, None, t.col)  # a lone I with no partner has no size
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
            pair = builder.solve(a.shape[k], b.shape[k])
            if pair is not None:
                raise _Unify(*pair)


def rank_needs(exprs) -> list:
    """``(rows, cols)`` pairs with ``rows ≥ cols`` needed for the formulas to be defined: the base of an
    undamped Gram inverse root ``(WᵀW)^{-1/2}`` (or of ``U_W``, of a negative Gram power) has full rank on
    its side, and the inverse of a product ``M_1 ⋯ M_k`` (``n × n``) needs every inner size at least ``n``.
    A thin SVD (``U, Σ, V = svd(G)``) needs ``G`` tall or square, and a singular value ``σ_k`` or a sum of them
    from ``σ_{r+1}`` needs ``k``, ``r + 1`` at most ``min(m, n)``: else it is zero on every instance and says
    nothing."""
    need = []
    for e in exprs:
        for node in _preorder(e):
            if isinstance(node, (SvdFactor, Singular)) or type(node) is SingularValue:  # a thin SVD: m >= n
                need.append(tuple(node.args[0].shape))
            if isinstance(node, (SingularValue, SingularSum, Singular)):
                need += _spectral_needs(node)
            elif isinstance(node, PsdPower) and node.power < 0 and isinstance(node.arg, MatAdd):
                need += _sum_of_grams_needs(node.arg)
            elif isinstance(node, (GramInvSqrt, PolarFactor)) or (isinstance(node, GramPower) and node.exponent < 0):
                if node.damping == 0:
                    r, c = node.base.shape
                    need.append((r, c) if node.side == "right" else (c, r))
            elif isinstance(node, Inverse) and isinstance(node.arg, MatMul):
                n = node.arg.shape[0]
                mats = [m for m in node.arg.args if getattr(m, "is_Matrix", False)]
                need += [(m.shape[1], n) for m in mats[:-1]]
    return need


def _sum_of_grams_needs(total) -> list:
    """``(Σ ranks, n)``: a negative power of ``A_1ᵀA_1 + … (+ λI)`` (``n × n``) needs the Gram matrices' ranks to
    add up to ``n`` (a term ``λI`` or an ``spd`` matrix makes the sum definite already)."""
    ranks = S.Zero
    for t in total.args:
        c, mats = t.as_coeff_matrices() if isinstance(t, MatMul) else (S.One, [t])
        g = gram_of(MatMul(*mats) if len(mats) > 1 else mats[0])
        if g is None:
            return []  # λI or an spd term: definite whatever the sizes
        w, _, side = g
        ranks += w.shape[0] if side == "right" else w.shape[1]
    return [(ranks, total.shape[0])]


def _spectral_needs(node) -> list:
    """``(size, k)`` pairs: the singular values a node reads exist (``k ≤ min(m, n)``)."""
    if isinstance(node, SingularSum):
        x, lo, hi, _ = node.args
        first = [lo + 1] + ([hi] if hi is not S.Infinity else [])
    elif isinstance(node, Singular):
        x, first = node.base, ([node.r + 1] if node.part == "tail" else [node.r] if node.part == "head" else [])
    else:
        x, first = node.args
        first = [first]
    return [(size, k) for k in first for size in x.shape if not k.is_Integer or k > 1]


def _fact_needs(mats) -> list:
    need = []
    for m in mats:
        f = getattr(m, "facts", frozenset())
        if f & {ORTHONORMAL_COLUMNS, FULL_COLUMN_RANK}:
            need.append((m.shape[0], m.shape[1]))
        if f & {ORTHONORMAL_ROWS, FULL_ROW_RANK}:
            need.append((m.shape[1], m.shape[0]))
    return need


def _size_fn(e):
    """``sizes → int`` for a size expression (numbers, size symbols, sums and products of them), without
    SymPy's substitution in the draw loop of :func:`_sizes_for`."""
    if e.is_Integer:
        value = int(e)
        return lambda z: value
    if e.is_Symbol:
        return lambda z: z[e]
    if e.is_Add or e.is_Mul:
        parts = [_size_fn(a) for a in e.args]
        if e.is_Add:
            return lambda z: sum(f(z) for f in parts)
        return lambda z: math.prod(f(z) for f in parts)
    return lambda z: int(e.xreplace(z))


def _orientations(mats, sizes) -> set:
    """``(matrix, −1 | 0 | 1)``: which matrices are wide, square or tall at ``sizes``."""
    out = set()
    for name, rows, cols in mats:
        r, c = rows(sizes), cols(sizes)
        out.add((name, (r > c) - (r < c)))
    return out


def _sizes_for(exprs, count=3, seed=0, low=2, high=5) -> list[dict]:
    """Concrete sizes for the free dimensions of ``exprs`` that satisfy the facts and the formulas
    (:func:`rank_needs`), chosen so that every matrix is tall, wide and square on some instance where
    the needs allow (a square-only check would miss ``A A⁺ = I``, which fails for tall ``A``)."""
    mats = sorted({m for e in exprs for m in e.atoms(MatrixSymbol)}, key=str)
    dims = sorted({d for m in mats for d in m.shape if isinstance(d, Symbol)}
                  | {s for e in exprs for s in e.atoms(Symbol) if s.is_integer}, key=str)
    need = [(_size_fn(S(r)), _size_fn(S(c))) for r, c in _fact_needs(mats) + rank_needs(exprs)]
    free = [(str(m), _size_fn(m.shape[0]), _size_fn(m.shape[1])) for m in mats
            if any(isinstance(k, Symbol) for k in m.shape) and m.shape[0] != m.shape[1]]
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(2000):
        if len(pool) == 40 or not dims and pool:
            break
        sizes = {d: int(rng.integers(low, high + 1)) for d in dims}
        if all(r(sizes) >= c(sizes) for r, c in need) and sizes not in pool:
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
    mats = [(str(m), _size_fn(m.shape[0]), _size_fn(m.shape[1]))
            for m in sorted({m for e in exprs for m in e.atoms(MatrixSymbol)}, key=str)]
    options = _sizes_for(exprs, count=8, low=2, high=3)
    return max(options, key=lambda z: sum(1 for _, o in _orientations(mats, z) if o != 0))


def scalar_names(namespace: dict) -> list:
    """The names of ``namespace`` read as scalars, sorted (listed with every identity and chain verdict); sizes
    (``r`` of ``σ_{r+1}``) and numbers (the ``H`` of ``\\sum_{h=1}^{H}``) are not listed."""
    return sorted(name for name, obj in namespace.items()
                  if not getattr(obj, "is_Matrix", False) and not getattr(obj, "is_integer", False))


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
           "scalar_names", "size_names"]
