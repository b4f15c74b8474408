"""Example calls of a rule's emitted functions, drawn from its declaration (NumPy).

Every public function of an emitted module has an example call: positional arrays and keyword scalars that the
golden-copy, non-finite and hostile-input tests call it with. Nothing lists them by hand: each is drawn from what
the rule declares (:class:`~derivations.engine.rule.RuleModule`, :class:`~derivations.engine.rule.EmittedFunction`):

* the sizes: the function's ``example_sizes``, else the rule's, else the first check size of its derivation with
  all dimensions distinct (:func:`~derivations.printing.validation.check_sizes`); a stored-layout adapter's ``d``,
  ``d_h``, ``H`` and ``H_kv`` from its own ``example_sizes``
  (:class:`~derivations.printing.layout.Adapter`), else the rule's, else
  :data:`~derivations.printing.validation.ADAPTER_SIZES`;
* each argument from its shape and facts, as translation validation draws it
  (:func:`~derivations.printing.validation.instance`): a full-rank partner well conditioned, a block-diagonal
  partner as its blocks (``shape_spec``; the NumPy function takes the dense matrix), a count such as the group
  size ``G`` from the layout record of its reduction step (``G = n / d``); an adapter's arguments in their stored
  layouts (:func:`~derivations.printing.validation.stored_instance`);
* the keywords: the rule's scalars (``eps``; ``damping`` only where the rule names it, and then positive) and
  the function's extra scalars; ``head_dim`` for an adapter with heads.

Sizes are checked before anything is drawn (:func:`size_problems`, :func:`adapter_size_problems`): every dimension
of every argument has a size, a positive whole number; the sizes differ from each other (with ``d = d_h`` a
transposed argument would go unnoticed); an argument of full column rank is at least as tall as wide (``rows ≥
cols``), one of full row rank at least as wide as tall, a symmetric one square; a block-diagonal partner splits
into its blocks; an adapter's heads are ``d × d_h`` with ``d > d_h`` (full column rank, not square) and its
``H_kv`` shared heads divide its ``H`` heads (``H_kv = H``: one per head). A declaration no call fits is one
:class:`ExampleError` line naming the rule, the function and the argument.

Examples:
  >>> import numpy as np
  >>> from derivations import registry
  >>> from derivations.printing.examples import example_call
  >>> args, kwargs = example_call(registry.rule_module("halfsplit"), "halfsplit_qk", np.random.default_rng(0))
  >>> [a.shape for a in args], sorted(kwargs)
  ([(7, 3), (7, 3), (7, 3), (7, 3)], ['eps'])
"""

from __future__ import annotations

import numpy as np
from sympy import Symbol

from derivations.printing.validation import ADAPTER_SIZES, check_sizes, instance, stored_instance
from derivations.vocabulary.nodes import (
    BLOCK_DIAGONAL,
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ISOTROPIC_COLUMNS,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    facts_of,
)

#: facts that need ``rows ≥ cols`` (tall), ``cols ≥ rows`` (wide) or a square matrix
TALL = (FULL_COLUMN_RANK, ORTHONORMAL_COLUMNS, ISOTROPIC_COLUMNS)
WIDE = (FULL_ROW_RANK, ORTHONORMAL_ROWS)
SQUARE = (SPD, SYMMETRIC)


class ExampleError(ValueError):
    """A rule's example declaration that no call fits: one line naming the rule, the function and the argument."""


def _named(sizes: dict) -> dict:
    return {str(k): v for k, v in sizes.items()}


def _dimensions(fn, sym) -> list:
    """The dimension symbols argument ``sym`` of ``fn`` needs: its shape's, and a block-diagonal partner's block
    rows (``shape_spec``)."""
    dims = sorted(sym.rows.free_symbols | sym.cols.free_symbols, key=str)
    spec = fn.shape_spec.get(sym.name)
    if spec is not None and BLOCK_DIAGONAL in facts_of(sym) and spec[1] not in map(str, dims):
        known = {str(s): s for m in fn.inputs for s in m.rows.free_symbols | m.cols.free_symbols}
        dims.append(known.get(spec[1], Symbol(spec[1], integer=True, positive=True)))
    return dims


