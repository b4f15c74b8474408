"""Self-checks that cannot be weakened: every registered lemma's self-check runs at two sizes
at least, each giving every dimension its own value, so that no matrix of two dimensions is square there.

A clause true only for square matrices, ``P_W = I`` (the projector ``W (WᵀW)⁻¹ Wᵀ`` onto the range of ``W`` is the
identity exactly when ``W`` is square and invertible), with the check sizes made square used to pass ``--check``, and
the trusted kernel then accepted ``msign(G_M P_K) → msign(G_M)``. Planted here: that clause with square sizes (the
self-check refuses the sizes, naming the lemma) and with honest sizes (the numbers refute it), square sizes of the
cases alone, one size or the same size twice, and a clause in dimensions used as numbers that only the old repeated
size let pass.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from sympy import sympify
from sympy.matrices.expressions import Identity, MatrixSymbol

from derivations import halfsplit as H
from derivations import lemmas as L
from derivations.cli import self_check_rows
from derivations.engine import norms as N
from derivations.lemmas import counting
from derivations.lemmas.base import Case, stated_by
from derivations.lemmas.kernel import step_instance
from derivations.lemmas.statement import Clause, Statement, size_problems
from derivations.vocabulary.algebra import product
from derivations.vocabulary.evaluate import InstanceSampler, evaluate
from derivations.vocabulary.nodes import Msign, Projector

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def _registered() -> list:
    """Every lemma the workbench registers, discovered: the lemma families (``ALL_LEMMAS`` and any lemma the package
    exposes), the norm families' lemmas and each family's solve lemma; one per key."""
    found: dict = {}
    for lemma in (*L.ALL_LEMMAS, *(v for v in vars(L).values() if isinstance(v, L.Lemma)), *N.NORM_LEMMAS,
                  *(N.solve_lemma(f) for f in N.FAMILIES)):
        found.setdefault(lemma.key, lemma)
    return list(found.values())


LEMMAS = _registered()


class _Recording:
    """A random generator that records the shape of every Gaussian matrix drawn from it (every matrix a self-check
    samples, through the instance sampler or its own code)."""

    def __init__(self, rng: np.random.Generator):
        self._rng, self.shapes = rng, []

    def standard_normal(self, size=None, *args, **kwargs):
        if isinstance(size, tuple) and len(size) == 2:
            self.shapes.append(tuple(int(s) for s in size))
        return self._rng.standard_normal(size, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._rng, name)


@pytest.fixture(scope="module")
def runs() -> dict:
    """``{key: (self-check result, [(dims, symbols) of every instance sampled], [shapes drawn])}``: every registered
    lemma's self-check, run once with the instance sampler and the random generator recording what they were used
    at."""
    out = {}
    original = InstanceSampler.sample
    with pytest.MonkeyPatch.context() as mp:
        for lemma in LEMMAS:
            samples: list = []

            def sample(self, rng, symbols, backend=None, samples=samples):
                symbols = list(symbols)
                samples.append((dict(self.dims), {*symbols, *(s for d in self.definitions.values()
                                                              for s in d.atoms(MatrixSymbol))}))
                return original(self, rng, symbols, backend)

            mp.setattr(InstanceSampler, "sample", sample)
            rng = _Recording(np.random.default_rng(0))
            out[lemma.key] = (lemma.self_check(rng), samples, rng.shapes)
    return out


def _value(dim, dims) -> int:
    return int(sympify(dim).xreplace(dims))


def test_the_registry_is_discovered_not_listed():
    keys = {lem.key for lem in LEMMAS}
    assert {lem.key for lem in L.ALL_LEMMAS} <= keys and {lem.key for lem in N.NORM_LEMMAS} <= keys
    assert len(keys) >= 60, len(keys)


@pytest.mark.parametrize("lemma", LEMMAS, ids=lambda lem: lem.key)
def test_every_lemma_declares_two_sizes_that_give_every_dimension_its_own_value(lemma):
    assert lemma.size_problems() == []
    for part, sizes in lemma.check_sizes().items():
        assert len({tuple(sorted(d.items(), key=str)) for d in sizes}) >= 2, (part, sizes)
        for dims in sizes:
            assert len(set(dims.values())) == len(dims), (part, dims)


@pytest.mark.parametrize("lemma", LEMMAS, ids=lambda lem: lem.key)
def test_every_lemma_self_check_ran_at_two_non_square_sizes_with_all_dimensions_distinct(lemma, runs):
    """What the self-check actually did: every instance it sampled gave each dimension its own value, and every
    sampled matrix of two dimension expressions was non-square; it sampled at two different sizes at least (or,
    a lemma certified by its own code alone, drew matrices of two non-square shapes at least); the sizes it
    reports are sizes it sampled at."""
    result, samples, shapes = runs[lemma.key]
    assert result.passed, result.failures
    for dims, symbols in samples:
        assert len(set(dims.values())) == len(dims), dims
        for sym in (s for s in symbols if isinstance(s, MatrixSymbol)):
            rows, cols = sym.shape
            if rows != cols:
                assert _value(rows, dims) != _value(cols, dims), (sym, sym.shape, dims)
    used = {tuple(sorted(dims.items(), key=str)) for dims, _ in samples}
    if samples:
        assert len(used) >= 2, used
    else:
        assert len({s for s in shapes if s[0] != s[1]}) >= 2, shapes
    for part, sizes in result.sizes.items():
        assert {tuple(sorted(d.items(), key=str)) for d in sizes} <= used, (part, sizes, used)


# ---- the planted mistake: P_W = I, true only for a square W ------------------------------------------------------
SQUARE = ({L._m: 7, L._n: 7, L._k: 5}, {L._m: 16, L._n: 16, L._k: 24})


def _with_square_only_clause(sizes, case_dims=None):
    """Lemma P with the clause ``P_W = I`` added to its statement (checked at ``sizes``) and to its cases (sampled at
    ``case_dims``; default: the lemma's own)."""
    honest = L.PROJECTOR.statement
    w = next(v for v in honest.variables if str(v) == "W")
    false = dataclasses.replace(honest, clauses=(*honest.clauses, Clause(Projector(w), Identity(L._m))), sizes=sizes)

    def identities():
        cases, sampler = L.PROJECTOR.identities()
        sampler = sampler if case_dims is None else dataclasses.replace(sampler, dims=case_dims)
        return [*cases, Case(Projector(w), Identity(L._m), rewrites=False)], sampler

    return dataclasses.replace(L.PROJECTOR, statement=false, identities=identities), w


def test_the_planted_clause_holds_for_square_w_and_the_kernel_would_accept_what_it_buys():
    """Why the plant matters: ``P_W = I`` holds on every square instance, and the kernel, which trusts a lemma's
    statement, accepts ``msign(G_M P_K) → msign(G_M)`` from it (the honest lemma P does not give that step)."""
    planted, w = _with_square_only_clause(SQUARE, SQUARE[0])
    for dims in SQUARE:
        sampler = InstanceSampler(dims)
        env = sampler.sample(np.random.default_rng(0), {w})
        assert np.allclose(np.asarray(evaluate(Projector(w), env, dims=dims), dtype=float), np.eye(dims[L._m]))
    before, after = [Msign(product(H.G_M, Projector(H.W_K)))], [Msign(H.G_M)]
    assert step_instance(planted, "rewrite", before, after)[1] is None
    assert step_instance(L.PROJECTOR, "rewrite", before, after)[1] is not None


def test_a_square_only_clause_with_square_sizes_fails_the_self_check_naming_the_lemma():
    planted, _ = _with_square_only_clause(SQUARE, SQUARE[0])
    result = planted.self_check(np.random.default_rng(0))
    assert not result.passed and not result.errors  # refused before anything is evaluated
    name = "lemma P (Orthogonal projector onto the column space)"
    assert all(f.startswith(name) for f in result.failures), result.failures
    assert any("of the statement" in f and "m = n = 7" in f for f in result.failures), result.failures
    assert any("of the cases" in f and "m = n = 7" in f for f in result.failures), result.failures
    row = self_check_rows([planted], np.random.default_rng(0))[0]  # what --check and the emit gate read
    assert row["status"] == "FAIL" and row["failures"] == result.failures
    with pytest.raises(ValueError, match="m = n = 16"):
        planted.statement.check(np.random.default_rng(0))


def test_a_square_only_clause_at_honest_sizes_fails_numerically():
    planted, _ = _with_square_only_clause(L.PROJECTOR.statement.sizes)
    result = planted.self_check(np.random.default_rng(0))
    assert not result.passed
    failing = {k for k, err in result.errors.items() if not err <= Statement.tolerance(k) and k != "statement"}
    assert failing == {"statement (float64, k=5 m=7 n=3)", "statement (float64, k=25 m=40 n=16)",
                       "statement (mpmath 50 digits)"}, result.errors
    assert result.errors["statement"] > 1e-2  # the cases' own evaluation refutes it too
    assert all(f.startswith("lemma P (Orthogonal projector onto the column space) self-check") for f in
               result.failures)


def test_square_sizes_of_the_cases_alone_are_refused():
    """The statement at honest sizes, the rewrite's cases at a square one (where a square-only case would pass)."""
    planted, _ = _with_square_only_clause(L.PROJECTOR.statement.sizes, {L._m: 5, L._n: 5, L._k: 3})
    result = planted.self_check(np.random.default_rng(0))
    assert not result.passed and not result.errors
    assert all("sizes of the cases" in f for f in result.failures), result.failures
    assert any("m = n = 5" in f for f in result.failures), result.failures


@pytest.mark.parametrize("sizes", [SQUARE[:1], (L.PROJECTOR.statement.sizes[0],) * 2],
                         ids=["one size", "the same size twice"])
def test_one_size_or_a_repeated_size_is_refused(sizes):
    small = dict(sizes[0])
    if len(set(small.values())) < len(small):
        small = L.PROJECTOR.statement.sizes[0]
    statement = dataclasses.replace(L.PROJECTOR.statement, sizes=tuple(dict(small) for _ in sizes))
    problems = statement.size_problems()
    assert problems and any("two sizes" in p or "two different sizes" in p for p in problems), problems
    result = dataclasses.replace(L.PROJECTOR, statement=statement).self_check(np.random.default_rng(0))
    assert not result.passed and "lemma P (" in result.failures[0]


def test_a_size_that_makes_a_concatenation_square_is_refused():
    """Lemma B's ``[A | B]`` is ``m × (n + k)``: at the old second size (``m = 40, n = 16, k = 24``) it was square,
    though no two dimensions had one value."""
    old = dataclasses.replace(L.BLOCK_PRODUCT.statement, sizes=({L._m: 7, L._n: 3, L._k: 5},
                                                               {L._m: 40, L._n: 16, L._k: 24}))
    (problem,) = old.size_problems()
    assert "(k=24 m=40 n=16) makes" in problem and "[A | B] of shape (m, k + n)" in problem
    result = dataclasses.replace(L.BLOCK_PRODUCT, statement=old).self_check(np.random.default_rng(0))
    assert result.failures == [f"lemma B (Concatenation times block diagonal) self-check sizes of the statement: "
                               f"{problem}"]


def test_size_problems_name_a_missing_dimension_and_each_clash():
    m, n, k = L._m, L._n, L._k
    assert size_problems(({m: 7, n: 3, k: 5}, {m: 40, n: 16, k: 24}), {m, n, k}) == []
    (missing,) = size_problems(({m: 7, n: 3}, {m: 40, n: 16, k: 24}), {m, n, k})
    assert "gives no value to k" in missing
    (clash,) = size_problems(({m: 7, n: 3, k: 7}, {m: 40, n: 16, k: 24}), {m, n})  # k is no symbol here, still
    assert "k = m = 7" in clash


def test_dimensions_used_as_numbers_are_checked_at_two_sizes():
    """Lemmas Q and m state identities in dimensions used as numbers (``m k + k n``, ``min(m, n)``): their second
    size used to repeat the first, so a clause true only at ``m = 7`` passed.

    Planted: ``m k + k n = k (m + n) + m − 7``."""
    for lemma in (counting.SCALAR_ALGEBRA, counting.MIN_BOUND):
        first, second = lemma.statement.sizes
        assert all(first[d] != second[d] for d in lemma.statement.size_symbols), (lemma.number, first, second)
    m, n, k = L._m, L._n, L._k

    def false_ids():
        return [Case(m * k + k * n, k * (m + n) + m - 7, {"how": "factor"})], counting._sampler()

    false = stated_by(false_ids)
    errors = false.check(np.random.default_rng(0), trials=1)
    failing = [key for key, err in errors.items() if not err <= Statement.tolerance(key)]
    assert failing == ["statement (float64, k=21 m=23 n=19 r=2)"], errors
    planted = dataclasses.replace(counting.SCALAR_ALGEBRA, statement=false, identities=false_ids)
    assert not planted.self_check(np.random.default_rng(0)).passed


def test_the_sizes_of_every_lemma_are_pairwise_distinct_across_its_dimensions():
    """No declared size of any registered lemma gives two of its dimensions one value (the rule over the whole
    registry at once, so that a lemma added without honest sizes is named here too)."""
    offenders = [(lem.number, part, dims) for lem in LEMMAS for part, sizes in lem.check_sizes().items()
                 for dims in sizes for a, b in itertools.combinations(dims, 2) if dims[a] == dims[b]]
    assert offenders == []
