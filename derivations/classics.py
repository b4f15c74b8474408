"""Classic results that hand derivations about Muon-style optimizers lean on, each a checked derivation.

Every classic is one or more derivations of the engine (:mod:`derivations.engine.derivation`): a start, a chain
of steps that each apply a named lemma (:mod:`derivations.lemmas.spectral`, :mod:`derivations.lemmas.counting`
and the other families) with its side conditions, and every step checked on random instances in float64
and in mpmath at 50 digits. Bound steps (``rank(A B) ≤ rank(A)``) are checked as inequalities, ``before ≤ after``.

* ``classics.shampoo`` — Shampoo's one-step preconditioner with exponent ``-1/4`` on both sides is
  the spectral sign (Gupta, Koren, Singer 2018; Bernstein & Newhouse 2024, *Old optimizer, new
  norm*): ``G = U Σ Vᵀ`` → ``G Gᵀ = U Σ² Uᵀ`` → ``(G Gᵀ)^{-1/4} = U Σ^{-1/2} Uᵀ`` and likewise
  ``(Gᵀ G)^{-1/4} = V Σ^{-1/2} Vᵀ`` → the product collapses to ``U Vᵀ = msign(G)``.
* ``classics.odd_polynomial`` — ``a X + b X XᵀX + c X (XᵀX)² = U (a Σ + b Σ³ + c Σ⁵) Vᵀ``:
  ``X (XᵀX)^k = U Σ^{2k+1} Vᵀ`` (each ``XᵀX`` contributes ``V Σ² Vᵀ``), so an odd polynomial acts on
  the singular values only, which is why Newton–Schulz schedules are searched on scalars.
* ``classics.attention_rank`` — ``rank(Q Kᵀ) ≤ rank(Q) ≤ min(n, d_h) ≤ d_h``: the product factors
  through ``R^{d_h}``; random instances attain the bound.
* ``classics.linear_attention`` — ``(Q Kᵀ) V = Q (Kᵀ V)`` (associativity), and
  ``classics.linear_attention.flops_quadratic`` / ``.flops_linear``: the flop counts of the two
  orders, ``2 m k p`` per product read off the shapes: ``4 n² d`` and ``4 n d²``, equal at ``n = d``.
* ``classics.eckart_young`` and ``classics.eckart_young.frobenius`` — the truncated SVD ``A_r`` has
  ``‖A − A_r‖_op = σ_{r+1}`` and ``‖A − A_r‖_F = (Σ_{i>r} σ_i²)^{1/2}`` (Eckart & Young 1936; Mirsky
  1960); random rank-``r`` competitors do no better.
* ``classics.lora`` and ``classics.lora.fraction`` — LoRA's trainable parameters ``r (d_in + d_out)``
  per adapted ``W ∈ R^{d_out×d_in}`` (Hu et al. 2021), from the shapes of ``B ∈ R^{d_out×r}`` and
  ``A ∈ R^{r×d_in}``, and their fraction ``r (d_in + d_out) / (d_in d_out)`` of ``W``.

``python -m derivations.classics`` prints every step (lemma, side conditions, check) and exits 1 if a
step fails; ``python -m derivations.crosscheck classics.shampoo "U V^T"`` checks a hand formula against
a classic's result.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache

import numpy as np
from sympy import Eq, solve
from sympy.matrices.expressions import MatrixSymbol

from derivations import lemmas as L
from derivations.engine.derivation import (
    FLOAT64_TOL,
    MPMATH_DPS,
    MPMATH_TOL,
    Context,
    Derivation,
    DerivationError,
    StepCheckFailed,
    _Failure,
    identity_chain,
)
from derivations.engine.norms import UNITARY_INVARIANCE, FrobeniusNorm
from derivations.lemmas import counting
from derivations.lemmas import spectral as S
from derivations.parsing.formula import parse
from derivations.vocabulary import spectral_nodes as N
from derivations.vocabulary.algebra import product, total, transpose
from derivations.vocabulary.evaluate import evaluate
from derivations.vocabulary.nodes import FULL_COLUMN_RANK, FactMatrix, OpNorm, dimension, positive_symbol
from foundation.commandline import OneLineParser, UsageError, usage_error, write_result
from paramcount.count import Shape, tensors

DPS = MPMATH_DPS


class ClassicDerivation(Derivation):
    """A derivation whose steps may be bounds: a lemma of :data:`derivations.lemmas.counting.BOUND_LEMMAS`
    records a ``bound`` step, checked as ``before ≤ after`` on every instance (sub-check ``before ≤ after``,
    the excess relative to ``max(1, |after|)``)."""

    #: the dimension symbols a cross-check may name (``4 n^2 d``)
    dimensions: tuple = ()
    #: nodes a cross-check may name besides the start's symbols (the SVD factors ``U``, ``Σ``, ``V``)
    names: tuple = ()

    def _record(self, kind, lemma, after, conditions, note="", substitution=None, params=None):
        if kind == "rewrite" and lemma.key in counting.BOUND_LEMMAS:
            kind = "bound"
        return super()._record(kind, lemma, after, conditions, note, substitution, params)

    def _instance_errors(self, step, sampler, rng, backend):
        if step.kind != "bound":
            return super()._instance_errors(step, sampler, rng, backend)
        try:
            env = sampler.sample(rng, L.base.free_symbols(*step.before.parts(), *step.after.parts()), backend)
            worst = 0.0
            for b, a in zip(step.before.parts(), step.after.parts(), strict=False):
                vb, va = (float(evaluate(e, env, backend, sampler.dims)) for e in (b, a))
                worst = max(worst, max(0.0, vb - va) / max(1.0, abs(va)))
        except (ValueError, ZeroDivisionError, np.linalg.LinAlgError) as exc:
            raise _Failure("evaluation", f"{self._header(step, 'evaluation')}: {type(exc).__name__}: {exc}") from None
        return {"before ≤ after": worst}, env


def _chain(name, title, start, context, statement, *, dimensions=(), names=()) -> ClassicDerivation:
    der = identity_chain(name, title, start, context, statement)
    der.__class__ = ClassicDerivation
    der.dimensions, der.names = tuple(dimensions), tuple(names)
    return der


def _pick(plant, lemma):
    """``lemma``, or the planted variant of it (same key, number and title) that a test substitutes."""
    return (plant or {}).get(lemma.key, lemma)


# ---- Shampoo ---------------------------------------------------------------------------------------
n, m, d, d_h, r, d_in, d_out = (dimension(s) for s in ("n", "m", "d", "d_h", "r", "d_in", "d_out"))


def build_shampoo(plant=None) -> ClassicDerivation:
    """``(G Gᵀ)^{-1/4} G (Gᵀ G)^{-1/4} = msign(G)`` for a square invertible ``G``."""
    g = FactMatrix("G", n, n, [FULL_COLUMN_RANK])
    start = parse("(G G^T)^{-1/4} G (G^T G)^{-1/4}", {"G": g})
    ctx = Context(check_dims=[{n: 3}, {n: 4}, {n: 6}], mpmath_dims={n: 3})
    der = _chain("classics.shampoo", "Shampoo's one-step preconditioner is msign", start, ctx,
                 "Shampoo with exponent −1/4 on both sides, one step, G square of full rank",
                 names=N.svd_parts(g))
    def p(lemma):
        return _pick(plant, lemma)
    der.apply(p(S.GRAM_POWER), note="(G Gᵀ)^{-1/4} and (Gᵀ G)^{-1/4} as powers of PSD matrices")
    der.apply(p(S.SVD), matrix=g, note="G = U Σ Vᵀ")
    der.apply(p(S.ORTHONORMAL_CANCEL), note="G Gᵀ = U Σ Vᵀ V Σ Uᵀ, Gᵀ G = V Σ Uᵀ U Σ Vᵀ")
    der.apply(p(S.DIAGONAL_POWERS), note="G Gᵀ = U Σ² Uᵀ, Gᵀ G = V Σ² Vᵀ")
    der.apply(p(S.SPECTRAL_CALCULUS), note="(U Σ² Uᵀ)^{-1/4} = U Σ^{-1/2} Uᵀ, likewise with V")
    der.apply(p(S.ORTHONORMAL_CANCEL), note="Uᵀ U = I, Vᵀ V = I in the product")
    der.apply(p(S.DIAGONAL_POWERS), note="Σ^{-1/2} Σ Σ^{-1/2} = I")
    der.apply(p(S.MSIGN_SVD), note="U Vᵀ = msign(G)")
    return der


@cache
def shampoo() -> ClassicDerivation:
    """:func:`build_shampoo` (built and checked once)."""
    return build_shampoo()


# ---- odd matrix polynomials -----------------------------------------------------------------------
def build_odd_polynomial(plant=None) -> ClassicDerivation:
    """``a X + b X XᵀX + c X (XᵀX)² = U (a Σ + b Σ³ + c Σ⁵) Vᵀ``."""
    x = FactMatrix("X", m, n, [FULL_COLUMN_RANK])
    names = {"X": x, **{k: positive_symbol(k) for k in "abc"}}
    start = parse("a X + b X X^T X + c X X^T X X^T X", names)
    ctx = Context(check_dims=[{m: 5, n: 3}, {m: 4, n: 4}, {m: 6, n: 2}], mpmath_dims={m: 4, n: 3})
    der = _chain("classics.odd_polynomial", "Odd matrix polynomials act on singular values", start, ctx,
                 "p(X) = a X + b X(XᵀX) + c X(XᵀX)², X of full column rank", names=N.svd_parts(x))
    def p(lemma):
        return _pick(plant, lemma)
    der.apply(p(S.SVD), matrix=x, note="X = U Σ Vᵀ")
    der.apply(p(S.ORTHONORMAL_CANCEL), note="XᵀX = V Σ² Vᵀ: X (XᵀX)^k = U Σ (Vᵀ V) Σ (Uᵀ U) Σ … Vᵀ")
    der.apply(p(S.DIAGONAL_POWERS), note="X (XᵀX)^k = U Σ^{2k+1} Vᵀ")
    der.apply(p(S.FACTOR_OUTER), note="p(X) = U p(Σ) Vᵀ")
    return der


@cache
def odd_polynomial() -> ClassicDerivation:
    """:func:`build_odd_polynomial` (built and checked once)."""
    return build_odd_polynomial()


# ---- rank of attention logits -----------------------------------------------------------------------
def build_attention_rank(plant=None) -> ClassicDerivation:
    """``rank(Q Kᵀ) ≤ rank(Q) ≤ min(n, d_h) ≤ d_h``."""
    q, k = MatrixSymbol("Q", n, d_h), MatrixSymbol("K", n, d_h)
    ctx = Context(check_dims=[{n: 6, d_h: 2}, {n: 7, d_h: 3}, {n: 4, d_h: 4}], mpmath_dims={n: 5, d_h: 2})
    der = _chain("classics.attention_rank", "Rank of attention logits", N.Rank(product(q, transpose(k))), ctx,
                 "Q, K ∈ R^{n×d_h}", dimensions=(n, d_h))
    def p(lemma):
        return _pick(plant, lemma)
    der.apply(p(counting.RANK_PRODUCT), note="Q Kᵀ factors through R^{d_h}: its columns are combinations of Q's")
    der.apply(p(counting.RANK_SHAPE), note="Q is n × d_h")
    der.apply(p(counting.MIN_BOUND), keep=d_h, note="min(n, d_h) ≤ d_h")
    return der


@cache
def attention_rank() -> ClassicDerivation:
    """:func:`build_attention_rank` (built and checked once)."""
    return build_attention_rank()


# ---- linear attention ------------------------------------------------------------------------------------
def _qkv():
    return MatrixSymbol("Q", n, d), MatrixSymbol("K", n, d), MatrixSymbol("V", n, d)


_QKV_DIMS = [{n: 5, d: 2}, {n: 3, d: 4}, {n: 4, d: 4}]


def build_linear_attention(plant=None) -> ClassicDerivation:
    """``(Q Kᵀ) V = Q (Kᵀ V)``."""
    q, k, v = _qkv()
    ctx = Context(check_dims=_QKV_DIMS, mpmath_dims={n: 4, d: 2})
    der = _chain("classics.linear_attention", "Linear attention reassociation", product(N.Group(product(q, k.T)), v),
                 ctx, "softmax-free attention, Q, K, V ∈ R^{n×d}")
    der.apply(_pick(plant, counting.ASSOCIATIVITY), note="regroup: the n × n matrix Q Kᵀ is never formed")
    return der


def build_flops(order: str, plant=None) -> ClassicDerivation:
    """Flops of ``(Q Kᵀ) V`` (``order="quadratic"``) or of ``Q (Kᵀ V)`` (``"linear"``)."""
    q, k, v = _qkv()
    expr = product(N.Group(product(q, k.T)), v) if order == "quadratic" else product(q, N.Group(product(k.T, v)))
    ctx = Context(check_dims=_QKV_DIMS, mpmath_dims={n: 3, d: 2})
    der = _chain(f"classics.linear_attention.flops_{order}", f"Flops of {expr}", N.Flops(expr), ctx,
                 f"evaluate {expr} as parenthesized", dimensions=(n, d))
    der.apply(_pick(plant, counting.PRODUCT_COST), note="2·m·k·p per product, from the shapes")
    return der


@cache
def linear_attention() -> ClassicDerivation:
    """:func:`build_linear_attention` (built and checked once)."""
    return build_linear_attention()


@cache
def flops_quadratic() -> ClassicDerivation:
    """Flops of ``(Q Kᵀ) V``."""
    return build_flops("quadratic")


@cache
def flops_linear() -> ClassicDerivation:
    """Flops of ``Q (Kᵀ V)``."""
    return build_flops("linear")


def crossover():
    """The sequence lengths where both orders cost the same, solved from the two derived counts."""
    return solve(Eq(flops_quadratic().formula, flops_linear().formula), n)


# ---- Eckart–Young --------------------------------------------------------------------------------------------
def build_eckart_young(norm: str = "op", plant=None) -> ClassicDerivation:
    """``‖A − A_r‖_op = σ_{r+1}`` (``norm="op"``) or ``‖A − A_r‖_F = (Σ_{i>r} σ_i²)^{1/2}`` (``"frobenius"``)."""
    a = FactMatrix("A", m, n, [FULL_COLUMN_RANK])
    diff = product(-1, N.TruncatedSvd(a, r))
    err = (OpNorm if norm == "op" else FrobeniusNorm)(total(a, diff))
    ctx = Context(check_dims=[{m: 6, n: 4, r: 2}, {m: 7, n: 5, r: 3}, {m: 5, n: 5, r: 2}],
                  mpmath_dims={m: 5, n: 4, r: 2})
    name = "classics.eckart_young" + ("" if norm == "op" else ".frobenius")
    which = "operator" if norm == "op" else "Frobenius"
    der = _chain(name, f"Eckart–Young: {which} error of the truncated SVD", err, ctx,
                 f"{which} error of the rank-r truncation A_r of A ∈ R^(m×n)", names=N.svd_parts(a),
                 dimensions=(r,))
    def p(lemma):
        return _pick(plant, lemma)
    der.apply(p(S.TRUNCATED_SVD), note="A_r = U Σ_{≤r} Vᵀ")
    der.apply(p(S.SVD), matrix=a, note="A = U Σ Vᵀ")
    der.apply(p(S.FACTOR_OUTER), note="A − A_r = U (Σ − Σ_{≤r}) Vᵀ")
    der.apply(p(S.DIAGONAL_SPLIT), note="Σ − Σ_{≤r} = Σ_{>r}")
    der.apply(p(L.ORTHONORMAL_INVARIANCE if norm == "op" else UNITARY_INVARIANCE), note="drop U and Vᵀ")
    der.apply(p(S.DIAGONAL_NORMS), note="the norm of a diagonal matrix, σ sorted")
    return der


@cache
def eckart_young() -> ClassicDerivation:
    """:func:`build_eckart_young` in the operator norm."""
    return build_eckart_young("op")


@cache
def eckart_young_frobenius() -> ClassicDerivation:
    """:func:`build_eckart_young` in the Frobenius norm."""
    return build_eckart_young("frobenius")


def competitors(seed=0, trials=60) -> tuple[bool, str]:
    """Random rank-``r`` matrices ``B`` (near the truncation and far from it) must not beat the derived errors:
    ``‖A − B‖ ≥`` the derived value of ``‖A − A_r‖``, both norms, on every instance."""
    rng = np.random.default_rng(seed)
    worst = np.inf
    op, fro = eckart_young().formula, eckart_young_frobenius().formula
    for dims in eckart_young().context.check_dims:
        rows, cols, rank = (dims[s] for s in (m, n, r))
        base = rng.standard_normal((rows, cols))
        derived = [float(evaluate(f, {sym: base for sym in f.atoms(MatrixSymbol)}, dims=dims)) for f in (op, fro)]
        u, s, vt = np.linalg.svd(base, full_matrices=False)
        left, right = u[:, :rank], s[:rank, None] * vt[:rank]
        for t in range(trials):
            scale = 0.1 if t % 2 else 1.0
            b = (left + scale * rng.standard_normal(left.shape)) @ (right + scale * rng.standard_normal(right.shape))
            got = (np.linalg.norm(base - b, 2), np.linalg.norm(base - b, "fro"))
            margin = min(got[0] - derived[0], got[1] - derived[1])
            worst = min(worst, margin)
            if margin < -1e-12:
                return False, f"a rank-{rank} matrix beats the derived error at {rows}×{cols}: {got} < {derived}"
    return True, f"{trials} random rank-r competitors per size do no better (smallest margin {worst:.2e})"


# ---- LoRA ------------------------------------------------------------------------------------------------------
def _lora_shapes():
    b, a, w = MatrixSymbol("B", d_out, r), MatrixSymbol("A", r, d_in), MatrixSymbol("W", d_out, d_in)
    if product(b, a).shape != w.shape:
        raise DerivationError("classics.lora: B A must have the shape of W")
    return b, a, w


_LORA_DIMS = [{d_out: 5, d_in: 4, r: 2}, {d_out: 3, d_in: 6, r: 2}, {d_out: 4, d_in: 4, r: 3}]


def build_lora(fraction: bool = False, plant=None) -> ClassicDerivation:
    """``#B + #A = r (d_in + d_out)``, or divided by ``#W = d_out d_in``."""
    b, a, w = _lora_shapes()
    count = N.Entries(b) + N.Entries(a)
    start = count / N.Entries(w) if fraction else count
    ctx = Context(check_dims=_LORA_DIMS, mpmath_dims={d_out: 3, d_in: 2, r: 2})
    der = _chain("classics.lora" + (".fraction" if fraction else ""),
                 "LoRA: trainable fraction of W" if fraction else "LoRA trainable parameters", start, ctx,
                 "W + B A with B ∈ R^(d_out×r), A ∈ R^(r×d_in) trained, W frozen", dimensions=(r, d_in, d_out))
    der.apply(_pick(plant, counting.ENTRY_COUNT), note="count the entries from the shapes")
    der.apply(_pick(plant, counting.SCALAR_ALGEBRA), how="factor")
    return der


