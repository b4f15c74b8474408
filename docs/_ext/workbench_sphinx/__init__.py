"""Sphinx extension: the workbench's live objects as proof pages.

Directives (each renders objects imported and built while the docs build, never stored text):

* ``.. derivation:: halfsplit.query``, ``.. rule-derivations:: halfsplit`` — theorems and proofs;
* ``.. emitted-functions:: halfsplit``, ``.. emitted-listing:: halfsplit`` — the emitted JAX code (the listing
  page of every rule module is written by the build, :mod:`.pages`);
* ``.. other-rules::`` — the derivations and emitted functions of every rule module without a page of its own;
* ``.. lemma-reference::`` — every lemma with its self-check and its users;
* ``.. schedule:: polar-express-5``, ``.. schedule-comparison::``, ``.. band-challenge::`` —
  Newton–Schulz schedules, certified while the docs build;
* ``.. classics::`` — the classic results, each checked during the build;
* ``.. executed::`` — example code run during the build.

The search page shows a snippet under each result on a site opened from disk (:mod:`.search`).

An unknown name, a derivation that fails its checks, an object without a page, a public name
without an API entry, or a page that loads an asset from a URL stops the build with a message
naming it.

Math renders offline with MathJax 3, copied into the site from the ``sphinx-mathjax-offline``
wheel: it installs with pip like every other dependency (no npm, no network when building or
reading) and typesets the full LaTeX the printers emit.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives as rst_directives
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective
from sphinx.util.fileutil import copy_asset

from . import api, checks, classics, commands, evidence, execute, notation, objects, pages, proofs, schedules, search

MATHJAX_DIR = "mathjax"
#: the parts of the MathJax distribution the site needs (the TeX-to-CHTML build and what it loads)
_MATHJAX_PARTS = ("tex-chtml.js", "input", "output", "ui", "a11y", "adaptors", "sre")
_STATIC = Path(__file__).parent / "static"


def mathjax_source() -> Path:
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError("the MathJax files come from the sphinx-mathjax-offline package: "
                             "pip install -e '.[docs]'")
    return Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"


def _config_mathjax(app, config):
    mathjax_source()  # fail early, with the install command, when the package is missing
    config.mathjax_path = f"{MATHJAX_DIR}/tex-chtml.js"


def _copy_assets(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    source = mathjax_source()
    target = Path(app.outdir) / "_static" / MATHJAX_DIR
    for part in _MATHJAX_PARTS:
        path = source / part
        if path.is_dir():
            copy_asset(str(path), str(target / part))
        else:
            target.mkdir(parents=True, exist_ok=True)
            copy_asset(str(path), str(target))
    copy_asset(str(_STATIC), str(Path(app.outdir) / "_static"))


class details(nodes.General, nodes.Element):
    """A foldable block: ``<details><summary>…</summary>…</details>`` in HTML, plain elsewhere."""


def _visit_details_html(self, node):
    self.body.append(f'<details class="workbench-details"><summary>{self.encode(node["summary"])}</summary>')


def _depart_details_html(self, node):
    self.body.append("</details>")


def _visit_plain(self, node):
    pass


def _depart_plain(self, node):
    pass


class DetailsDirective(SphinxDirective):
    """``.. workbench-details:: SUMMARY`` — its content folded under a one-line summary."""

    has_content = True
    required_arguments = 1
    final_argument_whitespace = True
    option_spec = {"class": rst_directives.class_option}

    def run(self):
        node = details(summary=self.arguments[0])
        self.state.nested_parse(self.content, self.content_offset, node)
        return [node]


#: every directive of the extension by name; a class's ``reads_catalogue`` or ``runs_code`` orders the reading of
#: pages (:func:`~workbench_sphinx.objects.read_order`)
DIRECTIVES = {
    "workbench-details": DetailsDirective,
    "symbol-table": notation.SymbolTableDirective,
    "command-tour": commands.CommandTourDirective,
    "command-output": commands.CommandOutputDirective,
    "other-rules": proofs.OtherRulesDirective,
    "derivation": proofs.DerivationDirective,
    "rule-derivations": proofs.RuleDerivationsDirective,
    "emitted-functions": proofs.EmittedFunctionsDirective,
    "emitted-listing": proofs.EmittedListingDirective,
    "lemma-reference": proofs.LemmaReferenceDirective,
    "schedule": schedules.ScheduleDirective,
    "schedule-comparison": schedules.ScheduleComparisonDirective,
    "band-challenge": schedules.BandChallengeDirective,
    "executed": execute.ExecutedDirective,
    "api-reference": api.ApiReferenceDirective,
    "classics": classics.ClassicsDirective,
    "proof-status-totals": evidence.ProofStatusTotalsDirective,
}

def setup(app):
    app.add_config_value("workbench_rule_modules", [], "env")
    app.add_config_value("workbench_api_packages", [], "env")
    app.add_config_value("workbench_require_complete", True, "env")
    app.add_config_value("workbench_listing_pages", False, "env")  # write listings/<rule>.rst (pages.py)
    app.add_config_value("workbench_derivation_workers", 2, "")  # processes building the rule modules (0: none)
    app.add_config_value("workbench_band_challenge",
                         {"steps": 5, "band": [0.7, 1.3], "lowers": ["1e-2", "1e-3"], "upper": "1"}, "env")

    app.add_node(details, html=(_visit_details_html, _depart_details_html), latex=(_visit_plain, _depart_plain),
                 text=(_visit_plain, _depart_plain), man=(_visit_plain, _depart_plain),
                 texinfo=(_visit_plain, _depart_plain))
    for name, cls in DIRECTIVES.items():
        app.add_directive(name, cls)

    app.connect("config-inited", _config_mathjax)
    app.connect("builder-inited", schedules.start_build)
    app.connect("builder-inited", pages.write_listing_pages)
    app.connect("env-before-read-docs", functools.partial(objects.preload, directives=DIRECTIVES))
    app.connect("env-purge-doc", checks.purge)
    app.connect("env-merge-info", checks.merge)
    app.connect("env-check-consistency", checks.check_consistency)
    app.connect("autodoc-skip-member", api.skip_front_door_member)
    app.connect("autodoc-process-docstring", api.own_data_docstring, priority=400)  # before napoleon's
    app.connect("doctree-read", api.drop_long_values)
    app.connect("html-page-context", api.no_navigation_on_source_pages, priority=400)  # before the theme's
    app.connect("build-finished", schedules.stop_band_challenge)
    app.connect("build-finished", objects.stop_workers)
    app.connect("html-page-context", search.add_search_scripts)
    app.connect("build-finished", _copy_assets)
    app.connect("build-finished", search.write_texts)
    app.connect("build-finished", evidence.write_evidence)
    app.connect("build-finished", checks.check_site, priority=900)
    app.add_css_file("workbench.css")
    app.add_js_file("math-ready.js", loading_method="defer")
    return {"version": "1", "parallel_read_safe": False, "parallel_write_safe": True}
