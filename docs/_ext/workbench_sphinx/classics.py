"""``.. classics::`` — the classic results hand derivations lean on, each a checked derivation.

Reads :data:`derivations.classics.CLASSICS`. Every classic is re-checked while the page is built
(every step in float64 and at 50 digits, then its extra check: competitors, the crossover, a
worked example); a classic that does not hold stops the build with its name and the failing step.
Each derivation is shown like the rule pages show theirs: the start, then one entry per step with
its result (``=``, or ``≤`` for a bound), the lemma (linked to the lemma reference), the side
conditions it discharged and the check that backed it.
"""

from __future__ import annotations

from sphinx.util.docutils import SphinxDirective

from . import rst
from .objects import FailedDerivation, catalogue


def classics() -> tuple:
    from derivations import classics as module
    return tuple(module.CLASSICS)


def _lemma(lemma, documented) -> str:
    from .proofs import lemma_ref
    if lemma.key in documented:
        return lemma_ref(lemma)
    return rst.text(f"Lemma {lemma.number}: {lemma.title}")


def classic_derivation_rst(der, documented) -> list[str]:
    """One classic derivation: start, steps (lemma, side conditions, check) and result."""
    from derivations.printing.latex import latex

    from .proofs import check_lines
    out = [rst.text(der.title), "~" * (len(rst.text(der.title)) + 4), "",
           f"{rst.literal(der.name)} — {rst.text(der.statement)}.", "", "**Starting from**", "",
           *rst.math_block(latex(der.start.expr))]
    for step in der.steps:
        rel = r"\le" if step.kind == "bound" else "="
        note = f" — {rst.text(step.note)}" if step.note else ""
        item = [f"**Step {step.index}** ({rst.text(step.kind)}): {_lemma(step.lemma, documented)}{note}.", "",
                *rst.math_block(rf"{rel}\ {latex(step.after.expr)}")]
        if step.conditions:
            item += ["Side conditions discharged:", ""] + [f"* {rst.text(c)}" for c in step.conditions] + [""]
        else:
            item += ["Side conditions discharged: none.", ""]
        if step.kind == "bound":
            item += [f"* {rst.text('How: both sides evaluated on random instances; the step holds when before ≤ after.')}"]
            item += check_lines(step, der, "classics")[1:3] + [""]
        else:
            item += ["Check:", "", *check_lines(step, der, "classics"), ""]
        out += [".. container:: workbench-step", "", *rst.indent(item)]
    relation = r"\le" if any(s.kind == "bound" for s in der.steps) else "="
    out += ["**Result**", "", *rst.math_block(rf"{latex(der.start.expr)} {relation} {latex(der.formula)}"),
            f"Cross-check a hand formula against it: {rst.literal(f'python -m derivations.crosscheck {der.name} FORMULA')}.",
            ""]
    return out


class ClassicsDirective(SphinxDirective):
    has_content = False

    def run(self):
        from .proofs import mark_rendered
        documented = {lem.key for lem in catalogue(self.config).lemmas()}
        lines = []
        for classic in classics():
            holds, evidence = classic.check()
            if not holds:
                raise FailedDerivation(f"classic {classic.name} ({classic.title}) does not hold: {evidence}")
            mark_rendered(self.env, "classic", classic.name)
            title = rst.text(classic.title)
            lines += [f".. _classic-{rst.label(classic.name)}:", "", title, "-" * (len(title) + 4), "",
                      f"{rst.literal(classic.name)}: {rst.text(classic.statement)}", "",
                      f"**Checked while these pages were built:** holds — {rst.text(evidence)}.", ""]
            for der in classic.derivations():
                lines += classic_derivation_rst(der, documented)
        return rst.parse(self, lines)
