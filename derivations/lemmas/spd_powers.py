"""The SPD-power lemmas B1–B7: generic identities of powers of symmetric positive definite matrices.

:mod:`derivations.balance` derives the balancing gauge of ``M = W_Q W_Kᵀ`` with them. The powers are one
node, :class:`SPDPower` (``X^p`` for an SPD ``X``, with its own rules for every interpreter); the lemmas are
B1 (powers of one SPD matrix add), B2 (inverse of a product of powers), B3 (symmetric split of a power), B4
(an invertible matrix and its inverse cancel), B5 (factor a congruence out of a sum), B6 (a power of ``XᵀX``
is a Gram power of ``X``) and B7 (a whitened factor in polar form). None contains the balance's final formula.
"""

from __future__ import annotations

from sympy import Rational, S, Symbol
from sympy.matrices.expressions import Identity, Inverse, MatAdd, MatMul, Transpose

from derivations.lemmas.base import (
    _LARGE,
    _SMALL,
    Case,
    Lemma,
    NotApplicable,
    _fresh,
    _k,
    _m,
    _n,
    _tall,
    rewrite_nodes,
    stated_by,
)
from derivations.lemmas.spectral import svd_gram_power
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, tidy, total, transpose
from derivations.vocabulary.evaluate import InstanceSampler, evaluate
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FactMatrix,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    PolarFactor,
)
from derivations.vocabulary.spd_power import SPDPower

#: the split of an exponent into two equal halves (``X^p = X^{p·HALF} X^{p·HALF}``)
HALF = Rational(1, 2)
#: the exponent of the balancing gauge's power ``(NᵀN)^{1/4}``, which the self-checks exercise
QUARTER = Rational(1, 4)


# ---- powers of one SPD base: the view the power lemmas work in ------------------------------
def _power(m):
    """``(base factors, exponent)`` when ``m`` is a power of an SPD matrix, else ``None``.

    ``C_W = (WᵀW)^{1/2}`` and ``C_W⁻¹ = (WᵀW)^{-1/2}`` (undamped, right side) have the base
    ``[Wᵀ, W]``; ``SPDPower(X, p)`` has the factors of ``X``.
    """
    if isinstance(m, (GramSqrt, GramInvSqrt)) and m.damping == 0 and m.side == "right":
        return (Transpose(m.base), m.base), m.exponent
    if isinstance(m, SPDPower):
        base = m.arg
        if isinstance(base, MatMul):
            coeff, mats = base.as_coeff_matrices()
            if coeff == 1:
                return tuple(mats), m.exponent
        return (base,), m.exponent
    return None


def _make_power(base, exponent) -> list:
    """The factors of ``base^exponent``: none for 0, the base itself for 1, a Gram root for ``±1/2``."""
    if exponent == 0:
        return []
    if exponent == 1:
        return list(base)
    if len(base) == 2 and base[0] == Transpose(base[1]) and abs(exponent) == Rational(1, 2):
        return [GramSqrt(base[1]) if exponent > 0 else GramInvSqrt(base[1])]
    return [SPDPower(product(*base), exponent)]


def _merge_once(mats):
    """One merge ``X^a X^b → X^{a+b}`` (a bare run of ``X``'s factors counts as ``X^1``), or ``None``."""
    for i, m in enumerate(mats):
        found = _power(m)
        if found is None:
            continue
        base, e = found
        k = len(base)
        nxt = _power(mats[i + 1]) if i + 1 < len(mats) else None
        if nxt is not None and nxt[0] == base:
            return mats[:i] + _make_power(base, e + nxt[1]) + mats[i + 2:]
        if tuple(mats[i + 1:i + 1 + k]) == base:
            return mats[:i] + _make_power(base, e + 1) + mats[i + 1 + k:]
        if i >= k and tuple(mats[i - k:i]) == base:
            return mats[:i - k] + _make_power(base, e + 1) + mats[i + 1:]
    return None


def _power_add_rewrite(expr, **_):
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        mats, merged = list(mats), False
        while (nxt := _merge_once(mats)) is not None:
            mats, merged = nxt, True
        if not merged:
            return None
        new = product(coeff, *mats) if mats else product(coeff, Identity(e.shape[0]))
        return new, [("X^a X^b = X^{a+b} for X symmetric positive definite (WᵀW with W of full column rank; "
                     "C_K Wᵀ W C_K likewise)")]

    return rewrite_nodes(expr, rule, "no two adjacent powers of one SPD matrix", normalize=tidy)


