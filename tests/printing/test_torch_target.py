"""The PyTorch target (``--emit torch``): the same functions as the JAX target, agreeing with them, checked alike.

Every rule's shipped PyTorch module (``numerics/emitted/<rule>_torch.py``) against its shipped JAX module on
the same inputs, in float64 and float32 (one eager call each: JAX with ``jax.disable_jit``, so nothing is
compiled; an end-to-end check, and in the suite :func:`torch_agreement`, called by
``tests/rules/test_golden.py`` on the JAX results it computes anyway); each emitted PyTorch function
compiled once with ``torch.compile(backend="aot_eager")`` (end to end: TorchDynamo's tracing takes seconds per
function); hostile
inputs (NaN/Inf named, underflow refused, bool tensors refused, batch axes, 0-size batches); the standalone
module imports only ``torch``; a dropped transpose planted in the PyTorch printer fails translation
validation while the JAX target stays valid. Without PyTorch every test here is skipped.
"""

import ast
import importlib
import inspect
from pathlib import Path

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is optional (pip install 'optimizer-workbench[torch]')")

from derivations import registry  # noqa: E402
from derivations.cli import adapters_of, render  # noqa: E402
from derivations.hostile import rule_subjects  # noqa: E402
from derivations.printing.battery import pair_of, run  # noqa: E402
from derivations.printing.battery_cases import DTYPES, PROMISES  # noqa: E402
from derivations.printing.examples import example_call, example_names  # noqa: E402
from derivations.printing.torch_printer import TorchPrinter  # noqa: E402
from derivations.printing.validation import validate_source  # noqa: E402
from foundation.compute import output_limits, torch_input_checks, torch_output_checks  # noqa: E402
from tests.conftest import load_module  # noqa: E402

RULES = tuple(name for name in registry.rule_names() if registry.rule_module(name).functions())
GOLDEN = Path(__file__).parents[1] / "golden"
#: the largest ``max|torch − jax| / max(1, max|jax|)`` accepted per dtype (same algorithms, same orientation:
#: they differ by rounding alone, amplified at most by the Newton–Schulz iteration and the inverse roots)
TOLERANCE = {"float64": 1e-9, "float32": 2e-3}


