"""The matrix-expression vocabulary (layer 1): the nodes a rule is stated in (``nodes``: fact-carrying
matrices, inner products, the matrix sign, Gram roots, polar factors, projectors; ``norm_nodes``, ``spectral_nodes``),
the algebra on them (``algebra``), their evaluators (``interpret``: one rule per node; ``evaluate``: on NumPy
arrays, ``numeric``: in float64 and mpmath) and the LaTeX notation (``latex_notation``). It imports nothing of
the lemmas or the engine; the public names are re-exported by :mod:`derivations`."""
