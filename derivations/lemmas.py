"""The named lemmas of Compositional Muon (Lemmas 1–6 and their companions) as rewrite rules.

Each :class:`Lemma` has a LaTeX statement, its side conditions, a rewrite that finds the
lemma's left-hand side in an expression and replaces it (checking the facts that the side
conditions need, and refusing otherwise), and a numerical self-check on random instances of
its own statement. Lemmas never contain a rule's final formula: they are generic identities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from sympy import Add, Basic, S
from sympy.matrices.expressions import Identity, Inverse, MatAdd, MatMul, MatrixSymbol, Transpose, ZeroMatrix

from .algebra import map_bottom_up, product, replace_free, rewrite_adjacent, tidy, total, transpose
from .evaluate import InstanceSampler, evaluate, free_symbols, relative_error
from .vocabulary import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ISOTROPIC_COLUMNS,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    BlockDiag,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    HStack,
    Inner,
    IsotropicScale,
    Msign,
    OpNorm,
    PolarFactor,
    Projector,
    RegularizedSylvester,
    dimension,
    facts_of,
    nonnegative_symbol,
    positive_symbol,
)


class NotApplicable(ValueError):
    """A lemma found nothing to rewrite, or a side condition is not known to hold."""


@dataclass(frozen=True)
class Lemma:
    """A named rewrite rule with its statement, side conditions and self-check."""

    key: str
    number: str
    title: str
    statement: str  # LaTeX
    conditions: tuple = ()
    rewrite: Callable = field(default=None, repr=False, compare=False)
    identities: Callable = field(default=None, repr=False, compare=False)  # () -> [(lhs, rhs)], sampler
    check: Callable = field(default=None, repr=False, compare=False)  # (rng) -> error, overrides identities

    def apply(self, expr: Basic, **params):
        """Rewrite ``expr``; returns ``(new_expr, instantiated side conditions)``."""
        new, conditions = self.rewrite(expr, **params)
        return new, conditions

    def self_check(self, rng: np.random.Generator, trials: int = 5) -> float:
        """Largest relative error of the lemma's statement over random instances."""
        if self.check is not None:
            return max(self.check(rng) for _ in range(trials))
        pairs, sampler = self.identities()
        worst = 0.0
        for _ in range(trials):
            for lhs, rhs in pairs:
                env = sampler.sample(rng, free_symbols(lhs, rhs))
                a = evaluate(lhs, env, dims=sampler.dims)
                b = evaluate(rhs, env, dims=sampler.dims)
                worst = max(worst, relative_error(np.asarray(a), np.asarray(b), _NP))
        return worst


from numerics.reference import NumpyBackend

_NP = NumpyBackend()

# ---- symbols used by the self-checks -------------------------------------------------------
_m, _n, _k = dimension("m"), dimension("n"), dimension("k")
_SMALL = {_m: 7, _n: 3, _k: 5}


def _tall(name, *facts):
    return FactMatrix(name, _m, _n, facts)


def _fresh(name, rows, cols):
    return MatrixSymbol(name, rows, cols)


# ---- helpers ------------------------------------------------------------------------------
def _orthonormal_cols(e) -> bool:
    return ORTHONORMAL_COLUMNS in facts_of(e)


def _orthonormal_rows(e) -> bool:
    return ORTHONORMAL_ROWS in facts_of(e)


def _invertibility(c) -> str:
    side = "column" if c.side == "right" else "row"
    rank = f"{c.label()} invertible: {c.base} has full {side} rank"
    return rank if c.damping == 0 else f"{rank}, or λ = {c.damping} > 0"


def _full_rank_known(c) -> bool:
    need = FULL_COLUMN_RANK if c.side == "right" else FULL_ROW_RANK
    return need in facts_of(c.base) or bool(c.damping.is_positive)


def _isometry_condition(u) -> str:
    if isinstance(u, PolarFactor):
        return (f"{u} has orthonormal {'columns' if u.side == 'right' else 'rows'}: "
                f"{u.base} has full rank and λ = 0")
    return f"{u} has orthonormal columns"


# ---- Lemma 1: linear steepest descent (Muon) ----------------------------------------------
def _lsd_rewrite(problem_expr, **_):
    raise NotApplicable("Lemma 1 is applied by Derivation.solve, not as a rewrite")


