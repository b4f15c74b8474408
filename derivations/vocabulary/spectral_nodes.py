"""Nodes of the singular value decomposition, PSD powers, and counts (the vocabulary of the classics' lemmas).

``SvdFactor(G, "left")`` and ``SvdFactor(G, "right")`` are ``U`` and ``V`` of the thin SVD
``G = U Σ Vᵀ`` of a matrix with at least as many rows as columns and full column rank; ``Singular(G,
p, part, r)`` is ``Σ^p`` (``part`` ``"head"``: only ``σ_1 … σ_r`` kept, ``"tail"``: only ``σ_{r+1} …``);
``SingularValue(G, k)`` is ``σ_k``; ``SingularTail(G, r)`` is ``(Σ_{i>r} σ_i²)^{1/2}``;
``TruncatedSvd(G, r)`` is the rank-``r`` truncation ``A_r``; ``PsdPower(A, p)`` is the power of a
symmetric positive (semi)definite matrix through its eigendecomposition; ``Group(X)`` keeps a
product's parentheses (``(Q Kᵀ) V`` is not ``Q (Kᵀ V)`` for a cost); ``Flops(X)``, ``Entries(X)``
and ``Rank(X)`` are the operation count of evaluating ``X`` as written, the number of entries of
``X`` and the rank of ``X``. Every node evaluates independently of the lemmas that rewrite it
(:mod:`derivations.lemmas.spectral`, :mod:`derivations.lemmas.counting`): the SVD by LAPACK or mpmath,
``Flops`` by executing the products in a counting loop, ``Rank`` from the singular values at the
working precision.
"""

from __future__ import annotations

import mpmath
import numpy as np
from sympy import Basic, Expr, Rational, sympify
from sympy.core.symbol import Str
from sympy.matrices.expressions import MatMul, MatrixExpr, Transpose

from derivations.vocabulary.evaluate import EvaluationError
from derivations.vocabulary.nodes import ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS, SPD, SYMMETRIC, _Derived


# ---- the SVD at either precision ------------------------------------------------------------
def thin_svd(ev, base):
    """``(U, s, V)`` of the value of ``base`` with ``s`` descending (memoized per evaluator)."""
    key = ("thin svd", base)
    if key in ev.memo:
        return ev.memo[key]
    a = ev(base)
    if ev.backend.name == "mpmath":
        m, n = a.rows, a.cols
        if m < n:
            raise EvaluationError(f"the thin SVD of {base} needs rows >= columns, got {m}x{n}")
        u, s, vt = mpmath.svd_r(a, full_matrices=False, compute_uv=True)
        order = sorted(range(n), key=lambda i: -s[i])
        u = mpmath.matrix([[u[i, j] for j in order] for i in range(m)])
        v = mpmath.matrix([[vt[j, i] for j in order] for i in range(n)])
        out = (u, [s[j] for j in order], v)
    else:
        m, n = np.shape(a)
        if m < n:
            raise EvaluationError(f"the thin SVD of {base} needs rows >= columns, got {m}x{n}")
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        out = (u, list(s), vt.T)
    ev.memo[key] = out
    return out


def _diagonal(ev, values):
    n = len(values)
    out = mpmath.zeros(n, n) if ev.backend.name == "mpmath" else np.zeros((n, n))
    for i, v in enumerate(values):
        out[i, i] = v
    return out


def _power(ev, x, p: Rational):
    if p == 1:
        return x
    if p == 0:
        return ev.backend.scalar(1)
    if ev.backend.name == "mpmath":
        return mpmath.power(x, mpmath.mpf(p.p) / p.q)
    return float(x) ** (float(p.p) / p.q)


def _rational(p) -> Rational:
    p = sympify(p)
    if p.free_symbols:
        return p  # a lemma statement's pattern exponent (``Σ^p Σ^q = Σ^{p+q}``): a number in every instance
    if not p.is_Rational:
        raise ValueError(f"a power must be a rational number, got {p}")
    return Rational(p)