@cache
def lora() -> ClassicDerivation:
    """:func:`build_lora` (the count)."""
    return build_lora()


@cache
def lora_fraction() -> ClassicDerivation:
    """:func:`build_lora` (the fraction of ``W``)."""
    return build_lora(fraction=True)


def llama_example(rank: int = 16) -> int:
    """Trainable parameters of rank-``rank`` LoRA on ``W_Q`` and ``W_V`` of every layer of Llama-3-8B, from the
    derived count evaluated at the shapes of :mod:`paramcount.count`."""
    shapes = {t.name: t.shape for t in tensors(Shape(4096, 32, 128256, 14336, 32, 8, 128))}
    count = lora().formula
    per_layer = sum(int(count.subs({d_out: shapes[w][0], d_in: shapes[w][1], r: rank})) for w in ("W_Q", "W_V"))
    return per_layer * 32


# ---- the catalogue -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Classic:
    """A named classic: ``derivations() ->`` its derivations (the first is the headline), and an extra check
    ``() -> (holds, evidence)`` for what is not a step (competitors, a crossover, a worked example). A classic
    with no derivation yet may give a bare check as ``derivations() -> (holds, evidence)``."""

    name: str
    title: str
    statement: str
    derivations: Callable
    extra: Callable | None = None

    def check(self) -> tuple[bool, str]:
        """``(holds, evidence)``: every step of every derivation re-checked (float64 and mpmath), then ``extra``."""
        try:
            ders = self.derivations()
            if len(ders) == 2 and isinstance(ders[0], bool):  # a bare check, no derivation
                return ders
            for der in ders:
                der.check(trials=3, mp=True)
        except (StepCheckFailed, DerivationError) as exc:
            return False, str(exc)
        steps = sum(len(der.steps) for der in ders)
        evidence = f"{steps} steps checked in float64 and at {DPS} digits"
        if self.extra is not None:
            ok, more = self.extra()
            if not ok:
                return False, more
            evidence += f"; {more}"
        return True, evidence


