"""The named lemmas of Compositional Muon (Lemmas 1–6 and their companions) as rewrite rules.

Each :class:`Lemma` has a LaTeX statement, its side conditions, a rewrite that finds the
lemma's left-hand side in an expression and replaces it (checking the facts that the side
conditions need, and refusing otherwise with the reason), and a self-check that exercises both
the statement and the rewrite code on random instances (:meth:`Lemma.self_check`). Lemmas never
contain a rule's final formula: they are generic identities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import mpmath
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
    NuclearNorm,
    OpNorm,
    PolarFactor,
    Projector,
    RegularizedSylvester,
    dimension,
    facts_of,
    nonnegative_symbol,
    positive_symbol,
)

SELF_CHECK_TOL = 1e-8  # relative error a lemma's self-check tolerates (float64, well-conditioned instances)


class NotApplicable(ValueError):
    """A lemma found nothing to rewrite, or a side condition is not known to hold (the message says which)."""


@dataclass(frozen=True)
class Case:
    """One instance of a lemma's statement, ``lhs = rhs``, that its self-check exercises.

    ``params`` are the keyword arguments the rewrite needs (``variable=``, ``matrix=`` …);
    ``substitution = (X, expr)`` binds ``X := expr`` when evaluating (a change of variables);
    ``rewrites=False`` marks a part of the statement that the rewrite does not perform (it is
    still evaluated on both sides).
    """

    lhs: Basic
    rhs: Basic
    params: dict = field(default_factory=dict)
    substitution: tuple | None = None
    rewrites: bool = True


@dataclass
class SelfCheck:
    """Outcome of a lemma's self-check: the worst error of each sub-check and the failures."""

    lemma: str
    errors: dict
    failures: list
    tolerance: float = SELF_CHECK_TOL

    @property
    def error(self) -> float:
        return max(self.errors.values(), default=0.0)

    @property
    def passed(self) -> bool:
        return not self.failures

    def __float__(self):
        return self.error

    def __format__(self, spec):
        return format(self.error, spec)


