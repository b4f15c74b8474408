"""The formula language, read into the engine's expressions: tokens and syntax tree (``formula_tokens``,
``formula_atoms``, ``formula_syntax``), its spelling tables (``notation``) and extra nodes (``notation_nodes``),
the expression built from the tree (``formula``, ``formula_notation``), a derivation's names (``targets``) and
the LaTeX printer's translation validation (``latex_roundtrip``: each printed result read back and shown equal).
It depends on the engine and the printers only, so the rules' command line (``--check``) and the cross-checker
both use it."""
