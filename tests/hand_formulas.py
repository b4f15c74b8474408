"""Independent hand formulas of Compositional Muon, written directly in NumPy (no workbench code).

These exist to cross-check the machine's derivations; they must not import the workbench.
"""

import numpy as np


def inv_sqrt(a):
    w, v = np.linalg.eigh(a)
    return (v * w[..., None, :] ** -0.5) @ np.swapaxes(v, -1, -2)


def spd_power(a, p):
    """``A^p`` of a symmetric positive definite ``A`` by its eigendecomposition."""
    w, v = np.linalg.eigh(a)
    return (v * w[..., None, :] ** p) @ np.swapaxes(v, -1, -2)


def msign(a):
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    keep = s > 1e-12 * s[..., :1]
    return (u * keep[..., None, :]) @ vt


def halfsplit(W_Q, W_K, G_Q, G_K, eps, lam=0.0):
    """ΔW_Q = −(ε/2) msign(G_Q C_K⁻¹) C_K⁻¹, ΔW_K = −(ε/2) msign(G_K C_Q⁻¹) C_Q⁻¹."""
    eye = np.eye(W_Q.shape[-1])
    CKi = inv_sqrt(np.swapaxes(W_K, -1, -2) @ W_K + lam * eye)
    CQi = inv_sqrt(np.swapaxes(W_Q, -1, -2) @ W_Q + lam * eye)
    return -(eps / 2) * msign(G_Q @ CKi) @ CKi, -(eps / 2) * msign(G_K @ CQi) @ CQi


def hybrid_v(W_O, G_V, eps):
    """ΔW_V = −(ε/2) C_O⁻¹ msign(C_O⁻¹ G_V), C_O = (W_Oᵀ W_O)^{1/2}."""
    COi = inv_sqrt(np.swapaxes(W_O, -1, -2) @ W_O)
    return -(eps / 2) * COi @ msign(COi @ G_V)


def projector(W):
    U = W @ inv_sqrt(np.swapaxes(W, -1, -2) @ W)
    return U @ np.swapaxes(U, -1, -2)


def product_step(G_M, W_Q, W_K, eps):
    """−(ε/2)[msign(G_M P_K) + msign(P_Q G_M)]."""
    return -(eps / 2) * (msign(G_M @ projector(W_K)) + msign(projector(W_Q) @ G_M))


def isotropic(W_K, G_Q, eps):
    """−(ε/2) c_K⁻¹ msign(G_Q), c_K = ‖W_K‖_F / √d_h."""
    c = np.sqrt(np.sum(W_K**2, axis=(-2, -1), keepdims=True) / W_K.shape[-1])
    return -(eps / 2) / c * msign(G_Q)
