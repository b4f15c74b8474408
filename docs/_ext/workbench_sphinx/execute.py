"""``.. executed::`` — Python that runs while the page is built; its output is shown below it.

The blocks of one page share a namespace, in page order. An exception (a failed ``assert``
included) stops the build with the page, the block's first line and the error, so a tutorial
whose example no longer works cannot be published.
"""

from __future__ import annotations

import contextlib
import io
import traceback

from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

from . import rst


class ExampleFailed(ExtensionError):
    """A code block of a page raised while the page was built."""


class ExecutedDirective(SphinxDirective):
    """Run the content, show it and what it printed."""

    has_content = True

    def run(self):
        namespaces = self.env.temp_data.setdefault("workbench_namespaces", {})
        namespace = namespaces.setdefault(self.env.docname, {"__name__": f"docs.{self.env.docname}"})
        code = "\n".join(self.content)
        name = f"<{self.env.docname}.rst, line {self.lineno}>"
        out = io.StringIO()
        try:
            compiled = compile(code, name, "exec")
            with contextlib.redirect_stdout(out):
                exec(compiled, namespace)  # noqa: S102 — the documentation's own example
        except Exception as exc:
            frames = traceback.extract_tb(exc.__traceback__)
            ours = [f.lineno for f in frames if f.filename == name] or [getattr(exc, "lineno", None)]
            where = f"line {ours[-1]} of the block" if ours[-1] else "the block"
            if frames and frames[-1].filename != name:
                where += f", raised in {frames[-1].filename}:{frames[-1].lineno}"
            raise ExampleFailed(f"{self.env.docname}.rst, line {self.lineno}: the example raised "
                                f"{type(exc).__name__}: {exc} ({where})") from exc
        lines = rst.literal_block(code, "python")
        printed = out.getvalue()
        if printed.strip():
            lines += [".. rst-class:: workbench-output", "", *rst.literal_block(printed, "text")]
        return rst.parse(self, lines)
