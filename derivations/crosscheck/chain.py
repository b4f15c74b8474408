"""Step-by-step checking of a hand derivation written as display math in Markdown or LaTeX.

``python -m derivations.crosscheck --chain FILE``. The display math of ``FILE`` (``$$…$$``,
``\\[…\\]``, ``equation``/``align`` environments, fenced ``math`` blocks) is read in order:

* a block ``A = B = C`` is a chain of equalities; a block that starts with ``=`` continues the
  previous block's last expression. Each ``=`` is a step: the two sides must be equal as
  functions of the symbols (:func:`derivations.crosscheck.checker.compare`).
* a block ``\\min_{X} ⟨G, L(X)⟩ \\text{ s.t. } ‖N(X)‖_{op} \\le β`` is a problem. Consecutive problems
  are a step: objective, constraint and budget must agree at every point, after the change of
  variables ``\\text{where } Z = f(X)`` when the variable changes; and a change of variables must reach
  every ``Z`` (``X ↦ f(X)`` onto ``Z``'s space, :mod:`~derivations.crosscheck.reachability`), or the step is
  refused naming the rank obstruction: ``Z = ΔW_Q W_Kᵀ`` reaches only matrices of rank ``≤ d_h``, so the
  problem in ``Z`` is a relaxation (the Compositional Muon paper, §2.1).
* a block ``X^\\star = S`` after a problem in ``X`` is the solution step: ``S`` must satisfy the
  constraint with equality and attain the optimal value; the value is known exactly when some
  problem of the sequence has the form ``min ⟨A, Z⟩ s.t. ‖Z‖_op ≤ β`` (value ``−β‖A‖_*``, Hölder's
  inequality), to which every other problem was shown equivalent. A solution in a variable introduced by
  a change of variables must be achievable (``S = f(X)`` for some ``X``).

Verdict: every step holds (exit status 0); a step fails or is refused (1, the first one is reported); or
*not proven* (:data:`EXIT_NOT_PROVEN`, 3): no step fails, but some step was not established: a solution
that is feasible and tight but whose optimality could not be checked (no canonical problem in the
sequence), or a change of variables whose reach could not be decided (not affine, or a variable with
structural facts). A step that merely agrees on random instances (``numeric``) holds, as everywhere in the
cross-checker; ``not proven`` is for a claim that was not checked at all.

* a block ``L := G G^\\top`` (``\\coloneqq``, ``\\triangleq``) is a definition, and so is each ``L = …;`` before a
  block's formula and each ``\\text{where } L = …`` after it (a problem's ``where`` is its change of variables):
  the name stands for its expression in every block of the file. After a solution ``X^\\star = S``, ``X^\\star``
  (``Xstar``) in later blocks is ``S``.

Names: a name is a matrix when it is declared one (``assume: m_Q: matrix``), used as one (transposed, the
argument of ``msign``, ``inv``, …) or else when its part before the first underscore has a capital letter
(``G_Q``, ``dW_Q``, ``\\Delta W_Q``); it is a positive scalar when declared one (``assume: G: scalar``), used as
one (a divisor, as the group size ``G`` in ``\\frac{\\varepsilon}{2G}``) or else (``epsilon``, ``c_K``); the
report lists the names read as scalars (:mod:`derivations.crosscheck.identities`). Shapes are inferred
across the whole file (the two sides of an ``=`` have one shape). Facts come from ``--assume`` or from lines
``assume: W: orthonormal columns`` anywhere in the file (e.g. in an HTML or LaTeX comment).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from sympy import Symbol
from sympy.matrices.expressions import MatrixSymbol

from derivations.crosscheck.checker import compare
from derivations.crosscheck.identities import (
    Assumptions,
    _sizes_for,
    _symbolic_sizes,
    build_with_inference,
    parse_assumptions,
    scalar_names,
)
from derivations.crosscheck.inputs import CHAIN_MAX_BYTES, BadInput, read_input
from derivations.crosscheck.reachability import in_range, reachability
from derivations.crosscheck.verdict import Verdict, format_verdict, shapes_of, show
from derivations.parsing.formula_syntax import FormulaError, Node, parse_definition, parse_definitions, parse_tree
from derivations.parsing.notation import STAR, decorate
from derivations.parsing.targets import Target
from derivations.vocabulary.nodes import Inner, NuclearNorm, OpNorm

MAX_FILE = CHAIN_MAX_BYTES  # bytes: a --chain file over this (or not a regular file) is refused

_BLOCKS = re.compile(
    r"\$\$(?P<a>.+?)\$\$|\\\[(?P<b>.+?)\\\]|\\begin\{(?P<env>equation\*?|align\*?|gather\*?|multline\*?)\}"
    r"(?P<c>.+?)\\end\{(?P=env)\}|^```math[ \t]*\n(?P<d>.+?)^```",
    re.DOTALL | re.MULTILINE)
_ASSUME = re.compile(r"assume:\s*([A-Za-z][A-Za-z0-9_]*\s*:\s*[^\n>%]+)")
_MIN = re.compile(r"(?:\\min|\\operatorname\*?\{(?:arg)?min\})\s*(?:\\limits\s*)?_|\bminimize\b|\bmin_")
_DEFINITION = re.compile(r"^\s*[^=]*?(?::=|\\coloneqq|\\coloneq|\\triangleq)|^[^=]*=\s*(?:\\operatorname\{svd\}|"
                         r"\\mathrm\{svd\}|svd)\s*(?:\\left)?\(")
_WHERE = re.compile(r",?\s*(?:\\quad\s*)?(?:\\(?:text|mathrm|textrm)\{\s*(?:where|with)\s*\}|\b(?:where|with)\b)")


#: the exit status of a chain none of whose steps fails but one of which was not established (0 all steps hold,
#: 1 a step fails, 2 bad input)
EXIT_NOT_PROVEN = 3


@dataclass
class Step:
    index: int
    kind: str  # "equality" | "problem" | "solution"
    before: str
    after: str
    verdict: Verdict | None = None
    note: str = ""
    #: why the step is not established though nothing in it failed (optimality, or whether a change of
    #: variables reaches every point, not checked); empty when it holds
    unproven: str = ""

    @property
    def status(self) -> str:
        """``holds``, ``not proven`` (checked parts agree, but :attr:`unproven` was not established) or ``fails``."""
        if self.verdict is None or self.verdict.verdict != "equal":
            return "fails"
        return "not proven" if self.unproven else "holds"


@dataclass
class ChainReport:
    steps: list = field(default_factory=list)
    failed: Step | None = None
    scalars: list = field(default_factory=list)  # the names read as scalars (identities.scalar_names)

    @property
    def unproven(self) -> list:
        """The steps that were not established (nothing in them failed)."""
        return [s for s in self.steps if s.status == "not proven"]

    @property
    def status(self) -> str:
        """``all steps hold``, ``not proven`` (no step fails, some step was not established) or ``fails``."""
        return "fails" if self.failed is not None else "not proven" if self.unproven else "all steps hold"

    @property
    def exit_status(self) -> int:
        """0 every step holds, 1 a step fails, :data:`EXIT_NOT_PROVEN` (3) no step fails but one is not proven."""
        return {"all steps hold": 0, "fails": 1}.get(self.status, EXIT_NOT_PROVEN)

    @property
    def ok(self) -> bool:
        """Every step holds: none fails and none is merely not proven."""
        return self.status == "all steps hold"

    @property
    def held(self) -> int:
        return sum(1 for s in self.steps if s.status == "holds")

    def as_json(self) -> dict:
        return {"ok": self.ok, "verdict": self.status, "steps": len(self.steps), "held": self.held,
                "scalars": self.scalars,
                "not_proven": [{"step": s.index, "kind": s.kind, "reason": s.unproven} for s in self.unproven],
                "first_failure": None if self.failed is None else {
                    "step": self.failed.index, "kind": self.failed.kind, "before": self.failed.before,
                    "after": self.failed.after, "note": self.failed.note, **self.failed.verdict.as_json()},
                "results": [{"step": s.index, "kind": s.kind, "status": s.status, "verdict": s.verdict.verdict,
                             "method": s.verdict.method,
                             "symbolic_sizes": s.verdict.as_json()["symbolic_sizes"], "note": s.note,
                             "not_proven": s.unproven or None}
                            for s in self.steps]}

    def text(self) -> str:
        lines = [f"step {s.index} ({s.kind}): "
                 + (f"NOT PROVEN ({s.verdict.method_text}) — {s.unproven}" if s.status == "not proven" else
                    f"{s.verdict.verdict} ({s.verdict.method_text})" + (f" — {s.note}" if s.note else ""))
                 for s in self.steps]
        open_steps = ", ".join(str(s.index) for s in self.unproven)
        if self.failed is None:
            if self.unproven:
                plural = "s" * (len(self.unproven) > 1)
                lines.append(f"NOT PROVEN: {self.held} of {len(self.steps)} steps hold; step{plural} {open_steps} "
                             f"not established (exit status {EXIT_NOT_PROVEN})")
            else:
                lines.append(f"all {len(self.steps)} steps hold")
            if self.scalars:
                lines.append(f"scalars: {', '.join(self.scalars)} (read as scalars; 'assume: NAME: matrix' in the "
                             "file declares a matrix)")
        else:
            f = self.failed
            lines.append(f"FIRST FAILURE at step {f.index} ({f.kind}); {self.held} of {f.index - 1} earlier "
                         f"steps held" + (f" (not proven: step {open_steps})" if open_steps else ""))
            lines.append(f"  {f.before}\n  => {f.after}")
            lines.append(format_verdict(f.verdict, f"step {f.index}").rstrip())
        return "\n".join(lines) + "\n"


def display_math(text: str) -> list[str]:
    """The display-math blocks of a Markdown or LaTeX document, in order."""
    out = []
    for m in _BLOCKS.finditer(text):
        body = next(g for g in (m.group("a"), m.group("b"), m.group("c"), m.group("d")) if g is not None)
        out.append(body)
    return out


def _clean(block: str) -> str:
    block = re.sub(r"\\(label|tag)\{[^}]*\}|\\nonumber|\\notag|\\begin\{aligned\}|\\end\{aligned\}", " ", block)
    block = block.replace("&", " ").replace("\\\\", " ").replace("\\;", " ")
    return block.strip().rstrip(".,;").strip()


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        ch = text[i]
        if ch in "([{" or text.startswith("\\langle", i):
            depth += 1
        elif ch in ")]}" or text.startswith("\\rangle", i):
            depth -= 1
        if depth == 0 and text.startswith(sep, i) and not text.startswith("<=", i - 1) \
                and not text.startswith(">=", i - 1):
            parts.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


@dataclass
class _Problem:
    variable: str
    objective: str
    constraint: str
    budget: str
    substitution: tuple | None  # (new variable, expression in the old one)


_SUBJECT = re.compile(r"\\(?:text|mathrm|quad|qquad)\{?\s*(?:s\.\s*t\.|subject\s+to)\s*\}?|\bs\.\s*t\.|\bsubject to\b")
_LE = re.compile(r"\\leq?\b|<=|≤")


def _problem(block: str, where: str) -> _Problem:
    m = re.search(r"(?:\\min|\\operatorname\*?\{min\}|\bmin)\s*_\s*(\{[^}]*\}|\\Delta\s*[A-Za-z][A-Za-z0-9_{}]*|"
                  r"[A-Za-z][A-Za-z0-9_]*)", block)
    v = re.search(r"minimize over\s+([A-Za-z][A-Za-z0-9_]*)\s*:?", block)
    if not m and not v:
        raise BadInput(f"{where}: a problem needs its variable: \\min_{{X}} … or 'minimize over X:'")
    variable = (m.group(1) if m else v.group(1)).strip("{} ")
    variable = re.sub(r"\\Delta\s*", "d", variable).replace("{", "").replace("}", "")
    body = block[(m or v).end():]
    substitution = None
    w = re.search(r"(?:\\text\{\s*where\s*\}|\bwhere\b|\\text\{\s*with\s*\})", body)
    if w:
        sub = body[w.end():].strip().strip(",")
        body = body[:w.start()]
        left, _, right = sub.partition("=")
        if not right:
            raise BadInput(f"{where}: write the change of variables as 'where Z = …'")
        substitution = (re.sub(r"\\Delta\s*", "d", left.strip()), right.strip().rstrip(",."))
    parts = _SUBJECT.split(body, maxsplit=1)
    if len(parts) != 2:
        raise BadInput(f"{where}: a problem needs 's.t.' (or 'subject to') before its constraint")
    objective, constraint = parts[0].strip().strip(",").strip(), parts[1].strip().strip(",")
    cons = _LE.split(constraint)
    if len(cons) != 2:
        raise BadInput(f"{where}: the constraint must read '‖…‖_op ≤ budget'")
    return _Problem(variable, objective, cons[0].strip(), cons[1].strip(), substitution)


def check_chain_file(path: str, assumptions: Assumptions | None = None) -> ChainReport:
    """Read ``path`` and check every step; ``BadInput`` for files that hold no checkable chain."""
    raw = read_input(path, MAX_FILE, "--chain")  # a FIFO, a device or a directory is refused
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not UTF-8 text") from None
    if not text.strip():
        raise BadInput(f"{path} is empty")
    facts = [m.group(1).strip().rstrip("-").strip() for m in _ASSUME.finditer(text)]
    merged = parse_assumptions(facts)
    if assumptions is not None:
        for k, v in assumptions.facts.items():
            merged.facts.setdefault(k, set()).update(v)
        merged.shapes.update(assumptions.shapes)
        merged.scalars |= assumptions.scalars
        merged.square |= assumptions.square
        merged.matrices |= assumptions.matrices
    blocks = [_clean(b) for b in display_math(text)]
    blocks = [b for b in blocks if b]
    if not blocks:
        raise BadInput(f"{path} holds no display math ($$…$$, \\[…\\], equation/align, ```math)")
    return check_blocks(blocks, merged)


def _is_matrix_name(name: str) -> bool:
    return any(c.isupper() for c in name.split("_")[0])


def check_blocks(blocks: list[str], assumptions: Assumptions) -> ChainReport:
    """Check the steps of already extracted display-math blocks."""
    items = [item for k, block in enumerate(blocks, 1) for item in _read_block(block, f"block {k}")]
    plan = _Plan()
    for kind, *args in items:
        getattr(plan, kind)(*args)  # one planner per kind of block: chain, cont, problem, solution
    if not plan.steps:
        raise BadInput("the display math holds no step (a chain needs at least one '=' or two problems)")
    for name in {p.variable for p, _ in plan.problems}:
        if not (_is_matrix_name(name) or assumptions.declared_matrix(name)):
            raise BadInput(f"the problem variable {name!r} must be a matrix name (capital letter, e.g. X, dW_Q, "
                           f"or declared: assume: {name}: matrix)")
    texts = plan.texts
    try:
        exprs, builder = build_with_inference(texts, assumptions, equal=plan.same_shape(),
                                              definitions=plan.definition_nodes())
    except FormulaError as exc:
        raise BadInput(str(exc) if exc.text else f"in {texts[_failing_text(texts, assumptions)]!r}: {exc}") from None
    built = [e for e in exprs if hasattr(e, "atoms")]
    sizes = (_sizes_for(built), _symbolic_sizes(built))
    report = ChainReport(scalars=scalar_names(builder.namespace))
    for k, (kind, before, after, idx, extra) in enumerate(plan.steps, 1):
        step = Step(k, kind, before, after)
        step.verdict, step.note, step.unproven = _STEP_CHECKS[kind](k, idx, extra, exprs, builder, sizes)
        step.verdict.scalars = report.scalars
        report.steps.append(step)
        if step.verdict.verdict != "equal":
            report.failed = step
            break
    return report


_STAR = r"(\\Delta\s*)?([A-Za-z][A-Za-z0-9_{}]*)\s*\^\s*\{?\s*(\\star|\*|\\ast)\s*\}?"  # X^\star, \Delta W^*


def _read_block(block: str, where: str) -> list[tuple]:
    """The items of one block: ``("problem", _Problem)``, ``("solution", variable, text)`` (followed by the
    chain it continues into, if any), ``("chain", terms)``, or ``("cont", terms)`` for a block that starts
    with ``=`` and continues the previous block's last expression."""
    if _MIN.search(block):
        return [("problem", _problem(block, where))]
    if _DEFINITION.match(block):
        return [("define", block)]
    *defs, block = _split_top(block, ";")  # L = G G^T; A = B
    items = [("define", d.strip()) for d in defs if d.strip()]
    if w := _WHERE.search(block):  # A = B \text{where } L = G G^T, R = …
        block, tail = block[:w.start()], block[w.end():]
        items.append(("define_clause", tail.strip()))
    return items + _read_chain(block.strip(), where)


