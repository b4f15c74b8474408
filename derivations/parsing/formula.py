"""A formula language for matrix expressions, parsed without evaluating any Python: the syntax tree
(:mod:`derivations.parsing.formula_syntax`, which lists what it reads) built into the project's own
vocabulary (:mod:`derivations.vocabulary.nodes`) by :class:`Builder`; :func:`parse` does both. The rules of
definitions, singular values, sums and the Kronecker product are :mod:`derivations.parsing.formula_notation`.

Fractional powers are defined for matrices that are positive semidefinite by construction: a Gram matrix
``(AᵀA + λI)^p`` is the PSD power of the Gram matrix (``p = ±1/2`` are the vocabulary's ``C_A`` and
``C_A⁻¹``), so ``sqrtm(W_K^T W_K)`` is ``C_K`` and ``(G G^T)^{-1/4}`` a quarter inverse root; so is a name
defined as one (``L = G G^T; L^{-1/4}``), a Gram root, ``Σ`` of an SVD, a matrix declared ``spd``, and a sum
of Gram matrices with positive coefficients (``(A^T A + B^T B + λI)^{-1/2}``).

Names the derivation does not know are tried in the other spellings a rule module prints
(:func:`derivations.parsing.notation.alternatives`), and ``C_X``/``U_X`` name ``(XᵀX)^{1/2}`` and
``X (XᵀX)^{-1/2}`` of a matrix ``X`` (or ``W_X``) of the derivation, as the cross-checker prints them.

Errors are :class:`FormulaError` with the column (1-based) where the problem is: unknown names
list the known ones, products and sums whose shapes don't compose show both shapes.
"""

from __future__ import annotations

import itertools
import re

from sympy import Basic, Integer, Rational, S, sqrt
from sympy.matrices.expressions import Identity, Inverse, MatAdd, MatMul, MatrixSymbol, Transpose, ZeroMatrix

from derivations.parsing.formula_notation import Eye as _Eye
from derivations.parsing.formula_notation import NotationRules, check_size
from derivations.parsing.formula_notation import is_matrix as _is_matrix
from derivations.parsing.formula_syntax import FUNCTIONS, FormulaError, Node, parse_tree
from derivations.parsing.notation import alternatives
from derivations.vocabulary.algebra import product, tidy, total, transpose
from derivations.vocabulary.nodes import (
    SPD,
    BlockDiag,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    HStack,
    Inner,
    Msign,
    NuclearNorm,
    OpNorm,
    PolarFactor,
    facts_of,
    short_name,
)
from derivations.vocabulary.spectral_nodes import PsdPower, Singular

MAX_MATRIX_POWER = 64  # |k| of an integer power of a matrix (X^k is written out as k factors)


def _shape_text(m) -> str:
    return f"{m.shape[0]}×{m.shape[1]}"


