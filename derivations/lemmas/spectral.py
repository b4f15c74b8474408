"""The singular value decomposition and what follows from it, shapes and operation counts (the classics' lemmas).

Nodes. ``SvdFactor(G, "left")`` and ``SvdFactor(G, "right")`` are ``U`` and ``V`` of the thin SVD
``G = U Σ Vᵀ`` of a matrix with at least as many rows as columns and full column rank; ``Singular(G,
p, part, r)`` is ``Σ^p`` (``part`` ``"head"``: only ``σ_1 … σ_r`` kept, ``"tail"``: only ``σ_{r+1} …``);
``SingularValue(G, k)`` is ``σ_k``; ``SingularTail(G, r)`` is ``(Σ_{i>r} σ_i²)^{1/2}``;
``TruncatedSvd(G, r)`` is the rank-``r`` truncation ``A_r``; ``PsdPower(A, p)`` is the power of a
symmetric positive (semi)definite matrix through its eigendecomposition; ``Group(X)`` keeps a
product's parentheses (``(Q Kᵀ) V`` is not ``Q (Kᵀ V)`` for a cost); ``Flops(X)``, ``Entries(X)``
and ``Rank(X)`` are the operation count of evaluating ``X`` as written, the number of entries of
``X`` and the rank of ``X``. Every node evaluates independently of the lemmas that rewrite it: the
SVD by LAPACK or mpmath, ``Flops`` by executing the products in a counting loop, ``Rank`` from the
singular values at the working precision.

Lemmas. Equalities are rewrites checked like the other families; the rank lemmas are bounds
(``before ≤ after``) with a self-check of their own.
"""

from __future__ import annotations

import mpmath
import numpy as np
import sympy
from sympy import Basic, Expr, Rational, S, sympify
from sympy.core.symbol import Str
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixExpr, MatrixSymbol, Transpose

from derivations.engine.algebra import product, tidy, total, transpose
from derivations.engine.evaluate import EvaluationError, InstanceSampler, evaluate, free_symbols
from derivations.engine.norm_nodes import FrobeniusNorm
from derivations.engine.vocabulary import (
    FULL_COLUMN_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    FactMatrix,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    Msign,
    OpNorm,
    _Derived,
    dimension,
    facts_of,
    positive_symbol,
)
from derivations.lemmas.base import _SMALL, Case, Lemma, NotApplicable, _fresh, _k, _m, _n, rewrite_nodes


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


# ---- self-check instances -------------------------------------------------------------------------
def _full(name, rows=_m, cols=_n):
    return FactMatrix(name, rows, cols, [FULL_COLUMN_RANK])


_r = dimension("r")
_SVD_SIZES = {**_SMALL, _r: 2}


def _sampler(**extra):
    return InstanceSampler({**_SVD_SIZES, **extra})


# ---- Σ: the SVD substitution ------------------------------------------------------------------------
def _svd_rewrite(expr, *, matrix, **_):
    """Every free ``G`` (outside derived nodes) → ``U Σ Vᵀ``."""
    if FULL_COLUMN_RANK not in facts_of(matrix):
        raise NotApplicable(f"the SVD with Σ invertible needs {matrix} of full column rank (not known)")
    u, s, v = svd_parts(matrix)
    new = product(u, s, transpose(v))
    condition = (f"{matrix} = U Σ Vᵀ: U has orthonormal columns, V is orthogonal, "
                 f"Σ = diag(σ_1 ≥ … ≥ σ_n > 0) ({matrix} has full column rank)")
    return rewrite_nodes(expr, lambda e: (new, [condition]) if e == matrix else None, f"no free {matrix}",
                         normalize=tidy)


def _svd_ids():
    x = _full("X")
    u, s, v = svd_parts(x)
    return [Case(x, product(u, s, transpose(v)), {"matrix": x})], _sampler()


