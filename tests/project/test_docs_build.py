"""The docs build: the tutorial as a notebook executed while it builds, search snippets offline, and the
read order that lets the derivations build while pages run their code.

* ``docs/tutorial.ipynb`` is a Jupyter notebook stored without outputs; MyST-NB runs it in a fresh kernel
  on every build, with the site's settings (read from ``docs/conf.py`` here), shows what each cell printed
  or displayed (an object's ``_repr_markdown_``, math included), and a cell that raises stops the build.
  One small project with a notebook page shows both.
* The search page's snippets come from the page texts written with the site
  (``docs/_ext/workbench_sphinx/search.py``), since a browser refuses the fetch Sphinx makes for them over
  ``file://``; the browser test of the built site (tests/project/test_docs.py) searches a word and sees a snippet.
* The catalogue of derivations is built in a background thread while the pages that run code and need no
  derivation are read first (``docs/_ext/workbench_sphinx/objects.py``); a page that needs it waits for it.
"""

from __future__ import annotations

import inspect
import io
import json
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

pytest.importorskip("myst_nb", reason="the docs extra is not installed (pip install -e '.[docs]')")
from myst_nb.core.execute.base import ExecutionError
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from sphinx.application import Sphinx
from sphinx.util.docutils import docutils_namespace, patch_docutils

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

from workbench_sphinx import DIRECTIVES, objects  # noqa: E402 (found through the sys.path entry above)
from workbench_sphinx.search import TEXTS_JS, page_text  # noqa: E402 (as above)

TUTORIAL = ROOT / "docs" / "tutorial.ipynb"


def site_notebook_settings() -> dict:
    """The MyST and MyST-NB settings of ``docs/conf.py`` (``nb_*``, ``myst_*``)."""
    namespace: dict = {"__file__": str(ROOT / "docs" / "conf.py")}
    exec(compile((ROOT / "docs" / "conf.py").read_text(), "docs/conf.py", "exec"), namespace)  # noqa: S102
    return {k: v for k, v in namespace.items() if k.startswith(("nb_", "myst_"))}


#: the small project: the site's extensions, one rule module without derivations, no band search
CONF = """
import sys
sys.path.insert(0, {ext!r})
sys.path.insert(0, {extra!r})
extensions = ["sphinx.ext.autodoc", "sphinx.ext.mathjax", "sphinx_proof", "myst_nb", "workbench_sphinx"]
html_theme = "furo"
workbench_rule_modules = ["norules_nb"]
workbench_require_complete = False
workbench_band_challenge = {{}}
"""
#: a rule module without derivations: the small project derives nothing
NO_RULES = """
from derivations.engine.rule import RuleModule


def rule_module():
    return RuleModule(name="norules", title="no rules", derivations=list, functions=list, scalars={})
"""


def build_notebook(tmp_path: Path, cells: list) -> Path:
    """Build a project of one notebook page with the site's notebook settings (``-W``); the output directory."""
    src = tmp_path / "src"
    src.mkdir()
    (tmp_path / "norules_nb.py").write_text(NO_RULES)
    settings = "".join(f"{k} = {v!r}\n" for k, v in site_notebook_settings().items())
    (src / "conf.py").write_text(CONF.format(ext=str(ROOT / "docs" / "_ext"), extra=str(tmp_path)) + settings)
    (src / "index.rst").write_text("Test\n====\n\n.. toctree::\n\n   notebook\n")
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"}})
    nbformat.write(nb, src / "notebook.ipynb")
    out = tmp_path / "html"
    with patch_docutils(str(src)), docutils_namespace():
        app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=io.StringIO(),
                     warning=io.StringIO(), warningiserror=True, freshenv=True)
        app.build()
    return out


SHOWS_ITSELF = '''
class Shows:
    def _repr_markdown_(self):
        return "**A problem** in $X$:\\n\\n$$\\\\min_X \\\\langle G, X \\\\rangle$$\\n"
Shows()'''


@pytest.mark.e2e
def test_a_notebook_page_runs_shows_its_outputs_and_its_text_gives_search_snippets(tmp_path):
    out = build_notebook(tmp_path, [new_markdown_cell("# A notebook\n\nThe word quokka is in its text."),
                                    new_code_cell("print('six times seven is', 6 * 7)"),
                                    new_code_cell(SHOWS_ITSELF)])
    page = (out / "notebook.html").read_text()
    assert "six times seven is 42" in page                        # executed at build time, output shown
    assert "<strong>A problem</strong>" in page                    # the object's Markdown, rendered
    assert re.search(r'class="math[^"]*"[^>]*>\s*\\\[\\min_X', page)  # its display math, typeset by MathJax
    texts = json.loads((out / "_static" / TEXTS_JS).read_text().split(" = ", 1)[1].rstrip().rstrip(";"))
    assert "quokka" in texts["notebook.html"] and "six times seven is 42" in texts["notebook.html"]
    assert "search-snippets.js" in (out / "search.html").read_text()
    assert "search-snippets.js" not in page                        # only the search page loads them


