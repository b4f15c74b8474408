"""The emitted modules agree with frozen copies, to float64 rounding.

``tests/golden/`` holds ``python -m derivations.<rule> --emit jax|numpy`` for every rule module that
emits functions (the first six as they were before the interpreters and lemmas were rebuilt, the
others as first emitted after translation validation was added); every public function of a fresh
emission is run on the same random inputs as its golden copy (and, where PyTorch is installed, the shipped
PyTorch function on the JAX case's inputs against its results; the PyTorch golden copies are
``tests/printing/test_torch_target.py``'s). A rule that emits functions and has no
golden copy fails :func:`test_every_emitting_rule_has_golden_copies`. The inputs are the rule's declared examples
(:mod:`derivations.printing.examples`).
"""

import importlib
import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest

from derivations import regenerate, registry
from derivations.cli import render
from derivations.printing.examples import example_call
from tests.conftest import load_module

#: PyTorch is optional: where it is installed, the JAX case also holds the shipped PyTorch module to the JAX results
#: (:func:`tests.printing.test_torch_target.torch_agreement`)
TORCH = importlib.util.find_spec("torch") is not None
if TORCH:
    from tests.printing.test_torch_target import torch_agreement

GOLDEN = Path(__file__).parents[1] / "golden"
#: the rules with golden copies (discovered from the files; each must still be a registered rule module)
RULES = sorted({p.stem.rsplit("_", 1)[0] for p in GOLDEN.glob("*_*.py")})


def test_every_emitting_rule_has_golden_copies():
    emitting = {name for name in registry.rule_names() if registry.rule_module(name).functions()}
    assert emitting <= set(RULES), f"no golden copy for {sorted(emitting - set(RULES))}"
    assert all((GOLDEN / f"{rule}_{target}.py").exists() for rule in RULES for target in ("jax", "numpy"))


def _fresh_module(module, target, tmp_path):
    """A fresh emission, imported. A JAX one equal to the shipped copy is the shipped module itself (already
    imported, its programs compiled once per worker for every test that calls it); else it is loaded from its text."""
    text = render(module, target)
    shipped = regenerate.path_of(module.name)
    if target == "jax" and shipped.exists() and shipped.read_text(encoding="utf-8") == text:
        return importlib.import_module(f"numerics.emitted.{module.name}")
    path = tmp_path / f"fresh_{module.name}_{target}.py"
    path.write_text(text)
    return load_module(path, f"fresh_{module.name}_{target}")


@pytest.mark.parametrize("target", ["numpy", "jax"])
@pytest.mark.parametrize("rule", RULES)
def test_fresh_emission_agrees_with_golden_copy(rule, target, tmp_path):
    golden = load_module(GOLDEN / f"{rule}_{target}.py", f"golden_{rule}_{target}")
    module = registry.rule_module(rule)
    fresh = _fresh_module(module, target, tmp_path)
    assert set(golden.__all__) <= set(fresh.__all__)  # new functions may be added; none may go
    positive = {fn.name for fn in module.functions() if fn.positive_damping}  # declared: needs λ > 0
    for name in golden.__all__:
        for damping in ((0.0, 0.05) if name not in positive else (0.1,)):
            args, kwargs = example_call(module, name, np.random.default_rng(hash(name) % 2**32), target)
            kwargs = {**kwargs, "damping": damping}
            if "msign" in inspect.signature(fresh.__dict__[name]).parameters:  # exact, not Newton–Schulz
                kwargs["msign"] = "svd"
            want, got = golden.__dict__[name](*args, **kwargs), fresh.__dict__[name](*args, **kwargs)
            want, got = (w if isinstance(w, tuple) else (w,) for w in (want, got))
            for w, g in zip(want, got, strict=True):
                w, g = np.asarray(w, dtype=np.float64), np.asarray(g, dtype=np.float64)
                assert np.max(np.abs(w - g)) <= 1e-11 * max(1.0, np.max(np.abs(w))), (rule, target, name, damping)
            if target == "jax" and TORCH:  # the PyTorch module on the same inputs, against these JAX results
                torch_agreement(rule, name, args, kwargs, got)
