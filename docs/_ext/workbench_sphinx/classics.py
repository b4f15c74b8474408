"""``.. classics::`` — the classic results hand derivations lean on, each checked during the build.

Reads :data:`derivations.classics.CLASSICS`; every entry's check runs while the page is built and
its evidence is shown. A check that does not hold stops the build with the entry's name.
"""

from __future__ import annotations

from sphinx.util.docutils import SphinxDirective

from . import rst
from .objects import FailedDerivation


def classics() -> tuple:
    from derivations import classics as module
    return tuple(module.CLASSICS)


class ClassicsDirective(SphinxDirective):
    has_content = False

    def run(self):
        from .proofs import mark_rendered
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
        return rst.parse(self, lines)