SVD = Lemma(
    key="svd", number="Σ", title="Singular value decomposition",
    statement=(r"G \in \mathbb{R}^{m\times n},\ m \ge n,\ \operatorname{rank} G = n:\ G = U \Sigma V^{\top},\ "
               r"U^{\top}U = V^{\top}V = VV^{\top} = I,\ \Sigma = \operatorname{diag}(\sigma_1 \ge \dots \ge \sigma_n > 0)"),
    conditions=(r"G \text{ has full column rank}",), rewrite=_svd_rewrite, identities=_svd_ids,
    not_modelled="the SVD factors are computed, not polynomial in the entries",
)


# ---- I: orthonormal factors cancel ------------------------------------------------------------------
def _cancel_rewrite(expr, **_):
    """``Uᵀ U → I`` for ``U`` with orthonormal columns and ``W Wᵀ → I`` for ``W`` with orthonormal rows."""
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        mats, conditions = list(mats), []
        i = 0
        while i < len(mats) - 1:
            a, b = mats[i], mats[i + 1]
            if a == transpose(b) and ORTHONORMAL_COLUMNS in facts_of(b):
                conditions.append(f"{b} has orthonormal columns")
            elif b == transpose(a) and ORTHONORMAL_ROWS in facts_of(a):
                conditions.append(f"{a} has orthonormal rows")
            else:
                i += 1
                continue
            mats[i:i + 2] = [Identity(b.shape[1])]
            mats = [m for m in mats if not isinstance(m, Identity)] or [Identity(b.shape[1])]
            i = max(i - 1, 0)
        if not conditions:
            return None
        return product(coeff, *mats), conditions

    return rewrite_nodes(expr, rule, "no UᵀU with orthonormal columns (or WWᵀ with orthonormal rows)")


def _cancel_ids():
    x = _full("X")
    u, s, v = svd_parts(x)
    return [(product(transpose(u), u), Identity(_n)), (product(v, transpose(v)), Identity(_n)),
            (product(s, transpose(v), v, s), product(s, s))], _sampler()


ORTHONORMAL_CANCEL = Lemma(
    key="orthonormal_cancel", number="I", title="Orthonormal factors cancel",
    statement=r"U^{\top}U = I \text{ (orthonormal columns)},\quad VV^{\top} = I \text{ (orthonormal rows)}",
    conditions=(r"U \text{ has orthonormal columns (or } V \text{ orthonormal rows)}",),
    rewrite=_cancel_rewrite, identities=_cancel_ids,
    not_modelled="orthonormality of computed SVD factors is not encoded in the explicit model",
)


# ---- Σp: powers of the same diagonal matrix add ---------------------------------------------------
def _diag_powers_rewrite(expr, **_):
    """``Σ^p Σ^q → Σ^{p+q}`` (``Σ^0 → I``) for adjacent powers of the same full ``Σ``."""
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        out, hit = [], False
        for m in mats:
            prev = out[-1] if out else None
            if (isinstance(m, Singular) and isinstance(prev, Singular) and m.part == prev.part == "all"
                    and m.base == prev.base):
                out[-1] = Singular(m.base, prev.power + m.power)
                hit = True
            else:
                out.append(m)
        if not hit:
            return None
        out = [Identity(m.shape[0]) if isinstance(m, Singular) and m.power == 0 else m for m in out]
        return product(coeff, *out), []

    return rewrite_nodes(expr, rule, "no adjacent powers of the same Σ")


def _diag_powers_ids():
    x = _full("X")
    s = Singular(x)
    return [(product(s, s, s), Singular(x, 3)),
            (product(Singular(x, Rational(-1, 2)), s, Singular(x, Rational(-1, 2))), Identity(_n))], _sampler()


DIAGONAL_POWERS = Lemma(
    key="diagonal_powers", number="Σp", title="Powers of a positive diagonal matrix add",
    statement=r"\Sigma^{p}\Sigma^{q} = \Sigma^{p+q},\quad \Sigma^{0} = I\quad (\Sigma \text{ diagonal}, \Sigma > 0)",
    conditions=(r"\Sigma \text{ diagonal with positive entries}",),
    rewrite=_diag_powers_rewrite, identities=_diag_powers_ids,
    not_modelled="fractional powers of Σ have no polynomial model",
)