def function_sizes(rule, fn) -> dict:
    """The sizes of ``fn``'s example call (dimension symbol → size): declared (the function's ``example_sizes``,
    else the rule's) or its derivation's first check size with all dimensions distinct; :class:`ExampleError` when
    they do not fit its arguments (:func:`size_problems`)."""
    declared = _named(fn.example_sizes or rule.example_sizes)
    if declared:
        sizes = {s: declared[str(s)] for m in fn.inputs for s in _dimensions(fn, m) if str(s) in declared}
    else:
        try:
            sizes = check_sizes(fn, 1)[0]
        except ValueError as exc:
            raise ExampleError(f"{rule.name}: the example of {fn.name}: {exc}") from None
    problems = size_problems(fn, sizes, sorted(declared))
    if problems:
        raise ExampleError(f"{rule.name}: the example of {fn.name}: {problems[0]}")
    return sizes


def _fact_problems(facts: frozenset, rows: int, cols: int) -> list[str]:
    out = [f"has {fact.replace('_', ' ')}: needs rows >= columns" for fact in TALL if fact in facts and rows < cols]
    out += [f"has {fact.replace('_', ' ')}: needs columns >= rows" for fact in WIDE if fact in facts and cols < rows]
    out += [f"is {fact.replace('_', ' ')}: needs a square shape" for fact in SQUARE if fact in facts and rows != cols]
    return out


