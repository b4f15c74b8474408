"""Ring axioms and the regularized Sylvester equation (Lemmas R, S)."""

from __future__ import annotations

from sympy import S, Symbol
from sympy.matrices.expressions import MatAdd, MatMul, ZeroMatrix

from derivations.lemmas.base import _LARGE, _SMALL, Lemma, _fresh, _k, _m, _n, _tall, rewrite_nodes
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, tidy, total
from derivations.vocabulary.evaluate import InstanceSampler
from derivations.vocabulary.nodes import FULL_COLUMN_RANK, FactMatrix, RegularizedSylvester, positive_symbol


# ---- regularized Sylvester equation -------------------------------------------------------
def _sylvester_rewrite(expr, **_):
    """``A Aᵀ H + H B Bᵀ → D − 2λH`` for ``H`` the regularized Sylvester solution."""
    def rule(e):
        if not isinstance(e, MatAdd):
            return None
        terms, conditions = list(e.args), []
        for h in sorted({a for t in terms for a in t.atoms(RegularizedSylvester)}, key=str):
            ga, gb = (product(m.args[0], m.args[1]) for m in h.grams())
            left, right = product(ga, h), product(h, gb)
            if left in terms and right in terms:
                terms.remove(left)
                terms.remove(right)
                terms += [h.rhs] + ([product(-2 * h.damping, h)] if h.damping != 0 else [])
                lam = "λ" if str(h.damping) in ("lambda", "λ") else f"λ = {h.damping}"  # never "λ = λ"
                conditions.append(f"{h} solves ({ga} + λI) {h} + {h} ({gb} + λI) = {h.rhs}, {lam}"
                                  + (" > 0" if h.side == "outer" else " (SPD Grams: full column rank)"))
        return (total(*terms), conditions) if conditions else None

    return rewrite_nodes(expr, rule, "no A Aᵀ H + H B Bᵀ with H a regularized Sylvester solution")


def _sylvester_ids():
    a, b, dd = _tall("A"), _tall("B"), _fresh("D", _m, _m)
    lam = positive_symbol("lambda")
    h = RegularizedSylvester(a, b, lam, dd)
    inner = RegularizedSylvester(_tall("A", FULL_COLUMN_RANK), _tall("B", FULL_COLUMN_RANK), 0,
                                 _fresh("R", _n, _n), "inner")
    ia, ib = inner.left, inner.right
    return ([(total(product(a, a.T, h), product(h, b, b.T)), total(dd, product(-2 * lam, h))),
             (total(product(ia.T, ia, inner), product(inner, ib.T, ib)), inner.rhs)],
            InstanceSampler(_SMALL))


def _sylvester_statement() -> Statement:
    """``A Aᵀ H_λ + H_λ B Bᵀ = D − 2λ H_λ`` for ``H_λ`` the solution of ``(A Aᵀ + λI) H + H (B Bᵀ + λI) = D``
    (``λ > 0``), and ``Eᵀ E X + X Fᵀ F = R`` for ``X`` the solution of that equation (``E``, ``F`` of full column
    rank): the solutions are the nodes :class:`RegularizedSylvester`, which the self-check evaluates by solving."""
    lam = positive_symbol("lambda")
    a, b, dd = _fresh("A", _m, _n), _fresh("B", _m, _n), _fresh("D", _m, _m)
    e, f = FactMatrix("E", _m, _n, [FULL_COLUMN_RANK]), FactMatrix("F", _k, _n, [FULL_COLUMN_RANK])
    r = _fresh("R", _n, _n)
    h, x = RegularizedSylvester(a, b, lam, dd), RegularizedSylvester(e, f, 0, r, "inner")
    return Statement((Clause(total(product(a, a.T, h), product(h, b, b.T)), total(dd, product(-2 * lam, h))),
                      Clause(total(product(e.T, e, x), product(x, f.T, f)), r)),
                     sizes=({_m: 4, _n: 2, _k: 3}, _LARGE))  # small first: mpmath solves a 16-unknown system


SYLVESTER_EQUATION = Lemma(
    key="sylvester_equation", number="S", title="Regularized Sylvester equation",
    statement=_sylvester_statement(),
    conditions=(r"H_{\lambda} \text{ solves } (AA^{\top} + \lambda I) H + H (BB^{\top} + \lambda I) = D",
                r"X \text{ solves } E^{\top}E X + X F^{\top}F = R"),
    rewrite=_sylvester_rewrite,
    identities=_sylvester_ids,
)


# ---- ring axioms: distribute and collect -------------------------------------------------------
def _split_coeff(term):
    if isinstance(term, MatMul):
        coeff, mats = term.as_coeff_matrices()
        return coeff, product(*mats)
    return S.One, term


def _distribute(e):
    """``(A + B) C → A C + B C`` and ``C (A + B) → C A + C B`` inside products."""
    if not isinstance(e, MatMul):
        return e
    coeff, mats = e.as_coeff_matrices()
    for i, m in enumerate(mats):
        if isinstance(m, MatAdd):
            pre, post = mats[:i], mats[i + 1:]
            return total(*[_distribute(product(coeff, *pre, t, *post)) for t in m.args])
    return e


def _collect_rewrite(expr, **_):
    def rule(e):
        e2 = _distribute(e)
        if isinstance(e2, MatAdd):
            groups = {}
            for t in e2.args:
                c, m = _split_coeff(t)
                groups[m] = groups.get(m, S.Zero) + c
            terms = [product(c, m) for m, c in groups.items() if c != 0]
            e2 = total(*terms) if terms else ZeroMatrix(*e2.shape)
        return (e2, []) if e2 != e else None

    return rewrite_nodes(expr, rule, "nothing to distribute or collect", normalize=tidy)


def _collect_ids():
    a, b, c = _fresh("A", _k, _n), _fresh("B", _k, _n), _fresh("C", _n, _n)
    return ([(product(total(a, b), c), total(product(a, c), product(b, c))),
             (total(a, product(-1, a), b), b)], InstanceSampler(_SMALL))


def _ring_statement() -> Statement:
    """``(A + B) C = AC + BC``, ``C (A + B) = CA + CB``, ``αX + βX = (α + β) X``: a step is an instance when
    both sides have one normal form in the free ring these generate (with associativity)."""
    a, b, x = _fresh("A", _m, _n), _fresh("B", _m, _n), _fresh("X", _m, _n)
    c, d = _fresh("C", _n, _k), _fresh("D", _k, _m)
    alpha, beta = Symbol("alpha"), Symbol("beta")
    return Statement((Clause(product(total(a, b), c), total(product(a, c), product(b, c))),
                      Clause(product(d, total(a, b)), total(product(d, a), product(d, b))),
                      Clause(total(product(alpha, x), product(beta, x)), product(alpha + beta, x))),
                     sizes=(_SMALL, _LARGE), closure="ring")


RING = Lemma(
    key="ring", number="R", title="Distributivity and collection of like terms",
    statement=_ring_statement(),
    rewrite=_collect_rewrite, identities=_collect_ids, algebraic=True,
)
