"""The singular value decomposition and what follows from it (the classics' lemmas): the SVD
substitution, orthonormal factors cancelling, powers of ``Σ``, spectral calculus, ``msign`` from the
SVD, the truncated SVD and the norms of ``Σ``'s tail. The nodes they rewrite are in
:mod:`derivations.vocabulary.spectral_nodes`; the lemmas on shapes and operation counts in
:mod:`derivations.lemmas.counting`. Equalities are rewrites checked like the other families.
"""

from __future__ import annotations

import dataclasses

import mpmath
import numpy as np
from sympy import Rational, S, Symbol
from sympy.matrices.expressions import Identity, MatAdd, MatMul, Transpose

from derivations.lemmas.base import _SMALL, Case, Lemma, NotApplicable, _fresh, _k, _m, _n, rewrite_nodes, stated_by
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, tidy, total, transpose
from derivations.vocabulary.evaluate import InstanceSampler, evaluate
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    FactMatrix,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    Msign,
    OpNorm,
    _GramNode,
    dimension,
    facts_of,
    positive_symbol,
)
from derivations.vocabulary.norm_nodes import FrobeniusNorm
from derivations.vocabulary.spectral_nodes import (
    PsdPower,
    Singular,
    SingularTail,
    SingularValue,
    SvdFactor,
    TruncatedSvd,
    svd_parts,
)


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
    statement=stated_by(_svd_ids),
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
            (product(transpose(v), v), Identity(_n)),
            (product(s, transpose(v), v, s), product(s, s))], _sampler()