def size_problems(fn, sizes: dict, declared: list | None = None) -> list[str]:
    """Why ``sizes`` (dimension symbol → size) fit no call of ``fn`` (empty when they fit): a dimension without a
    size, a size that is no positive whole number, two equal sizes, or an argument whose facts its shape breaks.
    ``declared``: the names the declaration gives (for the message about a missing one)."""
    named = _named(sizes)
    out = [f"size {name} = {value!r} is not a positive whole number" for name, value in named.items()
           if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1]
    if out:
        return out
    for m in fn.inputs:
        missing = [str(s) for s in _dimensions(fn, m) if str(s) not in named]
        if missing:
            out.append(f"argument {m.name} ({m.rows} × {m.cols}) has no example size for {', '.join(missing)} "
                       f"(example_sizes gives {', '.join(declared or named) or 'none'})")
            continue
        rows, cols = int(m.rows.subs(sizes)), int(m.cols.subs(sizes))
        where = f"argument {m.name} ({m.rows} × {m.cols} = {rows} × {cols})"
        spec = fn.shape_spec.get(m.name)
        if spec is not None and BLOCK_DIAGONAL in facts_of(m):
            block_rows = named[spec[1]]
            if rows % block_rows or cols % (rows // block_rows):
                out.append(f"{where} does not split into diagonal blocks of {spec[1]} = {block_rows} rows")
                continue
            rows, cols = block_rows, cols // (rows // block_rows)
            where += f", each diagonal block {rows} × {cols},"
        out += [f"{where} {problem}" for problem in _fact_problems(facts_of(m), rows, cols)]
    by_size: dict = {}
    for name, value in named.items():
        by_size.setdefault(int(value), []).append(name)
    out += [f"sizes {' = '.join(names)} = {value} are equal: every size must differ (a transposed argument would "
            "go unnoticed)" for value, names in by_size.items() if len(names) > 1]
    return out


def adapter_sizes(rule, adapter) -> dict:
    """The stored sizes of ``adapter``'s example call (``d``, ``d_h``; ``H``, ``H_kv`` when it takes heads): its
    ``example_sizes``, else the rule's, else :data:`~derivations.printing.validation.ADAPTER_SIZES`;
    :class:`ExampleError` when they do not fit (:func:`adapter_size_problems`)."""
    source = _named(adapter.example_sizes or rule.example_sizes) or ADAPTER_SIZES[0]
    needed = ("d", "d_h", "H", "H_kv") if adapter.head_dim else ("d", "d_h")
    sizes = {name: source[name] for name in needed if name in source}
    problems = adapter_size_problems(adapter, sizes)
    if problems:
        raise ExampleError(f"{rule.name}: the example of {adapter.entry}: {problems[0]}")
    return sizes


def adapter_size_problems(adapter, sizes: dict) -> list[str]:
    """Why ``sizes`` fit no stored-layout call of ``adapter`` (empty when they fit)."""
    needed = ("d", "d_h", "H", "H_kv") if adapter.head_dim else ("d", "d_h")
    missing = [name for name in needed if name not in sizes]
    if missing:
        return [f"stored arguments {', '.join(adapter.stored)} have no example size for {', '.join(missing)}"]
    out = [f"size {name} = {value!r} is not a positive whole number" for name, value in sizes.items()
           if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1]
    if out:
        return out
    if sizes["d"] <= sizes["d_h"]:
        out.append(f"stored weights {', '.join(n for n in adapter.stored if n.startswith('W_'))} have heads of d × d_h "
                   f"= {sizes['d']} × {sizes['d_h']} of full column rank: needs d > d_h (d = d_h would hide a "
                   "transposed head)")
    if adapter.head_dim and sizes["H"] % sizes["H_kv"]:
        out.append(f"H_kv = {sizes['H_kv']} shared heads do not divide H = {sizes['H']} heads")
    return out


def function_example(rule, fn, rng: np.random.Generator, target: str = "jax") -> tuple[list, dict]:
    """``(args, kwargs)``: NumPy arrays for an example call of emitted function ``fn`` of ``rule`` (``target="numpy"``:
    a block-diagonal partner as its dense matrix; the JAX and PyTorch modules take its blocks)."""
    sizes = function_sizes(rule, fn)
    try:
        _, args, kwargs = instance(fn, sizes, rng, rule.scalars, blocked=target != "numpy")
    except (ValueError, ArithmeticError) as exc:
        raise ExampleError(f"{rule.name}: the example of {fn.name}: {exc}") from None
    named, counts = set(rule.scalars.values()) | set(fn.extra_scalars.values()), set(fn.counts)
    return args, {k: int(v) if k in counts else v for k, v in kwargs.items() if k in named}


def adapter_example(rule, adapter, rng: np.random.Generator) -> tuple[list, dict]:
    """``(args, kwargs)``: an example call of the stored-layout entry point ``adapter.entry`` (JAX and PyTorch)."""
    sizes = adapter_sizes(rule, adapter)
    args = list(stored_instance(adapter, sizes, rng).values())
    kwargs = {name: float(rng.uniform(0.05, 0.5) if name == "damping" else rng.uniform(0.5, 2.0))
              for name in rule.scalars.values()}
    if adapter.head_dim:
        kwargs["head_dim"] = sizes["d_h"]
    return args, kwargs


def _adapters(rule) -> list:
    return list(rule.adapters()) if rule.adapters else []


def example_names(rule, target: str = "jax") -> list[str]:
    """The public functions of ``rule``'s emitted ``target`` module that have an example call: its emitted
    functions and, in the JAX and PyTorch modules, its adapters' entry points."""
    return [fn.name for fn in rule.functions()] + ([a.entry for a in _adapters(rule)] if target != "numpy" else [])


def example_call(rule, name: str, rng: np.random.Generator, target: str = "jax") -> tuple[list, dict]:
    """``(args, kwargs)``: an example call of the public function ``name`` of ``rule``'s emitted ``target``
    module, drawn from the declaration with ``rng``; :class:`ExampleError` for a declaration no call fits."""
    for fn in rule.functions():
        if fn.name == name:
            return function_example(rule, fn, rng, target)
    for adapter in _adapters(rule):
        if adapter.entry == name and target != "numpy":
            return adapter_example(rule, adapter, rng)
    raise ExampleError(f"{rule.name}: no public function {name!r} in its {target} module "
                       f"(known: {', '.join(example_names(rule, target))})")


def example_problems(rule, seed: int = 0) -> list[str]:
    """One line per public function of ``rule``'s emitted modules whose example call cannot be drawn (empty when
    every one can): what ``--emit jax|numpy``, ``--check`` and ``python -m derivations.regenerate`` refuse."""
    out = []
    for target in ("jax", "numpy"):
        for name in example_names(rule, target):
            try:
                example_call(rule, name, np.random.default_rng(seed), target)
            except ExampleError as exc:
                out.append(str(exc))
    return list(dict.fromkeys(out))
