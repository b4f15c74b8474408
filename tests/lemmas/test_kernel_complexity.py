"""The trusted kernel stays readable in one sitting: no function in it over cyclomatic complexity 15, no exemption
from that limit, and the size its docstring states is its size.

The complexity is counted as radon counts it (:func:`cyclomatic`): one, plus one per ``if``, conditional expression,
loop (and its ``else``), ``except`` handler, comprehension ``for`` and ``if``, ``match`` case, ``assert``, and per
extra operand of ``and``/``or``; a nested function counts on its own, not in its parent. Ruff's C901 (pyproject.toml)
counts neither the ``and``/``or`` operands nor the comprehensions, and passed a kernel function of complexity 46 by
this count: hence this count, on the kernel's modules (:data:`KERNEL`). Each check is shown to fail on a planted
module (the ``planted`` tests).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

ROOT = Path(__file__).resolve().parents[2]
#: the modules of the trusted kernel (each one's docstring states its size)
KERNEL = ("derivations/lemmas/kernel.py",)
#: the most complex a kernel function may be
MAX_COMPLEXITY = 15

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _decisions(node: ast.AST) -> int:
    """The decision points ``node`` itself adds (radon's rules)."""
    if isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
        return 1
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return 1 + bool(node.orelse)
    if isinstance(node, ast.Try):
        return len(node.handlers) + bool(node.orelse)
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.Match):  # a wildcard case is the match's "else"
        return max(0, len(node.cases) - any(getattr(c.pattern, "pattern", False) is None for c in node.cases))
    return 0


def cyclomatic(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The cyclomatic complexity of one function: one plus the decision points of its body, outside the functions
    and classes nested in it (radon does not look inside an ``assert`` either)."""
    count, stack = 1, list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            continue
        count += _decisions(node)
        if not isinstance(node, ast.Assert):
            stack.extend(ast.iter_child_nodes(node))
    return count


def complexities(path: Path) -> dict[str, int]:
    """``{"line:name": complexity}`` of every function of the module at ``path``, methods and nested ones too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {f"{f.lineno}:{f.name}": cyclomatic(f) for f in ast.walk(tree) if isinstance(f, _FUNCTIONS)}


def too_complex(paths, limit: int = MAX_COMPLEXITY) -> list[str]:
    """``module:line:name (N)`` of every function over ``limit``."""
    return [f"{path.name}:{name} ({n})" for path in paths for name, n in complexities(path).items() if n > limit]


def exemptions(paths, pyproject: Path) -> list[str]:
    """What would exempt a kernel module from the lint limits: a ``noqa`` comment in it, or a per-file ignore or
    exclusion of it in ``pyproject``'s ``[tool.ruff]``."""
    found = [f"{path.name}:{i}: noqa" for path in paths
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "noqa" in line.lower()]
    ruff = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("ruff", {})
    patterns = [*ruff.get("lint", {}).get("per-file-ignores", {}), *ruff.get("extend-exclude", ()),
                *ruff.get("exclude", ())]
    for path in paths:
        rel = path.relative_to(pyproject.parent).as_posix()
        found += [f"pyproject.toml: {p}" for p in patterns if p and (rel.startswith(p) or Path(rel).match(p))]
    return found


SIZE = re.compile(r"(\d+) lines, (\d+) functions and methods")


def size_claims(path: Path) -> list[str]:
    """Where the module docstring's ``N lines, M functions and methods`` is not the module's size."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    found = SIZE.search(ast.get_docstring(tree) or "")
    lines, functions = len(text.splitlines()), sum(isinstance(f, _FUNCTIONS) for f in ast.walk(tree))
    size = f"{lines} lines, {functions} functions and methods"
    if found is None:
        return [f"{path.name}: its docstring does not state its size ({size})"]
    if found[0] != size:
        return [f"{path.name}: its docstring says {found[0]}, it has {size}"]
    return []


def _kernel() -> list[Path]:
    return [ROOT / m for m in KERNEL]


def test_no_kernel_function_over_complexity_15():
    assert too_complex(_kernel()) == []


def test_nothing_exempts_the_kernel_from_the_lint_limits():
    assert exemptions(_kernel(), ROOT / "pyproject.toml") == []


def test_the_kernel_docstring_states_its_size():
    assert [p for m in _kernel() for p in size_claims(m)] == []


#: sixteen: one plus fifteen decision points of every kind the count knows
PLANTED_16 = '''
def tangled(xs, a, b):
    if a and b:  # 2
        pass
    elif a or b or xs:  # 3
        pass
    for x in xs:  # 1
        while x:  # 1
            x -= 1
        else:  # 1
            pass
    try:
        pass
    except ValueError:  # 1
        pass
    assert a  # 1
    ys = [y for y in xs if y]  # 2
    z = 1 if a else 2  # 1
    match z:
        case 1:  # 1
            pass
        case 2:  # 1
            pass
        case _:  # the else
            pass

    def closure(c):  # counts on its own
        return c if c else (c and c)

    return ys, closure
'''


def test_planted_function_of_complexity_16_is_caught(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED_16)
    assert complexities(planted) == {"2:tangled": 16, "27:closure": 3}
    assert too_complex([planted]) == ["planted.py:2:tangled (16)"]
    assert too_complex([planted], limit=16) == []


def test_planted_closure_over_15_is_caught_apart_from_its_parent(tmp_path):
    planted = tmp_path / "planted.py"
    body = "".join(f"        if x == {i}:\n            return {i}\n" for i in range(15))
    planted.write_text(f"def outer():\n    def inner(x):\n{body}    return inner\n")
    assert too_complex([planted]) == ["planted.py:2:inner (16)"]


def test_planted_exemptions_are_caught(tmp_path):
    module = tmp_path / "derivations" / "lemmas" / "kernel.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f(a, b):  # noqa: C901\n    return a and b\n")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.ruff.lint.per-file-ignores]\n"derivations/lemmas/kernel.py" = ["C901"]\n')
    assert exemptions([module], pyproject) == ["kernel.py:1: noqa", "pyproject.toml: derivations/lemmas/kernel.py"]
    pyproject.write_text('[tool.ruff]\nextend-exclude = ["derivations/lemmas"]\n')
    assert exemptions([module], pyproject)[-1] == "pyproject.toml: derivations/lemmas"


def test_a_planted_wrong_size_is_caught(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('"""A module: 4 lines, 1 functions and methods."""\n\n\ndef f():\n    pass\n')
    assert size_claims(planted) == ["planted.py: its docstring says 4 lines, 1 functions and methods, it has 5 "
                                    "lines, 1 functions and methods"]
    planted.write_text('"""A module: 5 lines, 1 functions and methods."""\n\n\ndef f():\n    pass\n')
    assert size_claims(planted) == []
