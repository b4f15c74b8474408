"""Cross-check a formula derived by hand against the workbench, an identity, or a whole chain.

``python -m derivations.crosscheck DERIVATION FORMULA`` compares a candidate formula with the
result of a derivation (its name as printed in ``--emit text`` headers, e.g. ``halfsplit.query``).

Decision. Both sides are evaluated in mpmath at 50 digits on several random instances (at least
two per size, at several sizes) drawn so that the derivation's side conditions hold (the
structural facts its matrices carry, its definitions such as ``G_Q = G_M W_K``). They are *equal*
when on every instance ``max|a − b| ≤ 1e-30 · max(max|a|, max|b|)`` (entrywise, relative to both
sides, so scaling a pair by any power of ten never changes the verdict; both sides exactly zero
agree, one side exactly zero and the other not never do). A pair that disagrees is evaluated again
on the same instance at 100 digits, and is rounding (equal) only when its difference there agrees to
1e-30 or has shrunk by 25 orders of magnitude: so a true identity whose sides cancel to near zero
is not called different, and a true difference of any scale is. The exact check then runs whatever the
numbers said: the verdict is upgraded to *symbolic* when the two sides agree as rational functions of
explicit small symbolic matrices (:func:`derivations.engine.symbolic.verify_equal`); when both sides are
purely algebraic (products, sums, transposes and inverses of symbols), a disagreement is shown
symbolically, and so is a difference the numbers missed. A numerical check at finite precision cannot see
a difference hidden below the rounding of a larger intermediate (``(B + 10^-60 A) − B`` against ``0`` agree
to 50 digits on every instance); the exact check refutes it, and the verdict is *different* (symbolic), with
a counterexample evaluated at the first of :data:`HIDDEN_DPS` digits that shows the difference.

The parts, one module each: the target (:mod:`~derivations.parsing.targets`), found by name among
the rule modules (:mod:`~derivations.crosscheck.rule_lookup`) and cached
(:mod:`~derivations.crosscheck.target_cache`); the random instances and agreement
(:mod:`~derivations.crosscheck.evaluation`); the symbolic proofs under a time limit
(:mod:`~derivations.crosscheck.symbolic_proofs`); the verdict, its counterexample and its text
(:mod:`~derivations.crosscheck.verdict`, which also describes ``--json``); the diagnosis of a difference
(:mod:`~derivations.crosscheck.diagnosis`) by near variants (:mod:`~derivations.crosscheck.mutations`) or, failing
those, the first differing subexpression (:mod:`~derivations.crosscheck.localise`);
identities with assumptions (:mod:`~derivations.crosscheck.identities`).

Exit status: 0 equal, 1 different, 2 bad input (one line on stderr); a chain has a fourth, 3, not proven
(:mod:`~derivations.crosscheck.chain`).
"""

from __future__ import annotations

import re

from sympy import Basic, Mul, S, cancel, factor, sstr

from derivations.crosscheck.diagnosis import _diagnose
from derivations.crosscheck.evaluation import (
    DPS,
    EQUAL_TOL,
    NotConverged,
    _agree,
    _agree_rechecked,
    _difference,
    _instances,
    _value,
)
from derivations.crosscheck.inputs import BadInput
from derivations.crosscheck.rule_lookup import find_derivation
from derivations.crosscheck.symbolic_proofs import _symbolic_different, _symbolic_status
from derivations.crosscheck.target_cache import load_target, store_target
from derivations.crosscheck.verdict import Verdict, _counterexample, shapes_of, show
from derivations.parsing.formula import Builder
from derivations.parsing.formula_syntax import parse_tree
from derivations.parsing.targets import Target, _preorder, target_of
from derivations.vocabulary.evaluate import free_symbols
from derivations.vocabulary.nodes import (
    GramInvSqrt,
    GramSqrt,
    IsotropicScale,
    Msign,
    NuclearNorm,
    OpNorm,
    PolarFactor,
    Projector,
    RegularizedSylvester,
)


def _algebraic(*exprs) -> bool:
    opaque = (Msign, GramSqrt, GramInvSqrt, PolarFactor, Projector, OpNorm, NuclearNorm, IsotropicScale,
              RegularizedSylvester)
    return not any(isinstance(n, opaque) for e in exprs for n in _preorder(e))


