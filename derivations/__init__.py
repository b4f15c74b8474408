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
* emission — :class:`RuleModule` (what ``python -m derivations.<rule>`` runs), :class:`EmittedFunction`
  (one public function of an emitted module), :func:`render` (``--emit jax|numpy|latex|text`` as text);
* rule modules — :mod:`derivations.halfsplit` (``python -m derivations.halfsplit --help``).
"""

import importlib

from derivations.engine.derivation import (
    Context,
    Derivation,
    DerivationError,
    Problem,
    Solution,
    StepCheckFailed,
    identity_chain,
)
from derivations.engine.vocabulary import (
    FactMatrix,
    GramInvSqrt,
    GramSqrt,
    Inner,
    IsotropicScale,
    Msign,
    NuclearNorm,
    OpNorm,
    PolarFactor,
    Projector,
)

__all__ = ["Context", "Derivation", "DerivationError", "FactMatrix", "GramInvSqrt", "GramSqrt", "Inner",
           "IsotropicScale", "Msign", "NuclearNorm", "OpNorm", "PolarFactor", "Problem", "Projector",
           "Solution", "StepCheckFailed", "identity_chain"]

from derivations.engine.algebra import product, total, transpose
from derivations.engine.norms import FAMILIES, NormFamily
from derivations.engine.search import SearchFailed, derive
from derivations.engine.vocabulary import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SPD,
    SYMMETRIC,
    dimension,
    positive_symbol,
)
from derivations.lemmas import Lemma, NotApplicable

__all__ += ["FULL_COLUMN_RANK", "FULL_ROW_RANK", "ORTHONORMAL_COLUMNS", "ORTHONORMAL_ROWS", "SPD", "SYMMETRIC",
            "dimension", "positive_symbol", "product", "total", "transpose"]
__all__ += ["FAMILIES", "EmittedFunction", "Lemma", "NormFamily", "NotApplicable", "RuleModule", "SearchFailed",
            "derive", "render"]

_LAZY = {"RuleModule": ("cli", "RuleModule"), "render": ("cli", "render"),
         "EmittedFunction": ("printing.codegen", "EmittedFunction")}


def __getattr__(name):  # the emission API imports JAX: loaded on first use
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