# ---- f: spectral calculus -----------------------------------------------------------------------------
def _gram_power_rewrite(expr, **_):
    """``(WWᵀ)^p`` or ``(WᵀW)^p`` written as a Gram root (``C_W``, ``C_W⁻¹``, a Gram power) → ``PsdPower``."""
    def rule(e):
        if isinstance(e, GramSqrt | GramInvSqrt) and e.damping == 0:
            return PsdPower(e.gram(), e.exponent), []
        return None

    return rewrite_nodes(expr, rule, "no undamped Gram root or Gram power")


def _gram_power_ids():
    x = _full("X")
    return [(GramPower(x, 0, "right", Rational(-1, 4)), PsdPower(product(transpose(x), x), Rational(-1, 4))),
            (GramInvSqrt(x), PsdPower(product(transpose(x), x), Rational(-1, 2)))], _sampler()


GRAM_POWER = Lemma(
    key="gram_power", number="Gp", title="A Gram root is a PSD power of the Gram matrix",
    statement=r"(W^{\top}W)^{p} \text{ and } (WW^{\top})^{p}: \text{ powers of symmetric PSD matrices}",
    conditions=(r"p < 0 \text{ needs the Gram matrix positive definite}",),
    rewrite=_gram_power_rewrite, identities=_gram_power_ids,
    not_modelled="matrix powers have no polynomial model",
)


def _spectral_rewrite(expr, **_):
    """``(Q D Qᵀ)^p → Q D^p Qᵀ`` for an orthogonal ``Q`` and ``D = Σ^q`` positive diagonal."""
    def rule(e):
        if not isinstance(e, PsdPower) or not isinstance(e.arg, MatMul):
            return None
        coeff, mats = e.arg.as_coeff_matrices()
        if coeff != 1 or len(mats) != 3:
            return None
        q, dg, qt = mats
        if not (isinstance(dg, Singular) and dg.part == "all" and qt == transpose(q)):
            return None
        if not {ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS} <= facts_of(q):
            raise NotApplicable(f"(Q D Qᵀ)^p = Q D^p Qᵀ needs Q orthogonal; {q} is not known to be square orthogonal")
        return (product(q, Singular(dg.base, dg.power * e.power), qt),
                [f"{q} is orthogonal", f"{dg} is diagonal with positive entries"])

    return rewrite_nodes(expr, rule, "no power of Q D Qᵀ with Q orthogonal and D diagonal")


def _spectral_ids():
    x = _full("X", _n, _n)
    u, s, v = svd_parts(x)
    return [(PsdPower(product(u, Singular(x, 2), transpose(u)), Rational(-1, 4)),
             product(u, Singular(x, Rational(-1, 2)), transpose(u))),
            (PsdPower(product(v, s, transpose(v)), 3), product(v, Singular(x, 3), transpose(v)))], _sampler()


SPECTRAL_CALCULUS = Lemma(
    key="spectral_calculus", number="f", title="Spectral calculus of a symmetric positive definite matrix",
    statement=r"Q^{\top}Q = QQ^{\top} = I,\ D = \operatorname{diag}(d_i > 0):\ (Q D Q^{\top})^{p} = Q D^{p} Q^{\top}",
    conditions=(r"Q \text{ orthogonal}", r"D \text{ diagonal with positive entries}"),
    rewrite=_spectral_rewrite, identities=_spectral_ids,
    not_modelled="fractional matrix powers have no polynomial model",
)


# ---- 5s: msign from the SVD --------------------------------------------------------------------------
def _msign_svd_rewrite(expr, **_):
    """``U Vᵀ → msign(G)`` for the SVD factors of one ``G``."""
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        for i in range(len(mats) - 1):
            a, b = mats[i], mats[i + 1]
            if (isinstance(a, SvdFactor) and a.side == "left" and isinstance(b, Transpose)
                    and b.arg == SvdFactor(a.base, "right")):
                return (product(coeff, *mats[:i], Msign(a.base), *mats[i + 2:]),
                        [f"msign({a.base}) = U Vᵀ over the nonzero singular values ({a.base} has full column rank)"])
        return None

    return rewrite_nodes(expr, rule, "no U Vᵀ of one SVD")


