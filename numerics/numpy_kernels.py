"""Float64 NumPy kernels; the emitted NumPy reference inlines them (it imports only numpy)."""

import numpy as np


def gram_eigh(w, damping, side):
    """Eigenpairs of ``WᵀW + λI`` (``side="right"``) or ``WWᵀ + λI`` (``"left"``), ascending."""
    g = np.swapaxes(w, -1, -2) @ w if side == "right" else w @ np.swapaxes(w, -1, -2)
    g = 0.5 * (g + np.swapaxes(g, -1, -2)) + damping * np.eye(g.shape[-1])
    return np.linalg.eigh(g)


def psd_power(eig, p):
    """``V diag(w)^p Vᵀ``; eigenvalues floored at ``n·eps·max(w)`` so inverse roots stay finite."""
    evals, evecs = eig
    n = evals.shape[-1]
    floor = np.maximum(n * np.finfo(np.float64).eps * evals[..., -1:], np.finfo(np.float64).tiny)
    powered = np.maximum(evals, floor) ** p
    return (evecs * powered[..., None, :]) @ np.swapaxes(evecs, -1, -2)


def isotropic_scale(w, damping):
    """``c_W = (‖W‖_F² / d_h + λ)^{1/2}`` per matrix, shape ``(..., 1, 1)``."""
    return np.sqrt(np.sum(w * w, axis=(-2, -1), keepdims=True) / w.shape[-1] + damping)


def msign_svd(a):
    """``U Vᵀ`` over the singular values above ``max(m, n)·eps·σ_max`` (zero ones map to 0)."""
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    keep = s > max(a.shape[-2:]) * np.finfo(np.float64).eps * s[..., :1]
    return (u * keep[..., None, :]) @ vt


def sylvester_dense(w_q, w_k, damping, d):
    """``H`` with ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D`` by SciPy's Bartels–Stewart."""
    import scipy.linalg
    eye = np.eye(d.shape[-1])
    return scipy.linalg.solve_sylvester(w_q @ w_q.T + damping * eye, w_k @ w_k.T + damping * eye, d)


def sylvester_gram(w_q, w_k, damping, r):
    """``X`` with ``(W_QᵀW_Q + λI) X + X (W_KᵀW_K + λI) = R`` by the two Grams' eigendecompositions."""
    aq, vq = gram_eigh(w_q, damping, "right")
    ak, vk = gram_eigh(w_k, damping, "right")
    rt = np.swapaxes(vq, -1, -2) @ r @ vk
    return vq @ (rt / (aq[..., :, None] + ak[..., None, :])) @ np.swapaxes(vk, -1, -2)
