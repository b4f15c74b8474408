"""``.. executed::`` — Python that runs while the page is built; its output is shown below it.

The blocks of one page share a namespace, in page order. ``:requires: MODULE`` names an optional
dependency (``torch``): where it is not installed the block is shown, not run, with a note saying so. An
exception (a failed ``assert`` included) stops the build with the page, the block's first line and the
error, so a tutorial whose example no longer works cannot be published.

``:figure: CAPTION`` shows the last matplotlib figure the block made, saved as a PNG under the
build's generated files (``<outdir>/../workbench-generated``), with that caption: a plot made while
the page was built (a block with this option that makes no figure stops the build). The block's
figures are closed afterwards.

Not MyST-NB's or jupyter-sphinx's execution: MyST-NB runs notebook pages only (these are reST pages with this
extension's directives), jupyter-sphinx would add nbconvert and ipywidgets, and both start a kernel per page
that imports JAX, SymPy and the project again (5.4 s a page measured with MyST-NB; this process has them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import traceback

import matplotlib

matplotlib.use("Agg")  # the build writes files; it never opens a window

import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)
from sphinx.errors import ExtensionError  # noqa: E402
from sphinx.util.docutils import SphinxDirective  # noqa: E402

from . import rst  # noqa: E402
from .schedules import generated_dir, image_uri  # noqa: E402


class ExampleFailed(ExtensionError):
    """A code block of a page raised while the page was built."""


class ExecutedDirective(SphinxDirective):
    """Run the content, show it and what it printed (and, with ``:figure:``, the plot it made)."""

    runs_code = True  # runs code while its page is read: objects.read_order reads its page first

    has_content = True
    option_spec = {"figure": lambda text: " ".join((text or "").split()), "requires": lambda text: (text or "").strip()}

    def run(self):
        missing = self.options.get("requires")
        if missing and importlib.util.find_spec(missing) is None:
            note = f"Not run in this build: {missing} is not installed."
            return rst.parse(self, [*rst.literal_block("\n".join(self.content), "python"), "", rst.text(note), ""])
        namespaces = self.env.temp_data.setdefault("workbench_namespaces", {})
        namespace = namespaces.setdefault(self.env.docname, {"__name__": f"docs.{self.env.docname}"})
        code = "\n".join(self.content)
        name = f"<{self.env.docname}.rst, line {self.lineno}>"
        out = io.StringIO()
        before = set(plt.get_fignums())
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
        if "figure" in self.options:
            lines += self._figure(sorted(set(plt.get_fignums()) - before))
        return rst.parse(self, lines)

    def _figure(self, made: list[int]) -> list[str]:
        """The last figure the block made, saved and shown with the option's caption; all of them closed."""
        if not made:
            raise ExampleFailed(f"{self.env.docname}.rst, line {self.lineno}: the block has ':figure:' but made "
                                f"no matplotlib figure (plt.figure() or plt.subplots())")
        path = generated_dir() / f"executed-{rst.label(self.env.docname)}-{self.lineno}.png"
        plt.figure(made[-1]).savefig(path, dpi=110, bbox_inches="tight")
        for number in made:
            plt.close(number)
        caption = self.options["figure"]
        return [f".. figure:: {image_uri(self, path)}", "   :width: 90%", "",
                *([f"   {rst.text(caption)}", ""] if caption else [])]