def _msign_svd_ids():
    x = _full("X")
    u, _, v = svd_parts(x)
    return [(product(u, transpose(v)), Msign(x))], _sampler()


MSIGN_SVD = Lemma(
    key="msign_svd", number="5s", title="msign is U Vᵀ (definition)",
    statement=r"G = U\Sigma V^{\top},\ \Sigma > 0:\ \operatorname{msign}(G) = U V^{\top}",
    conditions=(r"G \text{ has full column rank}",), rewrite=_msign_svd_rewrite, identities=_msign_svd_ids,
    not_modelled="msign has no polynomial model",
)


# ---- factoring common outer factors -----------------------------------------------------------------
def _factor_rewrite(expr, **_):
    """``Σ_i c_i L M_i R → L (Σ_i c_i M_i) R`` when every term starts with ``L`` and ends with ``R``."""
    def rule(e):
        if not isinstance(e, MatAdd):
            return None
        split = []
        for t in e.args:
            coeff, mats = t.as_coeff_matrices() if isinstance(t, MatMul) else (S.One, (t,))
            if len(mats) < 3:
                return None
            split.append((coeff, mats))
        first, last = split[0][1][0], split[0][1][-1]
        if any(m[0] != first or m[-1] != last for _, m in split):
            return None
        return product(first, total(*[product(c, *m[1:-1]) for c, m in split]), last), []

    return rewrite_nodes(expr, rule, "no sum whose terms share their first and last factors")


def _factor_ids():
    a, b, c = _fresh("A", _k, _n), _fresh("B", _n, _n), _fresh("C", _n, _n)
    e = _fresh("E", _n, _m)
    t = positive_symbol("t")
    return [(total(product(a, b, e), product(t, a, c, e)), product(a, total(b, product(t, c)), e))], _sampler()


FACTOR_OUTER = Lemma(
    key="factor_outer", number="Rf", title="Common outer factors of a sum",
    statement=r"\textstyle\sum_i c_i\, L M_i R = L \big(\sum_i c_i M_i\big) R",
    rewrite=_factor_rewrite, identities=_factor_ids, algebraic=True,
)


# ---- truncated SVD ----------------------------------------------------------------------------------------
def _truncated_rewrite(expr, **_):
    """``A_r → U Σ_{≤r} Vᵀ``."""
    def rule(e):
        if isinstance(e, TruncatedSvd):
            u, _, v = svd_parts(e.base)
            return product(u, Singular(e.base, 1, "head", e.r), transpose(v)), [f"0 ≤ {e.r} ≤ {e.base.shape[1]}"]
        return None

    return rewrite_nodes(expr, rule, "no truncated SVD A_r")


def _truncated_ids():
    x = _full("X")
    u, _, v = svd_parts(x)
    return [(TruncatedSvd(x, _r), product(u, Singular(x, 1, "head", _r), transpose(v)))], _sampler()


TRUNCATED_SVD = Lemma(
    key="truncated_svd", number="Σr", title="Truncated SVD (definition)",
    statement=r"A_r = \textstyle\sum_{i \le r} \sigma_i u_i v_i^{\top} = U \Sigma_{\le r} V^{\top}",
    conditions=(r"0 \le r \le n",), rewrite=_truncated_rewrite, identities=_truncated_ids,
    not_modelled="the SVD factors are computed, not polynomial in the entries",
)


def _split_rewrite(expr, **_):
    """``Σ − Σ_{≤r} → Σ_{>r}``."""
    def rule(e):
        if not isinstance(e, MatAdd) or len(e.args) != 2:
            return None
        full = [t for t in e.args if isinstance(t, Singular) and t.part == "all" and t.power == 1]
        head = [t for t in e.args if isinstance(t, MatMul) and t.as_coeff_matrices()[0] == -1
                and len(t.as_coeff_matrices()[1]) == 1 and isinstance(t.as_coeff_matrices()[1][0], Singular)]
        if not full or not head:
            return None
        h = head[0].as_coeff_matrices()[1][0]
        if h.part != "head" or h.power != 1 or h.base != full[0].base:
            return None
        return Singular(h.base, 1, "tail", h.r), []

    return rewrite_nodes(expr, rule, "no Σ − Σ_{≤r}")


