"""A function of an emitted module as a typed record, and the one renderer that turns it into text.

The printers build a :class:`FunctionSpec` for every function they emit (its signature, the argument
checks it runs first, its body) and :func:`render_functions` writes them out. What a function takes
and checks is then data that can be read and tested, apart from how it is laid out as Python.
"""

from __future__ import annotations

from dataclasses import dataclass

#: one indentation level of the emitted code
INDENT = "    "


@dataclass(frozen=True)
class Parameter:
    """One parameter: its name and the source text of its default (``None``: required)."""

    name: str
    default: str | None = None

    def render(self) -> str:
        return self.name if self.default is None else f"{self.name}={self.default}"


@dataclass(frozen=True)
class FunctionSpec:
    """One emitted function before it is text.

    ``positional`` and ``keyword_only`` (after ``*``) make the signature; ``decorators`` are the
    expressions after ``@``; ``docstring`` is a checked docstring literal, indented
    (:func:`derivations.printing.codegen.check_docstring`), or empty. ``checks`` (the argument
    checks, run first) and ``body`` are statement lines relative to the function's indentation: a
    continuation or a nested block carries its own extra indentation.
    """

    name: str
    positional: tuple[Parameter, ...]
    keyword_only: tuple[Parameter, ...] = ()
    decorators: tuple[str, ...] = ()
    docstring: str = ""
    checks: tuple[str, ...] = ()
    body: tuple[str, ...] = ()

    @property
    def parameters(self) -> tuple[Parameter, ...]:
        return self.positional + self.keyword_only

    def signature(self) -> str:
        """``name(a, b, *, c, d=1)``."""
        params = [p.render() for p in self.positional]
        if self.keyword_only:
            params += ["*", *(p.render() for p in self.keyword_only)]
        return f"{self.name}({', '.join(params)})"


def checked_name(name: str) -> str:
    """The private function behind the public ``name``: its checks and core, errors naming a given ``caller``."""
    return f"_checked_{name}"


def render_function(spec: FunctionSpec) -> str:
    """The source text of ``spec`` (no trailing newline)."""
    lines = [*(f"@{d}" for d in spec.decorators), f"def {spec.signature()}:"]
    if spec.docstring:
        lines.append(spec.docstring)
    lines += [INDENT + line for line in (*spec.checks, *spec.body)]
    return "\n".join(lines)


def render_functions(specs: list[FunctionSpec]) -> str:
    """Functions as they follow each other in a module: one blank line before, two between, a newline at the end."""
    return "\n" + "\n\n\n".join(render_function(s) for s in specs) + "\n"
