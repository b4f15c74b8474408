"""Diagnosis of a difference, in three stages, each stated only when it holds at the comparison's precision:

1. the candidate compared with ``c ×`` the derived result (a constant ``c``, or ``c`` times a power of a
   scalar symbol or scalar node: the classic ``ε`` against ``ε/2``, ``c_K^-2`` against ``c_K^-1``);
2. the near variants of the derived expression (:func:`derivations.crosscheck.mutations.mutations`: the
   usual slips, at each occurrence and at every occurrence), and then the same slips made on the
   candidate (a variant of the candidate equal to the derived result names the slip from the other side:
   Shampoo written with exponent ``-1/2`` where the derivation starts from ``-1/4``);
3. otherwise the first differing subexpression (:func:`derivations.crosscheck.localise.localise`), with
   its scale, transpose or exponent where one fits, else a counterexample of just that subexpression.

The diagnosis explains a verdict; it never changes one (``EQUAL``/``DIFFERENT`` are decided before it runs).
"""

from __future__ import annotations

import mpmath
from sympy import MatrixExpr, Symbol

from derivations.crosscheck.evaluation import EQUAL_TOL, _agree, _ratio, _same, _value
from derivations.crosscheck.localise import localise
from derivations.crosscheck.mutations import mutations
from derivations.crosscheck.relations import (
    SCALE_TOL,
    SCREEN_TOL,
    Values,
    constant_scale,
    needs_mp,
    power_note,
    scalar_nodes,
)
from derivations.crosscheck.verdict import show
from derivations.vocabulary.evaluate import free_symbols

MAX_SENTENCES = 4


def _scale_sentence(scale: str, ref) -> str:
    words = f"the candidate is {scale} × the derived result"
    if scale == "-1":
        return words + ": the sign is flipped"
    if scale == "2" and any(str(s) == "epsilon" for s in ref.free_symbols):
        return words + " (ε where the derivation has ε/2: the budget is not split between the two halves)"
    if scale == "1/2" and any(str(s) == "epsilon" for s in ref.free_symbols):
        return words + " (ε/2 where the derivation has ε: the budget is halved twice)"
    return words


def _whole_sides(ref, cand, scalars) -> set:
    """The scalar nodes that are a whole side up to a constant (a scalar-valued step: ``⟨G_M W_Q, ΔW_K⟩``):
    ``cand / ref`` is always a monomial in those two, so a scale through them would say nothing."""
    if isinstance(ref, MatrixExpr) or isinstance(cand, MatrixExpr):
        return set()
    return {s for s in scalars if not isinstance(s, Symbol) and ((ref / s).is_number or (cand / s).is_number)}


def _diagnose(target, ref, cand, pairs):
    """``(scale, sentences)`` for a candidate that differs from ``ref``; ``pairs`` are ``(instance, derived
    value, candidate value)`` at DPS digits."""
    # a scale may be a scalar of either side: ``c msign(A)`` against ``msign(A)`` is ``c^-1 ×``, and
    # ``msign(A)`` against ``c msign(A)`` is ``c ×`` the derived result
    scalars = {s for s in free_symbols(ref, cand) if isinstance(s, Symbol)} | scalar_nodes(ref, cand)
    scalars -= _whole_sides(ref, cand, scalars)
    found = constant_scale(pairs, scalars)
    sentences, scale = [], None
    if found is not None:
        scale = found[0]
        sentences.append(_scale_sentence(scale, ref))
        note = power_note(found[1], ref)
        if note:
            sentences.append(note)
    # screened in float64 (at DPS digits when a value is out of float64's comfortable range, where float64
    # would flush it to zero or infinity), confirmed at DPS digits
    values = Values([inst for inst, _, _ in pairs], needs_mp([v for _, a, b in pairs for v in (a, b)]))
    values.know(ref, [a for _, a, _ in pairs])
    values.know(cand, [b for _, _, b in pairs])
    forward = _forward(target, ref, cand, values, scalars, scale)
    sentences += forward
    if scale is None and not forward:
        sentences += _reverse(target, ref, cand, values) or localise(target, ref, cand, values, scalars)
    return scale, sentences[:MAX_SENTENCES]


def _forward(target, ref, cand, values: Values, scalars, scale) -> list:
    """The near variants of the derived result that the candidate equals (first), or is a constant multiple of."""
    out, multiples, seen = [], [], set()
    shape = tuple(getattr(ref, "shape", ()))
    for description, variant in mutations(ref, target.namespace):
        if tuple(getattr(variant, "shape", ())) != shape or variant in seen:
            continue
        seen.add(variant)
        if scale == "-1" and description == "the sign flipped":
            continue
        if variant == cand:
            out.append(f"the candidate equals the derived result with {description}: {show(variant, target.namespace)}")
        else:
            hit = _matches(variant, values.screen(cand), values, values.mp)
            if hit is None:
                continue
            confirm = values.pairs(variant, cand)
            if any(v is None or c is None for _, v, c in confirm):
                continue
            if hit == "1":
                if not all(_agree(v, c, EQUAL_TOL) for _, v, c in confirm):
                    continue
                out.append(f"the candidate equals the derived result with {description}: "
                           f"{show(variant, target.namespace)}")
            else:
                sc = constant_scale(confirm, scalars)
                if sc is None or scale is not None:
                    continue
                multiples.append(f"the candidate equals {sc[0]} × the derived result with {description}")
        if len(out) >= MAX_SENTENCES:
            break
    return list(dict.fromkeys(out or multiples))


def _reverse(target, ref, cand, values: Values) -> list:
    """The same slips made on the candidate: a variant of the candidate that equals the derived result."""
    out, seen = [], set()
    shape = tuple(getattr(ref, "shape", ()))
    for description, variant in mutations(cand, target.namespace):
        if description == "the sign flipped" or tuple(getattr(variant, "shape", ())) != shape or variant in seen:
            continue
        seen.add(variant)
        if variant == ref or (_matches(variant, values.screen(ref), values, values.mp) == "1"
                              and all(_agree(v, a, EQUAL_TOL) for _, a, v in values.pairs(ref, variant))):
            sentence = f"the candidate with {description} equals the derived result: {show(variant, target.namespace)}"
            if sentence not in out:
                out.append(sentence)
            if len(out) >= 2:
                break
    return out


def _matches(variant, ref_vals, values: Values, mp=False):
    """"1" when ``variant`` equals the values ``ref_vals`` to ``SCREEN_TOL`` relative (in float64, or at DPS
    digits with ``mp``) on every instance, "c" when they are a nonzero constant multiple of it."""
    ratios = []
    for inst, c in zip(values.insts, ref_vals, strict=False):
        v = _value(variant, inst, mp)
        if v is None or c is None:
            return None
        if _agree(v, c, SCREEN_TOL):
            ratios.append(mpmath.mpf(1))
            continue
        r, res = _ratio(c, v)
        if r is None or res > SCREEN_TOL:
            return None
        ratios.append(r)
    if all(r == 1 for r in ratios):
        return "1"
    if _same(ratios, SCREEN_TOL) and ratios[0] != 0:
        return "c"
    return None


__all__ = ["SCALE_TOL", "SCREEN_TOL"]