@dataclass(frozen=True)
class Lemma:
    """A named rewrite rule with its statement, side conditions and self-check.

    ``identities() -> (cases, sampler)``: instances of the statement (``Case`` or ``(lhs, rhs)``
    pairs) that the self-check evaluates on both sides and feeds to ``rewrite`` inside random
    surrounding expressions. ``check(rng) -> {sub-check: error}`` replaces that for lemmas that
    are not rewrites (Lemma 1). ``algebraic``: the explicit symbolic model of
    :mod:`derivations.symbolic` encodes everything the lemma uses, so a symbolic disagreement
    refutes a step; otherwise ``not_modelled`` says why the symbolic check does not apply.
    ``instance(env, rng, backend, dims, **params) -> (env, overridden)`` replaces sampled values
    where the lemma's facts are not identities of the sampled matrices (the chain rule: gradients
    from automatic differentiation). ``solution(A, β) -> (argmin, value)`` for Lemma 1.
    """

    key: str
    number: str
    title: str
    statement: str  # LaTeX
    conditions: tuple = ()
    rewrite: Callable = field(default=None, repr=False, compare=False)
    identities: Callable = field(default=None, repr=False, compare=False)  # () -> ([Case | (lhs, rhs)], sampler)
    check: Callable = field(default=None, repr=False, compare=False)  # (rng) -> {sub-check: error}
    algebraic: bool = False
    not_modelled: str = "uses facts the explicit symbolic model does not encode"
    instance: Callable = field(default=None, repr=False, compare=False)
    solution: Callable = field(default=None, repr=False, compare=False)

    def apply(self, expr: Basic, **params):
        """Rewrite ``expr``; returns ``(new_expr, instantiated side conditions)``."""
        new, conditions = self.rewrite(expr, **params)
        return new, conditions

    def cases(self):
        """``([Case], sampler)`` of the self-check."""
        raw, sampler = self.identities()
        return [c if isinstance(c, Case) else Case(*c) for c in raw], sampler

    def self_check(self, rng: np.random.Generator, trials: int = 3) -> SelfCheck:
        """Check the statement *and the rewrite code* on random instances.

        For every case: both sides of the statement agree numerically (sub-check ``statement``);
        the rewrite fires on the bare left-hand side (``rewrite fires``); and, inside random
        surrounding expressions (bare, multiplied on either side, summed, scaled), the rewritten
        expression has the value of the original (``rewrite preserves value``). A context in which
        the rewrite declines is skipped; the bare one must fire.
        """
        errors, failures = {}, []
        if self.check is not None:
            for _ in range(trials):
                for name, err in self.check(rng, self).items():
                    errors[name] = max(errors.get(name, 0.0), float(err))
        else:
            cases, sampler = self.cases()
            for i, case in enumerate(cases, 1):
                self._check_case(i, case, sampler, rng, trials, errors, failures)
        for name, err in errors.items():
            if not err <= SELF_CHECK_TOL:
                failures.append(f"lemma {self.number} ({self.title}) self-check, sub-check '{name}': "
                                f"error {err:.3e} > {SELF_CHECK_TOL:.0e}")
        return SelfCheck(self.number, errors, failures)

    def _values(self, exprs, case, sampler, rng, params):
        env = sampler.sample(rng, free_symbols(*exprs, *(case.substitution or ())))
        if self.instance is not None:
            env, _ = self.instance(env, rng, _NP, sampler.dims, **params)
        if case.substitution is not None:
            old, expr = case.substitution
            env[old] = evaluate(expr, env, dims=sampler.dims)
        return [np.asarray(evaluate(e, env, dims=sampler.dims)) for e in exprs]

    def _check_case(self, i, case, sampler, rng, trials, errors, failures):
        def record(name, err):
            errors[name] = max(errors.get(name, 0.0), float(err))

        for _ in range(trials):
            a, b = self._values([case.lhs, case.rhs], case, sampler, rng, case.params)
            record("statement", relative_error(a, b, _NP))
        if not case.rewrites:
            return
        for label, wrapped in _contexts(case.lhs):
            try:
                new, _ = self.apply(wrapped, **case.params)
            except NotApplicable as exc:
                if label == "bare":
                    failures.append(f"lemma {self.number} ({self.title}) self-check, case {i}: the rewrite "
                                    f"does not fire on its own left-hand side {case.lhs}: {exc}")
                continue
            if new == wrapped:
                if label == "bare":
                    failures.append(f"lemma {self.number} ({self.title}) self-check, case {i}: the rewrite "
                                    f"left {case.lhs} unchanged")
                continue
            for _ in range(trials):
                a, b = self._values([wrapped, new], case, sampler, rng, case.params)
                record("rewrite preserves value", relative_error(a, b, _NP))


def _contexts(lhs):
    """``lhs`` bare and inside random-valued surroundings (fresh symbols, sampled like the rest)."""
    out = [("bare", lhs)]
    if getattr(lhs, "is_Matrix", False):
        rows, cols = lhs.shape
        f, h, e = MatrixSymbol("F_ctx", rows, rows), MatrixSymbol("H_ctx", cols, cols), MatrixSymbol("E_ctx", rows, cols)
        out += [("left", product(f, lhs)), ("right", product(lhs, h)), ("both", product(f, lhs, h)),
                ("sum", total(lhs, e)), ("scaled sum", total(product(positive_symbol("s_ctx"), lhs), e))]
    else:
        c, s = positive_symbol("c_ctx"), positive_symbol("s_ctx")
        out += [("scaled", c * lhs), ("affine", c * lhs + s)]
    return out


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


def _lsd_solution(a, beta):
    """``(−β msign(A), −β ‖A‖_*)``: the argmin and the optimal value that Lemma 1 states."""
    return tidy(product(-beta, Msign(a))), -beta * NuclearNorm(a)


def singular_values(a, backend):
    """Singular values of ``a`` from an SVD of the backend's own (float64 LAPACK or mpmath)."""
    if backend.name == "mpmath":
        return [v for v in mpmath.svd_r(a, compute_uv=False)]
    return [float(v) for v in np.linalg.svd(np.asarray(a, dtype=float), compute_uv=False)]