def _lsd_check(rng):
    a = rng.standard_normal((6, 4))
    beta = rng.uniform(0.5, 2.0)
    z = -beta * _NP.msign(a)
    value = -beta * _NP.nuclear_norm(a)
    err = abs(_NP.inner(a, z) - value) / abs(value) + abs(_NP.op_norm(z) - beta) / beta
    for _ in range(200):  # no random feasible point does better (Hölder: ⟨A,Z⟩ ≥ −‖A‖_*‖Z‖_op)
        y = rng.standard_normal(a.shape)
        y *= beta / _NP.op_norm(y)
        err += max(0.0, value - _NP.inner(a, y)) / abs(value)
    return err


LINEAR_STEEPEST_DESCENT = Lemma(
    key="linear_steepest_descent", number="1", title="Linear steepest descent (Muon)",
    statement=(r"\operatorname*{argmin}_{\|Z\|_{\mathrm{op}} \le \beta} \langle A, Z\rangle"
               r" = -\beta \operatorname{msign}(A), \quad \text{value } -\beta \|A\|_{*}"),
    conditions=(r"\beta > 0",), rewrite=_lsd_rewrite, check=_lsd_check,
)


# ---- Lemma 2: orthonormal factors leave the operator norm ---------------------------------
def _ortho_norm_rewrite(expr, **_):
    conditions = []

    def visit(e):
        if not isinstance(e, OpNorm):
            return e
        arg = e.args[0]
        if not isinstance(arg, MatMul):
            return e
        coeff, mats = arg.as_coeff_matrices()
        mats = list(mats)
        while len(mats) > 1 and isinstance(mats[-1], Transpose) and _orthonormal_cols(mats[-1].arg):
            conditions.append(_isometry_condition(mats[-1].arg))
            mats.pop()
        while len(mats) > 1 and _orthonormal_cols(mats[0]):
            conditions.append(_isometry_condition(mats[0]))
            mats.pop(0)
        if len(mats) == len(arg.as_coeff_matrices()[1]):
            return e
        return OpNorm(product(coeff, *mats))

    new = map_bottom_up(expr, visit)
    if not conditions:
        raise NotApplicable("no operator norm with an outer factor known to have orthonormal columns")
    return new, conditions


def _ortho_norm_ids():
    u = _tall("U", ORTHONORMAL_COLUMNS)
    z1, z2 = _fresh("Z", _k, _n), _fresh("Y", _n, _k)
    return [(OpNorm(z1 * u.T), OpNorm(z1)), (OpNorm(u * z2), OpNorm(z2))], InstanceSampler(_SMALL)


ORTHONORMAL_INVARIANCE = Lemma(
    key="orthonormal_invariance", number="2", title="Isometries leave the operator norm",
    statement=(r"U^{\top}U = I \;\Rightarrow\; \|Z U^{\top}\|_{\mathrm{op}} = \|Z\|_{\mathrm{op}},"
               r"\ \|U Z\|_{\mathrm{op}} = \|Z\|_{\mathrm{op}}"),
    conditions=(r"U \text{ has orthonormal columns}",),
    rewrite=_ortho_norm_rewrite, identities=_ortho_norm_ids,
)


# ---- Lemma 3: adjoint moves ---------------------------------------------------------------
def _adjoint_rewrite(expr, *, variable, **_):
    found = []

    def visit(e):
        if not isinstance(e, Inner):
            return e
        g, x = e.args
        if x == variable:
            return e
        if g.has(variable) and not x.has(variable):
            g, x = x, g  # ⟨A, B⟩ = ⟨B, A⟩
        coeff, mats = x.as_coeff_matrices() if isinstance(x, MatMul) else (S.One, [x])
        mats = list(mats)
        hits = [i for i, m in enumerate(mats) if m == variable or m == Transpose(variable)]
        if len(hits) != 1 or any(m.has(variable) for i, m in enumerate(mats) if i != hits[0]):
            return e
        i = hits[0]
        left, right = mats[:i], mats[i + 1:]
        moved = product(coeff, *[transpose(m) for m in reversed(left)], g,
                        *[transpose(m) for m in reversed(right)])
        if mats[i] != variable:  # ⟨A, Xᵀ⟩ = ⟨Aᵀ, X⟩
            moved = transpose(moved)
        found.append(e)
        return Inner(moved, variable)

    new = map_bottom_up(expr, visit)
    if not found:
        raise NotApplicable(f"no inner product ⟨G, L {variable} R⟩ to move onto {variable}")
    return new, []


