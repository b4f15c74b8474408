"""Symbolic derivations of optimizer update rules (SymPy), checked step by step.

Public surface:

* vocabulary — :class:`FactMatrix`, :class:`Msign`, :class:`GramSqrt`, :class:`GramInvSqrt`,
  :class:`PolarFactor`, :class:`Projector`, :class:`Inner`, :class:`OpNorm`, :class:`NuclearNorm`;
* :mod:`derivations.lemmas` — the named lemmas (rewrite rules with side conditions);
* the engine — :class:`Problem`, :class:`Derivation`, :func:`identity_chain`;
* :func:`derive` — a checked derivation found by best-first search over the lemmas
  (:class:`SearchFailed` says where each branch stopped);
* norm families — :data:`FAMILIES` (operator, Frobenius, nuclear, max-abs, RMS→RMS), each solved
  through its dual norm (:mod:`derivations.engine.norms`);
* lemma objects — :class:`Lemma` (statement, side conditions, rewrite, self-check), :class:`NotApplicable`;
  where ``derive`` tries a lemma — :class:`Applies` (its :class:`Offer` list, read off a :class:`SearchView`);
* extension points — :class:`MatrixFunction` and :class:`MatrixScalar` (the bases of a new vocabulary
  node), :class:`InstanceSampler` (random instances for a lemma's self-check), :func:`evaluate_on`
  (an expression on concrete arrays);
* emission — :class:`RuleModule` (what ``python -m derivations.<rule>`` runs), :class:`EmittedFunction`
  (one public function of an emitted module), :func:`render` (``--emit jax|numpy|latex|text`` as text);
* rule modules — :mod:`derivations.halfsplit` (``python -m derivations.halfsplit --help``).

Examples:
  Muon's rule, found by :func:`derive`: the steepest descent direction of ``⟨G, ΔW⟩`` under
  ``‖ΔW‖_op ≤ ε``, every step checked as it is recorded:

  >>> from sympy.matrices.expressions import MatrixSymbol
  >>> from derivations import Context, Inner, OpNorm, Problem, derive, dimension, positive_symbol
  >>> m, n = dimension("m"), dimension("n")
  >>> G, dW = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n)
  >>> der = derive(Problem(dW, Inner(G, dW), OpNorm(dW), positive_symbol("epsilon")),
  ...              Context(check_dims=[{m: 4, n: 3}]))
  >>> print(der.formula)
  (-epsilon)*msign(G)
  >>> [step.lemma.title for step in der.steps]
  ['Linear steepest descent (Muon)']
"""

import importlib
from typing import Any

#: public name -> the module (relative to this package) that defines it; loaded on first use, so that
#: ``import derivations.commandline`` (every command's parser) does not pull in SymPy and the engine
_PUBLIC = {
    **dict.fromkeys(("Context", "Derivation", "DerivationError", "Problem", "Solution", "StepCheckFailed",
                     "identity_chain"), "engine.derivation"),
    **dict.fromkeys(("FactMatrix", "GramInvSqrt", "GramSqrt", "Inner", "IsotropicScale", "Msign", "NuclearNorm",
                     "OpNorm", "PolarFactor", "Projector", "FULL_COLUMN_RANK", "FULL_ROW_RANK",
                     "ORTHONORMAL_COLUMNS", "ORTHONORMAL_ROWS", "SPD", "SYMMETRIC", "dimension",
                     "positive_symbol", "MatrixFunction", "MatrixScalar"), "engine.vocabulary"),
    **dict.fromkeys(("InstanceSampler", "evaluate_on"), "engine.evaluate"),
    **dict.fromkeys(("product", "total", "transpose"), "engine.algebra"),
    **dict.fromkeys(("FAMILIES", "NormFamily"), "engine.norms"),
    **dict.fromkeys(("SearchFailed", "derive"), "engine.search"),
    **dict.fromkeys(("Applies", "Lemma", "NotApplicable", "Offer", "SearchView"), "lemmas"),
    **dict.fromkeys(("RuleModule", "render"), "cli"),  # the emission API imports JAX
    "EmittedFunction": "printing.codegen",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        globals()[name] = value  # once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
