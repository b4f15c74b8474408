"""Float64 NumPy routines; the emitted NumPy reference imports them (:mod:`foundation.compute.numpy_runtime`) or,
emitted with ``--standalone``, inlines them (it imports only numpy).

They follow the JAX routines' conventions: inputs are validated where the computation starts
(:func:`validate_arrays`), no NaN or Inf ever reaches LAPACK (:func:`finite_for_lapack` raises
instead), scales are taken out before squaring (exact powers of two, :func:`scale_of`), Gram roots come
from the SVD of ``W`` (the condition number is not squared), and negative powers of Gram matrices are
pseudo-inverse powers cut at the numerical rank of ``[W; √λ I]`` (the minimum-norm update for undamped
rank-deficient partners). The roots, isotropic scales and Sylvester products also come split, as a
mantissa and a power of two (:func:`psd_power_split`, :func:`isotropic_scale_split`,
:func:`sylvester_products_split`), for the exponent handling of :mod:`foundation.compute.numpy_exact_scaling`.
The damping ``λ`` is a scalar, or one per matrix (shape ``(..., 1, 1)``, from ``scale_group``).
"""

import numpy as np

from foundation.compute.argcheck import check_group, check_scalar, check_shapes
from foundation.compute.numpy_exact_scaling import pow2_exponent, pow2_normalize, pow2_scale


def validate_arrays(function, shapes, arrays, scalars, positive=()):
    """The arrays as float64, after checking them and the scalars; errors name the argument.

    Real numeric inputs only (complex would lose its imaginary part; bool is no number), shapes as in ``shapes``
    (:func:`check_shapes`), every entry finite; ``scalars`` maps names to values that must be finite
    and ``>= 0`` (``> 0`` for the names in ``positive``).
    """
    out = {}
    for name in shapes:
        x = np.asarray(arrays[name])
        if x.dtype.kind not in "iuf":  # a bool array is no number (the JAX target refuses it too)
            raise TypeError(f"{function}: {name} must be a real numeric array, got dtype {x.dtype}")
        out[name] = x.astype(np.float64)
    check_shapes(function, shapes, out)
    for name, x in out.items():
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{function}: {name} contains NaN or Inf")
    for name, value in scalars.items():
        check_scalar(function, name, value, positive=name in positive)
    if "group_size" in scalars:
        check_group(function, scalars["group_size"], shapes, out)
    return tuple(out.values())


def finite_for_lapack(a):
    """``a`` itself; raises ``FloatingPointError`` if it holds NaN/Inf (LAPACK may never return on it)."""
    if not np.all(np.isfinite(a)):
        raise FloatingPointError("an intermediate matrix overflowed to NaN/Inf before a LAPACK call; "
                                 "rescale the inputs or use a larger damping")
    return a


def scale_of(a, floor=0.0):
    """The power of two ``s`` with ``max(max|a_ij|, floor) / s`` in ``[1, 2)`` per matrix, shape ``(..., 1, 1)``;
    1 where that maximum is 0. Dividing by it is exact."""
    m = np.maximum(np.max(np.abs(a), axis=(-2, -1), keepdims=True), floor)
    return pow2_scale(1.0, -pow2_exponent(m))


def damping_root(damping):
    """``√λ`` with at least two axes (``(1, 1)`` for a scalar λ, else ``(..., 1, 1)``): it broadcasts against
    a batch of matrices, and ``[..., 0]`` against their singular values."""
    root = np.sqrt(np.asarray(damping, dtype=np.float64))
    return root.reshape((1, 1)) if root.ndim < 2 else root


def gram_eigh(w, damping, side):
    """``(r, V, s)`` with ``WᵀW + λI = V diag((s r)²) Vᵀ`` (``"right"``; ``"left"``: ``WWᵀ + λI``).

    ``r`` are the singular values of ``[W; √λ I] / s`` (``s`` about ``max(max|w_ij|, √λ)``, a power of
    two: :func:`scale_of`), from the SVD of
    ``W`` itself: the condition number is not squared, so a small singular value keeps ``eps·κ``
    relative accuracy (the eigenvalues of a formed ``WᵀW`` would have ``eps·κ²``). The numerical
    rank cut is applied to ``r``: ``r_i ≤ max(m, n)·eps·max(r)`` (``W`` of shape ``m × n``) is set
    to 0, which :func:`psd_power` maps to 0 for negative powers (pseudo-inverse roots).
    """
    a = w if side == "right" else np.swapaxes(w, -1, -2)
    root = damping_root(damping)
    s = scale_of(a, root)
    a = a / s
    m, n = a.shape[-2:]
    _, sv, vt = np.linalg.svd(finite_for_lapack(a), full_matrices=m < n)
    if m < n:
        sv = np.concatenate([sv, np.zeros(sv.shape[:-1] + (n - m,))], axis=-1)
    r = np.sqrt(sv * sv + (root / s)[..., 0] ** 2)
    r = np.where(r > max(m, n) * np.finfo(np.float64).eps * np.max(r, axis=-1, keepdims=True), r, 0.0)
    return r, np.swapaxes(vt, -1, -2), s


