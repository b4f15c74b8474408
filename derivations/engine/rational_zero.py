"""Exact zero test of a rational function of symbols, without greatest common divisors.

A SymPy expression built from symbols and rational numbers by ``+``, ``·`` and integer powers is a
rational function ``N / D`` of its symbols. It is identically zero exactly when the polynomial
``N`` is zero, whatever ``D`` is (``D`` is a product of nonzero polynomials). :func:`is_zero` computes
``N`` in SymPy's sparse polynomial ring over ℚ, keeping ``D`` factored as ``{base: exponent}`` so
that a sum only multiplies each numerator by the factors its denominator lacks, and nothing is ever
cancelled. The symbolic model's entries share their denominators (determinants of the explicit
Gram roots), so this is hundreds of times faster than ``sympy.cancel`` on the same difference (a
scalar of 4,000 operations in 31 symbols: 0.05 s against 11 s), and exact in both directions: a
nonzero ``N`` is a nonzero rational function. An expression with anything else (a float, a square
root, a function) is decided by ``sympy.cancel``.
"""

from __future__ import annotations

from sympy import QQ, cancel
from sympy.polys.rings import ring


class _NotRational(Exception):
    """The expression holds a node that is not a symbol, a rational number, a sum, a product or an integer power."""


def is_zero(expr) -> bool:
    """Whether ``expr`` is identically zero as a rational function of its symbols.

    >>> from sympy import symbols
    >>> a, b = symbols("a b")
    >>> is_zero(a / (a*b - 1) + b / (a*b - 1) - (a + b) / (a*b - 1))
    True
    >>> is_zero(1 / (a - b) - 1 / (b - a))
    False

    A denominator that is the zero polynomial (``1/((a + 1)² − a² − 2a − 1)``) raises ``ZeroDivisionError``
    (the symbolic model then says "not modelled").
    """
    gens = sorted(expr.free_symbols, key=str)
    if not gens:
        return cancel(expr) == 0
    poly_ring = ring(gens, QQ)[0]
    try:
        numerator, _ = _fraction(expr, poly_ring, {g: i for i, g in enumerate(gens)}, {})
    except _NotRational:
        return cancel(expr) == 0
    return numerator == poly_ring.zero


def _fraction(expr, poly_ring, index: dict, memo: dict):
    """``(N, {base: exponent})`` with ``expr = N / ∏ base^exponent``; ``memo`` shares repeated subexpressions."""
    if expr in memo:
        return memo[expr]
    if expr.is_Symbol and expr in index:
        out = (poly_ring.gens[index[expr]], {})
    elif expr.is_Rational:
        out = (poly_ring(QQ(int(expr.p), int(expr.q))), {})
    elif expr.is_Add:
        out = _sum([_fraction(a, poly_ring, index, memo) for a in expr.args], poly_ring)
    elif expr.is_Mul:
        num, den = poly_ring.one, {}
        for arg in expr.args:
            n, d = _fraction(arg, poly_ring, index, memo)
            num *= n
            for base, e in d.items():
                den[base] = den.get(base, 0) + e
        out = (num, den)
    elif expr.is_Pow and expr.exp.is_Integer:
        out = _power(_fraction(expr.base, poly_ring, index, memo), int(expr.exp), poly_ring)
    else:
        raise _NotRational(type(expr).__name__)
    memo[expr] = out
    return out


def _sum(parts, poly_ring):
    den: dict = {}
    for _, d in parts:
        for base, e in d.items():
            den[base] = max(den.get(base, 0), e)
    num = poly_ring.zero
    for n, d in parts:
        for base, e in den.items():
            if e > d.get(base, 0):
                n *= base ** (e - d.get(base, 0))
        num += n
    return num, den


def _power(fraction, k: int, poly_ring):
    num, den = fraction
    if k >= 0:
        return num ** k, {base: e * k for base, e in den.items()}
    if num == poly_ring.zero:
        raise ZeroDivisionError("a negative power of zero")
    flipped = poly_ring.one
    for base, e in den.items():
        flipped *= base ** (e * -k)
    return flipped, {num: -k}