def _adjoint_ids():
    g = _fresh("G", _m, _k)
    x = _fresh("X", _m, _n)
    b = _fresh("B", _n, _k)
    a = _fresh("A", _m, _m)
    f, h = _fresh("F", _k, _k), _fresh("H", _m, _k)
    return ([(Inner(g, x * b), Inner(g * b.T, x)), (Inner(g, a * x * b), Inner(a.T * g * b.T, x)),
             (Inner(f, b.T * x.T * h), Inner(h * f.T * b.T, x))],
            InstanceSampler(_SMALL))


ADJOINT_MOVE = Lemma(
    key="adjoint_move", number="3", title="Adjoint moves",
    statement=(r"\langle G, X B\rangle = \langle G B^{\top}, X\rangle,\quad"
               r"\langle G, B X\rangle = \langle B^{\top} G, X\rangle,\quad"
               r"\langle G, X^{\top}\rangle = \langle G^{\top}, X\rangle"),
    rewrite=_adjoint_rewrite, identities=_adjoint_ids,
)


# ---- transposition --------------------------------------------------------------------------
def _transpose_rewrite(expr, **_):
    hits = []

    def visit(e):
        if isinstance(e, OpNorm) and isinstance(e.args[0], Transpose):
            hits.append(e)
            return OpNorm(e.args[0].arg)
        return e

    new = map_bottom_up(expr, visit)
    if not hits:
        raise NotApplicable("no operator norm of a transpose")
    return new, []


def _transpose_ids():
    a, b = _fresh("A", _k, _n), _fresh("B", _k, _n)
    return [(OpNorm(a.T), OpNorm(a)), (Inner(a.T, b.T), Inner(a, b))], InstanceSampler(_SMALL)


TRANSPOSITION = Lemma(
    key="transposition", number="T", title="Transposition invariance",
    statement=(r"\|A^{\top}\|_{\mathrm{op}} = \|A\|_{\mathrm{op}},\quad"
               r"\langle A^{\top}, B^{\top}\rangle = \langle A, B\rangle"),
    rewrite=_transpose_rewrite, identities=_transpose_ids,
)


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
    z = _fresh("Z", _k, _n)
    c, ci = GramSqrt(w), GramInvSqrt(w)
    return [(z * ci * c, z), (c * ci * z.T, z.T)], InstanceSampler(_SMALL)


CHANGE_OF_VARIABLES = Lemma(
    key="change_of_variables", number="4", title="Change of variables",
    statement=(r"Z = X C \text{ (or } Z = C X\text{)},\ C \text{ invertible}:\ "
               r"X = Z C^{-1},\ C^{-1} C = I"),
    conditions=(r"C \text{ invertible}",), rewrite=_cov_rewrite, identities=_cov_ids,
)


# ---- Lemma 5: msign identities ------------------------------------------------------------
def _msign_absorb_rewrite(expr, **_):
    """``msign(A) Uᵀ → msign(A Uᵀ)`` and ``U msign(A) → msign(U A)`` for isometric ``U``."""
    conditions = []

    def visit(e):
        if not isinstance(e, MatMul):
            return e
        coeff, mats = e.as_coeff_matrices()
        mats = list(mats)
        changed = True
        while changed:
            changed = False
            for i in range(len(mats) - 1):
                a, b = mats[i], mats[i + 1]
                if isinstance(a, Msign) and isinstance(b, Transpose) and _orthonormal_cols(b.arg):
                    conditions.append(_isometry_condition(b.arg))
                    mats[i:i + 2] = [Msign(product(a.arg, b))]
                    changed = True
                    break
                if isinstance(b, Msign) and _orthonormal_cols(a):
                    conditions.append(_isometry_condition(a))
                    mats[i:i + 2] = [Msign(product(a, b.arg))]
                    changed = True
                    break
        return product(coeff, *mats)

    new = map_bottom_up(expr, visit)
    if not conditions:
        raise NotApplicable("no msign next to an isometric factor")
    return new, conditions