class Builder(NotationRules):
    """Turns a syntax tree into a SymPy expression with the names of ``namespace``.

    ``namespace`` maps names to matrix expressions and scalars. ``declare`` (optional) is called
    with ``(name, column)`` for a name not in the namespace and returns an object or None.
    """

    def __init__(self, namespace: dict, declare=None):
        self.namespace = dict(namespace)
        self.declare = declare
        self._init_notation()

    def build(self, node: Node, bare_eye: bool = False):
        """The expression of the tree ``node``; with ``bare_eye`` a lone ``c·I`` (sized by :meth:`conform`)."""
        try:
            out = self._build(node)
            if isinstance(out, _Eye) and not bare_eye:
                raise FormulaError("I needs a size: write it next to a matrix", node.col)
        except FormulaError as exc:
            raise exc.with_text(node.source) from None
        return out

    def build_like(self, node: Node, like):
        """:meth:`build`, with a lone ``I`` or ``0`` taking the shape of the matrix ``like`` (one side of ``= I``)."""
        try:
            return self.conform(self.build(node, bare_eye=True), like, node.col)
        except FormulaError as exc:
            raise exc.with_text(node.source) from None

    def conform(self, x, like, col=None):
        """``x`` with a lone ``c·I`` or the number 0 given the shape of the matrix ``like``."""
        if isinstance(x, _Eye):
            if not _is_matrix(like):
                raise FormulaError("I needs a size: write it next to a matrix", col)
            self.square(like, "I on one side", col)
            return product(x.coeff, Identity(like.shape[0]))
        return conform(x, like)

    def same(self, x, y, message: str, col):
        """Require equal dimensions ``x`` and ``y`` (a subclass may solve for them instead)."""
        if x != y:
            raise FormulaError(message, col)

    def square(self, x, what: str, col):
        self.same(x.shape[0], x.shape[1], f"{what} needs a square matrix, got {_shape_text(x)}", col)

    def _known(self) -> str:
        names = sorted(self.namespace)
        return ", ".join(names) + "; functions: " + ", ".join(FUNCTIONS)

    def _build(self, n: Node):
        method = getattr(self, f"_b_{n.kind}")
        return method(n)

    def _b_num(self, n):
        return n.value

    def _b_name(self, n):
        name = n.value
        self._b_name_in_sum(name, n.col)
        if name in self.defined:
            return self.defined_value(name, n.col)
        if name in self.namespace:
            return self.namespace[name]
        if name == "I":
            return _Eye()
        if re.fullmatch(r"I_[A-Za-z0-9]+", name) and (eye := self.identity_of(name, n.col)) is not None:
            return eye
        if self.declare is not None:
            obj = self.declare(name, n.col)
            if obj is not None:
                self.namespace[name] = obj
                return obj
        else:
            for other in alternatives(name):
                if other in self.namespace:
                    return self.namespace[other]
            if (root := self._named_root(name)) is not None:
                return root
        if name in FUNCTIONS:
            raise FormulaError(f"{name} is a function: write {name}(X)", n.col)
        raise FormulaError(f"unknown name {name!r}; known: {self._known()}", n.col)

    def _named_root(self, name: str):
        """``C_X`` = ``(XᵀX)^{1/2}`` and ``U_X`` = ``X (XᵀX)^{-1/2}`` of the namespace's matrix ``X`` or ``W_X``
        (the names the cross-checker prints for these roots)."""
        m = re.fullmatch(r"([CU])_(\w+)", name)
        if m is None:
            return None
        base = self._short_named(m.group(2))
        if base is None:
            return None
        return GramSqrt(base) if m.group(1) == "C" else PolarFactor(base)

    def _short_named(self, label: str):
        """The namespace's one matrix ``X`` or ``W_X`` whose short name is ``label`` (else None)."""
        bases = [v for v in self.namespace.values() if isinstance(v, MatrixSymbol) and short_name(v) == label]
        return bases[0] if len(bases) == 1 else None

    def _b_root(self, n):
        """``C_{A}`` = ``(AᵀA)^{1/2}`` and ``U_{A}`` = ``A (AᵀA)^{-1/2}`` of an expression ``A``; of a transpose,
        ``C_{Xᵀ}`` = ``(XXᵀ)^{1/2}`` is the left Gram root of ``X`` and ``U_{Xᵀ}`` = ``Xᵀ (XXᵀ)^{-1/2}`` the
        transpose of its left polar factor (as the LaTeX printer writes the left ones). A bare name is a matrix
        of the namespace, or ``X`` for ``W_X`` (``C_{K^{\top}}``). The root of a matrix is damped as the
        derivation's own ``C_X`` of that matrix and side is (``C_A = (AAᵀ + λI)^{1/2}`` in a damped rule)."""
        arg, damping = n.args[0], S.Zero
        inner = arg.args[0] if arg.kind == "T" else arg
        if inner.kind == "name" and inner.value not in self.namespace and inner.value not in self.defined \
                and (base := self._short_named(inner.value)) is not None:
            x = transpose(base) if arg.kind == "T" else base
        else:
            x = self._build(arg)
        if not _is_matrix(x) or isinstance(x, _Eye):
            raise FormulaError(f"{n.value}_{{…}} takes a matrix", arg.col)
        w, side = (x.arg, "left") if isinstance(x, Transpose) else (x, "right")
        named = self.namespace.get(f"C_{short_name(w)}") if isinstance(w, MatrixSymbol) else None
        if isinstance(named, GramSqrt) and named.base == w and named.side == side:
            damping = named.damping  # the derivation's own C_X of this matrix and side
        if n.value == "C":
            return GramSqrt(w, damping, side)
        return transpose(PolarFactor(w, damping, side)) if side == "left" else PolarFactor(w, damping)

    def _b_neg(self, n):
        x = self._build(n.args[0])
        if isinstance(x, _Eye):
            return _Eye(-x.coeff)
        return product(-1, x) if _is_matrix(x) else -x

    def _b_add(self, n):
        terms = []
        for sign, t in n.args:
            x = self._build(t)
            if sign < 0:
                x = _Eye(-x.coeff) if isinstance(x, _Eye) else (product(-1, x) if _is_matrix(x) else -x)
            terms.append((t.col, x))
        mats = [(c, x) for c, x in terms if _is_matrix(x)]
        eyes = [x for _, x in terms if isinstance(x, _Eye)]
        scalars = [(c, x) for c, x in terms if not _is_matrix(x) and not isinstance(x, _Eye)]
        if mats or eyes:  # a literal 0 in a matrix sum is the zero matrix
            scalars = [(c, x) for c, x in scalars if x is not S.Zero]
        if mats and scalars:
            raise FormulaError(f"cannot add a scalar to a {_shape_text(mats[0][1])} matrix", scalars[0][0])
        if eyes and not mats:
            if scalars:
                raise FormulaError("cannot add a scalar to I", n.col)
            return _Eye(sum((e.coeff for e in eyes), S.Zero))
        if not mats:
            return sum((x for _, x in scalars), S.Zero)
        first = mats[0][1]
        for c, x in mats[1:]:
            for k in (0, 1):
                self.same(first.shape[k], x.shape[k],
                          f"cannot add a {_shape_text(first)} matrix and a {_shape_text(x)} matrix", c)
        if eyes:
            self.square(first, "adding I", n.col)
        out = [x for _, x in mats] + [product(e.coeff, Identity(first.shape[0])) for e in eyes]
        return total(*out)

    def _b_mul(self, n):
        coeff = S.One
        mats = []  # (col, matrix or _Eye)
        for op, t in n.args:
            x = self._build(t)
            if op == "/":
                if _is_matrix(x) or isinstance(x, _Eye):
                    raise FormulaError("cannot divide by a matrix; write inv(X) or X^-1", t.col)
                if x == 0:
                    raise FormulaError("division by zero", t.col)
                coeff = coeff / x
            elif _is_matrix(x) or isinstance(x, _Eye):
                mats.append((t.col, x))
            else:
                coeff = coeff * x
        real = [(c, m) for c, m in mats if not isinstance(m, _Eye)]
        for _c, m in mats:
            if isinstance(m, _Eye):
                coeff = coeff * m.coeff
        if not real:
            return _Eye(coeff) if mats else coeff
        for (_, a), (c1, b) in itertools.pairwise(real):
            self.same(a.shape[1], b.shape[0], f"shapes do not compose: {_shape_text(a)} times {_shape_text(b)}", c1)
        return product(coeff, *[m for _, m in real])

    def _b_T(self, n):
        x = self._build(n.args[0])
        if isinstance(x, _Eye) or not _is_matrix(x):
            return x
        return transpose(x)

    def _b_pow(self, n):
        base = self._build(n.args[0])
        p = n.value
        if isinstance(base, _Eye):
            return _Eye(base.coeff ** p)
        if not _is_matrix(base):
            return base ** p
        self.square(base, "a power", n.col)
        if p.is_integer and abs(p) > MAX_MATRIX_POWER:
            raise FormulaError(f"a matrix power is at most {MAX_MATRIX_POWER} in size, got {p}", n.col)
        out = matrix_power(base, p, n.col)
        check_size(out, n.col, "the power")
        return out

    def _b_inner(self, n):
        a, b = (self._build(x) for x in n.args)
        if isinstance(a, _Eye) and _is_matrix(b):
            a = product(a.coeff, Identity(b.shape[0]))
        if isinstance(b, _Eye) and _is_matrix(a):
            b = product(b.coeff, Identity(a.shape[0]))
        if not (_is_matrix(a) and _is_matrix(b)):
            raise FormulaError("<A, B> takes two matrices", n.col)
        for k in (0, 1):
            self.same(a.shape[k], b.shape[k], f"<A, B> needs equal shapes, got {_shape_text(a)} and "
                      f"{_shape_text(b)}", n.col)
        return Inner(a, b)

    def _b_norm(self, n):
        x = self._build(n.args[0])
        if not _is_matrix(x):
            raise FormulaError("a matrix norm takes a matrix", n.col)
        if n.value == "op":
            return OpNorm(x)
        if n.value == "*":
            return NuclearNorm(x)
        return sqrt(Inner(x, x))

    def _b_hstack(self, n):
        blocks = [self._build(b) for b in n.args]
        for b, node in zip(blocks, n.args, strict=False):
            if not _is_matrix(b):
                raise FormulaError("a block row [A | B] holds matrices", node.col)
            self.same(blocks[0].shape[0], b.shape[0], f"blocks of [A | B] need equal rows, got "
                      f"{_shape_text(blocks[0])} and {_shape_text(b)}", node.col)
        return HStack(*blocks)

    def _matrix_power_call(self, n, args):
        k = self.power_exponent(n, args)
        self.square(args[0], "a power", n.col)
        if abs(k) > MAX_MATRIX_POWER:
            raise FormulaError(f"a matrix power is at most {MAX_MATRIX_POWER} in size, got {k}", n.col)
        return matrix_power(args[0], k, n.col)

    def _b_call(self, n):
        name = n.value
        args = [self._build(a) for a in n.args]
        need_one = {"msign", "inv", "sqrtm", "tr", "trace", "sqrt", "transpose"}
        if name not in FUNCTIONS:
            raise FormulaError(f"unknown function {name!r}; known functions: {', '.join(FUNCTIONS)}", n.col)
        if (out := self.notation_call(name, n, args)) is not None:
            return out
        if name == "matrix_power":
            return self._matrix_power_call(n, args)
        if name in need_one and len(args) != 1:
            raise FormulaError(f"{name} takes one argument, got {len(args)}", n.col)
        if name == "sqrt":
            if _is_matrix(args[0]) or isinstance(args[0], _Eye):
                raise FormulaError("sqrt is the scalar square root; write sqrtm(X) for a matrix", n.col)
            return sqrt(args[0])
        if name == "blockdiag":
            if not all(_is_matrix(a) for a in args):
                raise FormulaError("blockdiag takes matrices", n.col)
            return BlockDiag(*args)
        x = args[0]
        if isinstance(x, _Eye):
            raise FormulaError(f"{name}(I) needs a size", n.col)
        if not _is_matrix(x):
            raise FormulaError(f"{name} takes a matrix, got the scalar {x}", n.col)
        if name == "msign":
            return Msign(x)
        if name == "transpose":
            return transpose(x)
        self.square(x, name, n.col)
        if name == "inv":
            return matrix_power(x, Integer(-1), n.col)
        if name == "sqrtm":
            return matrix_power(x, S.Half, n.col)
        return Inner(Identity(x.shape[0]), x)