def _core(a, b):
    """``C_A Bᵀ B C_A``: SPD for ``A``, ``B`` of full column rank (the ``NᵀN`` of the lemmas' self-checks)."""
    c = GramSqrt(a)
    return product(c, transpose(b), b, c)


def _power_add_ids():
    a, b = _tall("A", FULL_COLUMN_RANK), _tall("B", FULL_COLUMN_RANK)
    y = _core(a, b)
    quarter = QUARTER
    return ([(product(GramSqrt(a), GramSqrt(a)), product(transpose(a), a)),
             (product(GramInvSqrt(a), transpose(a), a, GramInvSqrt(a)), Identity(_n)),
             (product(SPDPower(y, quarter), SPDPower(y, quarter)), SPDPower(y, Rational(1, 2))),
             (product(SPDPower(y, -quarter), y, SPDPower(y, -quarter)), SPDPower(y, Rational(1, 2)))],
            InstanceSampler(_SMALL))


def _power_add_statement() -> Statement:
    """Powers of the SPD matrix ``X = Fᵀ F`` (``F`` of full column rank) add, ``X^0 = I``, ``X^1 = X``, and its
    square root is the Gram root ``C_F``: clauses applied left to right until none applies. The self-check
    evaluates them at ``a = -3/4``, ``b = 1/3``."""
    f = FactMatrix("F", _m, _n, [FULL_COLUMN_RANK])
    a, b = Symbol("a"), Symbol("b")
    x, c, ci, eye = product(transpose(f), f), GramSqrt(f), GramInvSqrt(f), Identity(_n)
    clauses = (Clause(product(SPDPower(x, a), SPDPower(x, b)), SPDPower(x, a + b)),
               Clause(product(SPDPower(x, a), x), SPDPower(x, a + 1)),
               Clause(product(x, SPDPower(x, a)), SPDPower(x, a + 1)),
               Clause(SPDPower(x, S.Zero), eye), Clause(SPDPower(x, S.One), x),
               Clause(product(ci, x), c), Clause(product(x, ci), c), Clause(product(ci, c), eye),
               Clause(product(c, ci), eye), Clause(product(c, c), x))
    return Statement(clauses, closure="rewrite", sizes=(_SMALL, _LARGE),
                     scalars={a: Rational(-3, 4), b: Rational(1, 3)})


POWER_ADD = Lemma(
    key="spd_power_add", number="B1", title="Powers of one SPD matrix add",
    statement=_power_add_statement(),
    rewrite=_power_add_rewrite, identities=_power_add_ids,
    not_modelled="powers of an SPD matrix other than ±1/2 have no exact explicit model",
)


def _inverse(m):
    """``m⁻¹`` for a power factor (exponent negated), else ``None``."""
    found = _power(m)
    if found is None:
        return None
    made = _make_power(found[0], -found[1])
    return made[0] if len(made) == 1 else None


def _power_inverse_rewrite(expr, **_):
    def rule(e):
        if not isinstance(e, Inverse):
            return None
        coeff, mats = e.arg.as_coeff_matrices() if isinstance(e.arg, MatMul) else (1, [e.arg])
        inverses = [_inverse(m) for m in reversed(mats)]
        if coeff != 1 or any(x is None for x in inverses):
            return None
        return product(*inverses), [f"{m} invertible (a power of an SPD matrix)" for m in mats]

    return rewrite_nodes(expr, rule, "no inverse of a product of SPD powers", normalize=tidy)


def _power_inverse_ids():
    a, b = _tall("A", FULL_COLUMN_RANK), _tall("B", FULL_COLUMN_RANK)
    y = _core(a, b)
    s = product(GramInvSqrt(a), SPDPower(y, QUARTER))
    return ([(Inverse(s), product(SPDPower(y, Rational(-1, 4)), GramSqrt(a))),
             (Transpose(Inverse(s)), product(GramSqrt(a), SPDPower(y, Rational(-1, 4))))],
            InstanceSampler(_SMALL))


