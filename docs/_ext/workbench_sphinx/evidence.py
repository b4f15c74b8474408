"""The evidence of every step: one short line on the page, the details folded, every digit in JSON.

A proof page shows each step's evidence as one line (float64 and mpmath residuals rounded to one
significant digit, the symbolic verdict in a word) that unfolds into the side conditions the step
discharged and how it was checked. What the words of that line mean, and how each kind of step is
checked, is said once per page by :func:`legend`. The numbers at full precision are written next to
the site as ``evidence/<rule>.json`` (:func:`write_evidence`): the float64 residual and its
sub-checks, the mpmath residual at 50 digits computed while the docs were built, the symbolic verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

from sphinx.util.docutils import SphinxDirective

from derivations.engine import derivation as engine

from . import rst
from .notation import condition_rst
from .objects import catalogue

#: the folder of the built site that holds each rule module's evidence at full precision
EVIDENCE_DIR = "evidence"

#: how each kind of step is checked (said once, in the legend's folded part)
KINDS = {
    "rewrite": "both sides evaluated on random instances that satisfy the side conditions",
    "change_of_variables": "both sides evaluated with the old variable expressed through the new one",
    "solve": "the claimed minimizer checked against the problem on random instances",
    "back_substitute": "the minimizer in the original variable checked against the original problem",
    "restrict": ("the objective compared, and the new constraint checked to bound the old one from above, on "
                 "random instances (a restriction: the feasible set shrinks)"),
    "bound": "both sides evaluated on random instances; the step holds when before ≤ after",
}


def sizes_text(dims: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in dims.items())


def check_sizes(der) -> dict:
    """Where a derivation's steps are checked: float64 sizes, the mpmath size, the symbolic model's size."""
    context = der.context
    return {"float64": sizes_list(getattr(context, "check_dims", []) or []),
            "mpmath": sizes_list([getattr(context, "mpmath_dims", {}) or {}]),
            "symbolic": sizes_list([getattr(context, "symbolic_dims", {}) or {}])}


def sizes_list(dims_list) -> str:
    """Several sizes over the same dimensions as one tuple each: ``(d, d_h, n) = (5, 2, 10), (4, 3, 12)``
    (one dimension, or dimensions that differ between sizes: each written out)."""
    dims_list = [d for d in dims_list if d]
    keys = {tuple(str(k) for k in d) for d in dims_list}
    if len(keys) != 1:
        return "; ".join(sizes_text(d) for d in dims_list)
    names = next(iter(keys))
    if len(names) == 1:
        return f"{names[0]} = " + ", ".join(str(v) for d in dims_list for v in d.values())
    return f"({', '.join(names)}) = " + ", ".join("(" + ", ".join(str(v) for v in d.values()) + ")" for d in dims_list)


def sizes_sentence(sizes: dict, lead: str) -> str:
    """``lead`` + where the steps are checked, as one sentence of reST."""
    parts = [f"in float64 at sizes {sizes['float64'] or 'of the context'}"]
    if sizes["mpmath"]:
        parts.append(f"in mpmath at {sizes['mpmath']}")
    if sizes["symbolic"]:
        parts.append(f"by the symbolic model at {sizes['symbolic']}")
    return rst.text(lead + "; ".join(parts) + ".")


def symbolic_status(status: str, der) -> str:
    """What the symbolic check showed, in words that claim no more than it did."""
    at = check_sizes(der)["symbolic"]
    at = f" at sizes {at}" if at else ""
    if status == "proved":
        return (f"the two sides agree exactly as rational functions of the entries of explicit "
                f"symbolic matrices{at} (an identity at those sizes, not a proof for every size)")
    if status == "numeric only":
        return "not shown symbolically (the explicit model does not cover this step): numeric evidence only"
    if status == "n/a":
        return "not applicable to this kind of step"
    return status if ("size" in status or not at) else f"{status}{at}"


def short_symbolic(status: str) -> str:
    """The symbolic verdict in a few words (the legend says what each means)."""
    if status == "proved" or status.startswith("verified"):
        return "exact"
    if status.startswith("n/a: certified by duality"):
        return "n/a (duality)"
    if status.startswith("n/a"):
        return "n/a"
    if status.startswith("not modelled"):
        return "not modelled"
    if status == "numeric only":
        return "numeric only"
    return status.split(":")[0]


def rounded(x: float) -> str:
    """One significant digit for display (the evidence JSON keeps every digit); exact zero is 0."""
    return "0" if x == 0 else f"{x:.0e}"


def evidence_line(step) -> str:
    """A step's evidence in one line: float64, mpmath at 50 digits, symbolic (rounded for display)."""
    check = step.check
    mp = "not run" if check.mpmath_error is None else rounded(check.mpmath_error)
    return f"float64 {rounded(check.float64_error)}, mpmath {mp}, symbolic {short_symbolic(check.symbolic)}"


