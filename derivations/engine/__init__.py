"""The derivation engine: the matrix-expression vocabulary and its evaluators (``vocabulary``,
``norm_nodes``, ``spectral_nodes``, ``algebra``, ``interpret``, ``evaluate``, ``numeric``), problems and checked
derivations (``states``: problems, steps and check settings; ``derivation``, with the duality certificate of a
solve step in ``duality``), norm families (``norms``), the symbolic model (``symbolic``) and ``derive()``'s
best-first search (``search``). The public names are re-exported by :mod:`derivations`."""
