"""Cross-checking formulas derived by hand against the engine's: the decision (``checker``) and its
parts (``target_cache``, ``rule_lookup``, ``evaluation``, ``symbolic_proofs``, ``verdict``,
``diagnosis``, ``mutations``, ``identities``, ``inputs``), chain files (``chain``) and the command line
(``python -m derivations.crosscheck``, ``cli``). The formula language it reads (tokens, grammar, the
expression built, a derivation's names) is in ``derivations.parsing``."""
