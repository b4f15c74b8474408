"""Example calls of the shipped emitted functions by name: each drawn from its rule's declaration.

A thin shim over :func:`derivations.printing.examples.example_call` for the tests that know a function by name
only (the non-finite and hostile-input tests): the rule is the shipped module of ``numerics/emitted/`` whose
``__all__`` has the name. Nothing here lists a rule or a function.
"""

import importlib

from derivations import registry
from derivations.printing.examples import example_call as declared_example
from derivations.regenerate import shipped


def rule_of(name):
    """The first shipped rule whose emitted module exports ``name``."""
    for rule in shipped():
        if name in importlib.import_module(f"numerics.emitted.{rule}").__all__:
            return rule
    raise KeyError(f"no shipped emitted module exports {name!r}")


def example_call(rng, name, target="jax", rule=None):
    """``(args, kwargs)`` for the public function ``name`` (of ``rule``, else of the module that exports it)."""
    return declared_example(registry.rule_module(rule or rule_of(name)), name, rng, target)
