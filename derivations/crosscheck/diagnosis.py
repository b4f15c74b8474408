"""Diagnosis of a difference: the candidate compared with ``c ×`` the derived result (a constant ``c``,
or ``c`` times a power of a scalar symbol: the classic ``ε`` against ``ε/2``) and with the near
variants of the derived expression (:func:`derivations.crosscheck.mutations.mutations`)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import mpmath
from sympy import Symbol

from derivations.crosscheck.evaluation import (
    DPS,
    EQUAL_TOL,
    _agree,
    _in_float_range,
    _ratio,
    _same,
    _value,
)
from derivations.crosscheck.mutations import mutations
from derivations.crosscheck.verdict import show
from derivations.engine.evaluate import free_symbols

SCALE_TOL = 10.0 ** (25 - DPS)  # relative spread of the ratios candidate / derived for a constant multiple
SCREEN_TOL = 1e-8  # relative, float64 screening of near variants


def _nice(c) -> str:
    """``c`` as a small fraction when it is one to ``SCALE_TOL`` relative, else in 12 digits."""
    if c == 0:
        return "0"
    frac = Fraction(str(mpmath.nstr(c, 40))).limit_denominator(1000)
    with mpmath.workdps(DPS):  # 1001/1000 is not a binary fraction: compare at DPS digits, not 15
        near = abs(c - mpmath.mpf(frac.numerator) / frac.denominator) <= SCALE_TOL * abs(c)
    if frac != 0 and abs(frac.numerator) < 10 ** 6 and near:
        return str(frac.numerator) if frac.denominator == 1 else f"{frac.numerator}/{frac.denominator}"
    return mpmath.nstr(c, 12)


def _constant_scale(pairs, scalars):
    """``(text, note)`` when ``cand = c · ref`` for a constant or ``c·s^k`` (``s`` a scalar symbol)."""
    ratios = []
    for inst, a, b in pairs:
        if b is None:
            return None
        c, res = _ratio(b, a)
        if c is None or res > SCALE_TOL:
            return None
        ratios.append((inst, c))
    if not ratios:
        return None
    if _same([c for _, c in ratios], SCALE_TOL):
        return _nice(ratios[0][1]), ""
    for sym, k in itertools.product(sorted(scalars, key=str), (1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2))):
        if any(sym not in inst.envmp for inst, _ in ratios):
            continue
        with mpmath.workdps(DPS):  # the ratios are good to DPS digits: divide at DPS digits too
            vals = [c / mpmath.power(inst.envmp[sym], mpmath.mpf(k.numerator) / k.denominator
                                     if isinstance(k, Fraction) else k) for inst, c in ratios]
            same = _same(vals, SCALE_TOL) and vals[0] != 0
        if same:
            coeff = _nice(vals[0])
            power = str(sym) if k == 1 else f"{sym}^{k}"
            return (power if coeff == "1" else f"{coeff}*{power}"), ""
    return None


def _scale_sentence(scale: str, ref) -> str:
    words = f"the candidate is {scale} × the derived result"
    if scale == "-1":
        return words + ": the sign is flipped"
    if scale == "2" and any(str(s) == "epsilon" for s in ref.free_symbols):
        return words + " (ε where the derivation has ε/2: the budget is not split between the two halves)"
    if scale == "1/2" and any(str(s) == "epsilon" for s in ref.free_symbols):
        return words + " (ε/2 where the derivation has ε: the budget is halved twice)"
    return words


def _diagnose(target, ref, cand, pairs):
    # a scale may be a scalar of either side: ``c msign(A)`` against ``msign(A)`` is ``c^-1 ×``, and
    # ``msign(A)`` against ``c msign(A)`` is ``c ×`` the derived result
    scalars = {s for s in free_symbols(ref, cand) if isinstance(s, Symbol)}
    found = _constant_scale(pairs, scalars)
    sentences, scale = [], None
    if found is not None:
        scale = found[0]
        sentences.append(_scale_sentence(scale, ref))
    # near variants: screened in float64 (at DPS digits when a value is out of float64's comfortable
    # range, where float64 would flush it to zero or infinity), confirmed at DPS digits
    insts = [inst for inst, _, _ in pairs]
    mp_screen = not all(_in_float_range(v) for _, a, b in pairs for v in (a, b))
    cand_vals = [b if mp_screen else _value(cand, inst, False) for inst, _, b in pairs]
    for description, variant in mutations(ref, target.namespace):
        if tuple(getattr(variant, "shape", ())) != tuple(getattr(ref, "shape", ())):
            continue
        hit = _matches(variant, cand_vals, insts, mp_screen)
        if hit is None:
            continue
        factor = hit
        confirm = [(inst, _value(variant, inst, True), _value(cand, inst, True)) for inst in insts[:3]]
        if any(v is None or c is None for _, v, c in confirm):
            continue
        if factor == "1":
            if scale == "-1" and description == "the sign flipped":
                continue
            if not all(_agree(v, c, EQUAL_TOL) for _, v, c in confirm):
                continue
            sentences.append(f"the candidate equals the derived result with {description}: "
                             f"{show(variant, target.namespace)}")
        else:
            sc = _constant_scale(confirm, scalars)
            if sc is None or scale is not None:
                continue
            sentences.append(f"the candidate equals {sc[0]} × the derived result with {description}")
        if len(sentences) >= 4:
            break
    return scale, sentences



def _matches(variant, cand_vals, insts, mp=False):
    """"1" when the candidate equals ``variant`` to ``SCREEN_TOL`` relative (in float64, or at DPS digits
    with ``mp``), "c" when it is a nonzero constant multiple of it."""
    ratios = []
    for inst, c in zip(insts, cand_vals, strict=False):
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