def _read_chain(block: str, where: str) -> list[tuple]:
    terms = [t.strip() for t in _split_top(block, "=")]
    star = re.fullmatch(_STAR, terms[0])
    if star and len(terms) >= 2:
        name = ("d" if star.group(1) else "") + star.group(2).replace("{", "").replace("}", "")
        return [("solution", name, terms[1])] + ([("cont", terms[1:])] if len(terms) > 2 else [])
    if any(not t for t in terms[1:]):
        raise BadInput(f"{where}: an empty side of '=' in {block[:60]!r}")
    return [("cont" if not terms[0] else "chain", terms)]


@dataclass
class _Plan:
    """The steps of a file in order, and every text they build (built together: shapes are shared)."""

    texts: list = field(default_factory=list)
    steps: list = field(default_factory=list)  # (kind, before text, after text, build-indices, extra)
    problems: list = field(default_factory=list)  # (_Problem, {part: build-index})
    prev_terms: list | None = None
    prev_problem: tuple | None = None
    definitions: list = field(default_factory=list)  # texts of NAME := … (and ; / where) definitions
    optima: list = field(default_factory=list)  # (Xstar, text of the solution S of X^\star = S)

    def add(self, text: str) -> int:
        self.texts.append(text)
        return len(self.texts) - 1

    def same_shape(self) -> list:
        """Pairs of build-indices whose expressions have one shape: the sides of an equality, a solution and
        its variable, a new variable and its expression."""
        pairs = [idx for kind, _, _, idx, _ in self.steps if kind in ("equality", "solution")]
        return pairs + [(i["sub_new"], i["sub_expr"]) for _, i in self.problems if "sub_new" in i]

    def define(self, text: str):
        """``L := G G^T``: a name for an expression in every block."""
        self.definitions.append((parse_definition, text))

    def define_clause(self, text: str):
        """``\\text{where } L = G G^T, R = G^T G``: names for expressions in every block."""
        self.definitions.append((parse_definitions, text))

    def definition_nodes(self) -> list:
        """The definitions as ``def`` nodes, and ``Xstar`` = ``S`` for every solution not defined otherwise."""
        nodes = []
        for parse, text in self.definitions:
            out = parse(text)
            nodes += out if isinstance(out, list) else [out]
        named = {name for d in nodes for name in d.value}
        for name, sol in self.optima:
            if name not in named:
                named.add(name)
                nodes.append(Node("def", 1, (parse_tree(sol),), (name,)))
        return nodes

    def chain(self, terms):
        """``A = B = C``: one equality step per ``=``."""
        for a, b in itertools.pairwise(terms):
            self.steps.append(("equality", a, b, (self.add(a), self.add(b)), None))
        self.prev_terms = terms

    def cont(self, terms):
        """``= B = C``: the chain goes on from the previous block's last expression."""
        if self.prev_terms is None:
            raise BadInput("a block starts with '=' but no expression precedes it")
        previous = self.prev_terms[-1]
        self.chain([previous, *terms[1:]] if not terms[0] else [previous, *terms])

    def problem(self, p: _Problem):
        """A problem: a step from the previous problem, if any."""
        idx = {"objective": self.add(p.objective), "constraint": self.add(p.constraint),
               "budget": self.add(p.budget), "variable": self.add(p.variable)}
        if p.substitution:
            idx["sub_new"] = self.add(p.substitution[0])
            idx["sub_expr"] = self.add(p.substitution[1])
        entry = (p, idx)
        self.problems.append(entry)
        if self.prev_problem is not None:
            self.steps.append(("problem", _ptext(self.prev_problem[0]), _ptext(p), None, (self.prev_problem, entry)))
        self.prev_problem = entry

    def solution(self, name: str, sol: str):
        """``X^\\star = S``: the solution step of the last problem in ``X``."""
        owner = next((e for e in reversed(self.problems) if e[0].variable == name), None)
        if owner is None:
            raise BadInput(f"the solution {name}* has no problem in {name} before it")
        self.steps.append(("solution", _ptext(owner[0]), f"{name}* = {sol}", (self.add(name), self.add(sol)),
                           (owner, list(self.problems))))
        self.prev_terms = [sol]
        self.optima.append((decorate(name, STAR), sol))


