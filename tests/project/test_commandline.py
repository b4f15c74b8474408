"""One command-line parser for every command (foundation.commandline.OneLineParser).

No module of the project defines its own ``argparse.ArgumentParser`` subclass (an AST scan; a planted
subclass must be found), and every ``python -m`` entry point answers an unknown option with one line on
stderr and exit status 2.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.project.test_layers import PACKAGES  # every package of the layers, the ground floor first

ROOT = Path(__file__).resolve().parents[2]
#: the one subclass allowed: (module, class)
THE_PARSER = ("foundation.commandline", "OneLineParser")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module of the project's packages (``pkg/__main__.py`` as ``pkg.__main__``)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "_build" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def parser_subclasses(source: str) -> list[str]:
    """Names of the classes in ``source`` that derive from argparse's ``ArgumentParser`` (by name, however imported)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
                if name == "ArgumentParser":
                    found.append(node.name)
    return found


def private_parsers(files: dict[str, Path]) -> list[str]:
    """``module.Class`` for every ArgumentParser subclass other than the shared one."""
    return [f"{name}.{cls}" for name, path in files.items()
            for cls in parser_subclasses(path.read_text(encoding="utf-8")) if (name, cls) != THE_PARSER]


def entry_points(files: dict[str, Path]) -> list[str]:
    """What ``python -m`` runs: modules with an ``if __name__ == "__main__"`` block, and packages with a
    ``__main__.py``."""
    out = []
    for name, path in files.items():
        if name.endswith(".__main__"):
            out.append(name.removesuffix(".__main__"))
        elif 'if __name__ == "__main__"' in path.read_text(encoding="utf-8"):
            out.append(name)
    return sorted(out)


def test_no_private_argument_parser():
    files = module_files()
    assert files[THE_PARSER[0]]  # the scan sees the shared parser's module
    assert private_parsers(files) == []


def test_a_planted_private_parser_is_found(tmp_path):
    (tmp_path / "foundation").mkdir()
    (tmp_path / "foundation" / "commandline.py").write_text(
        "import argparse\nclass OneLineParser(argparse.ArgumentParser):\n    pass\n")
    pkg = tmp_path / "derivations"
    pkg.mkdir()
    (pkg / "rogue.py").write_text("from argparse import ArgumentParser\n"
                                  "class _Parser(ArgumentParser):\n    def error(self, message): raise SystemExit(2)\n")
    for package in PACKAGES[2:]:
        (tmp_path / package).mkdir()
    assert private_parsers(module_files(tmp_path)) == ["derivations.rogue._Parser"]


# Runs every entry point as __main__ (runpy) in one process: the heavy imports (SymPy, JAX) happen once.
RUNNER = r'''  # argv[1]: entry points, argv[2]: their arguments, argv[3] 'full': stdout on /dev/full
import contextlib, io, json, runpy, sys, warnings
warnings.filterwarnings("ignore", message=".*found in sys.modules", category=RuntimeWarning)  # runpy's, not ours
names, args, full = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:] == ["full"]
for name in names:
    out, err = io.StringIO(), io.StringIO()
    sys.argv = [name, *args]
    saved, rc, escaped = sys.stdout, None, ""
    try:
        sys.stdout = open("/dev/full", "w") if full else out
        with contextlib.redirect_stderr(err):
            runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        rc = exc.code
    except BaseException as exc:
        escaped = repr(exc)[:400]
    finally:
        sys.stdout = saved
    print(json.dumps({"name": name, "rc": rc, "stderr": err.getvalue(), "stdout": out.getvalue()[:2000],
                      "escaped": escaped}), flush=True)
'''


def run_entry_points(args: list[str], stdout: str = "capture") -> list[dict]:
    """Every entry point run with ``args`` (one process, :data:`RUNNER`): one row per entry point."""
    names = entry_points(module_files())
    # the commands this test was written against must all be found
    assert {"coeffsearch", "derivations.crosscheck", "paramcount", "derivations.regenerate",
            "derivations.classics", "derivations.halfsplit", "numerics.train", "benchmarks.step"} <= set(names)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(names), json.dumps(args), stdout],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["name"] for r in rows] == names, proc.stderr[-3000:]
    return rows


def one_line_usage_errors(rows: list[dict], needle: str) -> list[str]:
    """The rows that are not exit 2 with exactly one ``PROG: error: ...needle...`` line and no stdout."""
    return [f"{r['name']}: rc={r['rc']} escaped={r['escaped']!r} stderr={r['stderr'][-400:]!r}" for r in rows
            if not (r["rc"] == 2 and not r["escaped"] and not r["stdout"] and len(r["stderr"].splitlines()) == 1
                    and ": error: " in r["stderr"] and needle in r["stderr"] and "Traceback" not in r["stderr"])]


@pytest.mark.e2e
def test_every_entry_point_refuses_an_unknown_option_in_one_line():
    # named first, even where a required argument is also missing ("--emit is required" would hide the typo)
    bad = one_line_usage_errors(run_entry_points(["--no-such-option"]), "unrecognized arguments: --no-such-option")
    assert not bad, "\n".join(bad)


@pytest.mark.e2e
def test_help_on_a_full_stdout_is_an_error():
    # argparse drops the write error of --help and exits 0; a full disk must not pass for success
    bad = one_line_usage_errors(run_entry_points(["--help"], "full"), "cannot write to stdout: No space left")
    assert not bad, "\n".join(bad)
