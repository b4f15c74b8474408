"""Whitening by a partner: change of variables, polar factors, projector, isotropic partner, gauge
(Lemmas 4, 6a, 6b, P, I, G)."""

from __future__ import annotations

from sympy import S
from sympy.matrices.expressions import Identity, Inverse, Transpose

from derivations.lemmas.base import (
    _LARGE,
    _SMALL,
    Applies,
    Case,
    Lemma,
    NotApplicable,
    Offer,
    _fresh,
    _full_rank_known,
    _invertibility,
    _k,
    _m,
    _n,
    _tall,
    rewrite_nodes,
    stated_by,
)
from derivations.lemmas.statement import Clause, Condition, Statement
from derivations.vocabulary.algebra import product, replace_free, rewrite_adjacent, tidy, transpose
from derivations.vocabulary.evaluate import InstanceSampler
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ISOTROPIC_COLUMNS,
    ORTHONORMAL_COLUMNS,
    SIDES,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    Inner,
    IsotropicScale,
    OpNorm,
    PolarFactor,
    Projector,
    facts_of,
    nonnegative_symbol,
)
from derivations.vocabulary.norm_nodes import FrobeniusNorm


# ---- Lemma 4: change of variables ---------------------------------------------------------
def _cov_rewrite(expr, *, variable, new, factor, side="right", **_):
    """``X = Z C⁻¹`` (right) or ``X = C⁻¹ Z`` (left), then ``C⁻¹C = I`` (C invertible)."""
    if not isinstance(factor, GramSqrt):
        raise NotApplicable(f"change of variables needs a Gram root factor, got {factor}")
    if not _full_rank_known(factor):
        raise NotApplicable(f"cannot invert {factor.label()}: {factor.base} is not known to have full rank")
    inv = GramInvSqrt(*factor.args)
    back = product(new, inv) if side == "right" else product(inv, new)
    out = replace_free(expr, variable, back)
    out, n1 = rewrite_adjacent(out, [inv, factor], [])
    out, n2 = rewrite_adjacent(out, [factor, inv], [])
    if n1 + n2 == 0:
        raise NotApplicable(f"substituting {variable} = {back} cancels nothing")
    return out, [_invertibility(factor)]


def _cov_ids():
    w = _tall("W", FULL_COLUMN_RANK)
    c, ci = GramSqrt(w), GramInvSqrt(w)
    x, z, g = _fresh("X", _k, _n), _fresh("Z", _k, _n), _fresh("G", _k, _n)
    xl, zl = _fresh("Y", _n, _k), _fresh("V", _n, _k)
    right = {"variable": x, "new": z, "factor": c, "side": "right"}
    left = {"variable": xl, "new": zl, "factor": c, "side": "left"}
    return ([Case(Inner(g, product(x, c)), Inner(g, z), right, (x, product(z, ci))),
             Case(OpNorm(product(x, c)), OpNorm(z), right, (x, product(z, ci))),
             Case(product(c, xl), zl, left, (xl, product(ci, zl)))],
            InstanceSampler(_SMALL))


def _cov_offers(view):
    """Search: every Gram root of the state absorbed into a new variable, either side."""
    out = []
    for g in sorted(set().union(*(p.atoms(GramSqrt) for p in view.parts)), key=str):
        for side in ("right", "left"):
            new = view.fresh_variable()
            out.append(Offer(f"change of variables {new} = {g.label()} {view.variable} ({side})",
                             {"new": new, "factor": g, "side": side}, method="change_variables"))
    return out


def _gram_pair(side):
    """``(W, λ, C, C⁻¹)``: a pattern matrix (tall for the right root, wide for the left), its damping and roots."""
    w = _fresh("W", _m, _n) if side == "right" else _fresh("W", _n, _m)
    lam = nonnegative_symbol("lambda")
    return w, lam, GramSqrt(w, lam, side), GramInvSqrt(w, lam, side)


def _invertible(c):
    return Condition("invertible", c)