def gram_of(expr):
    """``(W, λ, side)`` when ``expr`` is ``WᵀW + λI`` (right) or ``WWᵀ + λI`` (left), else None."""
    expr = tidy(expr)
    damping = S.Zero
    if isinstance(expr, MatAdd):
        rest = []
        for t in expr.args:
            c, mats = t.as_coeff_matrices() if isinstance(t, MatMul) else (S.One, [t])
            if len(mats) == 1 and isinstance(mats[0], Identity):
                damping += c
            else:
                rest.append(t)
        if len(rest) != 1 or damping == 0:
            return None
        expr = rest[0]
    if isinstance(expr, (GramSqrt, GramInvSqrt)):
        return None
    if not isinstance(expr, MatMul):
        return None
    coeff, mats = expr.as_coeff_matrices()
    if coeff != 1 or len(mats) % 2:
        return None
    k = len(mats) // 2
    left, right = product(*mats[:k]), product(*mats[k:])
    if tidy(transpose(left)) != right:
        return None
    if len(left.atoms(Transpose)) > len(right.atoms(Transpose)):
        return (right, damping, "right")  # Wᵀ W with W = right
    return (left, damping, "left")  # W Wᵀ with W = left


def _gram_root(base, damping, side, p):
    if p == S.Half:
        return GramSqrt(base, damping, side)
    if p == -S.Half:
        return GramInvSqrt(base, damping, side)
    w = base
    gram = product(transpose(w), w) if side == "right" else product(w, transpose(w))
    if damping != 0:
        gram = total(gram, product(damping, Identity(gram.shape[0])))
    if p.is_integer:
        if p > 0:
            return product(*([gram] * int(p)))
        return Inverse(product(*([gram] * int(-p))))
    return GramPower(base, damping, side, p)


