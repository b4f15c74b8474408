"""Power-of-two scaling plans for emitted functions: which arguments may be rescaled, and how the outputs follow.

Every emitted rule is homogeneous: scaling an argument (with the damping ``λ`` scaled as the square of
the argument it damps) scales each output by a fixed power. Code printed from products of raw inputs
(``C_K W_QᵀW_Q C_K`` in the balancing gauge, ``m_KᵀW_K − W_Qᵀm_Q`` in the horizontal projection) can
underflow or overflow although the result is representable: float32 weights of size 1e-10 make the
first 1e-40. The JAX printer therefore scales such arguments by exact powers of two at the start of
the computation and the outputs back at its end (:func:`foundation.compute.jax_exact_scaling.scale_group`).

:func:`scaling_plan` finds the groups of arguments that must share one scale, by reading the formulas:
an argument is a variable of degree 1; products add degrees, a sum needs equal degrees in its terms
(arguments whose degrees differ are merged into one group), a Gram root has the degree of ``±`` its
base and ties ``λ`` to the base's group (the emitted code damps every Gram root and isotropic scale
with the ``damping`` argument, whatever the derivation's own λ), a regularized Sylvester solve puts
both factors in one group, ``msign`` has degree 0, a Gram power ``(XᵀX)^p`` of a derived ``X`` (undamped) has
``2p`` times the degree of ``X``, a polar factor has degree 0. A node it does not know makes the plan ``None``
(nothing is rescaled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from sympy import Mul, Number, Pow, Symbol
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixSymbol, Transpose, ZeroMatrix

from derivations.vocabulary.nodes import (
    GramInvSqrt,
    GramSqrt,
    HStack,
    IsotropicScale,
    Msign,
    PolarFactor,
    RegularizedSylvester,
)


class Inhomogeneous(Exception):
    """The formula is not homogeneous in the current grouping (or has a node this module does not know)."""


class _Merge(Exception):
    """Two groups must share one scale: merged, start again."""


@dataclass
class Group:
    """Arguments scaled by one ``2**k``; ``damping``: λ is scaled by ``4**k`` with them; ``degrees``: per output."""

    members: tuple
    damping: bool
    degrees: tuple  # Fraction per output

    @property
    def multiple(self) -> int:
        """``k`` is rounded down to a multiple of this, so that every output's power of two is whole."""
        return math.lcm(1, *(d.denominator for d in self.degrees))


