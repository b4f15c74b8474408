"""Cross-check a formula derived by hand against the workbench, an identity, or a whole chain.

``python -m derivations.crosscheck DERIVATION FORMULA`` compares a candidate formula with the
result of a derivation (its name as printed in ``--emit text`` headers, e.g. ``halfsplit.query``).

Decision. Both sides are evaluated in mpmath at 50 digits on several random instances (at least
two per size, at several sizes) drawn so that the derivation's side conditions hold (the
structural facts its matrices carry, its definitions such as ``G_Q = G_M W_K``). They are *equal*
when on every instance ``max|a − b| ≤ 1e-30 · max(max|a|, max|b|)`` (entrywise, relative to both
sides, so scaling a pair by any power of ten never changes the verdict; both sides exactly zero
agree, one side exactly zero and the other not never do). A pair that disagrees is evaluated again
on the same instance at 100 digits, and is rounding (equal) only when its difference there agrees to
1e-30 or has shrunk by 25 orders of magnitude: so a true identity whose sides cancel to near zero
is not called different, and a true difference of any scale is. The verdict is then upgraded to
*symbolic* when the two sides agree as rational functions of explicit small symbolic matrices
(:func:`derivations.engine.symbolic.prove_equal`). When both sides are purely algebraic (products, sums,
transposes and inverses of symbols), a disagreement is also shown symbolically. A numerical check
at finite precision cannot see a difference hidden below the rounding of a larger intermediate
(``(B + 10^-60 A) − B`` against ``0``); the symbolic check, where it applies, does.

``--json`` prints the verdict, the method, the number of instances, ``scale`` (``c`` when the
candidate is ``c ×`` the derived result), the diagnosis and a ``counterexample``: the instance's
sizes and inputs, the derived and candidate values, and ``relative_difference``, defined as
``‖candidate − derived‖_F / ‖derived‖_F`` on that instance (1.0 for twice the derived result, 0.5
for half of it, 2.0 for its negative; null when the derived value is zero and the candidate is not).

Diagnosis of a difference. The candidate is compared with ``c ×`` the derived result (a constant
``c``, or ``c`` times a power of a scalar symbol: the classic ``ε`` against ``ε/2``) and with
near variants obtained by mutating the derived expression: the sign flipped, a square
sub-expression transposed, the inverse of the Gram matrix instead of its inverse square root
(and the root instead of its inverse), a whitening factor missing, a whitening factor moved to
the other side, and Q and K swapped (everywhere, in the partner only, in the gradient only).

Exit status: 0 equal, 1 different, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import itertools
import json
import os
import re
import signal
import threading
from dataclasses import dataclass, field
from fractions import Fraction

import mpmath
import numpy as np
from sympy import Add, Basic, Integer, Mul, Pow, Rational, Symbol, Tuple, cancel, sstr
from sympy.core.symbol import Str
from sympy.matrices.expressions import Identity, Inverse, MatAdd, MatMul, MatrixSymbol, Transpose, ZeroMatrix

from derivations import registry
from derivations.commandline import FileRefused, read_regular_file
from derivations.crosscheck.formula import Builder, matrix_power, parse_tree
from derivations.engine.algebra import product, tidy, transpose
from derivations.engine.evaluate import EvaluationError, InstanceSampler, evaluate, free_symbols
from derivations.engine.symbolic import ExplicitModel, Unsupported, prove_equal
from derivations.engine.vocabulary import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    BlockDiag,
    FactMatrix,
    GramInvSqrt,
    GramPower,
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
    _Derived,
    dimension,
    positive_symbol,
)
from numerics.kernels.reference import MpmathBackend, NumpyBackend

DPS = 50
# Every comparison is relative to the magnitudes of both sides (see :func:`_agree`), so it is the same
# for a pair of sides and for the pair scaled by any power of ten. The tolerance leaves 20 of the 50
# digits to the conditioning of the evaluation (SVDs and eigendecompositions of well-conditioned
# random instances lose a few digits; 20 is ample).
EQUAL_TOL = 10.0 ** (20 - DPS)  # relative, at DPS digits
RECHECK_DPS = 2 * DPS  # a disagreement is evaluated again at this precision (see _agree_rechecked)
SCALE_TOL = 10.0 ** (25 - DPS)  # relative spread of the ratios candidate / derived for a constant multiple
SCREEN_TOL = 1e-8  # relative, float64 screening of near variants
INSTANCES_PER_SIZE = 2
CHAIN_MAX_BYTES = 1_000_000  # a --chain file over this, or not a regular file, is refused


RULE_MODULES = registry.derivation_sources()


class BadInput(ValueError):
    """Input the cross-checker cannot use: reported on one line, exit status 2."""


# ---- what a candidate is compared with --------------------------------------------------------
@dataclass
class Target:
    """A reference expression with the names, definitions and sizes needed to sample instances."""

    name: str
    expr: Basic
    namespace: dict
    definitions: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)
    sizes: list = field(default_factory=list)
    symbolic_dims: dict | None = None


def _named_nodes(exprs) -> dict:
    """Names of every symbol and every derived node that prints as a bare name (``C_K``, ``H``)."""
    out = {}
    for e in exprs:
        for node in _preorder(e):
            if isinstance(node, MatrixSymbol) or (isinstance(node, Symbol) and not node.is_integer):
                out.setdefault(str(node.name), node)
            elif isinstance(node, (_Derived, IsotropicScale)):
                text = sstr(node)
                if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", text):
                    out.setdefault(text, node)
    for name, node in list(out.items()):  # C_X, U_X, P_X, c_X of every tall factor W_X
        if isinstance(node, MatrixSymbol) and name.startswith("W_"):
            label = name[2:]
            out.setdefault(f"C_{label}", GramSqrt(node))
            out.setdefault(f"U_{label}", PolarFactor(node))
            out.setdefault(f"P_{label}", Projector(node))
            out.setdefault(f"c_{label}", IsotropicScale(node))
    return out


def _preorder(e):
    stack = [e]
    while stack:
        node = stack.pop()
        if not isinstance(node, Basic):
            continue
        yield node
        stack.extend(node.args)


def target_of(der, module=None) -> Target:
    """The comparison target of a derivation (its result and its context)."""
    ctx = der.context
    definitions = dict(ctx.definitions)
    exprs = [der.formula, *definitions, *definitions.values(), *der.start.parts(), *getattr(der, "names", ())]
    if module is not None:  # the rule's other symbols and chain-rule definitions (G_K next to G_Q)
        for value in vars(module).values():
            if isinstance(value, (MatrixSymbol, Symbol)):
                exprs.append(value)
            elif isinstance(value, dict) and value and all(isinstance(k, MatrixSymbol) for k in value):
                for k, v in value.items():
                    if isinstance(v, Basic) and k not in definitions and not _uses(v, definitions):
                        definitions[k] = v
                    exprs += [k, v]
    sizes = [dict(ctx.mpmath_dims)] if ctx.mpmath_dims else []
    sizes += [dict(s) for s in ctx.check_dims if dict(s) not in sizes]
    if ctx.symbolic_dims and dict(ctx.symbolic_dims) not in sizes:
        sizes.insert(0, dict(ctx.symbolic_dims))
    namespace = _named_nodes(exprs)
    for dim in getattr(der, "dimensions", ()):  # shape symbols a count or a bound is written in (classics)
        namespace.setdefault(str(dim), dim)
    return Target(der.name, der.formula, namespace, definitions, dict(ctx.scalars), sizes[:3],
                  dict(ctx.symbolic_dims) or None)


def _uses(expr, definitions) -> bool:
    return bool(set(definitions) & expr.atoms(MatrixSymbol))


NAMES_KEY = "derivation names"  # no derivation name has a space


def derivation_names(use_cache: bool = True) -> dict:
    """``{name: module name}`` of every derivation of the rule modules.

    Building them all checks every step (about 35 s, most of it the symbolic checks), so the names
    are cached with the targets, keyed by a hash of the sources.
    """
    cached = _cache_read(NAMES_KEY) if use_cache else None
    if isinstance(cached, dict) and cached and all(isinstance(v, str) and v in RULE_MODULES for v in cached.values()):
        return cached
    out = {}
    for mod_name in RULE_MODULES:
        for der in _module(mod_name).derivations():
            out[der.name] = mod_name
    if use_cache:
        _cache_write(NAMES_KEY, out)
    return out


def _builders(mod):
    """The module's cached zero-argument functions, in source order (each builds one derivation)."""
    found = []
    for value in vars(mod).values():
        fn = getattr(value, "__wrapped__", None)
        if (callable(value) and hasattr(value, "cache_info") and getattr(fn, "__module__", None) == mod.__name__
                and fn.__code__.co_argcount == 0):
            found.append((fn.__code__.co_firstlineno, value))
    return [f for _, f in sorted(found, key=lambda t: t[0])]


