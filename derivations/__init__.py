"""Symbolic derivations of optimizer update rules (SymPy), checked step by step.

Public surface:

* vocabulary — :class:`FactMatrix`, :class:`Msign`, :class:`GramSqrt`, :class:`GramInvSqrt`,
  :class:`SPDPower` (``X^p`` for an SPD ``X`` and any rational ``p``), :class:`PolarFactor`, :class:`Projector`,
  :class:`Inner`, :class:`OpNorm`, :class:`NuclearNorm`;
* :mod:`derivations.lemmas` — the named lemmas (rewrite rules with side conditions);
* the engine — :class:`Problem`, :class:`Derivation`, :func:`identity_chain`;
* :func:`derive` — a checked derivation found by best-first search over the lemmas
  (:class:`SearchFailed` says where each branch stopped);
* norm families — :data:`FAMILIES` (operator, Frobenius, nuclear, max-abs, RMS→RMS, ℓ1→ℓ2), each solved
  through its dual norm (:mod:`derivations.engine.norms`); :func:`register_family` adds one, :func:`families`
  lists them all;
* lemma objects — :class:`Lemma` (statement, side conditions, rewrite, self-check), :class:`NotApplicable`;
  a statement the trusted kernel matches steps against — :class:`Statement` (its :class:`Clause` relations and
  :class:`Condition` side conditions); a self-check instance — :class:`Case`;
  where ``derive`` tries a lemma — :class:`Applies` (its :class:`Offer` list, read off a :class:`SearchView`);
* extension points — :class:`MatrixFunction` and :class:`MatrixScalar` (the bases of a new vocabulary
  node), :class:`InstanceSampler` (random instances for a lemma's self-check), :func:`evaluate_on`
  (an expression on concrete arrays);
* a rule as one declaration — :class:`RuleModule` (what ``python -m derivations.<rule>`` runs) and
  :class:`EmittedFunction` (one public function of an emitted module), plain data
  (:mod:`derivations.engine.rule`); :func:`derivations.cli.render` prints a declaration
  (``--emit jax|numpy|latex|text`` as text);
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

from derivations.engine.derivation import (
    Context,
    Derivation,
    DerivationError,
    Problem,
    Solution,
    StepCheckFailed,
    identity_chain,
)
from derivations.engine.norms import FAMILIES, NormFamily, families, register_family, unregister_family
from derivations.engine.rule import EmittedFunction, RuleModule
from derivations.engine.search import SearchFailed, derive
from derivations.lemmas import Applies, Case, Lemma, NotApplicable, Offer, SearchView
from derivations.lemmas.statement import Clause, Condition, Statement
from derivations.vocabulary.algebra import product, total, transpose
from derivations.vocabulary.evaluate import InstanceSampler, evaluate_on
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    Inner,
    IsotropicScale,
    MatrixFunction,
    MatrixScalar,
    Msign,
    NuclearNorm,
    OpNorm,
    PolarFactor,
    Projector,
    dimension,
    positive_symbol,
)
from derivations.vocabulary.spd_power import SPDPower

__all__ = [
    "FAMILIES", "FULL_COLUMN_RANK", "FULL_ROW_RANK", "ORTHONORMAL_COLUMNS", "ORTHONORMAL_ROWS", "SPD", "SPDPower",
    "SYMMETRIC", "Applies", "Case", "Clause", "Condition", "Context", "Derivation", "DerivationError",
    "EmittedFunction", "FactMatrix", "GramInvSqrt", "GramSqrt", "Inner", "InstanceSampler", "IsotropicScale",
    "Lemma", "MatrixFunction", "MatrixScalar", "Msign", "NormFamily", "NotApplicable", "NuclearNorm", "Offer",
    "OpNorm", "PolarFactor", "Problem", "Projector", "RuleModule", "SearchFailed", "SearchView", "Solution",
    "Statement", "StepCheckFailed", "derive", "dimension", "evaluate_on", "families", "identity_chain",
    "positive_symbol", "product", "register_family", "total", "transpose", "unregister_family",
]
