"""Checks that stop the build: completeness, API coverage, and assets loaded from outside the site.

* Completeness: every derivation of every rule module, every lemma, every registered schedule,
  and each rule module's emitted functions and listing have been rendered on some page.
* API coverage: every public name of the configured packages has an entry in the API reference
  (autodoc skips a name without a docstring, so an undocumented public name fails the build).
  A package's public names are its ``__all__``; a package without one contributes the public
  names of its public modules (their ``__all__``, else the functions and classes they define).
* Offline site: no page or stylesheet of the built site loads a script, stylesheet, font or image
  from a URL (``http:``, ``https:`` or ``//host``); links a reader clicks are not assets.
"""

from __future__ import annotations

import inspect
import re
import typing
from html.parser import HTMLParser
from pathlib import Path

from sphinx.errors import ExtensionError
from sphinx.ext.autodoc.mock import mock

import coeffsearch

from .api import public_api, resolve
from .classics import classics
from .objects import catalogue


class IncompleteDocs(ExtensionError):
    """An object of the project has no page, or a public name has no API entry."""


class ExternalAsset(ExtensionError):
    """A built page or stylesheet loads something from outside the site."""


# ---- completeness --------------------------------------------------------------------------


def rendered(env) -> set:
    out = set()
    for items in getattr(env, "workbench_rendered", {}).values():
        out |= items
    return out


def purge(app, env, docname):
    getattr(env, "workbench_rendered", {}).pop(docname, None)


def merge(app, env, docnames, other):
    store = env.workbench_rendered if hasattr(env, "workbench_rendered") else {}
    env.workbench_rendered = store
    for docname in docnames:
        if docname in getattr(other, "workbench_rendered", {}):
            store[docname] = other.workbench_rendered[docname]


def missing_objects(app, env) -> list[str]:
    done = rendered(env)
    cat = catalogue(app.config)
    missing = []
    directive = {"rule": "rule-derivations", "emitted": "emitted-functions", "listing": "emitted-listing"}
    for entry in cat.rules.values():
        for kind in ("rule", "emitted", "listing"):
            if (kind, entry.name) not in done:
                missing.append(f"rule module {entry.name} (no page has '.. {directive[kind]}:: {entry.name}')")
        for der in entry.derivations:
            if ("derivation", der.name) not in done:
                missing.append(f"derivation {der.name}")
    for lemma in cat.lemmas():
        if ("lemma", lemma.key) not in done:
            missing.append(f"lemma {lemma.number} ({lemma.key})")
    for name in coeffsearch.names():
        if ("schedule", name) not in done:
            missing.append(f"schedule {name}")
    for classic in classics():
        if ("classic", classic.name) not in done:
            missing.append(f"classic {classic.name} (no page has '.. classics::')")
    return sorted(set(missing))


# ---- API coverage --------------------------------------------------------------------------


def has_docstring(obj) -> bool:
    """A function or class needs its own docstring; data (constants) cannot carry one."""
    if typing.get_origin(obj) is not None:  # a type alias is data: its ``#:`` comment documents it
        return True
    if inspect.isclass(obj):
        return bool((obj.__dict__.get("__doc__") or "").strip())
    if callable(obj) or inspect.ismodule(obj):
        return bool((getattr(obj, "__doc__", None) or "").strip())
    return True


def undocumented(app, env) -> list[str]:
    """Public names without an API entry, or functions and classes without a docstring.

    The packages are imported under autodoc's mocks (``autodoc_mock_imports``), as autodoc imported them: a module
    that needs an optional dependency (``torch``) is then read where that dependency is not installed."""
    documented = set(env.get_domain("py").objects)
    with mock(getattr(app.config, "autodoc_mock_imports", None) or []):
        return [name for package in app.config.workbench_api_packages for name in public_api(package)
                if name not in documented or not has_docstring(resolve(name))]


