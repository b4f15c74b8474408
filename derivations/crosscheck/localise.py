"""Where a wrong candidate first differs from the derived result, and how.

Used when neither a scale nor a near variant explains a difference (:mod:`derivations.crosscheck.diagnosis`).
The two expressions are walked together from the top, each subexpression of the candidate evaluated
against its counterpart in the derived result on the same instances:

* products are aligned by their longest agreeing prefix and suffix (as products, so ``G_M W_K`` lines up
  with ``G_Q = G_M W_K``); what is left in the middle is compared, with the target's definitions
  (``G_K = G_Mᵀ W_Q``) written out when the middles don't line up as they are written;
* sums are matched term by term (a product with a sum inside is multiplied out first);
* the same function on both sides (``msign``, a transpose, a Gram root) is compared inside;
* block matrices (``[A | B]``, ``blockdiag(A, B)``) block by block, and blocks in another order are named.

The first subexpression that differs is named with its counterpart and, where one fits, how it differs
(:func:`derivations.crosscheck.relations.relation`: a multiple, the transpose, a power), else with a
counterexample of just that subexpression on the smallest instance. When replacing it (at every
occurrence) by its counterpart makes the candidate equal to the derived result, the sentence says that
this is the only difference. A candidate that cannot be evaluated is localised to the smallest
subexpression that cannot be (a singular Gram matrix, an inverse of a singular matrix) and the reason.

Every statement is checked at the comparison's precision (:class:`~derivations.crosscheck.relations.Values`);
the diagnosis only explains a verdict, it never changes one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mpmath
from sympy import Basic, S
from sympy.matrices.expressions import Inverse, MatAdd, MatMul, MatrixSymbol, Transpose

from derivations.crosscheck.evaluation import _flat, _value
from derivations.crosscheck.relations import Values, relation
from derivations.crosscheck.verdict import show
from derivations.parsing.targets import _preorder
from derivations.vocabulary.algebra import product, rewrite_adjacent, tidy, transpose
from derivations.vocabulary.nodes import BlockDiag, HStack, MatrixFunction, _Derived, _GramNode

MAX_DEPTH = 12  # nesting levels followed (deeper formulas are named at this level)
SHIFT = 4  # aligned prefixes and suffixes of two products differ in length by at most this many factors
MAX_PAIRS = 64  # unmatched terms of two sums are related pairwise only up to this many pairs
MAX_TERMS = 96  # a product of sums is multiplied out only up to this many terms
MAX_SENTENCES = 4


@dataclass
class Finding:
    """The candidate's ``c`` where the derived result has ``r`` (None for an extra or a missing part)."""

    c: Basic | None
    r: Basic | None
    how: str | None = None
    kind: str = "part"  # "part", "term", "factor", "coefficient"
    note: str = ""
    more: list = field(default_factory=list)


@dataclass
class _Search:
    target: object
    values: Values
    scalars: set

    def show(self, e) -> str:
        return show(e, self.target.namespace)


def localise(target, ref, cand, values: Values, scalars) -> list[str]:
    """Sentences naming the first difference of ``cand`` from ``ref`` (see the module docstring)."""
    s = _Search(target, values, scalars)
    undefined = next((i for i, v in enumerate(values.exact(cand)) if v is None), None)
    if undefined is not None:
        return [_undefined(s, ref, cand, values.insts[undefined])]
    found = _first(s, ref, cand, 0)
    sentences = [_sentence(s, found, ref, cand, first=True)]
    sentences += [_sentence(s, f, ref, cand, first=False) for f in found.more]
    return sentences[:MAX_SENTENCES]


# ---- the walk ------------------------------------------------------------------------------------------
def _first(s: _Search, r, c, depth: int) -> Finding:
    how = relation(s.values, r, c, s.scalars)
    if how is not None or depth > MAX_DEPTH:
        return Finding(c, r, how)
    er, ec = _written_out(s, r), _written_out(s, c)
    if (er, ec) != (r, c):  # R where the candidate writes X Xᵀ: related once the definition is written out
        how = relation(s.values, er, ec, s.scalars)
        if how is not None:
            return Finding(c, r, how, note=_definitions_note(s, r, c))
    if isinstance(r, MatAdd) or isinstance(c, MatAdd):
        found = _in_sums(s, r, c, depth)
    elif isinstance(r, MatMul) or isinstance(c, MatMul):
        found = _in_products(s, r, c, depth)
    else:
        found = _in_same_head(s, r, c, depth)
    return found if found is not None else Finding(c, r, None)


