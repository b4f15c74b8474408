"""The exact zero test of the symbolic model (:mod:`derivations.engine.rational_zero`) against ``sympy.cancel``."""

import random

import pytest
from sympy import Matrix, Rational, cancel, sqrt, symbols

from derivations.engine.rational_zero import is_zero

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

X = symbols("x0:6", real=True)


def random_rational(rng: random.Random, depth: int):
    """A random expression of symbols and small rationals by +, ·, and integer powers (negative ones included)."""
    if depth == 0:
        return rng.choice([*X, Rational(rng.randint(-3, 3), rng.randint(1, 3))])
    a, b = random_rational(rng, depth - 1), random_rational(rng, depth - 1)
    op = rng.choice("+*/^")
    if op == "+":
        return a + b
    if op == "*":
        return a * b
    if op == "/" and cancel(b) != 0:
        return a / b
    return a ** rng.randint(0, 2)


@pytest.mark.parametrize("seed", range(40))
def test_agrees_with_cancel_on_random_rational_functions(seed):
    rng = random.Random(seed)
    e = random_rational(rng, 4)
    f = random_rational(rng, 3)
    assert is_zero(e - e.expand()) is True                     # an expansion is the same rational function
    assert is_zero(e - f) == (cancel(e - f) == 0)


def test_shared_determinant_denominators_as_the_symbolic_model_makes_them():
    a = Matrix(3, 3, lambda i, j: X[min(i, j) + max(i, j)])    # a generic symmetric matrix, as for a Gram root
    inv = a.inv(method="ADJ")
    assert is_zero((a * inv * a - a)[0, 1])
    assert is_zero((inv * a)[1, 1] - 1)
    assert is_zero((inv * a.T * a)[0, 2] - a[0, 2])            # Aᵀ = A
    assert not is_zero((inv * a)[0, 1] - 1)                    # planted: an off-diagonal entry of I taken as 1
    assert not is_zero((a * inv * a)[0, 2] - a[2, 0] - X[0] / (X[1] - X[2]))


def test_a_zero_difference_that_needs_cancellation_across_terms():
    x, y = X[:2]
    assert is_zero(1 / (x - y) + 1 / (y - x))
    assert not is_zero(1 / (x - y) - 1 / (y - x))
    assert is_zero((x**2 - y**2) / (x - y) - x - y)


def test_what_is_not_rational_is_decided_by_cancel():
    x = X[0]
    assert is_zero(sqrt(x) * sqrt(x) - x)
    assert not is_zero(sqrt(x) - x)
    assert is_zero(0.5 * x - x / 2)                            # a float


def test_a_zero_denominator_is_refused():
    x = X[0]
    with pytest.raises(ZeroDivisionError):
        is_zero(x / ((x + 1) ** 2 - x**2 - 2 * x - 1))        # the denominator is the zero polynomial
