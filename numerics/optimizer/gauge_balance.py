"""Gauge rebalancing of a factorized product ``M = W_Q W_Kᵀ`` (per head, batched).

The gauge ``(W_Q, W_K) → (W_Q S⁻ᵀ, W_K S)`` leaves ``M`` unchanged for any invertible ``S``. The
*balanced* representative has equal Grams, ``W_Q'ᵀW_Q' = W_K'ᵀW_K'``. With ``A = W_QᵀW_Q``,
``C_K = (W_KᵀW_K)^{1/2}`` and ``N = C_Q C_K`` (so ``NᵀN = C_K A C_K``), ::

    S = C_K⁻¹ (NᵀN)^{1/4},   W_K' = W_K S,   W_Q' = W_Q S⁻ᵀ = W_Q C_K (NᵀN)^{-1/4},

and both Grams equal ``(NᵀN)^{1/2} = |C_Q C_K|``. In SVD terms (``C_Q C_K = X Σ Yᵀ``) this is the
balanced realization ``W_Q' = U_Q X Σ^{1/2}``, ``W_K' = U_K Y Σ^{1/2}`` up to the orthogonal gauge
that fixes both Grams.

Nothing here is written by hand: the closed form is derived step by step in
:mod:`derivations.balance` (``python -m derivations.balance --check``: the equal-Gram condition is
the Riccati equation ``P B P = A`` for ``P = S Sᵀ``, whose unique SPD solution splits as ``S Sᵀ``
with the ``S`` above), and :func:`balance` calls the function the JAX printer emits from it
(``balance_qk`` in :mod:`numerics.emitted.balance`). ``tests/rules/test_balance.py`` compares it with the
derived pair evaluated at 50 digits. Eigenvalues of ``NᵀN`` are floored at ``d_h · eps · max`` and
``C_K⁻¹`` is a pseudo-inverse root (cut at the numerical rank of ``W_K``), so rank-deficient factors
stay finite; eigendecompositions run one matrix at a time on the CPU (``per_matrix_on_cpu``: two
batched LAPACK calls at once can deadlock jaxlib's 2-worker pool). ``W_Q`` and ``W_K`` are each
scaled by an exact power of two before ``C_K W_QᵀW_Q C_K`` is formed and the pair is scaled back
(the balanced factors scale as ``√(ab)`` for ``(a W_Q, b W_K)``), so tiny weights (float32 ×1e-10)
keep equal Grams; a pair whose balanced factors fall below ``tiny/(16 eps)`` of the dtype is refused
(``balance_qk``) or NaN (:func:`balance`, no check).
"""

from numerics.emitted import balance as _balance


def balance(w_q, w_k):
    """``(W_Q S⁻ᵀ, W_K S)`` with equal Grams and the same product ``W_Q W_Kᵀ``.

    Shapes ``(..., d_Q, d_h)`` and ``(..., d, d_h)``: the row counts may differ (a GQA group's query
    heads stacked row-wise against the shared key head). Works under ``jit``; no finiteness check.
    """
    return _balance.balance_qk(w_q, w_k, damping=0.0, check_finite=False)
