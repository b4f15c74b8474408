"""JAX kernels: the one Newton–Schulz, damped Gram roots by eigh, SVD msign, input validation.

The emitted modules inline these functions verbatim (they import nothing but ``jax`` and
``jax.numpy``), so generated code and the validators run the same algorithms. Every kernel
batches over leading axes and keeps the input dtype; eigh and SVD run in at least float32.
"""

import jax
import jax.numpy as jnp

MSIGN_METHODS = ("newton_schulz", "svd")


def compute_dtype(dtype):
    """Float32 for 16-bit inputs (eigh and SVD have no 16-bit kernels), else the dtype itself."""
    return jnp.float32 if jnp.dtype(dtype).itemsize < 4 else dtype


def gram_eigh(w, damping, side):
    """Eigenpairs of ``WᵀW + λI`` (``side="right"``) or ``WWᵀ + λI`` (``"left"``), ascending."""
    wc = w.astype(compute_dtype(w.dtype))
    g = wc.mT @ wc if side == "right" else wc @ wc.mT
    # exact symmetry matters: jax 0.10's CPU eigh never returned on a float32 Gram matrix
    # formed as Wᵀ W without it (seen in benchmarks/halfsplit.py)
    g = 0.5 * (g + g.mT) + damping * jnp.eye(g.shape[-1], dtype=g.dtype)
    evals, evecs = jnp.linalg.eigh(g)
    return evals, evecs


def gram_eigh_stacked(ws, damping, side):
    """:func:`gram_eigh` of several same-shape matrices in one batched call.

    One LAPACK call instead of several: on the CPU, jaxlib 0.10 runs independent eigh/SVD
    kernels concurrently, each blocking a worker of the intra-op pool while it waits for its
    own batch tasks; with two workers that deadlocks (seen with gdb on a 2-core machine).
    """
    evals, evecs = gram_eigh(jnp.stack(ws), damping, side)
    return tuple((evals[i], evecs[i]) for i in range(len(ws)))


def psd_power(eig, p, dtype):
    """``V diag(w)^p Vᵀ`` from :func:`gram_eigh`; eigenvalues are floored at ``n·eps·max(w)``.

    The floor keeps inverse roots finite for rank-deficient undamped partners; with
    ``λ > 0`` it is never active.
    """
    evals, evecs = eig
    n = evals.shape[-1]
    tiny = jnp.finfo(evals.dtype).tiny
    floor = jnp.maximum(n * jnp.finfo(evals.dtype).eps * evals[..., -1:], tiny)
    powered = jnp.maximum(evals, floor) ** p
    return ((evecs * powered[..., None, :]) @ evecs.mT).astype(dtype)


def isotropic_scale(w, damping):
    """``c_W = (‖W‖_F² / d_h + λ)^{1/2}`` per matrix, shape ``(..., 1, 1)``."""
    wc = w.astype(compute_dtype(w.dtype))
    sq = jnp.sum(wc * wc, axis=(-2, -1), keepdims=True)
    return jnp.sqrt(sq / w.shape[-1] + damping).astype(w.dtype)


def msign_svd(a):
    """``U Vᵀ`` over the singular values above ``max(m, n)·eps·σ_max`` (zero ones map to 0)."""
    ac = a.astype(compute_dtype(a.dtype))
    u, s, vt = jnp.linalg.svd(ac, full_matrices=False)
    tol = max(a.shape[-2:]) * jnp.finfo(ac.dtype).eps * s[..., :1]
    keep = (s > tol).astype(ac.dtype)
    return ((u * keep[..., None, :]) @ vt).astype(a.dtype)


def newton_schulz(x, schedule, norm_eps=1e-7):
    """msign by odd-polynomial iterations, one polynomial per entry of ``schedule``.

    Step ``(c_0, c_1, …, c_k)`` maps ``X ← c_0 X + (c_1 A + c_2 A² + … + c_k A^k) X`` with
    ``A = X Xᵀ`` formed on the short side, i.e. each singular value goes to
    ``p(σ) = c_0 σ + c_1 σ³ + … + c_k σ^{2k+1}``. The input is first divided by
    ``‖X‖_F + norm_eps`` so that ``σ ≤ 1``. Runs in the input dtype.
    """
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.mT
    x = x / (jnp.linalg.norm(x.astype(compute_dtype(x.dtype)), axis=(-2, -1), keepdims=True)
             + norm_eps).astype(x.dtype)
    eye = jnp.eye(x.shape[-2], dtype=x.dtype)
    for coeffs in schedule:
        a = x @ x.mT
        b = coeffs[-1] * a
        for c in reversed(coeffs[1:-1]):
            b = (b + c * eye) @ a
        x = coeffs[0] * x + b @ x
    return x.mT if tall else x


