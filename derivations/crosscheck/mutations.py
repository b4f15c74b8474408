"""Near variants of a derived expression, the usual slips of a hand derivation: the sign flipped, a
square sub-expression transposed, the inverse of the Gram matrix instead of its inverse square root
(and the root instead of its inverse), a whitening factor missing, a whitening factor moved to the
other side, and Q and K swapped (everywhere, in the partner only, in the gradient only)."""

from __future__ import annotations

from sympy import Basic, sstr
from sympy.matrices.expressions import Identity, MatMul, MatrixSymbol

from derivations.crosscheck.formula import matrix_power
from derivations.engine.algebra import product, tidy, transpose
from derivations.engine.vocabulary import (
    GramInvSqrt,
    GramPower,
    GramSqrt,
    IsotropicScale,
    PolarFactor,
    Projector,
    _Derived,
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
            words = (f"the inverse Gram matrix instead of the inverse square root "
                     f"({_label(inverse)} in place of {label})")
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



__all__ = ["mutations"]
