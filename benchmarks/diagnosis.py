"""Benchmark: the cross-checker's diagnosis on a held-back corpus of hand formulas.

    python -m benchmarks.diagnosis [--corpus FILE] [--only DERIVATION]

The corpus (``tests/diagnosis_corpus.json``, a list of objects) holds hand formulas written the way
researchers write them (plain text, unicode and LaTeX spellings) against the derivations of the rule
modules: ``derivation``, ``formula``, ``expect`` (``"equal"`` or ``"different"``) and, for a wrong one, the
``slip`` planted in it (one of :data:`ACCEPTS`). None of them is a case of ``tests/crosscheck/test_diagnosis.py``
(the development corpus): the corpus is held back to measure the diagnosis, not to tune it.

Every target is built (or read from the target cache) first; then each candidate is parsed and compared
(:func:`derivations.crosscheck.checker.compare`, diagnosis included) and only that is timed, so the times
are those of a warm cache. Printed: one line per entry (verdict, false verdict or not, useful or not, the
first diagnosis sentence), then the figures:

* **false verdicts**: entries whose verdict is not the expected one (the target is 0);
* **useful-diagnosis fraction**: useful wrong entries / wrong entries (the target is at least 0.9);
* the **median** and **max** seconds per candidate (parse, compare and diagnosis; the target median is 1.5 s).

*Useful*, precisely: the verdict is ``different``, the diagnosis is not empty and is not the generic
fallback (:data:`FALLBACK`), and at least one of its sentences states a slip (:func:`stated_kinds`: its
wording names a kind of slip) that is among the kinds :data:`ACCEPTS` admits for the planted slip. A
diagnosis that states kinds, none of them admitted (a transpose named where an exponent was planted), is
not useful (``wrong kind``); nor is one that states no kind at all, such as "the candidate differs from the
derived result as a whole" (``no kind``). A localised part with a counterexample ("the candidate's part
C_Q^-1 where the derived result has C_K^-1; no multiple, transpose or power of it fits") states the kind
``replaced``: admitted for the slips that replace one name by another (a wrong partner, a wrong gradient),
not for the others.

Exit status 0 when both targets on verdicts and usefulness are met, 1 when not, 2 for bad input.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from derivations.crosscheck import rule_lookup
from derivations.crosscheck.checker import compare, parse_for
from derivations.crosscheck.inputs import BadInput
from derivations.crosscheck.target_cache import load_target, store_target
from derivations.parsing.formula_syntax import FormulaError
from derivations.parsing.targets import target_of
from foundation.commandline import (
    FileRefused,
    OneLineParser,
    UsageError,
    progress,
    read_json_file,
    stdout_closed,
    usage_error,
    write_result,
)

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "diagnosis_corpus.json"
#: the largest corpus file read (the shipped one is 14 kB)
MAX_CORPUS_BYTES = 4 * 2**20
FALLBACK = "no scalar multiple and none of the near variants"
USEFUL_TARGET = 0.9

#: the kinds a diagnosis sentence states, each recognised by its wording (first match per pattern)
_KIND_PATTERNS = [
    ("transpose", r"transposed|its transpose"),
    ("exponent", r"exponent|instead of its inverse|⁻¹ instead of|inverse Gram matrix instead|"
                 r"Gram matrix instead of its square root|its power|its inverse|its square|"
                 r"\^\(?-?\d+(/\d+)?\)? where the derived"),
    ("scale", r"× the derived result|× it|the coefficient|its negative"),
    ("sign", r"sign is flipped|the sign of the term|the sign flipped|its negative"),
    ("damping", r"damping"),
    ("msign", r"msign of the sum|msign block by block|one msign over|msign left out|an extra msign"),
    ("gram-side", r"on the wrong side|Gram matrix \S+ in place of|on the other side|other side"),
    ("missing", r"missing|lacks the factor|has no counterpart|left out|an extra factor|the only factor"),
    ("swapped", r"swapped|another order|blocks in the order"),
    ("partner", r"Q and K swapped|wrong factor|gradient of the other factor"),
    ("replaced", r"where the derived result has"),
]
_KIND_RES = [(k, re.compile(p)) for k, p in _KIND_PATTERNS]
_NO_KIND = re.compile(r"differs from the derived result as a whole")

#: the stated kinds that name each planted slip
ACCEPTS = {
    "transpose": {"transpose"},
    "exponent": {"exponent"},
    "inverse": {"exponent"},
    "scale": {"scale"},
    "sign": {"sign", "scale"},
    "term-sign": {"sign"},
    "coefficient": {"scale"},
    "scalar-power": {"scale", "exponent"},
    "damping": {"damping"},
    "msign": {"msign"},
    "msign-argument": {"msign", "missing"},
    "gram-side": {"gram-side"},
    "missing": {"missing"},
    "swapped": {"swapped"},
    "partner": {"partner", "replaced"},
    "gradient": {"partner", "replaced", "transpose"},
}


@dataclass
class Entry:
    derivation: str
    formula: str
    expect: str
    slip: str | None = None


@dataclass
class Outcome:
    entry: Entry
    verdict: str
    diagnosis: list = field(default_factory=list)
    seconds: float = 0.0
    status: str = ""  # "useful", "fallback", "no kind", "wrong kind (...)", "false verdict", "" for a right one

    @property
    def false_verdict(self) -> bool:
        return self.verdict != self.entry.expect

    @property
    def useful(self) -> bool:
        return self.status == "useful"


def load_corpus(path: Path = CORPUS) -> list:
    """The corpus entries; ``BadInput`` naming the entry for a malformed one."""
    try:
        raw = read_json_file(str(path), MAX_CORPUS_BYTES, "--corpus")
    except FileRefused as exc:
        raise BadInput(str(exc)) from None
    if not isinstance(raw, list) or not raw:
        raise BadInput(f"--corpus {path}: expected a non-empty JSON list of entries")
    out = []
    for i, item in enumerate(raw):
        ok = (isinstance(item, dict) and {"derivation", "formula", "expect"} <= set(item)
              and set(item) <= {"derivation", "formula", "expect", "slip"}
              and item["expect"] in ("equal", "different")
              and (item["expect"] == "equal") == (item.get("slip") is None)
              and (item.get("slip") is None or item["slip"] in ACCEPTS))
        if not ok:
            raise BadInput(f"--corpus {path}: entry {i} must have derivation, formula, expect (equal|different) "
                           f"and, for a different one only, a slip among {', '.join(sorted(ACCEPTS))}: {item!r}")
        out.append(Entry(**item))
    return out


def stated_kinds(sentences: list) -> set:
    """The kinds of slip the diagnosis ``sentences`` state (see the module docstring)."""
    kinds = set()
    for sentence in sentences:
        if _NO_KIND.search(sentence):
            continue
        kinds |= {k for k, rx in _KIND_RES if rx.search(sentence)}
    return kinds


def judge(entry: Entry, verdict: str, diagnosis: list) -> str:
    """The status of an outcome (see :class:`Outcome`)."""
    if verdict != entry.expect:
        return "false verdict"
    if entry.expect == "equal":
        return ""
    if not diagnosis or any(FALLBACK in s for s in diagnosis):
        return "fallback"
    kinds = stated_kinds(diagnosis)
    if not kinds:
        return "no kind"
    if kinds & ACCEPTS.get(entry.slip or "", set()):
        return "useful"
    return f"wrong kind ({', '.join(sorted(kinds))} for a {entry.slip} slip)"


def build_targets(names, use_cache: bool = True) -> dict:
    """``{name: Target}``, read from the target cache where it holds them (and stored there when built)."""
    out = {}
    for name in sorted(set(names)):
        target = load_target(name) if use_cache else None
        if target is None:
            target = target_of(*rule_lookup.find_derivation(name, use_cache))
            if use_cache:
                store_target(target)
        out[name] = target
    return out


def run_entry(target, entry: Entry) -> Outcome:
    """Parse, compare and diagnose one entry (timed). A formula the checker refuses has the verdict
    ``error: …`` and counts as a false verdict."""
    start = time.perf_counter()
    try:
        verdict = compare(target, parse_for(target, entry.formula))
    except (BadInput, FormulaError) as exc:
        return Outcome(entry, f"error: {' '.join(str(exc).split())}", [], time.perf_counter() - start,
                       "false verdict")
    seconds = time.perf_counter() - start
    return Outcome(entry, verdict.verdict, list(verdict.diagnosis), seconds,
                   judge(entry, verdict.verdict, list(verdict.diagnosis)))


@dataclass
class Figures:
    wrong: int
    useful: int
    false_verdicts: int
    median_s: float
    max_s: float

    @property
    def useful_fraction(self) -> float:
        return self.useful / self.wrong if self.wrong else 1.0

    @property
    def met(self) -> bool:
        return self.false_verdicts == 0 and self.useful_fraction >= USEFUL_TARGET


def figures(outcomes: list) -> Figures:
    wrong = [o for o in outcomes if o.entry.expect == "different"]
    times = [o.seconds for o in outcomes]
    return Figures(len(wrong), sum(o.useful for o in wrong), sum(o.false_verdict for o in outcomes),
                   statistics.median(times), max(times))


def line(o: Outcome) -> str:
    mark = "FALSE " if o.false_verdict else ""
    head = f"{mark}{o.verdict:9s} {o.seconds:6.2f}s {o.entry.derivation}: {o.entry.formula}"
    if o.entry.expect == "equal":
        return head
    first = o.diagnosis[0] if o.diagnosis else "(no diagnosis)"
    return f"{head}\n    [{o.entry.slip}] {o.status}: {first}"


def main(argv=None) -> int:
    prog = "benchmarks.diagnosis"
    if stdout_closed(prog):
        return 2
    p = OneLineParser(prog="python -m benchmarks.diagnosis", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=str(CORPUS), metavar="FILE", help="the corpus (a JSON list)")
    p.add_argument("--only", metavar="DERIVATION", help="only the entries of this derivation")
    try:
        a = p.parse_args(argv)
        entries = load_corpus(Path(a.corpus))
        if a.only:
            entries = [e for e in entries if e.derivation == a.only]
            if not entries:
                raise BadInput(f"--only {a.only}: no corpus entry is on this derivation")
        targets = build_targets(e.derivation for e in entries)
        outcomes = [run_entry(targets[e.derivation], e) for e in progress(entries, desc="corpus", unit="entry")]
    except (UsageError, BadInput, FormulaError) as exc:
        return usage_error(prog, " ".join(str(exc).split()))
    f = figures(outcomes)
    text = "\n".join([*(line(o) for o in outcomes),
                      f"entries: {len(outcomes)} ({f.wrong} wrong) over {len(targets)} derivations",
                      f"false verdicts: {f.false_verdicts}",
                      f"useful diagnoses: {f.useful}/{f.wrong} = {f.useful_fraction:.3f} (target >= {USEFUL_TARGET})",
                      f"seconds per candidate (warm cache): median {f.median_s:.2f}, max {f.max_s:.2f}"]) + "\n"
    return write_result(prog, text, 0 if f.met else 1)


if __name__ == "__main__":
    sys.exit(main())
