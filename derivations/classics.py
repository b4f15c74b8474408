"""Classic results that hand derivations about Muon-style optimizers lean on, each checked.

Every entry of :data:`CLASSICS` is a named statement with a check that can fail (each has a
planted wrong variant in the tests):

* ``classics.shampoo`` — Shampoo's one-step preconditioner with exponent ``-1/4`` on both sides
  is the spectral sign: ``(G Gᵀ)^{-1/4} G (Gᵀ G)^{-1/4} = msign(G)`` for an invertible ``G``
  (Gupta, Koren, Singer 2018; Bernstein & Newhouse 2024, *Old optimizer, new norm*). With
  ``G = U Σ Vᵀ`` both sides are ``U Vᵀ``.
* ``classics.odd_polynomial`` — an odd matrix polynomial acts on singular values only:
  ``a X + b X XᵀX + c X (XᵀX)² = msign(X) (XᵀX)^{1/2} (a I + b XᵀX + c (XᵀX)²)``, i.e.
  ``p(X) = U p(Σ) Vᵀ``; this is why Newton–Schulz schedules are searched on scalars.
* ``classics.attention_rank`` — ``rank(Q Kᵀ) ≤ d_h`` for ``Q, K ∈ R^{n×d_h}``: the product factors
  through ``R^{d_h}`` (the inner dimension read off the shapes); checked by the singular values
  of random products at 50 digits.
* ``classics.linear_attention`` — ``(Q Kᵀ) V = Q (Kᵀ V)`` (proved symbolically) and the flop
  counts of the two association orders, derived from the shapes: ``4 n² d`` against ``4 n d²``.
* ``classics.eckart_young`` — the best rank-``r`` approximation ``A_r`` (truncated SVD) has errors
  ``‖A − A_r‖_op = σ_{r+1}`` and ``‖A − A_r‖_F = (Σ_{i>r} σ_i²)^{1/2}`` (Eckart & Young 1936;
  Mirsky 1960), checked against random rank-``r`` competitors, which must not do better.
* ``classics.lora`` — LoRA's trainable parameters ``r (d_in + d_out)`` per adapted matrix
  ``W ∈ R^{d_out×d_in}`` (Hu et al. 2021), derived from the shapes of ``B ∈ R^{d_out×r}`` and
  ``A ∈ R^{r×d_in}``.

``python -m derivations.classics`` prints every statement and the result of its check.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import mpmath
import numpy as np
from sympy import expand, symbols

from .crosscheck import Verdict, compare, identity_target, parse_assumptions
from .formula import Builder, parse_tree

DPS = 50


@dataclass(frozen=True)
class Classic:
    """A named classic result: its statement and a check returning ``(holds, evidence)``."""

    name: str
    title: str
    statement: str
    check: Callable[[], tuple[bool, str]]


# ---- identities, checked by the cross-checker ----------------------------------------------------
def identity(lhs: str, rhs: str, assume=()) -> Verdict:
    """The cross-checker's verdict on ``lhs = rhs`` under ``assume`` (``"G: square, full column rank"``)."""
    target, cand = identity_target(lhs, rhs, parse_assumptions(list(assume)))
    return compare(target, cand)


SHAMPOO = ("(G G^T)^{-1/4} G (G^T G)^{-1/4}", "msign(G)", ["G: square, full column rank"])
ODD_POLYNOMIAL = ("a X + b X X^T X + c X X^T X X^T X",
                  "msign(X) sqrtm(X^T X) (a I + b X^T X + c X^T X X^T X)", ["X: full column rank"])
REASSOCIATION = ("(Q K^T) V", "Q (K^T V)", [])


def _identity_check(spec) -> Callable[[], tuple[bool, str]]:
    def check():
        v = identity(*spec)
        return v.verdict == "equal", f"{v.verdict} ({v.method}, {v.instances} instances at {DPS} digits)"
    return check


# ---- shapes: ranks and flop counts -----------------------------------------------------------------
n, d, d_h, r, d_in, d_out = symbols("n d d_h r d_in d_out", integer=True, positive=True)


def _shaped(names_shapes: dict) -> dict:
    from sympy.matrices.expressions import MatrixSymbol
    return {k: MatrixSymbol(k, *shape) for k, shape in names_shapes.items()}


