"""The regularized Sylvester equation ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D`` in JAX.

The damped two-sided rules need ``H W_K`` and ``Hᵀ W_Q``. With thin SVDs ``W = U S Vᵀ`` the operator
is diagonal in the bases ``[U_Q, U_Q⊥] ⊗ [U_K, U_K⊥]`` with eigenvalues ``s_Q,i² + s_K,j² + 2λ`` (zero
``s`` on the complements), so the ``"structured"`` solver (:func:`sylvester_products`) divides the
blocks of ``D`` by them in ``O(d² d_h)`` and never forms the complement block of size ``‖D‖/λ``;
``"dense"`` is Bartels–Stewart (:func:`sylvester_dense`, ``O(d³)``, a cross-check, refused for a
damping it cannot resolve: :func:`check_dense_damping`). The ``d_h × d_h`` equation with the Grams
``WᵀW`` is :func:`sylvester_gram`. Factors are scaled by exact powers of two first. Inlined verbatim
into the emitted modules.
"""

import jax
import jax.numpy as jnp

from foundation.compute.jax_damped_gram import gram_eigh_stacked
from foundation.compute.jax_exact_scaling import compute_dtype, max_abs, pow2_normalize, pow2_scale, scale_group
from foundation.compute.jax_lapack_calls import lapack_guard, per_matrix_on_cpu

SYLVESTER_SOLVERS = ("structured", "dense")


def safe_ratio(num, den):
    """``num / den`` where ``den > 0``, else 0 (a direction with no extent and no damping)."""
    pos = den > 0
    return jnp.where(pos, num / jnp.where(pos, den, 1), 0)


def sylvester_factor_svd(w_q, w_k, damping, d):
    """Thin SVDs of both factors (one stacked call) with the shared scale of the Sylvester operator.

    Returns ``(U_Q, U_K, Vᵀ_Q, Vᵀ_K, r_Q, r_K, μ, m, k, ok)``: singular values ``s = m r 2**-k`` with
    ``m 2**-k = max(s_Q,max, s_K,max, √(2λ))`` and ``μ = 2λ/(m 2**-k)²``, so every ratio below is
    formed from numbers in ``[0, 1]``. Each factor is scaled by an exact power of two before its SVD
    (:func:`pow2_normalize`) and the common power ``2**k`` is carried apart, so tiny or huge weights
    neither underflow nor overflow. ``ok`` is False where a factor holds NaN/Inf or ``λ ≤ 0`` (the
    results are then NaN: under ``jit`` a negative damping cannot be refused).
    """
    ct = compute_dtype(d.dtype)
    w, k_w = pow2_normalize(jnp.stack([w_q, w_k]).astype(ct))  # one stacked SVD, each factor in [1, 2)
    w, ok = lapack_guard(w)
    u, s, vt = per_matrix_on_cpu(lambda x: jnp.linalg.svd(x, full_matrices=False), w)
    lam = jnp.asarray(damping, ct)
    root = jnp.sqrt(jnp.where(lam > 0, 2 * lam, 0))
    _, k_root = pow2_normalize(root, axes=())
    k = jnp.minimum(k_w[0], k_w[1])
    k = jnp.where(root > 0, jnp.minimum(k, k_root), k)
    sq, sk = pow2_scale(s[0], (k - k_w[0])[..., 0]), pow2_scale(s[1], (k - k_w[1])[..., 0])
    root = pow2_scale(root, k)[..., 0]
    m = jnp.maximum(jnp.maximum(sq[..., :1], sk[..., :1]), root)
    m = jnp.where(m > 0, m, 1)
    ok = ok[0] & ok[1] & (lam > 0)
    return u[0], u[1], vt[0], vt[1], sq / m, sk / m, (root / m) ** 2, m, k, ok


def sylvester_products(w_q, w_k, damping, d, solver):
    """``(H W_K, Hᵀ W_Q)`` (:func:`sylvester_products_split`, scaled to their values), in ``d``'s dtype."""
    p_q, p_k, e = sylvester_products_split(w_q, w_k, damping, d, solver)
    return tuple(pow2_scale(x, e).astype(d.dtype) for x in (p_q, p_k))