def _terms(e) -> list:
    """The terms of ``e`` with every sum inside a product multiplied out (``e`` itself when that would make
    more than ``MAX_TERMS`` terms)."""
    out = _expanded(e)
    return out if len(out) <= MAX_TERMS else [e]


def _expanded(e) -> list:
    if isinstance(e, MatAdd):
        out = []
        for a in e.args:
            out += _expanded(a)
            if len(out) > MAX_TERMS:
                break
        return out
    if isinstance(e, MatMul):
        coeff, mats = e.as_coeff_matrices()
        for i, m in enumerate(mats):
            if isinstance(m, MatAdd):
                out = []
                for term in m.args:
                    out += _expanded(product(coeff, *mats[:i], term, *mats[i + 1:]))
                    if len(out) > MAX_TERMS:
                        break
                return out
    return [e]


def _factors(e) -> tuple:
    if isinstance(e, MatMul):
        coeff, mats = e.as_coeff_matrices()
        return coeff, list(mats)
    return S.One, [e]


def _in_sums(s: _Search, r, c, depth: int) -> Finding | None:
    rt, ct = _terms(r), _terms(c)
    if len(rt) == 1 and len(ct) == 1:
        return None
    left_r, left_c = list(rt), []
    for t in ct:
        twin = next((u for u in left_r if u.shape == t.shape and s.values.screened_same(u, t)), None)
        if twin is None:
            left_c.append(t)
        else:
            left_r.remove(twin)
    findings = []
    for t in list(left_c):  # a term with the coefficient of one derived term (b_0 with b_0): compared inside
        coeff = _factors(t)[0]
        same = [u for u in left_r if coeff != 1 and _factors(u)[0] == coeff and u.shape == t.shape]
        if same:
            u = max(same, key=lambda u: len(_names(u) & _names(t)))
            findings.append(_as_term(_first(s, u, t, depth + 1), t))
            left_c.remove(t)
            left_r.remove(u)
    for t in list(left_c) if len(left_c) * len(left_r) <= MAX_PAIRS else ():  # a multiple (transpose, power)
        for u in left_r:
            how = relation(s.values, u, t, s.scalars)
            if how is not None:
                findings.append(Finding(t, u, how, kind="term"))
                left_c.remove(t)
                left_r.remove(u)
                break
    for t in list(left_c):  # a term that shares its names with a derived term: compared inside
        u = max(left_r, key=lambda u: len(_names(u) & _names(t)), default=None)
        if u is not None and u.shape == t.shape and _names(u) & _names(t):
            findings.append(_as_term(_first(s, u, t, depth + 1), t))
            left_c.remove(t)
            left_r.remove(u)
    findings += [Finding(t, None, kind="term") for t in left_c] + [Finding(None, u, kind="term") for u in left_r]
    if not findings:
        return None
    findings[0].more = findings[1:] + findings[0].more
    return findings[0]


def _as_term(found: Finding, t) -> Finding:
    """``found`` said of the whole term ``t`` when it is about ``t`` itself."""
    if found.c is t:
        found.kind = "term"
    return found


def _names(e) -> set:
    return {str(m) for m in e.atoms(MatrixSymbol)}


