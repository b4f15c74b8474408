"""Norm families: the balls a steepest-descent step can live in, each solved through its dual norm.

For a norm ``‖·‖`` with dual ``‖A‖_† = sup_{‖Z‖ ≤ 1} ⟨A, Z⟩`` and a *sharp* map ``A♯`` with
``‖A♯‖ ≤ 1`` and ``⟨A, A♯⟩ = ‖A‖_†`` (Hölder's inequality is tight at ``A♯``)::

    argmin_{‖Z‖ ≤ β} ⟨A, Z⟩ = −β A♯,   optimal value −β ‖A‖_†   (β > 0).

Every feasible ``Z`` has ``⟨A, Z⟩ ≥ −‖A‖_† ‖Z‖ ≥ −β ‖A‖_†`` (weak duality), and ``−β A♯`` is
feasible and attains it. That is the certificate :func:`duality_errors` checks. Families (Bernstein
and Newhouse, "Old optimizer, new norm", 2024, for the RMS→RMS norm and the sharp maps):

========== ========================== ================================ ==========================
family     ``‖Z‖``                    dual ``‖A‖_†``                   sharp ``A♯``
========== ========================== ================================ ==========================
operator   ``‖Z‖_op`` (largest σ)     ``‖A‖_*`` (sum of σ)             ``msign(A)``
frobenius  ``‖Z‖_F``                  ``‖A‖_F``                        ``A / ‖A‖_F``
nuclear    ``‖Z‖_*``                  ``‖A‖_op``                       ``u₁v₁ᵀ`` (top singular pair)
max_abs    ``max |Z_ij|``             ``Σ |A_ij|``                     ``sign(A)`` (entrywise)
rms        ``√(n/m) ‖Z‖_op``          ``√(m/n) ‖A‖_*``                 ``√(m/n) msign(A)``
max_column ``max_j ‖Z e_j‖₂``         ``Σ_j ‖A e_j‖₂``                 ``colunit(A)`` (unit columns)
========== ========================== ================================ ==========================

(``A`` is ``m × n``; the RMS→RMS norm is the operator norm between RMS-normalized vectors.) The
nodes below carry their own rules for every interpreter (numeric evaluator, text, LaTeX, NumPy
and JAX printers): adding one touched this file only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import mpmath
import numpy as np
from sympy import Basic, Expr, Mul, Symbol
from sympy.matrices.expressions import MatrixExpr, MatrixSymbol

from derivations import lemmas as L  # looked up when used: a planted lemma (tests) takes effect
from derivations.lemmas import _SMALL, Lemma, _k, _lsd_rewrite, _n, _tall
from derivations.lemmas.base import _LARGE, Applies, everywhere, rewrite_nodes
from derivations.lemmas.descent import no_improving_direction
from derivations.lemmas.isometry import drop_transpose, isometry_statement, strip_isometries
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, tidy
from derivations.vocabulary.evaluate import InstanceSampler, free_symbols, relative_error
from derivations.vocabulary.nodes import (
    ORTHONORMAL_COLUMNS,
    Inner,
    Msign,
    NuclearNorm,
    OpNorm,
)
from derivations.vocabulary.norm_nodes import (
    AspectScale,
    ColumnNormSum,
    ColumnUnit,
    EntrywiseL1Norm,
    FrobeniusNorm,
    FrobeniusUnit,
    MaxAbsNorm,
    MaxColumnNorm,
    RmsOpNorm,
    Sign,
    TopSingular,
)
from derivations.vocabulary.numeric import NumericEvaluator, evaluate
from foundation.compute.reference import NumpyBackend


# ---- the families ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NormFamily:
    """A norm, its dual and its sharp map, as constructors of vocabulary nodes."""

    key: str
    title: str
    norm: type  # Z -> scalar node ‖Z‖
    dual_of: Callable[[Basic], Basic]  # A -> scalar expression ‖A‖_†
    sharp_of: Callable[[Basic], Basic]  # A -> matrix expression A♯
    statement: str  # LaTeX
    #: the number its solve lemma is cited by, declared (unique among every lemma: ``registry.every_lemma``)
    solve_number: str = ""

    def __post_init__(self):
        if not isinstance(self.solve_number, str) or not self.solve_number.strip():
            raise ValueError(f"norm family {self.key!r} declares no solve_number: its solve lemma needs a number of "
                             "its own, unused by every other lemma")

    def matches(self, constraint: Basic) -> bool:
        return isinstance(constraint, self.norm)

    def solve(self, a: MatrixExpr, beta: Expr) -> tuple[MatrixExpr, Expr]:
        """``(argmin, value)`` of ``min ⟨a, Z⟩ s.t. ‖Z‖ ≤ β``: ``(−β a♯, −β ‖a‖_†)``."""
        return tidy(product(-beta, self.sharp_of(a))), -beta * self.dual_of(a)


OPERATOR = NormFamily("operator", "operator (spectral) norm", OpNorm, NuclearNorm, Msign,
                      r"\operatorname*{argmin}_{\|Z\|_{\mathrm{op}} \le \beta} \langle A, Z\rangle"
                      r" = -\beta \operatorname{msign}(A),\ \text{value } -\beta\|A\|_{*}", solve_number="1")
FROBENIUS = NormFamily("frobenius", "Frobenius norm", FrobeniusNorm, FrobeniusNorm, FrobeniusUnit,
                       r"\operatorname*{argmin}_{\|Z\|_{F} \le \beta} \langle A, Z\rangle"
                       r" = -\beta A/\|A\|_F,\ \text{value } -\beta\|A\|_{F}", solve_number="1f")
NUCLEAR = NormFamily("nuclear", "nuclear norm", NuclearNorm, OpNorm, TopSingular,
                     r"\operatorname*{argmin}_{\|Z\|_{*} \le \beta} \langle A, Z\rangle"
                     r" = -\beta u_1 v_1^{\top},\ \text{value } -\beta\|A\|_{\mathrm{op}}", solve_number="1n")
MAX_ABS = NormFamily("max_abs", "max-abs (elementwise) norm", MaxAbsNorm, EntrywiseL1Norm, Sign,
                     r"\operatorname*{argmin}_{\|Z\|_{\max} \le \beta} \langle A, Z\rangle"
                     r" = -\beta \operatorname{sign}(A),\ \text{value } -\beta\|A\|_{1}", solve_number="1m")
RMS = NormFamily("rms", "RMS→RMS operator norm", RmsOpNorm,
                 lambda a: AspectScale(a) * NuclearNorm(a),
                 lambda a: _scaled(AspectScale(a), Msign(a)),
                 r"\operatorname*{argmin}_{\|Z\|_{\mathrm{RMS}\to\mathrm{RMS}} \le \beta} \langle A, Z\rangle"
                 r" = -\beta \sqrt{m/n}\operatorname{msign}(A),\ \text{value } -\beta\sqrt{m/n}\|A\|_{*}",
                 solve_number="1r")

MAX_COLUMN = NormFamily("max_column", "ℓ1→ℓ2 operator norm (largest column norm)", MaxColumnNorm, ColumnNormSum,
                        ColumnUnit,
                        r"\operatorname*{argmin}_{\|Z\|_{1\to 2} \le \beta} \langle A, Z\rangle"
                        r" = -\beta \operatorname{colunit}(A),\ \text{value } -\beta\|A\|_{2,1}", solve_number="1c")

#: the workbench's norm families, in the order the docs list them (operator, Frobenius, nuclear, max-abs, RMS→RMS,
#: ℓ1→ℓ2)
FAMILIES = (OPERATOR, FROBENIUS, NUCLEAR, MAX_ABS, RMS, MAX_COLUMN)
#: the families a user added with :func:`register_family`, in the order they were added
_ADDED: list = []


def families() -> tuple:
    """Every norm family the engine solves in: :data:`FAMILIES`, then those added by :func:`register_family`."""
    return (*FAMILIES, *_ADDED)


def register_family(family: NormFamily) -> NormFamily:
    """Add ``family`` to the engine: ``derive`` then solves problems in its norm, and its solve lemma is cited by
    its ``solve_number``. Registering the same family again does nothing; another family under a key in use, or a
    solve number another lemma has, is refused with one line naming both (``ValueError``)."""
    if not isinstance(family, NormFamily):
        raise TypeError(f"register_family takes a NormFamily, got {family!r} ({type(family).__name__})")
    if family in families():
        return family
    same_key = next((f for f in families() if f.key == family.key), None)
    if same_key is not None:
        raise ValueError(f"norm family key {family.key!r} is in use by {same_key.title!r}: choose another key")
    solve_lemma(family)  # refuses a solve number in use
    _ADDED.append(family)
    return family


def unregister_family(family: NormFamily) -> None:
    """Take a family added by :func:`register_family` out of the engine again (the workbench's own stay)."""
    if family in FAMILIES:
        raise ValueError(f"norm family {family.key!r} is one of the workbench's own: it cannot be taken out")
    if family in _ADDED:
        _ADDED.remove(family)
        _SOLVE_LEMMAS.pop(family, None)


def _scaled(c, m):
    return product(c, m)


def family_of(constraint) -> NormFamily | None:
    """The family whose norm ``constraint`` is (``None`` for anything else)."""
    return next((f for f in families() if f.matches(constraint)), None)


class NotABall(ValueError):
    """The problem is not ``min ⟨A, Z⟩ s.t. ‖Z‖ ≤ β`` for a known norm family (says which part)."""


def ball_parts(problem):
    """``(family, A)`` of ``min ⟨A, Z⟩ s.t. ‖Z‖ ≤ β`` for ``Z = problem.variable``."""
    z, obj, con = problem.variable, problem.objective, problem.constraint
    family = family_of(con)
    if family is None:
        raise NotABall(f"the constraint {con} is not the norm of a registered family (register_family adds one; "
                       f"registered: {', '.join(f.key for f in families())})")
    if con.args[0] != z:
        raise NotABall(f"the constraint bounds {con.args[0]}, not the variable {z} itself")
    if not isinstance(obj, Inner) or z not in obj.args or obj.args[0].has(z) == obj.args[1].has(z):
        raise NotABall(f"the objective {obj} is not ⟨A, {z}⟩ with A free of {z}")
    a = obj.args[0] if obj.args[1] == z else obj.args[1]
    return family, a


def unscaled(problem):
    """``min ⟨A, Z⟩ s.t. c ‖Y‖ ≤ β`` (``‖·‖`` a family's norm, ``c`` a scalar known to be positive and free of
    the variable) as ``… s.t. ‖Y‖ ≤ β/c``: the same feasible set. Any other problem comes back as it is."""
    con = problem.constraint
    if not isinstance(con, Mul):
        return problem
    found = [a for a in con.args if family_of(a) is not None]
    if len(found) != 1:
        return problem
    scale = Mul(*[a for a in con.args if a is not found[0]])
    if scale.has(problem.variable) or scale.is_positive is not True:
        return problem
    return replace(problem, constraint=found[0], budget=problem.budget / scale)


def duality_errors(family: NormFamily, a_value, beta: float, backend=None, rng=None, trials: int = 20) -> dict:
    """The duality certificate of the solve, as relative errors (all zero when it holds).

    * ``value``: ``⟨A, Z*⟩ = −β ‖A‖_†`` (the argmin attains the claimed optimal value);
    * ``feasible``: ``‖Z*‖ − β ≤ 0`` (and tight: ``|‖Z*‖ − β|``);
    * ``dual``: weak duality ``⟨A, Y⟩ ≤ ‖A‖_† ‖Y‖`` (float64 only) on the sharp maps of every family
      at ``A`` and on random ``Y``: what makes ``−β ‖A‖_†`` a lower bound over the whole ball.
    """


    backend = backend or NumpyBackend()
    rows, cols = (a_value.rows, a_value.cols) if isinstance(a_value, mpmath.matrix) else np.shape(a_value)
    A, Y, b = MatrixSymbol("A", rows, cols), MatrixSymbol("Y", rows, cols), Symbol("beta", positive=True)
    z_star, value = family.solve(A, b)
    env = {A: a_value, b: beta}
    ev = NumericEvaluator(env, backend)
    z = ev(z_star)
    env[Y] = z
    scale = max(1.0, abs(float(ev(value))))
    out = {"value": abs(float(backend.inner(a_value, z) - ev(value))) / scale,
           "feasible": abs(float(NumericEvaluator(env, backend)(family.norm(Y)) - beta)) / beta}
    worst = 0.0
    if backend.name == "float64":
        rng = rng if rng is not None else np.random.default_rng(0)
        dual = float(ev(family.dual_of(A)))
        # probes: the sharp maps of every family at A (the extreme points that matter), then random
        probes = ([np.asarray(ev(f.sharp_of(A)), dtype=np.float64) for f in families()]
                  + [np.asarray(a_value, dtype=np.float64)])
        probes += [rng.standard_normal((rows, cols)) * rng.choice([1.0, 1e-3, 1e3]) for _ in range(trials)]
        for y in probes:
            norm_y = float(NumericEvaluator({Y: y}, backend)(family.norm(Y)))
            worst = max(worst, (backend.inner(a_value, y) - dual * norm_y) / max(1.0, dual * norm_y))
    out["dual"] = max(0.0, worst)
    return out


def ball_certificate(family: NormFamily, a, z, value, beta, backend, rng=None, directions=None) -> dict:
    """Duality certificate that ``z`` solves ``min ⟨a, Z⟩ s.t. ‖Z‖ ≤ β`` in ``family``'s norm with ``value``.

    The family's analogue of :func:`derivations.lemmas.operator_ball_certificate` (same sub-checks):
    the dual norm ``‖a‖_†`` is evaluated directly (an entrywise sum, a Frobenius norm, an SVD),
    never from the claimed solution; weak duality ``⟨a, Z⟩ ≥ −β‖a‖_†`` on the ball makes a feasible
    ``z`` attaining it optimal.
    """

    rows, cols = (a.rows, a.cols) if isinstance(a, mpmath.matrix) else np.shape(a)
    A = MatrixSymbol("A", rows, cols)
    def norm(v):
        return NumericEvaluator({A: v}, backend)(family.norm(A))
    dual = -beta * NumericEvaluator({A: a}, backend)(family.dual_of(A))
    scale = max(1.0, abs(float(dual)))
    attained = backend.inner(a, z)
    out = {"feasible": max(0.0, float(norm(z) - beta)) / float(beta),
           "attains the dual bound": abs(float(attained - dual)) / scale,
           "stated value": abs(float(value - dual)) / scale}
    if rng is not None and backend.name == "float64":
        out["no improving direction"] = no_improving_direction(a, z, beta, norm, backend, rng, directions, scale)
    return out


# ---- lemmas of the families ------------------------------------------------------------------
def _isometry_rewrite(expr, **_):
    """``‖Z Uᵀ‖ → ‖Z‖`` and ``‖U Z‖ → ‖Z‖`` for the Frobenius and nuclear norms (unitarily invariant)."""
    return rewrite_nodes(expr, strip_isometries((FrobeniusNorm, NuclearNorm)),
                         "no Frobenius or nuclear norm with an outer factor known to have orthonormal columns")


def _transpose_rewrite(expr, **_):
    return rewrite_nodes(expr, drop_transpose((FrobeniusNorm, NuclearNorm, MaxAbsNorm, EntrywiseL1Norm)),
                         "no Frobenius, nuclear, max-abs or entrywise-1 norm of a transpose")


def _transposition_statement() -> Statement:
    """``‖Aᵀ‖ = ‖A‖`` in the Frobenius, nuclear, max-abs and entrywise-1 norms (each a function of the entries'
    or the singular values' multiset, which transposition keeps)."""
    a = MatrixSymbol("A", _k, _n)
    return Statement(tuple(Clause(norm(a.T), norm(a)) for norm in (FrobeniusNorm, NuclearNorm, MaxAbsNorm,
                                                                    EntrywiseL1Norm)), sizes=(_SMALL, _LARGE))


def _lemmas():


    def isometry_ids():
        u, z, y = _tall("U", ORTHONORMAL_COLUMNS), MatrixSymbol("Z", _k, _n), MatrixSymbol("Y", _n, _k)
        return ([(norm(z * u.T), norm(z)) for norm in (FrobeniusNorm, NuclearNorm)]
                + [(norm(u * y), norm(y)) for norm in (FrobeniusNorm, NuclearNorm)], InstanceSampler(_SMALL))

    def transpose_ids():
        a = MatrixSymbol("A", _k, _n)
        return ([(norm(a.T), norm(a)) for norm in (FrobeniusNorm, NuclearNorm, MaxAbsNorm, EntrywiseL1Norm)],
                InstanceSampler(_SMALL))

    def by_evaluator(ids):
        """Self-check with the dispatching evaluator: the statement on random instances, and the rewrite
        code itself (it must fire on each left-hand side and preserve its value)."""

        def check(rng, lemma):
            pairs, sampler = ids()
            errors = {"statement": 0.0, "rewrite preserves value": 0.0, "rewrite fires": 0.0}
            for lhs, rhs in pairs:
                new, _ = lemma.apply(lhs)
                errors["rewrite fires"] = max(errors["rewrite fires"], float(new == lhs))
                env = sampler.sample(rng, free_symbols(lhs, rhs))
                a, b, c = (np.asarray(evaluate(e, env, dims=sampler.dims), dtype=float) for e in (lhs, rhs, new))
                errors["statement"] = max(errors["statement"], relative_error(a, b, NumpyBackend()))
                errors["rewrite preserves value"] = max(errors["rewrite preserves value"],
                                                        relative_error(a, c, NumpyBackend()))
            return errors
        return check

    isometry = Lemma(
        key="unitary_invariance", number="2u", title="Isometries leave the Frobenius and nuclear norms",
        statement=isometry_statement((FrobeniusNorm, NuclearNorm)),
        conditions=(r"U \text{ has orthonormal columns}",), rewrite=_isometry_rewrite, identities=isometry_ids,
        check=by_evaluator(isometry_ids), applies=Applies(everywhere, order=32))
    transposition = Lemma(
        key="norm_transposition", number="Tn", title="Transposition leaves entrywise and Schatten norms",
        statement=_transposition_statement(),
        rewrite=_transpose_rewrite, identities=transpose_ids,
        check=by_evaluator(transpose_ids), applies=Applies(everywhere, order=33))
    return isometry, transposition


UNITARY_INVARIANCE, NORM_TRANSPOSITION = _lemmas()
NORM_LEMMAS = (UNITARY_INVARIANCE, NORM_TRANSPOSITION)


def solve_lemma(family: NormFamily):
    """The solve step of ``family`` as a lemma whose self-check is the duality certificate, cited by the family's
    declared ``solve_number``; a number another lemma has (a lemma family's, a norm lemma's, another family's solve
    lemma's) is refused with one line naming both lemmas."""
    if family is OPERATOR:
        return L.LINEAR_STEEPEST_DESCENT
    if family not in _SOLVE_LEMMAS:
        lemma = _new_solve_lemma(family)
        others = [*L.registered(), *NORM_LEMMAS, *(_new_solve_lemma(f) for f in families() if f.key != family.key)]
        clashes = L.duplicate_numbers([lemma, *(o for o in others if o.number == lemma.number)])
        if clashes:
            raise ValueError(clashes[0])
        _SOLVE_LEMMAS[family] = lemma
    return _SOLVE_LEMMAS[family]


def _new_solve_lemma(family: NormFamily) -> Lemma:
    """The solve lemma of ``family`` (not yet checked against the other lemmas' numbers)."""
    if family is OPERATOR:
        return L.LINEAR_STEEPEST_DESCENT

    def check(rng, lemma):
        errors = {}
        for shape in ((6, 4), (5, 5), (3, 7)):
            found = duality_errors(family, rng.standard_normal(shape), float(rng.uniform(0.5, 2.0)), rng=rng)
            for name, err in found.items():
                errors[name] = max(errors.get(name, 0.0), err)
        return errors

    return Lemma(
        key=f"steepest_descent_{family.key}", number=family.solve_number,
        title=f"Steepest descent in the {family.title}",
        statement=family.statement, conditions=(r"\beta > 0",), rewrite=_lsd_rewrite, check=check,
        solution=family.solve, not_modelled="certified by duality (the family's dual norm), not symbolically")


#: family -> its solve lemma, made once (a family is its fields: another number under the same key is another family)
_SOLVE_LEMMAS: dict = {}


__all__ = [
    "FAMILIES",
    "FROBENIUS",
    "MAX_ABS",
    "MAX_COLUMN",
    "NORM_LEMMAS",
    "NORM_TRANSPOSITION",
    "NUCLEAR",
    "OPERATOR",
    "RMS",
    "UNITARY_INVARIANCE",
    "AspectScale",
    "EntrywiseL1Norm",
    "FrobeniusNorm",
    "FrobeniusUnit",
    "MaxAbsNorm",
    "NormFamily",
    "NotABall",
    "RmsOpNorm",
    "Sign",
    "TopSingular",
    "ball_certificate",
    "ball_parts",
    "duality_errors",
    "families",
    "family_of",
    "register_family",
    "solve_lemma",
    "unregister_family",
    "unscaled",
]
