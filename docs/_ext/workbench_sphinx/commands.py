"""Command lines, run while the docs build: ``.. command-tour::`` and ``.. command-output::``.

* ``.. command-tour::`` — every command of the project with its ``--help``, read from the parsers
  while the page is built. The commands are discovered, not listed: every module of the project's
  packages with an ``if __name__ == "__main__":`` block, and every package with a ``__main__.py``;
  a command whose usage line offers subcommands (``{a,b,c}``) gets each subcommand's help too.
  Commands of one package whose options read the same (the rule modules) are one group: their
  ``--help`` is shown once, and each member is listed with its own description (:func:`groups`).
* ``.. command-output:: python -m MODULE ARGS…`` — runs the command and shows what it printed
  (``:lines: N`` keeps the first N lines and says how many were left out; ``:returncode: N`` is
  the exit status expected, 0 by default). Another status stops the build, naming the command.

Commands run in this process (their ``main(argv)``; a rule module through :func:`derivations.cli.main`),
so the derivations already built for the proof pages are reused and nothing is imported twice. They run
in the repository root, so a page names its input files from there (``docs/examples/config.json``).
Not sphinxcontrib-programoutput's ``command-output``: it starts a process per command, and the 36 commands of
the pages took 3.2 s each that way against 0.43 s here (measured on 2 cores: about 100 s more per build).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import os
import re
import shlex
import sys
import tomllib
from pathlib import Path
from typing import ClassVar

from docutils.parsers.rst import directives
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

from derivations import cli as rule_cli

from . import rst
from .notation import docstring_rst

#: the packages whose commands the tour shows, in this order
_ROOT = Path(__file__).resolve().parents[3]


def project_packages(root: Path = _ROOT) -> tuple[str, ...]:
    """The project's top-level packages, the ground floor first: what ``pyproject.toml`` installs
    (``[tool.setuptools.packages.find] include``), then ``benchmarks`` (run from a checkout)."""
    setup = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return (*(name.rstrip("*") for name in setup["packages"]["find"]["include"]), "benchmarks")


#: where the commands are looked for (:func:`discover`)
PACKAGES = project_packages()
_MAIN_BLOCK = re.compile(r"^if __name__ == ['\"]__main__['\"]:", re.MULTILINE)


class CommandFailed(ExtensionError):
    """A command shown on a page exited with another status than the page expects."""


def discover(root: Path = _ROOT, packages=PACKAGES) -> list[str]:
    """Module names runnable as ``python -m NAME`` (read from the sources, nothing imported)."""
    found = []
    for package in packages:
        base = root / package
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if any(part.startswith("_") for part in parts[:-1]) or "emitted" in parts:
                continue
            if parts[-1] == "__main__":
                found.append(".".join(parts[:-1]))
            elif not parts[-1].startswith("_") and _MAIN_BLOCK.search(path.read_text(encoding="utf-8")):
                found.append(".".join(parts))
    return sorted(set(found), key=lambda n: (packages.index(n.split(".")[0]), n))


def _entry(module_name: str):
    """The callable ``argv → status`` of a command."""
    try:
        module = importlib.import_module(f"{module_name}.__main__")
    except ModuleNotFoundError:
        module = importlib.import_module(module_name)
    if hasattr(module, "rule_module"):
        return lambda argv: rule_cli.main(module.rule_module(), argv)
    main = getattr(module, "main", None)
    if main is None or not inspect.signature(main).parameters:
        raise CommandFailed(f"python -m {module_name}: no main(argv) to run from the docs")
    return main


def run(module_name: str, args: list[str]) -> tuple[int, str]:
    """Run ``python -m module_name *args`` in this process: ``(status, stdout + stderr)``."""
    out = io.StringIO()
    old_argv, old_columns = sys.argv, os.environ.get("COLUMNS")
    sys.argv, os.environ["COLUMNS"] = [f"python -m {module_name}", *args], "100"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), contextlib.chdir(_ROOT):
            status = _entry(module_name)(list(args))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
        if old_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old_columns
    return int(status or 0), out.getvalue()


def subcommands(help_text: str) -> list[str]:
    """The subcommands a usage line offers (``{minimax,band,…} ...``; not an option's choices)."""
    usage = " ".join(help_text.split("\n\n")[0].split())
    m = re.search(r"(?:^|\s)\{([a-z][a-z0-9_,-]*)\} \.\.\.", usage)
    return m.group(1).split(",") if m else []


def help_of(module_name: str, args=()) -> str:
    status, text = run(module_name, [*args, "--help"])
    if status != 0:
        raise CommandFailed(f"python -m {module_name} {' '.join(args)} --help exited {status}: "
                            f"{text.strip().splitlines()[-1] if text.strip() else ''}")
    return text


def _first_line(module_name: str) -> str:
    module = importlib.import_module(module_name)
    doc = (module.__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split()) if doc else ""


def options_section(help_text: str, module_name: str) -> str:
    """What a help text offers, its own name and description left out: the usage line's options and the
    ``options:`` section, with the module's name replaced by a placeholder."""
    usage = " ".join(help_text.split("\n\n")[0].split()).replace(module_name, "NAME")
    options = help_text[help_text.find("\noptions:"):].split("\nexamples:")[0] if "\noptions:" in help_text else ""
    return usage + "\n" + " ".join(options.replace(module_name, "NAME").split())


def groups(helps: dict[str, str]) -> list[list[str]]:
    """The commands in order, those of one package whose :func:`options_section` is the same in one group
    (at its first member's place): a group's ``--help`` is shown once."""
    found: dict[tuple[str, str], list[str]] = {}
    for name, text in helps.items():
        package = name.rsplit(".", 1)[0] if "." in name else name
        found.setdefault((package, options_section(text, name)), []).append(name)
    return list(found.values())


def _group_name(members: list[str]) -> str:
    """``derivations.<rule>`` for the rule modules: the members' package and a placeholder."""
    package = members[0].rsplit(".", 1)[0]
    return f"{package}.<rule>" if package == "derivations" else f"{package}.<name>"


class CommandTourDirective(SphinxDirective):
    """``.. command-tour::`` — every command with its ``--help``, each help text once."""

    has_content = False

    def run(self):
        helps = {name: help_of(name) for name in discover()}
        lines = []
        for members in groups(helps):
            name = members[0]
            command = f"python -m {name if len(members) == 1 else _group_name(members)}"
            text = helps[name]
            lines += [rst.literal(command), "-" * (len(rst.literal(command)) + 4), ""]
            if len(members) == 1:
                summary = _first_line(name)
                lines += [docstring_rst(summary), ""] if summary else []
            else:
                lines += [f"{len(members)} commands take the same options; each prints its own derivations:", ""]
                lines += [f"* {rst.literal(f'python -m {m}')} — {docstring_rst(_first_line(m))}" for m in members]
                lines += ["", f"The ``--help`` of {rst.literal(f'python -m {name}')} (the others differ only in "
                          "their name, description and examples):", ""]
            lines += rst.literal_block(text, "text")
            for sub in subcommands(text):
                lines += [f"{rst.literal(f'{command} {sub}')}:", "", *rst.literal_block(help_of(name, [sub]), "text")]
        return rst.parse(self, lines)


class CommandOutputDirective(SphinxDirective):
    """``.. command-output:: python -m MODULE ARGS…`` — a command and what it printed."""

    runs_code = True  # runs code while its page is read: objects.read_order reads its page first

    required_arguments = 1
    final_argument_whitespace = True
    option_spec: ClassVar[dict] = {"lines": directives.positive_int, "returncode": int}

    def run(self):
        words = shlex.split(self.arguments[0])
        if words[:2] != ["python", "-m"] or len(words) < 3:
            raise CommandFailed(f"{self.env.docname}.rst, line {self.lineno}: command-output runs "
                                f"'python -m MODULE ARGS', got {self.arguments[0]!r}")
        status, text = run(words[2], words[3:])
        expected = self.options.get("returncode", 0)
        if status != expected:
            raise CommandFailed(f"{self.env.docname}.rst, line {self.lineno}: {self.arguments[0]} exited {status}, "
                                f"expected {expected}: {text.strip()[-500:]}")
        shown = text.rstrip("\n").splitlines()
        keep = self.options.get("lines")
        if keep and len(shown) > keep:
            shown = [*shown[:keep], f"… ({len(shown) - keep} more lines)"]
        body = "\n".join(shown)
        lines = [*rst.literal_block(f"$ {self.arguments[0]}", "console")]
        if status:
            lines += [rst.text(f"(exit status {status})"), ""]
        lines += [".. rst-class:: workbench-output", "", *rst.literal_block(body or "(no output)", "text")]
        return rst.parse(self, lines)