def _split_ids():
    x = _full("X")
    return [(total(Singular(x), product(-1, Singular(x, 1, "head", _r))), Singular(x, 1, "tail", _r))], _sampler()


DIAGONAL_SPLIT = Lemma(
    key="diagonal_split", number="Σs", title="Head and tail of the singular values",
    statement=r"\Sigma = \Sigma_{\le r} + \Sigma_{> r}",
    rewrite=_split_rewrite, identities=_split_ids, not_modelled="the SVD factors are computed",
)


def _diag_norm_rewrite(expr, **_):
    """``‖Σ_{>r}‖_op → σ_{r+1}`` and ``‖Σ_{>r}‖_F → (Σ_{i>r} σ_i²)^{1/2}`` (``σ`` sorted, descending)."""

    def rule(e):
        if isinstance(e, OpNorm | FrobeniusNorm) and isinstance(e.args[0], Singular):
            s = e.args[0]
            if s.part != "tail" or s.power != 1:
                return None
            value = SingularValue(s.base, s.r + 1) if isinstance(e, OpNorm) else SingularTail(s.base, s.r)
            return value, ["σ_1 ≥ σ_2 ≥ … ≥ 0 (singular values sorted)"]
        return None

    return rewrite_nodes(expr, rule, "no operator or Frobenius norm of Σ_{>r}")


def _diag_norm_ids():
    x = _full("X")
    tail = Singular(x, 1, "tail", _r)
    return [(OpNorm(tail), SingularValue(x, _r + 1)), (FrobeniusNorm(tail), SingularTail(x, _r))], _sampler()


DIAGONAL_NORMS = Lemma(
    key="diagonal_norms", number="σ", title="Norms of a diagonal matrix",
    statement=(r"\|\Sigma_{>r}\|_{\mathrm{op}} = \max_{i>r}\sigma_i = \sigma_{r+1},\quad"
               r"\|\Sigma_{>r}\|_F = \big(\textstyle\sum_{i>r}\sigma_i^2\big)^{1/2}"),
    conditions=(r"\sigma_1 \ge \sigma_2 \ge \dots \ge 0",),
    rewrite=_diag_norm_rewrite, identities=_diag_norm_ids, not_modelled="norms have no polynomial model",
)


# ---- association and cost ---------------------------------------------------------------------------------
def _assoc_rewrite(expr, **_):
    """``(A B) C → A (B C)``: the first parenthesized pair regrouped to the right."""
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        for i in range(len(mats) - 1):
            g = mats[i]
            if isinstance(g, Group) and isinstance(g.arg, MatMul):
                inner = g.arg.as_coeff_matrices()
                a, rest = inner[1][0], product(inner[0], *inner[1][1:])
                return product(coeff, *mats[:i], a, Group(product(rest, mats[i + 1])), *mats[i + 2:]), []
        return None

    return rewrite_nodes(expr, rule, "no product (A B) C to regroup")


def _assoc_ids():
    a, b, c = _fresh("A", _m, _k), _fresh("B", _k, _m), _fresh("C", _m, _n)
    return [(product(Group(product(a, b)), c), product(a, Group(product(b, c))))], _sampler()


ASSOCIATIVITY = Lemma(
    key="associativity", number="A", title="Associativity of the matrix product",
    statement=r"(AB)C = A(BC)",
    rewrite=_assoc_rewrite, identities=_assoc_ids, not_modelled="the grouping node is not in the explicit model",
)


def product_cost(expr):
    """``(cost, shape)`` of evaluating ``expr`` as written: ``2 m k p`` per product of an ``m × k`` and a
    ``k × p`` operand (a multiplication and an addition per term of each entry), groups first."""
    if isinstance(expr, Group):
        return product_cost(expr.arg)
    if isinstance(expr, MatMul):
        _, mats = expr.as_coeff_matrices()
        total_cost, shape = product_cost(mats[0])
        for m in mats[1:]:
            c, s = product_cost(m)
            total_cost += c + 2 * shape[0] * shape[1] * s[1]
            shape = (shape[0], s[1])
        return total_cost, shape
    if isinstance(expr, Transpose):
        c, (rows, cols) = product_cost(expr.arg)
        return c, (cols, rows)
    if getattr(expr, "is_Matrix", False) and not expr.atoms(MatMul):
        return S.Zero, tuple(expr.shape)
    raise NotApplicable(f"no cost model for {expr}")