def sylvester_products_split(w_q, w_k, damping, d, solver):
    """``(P_Q, P_K, e)``: ``(H W_K, Hᵀ W_Q) = (P_Q, P_K) · 2**e`` for ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D``, ``λ > 0``.

    ``P`` in the compute dtype, ``e`` int32 ``(..., 1, 1)``: the weights' scale is carried apart, so the
    caller applies it once to the finished output (:func:`pow2_unscale`, which flags an underflow).

    ``"structured"`` works in the factors' own bases, ``O(d² d_h)``. With thin SVDs
    ``W = U S Vᵀ`` the operator is diagonal in ``[U_Q, U_Q⊥] ⊗ [U_K, U_K⊥]`` with eigenvalues
    ``s_Q,i² + s_K,j² + 2λ`` (zero ``s`` on the complements). Only the blocks of ``H`` that meet
    ``U_K`` (resp. ``U_Q``) survive the product with the partner, so

        H W_K = [U_Q (C ⊘ (a_Q,i + a_K,j + 2λ)) + (I − P_Q) D U_K ⊘ (a_K,j + 2λ)] S_K V_Kᵀ,
        Hᵀ W_Q = [U_K (C ⊘ (a_Q,i + a_K,j + 2λ))ᵀ + (I − P_K) Dᵀ U_Q ⊘ (a_Q,i + 2λ)] S_Q V_Qᵀ,

    with ``C = U_Qᵀ D U_K`` and ``a = s²``. The complement block ``(I − P_Q) D (I − P_K) / 2λ``
    of ``H`` (the part of size ``‖D‖/λ``) is never formed, so small damping loses no accuracy:
    forming ``H`` and then ``H W_K`` loses about ``eps·‖W‖²/λ`` relative. ``"dense"`` does
    exactly that (``jax.scipy.linalg.solve_sylvester``, ``O(d³)``, a cross-check).
    """
    ct = compute_dtype(d.dtype)
    if solver == "dense":  # on the factors and λ scaled by 2**k and 4**k (exact): H W scales by 2**-k
        (wq, wk), lam, k = scale_group((w_q, w_k), damping, 1)
        h = sylvester_dense(wq, wk, lam, d).astype(ct)
        ok = jnp.asarray(damping) > 0
        return (*(jnp.where(ok, p, jnp.nan) for p in (h @ wk.astype(ct), h.mT @ wq.astype(ct))),
                k.astype(jnp.int32))
    uq, uk, vtq, vtk, rq, rk, mu, m, k, ok = sylvester_factor_svd(w_q, w_k, damping, d)
    dc = d.astype(uq.dtype)
    dk = dc @ uk  # D U_K, d × d_h
    core = uq.mT @ dk  # U_Qᵀ D U_K, d_h × d_h
    col = dk - uq @ core  # (I − P_Q) D U_K
    row = (uq.mT @ dc - core @ uk.mT).mT  # (I − P_K) Dᵀ U_Q, d × d_h
    den = rq[..., :, None] ** 2 + rk[..., None, :] ** 2 + mu[..., None]
    hq = uq @ (core * safe_ratio(rk[..., None, :], den)) + col * safe_ratio(rk, rk * rk + mu)[..., None, :]
    hk = uk @ (core * safe_ratio(rq[..., :, None], den)).mT + row * safe_ratio(rq, rq * rq + mu)[..., None, :]
    dq_out = jnp.where(ok, (hq @ vtk) / m[..., None], jnp.nan)
    dk_out = jnp.where(ok, (hk @ vtq) / m[..., None], jnp.nan)
    return dq_out, dk_out, k


def check_dense_damping(function, solver, damping, w_q, w_k, resolution=100):
    """Refuse ``solver="dense"`` when ``λ < 100·eps·max(‖W_Q‖_F², ‖W_K‖_F²)`` (concrete values only).

    The Bartels–Stewart solution ``H`` (of size ``‖D‖/λ``) times the partner loses about
    ``eps·‖W‖²/λ`` relative, so below that bound the error exceeds 1% (measured in float32 with
    ``‖W‖² ≈ 95``: 1e-3 at λ = 1e-2, 0.14 at 1e-4, 2e2 at 1e-6); ``"structured"`` never forms ``H``
    and is accurate at any ``λ > 0``.
    """
    if solver != "dense" or any(isinstance(x, jax.core.Tracer) for x in (damping, w_q, w_k)):
        return
    ct = compute_dtype(w_q.dtype)
    sq = []
    for w in (w_q, w_k):
        wc = jnp.asarray(w, ct)
        m = max_abs(wc)
        sq.append(float(jnp.max(m[..., 0, 0] ** 2 * jnp.sum(jnp.square(wc / m), axis=(-2, -1)))))
    need = resolution * float(jnp.finfo(ct).eps) * max(sq)
    if float(damping) < need:
        raise ValueError(f"{function}: damping = {damping} is below what solver='dense' resolves in "
                         f"{jnp.dtype(ct).name} for these weights (need damping >= {need:.3g} = "
                         f"{resolution}·eps·max ‖W‖_F²); use solver='structured' (accurate at any damping > 0) "
                         f"or a larger damping")


