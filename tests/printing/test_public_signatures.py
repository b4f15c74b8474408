"""Every public function of a shipped emitted module shows only what a user passes: no parameter whose name
starts with ``_`` (an internal hook, such as the stored-layout entry points' caller, lives in the private
``_checked_<name>`` they call instead), and no docstring that names one of the module's private functions.

The signatures and docstrings are read with :mod:`inspect` from the modules as imported (nothing is called, so
nothing is compiled); a planted copy of a module whose public function takes ``_caller=None`` again is found.
"""

from __future__ import annotations

import importlib
import inspect
import re
from types import ModuleType

import pytest

from derivations.regenerate import SHIPPED_DIR, shipped
from tests.conftest import load_module

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

PRIVATE_NAME = re.compile(r"\b_[A-Za-z]\w*")


def private_leaks(module: ModuleType) -> list[str]:
    """``name: parameter`` for each public function's parameter that starts with ``_``, and ``name: docstring
    names _x`` for each private function of the module its docstring names."""
    private = {n for n, v in vars(module).items() if n.startswith("_") and inspect.isfunction(v)}
    found = []
    for name in module.__all__:
        fn = getattr(module, name)
        if not inspect.isfunction(fn):
            continue
        found += [f"{name}: {p}" for p in inspect.signature(fn).parameters if p.startswith("_")]
        found += [f"{name}: docstring names {m}" for m in PRIVATE_NAME.findall(fn.__doc__ or "") if m in private]
    return found


@pytest.mark.parametrize("rule", shipped())
def test_no_public_emitted_function_shows_a_private_parameter(rule):
    module = importlib.import_module(f"numerics.emitted.{rule}")
    assert private_leaks(module) == []


def test_a_planted_private_parameter_and_a_docstring_naming_the_private_function_are_found(tmp_path):
    text = (SHIPPED_DIR / "halfsplit.py").read_text(encoding="utf-8")
    public = re.search(r"^def halfsplit_qk\(.*check_finite=True\):$", text, re.MULTILINE)
    assert public, "the planted copy needs the public signature of halfsplit_qk"
    planted = text.replace(public.group(), public.group()[:-2] + ", _caller=None):", 1)
    planted = planted.replace('    """Half-split', '    """Calls _checked_halfsplit_qk. Half-split', 1)
    path = tmp_path / "planted_private_halfsplit.py"
    path.write_text(planted, encoding="utf-8")
    leaks = private_leaks(load_module(path, "planted_private_halfsplit"))
    assert leaks == ["halfsplit_qk: _caller", "halfsplit_qk: docstring names _checked_halfsplit_qk"], leaks