def _base_label(base) -> str:
    return str(getattr(base, "name", base))


# ---- nodes ------------------------------------------------------------------------------------
class SvdFactor(_Derived):
    """``U`` (side ``"left"``, ``m × n``, orthonormal columns) or ``V`` (``"right"``, ``n × n``, orthogonal)
    of the thin SVD ``G = U Σ Vᵀ`` of an ``m × n`` matrix ``G`` (``m ≥ n``)."""

    def __new__(cls, base, side):
        if str(side) not in ("left", "right"):
            raise ValueError(f"side must be 'left' or 'right', got {side!r}")
        return Basic.__new__(cls, base, Str(str(side)))

    @property
    def base(self):
        return self.args[0]

    @property
    def side(self) -> str:
        return self.args[1].name

    @property
    def shape(self):
        n = self.base.shape[1]
        return (self.base.shape[0], n) if self.side == "left" else (n, n)

    @property
    def facts(self):
        rows, cols = self.shape
        return frozenset({ORTHONORMAL_COLUMNS} | ({ORTHONORMAL_ROWS} if rows == cols else set()))

    def _numeric(self, ev):
        u, _, v = thin_svd(ev, self.base)
        return u if self.side == "left" else v

    def _degree(self, scaling):
        """Degree 0: ``cG = U (cΣ) Vᵀ`` has the singular vectors of ``G`` for ``c > 0``."""
        return scaling.invariant(self.base)

    def _sympystr(self, printer):
        return "U" if self.side == "left" else "V"

    def _latex(self, printer):
        return "U" if self.side == "left" else "V"


class Singular(_Derived):
    """``Σ^p = diag(σ_1^p, …, σ_n^p)`` of the thin SVD of ``base``; ``part`` ``"head"`` keeps ``σ_1 … σ_r``,
    ``"tail"`` keeps ``σ_{r+1} … σ_n`` (the others are zero)."""

    def __new__(cls, base, power=1, part="all", r=0):
        if str(part) not in ("all", "head", "tail"):
            raise ValueError(f"part must be all, head or tail, got {part!r}")
        return Basic.__new__(cls, base, _rational(power), Str(str(part)), sympify(r))

    base = SvdFactor.base

    @property
    def power(self) -> Rational:
        return self.args[1]

    @property
    def part(self) -> str:
        return self.args[2].name

    @property
    def r(self):
        return self.args[3]

    @property
    def shape(self):
        return (self.base.shape[1], self.base.shape[1])

    @property
    def facts(self):
        return frozenset({SYMMETRIC, SPD}) if self.part == "all" else frozenset({SYMMETRIC})

    def _eval_transpose(self):
        return self

    def _degree(self, scaling):
        """``p`` times the degree of ``G`` (the singular values of ``cG`` are ``c σ_i``)."""
        return scaling.times(self.power, scaling.degree(self.base))

    def _numeric(self, ev):
        _, s, _ = thin_svd(ev, self.base)
        r = ev.size(self.r) if self.part != "all" else 0
        if self.part != "all" and not 0 <= r <= len(s):
            raise EvaluationError(f"r = {r} outside 0..{len(s)}")
        keep = [self.part == "all" or (i < r) == (self.part == "head") for i in range(len(s))]
        zero = ev.backend.scalar(0)
        return _diagonal(ev, [_power(ev, x, self.power) if k else zero for x, k in zip(s, keep, strict=True)])

    def _sympystr(self, printer):
        sub = {"all": "", "head": f"_(<={self.r})", "tail": f"_(>{self.r})"}[self.part]
        return "Sigma" + sub + ("" if self.power == 1 else f"^({self.power})")

    def _latex(self, printer):
        sub = {"all": "", "head": rf"_{{\le {printer._print(self.r)}}}", "tail": rf"_{{> {printer._print(self.r)}}}"}
        return r"\Sigma" + sub[self.part] + ("" if self.power == 1 else f"^{{{printer._print(self.power)}}}")