def _msign_extract_rewrite(expr, **_):
    """``msign(A O) → msign(A) O`` for a square ``O`` with orthonormal columns (an orthogonal matrix)."""
    conditions = []

    def visit(e):
        if isinstance(e, Msign) and isinstance(e.arg, MatMul):
            coeff, mats = e.arg.as_coeff_matrices()
            last = mats[-1]
            if len(mats) > 1 and _orthonormal_cols(last) and last.shape[0] == last.shape[1]:
                conditions.append(f"{last} is orthogonal (square, orthonormal columns)")
                return product(Msign(product(coeff, *mats[:-1])), last)
        return e

    new = map_bottom_up(expr, visit)
    if not conditions:
        raise NotApplicable("no msign(A O) with a square orthogonal O")
    return new, conditions


def _msign_extract_ids():
    o = FactMatrix("O", _n, _n, [ORTHONORMAL_COLUMNS])
    a = _fresh("A", _k, _n)
    return [(Msign(product(a, o)), product(Msign(a), o))], InstanceSampler(_SMALL)


MSIGN_ORTHOGONAL = Lemma(
    key="msign_orthogonal", number="5e", title="msign commutes with an orthogonal right factor",
    statement=r"O^{\top}O = OO^{\top} = I:\ \operatorname{msign}(A O) = \operatorname{msign}(A) O",
    conditions=(r"O \text{ orthogonal}",), rewrite=_msign_extract_rewrite, identities=_msign_extract_ids,
)


def _msign_absorb_ids():
    u = _tall("U", ORTHONORMAL_COLUMNS)
    a = _fresh("A", _k, _n)
    b = _fresh("B", _n, _k)
    return [(Msign(a) * u.T, Msign(a * u.T)), (u * Msign(b), Msign(u * b))], InstanceSampler(_SMALL)


MSIGN_ISOMETRY = Lemma(
    key="msign_isometry", number="5a", title="msign commutes with isometries",
    statement=(r"U^{\top}U = I:\ \operatorname{msign}(A U^{\top}) = \operatorname{msign}(A) U^{\top},"
               r"\ \operatorname{msign}(U A) = U \operatorname{msign}(A)"),
    conditions=(r"U \text{ has orthonormal columns}",),
    rewrite=_msign_absorb_rewrite, identities=_msign_absorb_ids,
)


def _msign_scale_rewrite(expr, **_):
    conditions = []

    def visit(e):
        if isinstance(e, Msign) and isinstance(e.arg, MatMul):
            coeff, mats = e.arg.as_coeff_matrices()
            if coeff != 1:
                if not coeff.is_positive:
                    raise NotApplicable(f"msign(c A) = msign(A) needs c > 0; sign of {coeff} unknown")
                conditions.append(f"{coeff} > 0")
                return Msign(product(*mats))
        return e

    new = map_bottom_up(expr, visit)
    if not conditions:
        raise NotApplicable("no msign of a positively scaled matrix")
    return new, conditions


def _msign_scale_ids():
    a = _fresh("A", _k, _n)
    c = positive_symbol("c")
    return [(Msign(c * a), Msign(a))], InstanceSampler(_SMALL)


MSIGN_SCALE = Lemma(
    key="msign_scale", number="5b", title="msign ignores positive scale",
    statement=r"c > 0:\ \operatorname{msign}(c A) = \operatorname{msign}(A)",
    conditions=("c > 0",), rewrite=_msign_scale_rewrite, identities=_msign_scale_ids,
)


def _msign_transpose_rewrite(expr, **_):
    hits = []

    def visit(e):
        if isinstance(e, Transpose) and isinstance(e.arg, Msign):
            hits.append(e)
            return Msign(transpose(e.arg.arg))
        return e

    new = map_bottom_up(expr, visit)
    if not hits:
        raise NotApplicable("no transposed msign")
    return new, []


def _msign_transpose_ids():
    a = _fresh("A", _k, _n)
    return [(Transpose(Msign(a)), Msign(a.T))], InstanceSampler(_SMALL)


MSIGN_TRANSPOSE = Lemma(
    key="msign_transpose", number="5c", title="msign commutes with transposition",
    statement=r"\operatorname{msign}(A)^{\top} = \operatorname{msign}(A^{\top})",
    rewrite=_msign_transpose_rewrite, identities=_msign_transpose_ids,
)