def matmul_flops(text: str, namespace: dict):
    """Flops of ``text`` evaluated as written (parentheses respected, left to right otherwise):
    ``2 m k p`` for each product of an ``m×k`` and a ``k×p`` matrix (a multiply and an add)."""
    builder = Builder(namespace)

    def cost(node):
        if node.kind == "mul":
            total, acc = 0, None
            for _, factor in node.args:
                c, shape = cost(factor)
                total += c
                if acc is not None:
                    total += 2 * acc[0] * acc[1] * shape[1]
                    acc = (acc[0], shape[1])
                else:
                    acc = shape
            return total, acc
        if node.kind in ("T",):
            c, shape = cost(node.args[0])
            return c, (shape[1], shape[0])
        value = builder.build(node)
        return 0, tuple(value.shape)
    return expand(cost(parse_tree(text))[0])


def linear_attention_flops() -> dict:
    """Flop counts of the two association orders of ``Q Kᵀ V`` with ``Q, K, V ∈ R^{n×d}``."""
    ns = _shaped({"Q": (n, d), "K": (n, d), "V": (n, d)})
    return {"(Q K^T) V": matmul_flops("(Q K^T) V", ns), "Q (K^T V)": matmul_flops("Q (K^T V)", ns)}


def _linear_attention_check():
    v = identity(*REASSOCIATION)
    flops = linear_attention_flops()
    ok = v.verdict == "equal" and expand(flops["(Q K^T) V"] - 4 * n**2 * d) == 0 and expand(
        flops["Q (K^T V)"] - 4 * n * d**2) == 0
    return ok, (f"reassociation {v.verdict} ({v.method}); flops (QKᵀ)V = {flops['(Q K^T) V']}, "
                f"Q(KᵀV) = {flops['Q (K^T V)']}")


def product_rank_bound(text: str, namespace: dict):
    """An upper bound on the rank of a product: the smallest dimension it passes through."""
    expr = Builder(namespace).build(parse_tree(text))
    dims = [expr.shape[0], expr.shape[1]]
    for m in getattr(expr, "args", ()):
        if getattr(m, "is_Matrix", False):
            dims += list(m.shape)
    return dims


def numerical_rank(a: mpmath.matrix, tol=None) -> int:
    with mpmath.workdps(DPS):
        s = mpmath.svd_r(a, compute_uv=False)
        tol = tol or mpmath.mpf(10) ** (-DPS + 10) * max(s)
        return sum(1 for x in s if x > tol)


def _attention_rank_check(seed=0):
    rng = np.random.default_rng(seed)
    worst = 0
    ns = _shaped({"Q": (n, d_h), "K": (n, d_h)})
    bound = product_rank_bound("Q K^T", ns)
    if d_h not in bound:
        return False, f"the product does not pass through d_h: dimensions {bound}"
    for rows, heads in ((6, 2), (7, 3), (5, 5)):
        with mpmath.workdps(DPS):
            q = mpmath.matrix(rng.standard_normal((rows, heads)).tolist())
            k = mpmath.matrix(rng.standard_normal((rows, heads)).tolist())
            rank = numerical_rank(q * k.T)
        if rank > heads:
            return False, f"rank {rank} > d_h = {heads} at n = {rows}"
        worst = max(worst, heads - rank)
    return worst == 0, "rank(Q Kᵀ) = d_h exactly on random instances (the bound is attained)"


# ---- Eckart–Young and LoRA -------------------------------------------------------------------------
def truncated_svd(a: np.ndarray, rank: int) -> np.ndarray:
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    return (u[:, :rank] * s[:rank]) @ vt[:rank]


def eckart_young_errors(sigma, rank: int) -> tuple[float, float]:
    """The claimed errors ``(σ_{r+1}, (Σ_{i>r} σ_i²)^{1/2})`` of the best rank-``r`` approximation."""
    rest = np.asarray(sigma[rank:], dtype=float)
    return (float(rest[0]) if rest.size else 0.0), float(np.sqrt(np.sum(rest**2)))