def _crossover_check():
    roots = [x for x in crossover() if x.is_positive]
    q, lin = flops_quadratic().formula, flops_linear().formula
    return roots == [d], f"flops (QKᵀ)V = {q}, Q(KᵀV) = {lin}; equal at n = {', '.join(map(str, roots))}"


def _rank_attained():
    der = attention_rank()
    start = der.start.expr
    rng = np.random.default_rng(1)
    for dims in der.context.check_dims:
        values = {s: rng.standard_normal((dims[n], dims[d_h])) for s in start.atoms(MatrixSymbol)}
        got = int(evaluate(start, values, dims=dims))
        if got != dims[d_h]:
            return False, f"rank {got} ≠ d_h = {dims[d_h]} on a random instance at n = {dims[n]}"
    return True, "random instances attain the bound (rank = d_h)"


def _lora_example():
    return True, f"rank 16 on W_Q and W_V of Llama-3-8B: {llama_example():,} trainable"


CLASSICS = (
    Classic("classics.shampoo", "Shampoo's one-step preconditioner is msign",
            "(G Gᵀ)^{-1/4} G (Gᵀ G)^{-1/4} = msign(G) for invertible G", lambda: (shampoo(),)),
    Classic("classics.odd_polynomial", "Odd matrix polynomials act on singular values",
            "a X + b X XᵀX + c X (XᵀX)² = U (a Σ + b Σ³ + c Σ⁵) Vᵀ = U p(Σ) Vᵀ", lambda: (odd_polynomial(),)),
    Classic("classics.attention_rank", "Rank of attention logits", "rank(Q Kᵀ) ≤ d_h",
            lambda: (attention_rank(),), _rank_attained),
    Classic("classics.linear_attention", "Linear attention reassociation",
            "(Q Kᵀ) V = Q (Kᵀ V); flops 4n²d against 4nd², equal at n = d",
            lambda: (linear_attention(), flops_quadratic(), flops_linear()), _crossover_check),
    Classic("classics.eckart_young", "Eckart–Young",
            "‖A − A_r‖_op = σ_{r+1}, ‖A − A_r‖_F = (Σ_{i>r} σ_i²)^{1/2}",
            lambda: (eckart_young(), eckart_young_frobenius()), competitors),
    Classic("classics.lora", "LoRA trainable parameters",
            "r (d_in + d_out) per adapted d_out × d_in matrix, a fraction r (d_in + d_out)/(d_in d_out) of W",
            lambda: (lora(), lora_fraction()), _lora_example),
)