def check_consistency(app, env):
    if app.config.workbench_require_complete:
        missing = missing_objects(app, env)
        if missing:
            raise IncompleteDocs("no page renders: " + "; ".join(missing))
    names = undocumented(app, env)
    if names:
        raise IncompleteDocs(f"{len(names)} public names have no API reference entry or no docstring "
                             f"(add '.. api-reference:: PACKAGE' and a docstring): {', '.join(names)}")


# ---- offline site --------------------------------------------------------------------------

_EXTERNAL = re.compile(r"^\s*(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//", re.ASCII)
_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""")
_NOT_ASSETS = {"canonical", "alternate", "author", "license", "next", "prev", "index", "search", "help",
               "bookmark", "external", "nofollow", "noopener", "noreferrer"}


def is_external(url: str) -> bool:
    url = url.strip()
    return bool(_EXTERNAL.match(url)) and not url.lower().startswith("file:")


class _AssetParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.assets: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "link":
            rels = set((a.get("rel") or "").lower().split())
            if a.get("href") and not rels <= _NOT_ASSETS | {""} or (a.get("href") and not rels):
                self.assets.append(a["href"])
        for attr in ("src", "data", "poster"):
            if tag in ("script", "img", "iframe", "embed", "object", "source", "video", "audio", "track", "input") \
                    and a.get(attr):
                self.assets.append(a[attr])
        if a.get("srcset"):
            self.assets += [part.split()[0] for part in a["srcset"].split(",") if part.strip()]
        if a.get("style"):
            self.assets += css_urls(a["style"])
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.assets += css_urls(data)


def css_urls(css: str) -> list[str]:
    return [a or b for a, b in _CSS_URL.findall(css)]


#: what can load an asset: a ``<style>`` block, and a start tag of an element that loads one or with a
#: ``style``/``srcset`` attribute (a script's or a comment's text is not markup)
_NOT_MARKUP = re.compile(r"(?is)<!--.*?-->|(<script\b[^>]*>).*?(</script>)")
_STYLE_BLOCK = re.compile(r"(?is)<style\b[^>]*>.*?</style>")
_START_TAG = re.compile(r"""<([a-zA-Z][\w-]*)(?:\s+[^\s=>/]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]+))?)*\s*/?>""")
_LOADING_TAGS = {"link", "script", "img", "iframe", "embed", "object", "source", "video", "audio", "track", "input"}
_LOADING_ATTRS = re.compile(r"\s(?:style|srcset)\s*=", re.IGNORECASE)


def _asset_markup(page: str) -> str:
    """The parts of a page that can load an asset (the parser then reads a few kB, not the whole page)."""
    page = _NOT_MARKUP.sub(lambda m: (m.group(1) or "") + (m.group(2) or ""), page)
    parts = _STYLE_BLOCK.findall(page)
    parts += [m.group(0) + ("</script>" if m.group(1).lower() == "script" else "")   # the parser reads no script
              for m in _START_TAG.finditer(_STYLE_BLOCK.sub(" ", page))
              if m.group(1).lower() in _LOADING_TAGS or _LOADING_ATTRS.search(m.group(0))]
    return "\n".join(parts)


def external_assets(html_dir) -> list[tuple[str, str]]:
    """``(file, url)`` for every asset of the site at ``html_dir`` that is loaded from a URL."""
    root = Path(html_dir)
    found = []
    for path in sorted(root.rglob("*")):
        if path.suffix == ".html":
            parser = _AssetParser()
            parser.feed(_asset_markup(path.read_text(encoding="utf-8", errors="replace")))
            urls = parser.assets
        elif path.suffix == ".css":
            urls = css_urls(path.read_text(encoding="utf-8", errors="replace"))
        else:
            continue
        found += [(str(path.relative_to(root)), u) for u in urls if is_external(u)]
    return found


def check_site(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    bad = external_assets(app.outdir)
    if bad:
        shown = "; ".join(f"{f}: {u}" for f, u in bad[:10])
        raise ExternalAsset(f"{len(bad)} assets load from outside the site (math must render offline): {shown}")