def compare(target: Target, candidate: Basic, *, diagnose: bool = True, seed: int = 0, progress=None) -> Verdict:
    """Decide whether ``candidate`` equals ``target.expr`` (see the module docstring); ``progress``: a bar
    (:func:`foundation.commandline.progress`) counting the values computed on the random instances."""
    ref = target.expr
    ref_shape = tuple(ref.shape) if ref.is_Matrix else None
    cand_shape = tuple(candidate.shape) if getattr(candidate, "is_Matrix", False) else None
    if ref_shape != cand_shape:
        def shape_text(s):
            return "a scalar" if s is None else f"{s[0]}×{s[1]}"
        raise BadInput(f"the candidate is {shape_text(cand_shape)} but {target.name} is {shape_text(ref_shape)}")
    if ref_shape is None and not free_symbols(ref, candidate):  # counts in the shape symbols: exact algebra
        return _compare_in_dimensions(target, ref, candidate)
    insts = _instances(target, [ref, candidate], seed)
    pairs = _evaluated(ref, candidate, insts, progress)
    if len(pairs) < 2:
        raise BadInput(f"{target.name} could not be evaluated on two random instances")
    shown = {"reference": show(ref, target.namespace), "candidate": show(candidate, target.namespace),
             "shapes": shapes_of([ref, candidate], [inst.sizes for inst, _, _ in pairs]),
             "skipped": len(insts) - len(pairs)}
    disagree = sorted((p for p in pairs if not _agree(p[1], p[2], EQUAL_TOL)), key=lambda p: sum(p[0].sizes.values()))
    # the smallest disagreeing instance that is not rounding is the counterexample (one suffices)
    bad = next(([p] for p in disagree if not _agree_rechecked(ref, candidate, *p)), [])
    out = Verdict("equal", "numeric", len(pairs), **shown)
    if not bad:
        # the exact check runs on an agreement too: a difference below the rounding of the evaluation
        # ((B + 10^-60 A) − B against 0) agrees on every instance and is refuted exactly
        status = _symbolic_status(ref, candidate, target) if target.symbolic_dims else "not modelled"
        if status == "verified":
            out.method, out.sizes = "symbolic", _sizes(target)
        elif status == "refuted" and _algebraic(ref, candidate, *target.definitions.values()):
            return _hidden_difference(out, ref, candidate, target, pairs)
        out.scale = "1"
        return out
    out.verdict = "different"
    if (_algebraic(ref, candidate, *target.definitions.values()) and target.symbolic_dims
            and _symbolic_different(ref, candidate, target)):
        out.method, out.sizes = "symbolic", _sizes(target)
    out.counterexample = _counterexample(bad, ref, candidate, target)
    if diagnose:
        out.scale, out.diagnosis = _diagnose(target, ref, candidate, pairs)
    if not out.diagnosis:
        out.diagnosis = ["no scalar multiple and none of the near variants of the derived result matches"]
    return out


#: precisions at which the counterexample of a difference hidden below rounding is looked for
HIDDEN_DPS = (2 * DPS, 4 * DPS, 8 * DPS, 16 * DPS)


def _hidden_difference(out: Verdict, ref, candidate, target: Target, pairs) -> Verdict:
    """``out`` made *different* (symbolic): the two sides agree on every instance to the tolerance at ``DPS``
    digits but differ exactly as rational functions. The counterexample is the first instance (smallest sizes
    first) whose two values, evaluated again at each precision of :data:`HIDDEN_DPS`, differ by more than that
    precision's rounding (``10^(20 − dps)`` relative, as :data:`EQUAL_TOL` at ``DPS``)."""
    out.verdict, out.method, out.sizes, out.scale = "different", "symbolic", _sizes(target), None
    at = ", ".join(f"{k} = {n}" for k, n in out.sizes.items())
    out.diagnosis = [f"the two sides differ exactly (as rational functions of the entries at {at}), "
                     f"by less than the rounding of the {DPS}-digit evaluation on every random instance"]
    for dps in HIDDEN_DPS:
        for inst, _, _ in sorted(pairs, key=lambda p: sum(p[0].sizes.values())):
            a, b = _value(ref, inst, True, dps), _value(candidate, inst, True, dps)
            if a is None or b is None:
                continue
            diff, scale = _difference(a, b)
            if diff > 10.0 ** (20 - dps) * scale:
                out.counterexample = _counterexample([(inst, a, b)], ref, candidate, target)
                out.diagnosis.append(f"the counterexample shows it evaluated at {dps} digits")
                return out
    out.diagnosis.append(f"no instance shows it at up to {HIDDEN_DPS[-1]} digits")
    return out


def _sizes(target: Target) -> dict:
    """The sizes of the explicit symbolic matrices a symbolic verdict on ``target`` is shown at."""
    return {str(k): int(n) for k, n in target.symbolic_dims.items()}


def _compare_in_dimensions(target: Target, ref, candidate) -> Verdict:
    """Two scalar expressions in the dimension symbols only (flop and parameter counts, rank bounds): equal
    when their difference simplifies to zero; otherwise the first of the target's sizes where they differ."""
    out = Verdict("equal", "symbolic", 0, "1", reference=show(ref), candidate=show(candidate))
    if cancel(ref - candidate) == 0:
        return out
    out.verdict, out.scale = "different", None
    out.diagnosis = _count_diagnosis(ref, candidate)
    if out.diagnosis[0].startswith("the candidate is ") and " × " in out.diagnosis[0]:
        out.scale = out.diagnosis[0].removeprefix("the candidate is ").split(" × ")[0]
    dims = sorted(ref.free_symbols | candidate.free_symbols, key=str)
    for sizes in [*target.sizes, *({s: k for s in dims} for k in range(2, 9))]:
        a, b = S(ref.xreplace(sizes)), S(candidate.xreplace(sizes))  # a bare symbol becomes a Python int
        if a.is_number and b.is_number and a != b:
            out.counterexample = {"sizes": {str(k): int(v) for k, v in sizes.items() if k in dims}, "inputs": {},
                                  "defined": {}, "derived": float(a), "candidate": float(b)}
            break
    return out



