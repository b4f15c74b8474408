"""Gauge rebalancing of a factorized product ``M = W_Q W_Kᵀ`` (per head, batched).

The gauge ``(W_Q, W_K) → (W_Q S⁻ᵀ, W_K S)`` leaves ``M`` unchanged for any invertible ``S``. The
*balanced* representative has equal Grams, ``W_Q'ᵀW_Q' = W_K'ᵀW_K'``. With ``A = W_QᵀW_Q``,
``C_K = (W_KᵀW_K)^{1/2}`` and ``N = C_Q C_K`` (so ``NᵀN = C_K A C_K``),

    S = C_K⁻¹ (NᵀN)^{1/4},   W_K' = W_K S,   W_Q' = W_Q S⁻ᵀ = W_Q C_K (NᵀN)^{-1/4},

and both Grams equal ``(NᵀN)^{1/2} = |C_Q C_K|``: ``W_K'ᵀW_K' = (NᵀN)^{1/4} C_K⁻¹ C_K² C_K⁻¹ (NᵀN)^{1/4}``
and ``W_Q'ᵀW_Q' = (NᵀN)^{-1/4} C_K A C_K (NᵀN)^{-1/4}``. In SVD terms (``C_Q C_K = X Σ Yᵀ``) this is
the balanced realization ``W_Q' = U_Q X Σ^{1/2}``, ``W_K' = U_K Y Σ^{1/2}`` up to the orthogonal
gauge that fixes both Grams. Eigenvalues are floored at ``d_h · eps · max`` so rank-deficient
factors stay finite.
"""

import jax.numpy as jnp

from .jax_kernels import per_matrix_on_cpu


def _powers(sym, *ps):
    """``V diag(w)^p Vᵀ`` of a symmetric PSD matrix for each ``p`` (one eigh), eigenvalues floored
    relative to the largest."""
    sym = 0.5 * (sym + sym.mT)
    w, v = per_matrix_on_cpu(jnp.linalg.eigh, sym)  # batched LAPACK at once can deadlock the CPU pool
    w = jnp.maximum(w, jnp.maximum(sym.shape[-1] * jnp.finfo(w.dtype).eps * w[..., -1:], jnp.finfo(w.dtype).tiny))
    return tuple((v * w[..., None, :] ** p) @ v.mT for p in ps)


def balance(w_q, w_k):
    """``(W_Q S⁻ᵀ, W_K S)`` with equal Grams and the same product ``W_Q W_Kᵀ``; shapes ``(..., d, d_h)``."""
    dtype = w_q.dtype
    ct = jnp.float32 if jnp.dtype(dtype).itemsize < 4 else dtype
    wq, wk = w_q.astype(ct), w_k.astype(ct)
    # the two eighs run one after the other (the second needs C_K): jaxlib's CPU pool can deadlock
    # on two LAPACK kernels at once
    c_k, c_k_inv = _powers(wk.mT @ wk, 0.5, -0.5)
    core_inv_quarter, core_quarter = _powers(c_k @ (wq.mT @ wq) @ c_k, -0.25, 0.25)  # (NᵀN)^{∓1/4}
    return ((wq @ c_k @ core_inv_quarter).astype(dtype), (wk @ c_k_inv @ core_quarter).astype(dtype))
