"""``.. api-reference:: PACKAGE`` — an autodoc entry for every public name of a package.

The names are read from the package when the docs build (its ``__all__``; without one, each public
module's ``__all__`` or the functions and classes it defines, see :func:`public_api`), so a
new public name gets its entry, and the coverage check holds it to a docstring, without editing
pages. Lazily exported names (a module ``__getattr__``) are resolved like any other.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

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
    if hasattr(package, "__all__"):
        return [f"{package_name}.{n}" for n in package.__all__]
    out = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_") or info.ispkg:
            continue
        module = importlib.import_module(f"{package_name}.{info.name}")
        out += [f"{module.__name__}.{n}" for n in _defined_public(module)]
    return out


def resolve(dotted: str):
    """The object a dotted public name refers to (``derivations.render``, ``numerics.kernels.spectra.x``)."""
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
