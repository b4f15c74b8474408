"""The emitted functions of a rule as subjects of the hostile battery, each read off the rule's declaration.

A :class:`Subject` is one public function of one emitted module (``"jax"`` or ``"numpy"``) with everything the
battery (:mod:`derivations.printing.battery`) needs to know about it, and nothing written by hand per rule:

* its array arguments, in order, and their *roles*: a **partner** is an argument whose facts ask for full rank
  (:data:`~derivations.printing.examples.TALL`, :data:`~derivations.printing.examples.WIDE`; a stored-layout
  adapter's weights ``W_*``), whose rank and conditioning the update depends on; every other argument is a
  **gradient** (or momentum);
* the dimensions of its arguments (``d``, ``d_h``, …) with their example sizes, all distinct
  (:func:`~derivations.printing.examples.function_sizes`);
* a draw of an example call with leading batch axes, each batch element drawn as the declaration's example
  (:func:`~derivations.printing.validation.instance`, :func:`~derivations.printing.validation.stored_instance`),
  a block-diagonal partner kept as its blocks (:meth:`Subject.to_target` makes it the dense matrix the NumPy
  function takes);
* its **reference**: the outputs the checked formulas give on one batch element, evaluated in float64 by the
  engine's evaluator (:func:`~derivations.vocabulary.numeric.evaluate`; an adapter head by head,
  :func:`~derivations.printing.layout_reference.updates`) or at 50 digits in mpmath
  (:func:`~derivations.printing.validation.mpmath_value`, whose exponent range is unbounded). The formulas carry
  the damping only where the rule names it; elsewhere they hold at ``damping = 0`` and the reference is ``None``
  for any other damping.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
from sympy import Symbol
from sympy.matrices.expressions import MatrixSymbol

from derivations.printing.examples import TALL, WIDE, adapter_sizes, function_sizes
from derivations.printing.layout_reference import updates
from derivations.printing.validation import (
    ADAPTER_TARGETS,
    free_symbols,
    instance,
    mpmath_value,
    stored_instance,
    target_call,
)
from derivations.vocabulary.nodes import BLOCK_DIAGONAL, facts_of
from derivations.vocabulary.numeric import evaluate
from foundation.compute.reference import NumpyBackend

#: facts that make an argument a partner: the update depends on its rank and conditioning
PARTNER_FACTS = frozenset(TALL + WIDE)


@dataclass
class Subject:
    """One public function of one emitted module, as the battery drives it (see the module's docstring)."""

    rule: str
    target: str
    name: str
    call: Callable
    arguments: list  # array argument names, in order
    partners: list  # the partner arguments' names
    shapes: dict  # argument -> its trailing dimension names (a blocked partner: ``(k, rows, cols)``)
    sizes: dict  # dimension name -> example size
    draw_one: Callable  # rng -> (args as drawn, kwargs)
    reference_one: Callable  # (args of one batch element, float64; kwargs) -> list of outputs, or None
    mpmath_one: Callable | None = None  # the same at 50 digits (None: no mpmath reference)
    blocked: dict = field(default_factory=dict)  # argument -> True where drawn as its diagonal blocks
    heads: dict = field(default_factory=dict)  # adapter: argument -> (axis, head width) of its stored heads
    accepts: frozenset = frozenset()  # the keyword arguments the function takes

    @property
    def case_id(self) -> str:
        return f"{self.rule}-{self.target}-{self.name}"

    def draw(self, rng: np.random.Generator, batch: tuple = ()) -> tuple[list, dict]:
        """``(args, kwargs)`` with leading axes ``batch``: each element drawn as the declaration's example, the
        scalars of the first."""
        draws = [self.draw_one(rng) for _ in range(int(np.prod(batch, dtype=int)) or 1)]
        kwargs = draws[0][1]
        if not batch:
            return draws[0][0], kwargs
        args = [np.stack([d[0][i] for d in draws]).reshape(*batch, *np.shape(draws[0][0][i]))
                for i in range(len(self.arguments))]
        return args, kwargs

    def to_target(self, args: list) -> list:
        """The drawn arguments as the function takes them: a blocked partner dense for the NumPy function."""
        if self.target != "numpy":
            return list(args)
        return [_dense(a) if self.blocked.get(n) else a for n, a in zip(self.arguments, args, strict=True)]

    def reference(self, args: list, kwargs: dict, digits: bool = False) -> list | None:
        """The checked formulas' outputs on ``args`` (as drawn, any leading axes, converted to float64) with
        ``kwargs``: float64, or mpmath (``digits``); ``None`` where the formulas do not cover the call."""
        one = self.mpmath_one if digits else self.reference_one
        if one is None:
            return None
        lead = np.shape(args[0])[:np.ndim(args[0]) - _trailing(self, 0)]
        outs = []
        for index in np.ndindex(*lead):
            got = one([np.asarray(a[index], dtype=np.float64) for a in args], kwargs)
            if got is None:
                return None
            outs.append(got)
        if not lead:
            return outs[0]
        return [np.stack([o[k] for o in outs]).reshape(*lead, *np.shape(outs[0][k])) for k in range(len(outs[0]))]


def _trailing(subject: Subject, i: int) -> int:
    return len(subject.shapes[subject.arguments[i]])


def _dense(blocks: np.ndarray) -> np.ndarray:
    """``(..., k, r, c)`` diagonal blocks → ``(..., k·r, k·c)`` block-diagonal matrices."""
    lead, (k, r, c) = blocks.shape[:-3], blocks.shape[-3:]
    if not lead:
        return scipy.linalg.block_diag(*blocks)
    out = np.zeros((*lead, k * r, k * c), dtype=blocks.dtype)
    for i in np.ndindex(*lead):
        out[i] = scipy.linalg.block_diag(*blocks[i])
    return out


def is_partner(sym) -> bool:
    """An argument whose facts ask for full rank (or a block-diagonal one)."""
    return bool(PARTNER_FACTS & facts_of(sym))


def function_subject(rule, fn, target: str, call: Callable) -> Subject:
    """The subject of emitted function ``fn`` of ``rule`` in its ``target`` module (``call``: the function)."""
    sizes = function_sizes(rule, fn)
    named = {**rule.scalars, **fn.extra_scalars}
    counts = set(fn.counts)
    kept = set(named.values())
    blocked = {m.name: fn.shape_spec.get(m.name) is not None and BLOCK_DIAGONAL in facts_of(m) for m in fn.inputs}
    formulas = [der.formula for _, der in fn.outputs]
    damped = "damping" in named.values()

    def draw_one(rng):
        _, args, kwargs = instance(fn, sizes, rng, rule.scalars, blocked=True)
        return list(args), {k: int(v) if k in counts else v for k, v in kwargs.items() if k in kept}

    def env_of(args, kwargs):
        if not damped and float(kwargs.get("damping", 0.0)) != 0.0:
            return None  # the formulas hold at damping 0 only
        by_name = {m.name: (scipy.linalg.block_diag(*a) if blocked[m.name] else a) for m, a in zip(fn.inputs, args,
                                                                                                     strict=True)}
        env = {m: by_name[m.name] for m in fn.inputs}
        for f in formulas:
            for sym in f.atoms(MatrixSymbol):
                if sym.name in by_name:
                    env[sym] = by_name[sym.name]
        for sym in free_symbols(*formulas):
            if isinstance(sym, Symbol) and not isinstance(sym, MatrixSymbol) and sym in named:
                env[sym] = float(kwargs.get(named[sym], 0.0))
        return env

    def reference_one(args, kwargs):
        env = env_of(args, kwargs)
        if env is None:
            return None
        return [np.asarray(evaluate(f, env, NumpyBackend(), sizes), dtype=np.float64) for f in formulas]

    def mpmath_one(args, kwargs):
        env = env_of(args, kwargs)
        return None if env is None else [mpmath_value(f, env, sizes) for f in formulas]

    shapes = {m.name: tuple(fn.shape_spec[m.name]) if blocked[m.name] else (str(m.rows), str(m.cols))
              for m in fn.inputs}
    return Subject(rule.name, target, fn.name, call, [m.name for m in fn.inputs],
                   [m.name for m in fn.inputs if is_partner(m)], shapes, {str(k): int(v) for k, v in sizes.items()},
                   draw_one, reference_one, mpmath_one, blocked=blocked,
                   accepts=frozenset(inspect.signature(call).parameters))


def adapter_subject(rule, adapter, call: Callable, target: str = "jax") -> Subject:
    """The subject of stored-layout entry point ``adapter.entry`` of the ``target`` module (JAX or PyTorch):
    partners are its weights ``W_*``."""
    sizes = adapter_sizes(rule, adapter)
    d_h = sizes["d_h"] if adapter.head_dim else None

    def draw_one(rng):
        args = list(stored_instance(adapter, sizes, rng).values())
        kwargs = {name: float(rng.uniform(0.5, 2.0)) for name in rule.scalars.values() if name != "damping"}
        if adapter.head_dim:
            kwargs["head_dim"] = sizes["d_h"]
        return args, kwargs

    def reference_one(args, kwargs):
        if float(kwargs.get("damping", 0.0)) != 0.0:
            return None
        values = {str(sym): float(kwargs[name]) for sym, name in rule.scalars.items() if name in kwargs}
        return list(updates(adapter, dict(zip(adapter.stored, args, strict=True)), d_h, values).values())

    shapes = {name: ("d", "H·d_h") if axis == "columns" else ("H·d_h", "d") for name, axis in adapter.stored.items()}
    return Subject(rule.name, target, adapter.entry, call, list(adapter.stored),
                   [n for n in adapter.stored if n.startswith("W_")], shapes, dict(sizes), draw_one, reference_one,
                   heads={n: (axis, sizes["d_h"]) for n, axis in adapter.stored.items()},
                   accepts=frozenset(inspect.signature(call).parameters))


def subjects(rule, modules: dict) -> list[Subject]:
    """Every public function of ``rule``'s emitted modules ``modules`` (target → module) as a subject."""
    out = []
    for target, module in modules.items():
        for fn in rule.functions():
            out.append(function_subject(rule, fn, target, target_call(module, getattr(module, fn.name), target)))
        if target in ADAPTER_TARGETS and rule.adapters:
            out += [adapter_subject(rule, a, target_call(module, getattr(module, a.entry), target), target)
                    for a in rule.adapters()]
    return out