def _cov_statement() -> Statement:
    """``X = Z C⁻¹`` (or ``C⁻¹ Z``) defines the new variable, ``C`` a Gram root (of a tall or a wide
    partner); ``C⁻¹ C = C C⁻¹ = I`` cancels the root."""
    clauses, conditions = [], []
    for side in SIDES:  # the root's own side: (WᵀW)^{1/2} or (WWᵀ)^{1/2}
        w, lam, c, ci = _gram_pair(side)
        clauses += [Clause(_fresh("X", _k, _n), product(_fresh("Z", _k, _n), ci), defines=True),
                    Clause(_fresh("X", _n, _k), product(ci, _fresh("Z", _n, _k)), defines=True),
                    Clause(product(ci, c), Identity(_n)), Clause(product(c, ci), Identity(_n))]
        conditions.append(_invertible(c))
    return Statement(tuple(clauses), tuple(conditions), sizes=(_SMALL, _LARGE))


CHANGE_OF_VARIABLES = Lemma(
    key="change_of_variables", number="4", title="Change of variables",
    statement=_cov_statement(), rewrite=_cov_rewrite, identities=_cov_ids, algebraic=True,
    applies=Applies(_cov_offers, order=20),
)




# ---- Lemma 6: polar substitution ----------------------------------------------------------
def _polar_sub_rewrite(expr, *, matrix, damping=S.Zero, side="right", **_):
    u = PolarFactor(matrix, damping, side)
    c = u.gram_sqrt()
    new = replace_free(expr, matrix, product(u, c) if side == "right" else product(c, u))
    if new == expr:
        raise NotApplicable(f"{matrix} does not occur outside derived nodes")
    return new, [(f"{matrix} = {u} {c.label()} with {c.label()} = ({matrix}ᵀ{matrix})^1/2 "
                 f"({'full column rank' if side == 'right' else 'full row rank'}, λ = 0)")]


def _polar_pairs(side):
    """``(W, [(W, U C)], [(C⁻¹Wᵀ, Uᵀ), (W C⁻¹, U)])`` for a tall (right) or wide (left) ``W``."""
    w = _tall("W", FULL_COLUMN_RANK) if side == "right" else FactMatrix("W", _n, _m, [FULL_ROW_RANK])
    u, c, ci = PolarFactor(w, 0, side), GramSqrt(w, 0, side), GramInvSqrt(w, 0, side)
    if side == "right":
        return w, [(w, u * c)], [(ci * w.T, u.T), (w * ci, u)]
    return w, [(w, c * u)], [(w.T * ci, u.T), (ci * w, u)]


def _polar_ids():
    cases = []
    for side in ("right", "left"):
        w, subs, _ = _polar_pairs(side)
        cases += [Case(lhs, rhs, {"matrix": w, "side": side}) for lhs, rhs in subs]
    w = _tall("W", FULL_COLUMN_RANK)
    cases.append(Case(PolarFactor(w).T * PolarFactor(w), Identity(_n), rewrites=False))
    return cases, InstanceSampler(_SMALL)


def _polar_inverse_ids():
    cases = []
    for side in ("right", "left"):
        w, _, inverses = _polar_pairs(side)
        for lhs, rhs in inverses:
            k = _fresh("K", rhs.shape[1], rhs.shape[1])  # the reverse rewrite acts on products only
            cases += [Case(lhs, rhs, {"matrix": w, "side": side}),
                      Case(product(rhs, k), product(lhs, k), {"matrix": w, "side": side, "reverse": True})]
    return cases, InstanceSampler(_SMALL)


def _polar_sub_offers(view):
    """Search: ``W = U C`` for every free matrix known to have full rank (or damped), either side."""
    z, parts = view.variable, view.parts
    atoms = set().union(*(p.atoms(GramSqrt, GramInvSqrt, PolarFactor) for p in parts))
    out = []
    for w in sorted(set().union(*(view.free_matrices(p) for p in parts)), key=str):
        if w == z:
            continue
        facts = facts_of(w)
        if not facts & {FULL_COLUMN_RANK, FULL_ROW_RANK} and w.is_Matrix and any(
                p.has(product(z, transpose(w))) or p.has(product(w, z)) for p in parts):
            view.note(f"{w} is not known to have full rank: no polar substitution, it cannot be whitened")
        # W = U_λ C_λ for the dampings its Gram roots already carry (0 for the undamped problem)
        for lam in sorted({S.Zero} | {g.damping for g in atoms if g.base == w}, key=str):
            if any(g.base == w and g.damping == lam and isinstance(g, (PolarFactor, GramInvSqrt)) for g in atoms):
                continue  # substituted already: W = U_W C_W again would only cycle
            for side, fact in (("right", FULL_COLUMN_RANK), ("left", FULL_ROW_RANK)):
                if fact in facts or (lam != 0 and lam.is_positive):
                    out.append(Offer(f"Lemma 6a ({w}, {side}" + (f", λ = {lam})" if lam != 0 else ")"),
                                     {"matrix": w, "side": side, "damping": lam}))
    return out


