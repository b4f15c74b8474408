"""Translation validation of the code printers: every emitted function against its checked formula.

For each :class:`~derivations.engine.rule.EmittedFunction` of a printed module, random
instances are drawn at two or more sizes with all dimensions distinct (the derivation's own check
sizes, those with distinct sizes, completed by doubling: doubling keeps every linear relation such
as ``n = 2d``). The printed function is called on them and its outputs are compared with the
derivation's formula evaluated independently, by the engine's evaluator
(:func:`derivations.vocabulary.numeric.evaluate`) with the float64 NumPy backend of
:mod:`foundation.compute.reference`. The comparison runs at the formula's own damping and scalars, and
the JAX code runs with ``msign="svd"`` (exact, unlike a Newton–Schulz schedule) in float64.

A printer that puts a partner on the wrong side (``C_K⁻¹ G`` for ``G C_K⁻¹``) or drops a transpose
then disagrees by O(1) at some size where the dimensions differ: the validation reports the rule,
the target, the function and the output.

Two more comparisons run with it, reported in the same rows: every function once more at its first size
against the formula evaluated in mpmath on partners of condition number 1e5 (:func:`validate_precision`,
``reference="mpmath"``), and every stored-layout adapter of the JAX module against the core formulas
evaluated head by head on weights drawn in their stored layouts (:func:`validate_adapters`). A public
function of a module that none of these covers is a failure (:func:`unvalidated`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import types
from dataclasses import dataclass, replace

import jax
import mpmath
import numpy as np
import scipy.linalg
from sympy import Symbol, preorder_traversal, srepr
from sympy.matrices.expressions import MatrixSymbol

from derivations.printing.layout_reference import LayoutError, layouts, updates, weight_of
from derivations.vocabulary.evaluate import InstanceSampler, free_symbols
from derivations.vocabulary.nodes import BLOCK_DIAGONAL, FULL_COLUMN_RANK, FULL_ROW_RANK, FactMatrix, facts_of
from derivations.vocabulary.numeric import evaluate
from foundation.compute.reference import MpmathBackend, NumpyBackend
from foundation.compute.spectra import log_spaced_spectrum, with_singular_values

#: largest accepted ``max|emitted − formula| / max(1, max|formula|)`` (float64, SVD msign)
TOLERANCE = 1e-8
#: how many sizes each function is validated at (each with all dimensions distinct)
SIZES = 2


@dataclass
class Validation:
    """One emitted function at one size: the worst relative error over its outputs."""

    rule: str
    target: str
    function: str
    dims: dict
    error: float
    message: str = ""
    #: what the function is compared with: ``"float64"`` (the formula in float64, at :data:`TOLERANCE`) or
    #: ``"mpmath"`` (at 50 digits on ill-conditioned partners, at :data:`MPMATH_TOLERANCE`)
    reference: str = "float64"
    limit: float = TOLERANCE

    @property
    def passed(self) -> bool:
        return not self.message

    def row(self) -> dict:
        return {"rule": self.rule, "target": self.target, "function": self.function,
                "dims": {str(k): v for k, v in self.dims.items()}, "reference": self.reference, "error": self.error,
                "limit": self.limit, "status": "ok" if self.passed else "FAIL", "failure": self.message}


def load_source(text: str, name: str) -> types.ModuleType:
    """The printed module ``text`` as a module object (not added to ``sys.modules``)."""
    module = types.ModuleType(name)
    exec(compile(text, f"<emitted {name}>", "exec"), module.__dict__)  # noqa: S102 (the code under validation)
    return module


def validate_source(text: str, functions: list, scalars: dict, target: str, rule: str = "", seed: int = 0,
                    sizes: int = SIZES, adapters: tuple = ()) -> list[Validation]:
    """:func:`unvalidated`, :func:`validate_functions`, :func:`validate_precision` and, in the JAX and PyTorch
    modules, :func:`validate_adapters` on the printed module ``text`` (``target``: ``"jax"``, ``"numpy"`` or
    ``"torch"``); the JAX code runs in float64 (``jax.enable_x64``) whatever the process's setting."""
    key = (behaviour(text), target, rule, seed, sizes, repr(sorted((str(k), v) for k, v in scalars.items())),
           tuple(_function_key(fn) for fn in functions),
           tuple((a.name, a.entry, repr(a.stored), a.head_dim, tuple((p, _function_key(fn)) for p, fn in a.calls),
                  tuple(repr(lay) for _, fn in a.calls for lay in layouts(fn))) for a in adapters))
    if key not in _VALIDATED:
        module = load_source(text, f"validated_{rule}_{target}")
        adapters = tuple(adapters) if target in ADAPTER_TARGETS else ()  # not printed into the NumPy module
        with jax.enable_x64(True):
            _VALIDATED[key] = (unvalidated(module, functions, adapters, target, rule)
                               + validate_functions(module, functions, scalars, target, rule, seed, sizes)
                               + validate_precision(module, functions, scalars, target, rule, seed)
                               + validate_adapters(module, adapters, scalars, rule, seed, sizes, target))
        while len(_VALIDATED) > 64:
            _VALIDATED.pop(next(iter(_VALIDATED)))
    return list(_VALIDATED[key])