def _module(name):
    return importlib.import_module(f"derivations.{name}")


def _owner_modules(name: str, use_cache: bool = True) -> list:
    """The rule module that builds the derivation ``name``: the one its prefix names, or, for a prefix that
    names another module of the package (``projection.normal_operator`` is built in ``gauge``'s list), the
    one the derivation names give (cached, or built once)."""
    prefix = name.split(".")[0]
    if prefix in RULE_MODULES:
        return [prefix]
    here = registry.PACKAGE_DIR
    if re.fullmatch(r"[a-z][a-z0-9_]*", prefix) and os.path.isfile(os.path.join(here, f"{prefix}.py")):
        owner = derivation_names(use_cache).get(name)
        if owner in RULE_MODULES:
            return [owner]
    return []


def find_derivation(name: str, use_cache: bool = True):
    """The derivation called ``name`` and its rule module; ``BadInput`` listing the known names."""
    prefix = name.split(".")[0]
    owners = _owner_modules(name, use_cache)
    if not owners:
        raise BadInput(f"unknown derivation {name!r}: names start with one of "
                       f"{', '.join(m + '.' for m in RULE_MODULES)} (--list prints them all)")
    for mod_name in owners:
        mod = _module(mod_name)
        for build in _builders(mod):  # one derivation at a time: most names are found after one build
            der = build()
            if getattr(der, "name", None) == name:
                return der, mod
        for der in mod.derivations():
            if der.name == name:
                return der, mod
    if prefix in RULE_MODULES:
        known = ", ".join(der.name for der in _module(prefix).derivations())
        raise BadInput(f"unknown derivation {name!r}; {prefix} has: {known}")
    raise BadInput(f"unknown derivation {name!r} (--list prints the derivation names)")


# ---- evaluation on random instances -----------------------------------------------------------
@dataclass
class Instance:
    sizes: dict
    env64: dict
    envmp: dict
    sampler: InstanceSampler | None = None
    syms: frozenset = frozenset()
    seed: int = 0
    _higher: dict = field(default_factory=dict, repr=False)

    def env_at(self, dps: int) -> dict:
        """The same instance (same draws, facts and definitions imposed) at ``dps`` digits."""
        if dps == DPS or self.sampler is None:
            return self.envmp
        if dps not in self._higher:
            with mpmath.workdps(dps):
                self._higher[dps] = self.sampler.sample(np.random.default_rng(self.seed), self.syms,
                                                        MpmathBackend(dps))
        return self._higher[dps]


def _instances(target: Target, exprs, seed=0) -> list[Instance]:
    syms = free_symbols(*exprs, *target.definitions.values())
    out = []
    for k, sizes in enumerate(target.sizes):
        sampler = InstanceSampler(sizes, target.definitions, target.scalars)
        for j in range(INSTANCES_PER_SIZE):
            s = 1000 * seed + 10 * k + j
            env64 = sampler.sample(np.random.default_rng(s), syms, NumpyBackend())
            with mpmath.workdps(DPS):
                envmp = sampler.sample(np.random.default_rng(s), syms, MpmathBackend(DPS))
            out.append(Instance(sizes, env64, envmp, sampler, frozenset(syms), s))
    return out


def _value(expr, inst: Instance, mp: bool, dps: int = DPS):
    """``expr`` on ``inst`` (mpmath at ``dps`` digits, or float64); None when it cannot be evaluated or is
    not finite."""
    try:
        if mp:
            with mpmath.workdps(dps):
                out = evaluate(expr, inst.env_at(dps), MpmathBackend(dps), inst.sizes)
        else:
            with np.errstate(all="ignore"):
                out = evaluate(expr, inst.env64, NumpyBackend(), inst.sizes)
    except (EvaluationError, ZeroDivisionError, np.linalg.LinAlgError, ValueError, OverflowError):
        return None
    return out if _finite(out) else None