ORTHONORMAL_CANCEL = Lemma(
    key="orthonormal_cancel", number="U", title="Orthonormal factors cancel",
    statement=stated_by(_cancel_ids),
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


def _diag_powers_statement() -> Statement:
    """``Σ^p Σ^q = Σ^{p+q}`` and ``Σ^0 = I`` for ``Σ`` the singular values of a full-column-rank ``X`` (positive,
    diagonal), applied left to right until none applies; the self-check evaluates them at ``p = -3/4``,
    ``q = 5/3``."""
    x, p, q = _full("X"), Symbol("p"), Symbol("q")
    return Statement((Clause(product(Singular(x, p), Singular(x, q)), Singular(x, p + q)),
                      Clause(Singular(x, S.Zero), Identity(_n))),
                     closure="rewrite", sizes=(_SVD_SIZES, {_m: 40, _n: 16, _k: 24, _r: 2}),
                     scalars={p: Rational(-3, 4), q: Rational(5, 3)})


DIAGONAL_POWERS = Lemma(
    key="diagonal_powers", number="Σp", title="Powers of a positive diagonal matrix add",
    statement=_diag_powers_statement(),
    conditions=(r"\Sigma = \operatorname{diag}(\sigma_1(X), \dots, \sigma_n(X)),\ \sigma_i(X) > 0",),
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


def svd_gram_power(w, side: str, p, backend):
    """``(WᵀW)^p`` (``side="right"``) or ``(WWᵀ)^p`` (``"left"``) of the value ``w``, from the singular value
    decomposition of ``W`` itself (``V Σ^{2p} Vᵀ``, ``U Σ^{2p} Uᵀ``): independent of the eigendecomposition of the Gram
    matrix that the Gram-root and PSD-power nodes evaluate by. ``p`` is a rational; ``W`` has full rank on ``side``."""
    if backend.name == "mpmath":
        u, s, vt = mpmath.svd_r(w, full_matrices=False)
        exponent = 2 * mpmath.mpf(p.p) / p.q
        basis = vt.T if side == "right" else u
        scaled = basis * mpmath.diag([mpmath.power(x, exponent) for x in s])
        return scaled * basis.T
    u, s, vt = np.linalg.svd(np.asarray(w, dtype=float), full_matrices=False)
    basis = vt.T if side == "right" else u
    return (basis * s ** (2 * float(p))) @ basis.T


def _gram_power_reference(lhs, env, backend, dims):
    """An undamped Gram root or power ``C_W^{2p}`` from the SVD of ``W`` (independent of the eigendecomposition of
    ``WᵀW`` that both sides' nodes evaluate by): the self-check's left side."""
    if isinstance(lhs, _GramNode) and lhs.damping == 0:
        return svd_gram_power(evaluate(lhs.base, env, backend, dims), lhs.side, Rational(lhs.exponent), backend)
    return None


def _gram_power_statement() -> Statement:
    """An undamped Gram power (or root) of ``W`` is the PSD power of its Gram matrix: ``C_W^{2p} = (WᵀW)^p`` for
    ``W`` of full column rank, ``(WWᵀ)^p`` likewise for ``V`` of full row rank (so that a negative ``p`` is
    defined); the self-check evaluates the general clauses at ``p = -1/4``."""
    w, v, p = _full("W"), FactMatrix("V", _n, _m, [FULL_ROW_RANK]), Symbol("p")
    wg, vg = product(transpose(w), w), product(v, transpose(v))
    return Statement((Clause(GramPower(w, 0, "right", p), PsdPower(wg, p)),
                      Clause(GramPower(v, 0, "left", p), PsdPower(vg, p)),
                      Clause(GramSqrt(w), PsdPower(wg, Rational(1, 2))),
                      Clause(GramInvSqrt(w), PsdPower(wg, Rational(-1, 2))),
                      Clause(GramSqrt(v, 0, "left"), PsdPower(vg, Rational(1, 2))),
                      Clause(GramInvSqrt(v, 0, "left"), PsdPower(vg, Rational(-1, 2)))),
                     sizes=(_SVD_SIZES, {_m: 40, _n: 16, _k: 24, _r: 2}), scalars={p: Rational(-1, 4)},
                     reference=_gram_power_reference)


GRAM_POWER = Lemma(
    key="gram_power", number="Gp", title="A Gram root is a PSD power of the Gram matrix",
    statement=_gram_power_statement(),
    conditions=(r"\text{on the left a Gram power } C_W^{2p} \text{, on the right the PSD power of the Gram matrix}",),
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


def _spectral_statement() -> Statement:
    """``(Q Σ^a Qᵀ)^p = Q Σ^{a p} Qᵀ`` for an orthogonal ``Q`` and ``Σ`` the (positive) singular values of a
    full-column-rank ``X``; the self-check evaluates it at ``a = 2``, ``p = -1/4``."""
    q = FactMatrix("Q", _n, _n, [ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS])
    x, a, p = _full("X"), Symbol("a"), Symbol("p")
    return Statement((Clause(PsdPower(product(q, Singular(x, a), transpose(q)), p),
                             product(q, Singular(x, a * p), transpose(q))),),
                     sizes=(_SVD_SIZES, {_m: 40, _n: 16, _k: 24, _r: 2}), scalars={a: 2, p: Rational(-1, 4)})


SPECTRAL_CALCULUS = Lemma(
    key="spectral_calculus", number="f", title="Spectral calculus of a symmetric positive definite matrix",
    statement=_spectral_statement(),
    conditions=(r"\Sigma = \operatorname{diag}(\sigma_1(X), \dots, \sigma_n(X)),\ \sigma_i(X) > 0",),
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
    statement=stated_by(_msign_svd_ids),
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
    statement=dataclasses.replace(stated_by(_factor_ids), closure="ring"),
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
    statement=stated_by(_truncated_ids),
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
    statement=stated_by(_split_ids),
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
    statement=stated_by(_diag_norm_ids),
    conditions=(r"\sigma_1 \ge \sigma_2 \ge \dots \ge 0",),
    rewrite=_diag_norm_rewrite, identities=_diag_norm_ids, not_modelled="norms have no polynomial model",
)


__all__ = [
    "DIAGONAL_NORMS",
    "DIAGONAL_POWERS",
    "DIAGONAL_SPLIT",
    "FACTOR_OUTER",
    "GRAM_POWER",
    "MSIGN_SVD",
    "ORTHONORMAL_CANCEL",
    "SPECTRAL_CALCULUS",
    "SVD",
    "TRUNCATED_SVD",
]