#: the targets whose modules take block-diagonal partners as their blocks and print the stored-layout adapters
ADAPTER_TARGETS = ("jax", "torch")


def target_call(module: types.ModuleType, call, target: str):
    """``call`` as the validation and the hostile battery call it, on NumPy arrays: a PyTorch function gets each
    array as a tensor of its dtype (bfloat16 through float32, exactly) and returns NumPy arrays (bfloat16 ones as
    float32, exactly); the module's own ``torch`` converts, so nothing here imports it. Other targets take and
    return arrays as they are."""
    if target != "torch":
        return call
    torch = module.torch

    def tensor(a):
        if not isinstance(a, np.ndarray):
            return a
        return torch.as_tensor(a.astype(np.float32)).to(torch.bfloat16) if a.dtype.name == "bfloat16" \
            else torch.as_tensor(a)

    def array(t):
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy() if isinstance(t, torch.Tensor) else t

    @functools.wraps(call)  # its signature: what the battery reads the keyword arguments from
    def on_tensors(*args, **kwargs):
        out = call(*(tensor(a) for a in args), **kwargs)
        return tuple(array(t) for t in out) if isinstance(out, tuple) else array(out)

    return on_tensors


#: results of :func:`validate_source` by what decides them (the printed code, the formulas, the scalars):
#: ``--check`` and ``--emit`` of the same rule in one process validate once
_VALIDATED: dict = {}


def _function_key(fn) -> tuple:
    return (fn.name, srepr(tuple(fn.inputs)), repr(sorted((str(k), v) for k, v in fn.extra_scalars.items())),
            repr(fn.shape_spec), tuple((out, srepr(der.formula)) for out, der in fn.outputs))