def _equality_step(k, idx, extra, exprs, builder, sizes):
    return _check_pair(exprs[idx[0]], exprs[idx[1]], builder, sizes, f"step {k}"), "", ""


def _problem_step(k, idx, extra, exprs, builder, sizes):
    return _check_problems(extra[0], extra[1], exprs, builder, sizes, k)


def _solution_step(k, idx, extra, exprs, builder, sizes):
    return _check_solution(exprs[idx[1]], extra[0], extra[1], exprs, builder, sizes, k)


#: ``(verdict, note, why not proven)`` of a step, one check per kind of step
_STEP_CHECKS = {"equality": _equality_step, "problem": _problem_step, "solution": _solution_step}


def _failing_text(texts, assumptions) -> int:
    for i, t in enumerate(texts):
        try:
            parse_tree(t)
        except FormulaError:
            return i
    return 0


def _ptext(p: _Problem) -> str:
    sub = f", where {p.substitution[0]} = {p.substitution[1]}" if p.substitution else ""
    return f"min over {p.variable}: {p.objective} s.t. {p.constraint} <= {p.budget}{sub}"


def _check_pair(a, b, builder, sizes, where) -> Verdict:
    ma, mb = getattr(a, "is_Matrix", False), getattr(b, "is_Matrix", False)
    if ma != mb or (ma and tuple(a.shape) != tuple(b.shape)):
        def show(e):
            return f"{e.shape[0]}×{e.shape[1]}" if getattr(e, "is_Matrix", False) else "a scalar"
        raise BadInput(f"{where}: the two sides have different shapes: {show(a)} and {show(b)}")
    return compare(Target(where, a, builder.namespace, {}, {}, sizes[0], sizes[1]), b)


