"""The Sphinx extension that prints the docs from the live objects, and the built site.

The first group builds small Sphinx projects in a temporary directory (one cheap rule module),
so the default suite exercises every directive and every check that stops a build: an unknown
name, a derivation whose check fails, a broken tutorial example, an undocumented public name,
a missing page, and a page that loads an asset from a URL.

The second group tests the full site built by the README's command. It runs where
``WORKBENCH_DOCS_HTML`` names the built site (``.ci/run`` builds it after the suite and runs this
file again); the browser test needs Debian's ``chromium``, which ``.ci/run`` installs.
"""

from __future__ import annotations

import dataclasses
import functools
import html
import io
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("sphinx", reason="the docs extra is not installed (pip install -e '.[docs]')")
from sphinx.application import Sphinx
from sphinx.errors import SphinxError
from sphinx.util.docutils import docutils_namespace, patch_docutils

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

from workbench_sphinx.api import resolve  # noqa: E402 (found through the sys.path entry above)
from workbench_sphinx.checks import external_assets, has_docstring, public_api  # noqa: E402 (as above)
from workbench_sphinx.objects import Catalogue, FailedDerivation  # noqa: E402 (as above)
from workbench_sphinx.pages import MARK, listing_page, proof_page, write_listing_pages  # noqa: E402 (as above)
from workbench_sphinx.proofs import ends_at_result, state_latex, tex, theorem_result  # noqa: E402 (as above)

from derivations import classics, registry  # noqa: E402 (after the docs extension's path, as above)
from derivations import lemmas as L  # noqa: E402 (as above)
from derivations.engine.derivation import Solution  # noqa: E402 (as above)
from derivations.engine.latex import latex  # noqa: E402 (as above)

CONF = """
import sys
sys.path.insert(0, {ext!r})
sys.path.insert(0, {extra!r})
extensions = ["sphinx.ext.autodoc", "sphinx.ext.mathjax", "sphinx_proof", "workbench_sphinx"]
html_theme = "furo"
workbench_rule_modules = {modules!r}
workbench_api_packages = {api!r}
workbench_require_complete = {complete!r}
workbench_band_challenge = {{}}
workbench_derivation_workers = 0  # the suite's process has the rule modules built already
workbench_listing_pages = {listings!r}
"""

PLANTED_RULE = '''
"""A rule module whose one derivation applies a lemma that drops a transpose."""
from sympy.matrices.expressions import MatrixSymbol

from derivations import Context, identity_chain
from derivations.vocabulary.algebra import product, transpose
from derivations.lemmas import Lemma
from derivations.vocabulary.nodes import dimension

n = dimension("n")
A, B = MatrixSymbol("A", n, n), MatrixSymbol("B", n, n)

DROP_TRANSPOSE = Lemma(key="planted_drop_transpose", number="P", title="planted: Aᵀ = A",
                       statement=r"A^{\\top} = A",
                       rewrite=lambda e, **_: (e.xreplace({transpose(A): A}), []))


def derivations():
    der = identity_chain("planted.wrong", "A false identity", product(transpose(A), B),
                         Context(check_dims=[{n: 3}, {n: 4}]))
    der.apply(DROP_TRANSPOSE)
    return [der]


def rule_module():
    from derivations.engine.rule import RuleModule
    return RuleModule(name="planted", title="planted", derivations=derivations, functions=lambda: [],
                      scalars={})
'''


def build(tmp_path, pages: dict, modules=("derivations.sylvester",), api=(), complete=False, extra=None,
          listings=False):
    """Build a small project with ``-W``; returns the output directory."""
    src = tmp_path / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "conf.py").write_text(CONF.format(ext=str(ROOT / "docs" / "_ext"), extra=str(extra or tmp_path),
                                             modules=list(modules), api=list(api), complete=complete,
                                             listings=listings))
    toc = "\n".join(f"   {name}" for name in pages if name != "index")
    (src / "index.rst").write_text(f"Test\n====\n\n.. toctree::\n\n{toc}\n\n" + pages.get("index", ""))
    for name, body in pages.items():
        if name != "index":
            (src / f"{name}.rst").parent.mkdir(parents=True, exist_ok=True)
            (src / f"{name}.rst").write_text(textwrap.dedent(body))
    out = tmp_path / "html"
    with patch_docutils(str(src)), docutils_namespace():   # as sphinx-build does: no state between builds
        app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=io.StringIO(),
                     warning=io.StringIO(), warningiserror=True, freshenv=True)
        app.build()
    if app.statuscode:
        raise SphinxError(app._warning.getvalue() if hasattr(app, "_warning") else "build failed")
    return out


