"""How two values of one shape are related: a constant or symbolic multiple (``2 ×``, ``c_K^-1 ×``), a
transpose, or a power (``its inverse``, ``its square root``). The diagnosis names the relation of the whole
candidate to the derived result (:mod:`derivations.crosscheck.diagnosis`) and of one differing
subexpression to its counterpart (:mod:`derivations.crosscheck.localise`).

Every relation is screened in float64 (at ``DPS`` digits when a value is outside float64's comfortable
range) on every instance, and stated only once it holds at ``DPS`` digits on up to ``CONFIRM`` instances:
a relation is a claim about the formulas, never a guess.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import mpmath
import numpy as np
from sympy import Integer, Mul, Rational, S, Symbol, sstr
from sympy.matrices.expressions import Identity, Inverse, MatAdd, MatMul, MatPow, Transpose

from derivations.crosscheck.evaluation import DPS, EQUAL_TOL, _agree, _in_float_range, _ratio, _same, _value
from derivations.parsing.targets import _preorder
from derivations.vocabulary.algebra import product, transpose
from derivations.vocabulary.nodes import _GramNode, _MatrixScalar
from derivations.vocabulary.spectral_nodes import PsdPower, Singular

SCALE_TOL = 10.0 ** (25 - DPS)  # relative spread of the ratios candidate / derived for a constant multiple
SCREEN_TOL = 1e-8  # relative, float64 screening
CONFIRM = 3  # instances a screened relation is confirmed on at DPS digits
#: the powers tried for ``X = Y^k`` (fractional ones only where ``Y`` is symmetric positive definite)
POWERS = (Integer(-1), Integer(2), Integer(-2), Rational(1, 2), Rational(-1, 2), Integer(3), Rational(1, 3),
          Rational(-1, 3), Rational(1, 4), Rational(-1, 4), Rational(2, 3), Rational(3, 2), Integer(4))
_SCALE_POWERS = tuple(Fraction(k) for k in (1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2)))
_POWER_WORDS = {Integer(-1): "its inverse", Integer(2): "its square", Rational(1, 2): "its square root",
                Rational(-1, 2): "its inverse square root", Integer(-2): "its inverse squared"}


def nice(c) -> str:
    """``c`` as a small fraction when it is one to ``SCALE_TOL`` relative, else in 12 digits."""
    if c == 0:
        return "0"
    frac = Fraction(str(mpmath.nstr(c, 40))).limit_denominator(1000)
    with mpmath.workdps(DPS):  # 1001/1000 is not a binary fraction: compare at DPS digits, not 15
        near = abs(c - mpmath.mpf(frac.numerator) / frac.denominator) <= SCALE_TOL * abs(c)
    if frac != 0 and abs(frac.numerator) < 10 ** 6 and near:
        return str(frac.numerator) if frac.denominator == 1 else f"{frac.numerator}/{frac.denominator}"
    return mpmath.nstr(c, 12)


def scalar_nodes(*exprs) -> set:
    """The scalar-valued nodes of ``exprs`` that a scale may be a power of besides the scalar symbols: the
    isotropic scale ``c_K``, norms and inner products of matrices (:class:`_MatrixScalar`)."""
    return {n for e in exprs for n in _preorder(e) if isinstance(n, _MatrixScalar)}


def _scalar_value(sym, inst):
    """``sym`` on ``inst`` at DPS digits: a drawn scalar, or a scalar node evaluated (None when it cannot be
    evaluated or is not a nonzero real number)."""
    v = inst.envmp.get(sym) if sym in inst.envmp or isinstance(sym, Symbol) else _value(sym, inst, True)
    if isinstance(v, (int, float, mpmath.mpf)) and not isinstance(v, bool) and v != 0:
        with mpmath.workdps(DPS):  # mpf() rounds to the working precision: keep every digit of v
            return mpmath.mpf(v)
    return None


def constant_scale(pairs, scalars):
    """``(text, monomial)`` when ``cand = c · ref`` for a constant ``c`` (monomial ``()``) or ``c·s^k``, or
    ``c·s^j·t^k`` (``s``, ``t`` scalar symbols or nodes; monomial ``((s, j), (t, k))``); ``pairs`` are
    ``(instance, derived value, candidate value)`` at DPS digits."""
    ratios = []
    for inst, a, b in pairs:
        if a is None or b is None:
            return None
        c, res = _ratio(b, a)
        if c is None or res > SCALE_TOL:
            return None
        ratios.append((inst, c))
    if not ratios:
        return None
    if _same([c for _, c in ratios], SCALE_TOL):
        return nice(ratios[0][1]), ()
    known = {}
    for sym in sorted(scalars, key=str):
        vals = [_scalar_value(sym, inst) for inst, _ in ratios]
        if all(v is not None for v in vals):
            known[sym] = vals
    one = [((sym, k),) for sym, k in itertools.product(known, _SCALE_POWERS)]
    two = [((a, j), (b, k)) for a, b in itertools.combinations(known, 2) for j in (1, -1) for k in (1, -1)]
    for monomial in one + two:
        with mpmath.workdps(DPS):  # the ratios are good to DPS digits: divide at DPS digits too
            vals = [c for _, c in ratios]
            for sym, k in monomial:
                vals = [c / mpmath.power(v, mpmath.mpf(k.numerator) / k.denominator) for c, v in
                        zip(vals, known[sym], strict=True)]
            same = _same(vals, SCALE_TOL) and vals[0] != 0
        if same:
            coeff = nice(vals[0])
            power = "*".join(str(sym) if k == 1 else f"{sym}^{k}" for sym, k in monomial)
            return (power if coeff == "1" else f"{coeff}*{power}"), monomial
    return None


def power_note(monomial: tuple, ref) -> str | None:
    """For a scale ``c·s^k`` of a symbol or node ``s`` (``monomial`` ``((s, k),)``) that the derived result's
    coefficient carries as ``s^p``: ``"s^(p+k) where the derived result has s^p"`` (``c_K^-2 where the
    derived result has c_K^-1``)."""
    if len(monomial) != 1:
        return None
    sym, k = monomial[0]
    k = Rational(k.numerator, k.denominator)
    coeff = ref.as_coeff_matrices()[0] if isinstance(ref, MatMul) else ref if not ref.is_Matrix else S.One
    p = Mul.make_args(coeff)
    powers = {b: e for b, e in (f.as_base_exp() for f in p)}
    if sym not in powers:
        return None
    old, new = powers[sym], powers[sym] + k

    def text(e):
        return str(sym) if e == 1 else f"{sym}^{e}"
    if new == 0:
        return f"the candidate lacks the factor {text(old)} of the derived result"
    return f"{text(new)} where the derived result has {text(old)}"


# ---- values of subexpressions, screened and confirmed ---------------------------------------------
class Values:
    """Values of expressions on the instances of a comparison, cached: ``screen`` on every instance (float64,
    or DPS digits when ``mp``), ``exact`` at DPS digits on the first ``CONFIRM`` instances."""

    def __init__(self, insts, mp: bool = False):
        self.insts = list(insts)
        self.mp = mp
        self._screen: dict = {}
        self._exact: dict = {}

    def screen(self, e) -> list:
        if e not in self._screen:
            self._screen[e] = [_value(e, inst, self.mp) for inst in self.insts]
        return self._screen[e]

    def know(self, e, exact: list) -> None:
        """Record the values of ``e`` at DPS digits already computed (the comparison's own)."""
        self._exact[e] = list(exact[:CONFIRM])

    def exact(self, e) -> list:
        if e not in self._exact:
            self._exact[e] = [_value(e, inst, True) for inst in self.insts[:CONFIRM]]
        return self._exact[e]

    def same(self, a, b) -> bool:
        """``a`` and ``b`` agree on every instance (screened, then confirmed)."""
        if not self.screened_same(a, b):
            return False
        return all(_agree(x, y, EQUAL_TOL) for x, y in zip(self.exact(a), self.exact(b), strict=True))

    def screened_same(self, a, b) -> bool:
        """``a`` and ``b`` (of one shape; else False) agree on every instance in the screen."""
        if getattr(a, "shape", None) != getattr(b, "shape", None):
            return False
        return all(_screen_agree(x, y) for x, y in zip(self.screen(a), self.screen(b), strict=True))

    def pairs(self, ref, cand) -> list:
        return [(inst, a, b) for inst, a, b in zip(self.insts, self.exact(ref), self.exact(cand), strict=False)]


def _screen_agree(x, y) -> bool:
    """:func:`_agree` to ``SCREEN_TOL``, in NumPy for float64 values (the screen compares many pairs)."""
    if isinstance(x, (np.ndarray, float)) and isinstance(y, (np.ndarray, float)):
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        if x.shape != y.shape or not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            return False
        scale = max(np.max(np.abs(x), initial=0.0), np.max(np.abs(y), initial=0.0))
        return bool(np.max(np.abs(x - y), initial=0.0) <= SCREEN_TOL * scale)
    return _agree(x, y, SCREEN_TOL)


def needs_mp(values) -> bool:
    """A float64 screen of these values would flush some of them to zero or infinity."""
    return not all(_in_float_range(v) for v in values)


def _proportional(values: Values, r, c) -> bool:
    for a, b in zip(values.screen(r), values.screen(c), strict=True):
        if a is None or b is None:
            return False
        k, res = _ratio(b, a)
        if k is None or res > SCREEN_TOL:
            return False
    return True


def _power_of(r, k):
    """``r^k`` as an expression the evaluator reads (None when ``r`` is not square)."""
    if r.shape[0] != r.shape[1]:
        return None
    if k.is_integer:
        m = product(*([r] * int(abs(k))))
        return m if k > 0 else Inverse(m)
    return PsdPower(r, k)


def power_form(e) -> tuple:
    """``(base, exponent)`` of a written power: ``Σ^(3)``, ``Σ Σ``, ``(WᵀW)^p``, ``X⁻¹``, ``A^k``; else ``(e, 1)``."""
    if isinstance(e, Singular):
        return Singular(e.base, 1, e.part, e.r), e.power
    if isinstance(e, _GramNode):
        return ("Gram", e.base, e.damping, e.side), e.exponent
    if isinstance(e, PsdPower):
        base, k = power_form(e.arg)
        return base, k * e.power
    if isinstance(e, MatPow):
        base, k = power_form(e.base)
        return base, k * e.exp
    if isinstance(e, Inverse):
        base, k = power_form(e.arg)
        return base, -k
    if isinstance(e, MatMul):
        coeff, mats = e.as_coeff_matrices()
        if coeff != 1 or len(mats) < 2:
            return e, S.One
        grams = [_gram_pair(mats[i], mats[i + 1]) for i in range(0, len(mats) - 1, 2)]
        if len(mats) % 2 == 0 and grams[0] is not None and all(g == grams[0] for g in grams):
            return grams[0], Integer(len(grams))  # W Wᵀ W Wᵀ: the Gram matrix squared
        forms = [power_form(m) for m in mats]
        if all(f[0] == forms[0][0] for f in forms):
            return forms[0][0], sum((f[1] for f in forms), S.Zero)
    return e, S.One


def _gram_pair(a, b):
    """``("Gram", W, 0, side)`` when ``a b`` is ``W Wᵀ`` (left) or ``Wᵀ W`` (right), else None."""
    if isinstance(b, Transpose) and b.arg == a:
        return "Gram", a, S.Zero, "left"
    if isinstance(a, Transpose) and a.arg == b:
        return "Gram", b, S.Zero, "right"
    return None


def _gram_of(base: tuple):
    _, w, damping, side = base
    gram = product(transpose(w), w) if side == "right" else product(w, transpose(w))
    return gram if damping == 0 else MatAdd(gram, MatMul(damping, Identity(gram.shape[0])))


def relation(values: Values, r, c, scalars) -> str | None:
    """How the candidate's ``c`` is related to the derived ``r`` (same shape), in words, or None: a multiple
    (``1/2 × it``, ``its negative``, ``c_K^-1 × it``), its transpose, or a power of it."""
    if not getattr(r, "is_Matrix", False):
        return _scale_words(values, r, c, scalars)
    words = _scale_words(values, r, c, scalars)
    if words is not None:
        return words
    if r.shape[0] != r.shape[1]:
        return None
    t = transpose(r)
    if t != r and values.same(t, c):
        return "its transpose"
    structural = _exponents(r, c)
    if structural is not None:  # the same base written with another exponent: said as exponents
        return structural
    symmetric = _symmetric(values, r)
    for k in POWERS:
        if not (k.is_integer or symmetric):  # fractional powers of symmetric (PSD) matrices only
            continue
        p = _power_of(r, k)
        if p is not None and values.same(p, c):
            return _POWER_WORDS.get(k, f"its power {k}")
    return None


def _exponents(r, c) -> str | None:
    """``"exponent 2 where the derived result has 3"`` when ``r`` and ``c`` are written as powers of one base
    (``Σ Σ`` and ``Σ^(3)``; ``(W Wᵀ)^{1/2}`` and ``W Wᵀ``), with the same coefficient."""
    (rc, rm), (cc, cm) = (e.as_coeff_matrices() if isinstance(e, MatMul) else (S.One, [e]) for e in (r, c))
    if rc != cc:
        return None
    (rb, rk), (cb, ck) = power_form(product(*rm)), power_form(product(*cm))
    if rb != cb or rk == ck:
        return None
    of = f" of the Gram matrix {sstr(_gram_of(rb))}" if isinstance(rb, tuple) else ""
    return f"exponent {ck}{of} where the derived result has {rk}"


def _symmetric(values: Values, r) -> bool:
    """``r`` is square and symmetric on every instance (fractional powers are tried only then)."""
    for v in values.screen(r):
        if v is None:
            return False
        t = v.T if hasattr(v, "T") else v
        if not _agree(v, t, SCREEN_TOL):
            return False
    return True


def _scale_words(values: Values, r, c, scalars) -> str | None:
    if not _proportional(values, r, c):
        return None
    found = constant_scale(values.pairs(r, c), scalars)
    if found is None:
        return None
    scale = found[0]
    return "its negative" if scale == "-1" else f"{scale} × it"


__all__ = ["CONFIRM", "POWERS", "SCALE_TOL", "SCREEN_TOL", "Values", "constant_scale", "nice", "power_form",
           "power_note", "relation", "scalar_nodes"]