def behaviour(text: str) -> str:
    """The printed module's code as an AST dump without its docstrings or positions: two texts with the same
    dump define the same functions computing the same values (a docstring is data nothing here reads), so
    emissions that differ only in their prose (a schedule's description, say) are validated once."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _sources(fn) -> list:
    """The checked derivations an output is read off (its own, or a derived output's first source)."""
    return [getattr(der, "_sources", (der,))[0] for der in fn.derivations()]


def distinct_sizes(der, count: int = SIZES) -> list[dict]:
    """``count`` size assignments for derivation ``der``: its check sizes whose dimensions are all distinct,
    completed by multiplying every size of the first of them by 2, 3, …"""
    dims_lists = [d for d in der.context.check_dims if len(set(d.values())) == len(d)]
    if not dims_lists:
        raise ValueError(f"no check size of {der.name} has all dimensions distinct")
    out = list(dims_lists[:count])
    factor = 2
    while len(out) < count:
        out.append({k: v * factor for k, v in dims_lists[0].items()})
        factor += 1
    return out


def check_sizes(fn, count: int = SIZES) -> list[dict]:
    """:func:`distinct_sizes` of the derivation behind ``fn``'s first output."""
    return distinct_sizes(_sources(fn)[0], count)


def _dimension(dims: dict, name: str):
    return next((v for k, v in dims.items() if str(k) == name), None)


def instance(fn, dims: dict, rng: np.random.Generator, scalars: dict, blocked: bool,
             sampler_type: type = InstanceSampler) -> tuple:
    """``(env, args, kwargs)``: values of the formula's symbols, and the emitted function's call.

    A block-diagonal partner is drawn as its blocks (``shape_spec`` ``(k, rows, cols)``); the JAX function
    takes the blocks (``blocked``), the NumPy function the dense matrix, the formula the dense matrix.
    ``sampler_type`` draws the matrices (:class:`IllConditioned` for the mpmath comparison)."""
    sampler = sampler_type(dims)
    env, args = {}, []
    for sym in fn.inputs:
        spec = fn.shape_spec.get(sym.name)
        if spec is not None and BLOCK_DIAGONAL in facts_of(sym):
            rows_total = _dimension(dims, str(sym.rows)) or int(sym.rows.subs(dims))
            cols_total = _dimension(dims, str(sym.cols)) or int(sym.cols.subs(dims))
            rows = _dimension(dims, spec[1])
            k = rows_total // rows
            block = MatrixSymbol("_block", rows, cols_total // k)
            blocks = np.stack([sampler_type({}).matrix(rng, _with_facts(block, sym)) for _ in range(k)])
            env[sym] = scipy.linalg.block_diag(*blocks)
            args.append(blocks if blocked else env[sym])
        else:
            env[sym] = sampler.matrix(rng, sym)
            args.append(env[sym])
    kwargs: dict = {}
    named = {**scalars, **fn.extra_scalars}
    formulas = [der.formula for _, der in fn.outputs]
    by_name = {sym.name: env[sym] for sym in fn.inputs}
    for f in formulas:  # the same argument under other facts (W_K with isotropic columns): bound by name
        for sym in f.atoms(MatrixSymbol):
            if sym.name in by_name:
                env[sym] = by_name[sym.name]
    for sym in sorted(free_symbols(*formulas), key=str):
        if isinstance(sym, Symbol) and not isinstance(sym, MatrixSymbol) and sym not in env:
            if fn.extra_scalars.get(sym) in fn.counts:  # a count such as the group size G: a whole number
                env[sym] = _group_size(fn, sym, dims)
            else:
                env[sym] = float(rng.uniform(0.05, 0.5) if named.get(sym) == "damping" else rng.uniform(0.5, 2.0))
            if sym in named:
                kwargs[named[sym]] = env[sym]
    if "damping" not in kwargs:
        kwargs["damping"] = _own_damping(formulas, {s.name for s in fn.inputs}, env)
    return env, args, kwargs


def _group_size(fn, sym, dims: dict) -> float:
    """A group size ``G`` from the reduction step's layout record: its ``stack_rows`` operand (``G·d × d_h``,
    rows ``n``) stacks ``G`` heads of ``d`` rows, so ``G = n / d``."""
    operands = [step.params["layout"].operand for der in _sources(fn) for step in getattr(der, "steps", ())
                if getattr(step.params.get("layout"), "arrangement", None) == "stack_rows"]
    operands += [m.name for m in fn.inputs if str(m.rows) == "n"]  # a corollary without its own reduction step
    for name in operands:
        operand = next((m for m in fn.inputs if m.name == name), None)
        rows, d = _dimension(dims, str(operand.rows)) if operand else None, _dimension(dims, "d")
        if rows and d and rows % d == 0:
            return float(rows // d)
    raise ValueError(f"{fn.name}: no layout record fixes the count {sym} at sizes {dims}")


def _with_facts(block: MatrixSymbol, sym) -> MatrixSymbol:
    """A block of ``sym`` carrying its facts but block diagonality (a block is a plain matrix)."""
    return FactMatrix(block.name, block.rows, block.cols, [f for f in facts_of(sym) if f != BLOCK_DIAGONAL])


def _own_damping(formulas, arguments: set, env: dict) -> float:
    """The λ the formula's Gram nodes of arguments carry (the emitted ``damping`` argument stands for it)."""
    values = set()
    for f in formulas:
        for node in preorder_traversal(f):
            lam = getattr(node, "damping", None)
            base = getattr(node, "base", None)
            if lam is not None and isinstance(base, MatrixSymbol) and base.name in arguments:
                values.add(float(lam.subs({s: v for s, v in env.items() if isinstance(v, float)})))
    if len(values) > 1:
        raise ValueError(f"the formula's Gram nodes of arguments carry different dampings {sorted(values)}")
    return values.pop() if values else 0.0


def validate_functions(module: types.ModuleType, functions: list, scalars: dict, target: str, rule: str = "",
                       seed: int = 0, sizes: int = SIZES) -> list[Validation]:
    """Each function of ``module`` printed from ``functions`` against its derivations' formulas."""
    results = []
    backend = NumpyBackend()
    for k, fn in enumerate(functions):
        call = getattr(module, fn.name, None)
        if call is None:
            results.append(Validation(rule, target, fn.name, {}, float("inf"),
                                      f"{rule}: the {target} module has no function {fn.name}"))
            continue
        accepts = inspect.signature(call).parameters
        for dims in check_sizes(fn, sizes):
            rng = np.random.default_rng([seed, k, *dims.values()])
            env, args, kwargs = instance(fn, dims, rng, scalars, blocked=target in ADAPTER_TARGETS)
            if "msign" in accepts:
                kwargs["msign"] = "svd"
            wants = [np.asarray(evaluate(der.formula, env, backend, dims), dtype=np.float64) for _, der in fn.outputs]
            where = f"{rule}: {target} function {fn.name} at {', '.join(f'{k}={v}' for k, v in dims.items())}"
            results.append(_compare(Validation(rule, target, fn.name, dims, 0.0), where,
                                    target_call(module, call, target), args, kwargs, _formula_wants(fn, wants),
                                    "the derivations"))
    return results


def _compare(row: Validation, where: str, call, args, kwargs, wants: list, giving: str) -> Validation:
    """``row`` with the worst relative error of ``call(*args, **kwargs)``'s outputs against ``wants`` (per output:
    its name, the reference values and what gave them), and a message when it is over ``row.limit`` (or the call
    fails, or returns another number of outputs than ``giving`` gives)."""
    try:
        got = call(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 (any failure of printed code is a validation failure)
        return replace(row, error=float("inf"), message=f"{where}: raised {type(exc).__name__}: {exc}")
    got = got if isinstance(got, tuple) else (got,)
    if len(got) != len(wants):
        return replace(row, error=float("inf"),
                       message=f"{where}: returned {len(got)} outputs, {giving} give {len(wants)}")
    worst, message = 0.0, ""
    for (out, want, source), value in zip(wants, got, strict=True):
        value = np.asarray(value, dtype=np.float64)
        if value.shape != want.shape:
            return replace(row, error=float("inf"), message=f"{where}: output {out} has shape {value.shape}, "
                                                            f"{source} {want.shape}")
        error = relative_error(value, want)
        if not np.isfinite(error) or error > row.limit:
            message = message or f"{where}: output {out} differs from {source} by {error:.1e} (limit {row.limit:.1e})"
        worst = max(worst, error) if np.isfinite(error) else float("inf")
    return replace(row, error=worst, message=message)


def _formula_wants(fn, values) -> list:
    """``(output, reference, what gave it)`` for :func:`_compare`: each output against its derivation's formula."""
    return [(out, value, f"the checked formula of {der.name}") for (out, der), value in zip(fn.outputs, values,
                                                                                            strict=True)]


# ---- float64 against mpmath where cancellation matters ------------------------------------------------------

#: condition number of the full-rank partners in the mpmath comparison (singular values log-spaced in [1/κ, 1])
CONDITION = 1e5
#: unit roundoff of float64
ROUNDOFF = 2.0 ** -53
#: largest accepted ``max|emitted − formula| / max(1, max|formula|)`` against the formula in mpmath:
#: ``100 u κ`` ≈ 1.1e-9 (:func:`validate_precision` says why)
MPMATH_TOLERANCE = 100 * ROUNDOFF * CONDITION
#: mpmath working precision, decimal digits
MPMATH_DIGITS = 50


@dataclass
class IllConditioned(InstanceSampler):
    """Draws a full-rank partner with condition number :data:`CONDITION` (``U diag(σ) Vᵀ``, Haar ``U, V``,
    ``σ`` log-spaced from 1 to ``1/κ`` with both ends); everything else as :class:`InstanceSampler`."""

    def matrix(self, rng: np.random.Generator, sym: MatrixSymbol) -> np.ndarray:
        if {FULL_COLUMN_RANK, FULL_ROW_RANK} & facts_of(sym):
            rows, cols = int(sym.rows.subs(self.dims)), int(sym.cols.subs(self.dims))
            return with_singular_values(rng, rows, cols, log_spaced_spectrum(rng, min(rows, cols), CONDITION))
        return super().matrix(rng, sym)


def validate_precision(module: types.ModuleType, functions: list, scalars: dict, target: str, rule: str = "",
                       seed: int = 0) -> list[Validation]:
    """Each function of ``module`` in float64 against its formulas evaluated in mpmath at :data:`MPMATH_DIGITS`
    digits, at its first check size with all dimensions distinct, with partners of condition number κ =
    :data:`CONDITION` (:class:`IllConditioned`): one row per function, ``reference="mpmath"``.

    The limit, ``100 u κ`` (``u = 2⁻⁵³``): the rules' outputs are products of a partner's inverse Gram root
    ``C⁻¹ = (WᵀW + λI)^(-1/2)`` (or its isotropic scale) with signs and gradients, and ``C⁻¹`` has relative
    condition number κ with respect to ``W``; computed from a backward-stable decomposition of ``W`` (an SVD or
    a scaled eigendecomposition, as the printed routines do) the forward error is ``c u κ`` with ``c`` of order 1
    (measured: ``c ≤ 0.6`` at κ = 1e5 and ``≤ 0.93`` at κ = 1e6 over every emitted function, both targets), so
    ``100 u κ`` ≈ 1.1e-9 leaves a margin of 100. A reference evaluated in float64 through the Gram ``WᵀW`` itself
    has condition κ² and is off by up to ``u κ²`` ≈ 1e-6 here (the engine's float64 evaluator, measured), which is
    why the comparison is with mpmath; code that squared the condition number that way fails it too. A printer
    bug is off by O(1)."""
    results = []
    for k, fn in enumerate(functions):
        call = getattr(module, fn.name, None)
        if call is None:
            continue  # reported by validate_functions
        dims = check_sizes(fn, 1)[0]
        env, args, kwargs = instance(fn, dims, np.random.default_rng([seed, 2000 + k, *dims.values()]), scalars,
                                     blocked=target in ADAPTER_TARGETS, sampler_type=IllConditioned)
        if "msign" in inspect.signature(call).parameters:
            kwargs["msign"] = "svd"
        where = (f"{rule}: {target} function {fn.name} at {', '.join(f'{k}={v}' for k, v in dims.items())} "
                 f"(partners of condition number {CONDITION:.0e}, against mpmath)")
        row = Validation(rule, target, fn.name, dims, 0.0, reference="mpmath", limit=MPMATH_TOLERANCE)
        try:
            wants = [mpmath_value(der.formula, env, dims) for _, der in fn.outputs]
        except (ArithmeticError, ValueError) as exc:  # a formula that cannot be evaluated is no reference
            results.append(replace(row, error=float("inf"), message=f"{where}: the formula has no value: {exc}"))
            continue
        results.append(_compare(row, where, target_call(module, call, target), args, kwargs,
                                _formula_wants(fn, wants), "the derivations"))
    return results


def mpmath_value(formula, env: dict, dims: dict) -> np.ndarray:
    """``formula`` evaluated at :data:`MPMATH_DIGITS` digits on ``env`` (float64 values, taken exactly), rounded to
    float64; remembered per formula and instance, so the JAX and NumPy modules share one evaluation."""
    key = (srepr(formula), repr(sorted((str(k), v) for k, v in dims.items())),
           tuple(sorted((str(s), np.asarray(v, dtype=np.float64).tobytes()) for s, v in env.items())))
    if key not in _MPMATH:
        backend = MpmathBackend(MPMATH_DIGITS)
        with mpmath.workdps(MPMATH_DIGITS):
            values = {s: backend.asarray(v) if isinstance(v, np.ndarray) else mpmath.mpf(v) for s, v in env.items()}
            value = evaluate(formula, values, backend, dims)
            _MPMATH[key] = np.array(value.tolist() if isinstance(value, mpmath.matrix) else value, dtype=np.float64)
        while len(_MPMATH) > 256:
            _MPMATH.pop(next(iter(_MPMATH)))
    return _MPMATH[key]


_MPMATH: dict = {}


def relative_error(value: np.ndarray, want: np.ndarray) -> float:
    """``max|value − want| / max(1, max|want|)``."""
    return float(np.max(np.abs(value - want), initial=0.0) / max(1.0, float(np.max(np.abs(want), initial=0.0))))


def unvalidated(module: types.ModuleType, functions: list, adapters: tuple, target: str, rule: str) -> list:
    """A failure for every public name of ``module`` (its ``__all__``) that is neither an emitted function nor a
    validated adapter's entry point: nothing would say what it must compute."""
    known = {fn.name for fn in functions} | {a.entry for a in adapters}
    return [Validation(rule, target, name, {}, float("inf"),
                       f"{rule}: {target} function {name} has no checked formula to be validated against")
            for name in getattr(module, "__all__", ()) if name not in known]


# ---- stored-layout adapters ------------------------------------------------------------------------------------

#: the adapters' stored sizes: width ``d``, head width ``d_h``, ``H`` heads over ``H_kv`` shared heads, all distinct
#: and distinct from the group size ``G = H / H_kv = 4`` (an adapter without heads takes one ``(d, d_h)`` head per
#: matrix). One size: the core functions behind an adapter are validated at two sizes of their own, and what the
#: adapter adds (head slicing, grouping, transposes, block order) is wrong by O(1) at any size where ``d ≠ d_h``,
#: ``H_kv ≥ 2`` and ``G ≥ 2``; each further size costs the adapter's JAX compilation again (about 2 s)
ADAPTER_SIZES = ({"d": 7, "d_h": 3, "H": 8, "H_kv": 2},)


def shared_weights(adapter) -> set:
    """The stored weights with ``H_kv`` heads: those a record names as shared, or lays out as repeated blocks."""
    return {name for _, fn in adapter.calls for lay in layouts(fn)
            for name in ([lay.shared] if lay.shared else []) + ([lay.stored] if lay.arrangement == "diagonal" else [])}


def stored_instance(adapter, sizes: dict, rng: np.random.Generator) -> dict:
    """Random stored arrays of ``adapter``'s arguments: gradients Gaussian, each weight's heads full rank and well
    conditioned (as :class:`~derivations.vocabulary.evaluate.InstanceSampler` draws a full-rank partner)."""
    shared, d, d_h = shared_weights(adapter), sizes["d"], sizes["d_h"]
    out = {}
    for name, axis in adapter.stored.items():
        heads = 1 if not adapter.head_dim else sizes["H_kv"] if weight_of(name) in shared else sizes["H"]
        blocks = []
        for _ in range(heads):
            block = rng.standard_normal((d, d_h))
            if name.startswith("W_"):
                u, s, vt = np.linalg.svd(block, full_matrices=False)
                block = (u * np.clip(s, 0.3 * s.max(), None)) @ vt
            blocks.append(block if axis == "columns" else block.T)
        out[name] = np.hstack(blocks) if axis == "columns" else np.vstack(blocks)
    return out


def validate_adapters(module: types.ModuleType, adapters: tuple, scalars: dict, rule: str = "", seed: int = 0,
                      sizes: int = SIZES, target: str = "jax") -> list[Validation]:
    """Each adapter's entry point of ``module``, called on weights drawn in their stored layouts, against
    :func:`~derivations.printing.layout_reference.updates`: the core functions' checked formulas evaluated head by
    head on the mathematically laid-out matrices and re-assembled, at (the first ``sizes`` of)
    :data:`ADAPTER_SIZES`."""
    results = []
    for k, adapter in enumerate(adapters):
        call = getattr(module, adapter.entry, None)
        if call is None:
            results.append(Validation(rule, target, adapter.entry, {}, float("inf"),
                                      f"{rule}: the {target} module has no function {adapter.entry}"))
            continue
        for dims in ADAPTER_SIZES[:sizes]:
            shown = dims if adapter.head_dim else {"d": dims["d"], "d_h": dims["d_h"]}
            where = f"{rule}: {target} function {adapter.entry} at {', '.join(f'{n}={v}' for n, v in shown.items())}"
            rng = np.random.default_rng([seed, 1000 + k, *dims.values()])
            stored = stored_instance(adapter, dims, rng)
            values = {str(sym): float(rng.uniform(0.05, 0.5) if name == "damping" else rng.uniform(0.5, 2.0))
                      for sym, name in scalars.items()}
            kwargs = {name: values[str(sym)] for sym, name in scalars.items()}
            kwargs.setdefault("damping", 0.0)
            kwargs["msign"] = "svd"
            if adapter.head_dim:
                kwargs["head_dim"] = dims["d_h"]
            try:
                want = updates(adapter, stored, dims["d_h"] if adapter.head_dim else None, values)
            except LayoutError as exc:
                results.append(Validation(rule, target, adapter.entry, shown, float("inf"), f"{where}: {exc}"))
                continue
            wants = [(out, expected, "the checked formulas evaluated head by head") for out, expected in want.items()]
            results.append(_compare(Validation(rule, target, adapter.entry, shown, 0.0), where,
                                    target_call(module, call, target), list(stored.values()), kwargs, wants,
                                    "the stored weights' updates"))
    return results