def _variable(exprs, idx):
    v = exprs[idx["variable"]]
    if not isinstance(v, MatrixSymbol):
        raise BadInput(f"the problem variable {v} is not a matrix")
    return v


def _check_problems(first, second, exprs, builder, sizes, k):
    (_, i1), (p2, i2) = first, second
    x, z = _variable(exprs, i1), _variable(exprs, i2)
    o1, c1, b1 = exprs[i1["objective"]], exprs[i1["constraint"]], exprs[i1["budget"]]
    o2, c2, b2 = exprs[i2["objective"]], exprs[i2["constraint"]], exprs[i2["budget"]]
    note, sub = "", None
    if x != z:
        if not p2.substitution or exprs[i2["sub_new"]] != z:
            raise BadInput(f"step {k} changes the variable from {x} to {z}: say how, e.g. "
                           f"'\\text{{where }} {z} = …' in terms of {x}")
        sub = exprs[i2["sub_expr"]]
        o2, c2 = o2.xreplace({z: sub}), c2.xreplace({z: sub})
        note = f"with {z} = {p2.substitution[1]}"
    for part, a, b in (("objective", o1, o2), ("constraint", c1, c2), ("budget", b1, b2)):
        v = _check_pair(a, b, builder, sizes, f"step {k} ({part})")
        if v.verdict != "equal":
            return v, f"the {part}s differ" + (f" ({note})" if note else ""), ""
    if sub is None:
        return v, note, ""
    # equal objectives and constraints show the problem in Z equivalent only if Z = S(X) reaches every Z
    reach = reachability(x, z, sub, builder.namespace, sizes[0], show(sub, builder.namespace))
    if reach.status == "obstructed":
        return _refused(reach, x, sub, z, f"every {z} ({z}'s space)", builder), note, ""
    if reach.status == "unknown":
        return v, note, reach.text
    return v, f"{note}; {reach.text}", ""