def _outputs(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def torch_agreement(rule: str, name: str, args: list, kwargs: dict, jax_outputs) -> None:
    """The shipped PyTorch function ``name`` of ``rule`` on ``args`` (NumPy, float64) in float64 and float32 against
    the JAX function's float64 outputs: within :data:`TOLERANCE` of the dtype."""
    torch_module = importlib.import_module(f"numerics.emitted.{rule}_torch")
    for dtype in ("float64", "float32"):
        got = getattr(torch_module, name)(*(torch.as_tensor(np.asarray(a, dtype=dtype)) for a in args), **kwargs)
        for w, g in zip(_outputs(jax_outputs), _outputs(got), strict=True):
            w, g = np.asarray(w, dtype=np.float64), g.double().numpy()
            difference = float(np.max(np.abs(w - g), initial=0.0)) / max(1.0, float(np.max(np.abs(w), initial=0.0)))
            assert difference <= TOLERANCE[dtype], (rule, name, dtype, difference)


def _modules(rule):
    return (importlib.import_module(f"numerics.emitted.{rule}"),
            importlib.import_module(f"numerics.emitted.{rule}_torch"))


def _largest_difference(rule, dtype):
    """The largest relative difference between the PyTorch and JAX functions of ``rule`` on its examples."""
    jax_module, torch_module = _modules(rule)
    module, worst = registry.rule_module(rule), 0.0
    for name in example_names(module, "jax"):
        args, kwargs = example_call(module, name, np.random.default_rng(len(name)), "jax")
        args = [np.asarray(a, dtype=dtype) for a in args]
        with jax.enable_x64(True), jax.disable_jit():
            want = getattr(jax_module, name)(*(jax.numpy.asarray(a) for a in args), **kwargs)
        got = getattr(torch_module, name)(*(torch.as_tensor(a) for a in args), **kwargs)
        for w, g in zip(_outputs(want), _outputs(got), strict=True):
            assert str(g.dtype) == f"torch.{dtype}", (rule, name, g.dtype)
            w, g = np.asarray(w, dtype=np.float64), g.double().numpy()
            worst = max(worst, float(np.max(np.abs(w - g)) / max(1.0, float(np.max(np.abs(w))))))
    return worst


@pytest.mark.e2e  # JAX run op by op (jax.disable_jit, nothing compiled) takes about 70 s per dtype on 2 cores
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_and_jax_modules_agree_on_every_rule(dtype):
    """The suite's own comparison rides on the JAX calls of ``tests/rules/test_golden.py`` (float64, SVD msign);
    this one runs both targets in each dtype with the default Newton–Schulz msign."""
    differences = {rule: _largest_difference(rule, dtype) for rule in RULES}
    worst = max(differences, key=differences.get)
    print(f"largest torch/jax difference in {dtype}: {differences[worst]:.2e} ({worst})")
    assert differences[worst] <= TOLERANCE[dtype], differences


def test_standalone_module_imports_only_torch_and_computes_the_same():
    module = registry.rule_module("gqa")
    text = render(module, "torch", standalone=True)
    tree = ast.parse(text)
    assert [n for n in tree.body if isinstance(n, ast.ImportFrom)] == []
    assert {alias.name for n in tree.body if isinstance(n, ast.Import) for alias in n.names} == {"torch"}
    standalone: dict = {}
    exec(compile(text, "<standalone gqa torch>", "exec"), standalone)  # noqa: S102 (the emitted module under test)
    shipped = _modules("gqa")[1]
    for name in example_names(module, "torch"):
        args, kwargs = example_call(module, name, np.random.default_rng(1), "torch")
        args = [torch.as_tensor(a) for a in args]
        for a, b in zip(*(_outputs(f(*args, **kwargs)) for f in (standalone[name], getattr(shipped, name))),
                        strict=True):
            assert torch.equal(a, b), name


def test_shipped_torch_modules_agree_with_their_golden_copies():
    """``tests/golden/<rule>_torch.py`` (frozen) against the shipped copy, which the freshness check of
    ``python -m derivations.regenerate --check`` ties to a fresh emission."""
    for rule in RULES:
        golden, shipped = load_module(GOLDEN / f"{rule}_torch.py", f"golden_{rule}_torch"), _modules(rule)[1]
        assert set(golden.__all__) <= set(shipped.__all__), rule
        module = registry.rule_module(rule)
        for name in golden.__all__:
            args, kwargs = example_call(module, name, np.random.default_rng(hash(name) % 2**32), "torch")
            args = [torch.as_tensor(a) for a in args]
            if "msign" in inspect.signature(getattr(shipped, name)).parameters:
                kwargs["msign"] = "svd"
            want, got = getattr(golden, name)(*args, **kwargs), getattr(shipped, name)(*args, **kwargs)
            for w, g in zip(*(v if isinstance(v, tuple) else (v,) for v in (want, got)), strict=True):
                assert float((w - g).abs().max()) <= 1e-11 * max(1.0, float(w.abs().max())), (rule, name)


def test_shipped_torch_modules_import_only_torch_and_the_runtime():
    for rule in RULES:
        tree = ast.parse(inspect.getsource(_modules(rule)[1]))
        imported = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
        assert imported == {"torch", "foundation.compute.torch_runtime"}, (rule, imported)


@pytest.mark.e2e  # TorchDynamo traces each function for 10-20 s on 2 cores (aot_eager: no code generated)
def test_every_emitted_torch_function_compiles_with_aot_eager():
    """Each function compiled once, and a NaN input still refused by the compiled function (the checks are graph
    breaks: the error is raised, not turned into NaN)."""
    torch._dynamo.reset()
    for rule in RULES:
        module = registry.rule_module(rule)
        torch_module = _modules(rule)[1]
        for name in example_names(module, "torch"):
            args, kwargs = example_call(module, name, np.random.default_rng(2), "torch")
            args = [torch.as_tensor(a, dtype=torch.float32) for a in args]
            compiled = torch.compile(getattr(torch_module, name), backend="aot_eager")
            got, want = compiled(*args, **kwargs), getattr(torch_module, name)(*args, **kwargs)
            for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want)), strict=True):
                assert torch.allclose(g, w, rtol=1e-4, atol=1e-6), (rule, name)
            args[-1] = args[-1].clone()
            args[-1][(0,) * args[-1].ndim] = float("nan")
            with pytest.raises(ValueError, match=f"^{name}: .* contains NaN or Inf$"):
                compiled(*args, **kwargs)