def _flat(v) -> list:
    """The entries of a value as mpmath numbers (float64 entries converted exactly)."""
    if isinstance(v, mpmath.matrix):
        return [v[i, j] for i in range(v.rows) for j in range(v.cols)]
    if isinstance(v, np.ndarray):
        return [mpmath.mpf(float(x)) for x in v.ravel()]
    if isinstance(v, (float, int, np.floating, np.integer)):
        return [mpmath.mpf(float(v))]
    return [v]


def _finite(v) -> bool:
    try:
        return all(mpmath.isfinite(x) for x in _flat(v))
    except (TypeError, ValueError):
        return False


def _max_abs(values) -> mpmath.mpf:
    return max((abs(x) for x in values), default=mpmath.mpf(0))


def _difference(a, b) -> tuple:
    """``(max|a − b|, max(max|a|, max|b|))`` entrywise, at ``DPS`` digits (each subtraction is correctly
    rounded, so the difference is accurate relative to itself whatever the magnitudes)."""
    with mpmath.workdps(DPS):
        fa, fb = _flat(a), _flat(b)
        if len(fa) != len(fb):
            raise ValueError("values of different sizes")
        return _max_abs([x - y for x, y in zip(fa, fb, strict=False)]), max(_max_abs(fa), _max_abs(fb))


def _agree(a, b, tol) -> bool:
    """``max|a − b| ≤ tol · max(max|a|, max|b|)``: relative to the magnitudes of both sides, so scaling both
    by any factor leaves the answer unchanged. Both sides exactly zero agree; one side exactly zero and the
    other not never agree (the difference is then the whole of the larger side). Non-finite values never
    agree."""
    if a is None or b is None or not (_finite(a) and _finite(b)):
        return False
    diff, scale = _difference(a, b)
    if scale == 0:
        return True
    return diff <= tol * scale