def _in_products(s: _Search, r, c, depth: int) -> Finding | None:
    rc, rf = _factors(r)
    cc, cf = _factors(c)
    if len(rf) == 1 and len(cf) == 1:  # the same matrix part, or one part each: coefficient or inside
        if s.values.screened_same(rf[0], cf[0]):
            return Finding(cc, rc, relation(s.values, rc, cc, s.scalars), kind="coefficient")
        return _with_coefficient(_first(s, rf[0], cf[0], depth + 1), rc, cc)
    i, j = _prefix(s, rf, cf)
    k, m = _suffix(s, rf[j:], cf[i:])
    mr, mc = rf[j:len(rf) - m], cf[i:len(cf) - k]
    if not mr and not mc:
        return Finding(cc, rc, None, kind="coefficient")
    if not mr or not mc:  # one side has factors the other lacks: said with the products they sit in
        extra = Finding(product(*mc) if mc else None, product(*mr) if mr else None, kind="factor")
        if s.values.same(product(*rf[:j], *rf[len(rf) - m:]), product(*cf[:i], *cf[len(cf) - k:])):
            extra.note = (f" (the candidate's {s.show(product(*cf))} is the derived result's "
                          f"{s.show(product(*rf))} {'with it inserted' if mc else 'without it'})")
        return _with_coefficient(extra, rc, cc)
    sub_r, sub_c = product(*mr), product(*mc)
    if len(mr) == 1 and len(mc) == 1:
        return _with_coefficient(_first(s, sub_r, sub_c, depth + 1), rc, cc)
    return _with_coefficient(_in_middles(s, mr, mc, depth), rc, cc)


def _in_middles(s: _Search, mr, mc, depth: int) -> Finding:
    """The differing middles of two products: related as a whole, one the other wrapped in a function
    (``msign`` left out), pairwise where the factors are of one kind (``msign`` against ``msign``), or
    with the target's definitions written out (``G_K`` against ``G_M W_Q``)."""
    sub_r, sub_c = product(*mr), product(*mc)
    how = relation(s.values, sub_r, sub_c, s.scalars) or _wrapped(s, sub_r, sub_c)
    if how is not None:
        return Finding(sub_c, sub_r, how)
    if sorted(mr, key=str) == sorted(mc, key=str):
        return Finding(sub_c, sub_r, "its factors in another order")
    if len(mr) == len(mc):
        pair = next(((a, b) for a, b in zip(mr, mc, strict=True) if not s.values.screened_same(a, b)), None)
        if (pair is not None and type(pair[0]) is type(pair[1]) and pair[0].shape == pair[1].shape
                and not isinstance(pair[0], MatrixSymbol)):
            return _first(s, *pair, depth + 1)
    er, ec = _written_out(s, sub_r), _written_out(s, sub_c)
    if (er, ec) != (sub_r, sub_c):
        found = _first(s, er, ec, depth + 1)
        found.note += _definitions_note(s, sub_r, sub_c)
        return found
    return Finding(sub_c, sub_r, None)


def _wrapped(s: _Search, r, c) -> str | None:
    """``"msign left out"`` when ``r = f(c)``, ``"an extra msign"`` when ``c = f(r)`` (``f`` a matrix function)."""
    if isinstance(r, MatrixFunction) and r.arg.shape == c.shape and s.values.same(r.arg, c):
        return f"{_function_name(r)} left out"
    if isinstance(c, MatrixFunction) and c.arg.shape == r.shape and s.values.same(c.arg, r):
        return f"an extra {_function_name(c)}"
    return None


def _function_name(e) -> str:
    return type(e).__name__.lower()


def _with_coefficient(found: Finding, rc, cc) -> Finding:
    if rc != cc:
        found.more.append(Finding(cc, rc, None, kind="coefficient"))
    return found


def _prefix(s: _Search, rf, cf) -> tuple:
    """The longest prefixes (as products) of ``cf`` and ``rf`` that agree: ``(len in cf, len in rf)``; their
    lengths differ by at most ``SHIFT`` factors (a definition written out: ``G_M W_K`` for ``G_Q``)."""
    for i in range(len(cf), 0, -1):
        pc = product(*cf[:i])
        for j in range(min(len(rf), i + SHIFT), max(0, i - SHIFT), -1):
            pr = product(*rf[:j])
            if pr.shape == pc.shape and s.values.screened_same(pr, pc):
                return i, j
    return 0, 0


def _suffix(s: _Search, rf, cf) -> tuple:
    k, m = _prefix(s, [transpose(f) for f in reversed(rf)], [transpose(f) for f in reversed(cf)])
    return k, m


def _definitions_note(s: _Search, *exprs) -> str:
    names = set().union(*(e.free_symbols for e in exprs))
    defs = [f"{s.show(k)} = {s.show(v)}" for k, v in s.target.definitions.items() if k in names]
    return f" (with {', '.join(defs)} written out)" if defs else ""