def _polar_statement(inverse: bool) -> Statement:
    """6a: ``W = U_W C_W`` (right; ``C_W U_W`` left). 6b: ``W C_W⁻¹ = U_W``, ``C_W⁻¹ Wᵀ = U_Wᵀ`` (and left)."""
    clauses, conditions = [], []
    for side in SIDES:
        w, lam, c, ci = _gram_pair(side)
        u = PolarFactor(w, lam, side)
        if not inverse:
            clauses.append(Clause(w, product(u, c) if side == "right" else product(c, u)))
        elif side == "right":
            clauses += [Clause(product(w, ci), u), Clause(product(ci, transpose(w)), transpose(u))]
        else:
            clauses += [Clause(product(ci, w), u), Clause(product(transpose(w), ci), transpose(u))]
        conditions.append(_invertible(c))
    return Statement(tuple(clauses), tuple(conditions), sizes=(_SMALL, _LARGE))


POLAR_SUBSTITUTION = Lemma(
    key="polar_substitution", number="6a", title="Polar substitution",
    statement=_polar_statement(inverse=False),
    rewrite=_polar_sub_rewrite, identities=_polar_ids, algebraic=True, applies=Applies(_polar_sub_offers, order=10),
)


def _polar_inverse_rewrite(expr, *, matrix, damping=S.Zero, side="right", reverse=False, **_):
    """``C⁻¹Wᵀ → Uᵀ`` and ``W C⁻¹ → U`` (right side), ``Wᵀ C⁻¹ → Uᵀ``, ``C⁻¹ W → U`` (left)."""
    u, ci = PolarFactor(matrix, damping, side), GramInvSqrt(matrix, damping, side)
    if side == "right":
        rules = [([ci, transpose(matrix)], [transpose(u)]), ([matrix, ci], [u])]
    else:
        rules = [([transpose(matrix), ci], [transpose(u)]), ([ci, matrix], [u])]
    total_hits = 0
    out = expr
    for pattern, replacement in rules:
        if reverse:
            pattern, replacement = replacement, pattern
        out, hits = rewrite_adjacent(out, pattern, replacement)
        total_hits += hits
    if not total_hits:
        raise NotApplicable(f"no {'U' if reverse else 'W C⁻¹'} pattern of {matrix} to rewrite")
    return out, [(f"{u} = {'W C⁻¹' if side == 'right' else 'C⁻¹ W'} with W = {matrix} "
                 f"({'full column rank' if side == 'right' else 'full row rank'} or λ > 0)")]


def _polar_inverse_offers(view):
    """Search: every polar factor of the state written through its partner."""
    return [Offer(f"Lemma 6b (U_{u.base} through {u.base})",
                  {"matrix": u.base, "damping": u.damping, "side": u.side, "reverse": True})
            for u in sorted({u for p in view.parts for u in p.atoms(PolarFactor)}, key=str)]


POLAR_INVERSE = Lemma(
    key="polar_inverse", number="6b", title="Polar factor from the Gram root",
    statement=_polar_statement(inverse=True),
    rewrite=_polar_inverse_rewrite, identities=_polar_inverse_ids, algebraic=True,
    applies=Applies(_polar_inverse_offers, order=50),
)




# ---- projector ----------------------------------------------------------------------------
def _projector_rewrite(expr, *, matrix, **_):
    u = PolarFactor(matrix)
    out, hits = rewrite_adjacent(expr, [u, transpose(u)], [Projector(matrix)])
    if not hits:
        raise NotApplicable(f"no {u} {u}ᵀ to name as the projector")
    return out, [f"{u} has orthonormal columns"]


def _projector_ids():
    w = _tall("W", FULL_COLUMN_RANK)
    p = Projector(w)
    return ([Case(PolarFactor(w) * PolarFactor(w).T, p, {"matrix": w}), Case(product(p, p), p, rewrites=False),
             Case(product(p, w), w, rewrites=False)], InstanceSampler(_SMALL))


