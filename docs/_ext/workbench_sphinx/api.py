"""``.. api-modules:: PACKAGE`` — an autodoc section for each public module of a package.

The list of modules is read from the package at build time, so a new module gets its section
(and the API coverage check holds it to a docstring on every public name) without editing pages.
"""

from __future__ import annotations

import importlib
import pkgutil

from sphinx.util.docutils import SphinxDirective

from . import rst


def public_modules(package_name: str) -> list[str]:
    package = importlib.import_module(package_name)
    return [f"{package_name}.{info.name}" for info in pkgutil.iter_modules(package.__path__)
            if not info.name.startswith("_") and not info.ispkg]


class ApiModulesDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self):
        lines = []
        for module in public_modules(self.arguments[0]):
            head = f"``{module}``"
            lines += [head, "-" * len(head), "", f".. automodule:: {module}", "   :members:", ""]
        return rst.parse(self, lines)
