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

from derivations import classics as classic_results
from derivations.engine.latex import latex

from . import rst
from .evidence import legend
from .notation import condition_rst, tidy_latex
from .objects import FailedDerivation, catalogue
from .proofs import lemma_ref, mark_rendered, step_rst


def classics() -> tuple:
    return tuple(classic_results.CLASSICS)


def _lemma(lemma, documented) -> str:
    if lemma.key in documented:
        return lemma_ref(lemma)
    return rst.text(f"Lemma {lemma.number}: {lemma.title}")


def classic_derivation_rst(der, documented, classic_title: str = "") -> list[str]:
    """One classic derivation: start, steps (lemma, side conditions, check) and result."""
    out = [] if der.title == classic_title else [rst.text(der.title), "~" * (len(rst.text(der.title)) + 4), ""]
    out += [f"{rst.literal(der.name)} — {condition_rst(der.statement)}.", "", "**Starting from**", "",
            *rst.math_block(tidy_latex(latex(der.start.expr)))]
    for step in der.steps:
        rel = r"\le" if step.kind == "bound" else "="
        last = step is der.steps[-1] and latex(step.after.expr) == latex(der.formula)   # the result says it
        after = None if last else rf"{rel}\ {tidy_latex(latex(step.after.expr))}"
        out += step_rst(step, der, after, _lemma(step.lemma, documented), where="the result stated below")
    relation = r"\le" if any(s.kind == "bound" for s in der.steps) else "="
    out += ["**Result**", "", *rst.math_block(tidy_latex(rf"{latex(der.start.expr)} {relation} {latex(der.formula)}")),
            "Cross-check a hand formula against it: "
            f"{rst.literal(f'python -m derivations.crosscheck {der.name} FORMULA')}.",
            ""]
    return out


class ClassicsDirective(SphinxDirective):
    reads_catalogue = True  # prints from the catalogue: objects.read_order reads its page last
    has_content = False

    def run(self):
        documented = {lem.key for lem in catalogue(self.config).lemmas()}
        lines = legend()
        for classic in classics():
            holds, evidence = classic.check()
            if not holds:
                raise FailedDerivation(f"classic {classic.name} ({classic.title}) does not hold: {evidence}")
            mark_rendered(self.env, "classic", classic.name)
            title = rst.text(classic.title)
            lines += [f".. _classic-{rst.label(classic.name)}:", "", title, "-" * (len(title) + 4), "",
                      f"{rst.literal(classic.name)}: {condition_rst(classic.statement)}", "",
                      f"**Checked while these pages were built:** holds — {condition_rst(evidence)}.", ""]
            for der in classic.derivations():
                lines += classic_derivation_rst(der, documented, classic.title)
        return rst.parse(self, lines)