def _psd_term(t) -> bool:
    c, mats = t.as_coeff_matrices() if isinstance(t, MatMul) else (S.One, [t])
    rest = product(*mats)
    return bool(c.is_positive) and (isinstance(rest, Identity) or SPD in facts_of(rest) or gram_of(rest) is not None)


def evidently_psd(x) -> bool:
    """Whether ``x`` is symmetric positive semidefinite by construction: a matrix that carries the ``spd`` fact
    (a declared one, a Gram root, ``Σ``), or a sum of Gram matrices, such matrices and ``I`` with positive
    coefficients."""
    if SPD in facts_of(x):
        return True
    return isinstance(x, MatAdd) and all(_psd_term(t) for t in x.args)


def matrix_power(x, p, col=None):
    """``x^p``: integer powers of square matrices; rational powers of Gram matrices, Gram roots, ``Σ`` and
    other matrices PSD by construction (:func:`evidently_psd`)."""
    p = Rational(p)
    if x.shape[0] != x.shape[1]:
        raise FormulaError(f"a power needs a square matrix, got {_shape_text(x)}", col)
    if isinstance(x, (GramSqrt, GramInvSqrt)):
        return _gram_root(x.base, x.damping, x.side, x.exponent * p)
    if not p.is_integer and isinstance(x, Singular) and x.part == "all":
        return Singular(x.base, x.power * p)
    if not p.is_integer and isinstance(x, PsdPower):
        return PsdPower(x.arg, x.power * p)
    g = gram_of(x)
    if g is not None and not (p.is_integer and p > 0):
        w, damping, side = g
        return _gram_root(w, damping, side, p)
    if p == 1:
        return x
    if p == 0:
        return Identity(x.shape[0])
    if p.is_integer:
        if p > 0:
            return product(*([x] * int(p)))
        if isinstance(x, Inverse):
            return matrix_power(x.arg, -p, col)
        return Inverse(x) if p == -1 else Inverse(product(*([x] * int(-p))))
    if evidently_psd(x):
        return PsdPower(x, p)
    raise FormulaError(f"fractional power {p} needs a matrix that is positive semidefinite by construction: a Gram "
                       "matrix (AᵀA or AAᵀ, + λI, or a name defined as one: L = G G^T), a Gram root C_W, Σ, a "
                       "matrix declared spd, or a sum of these; or write it with msign", col)


def parse(text: str, namespace: dict, declare=None) -> Basic:
    """The SymPy expression for ``text`` with names from ``namespace`` (see :class:`Builder`)."""
    return Builder(namespace, declare).build(parse_tree(text))


def conform(expr, like):
    """``expr`` as the zero matrix of ``like``'s shape when it is the number 0 and ``like`` is a matrix (``A - A =
    0``), else ``expr``."""
    if not _is_matrix(expr) and expr == 0 and _is_matrix(like):
        return ZeroMatrix(*like.shape)
    return expr


def shape_of(expr) -> tuple | None:
    """The shape of a matrix expression, None for a scalar."""
    return tuple(expr.shape) if _is_matrix(expr) else None


__all__ = ["Builder", "conform", "evidently_psd", "gram_of", "matrix_power", "parse", "shape_of"]
