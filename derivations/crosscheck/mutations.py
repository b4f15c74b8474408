"""Near variants of a derived expression, the usual slips of a hand derivation: the sign flipped, a
square sub-expression transposed, the inverse of the Gram matrix instead of its inverse square root
(and the root instead of its inverse, half the exponent, the Gram matrix on the other side), a whitening
factor missing, a whitening factor moved to the other side, one exponent changed in every Gram root, the
sign of one term flipped or the term left out, msign of a sum for a sum of msigns, msign block by block
(per head) for one msign over a concatenation and back, two blocks swapped, and Q and K swapped
(everywhere, in the partner only, in the gradient only). A slip at a node that occurs more than once is
tried at each occurrence and at all of them at once."""

from __future__ import annotations

import itertools

from sympy import Basic, S
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixSymbol

from derivations.crosscheck.verdict import show
from derivations.parsing.formula import matrix_power
from derivations.vocabulary.algebra import product, tidy, total, transpose
from derivations.vocabulary.nodes import (
    BlockDiag,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    HStack,
    IsotropicScale,
    Msign,
    PolarFactor,
    Projector,
    _Derived,
    _GramNode,
)


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


MAX_TERMS = 16


def _labeller(namespace):
    """``node`` as the checker prints it: a Gram root by its name only where the name reads back as it."""
    return lambda node: show(node, namespace)


def mutations(ref, namespace):
    """``(description, expression)`` near variants of ``ref`` (see the module docstring). A slip that can sit
    at several places is tried at each occurrence and at every occurrence at once."""
    lab = _labeller(namespace)
    yield "the sign flipped", product(-1, ref) if ref.is_Matrix else -ref
    nodes = list(_paths(ref))
    yield from _transposed(ref, nodes, lab)
    grams = [(p, n) for p, n in nodes if isinstance(n, _GramNode)]
    yield from _exponents_everywhere(ref, grams, lab)
    for node in dict.fromkeys(n for _, n in grams):
        for words, new in _gram_slips(node, lab):
            yield from _each_and_every(ref, nodes, node, new, words)
        for p, n in grams:
            if n == node:
                yield from _moved(ref, p, n, nodes, lab)
    if len(grams) > 1:
        outer = [(p, n) for p, n in grams if not any(q != p and p[:len(q)] == q for q, _ in grams)]
        yield "every whitening factor missing", tidy(_replace_paths(ref, {p: Identity(n.shape[0]) for p, n in outer}))
    yield from _terms(ref, nodes, lab)
    yield from _msign_slips(ref, nodes, lab)
    yield from _blocks_swapped(ref, nodes, lab)
    yield from _swaps(ref, namespace)


def _occurrence(k: int, n: int) -> str:
    return "" if n == 1 else f" (occurrence {k} of {n})"


def _each_and_every(ref, nodes, node, new, words):
    """``ref`` with ``new`` in place of ``node``: at each of its occurrences, and at all of them when several."""
    paths = [p for p, m in nodes if m == node]
    for k, p in enumerate(paths, 1):
        yield words + _occurrence(k, len(paths)), tidy(_replace_at(ref, p, new))
    if len(paths) > 1:
        yield f"{words} (at all {len(paths)} occurrences)", tidy(_replace_paths(ref, dict.fromkeys(paths, new)))


def _transposed(ref, nodes, lab):
    square = [n for p, n in nodes if getattr(n, "is_Matrix", False) and p and n.shape[0] == n.shape[1]
              and not isinstance(n, Identity)]
    for n in dict.fromkeys(square):
        t = transpose(n)
        if t != n:
            yield from _each_and_every(ref, nodes, n, t, f"{lab(n)} transposed")


def _gram_root(w, damping, side, p):
    """``(WᵀW + λI)^p`` (right) or ``(WWᵀ + λI)^p`` (left) as the formula language writes it."""
    return matrix_power(GramSqrt(w, damping, side), 2 * p)


def _gram_slips(n, lab):
    """``(words, replacement)`` for a Gram root ``n``: the inverse Gram for its inverse root (and the other
    exponents: its inverse, half or double the exponent), the Gram matrix on the other side, none."""
    w, lam, side, p = n.base, n.damping, n.side, n.exponent
    label = lab(n)
    if isinstance(n, GramInvSqrt):
        inverse = matrix_power(n, 2)
        yield (f"the inverse Gram matrix instead of the inverse square root ({lab(inverse)} in place of {label})",
               inverse)
        yield f"{lab(GramSqrt(w, lam, side))} instead of its inverse {label}", GramSqrt(w, lam, side)
    elif isinstance(n, GramSqrt) and not isinstance(n, GramPower):
        yield f"{label}⁻¹ instead of {label}", GramInvSqrt(w, lam, side)
        yield f"the Gram matrix instead of its square root {label}", matrix_power(n, 2)
    else:
        for q in (-p, 2 * p):
            new = _gram_root(w, lam, side, q)
            yield _exponent_words(new, n, q, lab), new
    half = _gram_root(w, lam, side, p / 2)
    yield _exponent_words(half, n, p / 2, lab), half
    other = _gram_root(w, lam, "left" if side == "right" else "right", p)
    if other.shape == n.shape:
        gram, flipped = (f"{w}.T*{w}", f"{w}*{w}.T") if side == "right" else (f"{w}*{w}.T", f"{w}.T*{w}")
        yield f"the Gram matrix {flipped} in place of {gram} ({lab(other)} in place of {label})", other
    yield f"the whitening {label} missing", Identity(n.shape[0])