def _flops_rewrite(expr, **_):
    """``flops(X) →`` the sum over the products of ``X`` of ``2 m k p``, read off the shapes."""
    def rule(e):
        if isinstance(e, Flops):
            return product_cost(e.args[0])[0], [("a product of an m×k and a k×p matrix costs m·p·k "
                                                 "multiplications and m·p·k additions")]
        return None

    return rewrite_nodes(expr, rule, "no flop count")


def _flops_ids():
    a, b, c = _fresh("A", _m, _k), _fresh("B", _k, _m), _fresh("C", _m, _n)
    return [(Flops(product(Group(product(a, b)), c)), 2 * _m * _k * _m + 2 * _m * _m * _n),
            (Flops(product(a, Group(product(b, c)))), 2 * _k * _m * _n + 2 * _m * _k * _n)], _sampler()


PRODUCT_COST = Lemma(
    key="product_cost", number="Fl", title="Cost of a matrix product",
    statement=r"\operatorname{flops}(A_{m\times k} B_{k\times p}) = 2mkp,\ \text{summed over the products as grouped}",
    rewrite=_flops_rewrite, identities=_flops_ids, not_modelled="a count, checked by executing the products",
)


def _entries_rewrite(expr, **_):
    """``#(X) → rows(X) · cols(X)``."""
    def rule(e):
        if isinstance(e, Entries):
            rows, cols = e.args[0].shape
            return rows * cols, []
        return None

    return rewrite_nodes(expr, rule, "no entry count")


def _entries_ids():
    a, b = _fresh("A", _m, _k), _fresh("B", _k, _n)
    return [(Entries(a), _m * _k), (Entries(a) + Entries(b), _m * _k + _k * _n)], _sampler()


ENTRY_COUNT = Lemma(
    key="entry_count", number="N", title="Entries of a matrix",
    statement=r"\#(A) = mn \text{ for } A \in \mathbb{R}^{m \times n}",
    rewrite=_entries_rewrite, identities=_entries_ids, not_modelled="a count, checked on the values",
)


def _algebra_rewrite(expr, *, how="factor", **_):
    """The scalar part rewritten by SymPy's ``factor`` (or ``expand``, ``cancel``)."""
    fn = {"factor": sympy.factor, "expand": sympy.expand, "cancel": sympy.cancel}[how]
    if getattr(expr, "is_Matrix", False) or expr.atoms(_Count) or expr.atoms(MatrixSymbol):
        raise NotApplicable("scalar algebra applies to expressions in the dimensions only")
    new = fn(expr)
    if new == expr:
        raise NotApplicable(f"{how} leaves {expr} unchanged")
    return new, []


def _algebra_ids():
    return [Case(_m * _k + _k * _n, _k * (_m + _n), {"how": "factor"}),
            Case(_k * (_m + _n), _m * _k + _k * _n, {"how": "expand"})], _sampler()


SCALAR_ALGEBRA = Lemma(
    key="scalar_algebra", number="Q", title="Polynomial algebra in the dimensions",
    statement=r"\text{factoring, expanding and cancelling polynomials in the dimensions}",
    rewrite=_algebra_rewrite, identities=_algebra_ids, not_modelled="polynomials in the dimensions",
)


# ---- rank bounds (inequalities: before ≤ after) ------------------------------------------------------
def _bound_check(pairs_fn):
    def check(rng, lemma):
        pairs, sampler = pairs_fn()
        worst, fired = 0.0, 0.0
        for case in pairs:
            env = sampler.sample(rng, free_symbols(case.lhs, case.rhs))
            lhs, rhs = (float(evaluate(e, env, dims=sampler.dims)) for e in (case.lhs, case.rhs))
            worst = max(worst, max(0.0, lhs - rhs))
            new, _ = lemma.apply(case.lhs, **case.params)
            got = float(evaluate(new, env, dims=sampler.dims))
            fired = max(fired, abs(got - float(evaluate(case.rhs, env, dims=sampler.dims))))
        return {"lhs ≤ rhs": worst, "rewrite gives the bound": fired}
    return check