def _agree_rechecked(ref, cand, inst, a, b) -> bool:
    """Whether a pair that disagrees at ``DPS`` digits is rounding, not a difference: evaluated again on the
    same instance at ``RECHECK_DPS`` digits, the two sides agree, or their difference has shrunk by at
    least ``10^-(RECHECK_DPS - DPS)/2`` (rounding shrinks with the precision; a true difference does not,
    whatever its scale). This keeps true identities whose sides cancel to (near) zero, e.g.
    ``msign(A) Aᵀ − (A Aᵀ)^{1/2} = 0``, from being called different by their rounding."""
    if a is None or b is None:
        return False
    a2, b2 = _value(ref, inst, True, RECHECK_DPS), _value(cand, inst, True, RECHECK_DPS)
    if a2 is None or b2 is None:
        return False
    if _agree(a2, b2, EQUAL_TOL):
        return True
    d1, _ = _difference(a, b)
    d2, _ = _difference(a2, b2)
    return d2 <= mpmath.mpf(10) ** (-((RECHECK_DPS - DPS) // 2)) * d1


def relative_difference(cand, derived) -> float | None:
    """``‖cand − derived‖_F / ‖derived‖_F`` (``|cand − derived| / |derived|`` for scalars): 1.0 for a
    candidate twice the derived result, 0.5 for half of it, 2.0 for its negative. 0.0 when both are
    exactly zero; None when the derived value is zero and the candidate is not, or either is missing."""
    if cand is None or derived is None:
        return None
    with mpmath.workdps(DPS):
        fc, fd = _flat(cand), _flat(derived)
        num = mpmath.sqrt(mpmath.fsum((x - y) ** 2 for x, y in zip(fc, fd, strict=False)))
        den = mpmath.sqrt(mpmath.fsum(y ** 2 for y in fd))
        if den == 0:
            return 0.0 if num == 0 else None
        return float(num / den)


def _ratio(a, b):
    """Least-squares ``c`` with ``a ≈ c b`` and the residual ``max|a − c b| / max|a|`` (0 for ``a = 0``)."""
    with mpmath.workdps(DPS):
        fa, fb = _flat(a), _flat(b)
        if not all(mpmath.isfinite(x) for x in fa + fb):
            return None, float("inf")
        bb = mpmath.fsum(y * y for y in fb)
        if not bb:
            return None, float("inf")
        c = mpmath.fsum(x * y for x, y in zip(fa, fb, strict=False)) / bb
        top = _max_abs(fa)
        if top == 0:
            return c, 0.0
        return c, float(_max_abs([x - c * y for x, y in zip(fa, fb, strict=False)]) / top)


def _same(values, tol) -> bool:
    """All ``values`` equal to ``tol`` relative to the largest of them (all zero: equal)."""
    top = _max_abs(values)
    return top == 0 or _max_abs([v - values[0] for v in values]) <= tol * top


# ---- results ---------------------------------------------------------------------------------
@dataclass
class Verdict:
    verdict: str  # "equal" | "different"
    method: str  # "symbolic" | "numeric"
    instances: int
    scale: str | None = None
    diagnosis: list = field(default_factory=list)
    counterexample: dict | None = None
    reference: str = ""
    candidate: str = ""

    def as_json(self) -> dict:
        return {"verdict": self.verdict, "method": self.method, "instances": self.instances,
                "scale": self.scale, "diagnosis": self.diagnosis, "counterexample": self.counterexample,
                "reference": self.reference, "candidate": self.candidate}


def _algebraic(*exprs) -> bool:
    opaque = (Msign, GramSqrt, GramInvSqrt, PolarFactor, Projector, OpNorm, NuclearNorm, IsotropicScale,
              RegularizedSylvester)
    return not any(isinstance(n, opaque) for e in exprs for n in _preorder(e))


def compare(target: Target, candidate: Basic, *, diagnose: bool = True, seed: int = 0) -> Verdict:
    """Decide whether ``candidate`` equals ``target.expr`` (see the module docstring)."""
    ref = target.expr
    ref_shape = tuple(ref.shape) if ref.is_Matrix else None
    cand_shape = tuple(candidate.shape) if getattr(candidate, "is_Matrix", False) else None
    if ref_shape != cand_shape:
        def show(s):
            return "a scalar" if s is None else f"{s[0]}×{s[1]}"
        raise BadInput(f"the candidate is {show(cand_shape)} but {target.name} is {show(ref_shape)}")
    if ref_shape is None and not free_symbols(ref, candidate):  # counts in the shape symbols: exact algebra
        return _compare_in_dimensions(target, ref, candidate)
    insts = _instances(target, [ref, candidate], seed)
    pairs = []
    for inst in insts:
        a, b = _value(ref, inst, True), _value(candidate, inst, True)
        if a is None:
            continue
        pairs.append((inst, a, b))
    if len(pairs) < 2:
        raise BadInput(f"{target.name} could not be evaluated on two random instances")
    disagree = sorted((p for p in pairs if not _agree(p[1], p[2], EQUAL_TOL)), key=lambda p: sum(p[0].sizes.values()))
    # the smallest disagreeing instance that is not rounding is the counterexample (one suffices)
    bad = next(([p] for p in disagree if not _agree_rechecked(ref, candidate, *p)), [])
    out = Verdict("equal", "numeric", len(pairs), reference=sstr(ref), candidate=sstr(candidate))
    if not bad:
        if target.symbolic_dims and _symbolic_equal(ref, candidate, target):
            out.method = "symbolic"
        out.scale = "1"
        return out
    out.verdict = "different"
    if (_algebraic(ref, candidate, *target.definitions.values()) and target.symbolic_dims
            and _symbolic_different(ref, candidate, target)):
        out.method = "symbolic"
    out.counterexample = _counterexample(bad, ref, candidate, target)
    if diagnose:
        out.scale, out.diagnosis = _diagnose(target, ref, candidate, pairs)
    if not out.diagnosis:
        out.diagnosis = ["no scalar multiple and none of the near variants of the derived result matches"]
    return out


def _compare_in_dimensions(target: Target, ref, candidate) -> Verdict:
    """Two scalar expressions in the dimension symbols only (flop and parameter counts, rank bounds): equal
    when their difference simplifies to zero; otherwise the first of the target's sizes where they differ."""
    out = Verdict("equal", "symbolic", 0, "1", reference=sstr(ref), candidate=sstr(candidate))
    if cancel(ref - candidate) == 0:
        return out
    out.verdict = "different"
    ratio = cancel(candidate / ref) if ref != 0 else None
    if ratio is not None and ratio.is_number:
        out.scale = str(ratio)
        out.diagnosis = [f"the candidate is {out.scale} × the derived result"]
    dims = sorted(ref.free_symbols | candidate.free_symbols, key=str)
    for sizes in [*target.sizes, *({s: k for s in dims} for k in range(2, 9))]:
        a, b = ref.xreplace(sizes), candidate.xreplace(sizes)
        if a.is_number and b.is_number and a != b:
            out.counterexample = {"sizes": {str(k): int(v) for k, v in sizes.items() if k in dims}, "inputs": {},
                                  "defined": {}, "derived": float(a), "candidate": float(b)}
            break
    return out


SYMBOLIC_SECONDS = 2.0  # a symbolic proof that takes longer leaves the verdict numeric


class _TimeUp(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds):
    """Interrupt the block after ``seconds`` (main thread only; elsewhere it runs unbounded)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def handler(signum, frame):
        raise _TimeUp

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _symbolic_equal(ref, cand, target) -> bool:
    try:
        with _time_limit(SYMBOLIC_SECONDS):
            return prove_equal([(ref, cand)], target.symbolic_dims, target.definitions) == "proved"
    except _TimeUp:
        return False


def _symbolic_different(ref, cand, target) -> bool:
    model = ExplicitModel(target.symbolic_dims, target.definitions)
    try:
        with _time_limit(SYMBOLIC_SECONDS):
            a, b = model.value(ref), model.value(cand)
            if hasattr(a, "shape"):
                return any(cancel(x - y) != 0 for x, y in zip(a, b, strict=False))
            return cancel(a - b) != 0
    except (Unsupported, ValueError, ZeroDivisionError, _TimeUp):
        return False


def _show(v):
    """A value for the counterexample: floats (8 digits; 12 for a scalar), or strings of the same digits
    when a nonzero entry is outside float64's range (it would read as 0 or inf)."""
    if v is None:
        return None
    if isinstance(v, np.ndarray):
        v = mpmath.matrix(v.astype(float).tolist()) if v.ndim == 2 else v.astype(float).ravel()[0]
    entries = _flat(v)
    as_float = all(x == 0 or mpmath.mpf(10) ** -300 < abs(x) < mpmath.mpf(10) ** 300 for x in entries)
    digits = 8 if isinstance(v, mpmath.matrix) else 12
    conv = (lambda x: float(mpmath.nstr(x, digits))) if as_float else (lambda x: mpmath.nstr(x, digits))
    if isinstance(v, mpmath.matrix):
        return [[conv(v[i, j]) for j in range(v.cols)] for i in range(v.rows)]
    return conv(v)


def _counterexample(bad, ref, cand, target) -> dict:
    inst, a, b = min(bad, key=lambda t: sum(t[0].sizes.values()))
    shown = free_symbols(ref, cand)
    shown |= free_symbols(*[target.definitions[k] for k in shown if k in target.definitions])
    inputs = {str(k): _show(v) for k, v in sorted(inst.envmp.items(), key=lambda kv: str(kv[0])) if k in shown}
    defined = {str(k): sstr(v) for k, v in target.definitions.items() if str(k) in inputs}
    return {"sizes": {str(k): v for k, v in inst.sizes.items()}, "inputs": inputs, "defined": defined,
            "derived": _show(a), "candidate": _show(b),
            "relative_difference": relative_difference(b, a)}


# ---- diagnosis -------------------------------------------------------------------------------
def _nice(c) -> str:
    """``c`` as a small fraction when it is one to ``SCALE_TOL`` relative, else in 12 digits."""
    if c == 0:
        return "0"
    frac = Fraction(str(mpmath.nstr(c, 40))).limit_denominator(1000)
    if (frac != 0 and abs(frac.numerator) < 10 ** 6
            and abs(c - mpmath.mpf(frac.numerator) / frac.denominator) <= SCALE_TOL * abs(c)):
        return str(frac.numerator) if frac.denominator == 1 else f"{frac.numerator}/{frac.denominator}"
    return mpmath.nstr(c, 12)


def _constant_scale(pairs, scalars):
    """``(text, note)`` when ``cand = c · ref`` for a constant or ``c·s^k`` (``s`` a scalar symbol)."""
    ratios = []
    for inst, a, b in pairs:
        if b is None:
            return None
        c, res = _ratio(b, a)
        if c is None or res > SCALE_TOL:
            return None
        ratios.append((inst, c))
    if not ratios:
        return None
    if _same([c for _, c in ratios], SCALE_TOL):
        return _nice(ratios[0][1]), ""
    for sym, k in itertools.product(sorted(scalars, key=str), (1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2))):
        vals = [c / mpmath.power(inst.envmp[sym], mpmath.mpf(k.numerator) / k.denominator
                                 if isinstance(k, Fraction) else k) for inst, c in ratios]
        if _same(vals, SCALE_TOL) and vals[0] != 0:
            coeff = _nice(vals[0])
            power = str(sym) if k == 1 else f"{sym}^{k}"
            return (power if coeff == "1" else f"{coeff}*{power}"), ""
    return None


def _scale_sentence(scale: str, ref) -> str:
    words = f"the candidate is {scale} × the derived result"
    if scale == "-1":
        return words + ": the sign is flipped"
    if scale == "2" and any(str(s) == "epsilon" for s in ref.free_symbols):
        return words + " (ε where the derivation has ε/2: the budget is not split between the two halves)"
    if scale == "1/2" and any(str(s) == "epsilon" for s in ref.free_symbols):
        return words + " (ε/2 where the derivation has ε: the budget is halved twice)"
    return words


def _diagnose(target, ref, cand, pairs):
    scalars = {s for s in free_symbols(ref) if isinstance(s, Symbol)}
    found = _constant_scale(pairs, scalars)
    sentences, scale = [], None
    if found is not None:
        scale = found[0]
        sentences.append(_scale_sentence(scale, ref))
    # near variants: screened in float64 (at DPS digits when a value is out of float64's comfortable
    # range, where float64 would flush it to zero or infinity), confirmed at DPS digits
    insts = [inst for inst, _, _ in pairs]
    mp_screen = not all(_in_float_range(v) for _, a, b in pairs for v in (a, b))
    cand_vals = [b if mp_screen else _value(cand, inst, False) for inst, _, b in pairs]
    for description, variant in mutations(ref, target.namespace):
        if tuple(getattr(variant, "shape", ())) != tuple(getattr(ref, "shape", ())):
            continue
        hit = _matches(variant, cand_vals, insts, mp_screen)
        if hit is None:
            continue
        factor = hit
        confirm = [(inst, _value(variant, inst, True), _value(cand, inst, True)) for inst in insts[:3]]
        if any(v is None or c is None for _, v, c in confirm):
            continue
        if factor == "1":
            if scale == "-1" and description == "the sign flipped":
                continue
            if not all(_agree(v, c, EQUAL_TOL) for _, v, c in confirm):
                continue
            sentences.append(f"the candidate equals the derived result with {description}: {sstr(variant)}")
        else:
            sc = _constant_scale(confirm, scalars)
            if sc is None or scale is not None:
                continue
            sentences.append(f"the candidate equals {sc[0]} × the derived result with {description}")
        if len(sentences) >= 4:
            break
    return scale, sentences


def _in_float_range(v) -> bool:
    """Every nonzero entry of ``v`` well inside float64's range (a screen in float64 is then faithful)."""
    if v is None:
        return True
    return all(x == 0 or mpmath.mpf(10) ** -150 < abs(x) < mpmath.mpf(10) ** 150 for x in _flat(v))


def _matches(variant, cand_vals, insts, mp=False):
    """"1" when the candidate equals ``variant`` to ``SCREEN_TOL`` relative (in float64, or at DPS digits
    with ``mp``), "c" when it is a nonzero constant multiple of it."""
    ratios = []
    for inst, c in zip(insts, cand_vals, strict=False):
        v = _value(variant, inst, mp)
        if v is None or c is None:
            return None
        if _agree(v, c, SCREEN_TOL):
            ratios.append(mpmath.mpf(1))
            continue
        r, res = _ratio(c, v)
        if r is None or res > SCREEN_TOL:
            return None
        ratios.append(r)
    if all(r == 1 for r in ratios):
        return "1"
    if _same(ratios, SCREEN_TOL) and ratios[0] != 0:
        return "c"
    return None


def _replace_at(expr, path, new):
    return _replace_paths(expr, {path: new})


def _replace_paths(expr, replacements: dict, path=()):
    """``expr`` with the node at each path of ``replacements`` (paths into ``expr`` itself) replaced, in one
    rebuild: replacing one at a time would move the others when a product collapses (``X I`` is ``X``)."""
    if path in replacements:
        return replacements[path]
    if not any(p[:len(path)] == path for p in replacements):
        return expr
    args = [_replace_paths(a, replacements, (*path, i)) if isinstance(a, Basic) else a
            for i, a in enumerate(expr.args)]
    if isinstance(expr, MatMul):
        return product(*args)
    return expr.func(*args)


def _paths(expr, path=()):
    yield path, expr
    if isinstance(expr, (_Derived, MatrixSymbol)) or not isinstance(expr, Basic):
        return
    for i, a in enumerate(expr.args):
        if isinstance(a, Basic):
            yield from _paths(a, (*path, i))


def _label(node) -> str:
    return sstr(node)


def mutations(ref, namespace):
    """``(description, expression)`` near variants of ``ref`` (see the module docstring)."""
    yield "the sign flipped", product(-1, ref) if ref.is_Matrix else -ref
    nodes = list(_paths(ref))
    grams = [(p, n) for p, n in nodes if isinstance(n, (GramSqrt, GramInvSqrt)) and not isinstance(n, GramPower)]
    for p, n in nodes:
        if getattr(n, "is_Matrix", False) and p and n.shape[0] == n.shape[1] and not isinstance(n, (Identity,)):
            t = transpose(n)
            if t != n:
                yield f"{_label(n)} transposed", tidy(_replace_at(ref, p, t))
    for p, n in grams:
        w, lam, side = n.base, n.damping, n.side
        label = _label(n)
        if isinstance(n, GramInvSqrt):
            inverse = matrix_power(n, 2)
            words = f"the inverse Gram matrix instead of the inverse square root ({_label(inverse)} in place of {label})"
            yield words, tidy(_replace_at(ref, p, inverse))
            yield f"{_label(GramSqrt(w, lam, side))} instead of its inverse {label}", tidy(
                _replace_at(ref, p, GramSqrt(w, lam, side)))
        else:
            yield f"{label}⁻¹ instead of {label}", tidy(_replace_at(ref, p, GramInvSqrt(w, lam, side)))
        yield f"the whitening {label} missing", tidy(_replace_at(ref, p, Identity(n.shape[0])))
        yield from _moved(ref, p, n, nodes)
    for node in dict.fromkeys(n for _, n in grams):
        if sum(1 for _, m in grams if m == node) > 1 and isinstance(node, GramInvSqrt):
            yield (f"the inverse Gram matrix instead of the inverse square root (every {_label(node)})",
                   tidy(ref.xreplace({node: matrix_power(node, 2)})))
    if len(grams) > 1:
        outer = [(p, n) for p, n in grams if not any(q != p and p[:len(q)] == q for q, _ in grams)]
        yield "every whitening factor missing", tidy(_replace_paths(ref, {p: Identity(n.shape[0]) for p, n in outer}))
    yield from _swaps(ref, namespace)


def _moved(ref, p, n, nodes):
    """The whitening factor ``n`` (at ``p``) removed and placed on the other side of a sub-expression."""
    without = tidy(_replace_at(ref, p, Identity(n.shape[0])))
    flipped = type(n)(n.base, n.damping, "left" if n.side == "right" else "right")
    seen = set()
    for q, m in _paths(without):
        if not getattr(m, "is_Matrix", False) or isinstance(m, Identity):
            continue
        for factor in (n, flipped):
            k = factor.shape[0]
            for where, new in (("before", (factor, m)), ("after", (m, factor))):
                if (where == "before" and m.shape[0] != k) or (where == "after" and m.shape[1] != k):
                    continue
                variant = tidy(_replace_at(without, q, product(*new)))
                if variant == ref or variant in seen:
                    continue
                seen.add(variant)
                side = "" if factor is n else f" ({factor.side} Gram of {factor.base})"
                yield f"the whitening {_label(n)} on the wrong side: {where} {_label(m)}{side}", variant


def _swaps(ref, namespace):
    """Q and K exchanged: everywhere, only inside Gram roots (the partner), only outside (the gradient)."""
    mats = {str(s.name): s for s in ref.atoms(MatrixSymbol)}
    names = {**{k: v for k, v in namespace.items() if isinstance(v, MatrixSymbol)}, **mats}
    swap = {}
    for name, sym in mats.items():
        for a, b in (("Q", "K"), ("K", "Q"), ("O", "V"), ("V", "O")):
            if name.endswith("_" + a) and name[:-1] + b in names:
                other = names[name[:-1] + b]
                if other.shape == sym.shape:
                    swap[sym] = other
    if not swap:
        return
    yield "Q and K swapped", ref.xreplace(swap)

    def inside(e):
        if isinstance(e, (GramSqrt, GramInvSqrt, PolarFactor, Projector, IsotropicScale)):
            return e.xreplace(swap)
        if isinstance(e, (MatrixSymbol,)) or not e.args:
            return e
        return e.func(*[inside(a) if isinstance(a, Basic) else a for a in e.args])

    def outside(e):
        if isinstance(e, (GramSqrt, GramInvSqrt, PolarFactor, Projector, IsotropicScale)):
            return e
        if isinstance(e, MatrixSymbol):
            return swap.get(e, e)
        if not e.args:
            return e
        return e.func(*[outside(a) if isinstance(a, Basic) else a for a in e.args])

    yield "the partner's whitening taken from the wrong factor (Q and K swapped in the Gram roots)", inside(ref)
    yield "the gradient of the other factor (Q and K swapped outside the Gram roots)", outside(ref)


# ---- candidates from text ---------------------------------------------------------------------
_LHS = re.compile(r"^\s*(?:[A-Za-z][A-Za-z0-9_]*\s*\*?\s*=|=|optimal value\s*=)\s*")


def candidate_text(text: str) -> str:
    """A formula as the user copied it: a leading ``dW_Q* =`` or ``=`` is dropped."""
    return _LHS.sub("", text, count=1)


def parse_for(target: Target, text: str):
    """``text`` parsed with the names of ``target``."""
    return Builder(target.namespace).build(parse_tree(candidate_text(text)))


def check_derivation(name: str, formula: str, use_cache: bool = True) -> Verdict:
    target = load_target(name) if use_cache else None
    if target is None:
        der, module = find_derivation(name, use_cache)
        target = target_of(der, module)
        if use_cache:
            store_target(target)
    return compare(target, parse_for(target, formula))


# ---- a cache of targets: building a derivation re-checks every step (seconds) -------------------------
# Stored as JSON over a closed set of node types (never pickle, never eval), keyed by a hash of the
# sources of derivations/ and numerics/, so any change to a rule, a lemma or the engine rebuilds it. Each
# entry also carries its key, that hash and a digest of its contents, all checked before it is used
# (_cache_read): an entry copied from another cache, truncated or edited is rebuilt, not trusted.
_NODE_TYPES = {c.__name__: c for c in (
    MatrixSymbol, FactMatrix, Identity, MatMul, MatAdd, Transpose, Inverse, Msign, GramSqrt, GramInvSqrt,
    GramPower, PolarFactor, Projector, HStack, BlockDiag, Inner, OpNorm, NuclearNorm, IsotropicScale,
    RegularizedSylvester, Mul, Add, Pow, Tuple, ZeroMatrix)}


def _to_json(e):
    if isinstance(e, Str):
        return {"str": e.name}
    if isinstance(e, Symbol):
        return {"sym": e.name, "assume": {k: v for k, v in e.assumptions0.items() if v is not None}}
    if isinstance(e, Rational):
        return {"num": str(e)}
    name = type(e).__name__
    if _NODE_TYPES.get(name) is not type(e):
        raise TypeError(f"no JSON form for {name}")
    return {"node": name, "args": [_to_json(a) for a in e.args]}


def _from_json(obj):
    if "str" in obj:
        return Str(obj["str"])
    if "sym" in obj:
        return Symbol(obj["sym"], **{k: bool(v) for k, v in obj["assume"].items()})
    if "num" in obj:
        return Rational(obj["num"])
    cls = _NODE_TYPES[obj["node"]]
    args = [_from_json(a) for a in obj["args"]]
    if cls in (MatMul, MatAdd, Mul, Add):
        return cls(*args, evaluate=False)
    return cls(*args)


@functools.cache
def _source_hash() -> str:
    """Hash of the ``derivations`` and ``numerics`` sources as imported (read once per process)."""
    root = os.path.dirname(registry.PACKAGE_DIR)
    h = hashlib.sha256()
    for package in ("derivations", "numerics"):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, package))):
            for f in sorted(files):
                if f.endswith(".py"):
                    with open(os.path.join(dirpath, f), "rb") as fh:
                        h.update(f.encode() + fh.read())
    return h.hexdigest()[:16]


