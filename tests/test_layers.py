"""The architecture as a test: every hand-written module sits on one layer, imports only from its
own layer or below, and no import circle exists (README, "Layout").

The layers are named once, in :data:`LAYERS`; a module belongs to the longest prefix that matches
its dotted name. Imports inside functions count like any other. A planted back-import and a planted
circle must make the check fail (the last two tests).

An import inside a function is kept only where a heavy import must stay lazy, and says so on its
line with a ``# lazy: <reason>`` comment; :func:`test_function_local_imports_are_few_and_explained`
counts them, and :func:`test_docs_extension_function_local_imports_are_few_and_explained` holds the docs'
Sphinx extension (:data:`EXTENSION`) to the same rule with its own budget. No hand-written module has
more than :data:`MAX_MODULE_LINES` lines (:func:`test_no_hand_written_module_over_600_lines`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("derivations", "numerics", "coeffsearch", "benchmarks")

#: prefix -> layer, from the ground up; the longest matching prefix decides
LAYERS: dict[str, int] = {
    # 1. primitives: numerical kernels, the expression vocabulary and its evaluators, the command line
    "numerics.kernels": 1,
    "derivations.engine.vocabulary": 1,
    "derivations.engine.algebra": 1,
    "derivations.engine.interpret": 1,
    "derivations.engine.evaluate": 1,
    "derivations.engine.numeric": 1,
    "derivations.engine.latex_notation": 1,
    "derivations.engine.norm_nodes": 1,
    "derivations.engine.spectral_nodes": 1,  # the SVD, PSD powers and counts of the classics' lemmas
    "derivations.commandline": 1,
    # the Newton–Schulz schedule as a value: the one Schedule type (coeffsearch.schedule) and the pure mpmath
    # polynomial maths it validates with (polynomial) and computes recipes by (minimax). They import nothing
    # of the project but each other, and every consumer takes the validated type, the printers (layer 3)
    # and the kernels included; the registry, certifier and searches stay on layer 4
    "coeffsearch.schedule": 1,
    "coeffsearch.polynomial": 1,
    "coeffsearch.minimax": 1,
    # 2. lemmas
    "derivations.lemmas": 2,
    # 3. the engine: problems, derivations, norm families, symbolic model, search, printers
    "derivations.engine": 3,
    "derivations.printing": 3,
    "derivations.parsing": 3,  # the formula language read into engine expressions; the LaTeX round trip
    # 4. rule modules, their command line and registry; Newton–Schulz schedules
    "derivations": 4,
    "coeffsearch": 4,
    # 5. tools on top of the rules
    "derivations.crosscheck": 5,
    "derivations.classics": 5,  # classic results from hand-written formulas, counted by crosscheck.params
    # 6. products: emitted modules, optimizer, training, benchmarks
    "numerics": 6,
    "numerics.distributed": 6,  # the update across processes (jax.distributed) and head-parallel (shard_map)
    "numerics.train_model": 6, "numerics.train": 6, "numerics.study": 6, "numerics.study_report": 6,  # training
    "benchmarks": 6,
}
#: generated code: imports only jax, functools and numerics.kernels.jax_runtime (layer 1; checked by its own
#: tests), not part of the layer graph
GENERATED = ("numerics.emitted.",)


def layer_of(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every hand-written module of the project's packages."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            if not name.startswith(GENERATED) and "_build" not in parts:
                out[name] = path
    return out


def imports(name: str, path: Path, known: dict) -> set[str]:
    """The project modules that ``name`` imports (anywhere in the file, functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and not t.startswith(GENERATED):
                found.add(t)
    return found


def function_local_imports(root: Path = ROOT) -> tuple[list[str], list[str]]:
    """``(explained, unexplained)``: ``path:line`` of every import inside a function body of a
    hand-written module, split by whether its lines carry a ``# lazy: <reason>`` comment."""
    return local_imports_in(modules(root).values(), root)


#: the docs' Sphinx extension, relative to the repository root: not a package of the layer graph, but
#: hand-written, so its imports inside functions are counted like the packages' (its own budget)
EXTENSION = Path("docs") / "_ext" / "workbench_sphinx"


def extension_local_imports(root: Path = ROOT) -> tuple[list[str], list[str]]:
    """:func:`function_local_imports` for the modules of the docs' Sphinx extension."""
    return local_imports_in(sorted((root / EXTENSION).rglob("*.py")), root)


def local_imports_in(paths, root: Path) -> tuple[list[str], list[str]]:
    """``(explained, unexplained)`` for the files ``paths`` (reported relative to ``root``)."""
    explained, unexplained = [], []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        where = set()
        for fn in ast.walk(ast.parse(text)):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where |= {(n.lineno, n.end_lineno) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for first, last in sorted(where):
            reason = any("# lazy:" in line for line in lines[first - 1:last])
            (explained if reason else unexplained).append(f"{path.relative_to(root).as_posix()}:{first}")
    return explained, unexplained


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def with_package_inits(g: dict) -> dict[str, set[str]]:
    """``g`` plus, for every module, what its enclosing packages' ``__init__`` files import: Python runs them
    first, so a layer-1 module in a package whose ``__init__`` imports layer 4 depends on layer 4. (Used for the
    layer check; a package importing its own submodules is no circle.)"""
    out = {}
    for name, targets in g.items():
        parts = name.split(".")
        packages = [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in g]
        out[name] = (targets.union(*(g[p] for p in packages))) - {name}
    return out


def upward_imports(g: dict) -> list[str]:
    return sorted(f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
                  for a, targets in g.items() for b in targets if layer_of(b) > layer_of(a))


def circles(g: dict) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_runs_up_a_layer():
    assert upward_imports(with_package_inits(graph())) == []


def test_no_import_circles():
    assert circles(graph()) == []


def test_every_module_has_a_layer():
    for name in modules():
        assert layer_of(name) in range(1, 7), name


def test_planted_back_import_and_circle_are_caught(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "numerics" / "kernels").mkdir()
    (tmp_path / "numerics" / "kernels" / "__init__.py").write_text("")
    (tmp_path / "numerics" / "kernels" / "low.py").write_text("def f():\n    from derivations import rule\n")
    (tmp_path / "derivations" / "rule.py").write_text("from derivations import other\n")
    (tmp_path / "derivations" / "other.py").write_text("from . import rule\n")
    g = graph(tmp_path)
    assert upward_imports(g) == ["numerics.kernels.low (layer 1) imports derivations.rule (layer 4)"]
    assert circles(g) == [["derivations.other", "derivations.rule"]]


def test_a_package_init_counts_for_every_module_in_it(tmp_path):
    """A layer-1 module whose package ``__init__`` imports a layer-4 module depends on layer 4."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "coeffsearch" / "__init__.py").write_text("from coeffsearch.registry import resolve\n")
    (tmp_path / "coeffsearch" / "registry.py").write_text("")
    (tmp_path / "coeffsearch" / "schedule.py").write_text("")
    (tmp_path / "derivations" / "__init__.py").write_text("from numerics.kernels import low\n")
    (tmp_path / "numerics" / "kernels").mkdir()
    (tmp_path / "numerics" / "kernels" / "__init__.py").write_text("")
    (tmp_path / "numerics" / "kernels" / "low.py").write_text("")
    g = with_package_inits(graph(tmp_path))
    assert g["coeffsearch.schedule"] == {"coeffsearch.registry"}
    assert g["derivations"] == {"numerics.kernels.low"} and g["numerics.kernels.low"] == set()
    assert upward_imports(g) == ["coeffsearch.schedule (layer 1) imports coeffsearch.registry (layer 4)"]


#: at most this many imports inside functions, each lazy for a stated reason (issue 18: at most 10)
MAX_LAZY_IMPORTS = 10


def test_function_local_imports_are_few_and_explained():
    explained, unexplained = function_local_imports()
    assert len(explained) <= MAX_LAZY_IMPORTS, explained
    assert unexplained == [], "an import inside a function needs a '# lazy: <reason>' (or move it up)"


#: the docs extension's own budget: every import it needs runs when Sphinx loads it (the build uses them all)
MAX_LAZY_EXTENSION_IMPORTS = 0


def test_docs_extension_function_local_imports_are_few_and_explained():
    explained, unexplained = extension_local_imports()
    assert (ROOT / EXTENSION / "__init__.py").is_file(), f"the docs extension moved from {EXTENSION}"
    assert len(explained) <= MAX_LAZY_EXTENSION_IMPORTS, explained
    assert unexplained == [], "an import inside a function needs a '# lazy: <reason>' (or move it up)"


def test_planted_function_local_import_in_the_extension_is_counted(tmp_path):
    (tmp_path / EXTENSION).mkdir(parents=True)
    (tmp_path / EXTENSION / "__init__.py").write_text("from . import pages\n")
    (tmp_path / EXTENSION / "pages.py").write_text(
        "import os\n\n\nclass D:\n    def run(self):\n        from .objects import catalogue\n"
        "        import jax  # lazy: planted\n")
    explained, unexplained = extension_local_imports(tmp_path)
    assert explained == [f"{EXTENSION.as_posix()}/pages.py:7"]
    assert unexplained == [f"{EXTENSION.as_posix()}/pages.py:6"]


def test_planted_function_local_import_is_counted(tmp_path):
    (tmp_path / "derivations").mkdir()
    (tmp_path / "derivations" / "__init__.py").write_text("import os\n")
    (tmp_path / "derivations" / "rule.py").write_text(
        "def f():\n    import json\n    from os import (\n        path,  # lazy: planted\n    )\n"
        "    class C:\n        def g(self):\n            import re  # lazy: planted\n")
    explained, unexplained = function_local_imports(tmp_path)
    assert explained == ["derivations/rule.py:3", "derivations/rule.py:8"]
    assert unexplained == ["derivations/rule.py:2"]


#: the most lines a hand-written module may have (issue 18, item 6); generated code is not counted. The other
#: half of item 6, no function too complex, is ruff's C901 (mccabe) in pyproject.toml ([tool.ruff.lint.mccabe])
MAX_MODULE_LINES = 600
#: TEMPORARY (issue 18): modules over the limit that other helpers are splitting while this check lands; the
#: lead removes this list once they are split (then the check covers every module)
OVERSIZE_EXEMPT = (
)


def long_modules(root: Path = ROOT, limit: int = MAX_MODULE_LINES) -> list[str]:
    """``name (N lines)`` of every hand-written module of more than ``limit`` lines."""
    out = []
    for name, path in modules(root).items():
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > limit:
            out.append(f"{name} ({count} lines)")
    return sorted(out)


def test_no_hand_written_module_over_600_lines():
    assert [m for m in long_modules() if m.split()[0] not in OVERSIZE_EXEMPT] == []


def test_planted_long_module_is_caught(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "numerics" / "emitted").mkdir()
    (tmp_path / "numerics" / "emitted" / "__init__.py").write_text("")
    (tmp_path / "numerics" / "emitted" / "rule.py").write_text("x = 1\n" * 5000)  # generated: not counted
    (tmp_path / "derivations" / "fits.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "derivations" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules(tmp_path) == [f"derivations.long ({MAX_MODULE_LINES + 1} lines)"]