# ---- Lemma 6: polar substitution ----------------------------------------------------------
def _polar_sub_rewrite(expr, *, matrix, damping=S.Zero, side="right", **_):
    u = PolarFactor(matrix, damping, side)
    c = u.gram_sqrt()
    new = replace_free(expr, matrix, product(u, c) if side == "right" else product(c, u))
    if new == expr:
        raise NotApplicable(f"{matrix} does not occur outside derived nodes")
    return new, [f"{matrix} = {u} {c.label()} with {c.label()} = ({matrix}ᵀ{matrix})^1/2 "
                 f"({'full column rank' if side == 'right' else 'full row rank'}, λ = 0)"]


def _polar_pairs(side):
    w = _tall("W", FULL_COLUMN_RANK) if side == "right" else FactMatrix("W", _n, _m, [FULL_ROW_RANK])
    u, c, ci = PolarFactor(w, 0, side), GramSqrt(w, 0, side), GramInvSqrt(w, 0, side)
    if side == "right":
        return w, u, c, ci, [(w, u * c), (ci * w.T, u.T), (w * ci, u)]
    return w, u, c, ci, [(w, c * u), (w.T * ci, u.T), (ci * w, u)]


def _polar_ids():
    pairs = _polar_pairs("right")[-1] + _polar_pairs("left")[-1]
    w = _tall("W", FULL_COLUMN_RANK)
    pairs.append((PolarFactor(w).T * PolarFactor(w), Identity(_n)))
    return pairs, InstanceSampler(_SMALL)