def spectral_sign(a, method, schedule):
    """``msign(A)`` by ``"newton_schulz"`` (with ``schedule``) or ``"svd"``."""
    if method == "svd":
        return msign_svd(a)
    return newton_schulz(a, schedule)


def spectral_sign_stacked(arrays, method, schedule):
    """:func:`spectral_sign` of several same-shape matrices in one batched call."""
    out = spectral_sign(jnp.stack(arrays), method, schedule)
    return tuple(out[i] for i in range(len(arrays)))


def all_finite(arrays):
    """One boolean: every entry of every array is finite (fuses with the producers under jit)."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in arrays]))


def raise_if_not_finite(function, finite, arrays):
    """After a call: raise ``ValueError`` naming the non-finite input, or the overflow.

    Skipped when ``finite`` is a tracer (the caller is inside an outer ``jit``).
    """
    if isinstance(finite, jax.core.Tracer) or bool(finite):
        return
    for name, x in arrays.items():
        if not bool(jnp.all(jnp.isfinite(x))):
            raise ValueError(f"{function}: {name} contains NaN or Inf")
    raise ValueError(f"{function}: the update overflowed to NaN/Inf in {next(iter(arrays.values())).dtype} "
                     f"although every input is finite; use a wider dtype or a larger damping")


def validate_inputs(function, shapes, arrays, eps, damping, method, schedule):
    """Check arguments before tracing; raise ``ValueError``/``TypeError`` naming the argument.

    ``shapes`` maps each argument name to its two trailing dimension names, e.g.
    ``{"W_Q": ("d", "d_h")}``; every dimension name must get one size, every argument the same
    leading (batch) shape and the same floating dtype, and ``d_h ≤ d``.
    """
    sizes, batch, dtype = {}, None, None
    for name, dims in shapes.items():
        x = arrays[name]
        nd = len(dims)
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{function}: {name} must be an array, got {type(x).__name__}")
        if x.ndim < nd:
            raise ValueError(f"{function}: {name} must have shape (..., {', '.join(dims)}), got {tuple(x.shape)}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{function}: {name} must be floating point, got dtype {x.dtype}")
        if dtype is None:
            dtype = x.dtype
        elif x.dtype != dtype:
            raise TypeError(f"{function}: {name} has dtype {x.dtype} but earlier arguments have {dtype}; "
                            f"cast all inputs to one dtype")
        lead = tuple(x.shape[:-nd])
        if batch is None:
            batch = lead
        elif lead != batch:
            raise ValueError(f"{function}: {name} has leading (batch) shape {lead}, expected {batch}")
        for dim, size in zip(dims, x.shape[-nd:]):
            if sizes.setdefault(dim, size) != size:
                raise ValueError(f"{function}: {name} has {dim} = {size} but an earlier argument has "
                                 f"{dim} = {sizes[dim]}; expected shape (..., {', '.join(dims)})")
    if "k" in sizes and "d_h" in sizes and "m" in sizes and sizes["m"] != sizes["k"] * sizes["d_h"]:
        raise ValueError(f"{function}: the gradient has m = {sizes['m']} columns but the partner has "
                         f"{sizes['k']} blocks of width {sizes['d_h']}")
    if "d" in sizes and "d_h" in sizes and sizes["d_h"] > sizes["d"]:
        raise ValueError(f"{function}: head dimension d_h = {sizes['d_h']} exceeds model width d = "
                         f"{sizes['d']}; are the weights transposed? expected W of shape (..., d, d_h)")
    for name, value in (("eps", eps), ("damping", damping)):
        if isinstance(value, jax.core.Tracer):
            continue
        v = float(value)
        if not v >= 0.0 or v == float("inf"):
            raise ValueError(f"{function}: {name} must be finite and >= 0, got {value}")
    if method not in MSIGN_METHODS:
        raise ValueError(f"{function}: msign must be one of {MSIGN_METHODS}, got {method!r}")
    if method == "newton_schulz":
        if not isinstance(schedule, tuple) or not schedule:
            raise TypeError(f"{function}: schedule must be a non-empty tuple of coefficient tuples "
                            f"(it is a static argument), got {type(schedule).__name__}")
        for step in schedule:
            if not isinstance(step, tuple) or not step or not all(
                    isinstance(c, float) and abs(c) < float("inf") for c in step):
                raise ValueError(f"{function}: each schedule step must be a tuple of finite floats "
                                 f"(c_0, c_1, ...), got {step!r}")


SYLVESTER_SOLVERS = ("structured", "dense")


def sylvester_lowrank(w_q, w_k, damping, d):
    """``H`` with ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D`` in ``O(d² d_h)``, ``λ > 0``.

    With thin SVDs ``W_Q = U_Q S_Q ·``, ``W_K = U_K S_K ·`` the operator is diagonal in the bases
    ``[U_Q, U_Q⊥]`` and ``[U_K, U_K⊥]``: eigenvalues ``s_Q,i² + s_K,j² + 2λ`` (zero ``s`` on the
    complements). ``D`` is split by the projectors ``P_Q = U_Q U_Qᵀ``, ``P_K = U_K U_Kᵀ`` into four
    blocks, each divided by its eigenvalues; no ``d × d`` factorization is ever formed.
    """
    ct = compute_dtype(d.dtype)
    dc = d.astype(ct)
    # one stacked SVD, made to wait for D: on the CPU two LAPACK kernels running at once can
    # deadlock jaxlib's pool (see gram_eigh_stacked); 0·D adds the data dependency
    w = jnp.stack([w_q, w_k]).astype(ct) + 0 * dc[..., :1, :1]
    u, s, _ = jnp.linalg.svd(w, full_matrices=False)
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
    return h.astype(d.dtype)


def sylvester_dense(w_q, w_k, damping, d):
    """The same ``H`` by Bartels–Stewart (``jax.scipy.linalg.solve_sylvester``), ``O(d³)``."""
    ct = compute_dtype(d.dtype)
    wq, wk = w_q.astype(ct), w_k.astype(ct)
    eye = jnp.eye(d.shape[-1], dtype=ct)
    a = wq @ wq.mT + damping * eye
    b = wk @ wk.mT + damping * eye
    return jax.scipy.linalg.solve_sylvester(a, b, d.astype(ct)).astype(d.dtype)


def sylvester_solve(w_q, w_k, damping, d, solver):
    """Regularized Sylvester solve by ``"structured"`` (rank-``d_h``) or ``"dense"``."""
    if solver == "dense":
        return sylvester_dense(w_q, w_k, damping, d)
    return sylvester_lowrank(w_q, w_k, damping, d)


def sylvester_gram(w_q, w_k, damping, r):
    """``X`` with ``(W_QᵀW_Q + λI) X + X (W_KᵀW_K + λI) = R`` (``d_h × d_h``, SPD coefficients).

    Both Grams are diagonalized by one stacked eigh: ``X = V_Q [(V_Qᵀ R V_K) / (α_i + β_j)] V_Kᵀ``.
    """
    (aq, vq), (ak, vk) = gram_eigh_stacked((w_q, w_k), damping, "right")
    rt = vq.mT @ r.astype(vq.dtype) @ vk
    den = aq[..., :, None] + ak[..., None, :]
    den = jnp.maximum(den, jnp.finfo(den.dtype).tiny)
    return (vq @ (rt / den) @ vk.mT).astype(r.dtype)


def split_heads(w, head_dim):
    """``(..., d, H·d_h) → (..., H, d, d_h)`` (heads are contiguous column blocks)."""
    d, width = w.shape[-2], w.shape[-1]
    return jnp.moveaxis(w.reshape(*w.shape[:-2], d, width // head_dim, head_dim), -2, -3)


def merge_heads(w):
    """``(..., H, d, d_h) → (..., d, H·d_h)``, the inverse of :func:`split_heads`."""
    w = jnp.moveaxis(w, -3, -2)
    return w.reshape(*w.shape[:-2], w.shape[-2] * w.shape[-1])


def gqa_layout(query_fn, key_fn, W_Q, W_K, G_Q, G_K, head_dim, options):
    """Stored GQA layouts → per-head rule calls → stored layouts.

    ``W_Q, G_Q: (..., d, H·d_h)``, ``W_K, G_K: (..., d, H_kv·d_h)``; query head ``h`` uses key head
    ``h // (H / H_kv)`` (consecutive grouping, as ``repeat_kv`` does). Query updates are head-local
    with their group's key head; each shared key head sees its group's queries stacked row-wise.
    """
    for name, x, ref in (("G_Q", G_Q, W_Q), ("G_K", G_K, W_K)):
        if getattr(x, "shape", None) != getattr(ref, "shape", None):
            raise ValueError(f"gqa_qk: {name} must have the shape of its weight {tuple(ref.shape)}, "
                             f"got {tuple(getattr(x, 'shape', ()))}")
    if not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"gqa_qk: head_dim must be a positive int, got {head_dim!r}")
    for name, x in (("W_Q", W_Q), ("W_K", W_K)):
        if x.ndim < 2 or x.shape[-1] % head_dim:
            raise ValueError(f"gqa_qk: {name} has width {x.shape[-1]}, not a multiple of head_dim = {head_dim}")
    heads, kv_heads = W_Q.shape[-1] // head_dim, W_K.shape[-1] // head_dim
    if heads % kv_heads:
        raise ValueError(f"gqa_qk: {heads} query heads cannot be grouped over {kv_heads} key heads")
    group = heads // kv_heads
    q, k, gq, gk = (split_heads(jnp.asarray(x), head_dim) for x in (W_Q, W_K, G_Q, G_K))
    d_q = query_fn(jnp.repeat(k, group, axis=-3), gq, **options)
    stacked = q.reshape(*q.shape[:-3], kv_heads, group * q.shape[-2], head_dim)
    d_k = key_fn(stacked, gk, group_size=float(group), **options)
    return merge_heads(d_q), merge_heads(d_k)


def block_right(x, blocks):
    """``X · blockdiag(C_1, …, C_k)`` for ``X: (..., d, k·c)`` and ``blocks: (..., k, c, c)``."""
    k, c = blocks.shape[-3], blocks.shape[-1]
    xb = x.reshape(*x.shape[:-1], k, c)
    out = jnp.einsum("...dkc,...kcj->...dkj", xb, blocks.astype(x.dtype))
    return out.reshape(x.shape)


def joint_layout(core, W_Q, W_K, G_Q, G_K, options):
    """``(W_Q, W_K, G_Q, G_K)`` → one block-whitened call with ``P = blockdiag(W_K, W_Q)``, ``G = [G_Q | G_K]``."""
    for name, x, ref in (("W_K", W_K, W_Q), ("G_Q", G_Q, W_Q), ("G_K", G_K, W_Q)):
        if getattr(x, "shape", None) != getattr(ref, "shape", None):
            raise ValueError(f"joint_qk: {name} must have the shape of W_Q {tuple(ref.shape)}, "
                             f"got {tuple(getattr(x, 'shape', ()))}")
    blocks = jnp.stack([jnp.asarray(W_K), jnp.asarray(W_Q)], axis=-3)
    delta = core(blocks, jnp.concatenate([jnp.asarray(G_Q), jnp.asarray(G_K)], axis=-1), **options)
    d_h = W_Q.shape[-1]
    return delta[..., :d_h], delta[..., d_h:]


def hybrid_ov_layout(o_core, v_core, W_O, W_V, G_O, G_V, head_dim, options):
    """Stored OV layouts → O side (one block-whitened call over all heads) and V side (per head).

    ``W_O, G_O: (..., d, H·d_h)``; ``W_V, G_V: (..., H·d_h, d)``. The O side whitens head ``h`` by
    ``C_{V,h} = (W_{V,h} W_{V,h}ᵀ)^{1/2}`` (``P = blockdiag(W_{V,h}ᵀ)``); the V side is head-local with
    partner ``W_{O,h}``.
    """
    for name, x, ref in (("G_O", G_O, W_O), ("G_V", G_V, W_V)):
        if getattr(x, "shape", None) != getattr(ref, "shape", None):
            raise ValueError(f"hybrid_ov: {name} must have the shape of its weight {tuple(ref.shape)}, "
                             f"got {tuple(getattr(x, 'shape', ()))}")
    if not isinstance(head_dim, int) or head_dim < 1 or W_O.shape[-1] % head_dim:
        raise ValueError(f"hybrid_ov: W_O width {W_O.shape[-1]} is not a multiple of head_dim = {head_dim!r}")
    if W_V.shape[-2] != W_O.shape[-1] or W_V.shape[-1] != W_O.shape[-2]:
        raise ValueError(f"hybrid_ov: W_V must have shape (..., {W_O.shape[-1]}, {W_O.shape[-2]}) to match W_O "
                         f"{tuple(W_O.shape)}, got {tuple(W_V.shape)}")
    v_heads = split_heads(jnp.asarray(W_V).mT, head_dim)  # (..., H, d, d_h): the blocks W_{V,h}ᵀ
    d_o = o_core(v_heads, jnp.asarray(G_O), **options)
    o_heads = split_heads(jnp.asarray(W_O), head_dim)
    gv_heads = split_heads(jnp.asarray(G_V).mT, head_dim).mT  # (..., H, d_h, d)
    d_v = v_core(o_heads, gv_heads, **options)
    return d_o, merge_heads(d_v.mT).mT