def _power_inverse_statement() -> Statement:
    """``(C_W⁻¹ (FᵀF)^a)^{-1} = (FᵀF)^{-a} C_W`` and ``((FᵀF)^a C_W⁻¹)^{-1} = C_W (FᵀF)^{-a}`` (``W``, ``F`` of full
    column rank): the inverse of a product of two SPD powers, in the form the balance uses it (``C_W⁻¹ =
    (WᵀW)^{-1/2}``); the self-check evaluates it at ``a = 1/4``."""
    w, f, a = FactMatrix("W", _m, _n, [FULL_COLUMN_RANK]), FactMatrix("F", _k, _n, [FULL_COLUMN_RANK]), Symbol("a")
    x = product(transpose(f), f)
    return Statement((Clause(Inverse(product(GramInvSqrt(w), SPDPower(x, a))), product(SPDPower(x, -a), GramSqrt(w))),
                      Clause(Inverse(product(SPDPower(x, a), GramInvSqrt(w))), product(GramSqrt(w), SPDPower(x, -a)))),
                     sizes=(_SMALL, _LARGE), scalars={a: QUARTER})


POWER_INVERSE = Lemma(
    key="spd_power_inverse", number="B2", title="Inverse of a product of SPD powers",
    statement=_power_inverse_statement(),
    rewrite=_power_inverse_rewrite, identities=_power_inverse_ids,
    not_modelled="powers of an SPD matrix other than ±1/2 have no exact explicit model",
)


def _power_split_rewrite(expr, **_):
    def rule(e):
        if not isinstance(e, SPDPower):
            return None
        half = SPDPower(e.arg, e.exponent * HALF)
        return product(half, half), [f"X^p = X^(p/2) X^(p/2) = X^(p/2) (X^(p/2))ᵀ for X = {e.arg} SPD"]

    return rewrite_nodes(expr, rule, "no power of an SPD matrix to split")


def _power_split_ids():
    y = _core(_tall("A", FULL_COLUMN_RANK), _tall("B", FULL_COLUMN_RANK))
    half = SPDPower(y, QUARTER)
    return [(SPDPower(y, HALF), product(half, half))], InstanceSampler(_SMALL)


def _power_split_statement() -> Statement:
    """``X^p = X^{p/2} (X^{p/2})ᵀ`` for the SPD matrix ``X = Fᵀ F`` (``F`` of full column rank); the
    self-check evaluates it at ``p = 1/2``."""
    f, p = FactMatrix("F", _m, _n, [FULL_COLUMN_RANK]), Symbol("p")
    x = product(transpose(f), f)
    half = SPDPower(x, p * HALF)
    return Statement((Clause(SPDPower(x, p), product(half, Transpose(half))),), sizes=(_SMALL, _LARGE),
                     scalars={p: HALF})


POWER_SPLIT = Lemma(
    key="spd_power_split", number="B3", title="Symmetric split of an SPD power",
    statement=_power_split_statement(),
    rewrite=_power_split_rewrite, identities=_power_split_ids,
    not_modelled="powers of an SPD matrix other than ±1/2 have no exact explicit model",
)


def _inverse_cancel_rewrite(expr, **_):
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        mats, out, hits, conditions = list(mats), [], 0, []
        i = 0
        while i < len(mats):
            if i + 1 < len(mats) and _cancels(mats[i], mats[i + 1]):
                conditions.append(f"{mats[i]} {mats[i + 1]} = I ({_invertible(mats[i])} invertible)")
                i, hits = i + 2, hits + 1
                continue
            out.append(mats[i])
            i += 1
        if not hits:
            return None
        return (product(coeff, *out) if out else product(coeff, Identity(e.shape[0]))), conditions

    return rewrite_nodes(expr, rule, "no X X⁻¹ or X⁻¹ X (or their transposes) side by side", normalize=tidy)


def _strip(m):
    return (m.arg, True) if isinstance(m, Transpose) else (m, False)


def _cancels(a, b) -> bool:
    (a0, ta), (b0, tb) = _strip(a), _strip(b)
    if ta != tb:
        return False
    return (isinstance(b0, Inverse) and b0.arg == a0) or (isinstance(a0, Inverse) and a0.arg == b0)


def _invertible(m):
    m0 = _strip(m)[0]
    return m0.arg if isinstance(m0, Inverse) else m0


def _inverse_cancel_ids():
    s, f = FactMatrix("S", _n, _n, [FULL_COLUMN_RANK]), _fresh("F", _n, _m)
    return ([(product(s, Inverse(s), f), f),
             (product(Transpose(Inverse(s)), Transpose(s), f), f)], InstanceSampler(_SMALL))


INVERSE_CANCEL = Lemma(
    key="inverse_cancel", number="B4", title="An invertible matrix and its inverse cancel",
    statement=stated_by(_inverse_cancel_ids),
    conditions=(r"S \text{ invertible}",),
    rewrite=_inverse_cancel_rewrite, identities=_inverse_cancel_ids, algebraic=True,
)