POLAR_SUBSTITUTION = Lemma(
    key="polar_substitution", number="6a", title="Polar substitution",
    statement=(r"W = U_W C_W,\ C_W = (W^{\top}W)^{1/2},\ U_W^{\top}U_W = I"),
    conditions=(r"W \text{ has full column rank}",),
    rewrite=_polar_sub_rewrite, identities=_polar_ids,
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
    return out, [f"{u} = {'W C⁻¹' if side == 'right' else 'C⁻¹ W'} with W = {matrix} "
                 f"({'full column rank' if side == 'right' else 'full row rank'} or λ > 0)"]


POLAR_INVERSE = Lemma(
    key="polar_inverse", number="6b", title="Polar factor from the Gram root",
    statement=r"U_W = W C_W^{-1},\quad C_W^{-1} W^{\top} = U_W^{\top}",
    conditions=(r"C_W \text{ invertible}",),
    rewrite=_polar_inverse_rewrite, identities=_polar_ids,
)


# ---- chain rule: factor gradients ---------------------------------------------------------
def _chain_rule_rewrite(expr, *, gradients, reverse=False, **_):
    """Replace ``G_M W_K`` by ``G_Q`` (or, reversed, ``G_Q`` by ``G_M W_K``)."""
    out, used = expr, []
    for name, definition in gradients.items():
        if reverse:
            before = out
            out = replace_free(out, name, definition)
            out = replace_free(out, transpose(name), transpose(definition))
            if out != before:
                used.append(f"{name} = {definition}")
            continue
        coeff, mats = definition.as_coeff_matrices() if isinstance(definition, MatMul) else (1, [definition])
        for pattern, replacement in ((list(mats), [name]),
                                     ([transpose(m) for m in reversed(mats)], [transpose(name)])):
            out, hits = rewrite_adjacent(out, pattern, replacement)
            if hits:
                used.append(f"{name} = {definition}")
    if not used:
        raise NotApplicable("no product of the loss gradient and a partner to name as a factor gradient")
    return out, [f"{u} (chain rule through M)" for u in dict.fromkeys(used)]


def _chain_check(rng):
    """Finite differences: ∂/∂W_Q L(W_Q W_Kᵀ) = G_M W_K for L(M) = Σ sin(M)."""
    wq, wk = rng.standard_normal((5, 2)), rng.standard_normal((5, 2))
    loss = lambda q, k: float(np.sum(np.sin(q @ k.T)))
    g_m = np.cos(wq @ wk.T)
    g_q, g_k = g_m @ wk, g_m.T @ wq
    h, err = 1e-6, 0.0
    for idx in np.ndindex(wq.shape):
        e = np.zeros_like(wq)
        e[idx] = h
        fd_q = (loss(wq + e, wk) - loss(wq - e, wk)) / (2 * h)
        fd_k = (loss(wq, wk + e) - loss(wq, wk - e)) / (2 * h)
        err = max(err, abs(fd_q - g_q[idx]), abs(fd_k - g_k[idx]))
    return err


CHAIN_RULE = Lemma(
    key="chain_rule", number="CR", title="Chain rule through the product",
    statement=(r"M = W_Q W_K^{\top}:\ G_Q = \frac{\partial L}{\partial W_Q} = G_M W_K,\ "
               r"G_K = \frac{\partial L}{\partial W_K} = G_M^{\top} W_Q"),
    rewrite=_chain_rule_rewrite, check=_chain_check,
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
    return [(PolarFactor(w) * PolarFactor(w).T, p), (product(p, p), p), (product(p, w), w)], InstanceSampler(_SMALL)


PROJECTOR = Lemma(
    key="projector", number="P", title="Orthogonal projector onto the column space",
    statement=r"P_W = U_W U_W^{\top},\ P_W^2 = P_W = P_W^{\top},\ P_W W = W",
    conditions=(r"U_W \text{ has orthonormal columns}",),
    rewrite=_projector_rewrite, identities=_projector_ids,
)


# ---- isotropic partner --------------------------------------------------------------------
def _isotropic_rewrite(expr, *, matrix, **_):
    if ISOTROPIC_COLUMNS not in facts_of(matrix):
        raise NotApplicable(f"{matrix} is not known to have orthogonal columns of equal norm")
    hits = []

    def visit(e):
        if isinstance(e, (GramSqrt, GramInvSqrt)) and e.base == matrix and e.side == "right":
            hits.append(e)
            c = IsotropicScale(matrix, e.damping)
            return product(c if isinstance(e, GramSqrt) else 1 / c, Identity(e.size))
        return e

    new = tidy(map_bottom_up(expr, visit))
    if not hits:
        raise NotApplicable(f"no Gram root of {matrix} to replace")
    return new, [f"{matrix}ᵀ{matrix} = c² I (orthogonal columns of equal norm)"]


def _isotropic_ids():
    w = _tall("W", FULL_COLUMN_RANK, ISOTROPIC_COLUMNS)
    lam = nonnegative_symbol("lambda")
    c = IsotropicScale(w, lam)
    return ([(GramSqrt(w, lam), c * Identity(_n)), (GramInvSqrt(w, lam), (1 / c) * Identity(_n))],
            InstanceSampler(_SMALL))


ISOTROPIC_PARTNER = Lemma(
    key="isotropic_partner", number="I", title="Isotropic partner",
    statement=(r"W^{\top}W = c^2 I,\ c = \|W\|_F/\sqrt{d_h}:\ (W^{\top}W + \lambda I)^{\pm 1/2}"
               r" = (c^2 + \lambda)^{\pm 1/2} I"),
    conditions=(r"W \text{ has orthogonal columns of equal norm}",),
    rewrite=_isotropic_rewrite, identities=_isotropic_ids,
)


# ---- linearity of the inner product ---------------------------------------------------------
def _linearity_rewrite(expr, **_):
    hits = []

    def visit(e):
        if isinstance(e, Inner) and isinstance(e.args[1], MatAdd):
            hits.append(e)
            return Add(*[Inner(e.args[0], t) for t in e.args[1].args])
        return e

    new = map_bottom_up(expr, visit)
    if not hits:
        raise NotApplicable("no inner product with a sum to split")
    return new, []


def _linearity_ids():
    a, b, c = _fresh("A", _k, _n), _fresh("B", _k, _n), _fresh("C", _k, _n)
    return [(Inner(a, MatAdd(b, c)), Inner(a, b) + Inner(a, c))], InstanceSampler(_SMALL)


INNER_LINEARITY = Lemma(
    key="inner_linearity", number="L", title="Linearity of the inner product",
    statement=r"\langle A, B + C\rangle = \langle A, B\rangle + \langle A, C\rangle",
    rewrite=_linearity_rewrite, identities=_linearity_ids,
)


# ---- regularized Sylvester equation -------------------------------------------------------
def _sylvester_rewrite(expr, **_):
    """``A Aᵀ H + H B Bᵀ → D − 2λH`` for ``H`` the regularized Sylvester solution."""
    conditions = []

    def visit(e):
        if not isinstance(e, MatAdd):
            return e
        terms = list(e.args)
        for h in sorted({a for t in terms for a in t.atoms(RegularizedSylvester)}, key=str):
            ga, gb = (product(m.args[0], m.args[1]) for m in h.grams())
            left, right = product(ga, h), product(h, gb)
            if left in terms and right in terms:
                terms.remove(left)
                terms.remove(right)
                terms += [h.rhs] + ([product(-2 * h.damping, h)] if h.damping != 0 else [])
                conditions.append(f"{h} solves ({ga} + λI) {h} + {h} ({gb} + λI) = {h.rhs}, λ = {h.damping}"
                                  + (" > 0" if h.side == "outer" else " (SPD Grams: full column rank)"))
        return total(*terms) if conditions else e

    new = map_bottom_up(expr, visit)
    if not conditions:
        raise NotApplicable("no A Aᵀ H + H B Bᵀ with H a regularized Sylvester solution")
    return new, conditions


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


SYLVESTER_EQUATION = Lemma(
    key="sylvester_equation", number="S", title="Regularized Sylvester equation",
    statement=(r"(\mathcal{A} + \lambda I) H + H (\mathcal{B} + \lambda I) = D \;\Rightarrow\;"
               r" \mathcal{A} H + H \mathcal{B} = D - 2\lambda H,\ "
               r"\mathcal{A} = AA^{\top} \text{ or } A^{\top}A"),
    conditions=(r"\lambda > 0 \text{ (outer) or full-rank factors (inner)}",), rewrite=_sylvester_rewrite, identities=_sylvester_ids,
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
    changed = []

    def visit(e):
        e2 = _distribute(e)
        if not isinstance(e2, MatAdd):
            if e2 != e:
                changed.append(e)
            return e2
        groups = {}
        for t in e2.args:
            c, m = _split_coeff(t)
            groups[m] = groups.get(m, S.Zero) + c
        terms = [product(c, m) for m, c in groups.items() if c != 0]
        if not terms:
            out = ZeroMatrix(*e2.shape)
        else:
            out = total(*terms)
        if out != e:
            changed.append(e)
        return out

    new = tidy(map_bottom_up(expr, visit))
    if not changed:
        raise NotApplicable("nothing to distribute or collect")
    return new, []


def _collect_ids():
    a, b, c = _fresh("A", _k, _n), _fresh("B", _k, _n), _fresh("C", _n, _n)
    return ([(product(total(a, b), c), total(product(a, c), product(b, c))),
             (total(a, product(-1, a), b), b)], InstanceSampler(_SMALL))


RING = Lemma(
    key="ring", number="R", title="Distributivity and collection of like terms",
    statement=r"(A + B) C = AC + BC,\quad \alpha X + \beta X = (\alpha + \beta) X",
    rewrite=_collect_rewrite, identities=_collect_ids,
)


# ---- msign in polar form and orthogonal blocks ------------------------------------------------
def _polar_form_rewrite(expr, *, targets, reverse=False, **_):
    """``msign(X) → X C_X⁻¹`` (or back) for the ``targets`` asserted to have full column rank."""
    hits = []

    def visit(e):
        if not reverse and isinstance(e, Msign) and e.arg in targets:
            hits.append(e.arg)
            return product(e.arg, GramInvSqrt(e.arg))
        if reverse and isinstance(e, MatMul):
            coeff, mats = e.as_coeff_matrices()
            for i in range(len(mats) - 1):
                if mats[i] in targets and mats[i + 1] == GramInvSqrt(mats[i]):
                    hits.append(mats[i])
                    return product(coeff, *mats[:i], Msign(mats[i]), *mats[i + 2:])
        return e

    new = map_bottom_up(expr, visit)
    if not hits:
        raise NotApplicable("no msign (or X C_X⁻¹) of a full-column-rank target")
    return new, [f"{h} has full column rank" for h in dict.fromkeys(hits)]


def _polar_form_ids():
    x = _tall("X", FULL_COLUMN_RANK)
    return [(Msign(x), product(x, GramInvSqrt(x)))], InstanceSampler(_SMALL)


MSIGN_POLAR_FORM = Lemma(
    key="msign_polar_form", number="5d", title="msign of a full-column-rank matrix",
    statement=r"\operatorname{msign}(X) = X (X^{\top}X)^{-1/2}",
    conditions=(r"X \text{ has full column rank}",), rewrite=_polar_form_rewrite, identities=_polar_form_ids,
)


def _orthogonal_gram_rewrite(expr, *, pair, **_):
    a, b = pair
    target = GramInvSqrt(HStack(a, b))
    new = map_bottom_up(expr, lambda e: BlockDiag(GramInvSqrt(a), GramInvSqrt(b)) if e == target else e,
                        enter_derived=False)
    if new == expr:
        raise NotApplicable(f"no Gram root of [{a} | {b}]")
    return new, [f"{a}ᵀ{b} = 0 (orthogonal column spaces)"]


def _orthogonal_ids():
    a = _tall("A", FULL_COLUMN_RANK)
    r = _fresh("R", _m, _n)
    b = MatrixSymbol("B", _m, _n)
    sampler = InstanceSampler(_SMALL, {b: product(total(Identity(_m), product(-1, Projector(a))), r)})
    return [(GramInvSqrt(HStack(a, b)), BlockDiag(GramInvSqrt(a), GramInvSqrt(b)))], sampler


ORTHOGONAL_BLOCKS = Lemma(
    key="orthogonal_blocks", number="O", title="Gram root of orthogonal blocks",
    statement=(r"A^{\top}B = 0:\ ([A \,|\, B]^{\top}[A \,|\, B])^{-1/2}"
               r" = \operatorname{blockdiag}((A^{\top}A)^{-1/2}, (B^{\top}B)^{-1/2})"),
    conditions=(r"A^{\top}B = 0",), rewrite=_orthogonal_gram_rewrite, identities=_orthogonal_ids,
)


def _block_product_rewrite(expr, **_):
    hits = []

    def visit(e):
        if not isinstance(e, MatMul):
            return e
        coeff, mats = e.as_coeff_matrices()
        for i in range(len(mats) - 1):
            h, bd = mats[i], mats[i + 1]
            if isinstance(h, HStack) and isinstance(bd, BlockDiag) and len(h.args) == len(bd.args):
                hits.append(e)
                merged = HStack(*[product(x, y) for x, y in zip(h.args, bd.args)])
                return product(coeff, *mats[:i], merged, *mats[i + 2:])
        return e

    new = map_bottom_up(expr, visit)
    if not hits:
        raise NotApplicable("no [A | B] blockdiag(C, D) product")
    return new, []


def _block_product_ids():
    a, b = _fresh("A", _m, _n), _fresh("B", _m, _k)
    c, dd = _fresh("C", _n, _n), _fresh("D", _k, _k)
    return [(product(HStack(a, b), BlockDiag(c, dd)), HStack(product(a, c), product(b, dd)))], InstanceSampler(_SMALL)


BLOCK_PRODUCT = Lemma(
    key="block_product", number="B", title="Concatenation times block diagonal",
    statement=r"[A \,|\, B] \operatorname{blockdiag}(C, D) = [AC \,|\, BD]",
    rewrite=_block_product_rewrite, identities=_block_product_ids,
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
    s_ = _fresh("S", _n, _n)
    o = FactMatrix("O", _n, _n, [ORTHONORMAL_COLUMNS])
    moved = GramInvSqrt(product(w, s_))
    sampler = InstanceSampler(_SMALL, {o: PolarFactor(product(GramSqrt(w), s_))})
    return ([(product(s_, moved), product(GramInvSqrt(w), o)),
             (product(o, moved), product(GramInvSqrt(w), Transpose(Inverse(s_))))], sampler)


GAUGE_POLAR = Lemma(
    key="gauge_polar", number="G", title="Gram root of a gauge-transformed factor",
    statement=(r"O = C_W S\,(S^{\top} C_W^2 S)^{-1/2} \text{ is orthogonal}:\ "
               r"S\,C_{WS}^{-1} = C_W^{-1} O,\quad O\,C_{WS}^{-1} = C_W^{-1} S^{-\top}"),
    conditions=(r"S \text{ invertible}, W \text{ full column rank}",), rewrite=_gauge_polar_rewrite,
    identities=_gauge_ids,
)


ALL_LEMMAS = (LINEAR_STEEPEST_DESCENT, ORTHONORMAL_INVARIANCE, ADJOINT_MOVE, TRANSPOSITION, CHANGE_OF_VARIABLES,
              MSIGN_ISOMETRY, MSIGN_SCALE, MSIGN_TRANSPOSE, POLAR_SUBSTITUTION, POLAR_INVERSE,
              CHAIN_RULE, PROJECTOR, ISOTROPIC_PARTNER, INNER_LINEARITY, SYLVESTER_EQUATION, RING,
              MSIGN_POLAR_FORM, ORTHOGONAL_BLOCKS, BLOCK_PRODUCT, MSIGN_ORTHOGONAL, GAUGE_POLAR)