def _cache_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "optimizer-workbench", f"crosscheck-{_source_hash()}.json")


def target_to_json(t: Target) -> dict:
    def dims(d):
        return [[_to_json(k), v] for k, v in d.items()]
    return {"name": t.name, "expr": _to_json(t.expr),
            "namespace": {k: _to_json(v) for k, v in t.namespace.items()},
            "definitions": [[_to_json(k), _to_json(v)] for k, v in t.definitions.items()],
            "scalars": [[_to_json(k), float(v)] for k, v in t.scalars.items()],
            "sizes": [dims(sz) for sz in t.sizes], "symbolic_dims": dims(t.symbolic_dims or {})}


def target_from_json(obj: dict) -> Target:
    def dims(pairs):
        return {_from_json(k): int(v) for k, v in pairs}
    return Target(obj["name"], _from_json(obj["expr"]),
                  {k: _from_json(v) for k, v in obj["namespace"].items()},
                  {_from_json(k): _from_json(v) for k, v in obj["definitions"]},
                  {_from_json(k): v for k, v in obj["scalars"]},
                  [dims(sz) for sz in obj["sizes"]], dims(obj["symbolic_dims"]) or None)


CACHE_MAX_BYTES = 64 * 1024 * 1024  # a cache file larger than this is ignored (and replaced on the next write)


