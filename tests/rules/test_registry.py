"""The one registry of rule modules: a throwaway rule module, one new file, is seen everywhere
(the command line, the cross-checker, regeneration of emitted modules, the docs' rule pages, the
tests' list) without being listed anywhere."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from derivations import registry

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

ROOT = Path(__file__).resolve().parents[2]

THROWAWAY = '''
"""A throwaway rule module (written by tests/rules/test_registry.py)."""
from functools import cache

from derivations import lemmas as L
from derivations.engine.rule import RuleModule
from derivations.cli import main
from derivations.engine.derivation import identity_chain
from derivations.gauge_directions import A, context, tangent, vertical


@cache
def invisible():
    der = identity_chain("throwaway.invisible", "Throwaway: vertical directions leave M unchanged",
                         tangent(*vertical(A)), context(), statement="T(W_Q A, -W_K A^T)")
    der.apply(L.RING)
    return der


def derivations():
    return [invisible()]


def rule_module():
    return RuleModule(name="throwaway", title="Throwaway rule", derivations=derivations, functions=list, scalars={})


if __name__ == "__main__":
    raise SystemExit(main(rule_module()))
'''

PROBE = '''
import sys
sys.path.insert(0, "docs/_ext")
from derivations import registry, regenerate
from derivations.crosscheck import rule_lookup
from workbench_sphinx.objects import _rule_module_names
print("registry", "throwaway" in registry.rule_names())
print("crosscheck", "throwaway" in rule_lookup.RULE_MODULES, rule_lookup.find_derivation("throwaway.invisible")[0].name)
print("regenerate", regenerate.emit("throwaway") is None, regenerate.stale(("throwaway",)) == [])
print("docs", "throwaway" in _rule_module_names())
'''


@pytest.mark.e2e
def test_a_throwaway_rule_module_is_seen_everywhere(tmp_path):
    for package in ("derivations", "numerics", "coeffsearch"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "docs" / "_ext", tmp_path / "docs" / "_ext", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")  # the docs read the packages from it
    (tmp_path / "derivations" / "throwaway.py").write_text(textwrap.dedent(THROWAWAY))

    def run(*argv):
        return subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              check=False)

    probe = run("-c", PROBE)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split("\n")[:4] == ["registry True", "crosscheck True throwaway.invisible",
                                             "regenerate True True", "docs True"], probe.stdout
    text = run("-m", "derivations.throwaway", "--emit", "text")
    assert text.returncode == 0 and "throwaway.invisible" in text.stdout, text.stderr
    check = run("-m", "derivations.regenerate", "--check", "--rule", "throwaway")
    assert check.returncode == 0, check.stdout + check.stderr
    # and the registry of this checkout does not have it: the file was the only change
    assert "throwaway" not in registry.rule_names()


def test_registry_reads_the_package_without_importing_it(tmp_path):
    (tmp_path / "ok.py").write_text("def rule_module():\n    pass\n")
    (tmp_path / "lookup.py").write_text("def rule_module(name):\n    pass\n")  # a helper, not a rule
    (tmp_path / "broken.py").write_text("import nosuchmodule\n\ndef rule_module():\n    pass\n")
    (tmp_path / "helper.py").write_text("def derivations():\n    return []\n")
    (tmp_path / "_private.py").write_text("def rule_module():\n    pass\n")
    assert registry._defining("rule_module", tmp_path) == ("broken", "ok")
    assert registry._defining("derivations", tmp_path) == ("helper",)
    assert set(registry.rule_names()) >= {"halfsplit", "joint", "gqa", "hybrid_ov", "sylvester", "gauge", "balance"}