def _congruence_rewrite(expr, factor=None, **_):
    inverse = _inverse(factor)
    if inverse is None:
        raise NotApplicable(f"{factor} is not an invertible SPD power")

    def rule(e):
        if not isinstance(e, MatAdd):
            return None
        inner, sandwiched = [], False
        for t in e.args:
            coeff, mats = t.as_coeff_matrices() if isinstance(t, MatMul) else (1, [t])
            if len(mats) > 2 and mats[0] == factor and mats[-1] == factor:
                inner.append(product(coeff, *mats[1:-1]))
                sandwiched = True
            else:
                inner.append(product(coeff, inverse, *mats, inverse))
        if not sandwiched:
            return None
        return product(factor, total(*inner), factor), [(f"{factor} symmetric and invertible: "
                                                        f"X = 0 ⟺ {factor} X {factor} = 0")]

    return rewrite_nodes(expr, rule, f"no sum with a term {factor} … {factor}")


def _congruence_ids():
    a = _tall("A", FULL_COLUMN_RANK)
    f = GramInvSqrt(a)
    x, y = _fresh("X", _n, _n), _fresh("Y", _n, _n)
    return ([Case(total(product(f, x, f), y), product(f, total(x, product(GramSqrt(a), y, GramSqrt(a))), f),
                    params={"factor": f})], InstanceSampler(_SMALL))


def _congruence_statement() -> Statement:
    """``F X F + Y = F (X + F⁻¹ Y F⁻¹) F`` for ``F = C_W⁻¹`` (``W`` of full column rank, so ``F⁻¹ = C_W``): the
    symmetric invertible ``F`` every step uses."""
    w = FactMatrix("W", _m, _n, [FULL_COLUMN_RANK])
    x, y = _fresh("X", _n, _n), _fresh("Y", _n, _n)
    f, f_inv = GramInvSqrt(w), GramSqrt(w)
    return Statement((Clause(total(product(f, x, f), y), product(f, total(x, product(f_inv, y, f_inv)), f)),),
                     sizes=(_SMALL, _LARGE))


CONGRUENCE = Lemma(
    key="congruence_factor", number="B5", title="Factor a congruence out of a sum",
    statement=_congruence_statement(),
    rewrite=_congruence_rewrite, identities=_congruence_ids,
    not_modelled="uses the inverse of a Gram root as a rewrite parameter",
)


def _gram_factor(base):
    """``X`` when ``base`` is the product ``Xᵀ X`` (its factors split in two halves), else ``None``."""
    coeff, mats = base.as_coeff_matrices() if isinstance(base, MatMul) else (1, [base])
    half = len(mats) // 2
    if coeff != 1 or not mats or len(mats) % 2:
        return None
    x = product(*mats[half:])
    return x if product(*mats[:half]) == transpose(x) else None


def _gram_power(x, exponent):
    """``(XᵀX)^p`` as a Gram node of ``X``: ``C_X``/``C_X⁻¹`` at ``p = ±1/2``, a :class:`GramPower` otherwise."""
    if exponent == HALF:
        return GramSqrt(x)
    if exponent == -HALF:
        return GramInvSqrt(x)
    return GramPower(x, 0, "right", exponent)


def _gram_of_product_rewrite(expr, **_):
    def rule(e):
        if not isinstance(e, SPDPower) or e.exponent == 0:
            return None
        x = _gram_factor(e.arg)
        if x is None:
            return None
        return _gram_power(x, e.exponent), [f"{e.arg} = XᵀX with X = {x}"]

    return rewrite_nodes(expr, rule, "no power of a matrix of the form XᵀX")


def _balance_instances():
    """``(A, B, X = A C_B)``: two tall matrices of full column rank and the product the balance works with."""
    a, b = _tall("A", FULL_COLUMN_RANK), _tall("B", FULL_COLUMN_RANK)
    return a, b, product(a, GramSqrt(b))


def _gram_of_product_ids():
    a, _, x = _balance_instances()
    quarter = QUARTER
    return ([(SPDPower(product(transpose(x), x), quarter), GramPower(x, 0, "right", quarter)),
             (SPDPower(product(transpose(x), x), -quarter), GramPower(x, 0, "right", -quarter)),
             (SPDPower(product(transpose(a), a), -HALF), GramInvSqrt(a))], InstanceSampler(_SMALL))