def derivations() -> list:
    """Every derivation of every classic, in catalogue order."""
    return [der for c in CLASSICS for der in c.derivations()]


def by_name(name: str) -> Classic:
    """The classic called ``name`` (``KeyError`` listing the known names)."""
    for c in CLASSICS:
        if c.name == name:
            return c
    raise KeyError(f"unknown classic {name!r}; known: {', '.join(c.name for c in CLASSICS)}")


def planted(lemma: L.Lemma, rewrite) -> L.Lemma:
    """A wrong variant of ``lemma`` for the tests: the same key, number and title, another rewrite."""
    return replace(lemma, rewrite=rewrite)


# ---- command line -----------------------------------------------------------------------------------------------
def step_lines(der) -> list[str]:
    """The steps of ``der`` as text: result, lemma, side conditions and check."""
    out = [f"{der.name}: {der.title}", f"  start: {der.start.expr}"]
    for s in der.steps:
        c = s.check
        rel = "≤" if s.kind == "bound" else "="
        mp = "n/a" if c.mpmath_error is None else f"{c.mpmath_error:.1e}"
        status = "FAILS: " + c.failure.splitlines()[0] if not c.passed else (
            f"holds (float64 {c.float64_error:.1e} ≤ {FLOAT64_TOL:.0e} over {c.trials} instances, "
            f"mpmath {mp} ≤ {MPMATH_TOL:.0e})")
        out += [f"  {rel} {s.after.expr}", f"      step {s.index}: lemma {s.lemma.number} ({s.lemma.title})"
                + (f" — {s.note}" if s.note else "")]
        out += [f"      side condition: {cond}" for cond in s.conditions]
        out.append(f"      check: {status}")
    out.append(f"  result: {der.formula}")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m derivations.classics [NAME …]``: check and print the classics; returns the exit status
    (1: one fails, 2: bad input)."""
    prog = "derivations.classics"
    p = OneLineParser(prog="python -m derivations.classics", description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="which classics (default: all)")
    try:
        args = p.parse_args(argv)
        try:
            chosen = [by_name(nm) for nm in args.names] or list(CLASSICS)
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
    except UsageError as exc:
        return usage_error(prog, exc)
    failed, out = 0, []
    for c in chosen:
        ok, evidence = c.check()
        failed += not ok
        out.append(f"== {c.name}: {c.title} — {'holds' if ok else 'FAILS'}\n   {c.statement}")
        if ok:
            out += ["\n".join(step_lines(der)) for der in c.derivations()]
        out.append(f"   evidence: {evidence}\n")
    return write_result(prog, "\n".join(out) + "\n", 1 if failed else 0)


__all__ = ["CLASSICS", "Classic", "ClassicDerivation", "by_name", "competitors", "crossover", "derivations",
           "llama_example", "main", "planted", "step_lines"]


if __name__ == "__main__":
    sys.exit(main())