@pytest.mark.e2e
def test_a_notebook_cell_that_raises_stops_the_build(tmp_path):
    with pytest.raises(ExecutionError, match=r"notebook\.ipynb") as err:    # sphinx-build: exit status 2
        build_notebook(tmp_path, [new_code_cell("x = 1\nassert x == 2, 'the example is stale'")])
    cause = re.sub(r"\x1b\[[0-9;]*m", "", str(err.value.__cause__))       # the notebook kernel's traceback, uncoloured
    assert "assert x == 2" in cause and "AssertionError: the example is stale" in cause


def test_page_text_is_the_main_content_without_scripts_or_heading_links():
    page = ('<html><body><nav>Navigation</nav><article role="main" id="main"><h1>Title<a class="headerlink" '
            'href="#t">#</a></h1><script>var x = 1;</script><p>Muon &amp; its <em>polar</em>\nfactor</p>'
            '</article><footer>Footer</footer></body></html>')
    assert page_text(page) == "Title Muon & its polar factor"
    assert page_text("<html><body>no main content</body></html>") == ""


def test_the_tutorial_is_a_notebook_stored_without_outputs_that_shows_the_core_objects():
    nb = nbformat.read(TUTORIAL, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code), "store it without outputs"
    shown = [cell.source.strip().splitlines()[-1] for cell in code]
    for obj in ("problem", "der", "L.ORTHONORMAL_INVARIANCE", "check_derivation("):   # each displays itself
        assert any(line.startswith(obj) for line in shown), f"no cell ends by showing {obj}"
    assert not (ROOT / "docs" / "tutorial.rst").exists(), "one source: the notebook"


def test_pages_that_run_code_are_read_first_and_pages_printed_from_the_catalogue_last(tmp_path):
    pages = {"api": "API\n===\n\n.. automodule:: derivations\n", "guide": ".. executed::\n\n   x = 1\n",
             "lemmas": ".. lemma-reference::\n", "rules/halfsplit": ".. rule-derivations:: halfsplit\n",
             "tour": ".. command-output:: python -m derivations.halfsplit --help\n", "tutorial": None}
    for name, text in pages.items():
        path = tmp_path / (f"{name}.ipynb" if text is None else f"{name}.rst")
        path.parent.mkdir(exist_ok=True)
        path.write_text(text or "{}")
    env = SimpleNamespace(doc2path=lambda name: next(tmp_path.glob(f"{name}.*")))
    docnames = sorted(pages)
    objects.read_order(env, docnames, DIRECTIVES)
    assert docnames == ["guide", "tour", "tutorial", "api", "lemmas", "rules/halfsplit"]


def _misdeclared(directives: dict) -> list:
    """The directives whose ``reads_catalogue`` disagrees with their source: a class that calls ``catalogue(``
    must declare it (its page is then read last), and one that does not must not."""
    return [name for name, cls in directives.items()
            if ("catalogue(" in inspect.getsource(cls)) != bool(getattr(cls, "reads_catalogue", False))]


def test_every_directive_that_prints_from_the_catalogue_says_so():
    """The read order comes from the directive classes, so it cannot drift from them (a hand-kept list of
    names had ``symbol-table``, which never reads the catalogue). Planted: a directive that calls
    ``catalogue(`` without the flag, and a flag on one that does not."""
    assert _misdeclared(DIRECTIVES) == []
    assert {n for n, c in DIRECTIVES.items() if getattr(c, "runs_code", False)} == {"executed", "command-output"}

    class Undeclared:
        def run(self):
            return objects.catalogue(self.config).rules

    class Overdeclared:
        reads_catalogue = True

        def run(self):
            return []

    assert _misdeclared({"undeclared": Undeclared, "overdeclared": Overdeclared}) == ["undeclared", "overdeclared"]


def test_a_page_waits_for_the_catalogue_the_workers_build(monkeypatch):
    """One build of each rule module, by a worker (a thread pool stands in for the process pool here; the real
    processes run in every docs build): a page that asks meanwhile waits and gets the worker's result, sent back
    pickled. No worker outlives the catalogue, and ``workbench_derivation_workers = 0`` starts none."""
    built, started, release = [], threading.Event(), threading.Event()

    def slow_load(path):
        built.append(path)
        started.set()
        release.wait(5)
        return SimpleNamespace(derivations=["the worker's derivations"], functions=[])

    monkeypatch.setattr(objects, "load_rule", slow_load)
    monkeypatch.setattr(objects, "ProcessPoolExecutor", lambda workers, mp_context: ThreadPoolExecutor(workers))
    idle = objects.Catalogue(["derivations.sylvester"])
    idle.start_workers(0)
    assert idle._pool is None and not idle._pending
    cat = objects.Catalogue(["derivations.sylvester"])
    cat.start_workers(1)
    assert started.wait(5)
    seen = {}
    asked = threading.Thread(target=lambda: seen.update(cat.rules))
    asked.start()
    release.set()
    asked.join(5)
    assert built == ["derivations.sylvester"] and seen["sylvester"].derivations == ["the worker's derivations"]
    assert cat._pool is None and list(cat.rules) == ["sylvester"] and built == ["derivations.sylvester"]