@pytest.mark.e2e
def test_one_function_compiles_with_inductor():
    torch_module = _modules("halfsplit")[1]
    w_q, w_k, g_q, g_k = (torch.randn(3, 16, 4, dtype=torch.float32) for _ in range(4))
    compiled = torch.compile(torch_module.halfsplit_qk)
    got = compiled(w_q, w_k, g_q, g_k, eps=0.1)
    want = torch_module.halfsplit_qk(w_q, w_k, g_q, g_k, eps=0.1)
    assert all(torch.allclose(g, w, rtol=1e-4, atol=1e-6) for g, w in zip(got, want, strict=True))


# ---- hostile inputs -------------------------------------------------------------------------------------------

def _qk(shape=(2, 8, 3), dtype=torch.float64, scale=1.0):
    g = torch.Generator().manual_seed(0)
    return [scale * torch.randn(*shape, generator=g, dtype=dtype) for _ in range(4)]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_input_is_named(bad):
    halfsplit_qk = _modules("halfsplit")[1].halfsplit_qk
    args = _qk()
    args[2][1, 3, 0] = bad
    with pytest.raises(ValueError, match=r"^halfsplit_qk: G_Q contains NaN or Inf$"):
        halfsplit_qk(*args, eps=0.1)
    outputs = halfsplit_qk(*args, eps=0.1, check_finite=False)
    assert all(bool(torch.isnan(o).all()) for o in outputs)


def test_an_underflowing_update_is_refused_not_flushed():
    halfsplit_qk = _modules("halfsplit")[1].halfsplit_qk
    with pytest.raises(ValueError, match=r"^halfsplit_qk: the result underflows float32"):
        halfsplit_qk(*_qk(dtype=torch.float32), eps=1e-37)
    tiny = halfsplit_qk(*_qk(dtype=torch.float32, scale=1e-30), eps=1e-30)  # representable: right, not refused
    assert all(bool(torch.isfinite(t).all()) and float(t.abs().max()) > 0 for t in tiny)


@pytest.mark.parametrize("make, error", [
    (lambda a: a > 0, r"^halfsplit_qk: W_K must be real floating point, got dtype torch.bool$"),
    (lambda a: a.to(torch.int64), r"^halfsplit_qk: W_K must be real floating point, got dtype torch.int64$"),
    (lambda a: a.numpy(), r"^halfsplit_qk: W_K must be a torch.Tensor, got ndarray; convert it with "),
    (lambda a: a.to(torch.float32), r"^halfsplit_qk: W_K has dtype torch.float32 but earlier arguments have "),
])
def test_bad_arrays_are_refused_with_one_line(make, error):
    args = _qk()
    args[1] = make(args[1])
    with pytest.raises(TypeError, match=error):
        _modules("halfsplit")[1].halfsplit_qk(*args, eps=0.1)


@pytest.mark.parametrize("kwargs, error", [
    ({"eps": True}, r"^halfsplit_qk: eps must be a real number, got the boolean True$"),
    ({"eps": -1.0}, r"^halfsplit_qk: eps must be finite and >= 0, got -1.0$"),
    ({"eps": 0.1, "msign": "qr"}, r"^halfsplit_qk: msign must be one of "),
])
def test_bad_scalars_are_refused_with_one_line(kwargs, error):
    with pytest.raises((TypeError, ValueError), match=error):
        _modules("halfsplit")[1].halfsplit_qk(*_qk(), **kwargs)


