"""Cross-checking formulas derived by hand against the engine's: the formula parser (``formula``),
targets, verdicts and diagnosis (``checker``), chain files (``chain``), parameter counts
(``params``) and the command line (``python -m derivations.crosscheck``)."""