def psd_power(eig, p):
    """``V diag((s r)²)^p Vᵀ`` from :func:`gram_eigh`; for ``p < 0`` a cut ``r = 0`` maps to 0 (pseudo-inverse)."""
    r, v, s = eig
    if p < 0:
        kept = r > 0
        powered = np.where(kept, np.where(kept, r, 1.0) ** (2 * p), 0.0)
    else:
        powered = r ** (2 * p)
    return (v * powered[..., None, :]) @ np.swapaxes(v, -1, -2) * s ** (2 * p)


def psd_power_split(eig, p):
    """``(X, e)`` with ``X · 2**e`` the power :func:`psd_power` returns, ``2p`` whole (the roots and inverses).

    ``max|X| ∈ [1, 2)`` and ``e`` (``(..., 1, 1)``) are carried apart, so a root of a huge or tiny partner never
    under- or overflows before the output's last step. ``s`` of ``eig`` is a power of two (:func:`gram_eigh`).
    """
    if not float(2 * p).is_integer():
        raise ValueError(f"psd_power_split: 2p must be whole, got p = {p}")
    r, v, s = eig
    if p < 0:
        kept = r > 0
        powered = np.where(kept, np.where(kept, r, 1.0) ** (2 * p), 0.0)
    else:
        powered = r ** (2 * p)
    out, k_out = pow2_normalize((v * powered[..., None, :]) @ np.swapaxes(v, -1, -2))
    return out, -int(2 * p) * pow2_exponent(s) - k_out


def polar_factor(w, damping):
    """``U_W = W (WᵀW + λI)^{-1/2}`` from the SVD of ``W``: ``U diag(s / (s² + λ)^{1/2}) Vᵀ`` (cut as :func:`gram_eigh`)."""
    root = damping_root(damping)
    s = scale_of(w, root)
    u, sv, vt = np.linalg.svd(finite_for_lapack(w / s), full_matrices=False)
    r = np.sqrt(sv * sv + (root / s)[..., 0] ** 2)
    kept = r > max(w.shape[-2:]) * np.finfo(np.float64).eps * np.max(r, axis=-1, keepdims=True)
    return (u * np.where(kept, sv / np.where(kept, r, 1.0), 0.0)[..., None, :]) @ vt


def isotropic_scale(w, damping):
    """``c_W = (‖W‖_F² / d_h + λ)^{1/2}`` per matrix, shape ``(..., 1, 1)`` (scale taken out first)."""
    c, e = isotropic_scale_split(w, damping)
    return pow2_scale(c, e)


def isotropic_scale_split(w, damping):
    """``(c, e)`` with ``c_W = c · 2**e`` (:func:`isotropic_scale`), ``c`` near 1: the squares stay in range."""
    root = damping_root(damping)
    s = scale_of(w, root)
    sq = np.sum((w / s) ** 2, axis=(-2, -1), keepdims=True)
    return np.sqrt(sq / w.shape[-1] + (root / s) ** 2), -pow2_exponent(s)


def msign_svd(a):
    """``U Vᵀ`` over the singular values above ``max(m, n)·eps·σ_max`` (zero ones map to 0)."""
    u, s, vt = np.linalg.svd(finite_for_lapack(a / scale_of(a)), full_matrices=False)
    keep = s > max(a.shape[-2:]) * np.finfo(np.float64).eps * s[..., :1]
    return (u * keep[..., None, :]) @ vt


def sylvester_dense(w_q, w_k, damping, d):
    """``H`` with ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D`` by SciPy's Bartels–Stewart, per batch entry.

    ``H`` is of size ``‖D‖/λ`` and ``H W`` loses about ``eps·‖W‖²/λ`` relative (1e-8 at λ = 1e-6 for
    ``‖W‖² ≈ 100``): a float64 reference for moderate damping.
    """
    import scipy.linalg  # lazy: this function is inlined into emitted NumPy modules, which import only numpy

    eye = np.eye(d.shape[-1])
    w_q, w_k = np.broadcast_to(w_q, d.shape[:-2] + w_q.shape[-2:]), np.broadcast_to(w_k, d.shape[:-2] + w_k.shape[-2:])
    h = np.empty(d.shape)
    for i in np.ndindex(d.shape[:-2]):
        a = finite_for_lapack(w_q[i] @ w_q[i].T + damping * eye)
        b = finite_for_lapack(w_k[i] @ w_k[i].T + damping * eye)
        h[i] = scipy.linalg.solve_sylvester(a, b, d[i])
    return h