def test_batch_axes_are_batched_and_an_empty_batch_gives_empty_updates():
    halfsplit_qk = _modules("halfsplit")[1].halfsplit_qk
    args = _qk(shape=(2, 3, 8, 3))
    batched = halfsplit_qk(*args, eps=0.1, msign="svd")
    single = halfsplit_qk(*(a[1, 2] for a in args), eps=0.1, msign="svd")
    assert all(torch.allclose(b[1, 2], s, atol=1e-12) for b, s in zip(batched, single, strict=True))
    empty = halfsplit_qk(*_qk(shape=(0, 8, 3)), eps=0.1)
    assert [tuple(e.shape) for e in empty] == [(0, 8, 3), (0, 8, 3)]
    with pytest.raises(ValueError, match=r"^halfsplit_qk: W_Q has d_h = 0 "):
        halfsplit_qk(*_qk(shape=(2, 8, 0)), eps=0.1)


def test_bfloat16_and_no_grad_and_inputs_that_require_grad():
    halfsplit_qk = _modules("halfsplit")[1].halfsplit_qk
    args = [a.to(torch.bfloat16).requires_grad_() for a in _qk()]
    out = halfsplit_qk(*args, eps=0.1)
    assert all(o.dtype == torch.bfloat16 and not o.requires_grad for o in out)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(halfsplit_qk(*args, eps=0.1), out, strict=True))


def test_underflow_limits_and_words_are_the_shared_ones():
    for name in ("float64", "float32", "bfloat16", "float16"):
        info = jax.numpy.finfo(name)
        compute = jax.numpy.finfo("float32" if info.bits < 32 else name)
        dtype = getattr(torch, name)
        assert torch_output_checks.underflow_limit(dtype) == output_limits.underflow_bound(info, compute), name
        assert torch_output_checks.underflow_reason(dtype) == output_limits.underflow_phrase(info, compute), name


# ---- the hostile battery's PyTorch target ---------------------------------------------------------------------

def battery_findings(rule, promises, dtypes, batch=(), exact=False):
    """The hostile battery's findings (one line each) for ``rule``'s PyTorch module (:mod:`derivations.hostile`)."""
    subs = rule_subjects(rule)
    return [f.line() for s in subs if s.target == "torch" for d in dtypes
            for f in run(s, d, 0, batch, pair_of(s, subs), promises, exact) if f.status != "ok"]


@pytest.mark.parametrize("rule", RULES)
def test_battery_bad_arguments_are_refused_naming_them(rule):
    """NaN/±Inf in each argument, bool/int/complex arguments, a boolean eps, 0-size axes, an empty batch (float32)."""
    assert battery_findings(rule, ("nonfinite", "dtype", "empty"), ("float32",)) == []


@pytest.mark.e2e
@pytest.mark.parametrize("rule", RULES)
def test_the_whole_battery_on_the_torch_target(rule):
    """Every promise, every dtype (bfloat16 and float16 included), batch axes (2, 3), mpmath references."""
    assert battery_findings(rule, PROMISES, DTYPES["torch"], batch=(2, 3), exact=True) == []


def test_battery_catches_a_torch_check_that_takes_bool_tensors(monkeypatch):
    def takes_any_tensor(function, name, x):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{function}: {name} must be a torch.Tensor")

    monkeypatch.setattr(torch_input_checks, "require_tensor", takes_any_tensor)
    found = battery_findings("halfsplit", ("dtype",), ("float32",))
    assert found and all("halfsplit-torch-" in line for line in found)
    assert any("bool" in line for line in found)


# ---- planted printer bug ------------------------------------------------------------------------------------

def _transpose_dropped(self, expr):
    return self._atom(expr.arg)


def _failures(rule, target):
    module = registry.rule_module(rule)
    return [v.message for v in validate_source(render(module, target), module.functions(), module.scalars, target,
                                               rule, adapters=adapters_of(module)) if not v.passed]


def test_a_dropped_transpose_in_the_torch_printer_fails_translation_validation(monkeypatch):
    assert not _failures("gauge", "torch")
    monkeypatch.setattr(TorchPrinter, "_print_Transpose", _transpose_dropped)
    wrong = _failures("gauge", "torch")
    assert wrong and any("gauge: torch function horizontal_projection" in m for m in wrong)
    assert not _failures("gauge", "jax")  # the plant is in the PyTorch printer alone
