"""Cross-checking formulas derived by hand against the engine's: the formula language (``formula_syntax``:
tokens, grammar, syntax tree; ``formula``: the expression built from it), the decision (``checker``) and its
parts (``targets``, ``target_cache``, ``rule_lookup``, ``evaluation``, ``symbolic_proofs``, ``verdict``,
``diagnosis``, ``mutations``, ``identities``, ``inputs``), chain files (``chain``), parameter counts
(``params``) and the command line (``python -m derivations.crosscheck``, ``cli``)."""
