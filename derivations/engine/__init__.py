"""The derivation engine: the matrix-expression vocabulary and its evaluators (``vocabulary``,
``algebra``, ``interpret``, ``evaluate``, ``numeric``), problems and checked derivations
(``derivation``), norm families (``norms``), the symbolic model (``symbolic``) and ``derive()``'s
best-first search (``search``). The public names are re-exported by :mod:`derivations`."""
