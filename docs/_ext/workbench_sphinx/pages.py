"""Which page prints each rule module, and the listing pages the build writes: nothing in ``docs/`` lists the rule
modules by hand.

* A rule module's proof page is its hand-written ``rules/<rule>.rst`` (the introduction it deserves) where there is
  one, else its section of ``rules/other.rst`` (``.. other-rules::``): :func:`proof_page`.
* Its listing page ``listings/<rule>.rst`` (``.. emitted-listing::``) is written at the start of the build
  (``builder-inited``) for every rule module of the build (``workbench_rule_modules``, default: every one
  :mod:`derivations.registry` finds) where ``workbench_listing_pages`` is set (the site sets it; the small test
  projects write the pages they need). A page the build wrote starts with :data:`MARK`, and only such a page is
  rewritten, or removed when its rule module is gone; git ignores them (``docs/listings/*.rst``, its index kept).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from .objects import RULE_PACKAGE, default_rule_modules

#: the first line of every page the build writes (a page without it is hand-written and left alone)
MARK = ".. Written by the docs build (workbench_sphinx.pages) for every rule module: not to be edited."


def has_page(srcdir, folder: str, name: str) -> bool:
    """Whether ``<folder>/<name>.rst`` exists in the docs source."""
    return (Path(srcdir) / folder / f"{name}.rst").is_file()


def proof_page(srcdir, name: str) -> str:
    """The document that prints rule module ``name``'s derivations: ``rules/<name>``, else ``rules/other``."""
    return f"rules/{name}" if has_page(srcdir, "rules", name) else "rules/other"


def listing_page(name: str) -> str:
    """The reST of rule module ``name``'s listing page."""
    title = f"{name}: the emitted JAX module"
    return f"{MARK}\n\n{title}\n{'=' * len(title)}\n\n.. emitted-listing:: {name}\n"


def rule_names(config) -> list[str]:
    """The names of the build's rule modules (a module's ``rule_module().name``; the registry's names by default)."""
    paths = config.workbench_rule_modules or default_rule_modules()
    return [path.removeprefix(f"{RULE_PACKAGE}.") if not config.workbench_rule_modules
            else importlib.import_module(path).rule_module().name for path in paths]


def write_listing_pages(app) -> None:
    """``builder-inited``: write ``listings/<rule>.rst`` for every rule module of the build (where it differs), and
    remove the written pages of rule modules that are gone."""
    if not app.config.workbench_listing_pages:
        return
    folder = Path(app.srcdir) / "listings"
    folder.mkdir(exist_ok=True)
    wanted = {name: listing_page(name) for name in rule_names(app.config)}
    for path in sorted(folder.glob("*.rst")):
        text = path.read_text(encoding="utf-8")
        if text.startswith(MARK) and path.stem not in wanted:
            path.unlink()
    for name, text in wanted.items():
        path = folder / f"{name}.rst"
        old = path.read_text(encoding="utf-8") if path.is_file() else None
        if old is None or (old.startswith(MARK) and old != text):
            path.write_text(text, encoding="utf-8")
