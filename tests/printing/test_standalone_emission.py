"""Emitted modules import their routines from one runtime per target, or inline exactly the ones they reach.

By default a printed module imports the routines its code calls from :mod:`foundation.compute.jax_runtime`
(``numpy_runtime`` for NumPy), naming exactly those; ``--standalone`` inlines the transitive closure of the
routines the printed code reaches (found from the code: :func:`~derivations.printing.codegen.routine_closure`),
with the constants they read, so the module imports only ``jax``/``functools`` (``numpy``).
"""

import ast
import importlib
import inspect
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from derivations import halfsplit
from derivations.cli import render
from derivations.printing import codegen, numpy_printer
from derivations.printing.codegen import (
    UnresolvedName,
    free_globals,
    routine_closure,
    unresolved_names,
)
from foundation.compute import jax_runtime, jax_sylvester, numpy_runtime
from tests.conftest import load_module

RUNTIMES = {"jax": jax_runtime, "numpy": numpy_runtime}


def imports(source: str) -> set[str]:
    """The top-level packages a module's import statements name."""
    tree = ast.parse(source)
    out = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return out | {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}


def runtime_imports(source: str) -> set[str]:
    """The names a module imports from a runtime module."""
    return {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)
            and n.module in ("foundation.compute.jax_runtime", "foundation.compute.numpy_runtime") for a in n.names}