def _refused(reach, x, expr, z, onto, builder) -> Verdict:
    """The verdict of a step refused for an achievable set too small (:mod:`~derivations.crosscheck.reachability`)."""
    return Verdict("refused", "numeric", 0, diagnosis=[reach.text],
                   reference=f"{x} ↦ {show(expr, builder.namespace)}", candidate=onto,
                   shapes=shapes_of([expr, z], reach.sizes))


def _introduced(name, problems, exprs):
    """``(X, S)`` of the change of variables ``name = S(X)`` that introduced the variable ``name`` in
    ``problems``, or None when ``name`` was not introduced by one."""
    found = None
    for (_, before), (p, idx) in itertools.pairwise(problems):
        if p.substitution and "sub_new" in idx and exprs[idx["sub_new"]] == name:
            found = (exprs[before["variable"]], exprs[idx["sub_expr"]])
    return found


def _canonical_value(problems, exprs):
    """``−β‖A‖_*`` from a problem ``min ⟨A, Z⟩ s.t. ‖Z‖_op ≤ β`` of the sequence, else None."""
    for p, idx in problems:
        z, obj, con = exprs[idx["variable"]], exprs[idx["objective"]], exprs[idx["constraint"]]
        if isinstance(con, OpNorm) and con.args[0] == z and isinstance(obj, Inner) and z in obj.args:
            a = obj.args[0] if obj.args[1] == z else obj.args[1]
            if not a.has(z):
                return -exprs[idx["budget"]] * NuclearNorm(a), p
    return None, None