def operator_ball_certificate(a, z, value, beta, backend, rng=None, directions=None) -> dict:
    """Duality certificate that ``z`` solves ``min ⟨a, Z⟩ s.t. ‖Z‖_op ≤ β`` with optimal ``value``.

    Weak duality (Hölder): every feasible ``Z`` has ``⟨a, Z⟩ ≥ −‖a‖_* ‖Z‖_op ≥ −β ‖a‖_*``, so a
    feasible ``z`` with ``⟨a, z⟩ = −β ‖a‖_*`` is optimal, whatever formula produced it. The nuclear
    norm comes from an SVD here, independently of the claimed solution. Relative errors:

    * ``feasible``: ``max(0, ‖z‖_op − β) / β``;
    * ``attains the dual bound``: ``|⟨a, z⟩ + β ‖a‖_*|`` (a suboptimal ``z`` stays above it);
    * ``stated value``: ``|value + β ‖a‖_*|``;
    * ``no improving direction`` (float64, with ``rng``): moving ``z`` along random directions
      (``directions(rng)`` draws them; default Gaussian) and scaling back into the ball never
      lowers ``⟨a, ·⟩`` (a first-order test of the optimality condition).
    """
    dual = -beta * sum(singular_values(a, backend))
    scale = max(1.0, abs(float(dual)))
    attained = backend.inner(a, z)
    out = {"feasible": max(0.0, float(backend.op_norm(z) - beta)) / float(beta),
           "attains the dual bound": abs(float(attained - dual)) / scale,
           "stated value": abs(float(value - dual)) / scale}
    if rng is not None and backend.name == "float64":
        draw = directions or (lambda g: g.standard_normal(np.shape(z)))
        worst = 0.0
        for _ in range(6):
            d = draw(rng)
            for t in (1e-3, 1e-1):
                y = z + t * d * max(1.0, float(np.max(np.abs(z))))
                y = y * min(1.0, float(beta) / backend.op_norm(y))
                worst = max(worst, (attained - backend.inner(a, y)) / scale)
        out["no improving direction"] = max(0.0, worst - 1e-12)
    return out


def _lsd_check(rng, lemma):
    """Lemma 1's solution, certified by duality on random tall, square and wide ``A``.

    The lemma's ``solution`` function builds ``(argmin, value)`` symbolically; both are evaluated
    and checked with :func:`operator_ball_certificate` (nuclear norm from an SVD, feasibility,
    attained dual bound, stated value, no improving direction).
    """
    errors = {}
    beta = positive_symbol("beta")
    for rows, cols in ((6, 4), (5, 5), (3, 7)):
        a = MatrixSymbol("A", rows, cols)
        argmin, value = lemma.solution(a, beta)
        env = {a: rng.standard_normal((rows, cols)), beta: float(rng.uniform(0.5, 2.0))}
        z, v = evaluate(argmin, env), evaluate(value, env)
        for name, err in operator_ball_certificate(env[a], np.asarray(z), v, env[beta], _NP, rng).items():
            errors[name] = max(errors.get(name, 0.0), err)
    return errors