def top_level_defs(source: str) -> list[str]:
    """Names defined at the top of a module (functions and assignments), in order."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            out.append(node.name)
        elif isinstance(node, ast.Assign):
            out += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return out


@pytest.fixture(scope="module")
def standalone_sources():
    rule = halfsplit.rule_module()
    return {target: render(rule, target, standalone=True) for target in RUNTIMES}


@pytest.fixture(scope="module")
def default_sources(halfsplit_source):
    return {"jax": halfsplit_source, "numpy": render(halfsplit.rule_module(), "numpy")}


@pytest.mark.parametrize("target", ["jax", "numpy"])
def test_default_module_imports_exactly_the_routines_its_code_calls(default_sources, target):
    source, runtime = default_sources[target], RUNTIMES[target]
    assert imports(source) <= {"jax", "functools", "numpy", "foundation"}
    assert imports(source) - {"foundation"} <= ({"jax", "functools"} if target == "jax" else {"numpy"})
    own = set(top_level_defs(source))
    read = free_globals(source.replace(codegen.runtime_import(runtime, runtime_imports(source)), ""))
    assert runtime_imports(source) == read & set(runtime.__all__) and not own & set(runtime.__all__)
    assert unresolved_names(source) == []


@pytest.mark.parametrize("target", ["jax", "numpy"])
def test_standalone_module_inlines_exactly_the_transitive_closure(standalone_sources, default_sources, target):
    source, runtime = standalone_sources[target], RUNTIMES[target]
    assert imports(source) == ({"jax", "functools"} if target == "jax" else {"numpy"})
    inlined = [n for n in top_level_defs(source) if n in runtime.__all__]
    assert inlined == routine_closure(runtime_imports(default_sources[target]), runtime)
    # independently, by walking the module's own text: every inlined routine is reached from the printed
    # functions, and nothing it reads is missing
    tree = {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    todo = [n for n in tree if n not in runtime.__all__]
    reached = set()
    while todo:
        name = todo.pop()
        if name in reached or name not in tree:
            continue
        reached.add(name)
        todo += [n.id for n in ast.walk(tree[name]) if isinstance(n, ast.Name)]
    assert set(inlined) - {n for n in inlined if not inspect.isfunction(getattr(runtime, n))} <= reached
    assert unresolved_names(source) == []
    for constant in ("GRAM_ASPECT", "MAX_SCHEDULE_STEPS") if target == "jax" else ():
        assert f"\n{constant} = {getattr(runtime, constant)!r}" in source  # read by an inlined routine


def test_closure_follows_routine_sources_not_local_names(tmp_path, monkeypatch):
    """Planted: an unused routine, and a local variable that shares a routine's name; neither is inlined."""
    (tmp_path / "planted_runtime.py").write_text(
        "LIMIT = 3\nUNREAD = 4\n\n\ndef helper(x):\n    return min(x, LIMIT)\n\n\n"
        "def used(x):\n    unused = helper(x)\n    return [unused for unused in (unused,)]\n\n\n"
        "def unused(x):\n    return helper(x) + UNREAD\n\n\n"
        "__all__ = ['LIMIT', 'UNREAD', 'helper', 'used', 'unused']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    runtime = importlib.import_module("planted_runtime")
    code = "def f(x):\n    return used(x)\n"
    assert routine_closure(free_globals(code), runtime) == ["LIMIT", "helper", "used"]
    imported, constants, routines = codegen.routine_parts(code, runtime, standalone=True)
    assert imported == "" and constants == "LIMIT = 3\n" and "def unused" not in routines
    assert unresolved_names("\n".join([constants, routines, code])) == []
    imported, constants, routines = codegen.routine_parts(code, runtime, standalone=False)
    assert imported == "from planted_runtime import (\n    used,\n)\n" and constants == routines == ""


def test_a_planted_runtime_export_that_nothing_calls_is_not_inlined(monkeypatch):
    planted = "sylvester_lowrank"  # a real routine the printed code never reaches
    monkeypatch.setattr(jax_runtime, planted, jax_sylvester.sylvester_lowrank, raising=False)
    monkeypatch.setattr(jax_runtime, "__all__", [*jax_runtime.__all__, planted])
    source = render(halfsplit.rule_module(), "jax", standalone=True)
    assert f"def {planted}(" not in source and "def spectral_sign(" in source


def test_a_routine_dropped_from_the_closure_makes_the_standalone_module_fail(monkeypatch, tmp_path):
    """Planted: ``check_shapes`` (reached only through ``validate_inputs``) left out of the closure."""
    closure = codegen.routine_closure
    monkeypatch.setattr(codegen, "routine_closure", lambda names, runtime: [n for n in closure(names, runtime)
                                                                           if n != "check_shapes"])
    with pytest.raises(UnresolvedName, match="reads check_shapes, which nothing in it defines"):
        render(halfsplit.rule_module(), "jax", standalone=True)
    # and without the check, the module it would have written fails when it runs
    monkeypatch.setattr(numpy_printer, "check_resolved", lambda source, what: source)
    path = tmp_path / "broken.py"
    path.write_text(render(halfsplit.rule_module(), "numpy", standalone=True))
    module = load_module(path, "broken_standalone_halfsplit")
    w = np.random.default_rng(0).standard_normal((6, 2))
    with pytest.raises(NameError, match="check_shapes"):
        module.halfsplit_qk(w, w, w, w, eps=0.1)


def test_every_runtime_routine_reads_only_exports_and_its_imports():
    """A routine reading a name its runtime does not export would break the standalone modules that inline it."""
    allowed = {"jax": {"jax", "jnp", "functools"}, "numpy": {"np", "scipy"}}
    for target, runtime in RUNTIMES.items():
        for name in runtime.__all__:
            value = getattr(runtime, name)
            if inspect.isfunction(value):
                missing = set(unresolved_names(inspect.getsource(value))) - set(runtime.__all__) - allowed[target]
                assert not missing, (target, name, missing)


@pytest.mark.e2e
def test_standalone_module_runs_where_the_project_cannot_be_imported(standalone_sources, tmp_path):
    """The standalone modules in a fresh interpreter that sees site-packages (jax, numpy) but not the project."""
    for target, source in standalone_sources.items():
        (tmp_path / f"halfsplit_{target}.py").write_text(source)
    script = (
        f"import importlib.util, sys\nsys.path.insert(0, {str(tmp_path)!r})\n"
        f"sys.path.append({sysconfig.get_paths()['purelib']!r})  # no .pth files: no editable install\n"
        "assert importlib.util.find_spec('numerics') is None and importlib.util.find_spec('derivations') is None\n"
        "import jax\n"
        "import numpy as np\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "import halfsplit_jax, halfsplit_numpy\n"
        "w = np.random.default_rng(0).standard_normal((6, 2))\n"
        "a = halfsplit_numpy.halfsplit_qk(w, w, w, w, eps=0.1)\n"
        "b = halfsplit_jax.halfsplit_qk(w, w, w, w, eps=0.1, msign='svd')\n"
        "assert all(np.allclose(x, np.asarray(y), atol=1e-5) for x, y in zip(a, b))\n"
        "print('ok')\n")
    run = subprocess.run([sys.executable, "-S", "-I", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0 and run.stdout == "ok\n", run.stderr[-2000:]
    assert str(Path(__file__).resolve().parents[2]) not in run.stderr