def read_input(path: str, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); ``BadInput`` in one line otherwise
    (:func:`derivations.commandline.read_regular_file`: a FIFO, a device or a directory is refused)."""
    try:
        return read_regular_file(path, limit, what)
    except FileRefused as exc:
        raise BadInput(str(exc)) from None


def _entry_digest(key: str, source: str, value) -> str:
    text = json.dumps([key, source, value], sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _valid_entry(key: str, entry):
    """``(True, value)`` when ``entry`` was written for ``key`` by the current sources and is intact."""
    if not (isinstance(entry, dict) and set(entry) == {"key", "source", "digest", "value"}):
        return False, None
    if entry["key"] != key or entry["source"] != _source_hash():
        return False, None
    try:
        ok = entry["digest"] == _entry_digest(key, entry["source"], entry["value"])
    except (TypeError, ValueError, RecursionError):
        return False, None
    return ok, entry["value"] if ok else None


def _cache_data() -> dict:
    """The cache file's entries, or {} (no file, not a regular file, too large, not JSON, not an object)."""
    try:
        raw = read_input(_cache_path(), CACHE_MAX_BYTES, "cache")
        data = json.loads(raw.decode("utf-8"))
    except (BadInput, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _cache_read(key: str):
    """The cached value under ``key``, or None: no cache, an unreadable or corrupted file, or an entry that
    was not written for ``key`` by the current sources (its source hash and its digest are checked, so a
    stale, foreign, truncated or edited entry is rebuilt, never used)."""
    ok, value = _valid_entry(key, _cache_data().get(key))
    return value if ok else None


def _cache_write(key: str, value) -> None:
    """Store ``value`` under ``key`` with the source hash and a digest (atomically; entries that fail the
    check and caches of older sources are removed); a cache that can't be written is skipped."""
    path = _cache_path()
    try:
        entry = {"key": key, "source": _source_hash(), "digest": _entry_digest(key, _source_hash(), value),
                 "value": value}
        data = {k: v for k, v in _cache_data().items() if _valid_entry(k, v)[0]}
        data[key] = entry
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, allow_nan=False)
        os.replace(tmp, path)
        for old in os.listdir(os.path.dirname(path)):  # caches of older sources
            if old.startswith("crosscheck-") and old.endswith(".json") and old != os.path.basename(path):
                os.remove(os.path.join(os.path.dirname(path), old))
    except (OSError, ValueError, TypeError, RecursionError):
        return