class _Analysis:
    def __init__(self, names, damping_symbols):
        self.parent = {n: n for n in names}
        self.damping_symbols = set(damping_symbols)
        self.tied = set()  # groups whose scale λ follows (as its square)

    def find(self, n):
        while self.parent[n] != n:
            n = self.parent[n]
        return n

    def merge(self, names):
        roots = sorted({self.find(n) for n in names})
        if len(roots) > 1:
            for r in roots[1:]:
                self.parent[r] = roots[0]
            self.tied = {self.find(t) for t in self.tied}
            raise _Merge

    def tie(self, base):
        deg = self.degree(base)
        if len(deg) != 1 or next(iter(deg.values())) != 1:
            raise Inhomogeneous(f"a damped Gram root of {base}, which is not one argument")
        self.tied.add(next(iter(deg)))
        return deg

    def _base_degree(self, e) -> dict:
        """The degree of a Gram node's base: an argument's root is damped with λ (tied), a derived base's is not."""
        if isinstance(e.base, MatrixSymbol):
            return self.tie(e.base)
        if e.damping != 0:
            raise Inhomogeneous(f"a damped Gram node of the derived matrix {e.base}")
        return self.degree(e.base)

    def degree(self, e) -> dict:
        """``{group: degree}`` of ``e``, by one helper per kind of node (:data:`_DEGREE_RULES`, in order);
        raises :class:`Inhomogeneous` or :class:`_Merge`."""
        for kinds, rule in _DEGREE_RULES:
            if isinstance(e, kinds):
                return getattr(self, rule)(e)
        if type(e).__name__ == "SPDPower":  # derivations.balance, a layer above: known by name
            p = Fraction(str(e.exponent))
            return {g: p * d for g, d in self.degree(e.arg).items()}
        return self._unknown(e)

    @staticmethod
    def _unknown(e) -> dict:
        raise Inhomogeneous(f"no degree rule for {type(e).__name__}")

    def _argument(self, e) -> dict:
        if e.name not in self.parent:
            raise Inhomogeneous(f"{e.name} is not an argument")
        return {self.find(e.name): Fraction(1)}

    def _symbol(self, e) -> dict:
        if e in self.damping_symbols:
            raise Inhomogeneous("λ as a factor")
        return self._unknown(e) if e.is_Matrix else {}

    @staticmethod
    def _constant(e) -> dict:
        return {}

    def _transpose(self, e) -> dict:
        return self.degree(e.arg)

    def _msign(self, e) -> dict:
        self.degree(e.arg)
        return {}

    def _gram_root(self, e) -> dict:
        """GramPower too: degree 2p times its base's."""
        power = 2 * Fraction(str(e.exponent))
        return {g: power * d for g, d in self._base_degree(e).items()}

    def _polar_factor(self, e) -> dict:
        self._base_degree(e)
        return {}

    def _isotropic_scale(self, e) -> dict:
        return self.tie(e.base)

    def _sylvester(self, e) -> dict:
        self.merge([m.name for m in (e.left, e.right) if isinstance(m, MatrixSymbol)])
        base = self.tie(e.left)
        return _add(self.degree(e.rhs), {g: -2 * d for g, d in base.items()})

    def _product(self, e) -> dict:
        out: dict = {}
        for a in e.args:
            out = _add(out, self.degree(a))
        return out

    def _power(self, e) -> dict:
        if not isinstance(e.exp, Number):
            return self._unknown(e)
        p = Fraction(str(e.exp))
        return {g: p * d for g, d in self.degree(e.base).items()}

    def _sum(self, e) -> dict:
        """Terms of equal degree; arguments whose degrees differ between terms are merged into one group."""
        terms = [self.degree(a) for a in e.args if not isinstance(a, ZeroMatrix)]
        for t in terms[1:]:
            differ = [g for g in set(t) | set(terms[0]) if t.get(g, 0) != terms[0].get(g, 0)]
            if differ:
                if len(differ) < 2:
                    raise Inhomogeneous(f"terms of different degree in {e}")
                self.merge(differ)
        return terms[0] if terms else {}


#: node kinds -> the :class:`_Analysis` method that gives their degree, tried in this order
_DEGREE_RULES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (MatrixSymbol, "_argument"),
    (Symbol, "_symbol"),
    ((Identity, ZeroMatrix, Number), "_constant"),
    (Transpose, "_transpose"),
    (Msign, "_msign"),
    ((GramSqrt, GramInvSqrt), "_gram_root"),
    (PolarFactor, "_polar_factor"),
    (IsotropicScale, "_isotropic_scale"),
    (RegularizedSylvester, "_sylvester"),
    ((MatMul, Mul), "_product"),
    (Pow, "_power"),
    ((MatAdd, HStack), "_sum"),
)


def _add(a, b):
    out = dict(a)
    for g, d in b.items():
        out[g] = out.get(g, 0) + d
    return {g: d for g, d in out.items() if d != 0}


def scaling_plan(arguments, formulas, damping_symbols=()) -> list[Group] | None:
    """The groups of ``arguments`` (names) to rescale for ``formulas`` (one per output), or ``None``.

    ``damping_symbols``: the scalar symbols that stand for λ (a factor λ is not handled: ``None``).

    A group that λ would have to follow together with another group (two damped roots of different
    arguments share one λ) is left out: its arguments keep their scale, and so does λ.
    """
    analysis = _Analysis(arguments, damping_symbols)
    for _ in range(len(arguments) + 1):
        analysis.tied = set()
        try:
            degrees = [analysis.degree(f) for f in formulas]
        except _Merge:
            continue
        except Inhomogeneous:
            return None
        break
    else:
        return None
    groups: dict[str, list[str]] = {}
    for name in arguments:
        groups.setdefault(analysis.find(name), []).append(name)
    damped = analysis.tied if len(analysis.tied) == 1 else set()
    return [Group(tuple(members), root in damped, tuple(d.get(root, Fraction(0)) for d in degrees))
            for root, members in groups.items() if not (root in analysis.tied and root not in damped)]