def check_details(step, der) -> list[str]:
    """The details behind the evidence line (folded): the conditions discharged, every sub-check, the
    full symbolic verdict and the trusted kernel's verdict."""
    check = step.check
    lines = []
    if step.conditions:
        lines.append("* Discharged: " + "; ".join(condition_rst(c) for c in step.conditions) + ".")
    kind = step.kind.replace("_", " ")
    lines.append(f"* {rst.text(f'A {kind} step, float64 residual worst of {check.trials} instances.')}")
    subchecks = getattr(check, "subchecks", None) or {}
    if subchecks and list(subchecks) != ["before = after"]:
        lines.append("* " + rst.text("Worst error of each sub-check: "
                                     + ", ".join(f"{k} {float(v):.1e}" for k, v in subchecks.items()) + "."))
    lines.append(f"* {rst.text('Symbolic: ' + symbolic_status(check.symbolic, der) + '.')}")
    if getattr(check, "instance", ""):
        lines.append(f"* {rst.text('Kernel: ' + check.instance + '.')}")  # the trusted kernel's verdict
    return lines


def legend(json_href: str | None = None, sizes: dict | None = None) -> list[str]:
    """How to read a step: said once per page; what each word means and how each kind of step is
    checked is folded under it. ``sizes``: where the steps of the page are checked (a proof checked
    elsewhere says so itself)."""
    ftol = getattr(engine, "FLOAT64_TOL", 1e-9)
    mtol = getattr(engine, "MPMATH_TOL", None)
    digits = getattr(engine, "MPMATH_DPS", 50)
    full = f" (every digit: `evidence JSON <{json_href}>`__)" if json_href else ""
    lines = [".. rst-class:: workbench-legend", "",
             (f"**Reading a step.** Its lemma, then its evidence: *float64* and *mpmath* ({digits} digits) "
              f"residuals, rounded, and the *symbolic* verdict{full}. Unfold it for the side conditions and "
              "checks."), ""]
    where = [f"* {sizes_sentence(sizes, 'Unless its proof says otherwise, every step on this page is checked ')}"
             ] if sizes else []
    kinds = [f"* *{rst.text(kind.replace('_', ' '))}*: {rst.text(how)}." for kind, how in KINDS.items()]
    folded = [f"* *float64*: the worst relative residual over random instances (tolerance {ftol:.0e}); *mpmath*: "
              f"the residual at {digits} digits on one instance, computed while this page was built"
              + (f" (tolerance {mtol:.0e})" if mtol else "") + ".",
              "* *symbolic exact*: the two sides agree as rational functions of the entries of explicit symbolic "
              "matrices at the sizes given (an identity at those sizes, not a proof for every size); "
              "*not modelled*: numeric evidence only; *n/a*: a solve or restriction step, certified by duality "
              "or checked as an inequality.",
              "* *Proven for all sizes*: the trusted kernel matched the step, with symbolic dimensions, against "
              "the statement of the lemma it cites (*Kernel* in a step's details); "  # the trusted kernel's label
              "every other step is checked at instances only.",
              "* *Fingerprint*: a hash of a derivation's start and every step's result.",
              *where, "* How each kind of step is checked:", "", *rst.indent(kinds), ""]
    return [*lines, ".. workbench-details:: What the verdicts mean; where and how each step is checked", "",
            *rst.indent(folded), ""]


# ---- the evidence file ---------------------------------------------------------------------


def step_record(step) -> dict:
    check = step.check
    return {"step": step.index, "kind": step.kind, "lemma": step.lemma.key, "lemma_number": str(step.lemma.number),
            "conditions": list(step.conditions), "float64_error": float(check.float64_error),
            "float64_instances": int(check.trials),
            "subchecks": {k: float(v) for k, v in (check.subchecks or {}).items()},
            "mpmath_error": None if check.mpmath_error is None else float(check.mpmath_error),
            "symbolic": check.symbolic}


def rule_record(entry) -> dict:
    return {"rule": entry.name, "mpmath_digits": getattr(engine, "MPMATH_DPS", 50),
            "derivations": [{"name": der.name, "title": der.title, "fingerprint": der.fingerprint(),
                             "steps": [step_record(s) for s in der.steps]} for der in entry.derivations]}


def write_evidence(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / EVIDENCE_DIR
    target.mkdir(parents=True, exist_ok=True)
    for entry in catalogue(app.config).rules.values():
        (target / f"{entry.name}.json").write_text(json.dumps(rule_record(entry), indent=1) + "\n")


class ProofStatusTotalsDirective(SphinxDirective):
    """``.. proof-status-totals::`` — over every derivation of the build's catalogue: how many steps the
    trusted kernel proved for all sizes and how many are checked at instances only (``Derivation.proof_status``)."""

    reads_catalogue = True  # prints from the catalogue: objects.read_order reads its page last

    has_content = False

    def run(self):
        total = {"for all sizes": 0, "at instances": 0}
        for der in catalogue(self.config).derivations.values():
            status = der.proof_status()
            for key in total:
                total[key] += status[key]
        text = (f"Steps of every rule module's derivations (a derivation two modules share counted once; the "
                f"classics below not included): {total['for all sizes']} proven for all sizes, "
                f"{total['at instances']} checked at instances only.")
        return rst.parse(self, [rst.text(text), ""])