def _check_solution(sol, owner, problems, exprs, builder, sizes, k):
    _, idx = owner
    x = _variable(exprs, idx)
    obj, con, budget = (exprs[idx[key]].xreplace({x: sol}) for key in ("objective", "constraint", "budget"))
    v = _check_pair(con, budget, builder, sizes, f"step {k} (tightness)")
    if v.verdict != "equal":
        return v, "the solution does not meet the constraint with equality", ""
    introduced = _introduced(x, problems, exprs)
    if introduced is not None:  # the minimiser of a problem in Z = S(X) must be S(X) of some X
        reach = in_range(*introduced[:2], sol, builder.namespace, sizes[0], show(introduced[1], builder.namespace),
                         f"{x}*")
        if reach.status == "obstructed":
            onto = f"{x}* = {show(sol, builder.namespace)}"
            return _refused(reach, *introduced, x, onto, builder), "the solution is not achievable", ""
    value, source = _canonical_value(problems, exprs)
    if value is None:
        return v, "feasible and tight", ("feasible and tight; optimality not checked (no problem of the form "
                                         "min ⟨A, Z⟩ s.t. ‖Z‖_op ≤ β)")
    free = {s for s in value.free_symbols if isinstance(s, (MatrixSymbol, Symbol))}
    if any(isinstance(s, MatrixSymbol) and s.name == source.variable for s in free):
        return v, "feasible and tight", "feasible and tight; optimality not checked"
    v = _check_pair(value, obj, builder, sizes, f"step {k} (optimal value)")
    if v.verdict != "equal":
        return v, "the solution does not attain the optimal value −β‖A‖_* (Hölder)", ""
    return v, "tight, and attains −β‖A‖_* of the equivalent canonical problem", ""
