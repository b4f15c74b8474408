"""Translation validation of the code printers: every emitted function against its checked formula.

For each :class:`~derivations.printing.codegen.EmittedFunction` of a printed module, random
instances are drawn at two or more sizes with all dimensions distinct (the derivation's own check
sizes, those with distinct sizes, completed by doubling: doubling keeps every linear relation such
as ``n = 2d``). The printed function is called on them and its outputs are compared with the
derivation's formula evaluated independently, by the engine's evaluator
(:func:`derivations.engine.numeric.evaluate`) with the float64 NumPy backend of
:mod:`numerics.kernels.reference`. The comparison runs at the formula's own damping and scalars, and
the JAX code runs with ``msign="svd"`` (exact, unlike a Newton–Schulz schedule) in float64.

A printer that puts a partner on the wrong side (``C_K⁻¹ G`` for ``G C_K⁻¹``) or drops a transpose
then disagrees by O(1) at some size where the dimensions differ: the validation reports the rule,
the target, the function and the output.
"""

from __future__ import annotations

import ast
import inspect
import types
from dataclasses import dataclass

import jax
import numpy as np
import scipy.linalg
from sympy import Symbol, preorder_traversal, srepr
from sympy.matrices.expressions import MatrixSymbol

from derivations.engine.evaluate import InstanceSampler, free_symbols
from derivations.engine.numeric import evaluate
from derivations.engine.vocabulary import BLOCK_DIAGONAL, FactMatrix, facts_of
from numerics.kernels.reference import NumpyBackend

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

    @property
    def passed(self) -> bool:
        return not self.message

    def row(self) -> dict:
        return {"rule": self.rule, "target": self.target, "function": self.function,
                "dims": {str(k): v for k, v in self.dims.items()}, "error": self.error,
                "status": "ok" if self.passed else "FAIL", "failure": self.message}


def load_source(text: str, name: str) -> types.ModuleType:
    """The printed module ``text`` as a module object (not added to ``sys.modules``)."""
    module = types.ModuleType(name)
    exec(compile(text, f"<emitted {name}>", "exec"), module.__dict__)  # noqa: S102 (the code under validation)
    return module


def validate_source(text: str, functions: list, scalars: dict, target: str, rule: str = "", seed: int = 0,
                    sizes: int = SIZES) -> list[Validation]:
    """:func:`validate_functions` on the printed module ``text`` (``target``: ``"jax"`` or ``"numpy"``); the JAX
    code runs in float64 (``jax.enable_x64``) whatever the process's setting."""
    key = (behaviour(text), target, rule, seed, sizes, repr(sorted((str(k), v) for k, v in scalars.items())),
           tuple((fn.name, srepr(tuple(fn.inputs)), repr(sorted((str(k), v) for k, v in fn.extra_scalars.items())),
                  repr(fn.shape_spec), tuple((out, srepr(der.formula)) for out, der in fn.outputs))
                 for fn in functions))
    if key not in _VALIDATED:
        module = load_source(text, f"validated_{rule}_{target}")
        with jax.enable_x64(True):
            _VALIDATED[key] = validate_functions(module, functions, scalars, target, rule, seed, sizes)
        while len(_VALIDATED) > 64:
            _VALIDATED.pop(next(iter(_VALIDATED)))
    return list(_VALIDATED[key])


#: results of :func:`validate_source` by what decides them (the printed code, the formulas, the scalars):
#: ``--check`` and ``--emit`` of the same rule in one process validate once
_VALIDATED: dict = {}


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


def instance(fn, dims: dict, rng: np.random.Generator, scalars: dict, blocked: bool) -> tuple:
    """``(env, args, kwargs)``: values of the formula's symbols, and the emitted function's call.

    A block-diagonal partner is drawn as its blocks (``shape_spec`` ``(k, rows, cols)``); the JAX function
    takes the blocks (``blocked``), the NumPy function the dense matrix, the formula the dense matrix."""
    sampler = InstanceSampler(dims)
    env, args = {}, []
    for sym in fn.inputs:
        spec = fn.shape_spec.get(sym.name)
        if spec is not None and BLOCK_DIAGONAL in facts_of(sym):
            rows_total = _dimension(dims, str(sym.rows)) or int(sym.rows.subs(dims))
            cols_total = _dimension(dims, str(sym.cols)) or int(sym.cols.subs(dims))
            rows = _dimension(dims, spec[1])
            k = rows_total // rows
            block = MatrixSymbol("_block", rows, cols_total // k)
            blocks = np.stack([InstanceSampler({}).matrix(rng, _with_facts(block, sym)) for _ in range(k)])
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
            if sym in fn.extra_scalars:  # a count such as the group size G: a whole number
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
            env, args, kwargs = instance(fn, dims, rng, scalars, blocked=target == "jax")
            if "msign" in accepts:
                kwargs["msign"] = "svd"
            results.append(_compare(rule, target, fn, call, dims, env, args, kwargs, backend))
    return results


def _compare(rule, target, fn, call, dims, env, args, kwargs, backend) -> Validation:
    where = f"{rule}: {target} function {fn.name} at {', '.join(f'{k}={v}' for k, v in dims.items())}"
    try:
        got = call(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 (any failure of printed code is a validation failure)
        return Validation(rule, target, fn.name, dims, float("inf"), f"{where}: raised {type(exc).__name__}: {exc}")
    got = got if isinstance(got, tuple) else (got,)
    if len(got) != len(fn.outputs):
        return Validation(rule, target, fn.name, dims, float("inf"),
                          f"{where}: returned {len(got)} outputs, the derivations give {len(fn.outputs)}")
    worst, message = 0.0, ""
    for (out, der), value in zip(fn.outputs, got, strict=True):
        want = np.asarray(evaluate(der.formula, env, backend, dims), dtype=np.float64)
        value = np.asarray(value, dtype=np.float64)
        if value.shape != want.shape:
            return Validation(rule, target, fn.name, dims, float("inf"),
                              f"{where}: output {out} has shape {value.shape}, the formula {want.shape}")
        error = float(np.max(np.abs(value - want), initial=0.0) / max(1.0, float(np.max(np.abs(want), initial=0.0))))
        if not np.isfinite(error) or error > TOLERANCE:
            message = message or (f"{where}: output {out} differs from the checked formula of {der.name} "
                                  f"by {error:.1e} (limit {TOLERANCE:.0e})")
        worst = max(worst, error) if np.isfinite(error) else float("inf")
    return Validation(rule, target, fn.name, dims, worst, message)
