"""Symbolic derivations of optimizer update rules (SymPy), checked step by step.

Public surface:

* vocabulary — :class:`FactMatrix`, :class:`Msign`, :class:`GramSqrt`, :class:`GramInvSqrt`,
  :class:`PolarFactor`, :class:`Projector`, :class:`Inner`, :class:`OpNorm`, :class:`NuclearNorm`;
* :mod:`derivations.lemmas` — the named lemmas (rewrite rules with side conditions);
* the engine — :class:`Problem`, :class:`Derivation`, :func:`identity_chain`;
* rule modules — :mod:`derivations.halfsplit` (``python -m derivations.halfsplit --help``).
"""

from .engine import Context, Derivation, DerivationError, Problem, Solution, StepCheckFailed, identity_chain
from .vocabulary import (
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