def _spd_power_reference(lhs, env, backend, dims):
    """The SPD power ``(FᵀF)^p`` of a Gram matrix from the SVD of ``F`` (independent of the eigendecomposition of
    ``FᵀF`` that both sides' nodes evaluate by): the self-check's left side."""
    if isinstance(lhs, SPDPower) and isinstance(lhs.arg, MatMul):
        coeff, mats = lhs.arg.as_coeff_matrices()
        if coeff == 1 and len(mats) == 2 and mats[0] == transpose(mats[1]):
            return svd_gram_power(evaluate(mats[1], env, backend, dims), "right", Rational(lhs.exponent), backend)
    return None


def _gram_of_product_statement() -> Statement:
    """The SPD power ``(Fᵀ F)^p`` of the product is the Gram power ``C_F^{2p}`` of ``F`` (``F`` of full column
    rank; at ``p = ±1/2`` the Gram roots ``C_F``, ``C_F⁻¹``); the self-check evaluates it at ``p = -1/4``."""
    f, p = FactMatrix("F", _m, _n, [FULL_COLUMN_RANK]), Symbol("p")
    x = product(transpose(f), f)
    return Statement((Clause(SPDPower(x, p), GramPower(f, 0, "right", p)),
                      Clause(SPDPower(x, HALF), GramSqrt(f)), Clause(SPDPower(x, -HALF), GramInvSqrt(f))),
                     sizes=(_SMALL, _LARGE), scalars={p: -QUARTER}, reference=_spd_power_reference)


GRAM_OF_PRODUCT = Lemma(
    key="gram_of_product", number="B6", title="A power of XᵀX is a Gram power of X",
    statement=_gram_of_product_statement(),
    conditions=(r"\left(F^{\top}F\right)^{p} \text{ on the left: the SPD power of the product; on the right: the "
                r"Gram power } C_F^{2p}",),
    rewrite=_gram_of_product_rewrite, identities=_gram_of_product_ids,
    not_modelled="powers of an SPD matrix other than ±1/2 have no exact explicit model",
)


def _polar_form_rewrite(expr, **_):
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        mats = list(mats)
        for i, m in enumerate(mats):
            if not isinstance(m, (GramPower, GramInvSqrt)) or m.damping != 0 or m.side != "right":
                continue
            base = m.base
            factors = list(base.as_coeff_matrices()[1]) if isinstance(base, MatMul) else [base]
            k = len(factors)
            if i >= k and mats[i - k:i] == factors:
                rest = [] if m.exponent == -HALF else [_gram_power(base, m.exponent + HALF)]
                new = mats[:i - k] + [PolarFactor(base)] + rest + mats[i + 1:]
                return product(coeff, *new), [f"{base} has full column rank: X (XᵀX)^p = U_X (XᵀX)^(p+1/2)"]
        return None

    return rewrite_nodes(expr, rule, "no X (XᵀX)^p side by side", normalize=tidy)


def _polar_form_ids():
    a, _, x = _balance_instances()
    quarter = QUARTER
    return ([(product(x, GramPower(x, 0, "right", -quarter)),
              product(PolarFactor(x), GramPower(x, 0, "right", quarter))),
             (product(a, GramPower(a, 0, "right", -quarter)),
              product(PolarFactor(a), GramPower(a, 0, "right", quarter))),
             (product(x, GramInvSqrt(x)), PolarFactor(x))], InstanceSampler(_SMALL))


def _polar_form_statement() -> Statement:
    """``F (FᵀF)^p = U_F (FᵀF)^{p+1/2}`` (Gram powers) and ``F C_F⁻¹ = U_F`` for ``F`` of full column rank; the
    self-check evaluates the first at ``p = -1/4``."""
    f, p = FactMatrix("F", _m, _n, [FULL_COLUMN_RANK]), Symbol("p")
    return Statement((Clause(product(f, GramPower(f, 0, "right", p)),
                             product(PolarFactor(f), GramPower(f, 0, "right", p + HALF))),
                      Clause(product(f, GramInvSqrt(f)), PolarFactor(f))),
                     sizes=(_SMALL, _LARGE), scalars={p: -QUARTER})


POLAR_FORM = Lemma(
    key="polar_form", number="B7", title="A whitened factor in polar form",
    statement=_polar_form_statement(),
    conditions=(r"U_F = F C_F^{-1}",),
    rewrite=_polar_form_rewrite, identities=_polar_form_ids,
    not_modelled="powers of an SPD matrix other than ±1/2 have no exact explicit model",
)