def _written_out(s: _Search, e):
    defs = {k: v for k, v in s.target.definitions.items() if k in e.free_symbols}
    return tidy(e.xreplace(defs)) if defs else e


def _in_same_head(s: _Search, r, c, depth: int) -> Finding | None:
    if type(r) is not type(c):
        return None
    if isinstance(r, (HStack, BlockDiag)) and len(r.args) == len(c.args):
        return _in_blocks(s, r, c, depth)
    if isinstance(r, (MatrixFunction, Transpose, Inverse)) and r.args[0].shape == c.args[0].shape:
        return _first(s, r.args[0], c.args[0], depth + 1)
    if not isinstance(r, _GramNode):
        return None
    if r.base == c.base and r.side == c.side and r.exponent == c.exponent and r.damping != c.damping:
        return Finding(c, r, f"the damping {s.show(c.damping)} where the derived result has {s.show(r.damping)}")
    if (r.args[1:] == c.args[1:] and r.base.shape == c.base.shape
            and not (isinstance(r.base, MatrixSymbol) and isinstance(c.base, MatrixSymbol))):
        return _first(s, r.base, c.base, depth + 1)  # C_[A B] against C_[A Bᵀ]: compared inside
    return None


def _in_blocks(s: _Search, r, c, depth: int) -> Finding | None:
    rb, cb = list(r.args), list(c.args)
    order = []
    for b in cb:
        twin = next((i for i, a in enumerate(rb) if i not in order and a.shape == b.shape
                     and s.values.screened_same(a, b)), None)
        order.append(twin)
    if None not in order and order != sorted(order):
        words = ("its blocks swapped" if len(order) == 2
                 else f"its blocks in the order {', '.join(str(i + 1) for i in order)}")
        return Finding(c, r, words)
    pair = next(((a, b) for a, b in zip(rb, cb, strict=True)
                 if a.shape == b.shape and not s.values.screened_same(a, b)), None)
    return None if pair is None else _first(s, *pair, depth + 1)


# ---- sentences -------------------------------------------------------------------------------------------
def _sentence(s: _Search, f: Finding, ref, cand, first: bool) -> str:
    head = "first difference: " if first else "also: "
    if f.kind == "coefficient":
        how = f": {f.how}" if f.how else ""
        return f"{head}the coefficient {s.show(f.c)} where the derived result has {s.show(f.r)}{how}"
    what = "term" if f.kind == "term" else "factor" if f.kind == "factor" else "part"
    if f.r is None:
        extra = "an extra factor" if f.kind == "factor" else f"the candidate's {what}"
        return f"{head}{extra} {s.show(f.c)}{f.note or ' has no counterpart in the derived result'}"
    if f.c is None:
        missing = "a missing factor" if f.kind == "factor" else f"the derived result's {what}"
        return f"{head}{missing} {s.show(f.r)}{f.note or ' is missing from the candidate'}"
    if f.c == cand and f.r == ref and f.how is None:
        return (f"{head}the candidate differs from the derived result as a whole: no multiple, transpose or "
                f"power of it fits{_parts(s, f.r, f.c)}")
    words = f"{head}the candidate's {what} {s.show(f.c)} where the derived result has {s.show(f.r)}"
    if f.how is not None:
        words += f": {f.how}{f.note}"
        if f.kind == "term" and f.how != "its negative":
            words += _coefficient_words(s, f)
    else:
        words += f"{f.note}; no multiple, transpose or power of it fits{_parts(s, f.r, f.c)}"
        words += _counterexample(s, f)
    return words + (_only(s, f, ref, cand) if first else "")


def _coefficient_words(s: _Search, f: Finding) -> str:
    (cc, cm), (rc, rm) = _factors(f.c), _factors(f.r)
    if cm == rm and cc != rc:
        return f" (the coefficient {s.show(cc)} where the derived result has {s.show(rc)})"
    return ""


