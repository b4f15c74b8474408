"""A rule module as one declaration: what ``python -m derivations.<rule>`` derives, emits and checks.

:class:`RuleModule` names the rule, its derivations (a function returning checked
:class:`~derivations.engine.derivation.Derivation` objects) and the public functions of its emitted module
(:class:`EmittedFunction`: arguments, outputs and the derivations behind each output). These are plain data:
this module imports no command line, printer or array library; :mod:`derivations.cli` runs a declaration.

The example inputs of the emitted functions (what the golden copies, the non-finite and the hostile-input tests
call them with) are part of the declaration too: :mod:`derivations.printing.examples` draws them from each
argument's shape and facts, at the sizes the function's derivation is checked at, unless ``example_sizes``
names others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace


@dataclass
class EmittedFunction:
    """One public function of an emitted module: inputs, outputs and the derivations behind them."""

    name: str
    summary: str
    inputs: list  # MatrixSymbols, in argument order
    outputs: list  # (output name, Derivation)
    notes: list = field(default_factory=list)
    #: extra static keyword options: name -> (default, allowed values)
    options: dict = field(default_factory=dict)
    #: the rule needs λ > 0 (e.g. a regularized Sylvester solve)
    positive_damping: bool = False
    #: the outputs depend on the step budget ε (a projection does not)
    needs_eps: bool = True
    #: further positive scalar arguments: Symbol -> argument name (required keywords); a scalar the rule names in
    #: :attr:`RuleModule.scalars` joins every function whose outputs use it
    extra_scalars: dict = field(default_factory=dict)
    #: the extra scalars that are whole numbers (a group size), by argument name
    counts: tuple = ()
    #: argument name -> trailing dimension names, for arguments not stored as their symbol's shape
    #: (a block-diagonal partner travels as its blocks, ``(..., k, d, d_h)``)
    shape_spec: dict = field(default_factory=dict)
    #: sizes of the dimensions of its example call (dimension symbol or name -> size, all distinct): overrides the
    #: rule's ``example_sizes``; empty: its derivation's first check size with all dimensions distinct
    example_sizes: dict = field(default_factory=dict)

    @property
    def argument_names(self) -> list[str]:
        return [m.name for m in self.inputs]

    def shapes(self) -> dict:
        """Argument name → the names of its two trailing dimensions."""
        return {m.name: self.shape_spec.get(m.name, (str(m.rows), str(m.cols))) for m in self.inputs}

    def derivations(self) -> list:
        return [der for _, der in self.outputs]


#: the keyword scalars every emitted function has by these names: the step budget and the damping λ
BUILTIN_SCALARS = ("eps", "damping")


def with_rule_scalars(fn: EmittedFunction, scalars: dict) -> EmittedFunction:
    """``fn`` with each scalar of ``scalars`` (Symbol -> argument name) other than :data:`BUILTIN_SCALARS` that its
    outputs use as a required keyword argument (an extra scalar), so that a scalar is named once, in the rule."""
    used = set().union(*(der.formula.free_symbols for der in fn.derivations()))
    added = {sym: name for sym, name in scalars.items()
             if name not in BUILTIN_SCALARS and sym in used and sym not in fn.extra_scalars}
    return replace(fn, extra_scalars={**fn.extra_scalars, **added}) if added else fn


@dataclass
class RuleModule:
    """What a rule module hands to the command line.

    ``scalars`` names every scalar symbol of the rule's formulas once (Symbol -> argument name): ``eps`` and
    ``damping`` are keywords of every emitted function; any other becomes a required keyword of each function
    whose outputs use it (``functions()`` returns them with it among their ``extra_scalars``).
    """

    name: str
    title: str
    derivations: Callable  # () -> list[Derivation]
    functions: Callable  # () -> list[EmittedFunction]
    scalars: dict
    measurements: Callable | None = None  # (rng) -> list[(label, value, limit)]: value <= limit, or limit None
    description: str = ""
    examples: list = field(default_factory=list)
    #: () -> (source, public names) appended to the emitted JAX module (layout adapters)
    jax_extra: Callable | None = None
    #: () -> the :class:`~derivations.printing.layout.Adapter` records ``jax_extra`` prints (each is validated)
    adapters: Callable | None = None
    #: sizes of the example calls of every emitted function (dimension symbol or name -> size, all distinct) and
    #: of the adapters (``d``, ``d_h``; ``H`` heads over ``H_kv`` shared heads); empty: each function at its
    #: derivation's check size, the adapters at :data:`~derivations.printing.validation.ADAPTER_SIZES`
    example_sizes: dict = field(default_factory=dict)

    def __post_init__(self):
        declared = self.functions
        self.functions = lambda: [with_rule_scalars(fn, self.scalars) for fn in declared()]