def _plain(html: str) -> str:
    import html as html_module
    return html_module.unescape(re.sub(r"<[^>]+>", "", html))


def test_directives_render_live_objects(tmp_path):
    page = """
    Sylvester
    =========

    .. derivation:: sylvester.adjoint

    .. derivation:: sylvester.achieved_change

    .. emitted-functions:: sylvester

    .. schedule:: muon

    .. executed::

       from derivations import sylvester
       print("steps:", len(sylvester.derivations()[0].steps))
    """
    pages = {"page": page, "lemmas": "Lemmas\n======\n\n.. lemma-reference::\n\n.. proof-status-totals::\n",
             "listings/sylvester": "Listing\n=======\n\n.. emitted-listing:: sylvester\n"}
    out = build(tmp_path, pages)
    html = (out / "page.html").read_text()
    from derivations import sylvester
    der = sylvester.derivations()[0]
    assert 'id="derivation-sylvester-adjoint"' in html
    assert der.fingerprint() in html                      # printed from the live object
    steps = sum(len(d.steps) for d in sylvester.derivations())     # the page shows both derivations
    assert len(re.findall(r'class="[^"]*\bworkbench-step\b', html)) == steps
    for step in der.steps:                                 # each lemma linked to its reference entry
        assert f'href="lemmas.html#lemma-{step.lemma.key.replace("_", "-")}"' in html
    lemma_page = _plain((out / "lemmas.html").read_text())
    assert "sylvester.adjoint" in lemma_page                                 # "used by"
    proven = sum(d.proof_status()["for all sizes"] for d in sylvester.derivations())
    checked = sum(d.proof_status()["at instances"] for d in sylvester.derivations())
    assert f"{proven} proven for all sizes, {checked} checked at instances only" in " ".join(lemma_page.split())
    text = _plain(html)
    assert "def sylvester_qk(" in text and 'href="listings/sylvester.html"' in html
    assert f"steps: {len(der.steps)}" in text              # the example ran during the build
    assert "3.4445" in text and "schedule-muon.png" in html
    assert (out / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert external_assets(out) == []


@pytest.mark.parametrize("directive, name, known", [
    ("derivation", "sylvester.nope", "sylvester.adjoint"),
    ("schedule", "polar-express-6", "polar-express-5"),
    ("emitted-functions", "nosuchrule", "sylvester"),
])
def test_unknown_name_stops_the_build_and_lists_known_names(tmp_path, directive, name, known):
    with pytest.raises(SphinxError) as err:
        build(tmp_path, {"page": f"Page\n====\n\n.. {directive}:: {name}\n"})
    assert repr(name) in str(err.value) and known in str(err.value)


def test_failing_derivation_stops_the_build_naming_it(tmp_path):
    (tmp_path / "planted_rule.py").write_text(PLANTED_RULE)
    with pytest.raises(SphinxError) as err:
        build(tmp_path, {"page": "Page\n====\n\n.. derivation:: planted.wrong\n"}, modules=("planted_rule",))
    message = str(err.value)
    assert "planted.wrong" in message and "planted_rule" in message


def test_classic_that_does_not_hold_stops_the_build(tmp_path, monkeypatch):
    from derivations import classics
    planted = classics.Classic("classics.planted", "Planted", "1 = 2", lambda: (False, "1 - 2 = -1"))
    monkeypatch.setattr(classics, "CLASSICS", (planted,))
    with pytest.raises(SphinxError, match=r"classic classics\.planted \(Planted\) does not hold: 1 - 2 = -1"):
        build(tmp_path, {"page": "Page\n====\n\n.. classics::\n"})


def test_broken_example_stops_the_build(tmp_path):
    page = "Tutorial\n========\n\n.. executed::\n\n   x = 1\n   assert x == 2, 'the example is stale'\n"
    with pytest.raises(SphinxError, match=r"tutorial\.rst, line \d+: .*AssertionError: the example is stale"):
        build(tmp_path, {"tutorial": page})


def test_undocumented_public_name_stops_the_build(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    pkg = tmp_path / "planted_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""Planted package."""\n')
    (pkg / "mod.py").write_text('"""Module."""\n\n\ndef documented():\n    """Has a docstring."""\n\n\n'
                                'def undocumented():\n    pass\n')
    assert public_api("planted_pkg") == ["planted_pkg.mod.documented", "planted_pkg.mod.undocumented"]
    page = "API\n===\n\n.. api-reference:: planted_pkg\n"
    with pytest.raises(SphinxError, match=r"1 public names have no API reference entry or no docstring"
                                          r".*: planted_pkg\.mod\.undocumented$"):
        build(tmp_path, {"api": page}, api=["planted_pkg"])
    (pkg / "mod.py").write_text('"""Module."""\n\n\ndef documented():\n    """Has a docstring."""\n')
    monkeypatch.delitem(sys.modules, "planted_pkg.mod")
    out = build(tmp_path, {"api": page}, api=["planted_pkg"])        # documented: the build passes
    assert 'id="planted_pkg.mod.documented"' in (out / "api.html").read_text()


FRONT_DOOR_PAGE = """
API
===

.. automodule:: planted_door
   :no-members:

.. api-reference:: planted_door

``planted_door.mod``
--------------------

.. automodule:: planted_door.mod
   :members:
"""
#: what autodoc alone offers for a front door: its automodule documents a re-exported constant only where the
#: package's own source has the ``#:`` comment (Sphinx documents a module's data only with an attribute comment)
AUTODOC_FRONT_DOOR = ".. automodule:: planted_door\n   :members:\n   :imported-members:\n"


def test_a_front_door_documents_its_constants_once_where_autodoc_alone_drops_them(tmp_path, monkeypatch):
    """``.. api-reference::`` gives every name of a package's ``__all__`` one entry, a re-exported constant with the
    ``#:`` comment from where it is defined included; the module section skips them. Planted: autodoc's own
    ``automodule`` of the package in its place documents the function but drops the constant, without a warning
    (why the docs keep the directive; the coverage check would stop the site's build naming each such constant)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    pkg = tmp_path / "planted_door"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""Planted front door."""\n\nfrom .mod import LIMIT, documented\n\n'
                                     '__all__ = ["documented", "LIMIT"]\n')
    (pkg / "mod.py").write_text('"""Module."""\n\n#: the planted limit\nLIMIT = 3\n\n\n'
                                'def documented():\n    """Has a docstring."""\n\n\ndef own():\n    """Its own."""\n')
    html_text = (build(tmp_path / "door", {"api": FRONT_DOOR_PAGE}, api=["planted_door"]) / "api.html").read_text()
    assert 'id="planted_door.documented"' in html_text and 'id="planted_door.LIMIT"' in html_text
    assert "the planted limit" in html_text and 'id="planted_door.mod.own"' in html_text
    assert 'id="planted_door.mod.documented"' not in html_text and 'id="planted_door.mod.LIMIT"' not in html_text
    autodoc_page = FRONT_DOOR_PAGE.replace(".. automodule:: planted_door\n   :no-members:\n\n.. api-reference:: "
                                           "planted_door\n", AUTODOC_FRONT_DOOR)
    assert AUTODOC_FRONT_DOOR in autodoc_page
    autodoc_html = (build(tmp_path / "autodoc", {"api": autodoc_page}) / "api.html").read_text()   # -W: no warning
    assert 'id="planted_door.documented"' in autodoc_html and 'id="planted_door.LIMIT"' not in autodoc_html


def test_two_lemmas_with_one_number_stop_the_build_naming_both(monkeypatch):
    """The lemma reference heads each lemma "Lemma <number>: <title>": a second lemma with a number in use stops
    the build instead of printing two headings alike."""
    twin = dataclasses.replace(L.RING, key="planted_twin", title="planted twin")
    monkeypatch.setattr(L, "ALL_LEMMAS", (*L.ALL_LEMMAS, twin))
    with pytest.raises(FailedDerivation, match=r"lemma number 'R' is declared twice: Lemma R \(ring: .*\) and "
                                               r"Lemma R \(planted_twin: planted twin\)"):
        Catalogue([]).lemmas()
    monkeypatch.setattr(L, "ALL_LEMMAS", (*L.ALL_LEMMAS[:-1], dataclasses.replace(twin, number="R9")))
    assert "planted_twin" in {lem.key for lem in Catalogue([]).lemmas()}


LISTINGS_INDEX = "Listings\n========\n\n.. toctree::\n   :glob:\n\n   *\n"


def test_every_rule_module_gets_its_listing_page_written_by_the_build(tmp_path):
    """No listing page is written by hand: the build writes one for every rule module it prints, which the rule
    pages link to; without it a page that shows a rule's emitted functions links to nothing (the build stops)."""
    pages = {"page": "Page\n====\n\n.. emitted-functions:: sylvester\n", "listings/index": LISTINGS_INDEX}
    with pytest.raises(SphinxError, match=r"unknown document: '/listings/sylvester'"):
        build(tmp_path / "without", pages)
    out = build(tmp_path / "with", pages, listings=True)
    written = (tmp_path / "with" / "src" / "listings" / "sylvester.rst").read_text()
    assert written == listing_page("sylvester") and written.startswith(MARK)
    assert 'href="listings/sylvester.html"' in (out / "page.html").read_text()
    assert "def sylvester_qk(" in _plain((out / "listings" / "sylvester.html").read_text())


def test_written_listing_pages_follow_the_rule_modules_and_leave_hand_written_pages_alone(tmp_path):
    (tmp_path / "listings").mkdir()
    (tmp_path / "listings" / "gone.rst").write_text(listing_page("gone"))       # a rule module that is gone
    (tmp_path / "listings" / "notes.rst").write_text("Notes\n=====\n")           # a page someone wrote
    (tmp_path / "listings" / "halfsplit.rst").write_text(listing_page("halfsplit").replace("JAX", "old"))
    app = SimpleNamespace(srcdir=tmp_path, config=SimpleNamespace(workbench_listing_pages=True,
                                                                  workbench_rule_modules=[]))
    write_listing_pages(app)
    found = sorted(p.stem for p in (tmp_path / "listings").glob("*.rst"))
    assert found == sorted([*registry.rule_names(), "notes"])
    assert (tmp_path / "listings" / "halfsplit.rst").read_text() == listing_page("halfsplit")
    assert (tmp_path / "listings" / "notes.rst").read_text() == "Notes\n=====\n"


def test_missing_page_stops_the_build(tmp_path):
    with pytest.raises(SphinxError, match=r"no page renders: .*derivation sylvester\.achieved_change"):
        build(tmp_path, {"page": "Page\n====\n\n.. derivation:: sylvester.adjoint\n"}, complete=True)


def test_external_assets_are_found_and_links_are_not(tmp_path):
    (tmp_path / "a.html").write_text(
        '<html><head><script src="https://cdn.example.org/mathjax.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.org/x.css"><link rel="next" href="https://example.org/">'
        '<style>@font-face { src: url("https://example.org/f.woff2") }</style></head>'
        '<body><a href="https://example.org/paper">paper</a><img src="_images/plot.png">'
        '<script src="_static/mathjax/tex-chtml.js"></script></body></html>')
    (tmp_path / "s.css").write_text('@import "https://example.org/more.css"; .x { background: url(local.png) }')
    found = sorted(external_assets(tmp_path))
    assert found == [("a.html", "//fonts.example.org/x.css"), ("a.html", "https://cdn.example.org/mathjax.js"),
                     ("a.html", "https://example.org/f.woff2"), ("s.css", "https://example.org/more.css")]


def test_assets_after_an_inline_script_are_found_and_script_text_is_not_markup(tmp_path):
    (tmp_path / "a.html").write_text(
        '<html><head><script>var s = "<img src=\'https://example.org/in-a-string.png\'>";</script>'
        '<!-- <script src="https://example.org/commented.js"></script> --></head><body>'
        '<span data-x="a > b" style="background: url(//example.org/bg.png)">x</span>'
        '<script src="https://cdn.example.org/after.js"></script><img alt=\'x\' src="https://example.org/i.png">'
        '</body></html>')
    assert sorted(external_assets(tmp_path)) == [("a.html", "//example.org/bg.png"),
                                                  ("a.html", "https://cdn.example.org/after.js"),
                                                  ("a.html", "https://example.org/i.png")]


# ---- the full site (built by the README's command) ------------------------------------------

SITE = os.environ.get("WORKBENCH_DOCS_HTML")
needs_site = pytest.mark.skipif(not SITE, reason="the full site is tested after it is built: .ci/run sets "
                                                 "WORKBENCH_DOCS_HTML=docs/_build/html")


@needs_site
def test_site_has_a_page_for_every_derivation():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    from workbench_sphinx.objects import Catalogue, default_rule_modules, load_rule
    site = Path(SITE)
    catalogue = Catalogue(default_rule_modules())
    for path in default_rule_modules():
        entry = load_rule(path)
        page = (site / "rules" / f"{entry.name}.html").read_text()
        text = html.unescape(re.sub(r"<[^>]+>", "", page))  # signatures are highlighted: tags between tokens
        for fn in entry.functions:
            assert f"def {fn.name}(" in text, (entry.name, fn.name)
        for der in entry.derivations:
            home = catalogue.home(der)  # the name's prefix, or the first rule module that lists it
            target = (site / "rules" / f"{home}.html").read_text()
            label = "derivation-" + re.sub(r"[^a-z0-9]+", "-", der.name.lower())
            assert f'id="{label}"' in target, der.name


@needs_site
def test_site_loads_no_external_assets():
    assert external_assets(SITE) == []
    assert (Path(SITE) / "_static" / "mathjax" / "tex-chtml.js").is_file()


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _visible_text(dom: str) -> str:
    dom = re.sub(r"(?is)<(script|style|mjx-container|noscript)\b.*?</\1>", " ", dom)
    return re.sub(r"<[^>]+>", " ", dom)


#: a proof page's budget, in the words of its own content (its ``<article>``: the navigation sidebar, the same on
#: every page, left out) and in its rendered height at 1280 px wide, derived from what it prints, with nothing per
#: page (a new rule module's section of ``rules/other``, or its own page, gets its budget with nothing added)::
#:
#:     words <= 78 D + 29.3 S + 106 F + 1.55 P + 0.9 T
#:     px    <= max(1750, 765 + 322 D + 92 S + 251 F + 2.79 P)
#:
#: D: the derivations the page proves (those whose home is one of its rule modules), S: their steps, F: its rule
#: modules' emitted functions, P: the words of the page's reST source (directive lines and heading underlines left
#: out) and of its rule modules' descriptions, T: the words of the LaTeX of the formulas its proofs show. The
#: coefficients are the smallest worst ratio of budget to length over the pages as they were when the formula
#: replaced the hand-kept limits (those lengths plus about 2 %): no page's budget was more than 1.24 times its length
#: in words or 1.26 times in px; 1750 px is the height of the navigation. A page measured before the proof pages were
#: shortened is also held to half its length then (:data:`BEFORE_SHORTENING`).
WORD_BUDGET = {"derivations": 78, "steps": 29.3, "functions": 106, "prose": 1.55, "tex": 0.9}
HEIGHT_BUDGET = {"page": 765, "derivations": 322, "steps": 92, "functions": 251, "prose": 2.79}
MIN_HEIGHT = 1750
#: (article words, px) of the proof pages before they were shortened (evidence folded, one legend per page),
#: measured on a build of that commit: each is held to half of it
BEFORE_SHORTENING = {
    "rules/halfsplit.html": (6524, 19646), "rules/gqa.html": (4178, 10812), "rules/damped.html": (3099, 9898),
    "rules/hybrid_ov.html": (2841, 7821), "rules/balance.html": (2799, 8928), "rules/gauge.html": (2309, 8409),
    "rules/joint.html": (2779, 8449), "rules/sylvester.html": (1138, 4015), "classics.html": (4496, 18117),
}
#: lines of a page's reST source that are not its own prose: the directives that print the objects, heading underlines
_NOT_PROSE = re.compile(r"^\s*\.\. (rule-derivations|emitted-functions|other-rules|classics)::|^[=\-~]+$")


def source_words(path: Path) -> int:
    """The words of a page's own reST source (:data:`_NOT_PROSE` lines left out)."""
    return sum(len(line.split()) for line in path.read_text(encoding="utf-8").splitlines()
               if not _NOT_PROSE.match(line))


def shown_tex_words(der) -> int:
    """The words of the LaTeX of every formula a derivation's theorem and proof show: its start, its result, and
    each step's result (the last one only where it is not the result)."""
    shown = [tex(state_latex(der.start))]
    if der.steps:
        shown.append(tex(theorem_result(der)) if isinstance(der.state, Solution) else tex(latex(der.formula)))
    last = der.steps[-1] if ends_at_result(der) else None
    shown += [tex(state_latex(step.after)) for step in der.steps if step is not last]
    return sum(len(t.split()) for t in shown)


def proof_page_contents(modules: dict, srcdir: Path = ROOT / "docs") -> dict[str, Counter]:
    """What each proof page prints, counted from ``modules`` (rule name → :class:`~derivations.RuleModule`; the
    registry's by default) and the page sources: its derivations, steps, functions, prose and TeX words. A rule
    module's page is :func:`~workbench_sphinx.pages.proof_page` (its own, else ``rules/other``); a derivation is
    counted on the page of its home (its name's prefix, else the first rule module that lists it), as printed."""
    ders = {name: list(module.derivations()) for name, module in modules.items()}

    def home(der) -> str:
        prefix = der.name.split(".")[0]
        return prefix if prefix in ders else next(n for n in ders if any(d.name == der.name for d in ders[n]))

    out = {"rules/other.html": Counter(prose=source_words(srcdir / "rules" / "other.rst"))}
    for name, module in modules.items():
        page = proof_page(srcdir, name)
        counts = out.setdefault(f"{page}.html", Counter(prose=source_words(srcdir / f"{page}.rst")))
        own = [der for der in ders[name] if home(der) == name]
        counts.update(derivations=len(own), steps=sum(len(d.steps) for d in own), functions=len(module.functions()),
                      prose=len((module.description or module.title).split()),
                      tex=sum(shown_tex_words(d) for d in own))
    classic_ders = classics.derivations()
    out["classics.html"] = Counter(prose=source_words(srcdir / "classics.rst"), derivations=len(classic_ders),
                                   steps=sum(len(d.steps) for d in classic_ders),
                                   tex=sum(shown_tex_words(d) for d in classic_ders))
    return out


def page_budget(page: str, counts: Counter) -> tuple[int, int]:
    """``(words, px)`` a proof page may reach: :data:`WORD_BUDGET` and :data:`HEIGHT_BUDGET` of what it prints,
    and at most half its length before the pages were shortened (:data:`BEFORE_SHORTENING`)."""
    words = math.floor(sum(c * counts[k] for k, c in WORD_BUDGET.items()))
    px = max(MIN_HEIGHT, math.floor(HEIGHT_BUDGET["page"] + sum(c * counts[k] for k, c in HEIGHT_BUDGET.items()
                                                                 if k != "page")))
    before = BEFORE_SHORTENING.get(page)
    return (words, px) if before is None else (min(words, before[0] // 2), min(px, before[1] // 2))


@functools.cache
def proof_page_budgets() -> dict[str, tuple[int, int]]:
    """Every proof page of the site and its budget, from the rule modules :mod:`derivations.registry` finds."""
    modules = {name: registry.rule_module(name) for name in registry.rule_names()}
    return {page: page_budget(page, counts) for page, counts in proof_page_contents(modules).items()}


def test_a_new_rule_module_gets_its_budget_with_nothing_added(tmp_path):
    """A rule module without a page of its own (here ``tied_embeddings``, in a docs source that has only the
    sylvester page) is counted on ``rules/other``; given a page, on that page."""
    (tmp_path / "rules").mkdir()
    for page in ("rules/other.rst", "rules/sylvester.rst", "classics.rst"):
        shutil.copy(ROOT / "docs" / page, tmp_path / page)
    modules = {name: registry.rule_module(name) for name in ("sylvester", "tied_embeddings")}
    contents = proof_page_contents(modules, tmp_path)
    assert set(contents) == {"rules/sylvester.html", "rules/other.html", "classics.html"}
    other = contents["rules/other.html"]
    assert (other["derivations"], other["steps"], other["functions"]) == (1, 1, 1) and other["tex"] > 0
    alone = proof_page_contents({"sylvester": modules["sylvester"]}, tmp_path)["rules/other.html"]
    assert page_budget("rules/other.html", other)[0] > page_budget("rules/other.html", alone)[0] + 200
    (tmp_path / "rules" / "tied_embeddings.rst").write_text("Tied\n====\n\n.. rule-derivations:: tied_embeddings\n")
    contents = proof_page_contents(modules, tmp_path)
    assert contents["rules/tied_embeddings.html"]["derivations"] == 1 and contents["rules/other.html"]["steps"] == 0


def test_a_page_measured_before_shortening_is_held_to_half_its_length():
    counts = Counter(derivations=100, steps=1000, functions=10)
    assert page_budget("rules/halfsplit.html", counts) == (6524 // 2, 19646 // 2)
    assert page_budget("rules/newrule.html", counts) > (6524, 19646)


def article(page: str) -> str:
    """A built page's own content: its ``<article>`` element (the navigation sidebar left out)."""
    start, end = page.find("<article"), page.find("</article>")
    assert 0 <= start < end, "the page has no <article> element"
    return page[start:end + len("</article>")]


def visible_words(page: str) -> int:
    """Words a reader sees on a built page before unfolding anything: the text of the whole page
    (navigation included, formulas as their TeX source), scripts and styles dropped, and the body of
    every folded ``<details>`` block dropped (its one-line ``<summary>`` is visible and counts)."""
    page = re.sub(r"(?is)<(script|style|noscript)\b.*?</\1>", " ", page)
    page = re.sub(r"(?is)(<details\b[^>]*>\s*<summary\b.*?</summary>).*?</details>", r"\1", page)
    return len(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_visible_words_count_summaries_and_skip_what_is_folded():
    page = ("<html><head><style>p { x: y }</style><script>var a = 1;</script></head><body><p>one two</p>"
            "<details class='d'><summary>three <b>four</b></summary><p>folded words here</p></details>"
            "<p>five &amp; six</p></body></html>")
    assert visible_words(page) == 7                       # one two three four five & six
    assert visible_words(page.replace("<details class='d'>", "<div>").replace("</details>", "</div>")) == 10


@needs_site
def test_browser_renders_the_math_of_the_half_split_page(tmp_path):
    chromium = _chromium()
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it with apt-get; it could not here)")
    page = (Path(SITE) / "rules" / "halfsplit.html").resolve()
    formulas = len(re.findall(r'class="math notranslate nohighlight"', page.read_text()))
    assert formulas > 20
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: everything must come from the site
             "--virtual-time-budget=60000", "--run-all-compositor-stages-before-draw", "--window-size=1280,1800"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=240,
                         check=True).stdout
    ready = re.search(r'data-math-rendered="(\d+)"', dom)
    assert ready, "MathJax never finished typesetting the page"
    rendered = len(re.findall(r"<mjx-container", dom))
    assert int(ready.group(1)) == rendered and rendered >= formulas
    # within its budget, in what a reader sees: words before unfolding, and height at 1280 px wide
    max_words, max_height = proof_page_budgets()["rules/halfsplit.html"]
    words = visible_words(article(page.read_text()))
    assert 1000 < words <= max_words, f"the half-split page shows {words} words before unfolding"
    height = re.search(r'data-page-height="(\d+)"', dom)
    assert height, "math-ready.js did not record the page's height"
    assert 2000 < int(height.group(1)) <= max_height, f"the half-split page is {height.group(1)} px tall"
    text = _visible_text(dom)
    for raw in ("\\(", "\\[", "$$", "\\begin{"):
        assert raw not in text, f"raw TeX {raw!r} left on the page"
    shot = Path(os.environ.get("WORKBENCH_SCREENSHOT", tmp_path / "halfsplit.png")).resolve()
    shot.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=240, check=True)
    assert shot.stat().st_size > 10_000


@needs_site
def test_browser_search_shows_snippets_on_a_site_opened_from_disk():
    """Sphinx fetches each result page for its snippet, which a browser refuses over file://; the page
    texts written with the site answer instead (docs/_ext/workbench_sphinx/search.py)."""
    chromium = _chromium()
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it with apt-get; it could not here)")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=60000", "--window-size=1280,1800"]
    search = (Path(SITE) / "search.html").resolve().as_uri() + "?q=whitened"
    dom = subprocess.run([*flags, "--dump-dom", search], capture_output=True, text=True, timeout=240,
                         check=True).stdout
    results = re.findall(r'(?s)<li class="kind-(\w+)">(.*?)</li>', dom)
    pages = [item for kind, item in results if kind != "object"]     # an API object shows its description
    snippets = [html.unescape(re.sub(r"<[^>]+>", "", s)) for s in re.findall(r'(?s)<p class="context">(.*?)</p>', dom)]
    assert pages, "the search found no page"
    assert len(snippets) == len(pages), f"{len(snippets)} snippets for {len(pages)} pages found"
    assert all("whiten" in s.lower() for s in snippets), snippets[:3]