def sylvester_gram(w_q, w_k, damping, r):
    """``X`` with ``(W_QᵀW_Q + λI) X + X (W_KᵀW_K + λI) = R`` by the two Grams' eigendecompositions.

    The eigenpairs come from :func:`gram_eigh` (SVDs of the factors); ``α_i + β_j = 0`` (undamped
    rank-deficient partners) gets 0: the minimum-norm solution.
    """
    aq, vq, sq = gram_eigh(w_q, damping, "right")
    ak, vk, sk = gram_eigh(w_k, damping, "right")
    m = np.maximum(sq, sk)
    alpha, beta = (aq * (sq / m)[..., 0]) ** 2, (ak * (sk / m)[..., 0]) ** 2
    rt = np.swapaxes(vq, -1, -2) @ (r / m / m) @ vk
    den = alpha[..., :, None] + beta[..., None, :]
    x = np.where(den > 0, rt / np.where(den > 0, den, 1.0), 0.0)
    return vq @ x @ np.swapaxes(vk, -1, -2)


def safe_ratio(num, den):
    """``num / den`` where ``den > 0``, else 0 (a direction with no extent and no damping)."""
    pos = den > 0
    return np.where(pos, num / np.where(pos, den, 1.0), 0.0)


def sylvester_products_split(w_q, w_k, damping, d):
    """``(P_Q, P_K, e)``: ``(H W_K, Hᵀ W_Q) = (P_Q, P_K) · 2**e`` for ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D``.

    The JAX target's ``"structured"`` solver in float64, ``λ > 0``: with thin SVDs ``W = U S Vᵀ`` the operator
    is diagonal in ``[U_Q, U_Q⊥] ⊗ [U_K, U_K⊥]`` with eigenvalues ``s_Q,i² + s_K,j² + 2λ``, and only the blocks
    of ``H`` that meet the partner are formed (the complement block of size ``‖D‖/λ`` is not), so it is
    accurate at any damping. Both factors are scaled by exact powers of two before their SVDs; the common
    power ``2**e`` (``(..., 1, 1)``) is carried apart and the singular values and ``√(2λ)`` are taken in units
    of the largest of them, so tiny or huge weights neither under- nor overflow.
    """
    w, k_w = pow2_normalize(np.stack(np.broadcast_arrays(w_q, w_k)))
    u, s, vt = np.linalg.svd(finite_for_lapack(w), full_matrices=False)
    root = damping_root(2 * np.asarray(damping, dtype=np.float64))
    k = np.where(root > 0, np.minimum(np.minimum(k_w[0], k_w[1]), pow2_exponent(root)), np.minimum(k_w[0], k_w[1]))
    sq, sk = pow2_scale(s[0], (k - k_w[0])[..., 0]), pow2_scale(s[1], (k - k_w[1])[..., 0])
    root = pow2_scale(root, k)[..., 0]
    m = np.maximum(np.maximum(sq[..., :1], sk[..., :1]), root)
    m = np.where(m > 0, m, 1.0)
    rq, rk, mu = sq / m, sk / m, (root / m) ** 2
    uq, uk, vtq, vtk = u[0], u[1], vt[0], vt[1]
    dk = d @ uk  # D U_K
    core = np.swapaxes(uq, -1, -2) @ dk  # U_Qᵀ D U_K
    col = dk - uq @ core  # (I − P_Q) D U_K
    row = np.swapaxes(np.swapaxes(uq, -1, -2) @ d - core @ np.swapaxes(uk, -1, -2), -1, -2)  # (I − P_K) Dᵀ U_Q
    den = rq[..., :, None] ** 2 + rk[..., None, :] ** 2 + mu[..., None]
    hq = uq @ (core * safe_ratio(rk[..., None, :], den)) + col * safe_ratio(rk, rk * rk + mu)[..., None, :]
    hk = (uk @ np.swapaxes(core * safe_ratio(rq[..., :, None], den), -1, -2)
          + row * safe_ratio(rq, rq * rq + mu)[..., None, :])
    return (hq @ vtk) / m[..., None], (hk @ vtq) / m[..., None], k
