"""Power-of-two scaling plans for emitted functions: which arguments may be rescaled, and how the outputs follow.

Every emitted rule is homogeneous: scaling an argument (with the damping ``λ`` scaled as the square of
the argument it damps) scales each output by a fixed power. Code printed from products of raw inputs
(``C_K W_QᵀW_Q C_K`` in the balancing gauge, ``m_KᵀW_K − W_Qᵀm_Q`` in the horizontal projection) can
underflow or overflow although the result is representable: float32 weights of size 1e-10 make the
first 1e-40. The JAX printer therefore scales such arguments by exact powers of two at the start of
the computation and the outputs back at its end (:func:`foundation.compute.jax_exact_scaling.scale_group`).

:func:`scaling_plan` finds the groups of arguments that must share one scale, by reading the formulas
with :class:`Homogeneity`, an interpreter like the printers: the *degree* of an expression is
``{group: d}``, the power of each group's scale ``s`` by which it scales (``e(s·x) = s^d e(x)``). SymPy's
own algebra has its rules here: an argument is a variable of degree 1, products add degrees, a power
multiplies them, a sum needs equal degrees in its terms (arguments whose degrees differ are merged into
one group), a constant has degree 0. Every node of the vocabulary carries its own rule, a method
``_degree(self, scaling)`` that returns its degree from its operands' through the helpers of
:class:`Homogeneity` (``msign`` has degree 0, a Gram root ``(WᵀW + λI)^p`` of an argument has ``2p``
times its base's and ties ``λ`` to the base's group, since the emitted code damps every Gram root and
isotropic scale with the ``damping`` argument, …). A node without one stops the emission with
:class:`NoDegreeRule`, one line naming it: never an unscaled function that silently underflows.
A formula that is not homogeneous (terms of different degree in one argument, ``λ`` as a factor, a node
that declares it has no fixed degree through :meth:`Homogeneity.inhomogeneous`) makes the plan ``None``
(nothing is rescaled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from sympy import Number
from sympy.matrices.expressions import MatrixSymbol, ZeroMatrix

from derivations.vocabulary.interpret import Interpreter, MissingRule


class Inhomogeneous(Exception):
    """The formula is not homogeneous in the current grouping: no plan (nothing is rescaled)."""


class NoDegreeRule(MissingRule):
    """A node of an emitted formula declares no homogeneity degree (no ``_degree`` method): names the node."""


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


def _fraction(p) -> Fraction:
    return Fraction(str(p))


def _add(a, b):
    out = dict(a)
    for g, d in b.items():
        out[g] = out.get(g, 0) + d
    return {g: d for g, d in out.items() if d != 0}


class Homogeneity(Interpreter):
    """The degree ``{group: d}`` of an expression in the scales of its argument groups.

    A node's rule is its ``_degree(self, scaling)`` method; SymPy's classes have ``_degree_<Class>`` rules
    here. A node with neither raises :class:`NoDegreeRule`. The helpers below are what the nodes' rules use.
    """

    printmethod = "_degree"
    rule_prefix = "_degree_"
    interpreter_name = "the exact-scaling plan"

    def __init__(self, names, damping_symbols):
        super().__init__()
        self.parent = {n: n for n in names}
        self.damping_symbols = set(damping_symbols)
        self.tied: set = set()  # groups whose scale λ follows (as its square)

    def emptyPrinter(self, expr):
        raise NoDegreeRule(self.interpreter_name, expr, "its class declares no _degree(self, scaling): how its "
                                                        "value scales with its arguments")

    def find(self, n):
        while self.parent[n] != n:
            n = self.parent[n]
        return n

    # ---- the helpers of the nodes' rules ---------------------------------------------------------
    def degree(self, e) -> dict:
        """``{group: degree}`` of ``e``; raises :class:`Inhomogeneous`, :class:`NoDegreeRule` (or merges groups)."""
        return self._print(e)

    def times(self, p, degree: dict) -> dict:
        """``p`` times a degree (the degree of a ``p``-th power)."""
        p = _fraction(p)
        return {g: p * d for g, d in degree.items() if p * d != 0}

    @staticmethod
    def plus(*degrees: dict) -> dict:
        """The degree of a product of factors of these degrees."""
        out: dict = {}
        for d in degrees:
            out = _add(out, d)
        return out

    def product(self, *factors) -> dict:
        """The degree of the product of ``factors``: the sum of theirs."""
        return self.plus(*(self.degree(f) for f in factors))

    def invariant(self, *operands) -> dict:
        """Degree 0 (``f(cA) = f(A)`` for ``c > 0``); the operands are read for what they require."""
        for a in operands:
            self.degree(a)
        return {}

    def same_degree(self, *terms) -> dict:
        """Terms of equal degree (a sum, a concatenation); arguments whose degrees differ between terms are merged
        into one group."""
        degrees = [self.degree(a) for a in terms if not isinstance(a, ZeroMatrix)]
        for t in degrees[1:]:
            differ = [g for g in set(t) | set(degrees[0]) if t.get(g, 0) != degrees[0].get(g, 0)]
            if differ:
                if len(differ) < 2:
                    raise Inhomogeneous(f"terms of different degree in {terms}")
                self.merge(differ)
        return degrees[0] if degrees else {}

    @staticmethod
    def inhomogeneous(reason: str):
        """A node that has no fixed degree (``tanh``) declares so: the plan is ``None``, nothing is rescaled."""
        raise Inhomogeneous(reason)

    def share_scale(self, *matrices) -> None:
        """The arguments among ``matrices`` share one scale (one group)."""
        self.merge([m.name for m in matrices if isinstance(m, MatrixSymbol)])

    def tie(self, base) -> dict:
        """λ damps ``base``, one argument: λ is scaled as the square of ``base``'s scale; ``base``'s degree."""
        deg = self.degree(base)
        if len(deg) != 1 or next(iter(deg.values())) != 1:
            raise Inhomogeneous(f"a damped Gram root of {base}, which is not one argument")
        self.tied.add(next(iter(deg)))
        return deg

    def gram_base(self, node) -> dict:
        """The degree of a Gram node's base: an argument's root is damped with λ (tied), a derived base's is not."""
        if isinstance(node.base, MatrixSymbol):
            return self.tie(node.base)
        if node.damping != 0:
            raise Inhomogeneous(f"a damped Gram node of the derived matrix {node.base}")
        return self.degree(node.base)

    def merge(self, names):
        roots = sorted({self.find(n) for n in names})
        if len(roots) > 1:
            for r in roots[1:]:
                self.parent[r] = roots[0]
            self.tied = {self.find(t) for t in self.tied}
            raise _Merge

    # ---- SymPy's algebra -------------------------------------------------------------------------
    def _degree_MatrixSymbol(self, e) -> dict:
        if e.name not in self.parent:
            raise Inhomogeneous(f"{e.name} is not an argument")
        return {self.find(e.name): Fraction(1)}

    def _degree_Symbol(self, e) -> dict:
        if e in self.damping_symbols:
            raise Inhomogeneous("λ as a factor")
        return {}

    def _degree_Number(self, e) -> dict:
        return {}

    _degree_Identity = _degree_ZeroMatrix = _degree_Number

    def _degree_Transpose(self, e) -> dict:
        return self.degree(e.arg)

    def _degree_MatMul(self, e) -> dict:
        return self.product(*e.args)

    _degree_Mul = _degree_MatMul

    def _degree_Pow(self, e) -> dict:
        if not isinstance(e.exp, Number):
            raise Inhomogeneous(f"{e}: a power with a symbolic exponent")
        return self.times(e.exp, self.degree(e.base))

    def _degree_Inverse(self, e) -> dict:
        return self.times(-1, self.degree(e.arg))

    def _degree_MatAdd(self, e) -> dict:
        return self.same_degree(*e.args)

    _degree_Add = _degree_MatAdd


def scaling_plan(arguments, formulas, damping_symbols=()) -> list[Group] | None:
    """The groups of ``arguments`` (names) to rescale for ``formulas`` (one per output), or ``None``.

    ``damping_symbols``: the scalar symbols that stand for λ (a factor λ is not handled: ``None``). A node
    without a degree rule raises :class:`NoDegreeRule`.

    A group that λ would have to follow together with another group (two damped roots of different
    arguments share one λ) is left out: its arguments keep their scale, and so does λ.
    """
    analysis = Homogeneity(arguments, damping_symbols)
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