def _rank_product_rewrite(expr, **_):
    """``rank(A B …) → rank(A)``: the column space of a product lies in that of its first factor."""
    def rule(e):
        if isinstance(e, Rank) and isinstance(e.args[0], MatMul):
            _, mats = e.args[0].as_coeff_matrices()
            if len(mats) > 1:
                return Rank(mats[0]), [f"the column space of {e.args[0]} lies in that of {mats[0]}"]
        return None

    return rewrite_nodes(expr, rule, "no rank of a product")


def _rank_product_ids():
    a, b = _fresh("A", _m, _n), _fresh("B", _n, _k)
    return [Case(Rank(product(a, b)), Rank(a)), Case(Rank(product(b.T, a.T)), Rank(b.T))], _sampler()


RANK_PRODUCT = Lemma(
    key="rank_product", number="ρ", title="Rank of a product",
    statement=r"\operatorname{rank}(AB) \le \min(\operatorname{rank} A, \operatorname{rank} B)",
    rewrite=_rank_product_rewrite, identities=_rank_product_ids, check=_bound_check(_rank_product_ids),
    not_modelled="an inequality",
)


def _rank_shape_rewrite(expr, **_):
    """``rank(A) → min(rows, cols)`` read off the shape of ``A``."""
    def rule(e):
        if isinstance(e, Rank):
            rows, cols = e.args[0].shape
            return Least(rows, cols), [f"{e.args[0]} is {rows}×{cols}"]
        return None

    return rewrite_nodes(expr, rule, "no rank")


def _rank_shape_ids():
    a = _fresh("A", _m, _n)
    return [Case(Rank(a), Least(_m, _n)), Case(Rank(a.T), Least(_n, _m))], _sampler()


RANK_SHAPE = Lemma(
    key="rank_shape", number="ρs", title="Rank is at most each dimension",
    statement=r"A \in \mathbb{R}^{m\times n}:\ \operatorname{rank} A \le \min(m, n)",
    rewrite=_rank_shape_rewrite, identities=_rank_shape_ids, check=_bound_check(_rank_shape_ids),
    not_modelled="an inequality",
)


def _min_rewrite(expr, *, keep, **_):
    """``min(x, y, …) → keep`` (one of the arguments)."""
    def rule(e):
        if isinstance(e, Least) and keep in e.args:
            return keep, []
        return None

    return rewrite_nodes(expr, rule, f"no min with the argument {keep}")


def _min_ids():
    return [Case(Least(_m, _n), _n, {"keep": _n}), Case(Least(_m, _n), _m, {"keep": _m})], _sampler()


MIN_BOUND = Lemma(
    key="min_bound", number="m", title="A minimum is at most each argument",
    statement=r"\min(x, y) \le y", rewrite=_min_rewrite, identities=_min_ids, check=_bound_check(_min_ids),
    not_modelled="an inequality",
)


#: lemmas whose steps are bounds (``before ≤ after``), not equalities
BOUND_LEMMAS = frozenset({RANK_PRODUCT.key, RANK_SHAPE.key, MIN_BOUND.key})

__all__ = [
    "ASSOCIATIVITY",
    "BOUND_LEMMAS",
    "DIAGONAL_NORMS",
    "DIAGONAL_POWERS",
    "DIAGONAL_SPLIT",
    "ENTRY_COUNT",
    "FACTOR_OUTER",
    "GRAM_POWER",
    "MIN_BOUND",
    "MSIGN_SVD",
    "ORTHONORMAL_CANCEL",
    "PRODUCT_COST",
    "RANK_PRODUCT",
    "RANK_SHAPE",
    "SCALAR_ALGEBRA",
    "SPECTRAL_CALCULUS",
    "SVD",
    "TRUNCATED_SVD",
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
    "product_cost",
    "svd_parts",
    "thin_svd",
]