class TruncatedSvd(_Derived):
    """``A_r = Σ_{i≤r} σ_i u_i v_iᵀ``: the rank-``r`` truncation of the SVD of ``base``."""

    def __new__(cls, base, r):
        return Basic.__new__(cls, base, sympify(r))

    base = SvdFactor.base

    @property
    def r(self):
        return self.args[1]

    @property
    def shape(self):
        return self.base.shape

    def _degree(self, scaling):
        """The degree of ``G`` (``(cG)_r = c G_r``)."""
        return scaling.degree(self.base)

    def _numeric(self, ev):
        u, s, v = thin_svd(ev, self.base)
        r = ev.size(self.r)
        sigma = _diagonal(ev, [x if i < r else ev.backend.scalar(0) for i, x in enumerate(s)])
        return ev.backend.matmul(ev.backend.matmul(u, sigma), ev.backend.transpose(v))

    def _sympystr(self, printer):
        return f"{_base_label(self.base)}_{self.r}"

    def _latex(self, printer):
        return f"{printer._print(self.base)}_{{{printer._print(self.r)}}}"


class PsdPower(MatrixExpr):
    """``A^p`` of a symmetric positive definite ``A`` (``Q diag(λ_i^p) Qᵀ`` for ``A = Q diag(λ) Qᵀ``)."""

    def __new__(cls, arg, power):
        return Basic.__new__(cls, sympify(arg), _rational(power))

    @property
    def arg(self):
        return self.args[0]

    @property
    def power(self) -> Rational:
        return self.args[1]

    @property
    def shape(self):
        return self.arg.shape

    @property
    def facts(self):
        return frozenset({SYMMETRIC})

    def _eval_transpose(self):
        return self

    def _degree(self, scaling):
        """``p`` times the degree of ``A``."""
        return scaling.times(self.power, scaling.degree(self.arg))

    def _numeric(self, ev):
        p = self.power
        scalar = mpmath.mpf(p.p) / p.q if ev.backend.name == "mpmath" else float(p.p) / p.q
        return ev.backend.psd_power(ev(self.arg), scalar)

    def _sympystr(self, printer):
        return f"({printer._print(self.arg)})^({self.power})"

    def _latex(self, printer):
        return rf"\left({printer._print(self.arg)}\right)^{{{printer._print(self.power)}}}"


class Group(MatrixExpr):
    """A parenthesized product ``(X)``: equal to ``X``, but evaluated (and counted) as one operand."""

    def __new__(cls, arg):
        return Basic.__new__(cls, sympify(arg))

    @property
    def arg(self):
        return self.args[0]

    @property
    def shape(self):
        return self.arg.shape

    def _numeric(self, ev):
        return ev(self.arg)

    def _degree(self, scaling):
        """The degree of ``X``."""
        return scaling.degree(self.arg)

    def _sympystr(self, printer):
        return f"({printer._print(self.arg)})"

    def _latex(self, printer):
        return rf"\left({printer._print(self.arg)}\right)"


class _Count(Expr):
    """A scalar read off one matrix expression (a count, a rank, a singular value)."""

    is_commutative = True
    is_real = True

    def __new__(cls, *args):
        return Basic.__new__(cls, *[sympify(a) for a in args])


class SingularValue(_Count):
    """``σ_k(G)``, the ``k``-th largest singular value (``k`` counts from 1; zero beyond the rank)."""

    def _numeric(self, ev):
        _, s, _ = thin_svd(ev, self.args[0])
        k = ev.size(self.args[1])
        return s[k - 1] if 1 <= k <= len(s) else ev.backend.scalar(0)

    def _sympystr(self, printer):
        return f"sigma_({printer._print(self.args[1])})"

    def _latex(self, printer):
        return rf"\sigma_{{{printer._print(self.args[1])}}}"