def proof_pages(site: Path) -> list[str]:
    """Every page that prints derivations: the rule pages and the classics."""
    return sorted(f"rules/{page.name}" for page in (site / "rules").glob("*.html")) + ["classics.html"]


def page_height(chromium: str, path: Path) -> int:
    """The page's height in CSS px at 1280 px wide once MathJax has typeset it (recorded by math-ready.js)."""
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=60000",
             "--run-all-compositor-stages-before-draw", "--window-size=1280,1800"]
    dom = subprocess.run([*flags, "--dump-dom", path.resolve().as_uri()], capture_output=True, text=True,
                         timeout=240, check=True).stdout
    height = re.search(r'data-page-height="(\d+)"', dom)
    assert height, f"math-ready.js did not record the height of {path.name}"
    return int(height.group(1))


@needs_site
def test_no_proof_page_regrows():
    chromium = _chromium()
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it with apt-get; it could not here)")
    site = Path(SITE)
    pages = proof_pages(site)
    budgets = proof_page_budgets()
    assert set(pages) == set(budgets), f"proof pages and the pages the rule modules are printed on differ: " \
                                       f"{sorted(set(pages) ^ set(budgets))}"
    too_long = []
    for page in pages:
        max_words, max_px = budgets[page]
        words, px = visible_words(article((site / page).read_text())), page_height(chromium, site / page)
        if words > max_words or px > max_px:
            too_long.append(f"{page}: {words} words (at most {max_words}), {px} px (at most {max_px})")
    assert not too_long, "proof pages grew back: " + "; ".join(too_long)