def load_target(name: str) -> Target | None:
    """The cached target of ``name``, or None (no cache, stale sources, an entry that fails its checks or
    does not rebuild into a target called ``name``)."""
    entry = _cache_read(name)
    if entry is None:
        return None
    try:
        target = target_from_json(entry)
    except Exception:  # noqa: BLE001 — cache contents are untrusted: anything that fails means rebuild
        return None
    if target.name != name or not isinstance(target.expr, Basic):
        return None
    return target


def store_target(t: Target) -> None:
    """Cache ``t`` if it survives the JSON round trip unchanged."""
    try:
        obj = target_to_json(t)
        back = target_from_json(json.loads(json.dumps(obj)))
    except (TypeError, ValueError, KeyError):
        return
    if back.expr != t.expr or back.namespace != t.namespace or back.definitions != t.definitions:
        return
    _cache_write(t.name, obj)


# ---- identities with assumptions ----------------------------------------------------------------
_FACT_WORDS = {
    "orthonormal columns": ORTHONORMAL_COLUMNS, "orthonormal rows": ORTHONORMAL_ROWS,
    "orthogonal": ORTHONORMAL_COLUMNS, "symmetric": SYMMETRIC, "spd": SPD,
    "symmetric positive definite": SPD, "positive definite": SPD, "full column rank": FULL_COLUMN_RANK,
    "full row rank": FULL_ROW_RANK, "tall": FULL_COLUMN_RANK, "wide": FULL_ROW_RANK,
}
_SCALAR_WORDS = {"positive", "scalar", "real", "nonnegative"}


@dataclass
class Assumptions:
    facts: dict = field(default_factory=dict)  # name -> set of facts
    shapes: dict = field(default_factory=dict)  # name -> (rows, cols)
    scalars: set = field(default_factory=set)
    square: set = field(default_factory=set)


def parse_assumptions(items) -> Assumptions:
    """``"W: orthonormal columns"``, ``"S: spd"``, ``"c: positive"``, ``"X: 4x3"`` (comma-separated facts)."""
    out = Assumptions()
    for item in items or ():
        if ":" not in item:
            raise BadInput(f"--assume {item!r}: write NAME: FACT, e.g. \"W: orthonormal columns\"")
        name, facts = (s.strip() for s in item.split(":", 1))
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
            raise BadInput(f"--assume {item!r}: {name!r} is not a name")
        for word in (w.strip().lower() for w in facts.split(",") if w.strip()):
            if m := re.fullmatch(r"(\d+)\s*x\s*(\d+)", word):
                r, c = int(m.group(1)), int(m.group(2))
                if not (1 <= r <= 64 and 1 <= c <= 64):
                    raise BadInput(f"--assume {item!r}: sizes must be between 1 and 64")
                out.shapes[name] = (r, c)
            elif word in _FACT_WORDS:
                out.facts.setdefault(name, set()).add(_FACT_WORDS[word])
                if word == "orthogonal" or _FACT_WORDS[word] in (SYMMETRIC, SPD):
                    out.square.add(name)
            elif word in _SCALAR_WORDS:
                out.scalars.add(name)
            elif word == "square":
                out.square.add(name)
            else:
                known = ", ".join(sorted(_FACT_WORDS) + sorted(_SCALAR_WORDS) + ["square", "RxC"])
                raise BadInput(f"--assume {item!r}: unknown fact {word!r}; known: {known}")
    return out