def _monomial(expr) -> bool:
    """A number times a product of powers of symbols (``2``, ``r``, ``d_in^-1``, ``2 r^2 / d``)."""
    return all(f.as_base_exp()[0].is_Symbol or f.is_number for f in Mul.make_args(expr))


def _count_diagnosis(ref, candidate) -> list:
    """What a count or bound in the dimension symbols gets wrong: a multiple of it (a number or a monomial in
    the sizes, ``r ×``), or the terms it adds or lacks (``the candidate is the derived result + r*d_in``)."""
    ratio = cancel(candidate / ref) if ref != 0 else None
    if ratio is not None and ratio != 0 and _monomial(ratio):
        return [f"the candidate is {sstr(ratio)} × the derived result"]
    extra = factor(candidate - ref)
    if ref == 0:
        return [f"the derived result is 0 and the candidate is {sstr(candidate)}"]
    minus = extra.could_extract_minus_sign()
    words = [f"the candidate is the derived result {'-' if minus else '+'} {sstr(-extra if minus else extra)}"]
    if ratio is not None and ratio != 0:
        words.append(f"candidate / derived = {sstr(ratio)}, not a constant")
    return words


# ---- candidates from text ---------------------------------------------------------------------
_LHS = re.compile(r"^\s*(?:[A-Za-z][A-Za-z0-9_]*\s*\*?\s*=|=|optimal value\s*=)\s*")


def candidate_text(text: str) -> str:
    """A formula as the user copied it: a leading ``dW_Q* =`` or ``=`` is dropped (not a definition ``L = …;``)."""
    return text if ";" in text else _LHS.sub("", text, count=1)


def parse_for(target: Target, text: str):
    """``text`` parsed with the names of ``target``."""
    return Builder(target.namespace).build_like(parse_tree(candidate_text(text)), target.expr)  # a lone I or 0


def _evaluated(ref, candidate, insts, progress=None) -> list:
    """``(instance, reference value, candidate value)`` for each instance where both could be evaluated (an SVD
    that did not converge, or a value that is not defined there, says nothing either way: skipped, and counted in
    ``Verdict.skipped``); ``progress`` counts the values, two per instance (at 64×64 one takes tens of seconds)."""
    def value(expr, inst):
        out = _value(expr, inst, True, strict=True)
        if progress is not None:
            progress.update(1)
        return out

    if progress is not None:
        progress.reset(total=2 * len(insts))
    pairs = []
    for inst in insts:
        try:
            a, b = value(ref, inst), value(candidate, inst)
        except NotConverged:
            continue
        if a is not None:
            pairs.append((inst, a, b))
    return pairs


def check_derivation(name: str, formula: str, use_cache: bool = True, progress=None) -> Verdict:
    """The verdict on a hand-derived ``formula`` for the derivation called ``name`` (``halfsplit.query``).

    What ``python -m derivations.crosscheck NAME FORMULA`` decides (the module docstring says how); the
    derivation's target is cached (:mod:`~derivations.crosscheck.target_cache`) unless ``use_cache`` is
    false; ``progress``: :func:`compare`'s. Raises :class:`~derivations.crosscheck.inputs.BadInput` for an unknown
    name and
    :class:`~derivations.parsing.formula_tokens.FormulaError` (a ``ValueError`` naming the column) for a
    formula that does not parse or whose shapes do not fit.

    Examples:
      >>> from derivations.crosscheck.checker import check_derivation
      >>> verdict = check_derivation("halfsplit.query", "-(eps/2) msign(G_Q C_K^-1) C_K^-1")
      >>> verdict.verdict, verdict.method
      ('equal', 'symbolic')
      >>> slip = check_derivation("halfsplit.query", "-(eps/2) msign(G_Q C_K^-1) C_K")
      >>> slip.verdict
      'different'
      >>> print(slip.diagnosis[0])
      the candidate equals the derived result with C_K instead of its inverse C_K^-1 (occurrence 2 of 2): ...
    """
    target = load_target(name) if use_cache else None
    if target is None:
        der, module = find_derivation(name, use_cache)
        target = target_of(der, module)
        if use_cache:
            store_target(target)
    return compare(target, parse_for(target, formula), progress=progress)


__all__ = ["candidate_text", "check_derivation", "compare", "parse_for"]