PROJECTOR = Lemma(
    key="projector", number="P", title="Orthogonal projector onto the column space",
    statement=stated_by(_projector_ids),
    conditions=(r"U_W \text{ has orthonormal columns}",),
    rewrite=_projector_rewrite, identities=_projector_ids, algebraic=True,
)


# ---- isotropic partner --------------------------------------------------------------------
def _isotropic_rewrite(expr, *, matrix, **_):
    if ISOTROPIC_COLUMNS not in facts_of(matrix):
        raise NotApplicable(f"{matrix} is not known to have orthogonal columns of equal norm")
    condition = f"{matrix}ᵀ{matrix} = c² I (orthogonal columns of equal norm)"

    def rule(e):
        if isinstance(e, (GramSqrt, GramInvSqrt)) and e.base == matrix and e.side == "right":
            c = IsotropicScale(matrix, e.damping)
            return product(c if isinstance(e, GramSqrt) else 1 / c, Identity(e.size)), [condition]
        return None

    return rewrite_nodes(expr, rule, f"no Gram root of {matrix} to replace", normalize=tidy)


def _isotropic_ids():
    w = _tall("W", FULL_COLUMN_RANK, ISOTROPIC_COLUMNS)
    lam = nonnegative_symbol("lambda")
    c = IsotropicScale(w, lam)
    return ([Case(GramSqrt(w, lam), c * Identity(_n), {"matrix": w}),
             Case(GramInvSqrt(w, lam), (1 / c) * Identity(_n), {"matrix": w}),
             Case(c**2, FrobeniusNorm(w) ** 2 / _n + lam, rewrites=False)], InstanceSampler(_SMALL))


ISOTROPIC_PARTNER = Lemma(
    key="isotropic_partner", number="I", title="Isotropic partner",
    statement=stated_by(_isotropic_ids),
    conditions=(r"W \text{ has orthogonal columns of equal norm}",),
    rewrite=_isotropic_rewrite, identities=_isotropic_ids,
)




# ---- gauge transformation of a Gram root ----------------------------------------------------
def _gauge_polar_rewrite(expr, *, matrix, gauge, orthogonal, **_):
    """With ``O`` the polar factor of ``C_W S``: ``S C_{WS}⁻¹ → C_W⁻¹ O`` and ``O C_{WS}⁻¹ → C_W⁻¹ S⁻ᵀ``."""
    moved = GramInvSqrt(product(matrix, gauge))
    rules = [([gauge, moved], [GramInvSqrt(matrix), orthogonal]),
             ([orthogonal, moved], [GramInvSqrt(matrix), Transpose(Inverse(gauge))])]
    out, hits = expr, 0
    for pattern, replacement in rules:
        out, n = rewrite_adjacent(out, pattern, replacement)
        hits += n
    if not hits:
        raise NotApplicable(f"no S C_(W S)^-1 or O C_(W S)^-1 for W = {matrix}, S = {gauge}")
    return out, [f"{gauge} invertible, {matrix} full column rank, {orthogonal} = polar factor of C_{matrix} {gauge}"]


def _gauge_ids():
    w = _tall("W", FULL_COLUMN_RANK)
    s_ = FactMatrix("S", _n, _n, [FULL_COLUMN_RANK])  # invertible (drawn well conditioned: S⁻ᵀ is in the clause)
    o = FactMatrix("O", _n, _n, [ORTHONORMAL_COLUMNS])
    moved = GramInvSqrt(product(w, s_))
    sampler = InstanceSampler(_SMALL, {o: PolarFactor(product(GramSqrt(w), s_))})
    params = {"matrix": w, "gauge": s_, "orthogonal": o}
    return ([Case(product(s_, moved), product(GramInvSqrt(w), o), params),
             Case(product(o, moved), product(GramInvSqrt(w), Transpose(Inverse(s_))), params)], sampler)


GAUGE_POLAR = Lemma(
    key="gauge_polar", number="G", title="Gram root of a gauge-transformed factor",
    statement=stated_by(_gauge_ids),
    conditions=(r"S \text{ invertible}, W \text{ full column rank}",), rewrite=_gauge_polar_rewrite,
    identities=_gauge_ids,
)