def _only(s: _Search, f: Finding, ref, cand) -> str:
    """``" (the only difference)"`` when putting ``f.r`` in place of ``f.c`` makes the candidate equal."""
    if f.c is None or f.r is None or not getattr(f.c, "is_Matrix", False):
        return ""
    count = sum(1 for n in _preorder(cand) if n == f.c)
    if count:
        repaired = tidy(cand.xreplace({f.c: f.r}))
    else:
        (_, mc), (_, mr) = _factors(f.c), _factors(f.r)
        repaired, count = rewrite_adjacent(cand, mc, mr)
    if not count or repaired == cand or not s.values.same(repaired, ref):
        return ""
    return " (the only difference" + (f"; at all {count} occurrences" if count > 1 else "") + ")"


def _parts(s: _Search, r, c) -> str:
    """``"; its parts X, Y agree with the derived result's (inside A, B)"``: the largest subexpressions of
    ``c`` that agree with a subexpression of ``r``, where they sit there."""
    inside = [(n, p) for p in _preorder(r) if not isinstance(p, _Derived) for n in p.args
              if getattr(n, "is_Matrix", False) and not isinstance(n, MatrixSymbol)]
    found = []

    def visit(e):
        if e is not c and getattr(e, "is_Matrix", False) and not isinstance(e, (MatrixSymbol, _Derived)):
            twin = next((p for n, p in inside if n.shape == e.shape and s.values.screened_same(n, e)), None)
            if twin is not None:
                found.append((e, twin))
                return
        for a in e.args:
            if isinstance(a, Basic) and not isinstance(e, _Derived):
                visit(a)
    visit(c)
    if not found:
        return ""
    return (f"; its parts {', '.join(s.show(e) for e, _ in found[:3])} agree with the derived result's "
            f"(inside {', '.join(s.show(p) for _, p in found[:3])})")


def _sizes_text(inst) -> str:
    return ", ".join(f"{k} = {v}" for k, v in inst.sizes.items())


def _counterexample(s: _Search, f: Finding) -> str:
    """The two values of the differing part on the smallest confirming instance, to 4 digits."""
    rows = [(sum(inst.sizes.values()), inst, a, b) for inst, a, b in s.values.pairs(f.r, f.c)
            if a is not None and b is not None]
    if not rows:
        return ""
    _, inst, a, b = min(rows, key=lambda t: t[0])
    return f"; on {_sizes_text(inst)} the candidate's is {_compact(b)} and the derived result's {_compact(a)}"


def _compact(v) -> str:
    if isinstance(v, mpmath.matrix):
        return "[" + ", ".join("[" + ", ".join(mpmath.nstr(v[i, j], 4) for j in range(v.cols)) + "]"
                               for i in range(v.rows)) + "]"
    flat = _flat(v)
    return mpmath.nstr(flat[0], 4) if len(flat) == 1 else str(v)


# ---- a candidate that cannot be evaluated ------------------------------------------------------------
def _undefined(s: _Search, ref, cand, inst) -> str:
    bad = _culprit(cand, inst)
    where = _sizes_text(inst)
    words = f"the candidate cannot be evaluated on {where}: {s.show(bad)} is not defined there"
    if isinstance(bad, _GramNode) and bad.exponent < 0 and bad.damping == 0:
        rows, cols = (int(S(k).xreplace(inst.sizes)) for k in bad.base.shape)
        size, rank = (rows if bad.side == "left" else cols), min(rows, cols)
        gram = product(bad.base, transpose(bad.base)) if bad.side == "left" else product(transpose(bad.base),
                                                                                        bad.base)
        if rank < size:
            words += f" ({s.show(gram)} is {size}×{size} of rank {rank}: singular"
            other = type(bad)(*bad.args[:2], "right" if bad.side == "left" else "left", *bad.args[3:])
            if any(isinstance(n, _GramNode) and n.base == bad.base and n.side != bad.side for n in _preorder(ref)):
                words += (f"; the derived result has the Gram matrix on the other side, {s.show(other)}, "
                          f"the {'inner' if bad.side == 'left' else 'outer'} one")
            words += ")"
    elif isinstance(bad, Inverse):
        words += f" ({s.show(bad.arg)} is singular)"
    return words


def _culprit(e, inst):
    """The smallest subexpression of ``e`` that cannot be evaluated on ``inst`` (its parts can)."""
    for a in e.args:
        if getattr(a, "is_Matrix", False) and _value(a, inst, True) is None:
            return _culprit(a, inst)
    return e


__all__ = ["Finding", "localise"]