#: one page of each kind: a rule page, the lemma reference, the classics, the newcomer pages (getting
#: started, the optimizer guide, the extension guides), the command tour, the notation page, an API page,
#: the tutorial notebook (its objects' Markdown outputs)
PAGES_OF_EACH_KIND = ("rules/halfsplit.html", "lemmas.html", "classics.html", "getting_started.html",
                      "optimizer.html", "extending.html", "commands.html", "notation.html", "api/derivations.html",
                      "tutorial.html")
#: markup that must never reach a reader: TeX outside typeset math, and reST that was not parsed
RAW_MARKUP = re.compile(r"\\(?:frac|operatorname|mathrm|left|right|top|bar|tilde|epsilon|lambda|begin)\b"
                        r"|[\^_]\{|:(?:math|ref|doc|func|class|mod|code):`|``|^\.\. [a-z-]+::|\\[()\[\]]",
                        re.MULTILINE)


def raw_markup(text: str) -> list[str]:
    """Raw TeX or reST in rendered text (code blocks and typeset math removed first)."""
    return sorted({m.group() for m in RAW_MARKUP.finditer(text)})


def test_raw_markup_is_found_in_text_and_not_in_prose():
    assert raw_markup("a step ^{-1/4} and :math:`x` and \\frac{1}{2}") == [":math:`", "\\frac", "^{"]
    assert raw_markup("W_Q has full column rank; ε/2 and ‖X‖_op ≤ 1") == []


def _rendered_text(dom: str) -> str:
    dom = re.sub(r"(?is)<(pre|code)\b.*?</\1>", " ", dom)                    # code is shown as written
    return html.unescape(_visible_text(dom))


@needs_site
@pytest.mark.parametrize("page", PAGES_OF_EACH_KIND)
def test_browser_shows_no_raw_latex_or_rst_on_a_page_of_each_kind(page):
    chromium = _chromium()
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it with apt-get; it could not here)")
    path = (Path(SITE) / page).resolve()
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=60000", "--window-size=1280,1800"]
    dom = subprocess.run([*flags, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=240,
                         check=True).stdout
    if 'class="math' in path.read_text():
        assert re.search(r'data-math-rendered="\d+"', dom), f"MathJax never finished typesetting {page}"
    found = raw_markup(_rendered_text(dom))
    assert not found, f"{page}: raw markup left in the rendered text: {found}"


def test_every_public_name_of_the_real_packages_has_a_docstring():
    """The API-coverage rule of the full build, checked without building (catches it in the suite)."""
    missing = [name for package in ("derivations", "coeffsearch", "numerics") for name in public_api(package)
               if not has_docstring(resolve(name))]
    assert not missing, f"public names without a docstring: {missing}"