class _Unify(Exception):
    def __init__(self, a, b):
        self.pair = (a, b)


class _UnifyingBuilder(Builder):
    """Declares new names on first use (capitalised: matrices, else scalars) and infers shapes."""

    def __init__(self, assumptions: Assumptions, merged: dict):
        super().__init__({}, self._declare)
        self.assumptions = assumptions
        self.merged = merged  # dimension symbol -> representative

    def _dim(self, d):
        while d in self.merged:
            d = self.merged[d]
        return d

    def _declare(self, name, col):
        a = self.assumptions
        if name in ("I",):
            return None
        is_matrix = any(ch.isupper() for ch in name.split("_")[0])
        if name in a.scalars or not is_matrix and name not in a.facts and name not in a.shapes:
            return positive_symbol(name)
        if name in a.shapes:
            rows, cols = (Integer(k) for k in a.shapes[name])
        else:
            rows, cols = self._dim(dimension(f"rows({name})")), self._dim(dimension(f"cols({name})"))
        if name in a.square:
            cols = rows
        return FactMatrix(name, rows, cols, sorted(a.facts.get(name, ())))

    def same(self, x, y, message, col):
        x, y = self._dim(x), self._dim(y)
        if x != y and isinstance(x, Symbol) and isinstance(y, Symbol):
            raise _Unify(x, y)
        super().same(x, y, message, col)


def build_with_inference(texts, assumptions: Assumptions):
    """Build every text with shared, inferred shapes: a shape clash between two free dimensions is an
    equation (the two are merged and the build restarts); returns the expressions and the builder."""
    trees = [parse_tree(t) for t in texts]
    merged = {}
    for _ in range(400):
        builder = _UnifyingBuilder(assumptions, merged)
        try:
            exprs = [builder.build(t) for t in trees]
        except _Unify as u:
            a, b = u.pair
            merged[b] = a
            continue
        return exprs, builder
    raise BadInput("shape inference did not converge")


def _sizes_for(exprs, count=3, seed=0, low=2, high=5) -> list[dict]:
    """Concrete sizes for the free dimensions of ``exprs``, tall where a fact needs it."""
    mats = {m for e in exprs for m in e.atoms(MatrixSymbol)}
    dims = sorted({d for m in mats for d in m.shape if isinstance(d, Symbol)}, key=str)
    need = []  # (rows, cols): rows >= cols
    for m in mats:
        f = getattr(m, "facts", frozenset())
        if f & {ORTHONORMAL_COLUMNS, FULL_COLUMN_RANK}:
            need.append((m.shape[0], m.shape[1]))
        if f & {ORTHONORMAL_ROWS, FULL_ROW_RANK}:
            need.append((m.shape[1], m.shape[0]))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2000):
        if len(out) == count or not dims and out:
            break
        sizes = {d: int(rng.integers(low, high + 1)) for d in dims}
        if all(int(r.xreplace(sizes)) >= int(c.xreplace(sizes)) for r, c in need) and sizes not in out:
            out.append(sizes)
    if not out:
        raise BadInput("no sizes satisfy the assumptions (orthonormal columns need at least as many rows)")
    return out


def identity_target(lhs: str, rhs: str, assumptions: Assumptions):
    """``(target, candidate)`` for the identity ``lhs = rhs`` with inferred shapes."""
    (left, right), builder = build_with_inference([lhs, rhs], assumptions)
    if getattr(left, "is_Matrix", False) != getattr(right, "is_Matrix", False) or (
            left.is_Matrix and tuple(left.shape) != tuple(right.shape)):
        def show(e):
            return f"{e.shape[0]}×{e.shape[1]}" if e.is_Matrix else "a scalar"
        raise BadInput(f"the two sides have different shapes: {show(left)} and {show(right)}")
    sizes = _sizes_for([left, right])
    small = _sizes_for([left, right], count=1, low=2, high=3)[0]
    target = Target("identity", left, builder.namespace, {}, {}, sizes, small)
    return target, right


__all__ = ["BadInput", "Target", "Verdict", "check_derivation", "compare", "mutations", "parse_assumptions",
           "target_of"]


# ---- command line -----------------------------------------------------------------------------
def format_verdict(v: Verdict, what: str) -> str:
    head = f"{what}: {v.verdict.upper()} ({v.method}, {v.instances} random instances at {DPS} digits)"
    lines = [head, f"  derived:   {v.reference}", f"  candidate: {v.candidate}"]
    if v.verdict == "different":
        lines += [f"  diagnosis: {d}" for d in v.diagnosis]
        ce = v.counterexample
        if ce:
            sizes = ", ".join(f"{k} = {n}" for k, n in ce["sizes"].items())
            lines.append(f"  counterexample ({sizes}):")
            for name, value in ce["inputs"].items():
                how = f"  (= {ce['defined'][name]})" if name in ce["defined"] else ""
                lines.append(f"    {name}{how} =\n" + _indent(_array_text(value)))
            lines.append("    derived value =\n" + _indent(_array_text(ce["derived"])))
            cand = "could not be evaluated" if ce["candidate"] is None else _indent(_array_text(ce["candidate"]))
            lines.append("    candidate value =\n" + cand)
    return "\n".join(lines) + "\n"


def _array_text(value) -> str:
    """A counterexample value as text: fixed-point when its nonzero entries are of moderate size, else
    scientific (a value of 1e-40 must not print as 0); entries kept as strings are printed as they are."""
    if isinstance(value, str):
        return value
    flat = np.ravel(np.array(value, dtype=object))
    if any(isinstance(x, str) for x in flat):
        rows = value
        return "\n".join("[" + "  ".join(str(x) for x in row) + "]" for row in rows)
    arr = np.array(value, dtype=float)
    nonzero = np.abs(arr[arr != 0])
    moderate = nonzero.size == 0 or (nonzero.min() >= 1e-4 and nonzero.max() < 1e8)
    with np.printoptions(precision=6, suppress=moderate, linewidth=110):
        return str(arr)


def _indent(a) -> str:
    return "\n".join("      " + line for line in str(a).splitlines())