def _exponent_words(new, old, q, lab) -> str:
    """``(W_KᵀW_K)^(-1/4) = C_K^(-1/2) in place of C_K^-1 (Gram exponent -1/4 instead of -1/2)``: the root
    written by its name too where the square root has one (``C_K``), as a hand derivation would write it."""
    w, lam, side = old.base, old.damping, old.side
    root = lab(GramSqrt(w, lam, side))
    named = f" = {root}^({2 * q})" if root.isidentifier() and 2 * q not in (1, -1) else ""
    return f"{lab(new)}{named} in place of {lab(old)} (Gram exponent {q} instead of {old.exponent})"


def _exponents_everywhere(ref, grams, lab):
    """Every Gram root of one exponent (``(G Gᵀ)^{-1/4}`` and ``(GᵀG)^{-1/4}``) given another exponent."""
    by_exponent: dict = {}
    for p, n in grams:
        by_exponent.setdefault(n.exponent, []).append((p, n))
    for p, group in by_exponent.items():
        if len({n for _, n in group}) < 2:
            continue
        names = ", ".join(dict.fromkeys(lab(n) for _, n in group))
        for q in (p / 2, 2 * p, -p):
            new = {path: _gram_root(n.base, n.damping, n.side, q) for path, n in group}
            yield f"exponent {q} in place of {p} in every Gram root ({names})", tidy(_replace_paths(ref, new))
    flipped = {p: _gram_root(n.base, n.damping, "left" if n.side == "right" else "right", n.exponent)
               for p, n in grams}
    if len({n for _, n in grams}) > 1 and all(flipped[p].shape == n.shape for p, n in grams):
        names = ", ".join(dict.fromkeys(lab(n) for _, n in grams))
        yield f"every Gram matrix on the other side ({names})", tidy(_replace_paths(ref, flipped))


def _terms(ref, nodes, lab):
    """One term of a sum with its sign flipped, or left out (in sums of up to ``MAX_TERMS`` terms: a longer
    sum is compared term by term by the localisation)."""
    for p, n in nodes:
        if isinstance(n, MatAdd) and len(n.args) <= MAX_TERMS:
            for t in n.args:
                flipped = total(*[product(-1, a) if a is t else a for a in n.args])
                yield f"the sign of the term {lab(t)} flipped", tidy(_replace_at(ref, p, flipped))
                rest = total(*[a for a in n.args if a is not t])
                yield f"the term {lab(t)} missing", tidy(_replace_at(ref, p, rest))


def _msign_slips(ref, nodes, lab):
    """msign of a sum for the sum of msigns (with one coefficient), msign block by block for msign of a
    concatenation, and one msign over a concatenation of msigns."""
    for p, n in nodes:
        if isinstance(n, MatAdd):
            parts = [(t.as_coeff_matrices() if isinstance(t, MatMul) else (S.One, [t])) for t in n.args]
            if all(len(m) == 1 and isinstance(m[0], Msign) for _, m in parts) and len({c for c, _ in parts}) == 1:
                inner = total(*[m[0].arg for _, m in parts])
                new = product(parts[0][0], Msign(inner))
                yield "msign of the sum instead of the sum of msigns", tidy(_replace_at(ref, p, new))
        elif isinstance(n, Msign) and isinstance(n.arg, HStack):
            new = HStack(*[Msign(b) for b in n.arg.args])
            yield (f"msign block by block (per head) instead of one msign over the whole {lab(n.arg)}",
                   tidy(_replace_at(ref, p, new)))
        elif isinstance(n, HStack) and all(isinstance(b, Msign) for b in n.args):
            new = Msign(HStack(*[b.arg for b in n.args]))
            yield "one msign over the concatenation instead of msign block by block", tidy(_replace_at(ref, p, new))


def _blocks_swapped(ref, nodes, lab):
    for p, n in nodes:
        if isinstance(n, (HStack, BlockDiag)):
            for i, j in itertools.combinations(range(len(n.args)), 2):
                a, b = n.args[i], n.args[j]
                if a.shape == b.shape and a != b:
                    blocks = list(n.args)
                    blocks[i], blocks[j] = b, a
                    yield (f"the blocks {lab(a)} and {lab(b)} of {lab(n)} swapped",
                           tidy(_replace_at(ref, p, type(n)(*blocks))))


def _moved(ref, p, n, nodes, lab):
    """The whitening factor ``n`` (at ``p``) removed and placed on the other side of a sub-expression."""
    without = tidy(_replace_at(ref, p, Identity(n.shape[0])))
    flipped = _gram_root(n.base, n.damping, "left" if n.side == "right" else "right", n.exponent)
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
                yield f"the whitening {lab(n)} on the wrong side: {where} {lab(m)}{side}", variant


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



__all__ = ["mutations"]
