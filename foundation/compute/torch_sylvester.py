"""The regularized Sylvester equation ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D`` in PyTorch.

:mod:`foundation.compute.jax_sylvester`, one to one. With thin SVDs ``W = U S Vᵀ`` the operator is diagonal
in the bases ``[U_Q, U_Q⊥] ⊗ [U_K, U_K⊥]`` with eigenvalues ``s_Q,i² + s_K,j² + 2λ``, so the
``"structured"`` solver (:func:`sylvester_products`) divides the blocks of ``D`` by them in ``O(d² d_h)``
and never forms the complement block of size ``‖D‖/λ``. ``"dense"`` (:func:`sylvester_dense`, ``O(d³)``, a
cross-check) is Bartels–Stewart: both coefficients are symmetric, so their real Schur forms are their
eigendecompositions, and the triangular solve becomes a division by ``a_i + b_j`` (PyTorch has no Schur
routine; JAX calls ``solve_sylvester``). The ``d_h × d_h`` equation with the Grams ``WᵀW`` is
:func:`sylvester_gram`. Factors are scaled by exact powers of two first. Inlined verbatim into the
emitted modules.
"""

import torch

from foundation.compute.torch_damped_gram import gram_eigh_stacked
from foundation.compute.torch_exact_scaling import compute_dtype, max_abs, pow2_normalize, pow2_scale, scale_group
from foundation.compute.torch_lapack_calls import lapack_guard, per_matrix_on_cpu


def safe_ratio(num, den):
    """``num / den`` where ``den > 0``, else 0 (a direction with no extent and no damping)."""
    pos = den > 0
    return torch.where(pos, num / torch.where(pos, den, torch.ones_like(den)), torch.zeros_like(num * den))


def sylvester_factor_svd(w_q, w_k, damping, d):
    """Thin SVDs of both factors (one stacked call) with the shared scale of the Sylvester operator.

    Returns ``(U_Q, U_K, Vᵀ_Q, Vᵀ_K, r_Q, r_K, μ, m, k, ok)``: singular values ``s = m r 2**-k`` with
    ``m 2**-k = max(s_Q,max, s_K,max, √(2λ))`` and ``μ = 2λ/(m 2**-k)²``, every ratio formed from numbers in
    ``[0, 1]``. ``ok`` is False where a factor holds NaN/Inf or ``λ ≤ 0`` (the results are then NaN).
    """
    ct = compute_dtype(d.dtype)
    w, k_w = pow2_normalize(torch.stack([w_q, w_k]).to(ct))  # one stacked SVD, each factor in [1, 2)
    w, ok = lapack_guard(w)
    u, s, vt = per_matrix_on_cpu(lambda x: torch.linalg.svd(x, full_matrices=False), w)
    lam = torch.as_tensor(damping, dtype=ct)
    root = torch.sqrt(torch.where(lam > 0, 2 * lam, 0))
    _, k_root = pow2_normalize(root, axes=())
    k = torch.minimum(k_w[0], k_w[1])
    k = torch.where(root > 0, torch.minimum(k, k_root), k)
    sq, sk = pow2_scale(s[0], (k - k_w[0])[..., 0]), pow2_scale(s[1], (k - k_w[1])[..., 0])
    root = pow2_scale(root, k)[..., 0]
    m = torch.maximum(torch.maximum(sq[..., :1], sk[..., :1]), root)
    m = torch.where(m > 0, m, torch.ones_like(m))
    ok = ok[0] & ok[1] & (lam > 0)
    return u[0], u[1], vt[0], vt[1], sq / m, sk / m, (root / m) ** 2, m, k, ok


def sylvester_products(w_q, w_k, damping, d, solver):
    """``(H W_K, Hᵀ W_Q)`` (:func:`sylvester_products_split`, scaled to their values), in ``d``'s dtype."""
    p_q, p_k, e = sylvester_products_split(w_q, w_k, damping, d, solver)
    return tuple(pow2_scale(x, e).to(d.dtype) for x in (p_q, p_k))