def check_eckart_young(errors=eckart_young_errors, seed=0, trials=200) -> tuple[bool, str]:
    """The truncated SVD attains ``errors`` and no random rank-``r`` matrix does better."""
    rng = np.random.default_rng(seed)
    worst_gap = 0.0
    for m, k, rank in ((6, 4, 1), (7, 5, 2), (5, 5, 3)):
        a = rng.standard_normal((m, k))
        s = np.linalg.svd(a, compute_uv=False)
        ar = truncated_svd(a, rank)
        u, _, vt = np.linalg.svd(a, full_matrices=False)
        left, right = u[:, :rank], s[:rank, None] * vt[:rank]
        op, fro = errors(s, rank)
        got = (np.linalg.norm(a - ar, 2), np.linalg.norm(a - ar, "fro"))
        gap = max(abs(got[0] - op), abs(got[1] - fro)) / s[0]
        worst_gap = max(worst_gap, gap)
        if gap > 1e-12:
            return False, f"truncated SVD errors {got} differ from the claimed {(op, fro)} at {m}x{k}, r = {rank}"
        for _ in range(trials // 3):  # competitors near the optimum and random ones
            b = (left + 0.1 * rng.standard_normal(left.shape)) @ (right + 0.1 * rng.standard_normal(right.shape))
            if np.linalg.norm(a - b, 2) < op - 1e-12 or np.linalg.norm(a - b, "fro") < fro - 1e-12:
                return False, f"a rank-{rank} matrix beats the claimed optimum at {m}x{k}"
    return True, f"errors attained (max gap {worst_gap:.1e}); no rank-r competitor does better"


def lora_parameters(d_out_, d_in_, rank):
    """Trainable parameters of a LoRA adapter ``W + B A``: the sizes of ``B`` and ``A``."""
    ns = _shaped({"B": (d_out_, rank), "A": (rank, d_in_)})
    expr = Builder(ns).build(parse_tree("B A"))
    if tuple(expr.shape) != (d_out_, d_in_):
        raise ValueError("B A must have the shape of W")
    return expand(sum(m.shape[0] * m.shape[1] for m in ns.values()))


def _lora_check():
    count = lora_parameters(d_out, d_in, r)
    ok = expand(count - r * (d_in + d_out)) == 0
    from .params import Shape, tensors
    shapes = {t.name: t.shape for t in tensors(Shape(4096, 32, 128256, 14336, 32, 8, 128))}
    qv = sum(lora_parameters(*shapes[w], 16) for w in ("W_Q", "W_V")) * 32
    return ok, f"r (d_in + d_out) = {count}; rank 16 on W_Q and W_V of Llama-3-8B: {int(qv):,} trainable"


CLASSICS = (
    Classic("classics.shampoo", "Shampoo's one-step preconditioner is msign",
            "(G Gᵀ)^{-1/4} G (Gᵀ G)^{-1/4} = msign(G) for invertible G", _identity_check(SHAMPOO)),
    Classic("classics.odd_polynomial", "Odd matrix polynomials act on singular values",
            "a X + b XXᵀX + c X(XᵀX)² = msign(X)(XᵀX)^{1/2}(aI + bXᵀX + c(XᵀX)²) = U p(Σ) Vᵀ",
            _identity_check(ODD_POLYNOMIAL)),
    Classic("classics.attention_rank", "Rank of attention logits", "rank(Q Kᵀ) ≤ d_h", _attention_rank_check),
    Classic("classics.linear_attention", "Linear attention reassociation",
            "(Q Kᵀ) V = Q (Kᵀ V); flops 4n²d against 4nd²", _linear_attention_check),
    Classic("classics.eckart_young", "Eckart–Young", "‖A − A_r‖_op = σ_{r+1}, ‖A − A_r‖_F = (Σ_{i>r} σ_i²)^{1/2}",
            check_eckart_young),
    Classic("classics.lora", "LoRA trainable parameters", "r (d_in + d_out) per adapted d_out × d_in matrix",
            _lora_check),
)


def by_name(name: str) -> Classic:
    for c in CLASSICS:
        if c.name == name:
            return c
    raise KeyError(f"unknown classic {name!r}; known: {', '.join(c.name for c in CLASSICS)}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m derivations.classics", description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="which classics (default: all)")
    args = p.parse_args(argv)
    try:
        chosen = [by_name(nm) for nm in args.names] or list(CLASSICS)
    except KeyError as exc:
        sys.stderr.write(f"derivations.classics: error: {exc.args[0]}\n")
        return 2
    failed = 0
    for c in chosen:
        ok, evidence = c.check()
        failed += not ok
        print(f"{c.name:<28} {'holds' if ok else 'FAILS'}  {c.statement}\n{'':<28} {evidence}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