class SingularTail(_Count):
    """``(Σ_{i>r} σ_i(G)²)^{1/2}``."""

    def _numeric(self, ev):
        _, s, _ = thin_svd(ev, self.args[0])
        r = ev.size(self.args[1])
        return sum((x * x for x in s[r:]), ev.backend.scalar(0)) ** ev.backend.scalar(0.5)

    def _sympystr(self, printer):
        return f"sqrt(sum_(i>{printer._print(self.args[1])}) sigma_i^2)"

    def _latex(self, printer):
        return rf"\Big(\sum_{{i > {printer._print(self.args[1])}}} \sigma_i^2\Big)^{{1/2}}"


class Entries(_Count):
    """The number of entries of a matrix, counted on its value."""

    def _numeric(self, ev):
        a = ev(self.args[0])
        return ev.backend.scalar(a.rows * a.cols if ev.backend.name == "mpmath" else np.size(a))

    def _sympystr(self, printer):
        return f"entries({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\#\left({printer._print(self.args[0])}\right)"


class Flops(_Count):
    """Floating-point operations of evaluating a product as written (parentheses from :class:`Group`,
    otherwise left to right), counted by executing every product as a loop of multiply-adds."""

    def _numeric(self, ev):
        count = [0]

        def value(e):
            if isinstance(e, Group):
                return value(e.arg)
            if isinstance(e, MatMul):
                _, mats = e.as_coeff_matrices()
                acc = value(mats[0])
                for m in mats[1:]:
                    acc = _counted_product(acc, value(m), count)
                return acc
            if isinstance(e, Transpose):
                return value(e.arg).T
            return np.asarray(ev.backend.asarray(ev(e)).tolist() if ev.backend.name == "mpmath" else ev(e),
                              dtype=float)

        value(self.args[0])
        return ev.backend.scalar(count[0])

    def _sympystr(self, printer):
        return f"flops({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\operatorname{{flops}}\left({printer._print(self.args[0])}\right)"


def _counted_product(a, b, count):
    """``a @ b`` by explicit loops, adding one to ``count`` per multiplication and per addition."""
    m, k = a.shape
    k2, p = b.shape
    if k != k2:
        raise EvaluationError(f"shapes {a.shape} and {b.shape} do not compose")
    out = np.zeros((m, p))
    for i in range(m):
        for j in range(p):
            acc = 0.0
            for t in range(k):
                acc += a[i, t] * b[t, j]
                count[0] += 2
            out[i, j] = acc
    return out


class Least(_Count):
    """``min(x, y, …)`` of scalar expressions (dimensions, ranks)."""

    def _numeric(self, ev):
        return min(ev(a) for a in self.args)

    def _sympystr(self, printer):
        return "min(" + ", ".join(printer._print(a) for a in self.args) + ")"

    def _latex(self, printer):
        return r"\min\left(" + ", ".join(printer._print(a) for a in self.args) + r"\right)"


class Rank(_Count):
    """``rank(X)``: the number of singular values above ``10^{-(digits-10)}`` times the largest."""

    def _numeric(self, ev):
        a = ev(self.args[0])
        if ev.backend.name == "mpmath":
            s = mpmath.svd_r(a, compute_uv=False)
            tol = mpmath.mpf(10) ** (-ev.backend.dps + 10) * max(s)
            return ev.backend.scalar(sum(1 for x in s if x > tol))
        return ev.backend.scalar(int(np.linalg.matrix_rank(a)))

    def _sympystr(self, printer):
        return f"rank({printer._print(self.args[0])})"

    def _latex(self, printer):
        return rf"\operatorname{{rank}}\left({printer._print(self.args[0])}\right)"


def svd_parts(g):
    """``(U, Σ, V)`` of ``g`` as nodes."""
    return SvdFactor(g, "left"), Singular(g), SvdFactor(g, "right")


__all__ = [
    "Entries",
    "Flops",
    "Group",
    "Least",
    "PsdPower",
    "Rank",
    "Singular",
    "SingularTail",
    "SingularValue",
    "SvdFactor",
    "TruncatedSvd",
    "svd_parts",
    "thin_svd",
]
