"""``.. api-reference:: PACKAGE`` — an autodoc entry for every public name of a package.

The names are read from the package when the docs build (its ``__all__``; without one, each public
module's ``__all__`` or the functions and classes it defines, see :func:`public_api`), so a
new public name gets its entry, and the coverage check holds it to a docstring, without editing
pages. Lazily exported names (a module ``__getattr__``) are resolved like any other.
Not autodoc's own ``automodule`` of the package with ``:members:``: it documents a re-exported constant only
where the package's source has its ``#:`` comment, so the front doors' 25 constants would drop silently.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from sphinx import addnodes
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective

from . import rst


def _defined_public(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [n for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
            and getattr(v, "__module__", None) == module.__name__]


def public_api(package_name: str) -> list[str]:
    """Dotted public names of a package (see the module docstring for the rule)."""
    package = importlib.import_module(package_name)
    if hasattr(package, "__all__"):  # its private names (kept there for tests) are not API
        return [f"{package_name}.{n}" for n in package.__all__ if not n.startswith("_")]
    out = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"{package_name}.{info.name}")
        out += [f"{module.__name__}.{n}" for n in _defined_public(module)]
    return out


def resolve(dotted: str):
    """The object a dotted public name refers to (``derivations.render``, ``foundation.compute.spectra.x``)."""
    module_name, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)


def auto_directive(obj) -> str:
    if inspect.ismodule(obj):
        return "automodule"
    if inspect.isclass(obj):
        return "autoclass"
    if callable(obj):
        return "autofunction"
    return "autodata"


#: a constant whose repr is longer than this is documented without its value (its docstring or the
#: module's text says what it holds): a 2,000-character repr is noise, not documentation
MAX_VALUE_REPR = 120


def entries(names) -> list[str]:
    lines = []
    for name in names:
        obj = resolve(name)
        directive = auto_directive(obj)
        lines += [f".. {directive}:: {name}"]
        if directive == "autodata" and len(repr(obj)) > MAX_VALUE_REPR:
            lines += ["   :no-value:"]
        lines += [""]
    return lines


def front_door(app) -> set[tuple[str, int]]:
    """``(name, id)`` of what the configured packages with an ``__all__`` export (their front doors)."""
    if not hasattr(app, "workbench_front_door"):  # on the application: ids are not kept in a pickled env
        app.workbench_front_door = {
            (dotted.rpartition(".")[2], id(resolve(dotted)))
            for package in app.config.workbench_api_packages
            if hasattr(importlib.import_module(package), "__all__") for dotted in public_api(package)}
    return app.workbench_front_door


def skip_front_door_member(app, what, name, obj, skip, options):
    """A module section skips what its package's front door documents: each object is documented once
    (autodoc gives the front-door entry the defining module's name as its canonical alias)."""
    if what == "module" and (name, id(obj)) in front_door(app):
        return True
    return None


def defining_comment(dotted: str, obj) -> list[str]:
    """The ``#:`` comment of a re-exported constant where it is defined (a module of its package), or []."""
    package_name, _, short = dotted.rpartition(".")
    package = importlib.import_module(package_name)
    modules = [package] + [importlib.import_module(info.name) for info in
                           pkgutil.walk_packages(getattr(package, "__path__", []), f"{package_name}.")
                           if not info.name.rpartition(".")[2].startswith("_")]
    for module in modules:
        if vars(module).get(short) is obj:
            comment = ModuleAnalyzer.for_module(module.__name__).find_attr_docs().get(("", short))
            if comment:
                return list(comment)
    return []


def own_data_docstring(app, what, name, obj, options, lines):
    """A constant has no docstring of its own, and autodoc falls back on its type's (a dict shows
    ``dict()``'s): put the ``#:`` comment from where it is defined in its place, or nothing."""
    if what not in ("data", "attribute") or inspect.isclass(obj) or inspect.isroutine(obj):
        return
    doc = vars(type(obj)).get("__doc__")  # a class may keep a slot descriptor there
    borrowed = inspect.cleandoc(doc) if isinstance(doc, str) else ""
    if borrowed and "\n".join(lines).strip() == borrowed.strip():
        lines[:] = defining_comment(name, obj) if what == "data" else []


def drop_long_values(app, doctree):
    """Remove the ``= value`` of a documented constant or attribute whose value is longer than
    :data:`MAX_VALUE_REPR` (autodoc of a whole module prints every value; its docstring says what it holds)."""
    for annotation in list(doctree.findall(addnodes.desc_annotation)):
        has_equals = any(p.astext() == "=" for p in annotation.findall(addnodes.desc_sig_punctuation))
        if has_equals and len(annotation.astext()) > MAX_VALUE_REPR:
            annotation.parent.remove(annotation)


def no_navigation_on_source_pages(app, pagename, templatename, context, doctree):
    """The highlighted source pages (``_modules/…``, one per documented module) get no navigation
    sidebar: the theme would copy the whole site's table of contents into each of them."""
    if pagename.startswith("_modules/"):
        context.pop("toctree", None)


class ApiReferenceDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self):
        package_name = self.arguments[0]
        package = importlib.import_module(package_name)
        names = public_api(package_name)
        if hasattr(package, "__all__"):
            return rst.parse(self, entries(names))
        lines, by_module = [], {}
        for name in names:
            by_module.setdefault(name.rpartition(".")[0], []).append(name)
        for module, members in by_module.items():
            head = f"``{module}``"
            lines += [head, "-" * len(head), "", f".. automodule:: {module}", "   :no-members:", "",
                      *entries(members)]
        return rst.parse(self, lines)
