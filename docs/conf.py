"""Sphinx configuration of the workbench's documentation.

Build: ``python -m sphinx -W -b html docs docs/_build/html`` (every warning is an error).
The pages are printed from the live objects by the extension in ``_ext/workbench_sphinx``.
"""

import importlib.util
import logging
import sys
from pathlib import Path

# the optimizer guide's orbax example logs every save and restore at INFO through absl, JAX logs
# its search for a TPU, and the notebook's client logs that it starts a kernel: none is a build message
for _name in ("absl", "jax._src.xla_bridge", "traitlets"):
    logging.getLogger(_name).setLevel(logging.WARNING)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

project = "Optimizer workbench"
author = "the workbench authors"
copyright = "the workbench authors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx_proof",
    "myst_nb",
    "workbench_sphinx",
]

html_theme = "furo"
html_title = "Optimizer workbench"
# examples/: the cross-check page's input files (Markdown and LaTeX documents), not pages
exclude_patterns = ["_build", "examples"]
nitpicky = False

#: the rule modules whose derivations get pages (empty: every module of ``derivations`` with a
#: ``rule_module()``); the completeness check fails when one of them has no page
workbench_rule_modules = []
#: write listings/<rule>.rst for every rule module while the docs build (git ignores them)
workbench_listing_pages = True
#: packages whose public names must each have an API entry
workbench_api_packages = ["derivations", "coeffsearch", "numerics", "numerics.optimizer"]

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# a member without a docstring of its own is not documented with its base class's (SymPy's, NumPy's)
autodoc_inherit_docstrings = False
# PyTorch is optional (the torch extra): without it the PyTorch runtime's pages are built from its docstrings alone
autodoc_mock_imports = [] if importlib.util.find_spec("torch") else ["torch"]
# the API reference documents every public module: its functions and classes as entries of the page
# tables of contents would make the navigation of every page (copied once per page) many times larger
toc_object_entries = False
# the same class is re-exported by a package and documented in its defining module too
# myst.header: the study page includes results/study.md, whose headings start at ## under the page's title
suppress_warnings = ["ref.python", "myst.header"]

proof_minimal_theme = True

# The tutorial is a Jupyter notebook (tutorial.ipynb, stored without outputs): MyST-NB runs it in a fresh kernel
# on every build, offline, and shows its outputs; a cell that raises stops the build, naming the cell
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 300
# an object's Markdown (a Derivation's table of steps, a Lemma's statement) is read as MyST, display math included
nb_render_markdown_format = "myst"
myst_enable_extensions = ["dollarmath"]
# MathJax typesets every page as before (MyST would restrict it to its own classes)
myst_update_mathjax = False