def sylvester_dense(w_q, w_k, damping, d):
    """``H`` with ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D`` by Bartels–Stewart (``O(d³)``).

    ``jax.scipy.linalg.solve_sylvester`` (Schur forms); a NaN/Inf coefficient gives NaN.
    """
    ct = compute_dtype(d.dtype)
    wq, wk = w_q.astype(ct), w_k.astype(ct)
    eye = jnp.eye(d.shape[-1], dtype=ct)
    a, ok_a = lapack_guard(wq @ wq.mT + damping * eye)
    b, ok_b = lapack_guard(wk @ wk.mT + damping * eye)
    rhs, ok_d = lapack_guard(d.astype(ct))
    h = jax.scipy.linalg.solve_sylvester(a, b, rhs)
    return jnp.where(ok_a & ok_b & ok_d, h, jnp.nan).astype(d.dtype)


def sylvester_gram(w_q, w_k, damping, r):
    """``X`` with ``(W_QᵀW_Q + λI) X + X (W_KᵀW_K + λI) = R`` (``d_h × d_h``, SPD coefficients).

    Both Grams are diagonalized by one stacked :func:`gram_eigh` (eigenvalues ``r² 4**-k``, from the SVD
    of ``W`` when ill-conditioned): ``X = V_Q [(V_Qᵀ R V_K) / (α_i + β_j)] V_Kᵀ`` with ``α``, ``β`` in the
    units of the larger factor (``4**-min(k_Q, k_K)``, applied to ``R`` exactly); a pair with
    ``α_i + β_j = 0`` (undamped rank-deficient partners) gets 0, the minimum-norm solution.
    """
    (aq, vq, kq), (ak, vk, kk) = gram_eigh_stacked((w_q, w_k), damping, "right")
    km = jnp.minimum(kq, kk)
    alpha, beta = pow2_scale(aq, (km - kq)[..., 0]) ** 2, pow2_scale(ak, (km - kk)[..., 0]) ** 2
    rt = vq.mT @ pow2_scale(r.astype(vq.dtype), 2 * km) @ vk
    den = alpha[..., :, None] + beta[..., None, :]
    return (vq @ safe_ratio(rt, den) @ vk.mT).astype(r.dtype)


def sylvester_lowrank(w_q, w_k, damping, d):
    """``H`` itself with ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D`` in ``O(d² d_h)``, ``λ > 0``.

    With thin SVDs ``W_Q = U_Q S_Q ·``, ``W_K = U_K S_K ·`` the operator is diagonal in the bases
    ``[U_Q, U_Q⊥]`` and ``[U_K, U_K⊥]``: eigenvalues ``s_Q,i² + s_K,j² + 2λ`` (zero ``s`` on the
    complements). ``D`` is split by the projectors ``P_Q = U_Q U_Qᵀ``, ``P_K = U_K U_Kᵀ`` into four
    blocks, each divided by its eigenvalues; no ``d × d`` factorization is ever formed. The
    emitted rules need only ``H W_K`` and ``Hᵀ W_Q``: :func:`sylvester_products` forms those
    without the ``‖D‖/λ`` complement block.
    """
    ct = compute_dtype(d.dtype)
    dc = d.astype(ct)
    w = jnp.stack([w_q, w_k]).astype(ct)  # one stacked SVD
    w, ok = lapack_guard(w)
    u, s, _ = per_matrix_on_cpu(lambda x: jnp.linalg.svd(x, full_matrices=False), w)
    uq, uk, sq, sk = u[0], u[1], s[0], s[1]
    aq, ak = sq * sq, sk * sk
    lam2 = 2 * damping
    dq = uq.mT @ dc  # d_h × d
    dk = dc @ uk  # d × d_h
    core = uq.mT @ dk  # d_h × d_h
    h_core = core / (aq[..., :, None] + ak[..., None, :] + lam2)
    row = (dq - core @ uk.mT) / (aq[..., :, None] + lam2)  # U_Qᵀ D (I − P_K)
    col = (dk - uq @ core) / (ak[..., None, :] + lam2)  # (I − P_Q) D U_K
    rest = dc - uq @ dq - dk @ uk.mT + uq @ core @ uk.mT  # (I − P_Q) D (I − P_K)
    h = uq @ (h_core @ uk.mT + row) + col @ uk.mT + rest / lam2
    return jnp.where(ok[0] & ok[1], h, jnp.nan).astype(d.dtype)


def sylvester_solve(w_q, w_k, damping, d, solver):
    """Regularized Sylvester solve by ``"structured"`` (rank-``d_h``) or ``"dense"``."""
    if solver == "dense":
        return sylvester_dense(w_q, w_k, damping, d)
    return sylvester_lowrank(w_q, w_k, damping, d)