LINEAR_STEEPEST_DESCENT = Lemma(
    key="linear_steepest_descent", number="1", title="Linear steepest descent (Muon)",
    statement=(r"\operatorname*{argmin}_{\|Z\|_{\mathrm{op}} \le \beta} \langle A, Z\rangle"
               r" = -\beta \operatorname{msign}(A), \quad \text{value } -\beta \|A\|_{*}"),
    conditions=(r"\beta > 0",), rewrite=_lsd_rewrite, check=_lsd_check, solution=_lsd_solution,
    not_modelled="certified by duality (nuclear norm from an SVD), not symbolically",
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
    pairs = [(Inner(g, x * b), Inner(g * b.T, x)), (Inner(g, a * x * b), Inner(a.T * g * b.T, x)),
             (Inner(f, b.T * x.T * h), Inner(h * f.T * b.T, x))]
    return [Case(lhs, rhs, {"variable": x}) for lhs, rhs in pairs], InstanceSampler(_SMALL)


ADJOINT_MOVE = Lemma(
    key="adjoint_move", number="3", title="Adjoint moves",
    statement=(r"\langle G, X B\rangle = \langle G B^{\top}, X\rangle,\quad"
               r"\langle G, B X\rangle = \langle B^{\top} G, X\rangle,\quad"
               r"\langle G, X^{\top}\rangle = \langle G^{\top}, X\rangle"),
    rewrite=_adjoint_rewrite, identities=_adjoint_ids, algebraic=True,
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
    return [(OpNorm(a.T), OpNorm(a)), Case(Inner(a.T, b.T), Inner(a, b), rewrites=False)], InstanceSampler(_SMALL)


TRANSPOSITION = Lemma(
    key="transposition", number="T", title="Transposition invariance",
    statement=(r"\|A^{\top}\|_{\mathrm{op}} = \|A\|_{\mathrm{op}},\quad"
               r"\langle A^{\top}, B^{\top}\rangle = \langle A, B\rangle"),
    rewrite=_transpose_rewrite, identities=_transpose_ids,
    not_modelled="invariance of the operator norm under transposition (a spectral fact)",
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
    c, ci = GramSqrt(w), GramInvSqrt(w)
    x, z, g = _fresh("X", _k, _n), _fresh("Z", _k, _n), _fresh("G", _k, _n)
    xl, zl = _fresh("Y", _n, _k), _fresh("V", _n, _k)
    right = {"variable": x, "new": z, "factor": c, "side": "right"}
    left = {"variable": xl, "new": zl, "factor": c, "side": "left"}
    return ([Case(Inner(g, product(x, c)), Inner(g, z), right, (x, product(z, ci))),
             Case(OpNorm(product(x, c)), OpNorm(z), right, (x, product(z, ci))),
             Case(product(c, xl), zl, left, (xl, product(ci, zl)))],
            InstanceSampler(_SMALL))


CHANGE_OF_VARIABLES = Lemma(
    key="change_of_variables", number="4", title="Change of variables",
    statement=(r"Z = X C \text{ (or } Z = C X\text{)},\ C \text{ invertible}:\ "
               r"X = Z C^{-1},\ C^{-1} C = I"),
    conditions=(r"C \text{ invertible}",), rewrite=_cov_rewrite, identities=_cov_ids, algebraic=True,
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


POLAR_SUBSTITUTION = Lemma(
    key="polar_substitution", number="6a", title="Polar substitution",
    statement=(r"W = U_W C_W,\ C_W = (W^{\top}W)^{1/2},\ U_W^{\top}U_W = I"),
    conditions=(r"W \text{ has full column rank}",),
    rewrite=_polar_sub_rewrite, identities=_polar_ids, algebraic=True,
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
    rewrite=_polar_inverse_rewrite, identities=_polar_inverse_ids, algebraic=True,
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


def _loss_gradient(gradients, loss_gradient=None):
    """The loss gradient ``G_M`` in the definitions: given, common to all of them, or the factor without facts."""
    if loss_gradient is not None:
        return loss_gradient
    factor_sets = []
    for definition in gradients.values():
        mats = definition.as_coeff_matrices()[1] if isinstance(definition, MatMul) else [definition]
        factor_sets.append({m.arg if isinstance(m, Transpose) else m for m in mats})
    common = set.intersection(*factor_sets) if len(factor_sets) > 1 else set()
    if len(common) == 1:
        return common.pop()
    plain = {m for m in factor_sets[0] if not isinstance(m, FactMatrix)}
    if not common and len(factor_sets) == 1 and len(plain) == 1:
        return plain.pop()
    raise NotApplicable(f"cannot tell the loss gradient from the partners in {dict(gradients)}; "
                        f"pass loss_gradient=")


def chain_rule_products(gradients, loss_gradient=None):
    """How each factor gradient arises: ``(G_M, left, right, slots)`` with ``M = left · right``.

    ``left`` and ``right`` are ``(partner, transposed)`` or ``None`` (a factor no definition
    names); ``slots[G] = (side, transposed)`` is the factor that ``G`` differentiates. Read off
    the definitions: ``G = G_M W`` is the gradient of ``L(X Wᵀ)`` in ``X``, ``G = G_Mᵀ W`` of
    ``L(W Xᵀ)``, ``G = Wᵀ G_M`` of ``L(W X)``.
    """
    s = _loss_gradient(gradients, loss_gradient)
    left, right, slots = None, None, {}

    def put(current, value, what):
        if current is not None and current != value:
            raise NotApplicable(f"the factor gradients do not come from one product: {what} is both "
                                f"{current[0]} and {value[0]}")
        return value

    for name, definition in gradients.items():
        coeff, mats = definition.as_coeff_matrices() if isinstance(definition, MatMul) else (S.One, [definition])
        if coeff != 1 or len(mats) != 2:
            raise NotApplicable(f"{name} = {definition} is not a loss gradient times one partner")
        a, b = mats
        if a == s:  # G = G_M W: M = X Wᵀ
            slots[name] = ("left", False)
            right = put(right, (b, True), "the right factor")
        elif a == transpose(s):  # G = G_Mᵀ W: M = W Xᵀ
            slots[name] = ("right", True)
            left = put(left, (b, False), "the left factor")
        elif b == s and isinstance(a, Transpose):  # G = Wᵀ G_M: M = W X
            slots[name] = ("right", False)
            left = put(left, (a.arg, False), "the left factor")
        else:
            raise NotApplicable(f"{name} = {definition} is none of G_M W, G_Mᵀ W, Wᵀ G_M for G_M = {s}")
    return s, left, right, slots


@cache
def _jax_gradient_fn(lt: bool, rt: bool):
    """Jitted ``(∂L/∂M, ∂L/∂left, ∂L/∂right)`` for ``L(M) = Σ c sin(M) + ½ Σ b M²``, ``M = left · right``."""
    import jax
    import jax.numpy as jnp

    def loss_of_m(m, c, b):
        return jnp.sum(c * jnp.sin(m) + 0.5 * b * m * m)

    def loss(lx, rx, c, b):
        return loss_of_m((lx.T if lt else lx) @ (rx.T if rt else rx), c, b)

    def grads(lx, rx, c, b):
        m = (lx.T if lt else lx) @ (rx.T if rt else rx)
        return (jax.grad(loss_of_m)(m, c, b),) + jax.grad(loss, argnums=(0, 1))(lx, rx, c, b)

    return jax.jit(grads)


def _jax_loss_gradients(lv, rv, c, b, lt, rt):
    import jax
    with jax.enable_x64(True):
        return tuple(np.asarray(g) for g in _jax_gradient_fn(bool(lt), bool(rt))(lv, rv, c, b))


def _chain_instance(env, rng, backend, dims, *, gradients, loss_gradient=None, **_):
    """Values for ``G_M`` and the factor gradients from differentiating a random scalar loss.

    ``L(M) = Σ c_ij sin(M_ij) + ½ Σ b_ij M_ij²`` of ``M = left · right``
    (:func:`chain_rule_products`; the factors come from ``env`` where sampled, fresh otherwise).
    float64: ``jax.grad`` of ``L`` in ``M`` and in each factor; mpmath: complex-step derivatives
    ``Im L(X + i h E_k) / h`` at the working precision (exact to ``O(h²)``, no cancellation). The
    chain rule's own definitions are never used, so a step that rewrites with a wrong definition
    disagrees with the derivatives.
    """
    from .evaluate import _size
    s, left, right, slots = chain_rule_products(gradients, loss_gradient)
    m_shape = tuple(_size(x, dims) for x in s.shape)
    out = dict(env)

    def factor(side):
        spec = left if side == "left" else right
        if spec is not None and spec[0] in env:
            return env[spec[0]], spec[1]
        name = next(g for g, (sd, _) in slots.items() if sd == side)
        value = backend.asarray(rng.standard_normal(tuple(_size(x, dims) for x in name.shape)))
        if spec is not None:
            out[spec[0]] = value
        return value, slots[name][1] if spec is None else spec[1]

    (lv, lt), (rv, rt) = factor("left"), factor("right")
    c, b = rng.uniform(0.5, 1.5, m_shape) * rng.choice([-1.0, 1.0], m_shape), rng.uniform(-1.0, 1.0, m_shape)
    if backend.name == "float64":
        grad_m, grad_left, grad_right = _jax_loss_gradients(lv, rv, c, b, lt, rt)
        out[s] = grad_m
        for name, (side, _) in slots.items():
            out[name] = grad_left if side == "left" else grad_right
        return out, {s, *slots}
    cm, bm = backend.asarray(c), backend.asarray(b)
    prod = lambda lx, rx: (lx.T if lt else lx) * (rx.T if rt else rx)
    h = mpmath.mpf(10) ** (-(mpmath.mp.dps + 10))

    def loss(m):
        return mpmath.fsum(cm[i, j] * mpmath.sin(m[i, j]) + bm[i, j] * m[i, j] ** 2 / 2
                           for i in range(m.rows) for j in range(m.cols))

    def complex_step(f, x):
        g = mpmath.zeros(x.rows, x.cols)
        for i in range(x.rows):
            for j in range(x.cols):
                shifted = mpmath.matrix(x)
                shifted[i, j] += mpmath.mpc(0, h)
                g[i, j] = mpmath.im(f(shifted)) / h
        return g

    out[s] = complex_step(loss, prod(lv, rv))
    for name, (side, _) in slots.items():
        out[name] = complex_step((lambda x: loss(prod(x, rv))) if side == "left" else (lambda x: loss(prod(lv, x))),
                                 lv if side == "left" else rv)
    return out, {s, *slots}


def _chain_ids():
    w_q, w_k = _tall("W_Q", FULL_COLUMN_RANK), _tall("W_K", FULL_COLUMN_RANK)
    g_m, g_q, g_k = _fresh("G_M", _m, _m), _fresh("G_Q", _m, _n), _fresh("G_K", _m, _n)
    qk = {g_q: product(g_m, w_k), g_k: product(transpose(g_m), w_q)}
    w_o, g_v = _tall("W_O", FULL_COLUMN_RANK), _fresh("G_V", _n, _m)
    ov = {g_v: product(transpose(w_o), g_m)}
    cases = [Case(definition, name, {"gradients": grads}) for grads in (qk, ov) for name, definition in grads.items()]
    cases += [Case(name, definition, {"gradients": grads, "reverse": True})
              for grads in (qk, ov) for name, definition in grads.items()]
    return cases, InstanceSampler(_SMALL)


CHAIN_RULE = Lemma(
    key="chain_rule", number="CR", title="Chain rule through the product",
    statement=(r"M = W_Q W_K^{\top}:\ G_Q = \frac{\partial L}{\partial W_Q} = G_M W_K,\ "
               r"G_K = \frac{\partial L}{\partial W_K} = G_M^{\top} W_Q"),
    rewrite=_chain_rule_rewrite, identities=_chain_ids, instance=_chain_instance,
    not_modelled="checked against automatic differentiation of a random loss, not against its own definitions",
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
    statement=r"P_W = U_W U_W^{\top},\ P_W^2 = P_W = P_W^{\top},\ P_W W = W",
    conditions=(r"U_W \text{ has orthonormal columns}",),
    rewrite=_projector_rewrite, identities=_projector_ids, algebraic=True,
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
    return ([Case(GramSqrt(w, lam), c * Identity(_n), {"matrix": w}),
             Case(GramInvSqrt(w, lam), (1 / c) * Identity(_n), {"matrix": w})], InstanceSampler(_SMALL))


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
    rewrite=_linearity_rewrite, identities=_linearity_ids, algebraic=True,
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
    rewrite=_collect_rewrite, identities=_collect_ids, algebraic=True,
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
    return ([Case(Msign(x), product(x, GramInvSqrt(x)), {"targets": [x]}),
             Case(product(x, GramInvSqrt(x)), Msign(x), {"targets": [x], "reverse": True})], InstanceSampler(_SMALL))


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
    return [Case(GramInvSqrt(HStack(a, b)), BlockDiag(GramInvSqrt(a), GramInvSqrt(b)), {"pair": (a, b)})], sampler


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
    rewrite=_block_product_rewrite, identities=_block_product_ids, algebraic=True,
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
    params = {"matrix": w, "gauge": s_, "orthogonal": o}
    return ([Case(product(s_, moved), product(GramInvSqrt(w), o), params),
             Case(product(o, moved), product(GramInvSqrt(w), Transpose(Inverse(s_))), params)], sampler)


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
