"""The derivation engine (layer 3): problems and checked derivations (``states``: problems, steps and
check settings; ``derivation``, with the duality certificate of a solve step in ``duality``), norm families
(``norms``), the symbolic model (``symbolic``), ``derive()``'s best-first search (``search``), the LaTeX of a
proof (``latex``) and the declaration of a rule module (``rule``: :class:`~derivations.engine.rule.RuleModule`,
:class:`~derivations.engine.rule.EmittedFunction`). The public names are re-exported by :mod:`derivations`."""