def sylvester_products_split(w_q, w_k, damping, d, solver):
    """``(P_Q, P_K, e)``: ``(H W_K, Hᵀ W_Q) = (P_Q, P_K) · 2**e``, ``λ > 0``; ``P`` in the compute dtype.

    ``"structured"``, with ``C = U_Qᵀ D U_K`` and ``a = s²``:

        H W_K = [U_Q (C ⊘ (a_Q,i + a_K,j + 2λ)) + (I − P_Q) D U_K ⊘ (a_K,j + 2λ)] S_K V_Kᵀ,
        Hᵀ W_Q = [U_K (C ⊘ (a_Q,i + a_K,j + 2λ))ᵀ + (I − P_K) Dᵀ U_Q ⊘ (a_Q,i + 2λ)] S_Q V_Qᵀ;

    the complement block ``(I − P_Q) D (I − P_K) / 2λ`` of ``H`` is never formed. ``"dense"`` forms ``H``
    (:func:`sylvester_dense`) and multiplies.
    """
    ct = compute_dtype(d.dtype)
    if solver == "dense":  # on the factors and λ scaled by 2**k and 4**k (exact): H W scales by 2**-k
        (wq, wk), lam, k = scale_group((w_q, w_k), damping, 1)
        h = sylvester_dense(wq, wk, lam, d).to(ct)
        ok = torch.as_tensor(damping) > 0
        return (*(torch.where(ok, p, torch.full_like(p, float("nan"))) for p in (h @ wk.to(ct), h.mT @ wq.to(ct))),
                k.to(torch.int32))
    uq, uk, vtq, vtk, rq, rk, mu, m, k, ok = sylvester_factor_svd(w_q, w_k, damping, d)
    dc = d.to(uq.dtype)
    dk = dc @ uk  # D U_K, d × d_h
    core = uq.mT @ dk  # U_Qᵀ D U_K, d_h × d_h
    col = dk - uq @ core  # (I − P_Q) D U_K
    row = (uq.mT @ dc - core @ uk.mT).mT  # (I − P_K) Dᵀ U_Q, d × d_h
    den = rq[..., :, None] ** 2 + rk[..., None, :] ** 2 + mu[..., None]
    hq = uq @ (core * safe_ratio(rk[..., None, :], den)) + col * safe_ratio(rk, rk * rk + mu)[..., None, :]
    hk = uk @ (core * safe_ratio(rq[..., :, None], den)).mT + row * safe_ratio(rq, rq * rq + mu)[..., None, :]
    dq_out, dk_out = (hq @ vtk) / m[..., None], (hk @ vtq) / m[..., None]
    return (torch.where(ok, dq_out, torch.full_like(dq_out, float("nan"))),
            torch.where(ok, dk_out, torch.full_like(dk_out, float("nan"))), k)


def check_dense_damping(function, solver, damping, w_q, w_k, resolution=100):
    """Refuse ``solver="dense"`` when ``λ < 100·eps·max(‖W_Q‖_F², ‖W_K‖_F²)``: the solution ``H`` (of size
    ``‖D‖/λ``) times the partner loses about ``eps·‖W‖²/λ`` relative; ``"structured"`` is accurate at any
    ``λ > 0``."""
    if solver != "dense":
        return
    ct = compute_dtype(w_q.dtype)
    sq = []
    for w in (w_q, w_k):
        wc = torch.as_tensor(w).to(ct)
        m = max_abs(wc)
        sq.append(float((m[..., 0, 0] ** 2 * (wc / m).square().sum(dim=(-2, -1))).max()))
    need = resolution * float(torch.finfo(ct).eps) * max(sq)
    if float(damping) < need:
        raise ValueError(f"{function}: damping = {damping} is below what solver='dense' resolves in "
                         f"{str(ct).removeprefix('torch.')} for these weights (need damping >= {need:.3g} = "
                         f"{resolution}·eps·max ‖W‖_F²); use solver='structured' (accurate at any damping > 0) "
                         f"or a larger damping")


def sylvester_dense(w_q, w_k, damping, d):
    """``H`` with ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D`` by Bartels–Stewart (``O(d³)``).

    The coefficients ``A``, ``B`` are symmetric: their Schur forms are ``A = P diag(a) Pᵀ``, ``B = Q diag(b) Qᵀ``
    (``torch.linalg.eigh``), and ``H = P [(Pᵀ D Q) ⊘ (a_i + b_j)] Qᵀ``. A NaN/Inf coefficient gives NaN.
    """
    ct = compute_dtype(d.dtype)
    wq, wk = w_q.to(ct), w_k.to(ct)
    eye = torch.eye(d.shape[-1], dtype=ct, device=d.device)
    a, ok_a = lapack_guard(wq @ wq.mT + damping * eye)
    b, ok_b = lapack_guard(wk @ wk.mT + damping * eye)
    rhs, ok_d = lapack_guard(d.to(ct))
    ea, pa = torch.linalg.eigh(0.5 * (a + a.mT))
    eb, pb = torch.linalg.eigh(0.5 * (b + b.mT))
    h = pa @ ((pa.mT @ rhs @ pb) / (ea[..., :, None] + eb[..., None, :])) @ pb.mT
    return torch.where(ok_a & ok_b & ok_d, h, torch.full_like(h, float("nan"))).to(d.dtype)


def sylvester_gram(w_q, w_k, damping, r):
    """``X`` with ``(W_QᵀW_Q + λI) X + X (W_KᵀW_K + λI) = R`` (``d_h × d_h``, SPD coefficients).

    Both Grams from one stacked :func:`gram_eigh`: ``X = V_Q [(V_Qᵀ R V_K) / (α_i + β_j)] V_Kᵀ`` with ``α``,
    ``β`` in the units of the larger factor; a pair with ``α_i + β_j = 0`` gets 0 (the minimum-norm solution).
    """
    (aq, vq, kq), (ak, vk, kk) = gram_eigh_stacked((w_q, w_k), damping, "right")
    km = torch.minimum(kq, kk)
    alpha, beta = pow2_scale(aq, (km - kq)[..., 0]) ** 2, pow2_scale(ak, (km - kk)[..., 0]) ** 2
    rt = vq.mT @ pow2_scale(r.to(vq.dtype), 2 * km) @ vk
    den = alpha[..., :, None] + beta[..., None, :]
    return (vq @ safe_ratio(rt, den) @ vk.mT).to(r.dtype)
