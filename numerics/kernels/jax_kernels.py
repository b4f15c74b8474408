"""JAX kernels: the one Newton–Schulz, damped Gram roots by eigh, SVD msign, input validation.

The emitted modules inline these functions verbatim (they import nothing but ``jax`` and
``jax.numpy``), so generated code and the validators run the same algorithms. Every kernel
batches over leading axes and keeps the input dtype; eigh and SVD run in at least float32.

Hostile values. No NaN or Inf ever reaches LAPACK (eigh, SVD, Schur): :func:`lapack_guard`
replaces every matrix that holds one by zeros before the call and turns that matrix's results
into NaN after it (a NaN or Inf in an SVD made jaxlib 0.10's ``dgesdd`` spin forever). This works
on traced values, so it holds under ``jit`` and ``vmap`` too. Every kernel spreads a NaN or Inf
over the whole matrix it computes, so the emitted functions check only their outputs (see
:func:`nan_unless`) and name the input when they run outside an outer transformation.

Ill-conditioned partners. The Gram roots ``C = (WᵀW + λI)^{1/2}`` and ``C⁻¹`` come from the SVD of
``W`` whenever a batch holds a partner with condition number above 10 (:func:`gram_eigh`): the
error is about ``eps·κ(W)``, not the ``eps·κ(W)²`` of eigenvalues of a formed ``WᵀW``, and the
pseudo-inverse cut is at the numerical rank of ``[W; √λ I]`` (singular values at or below
``max(d, d_h)·eps·σ_max``), not at ``eps·σ_max²``.

The number range. XLA on the CPU flushes subnormal numbers to zero, operands included. Inputs are
scaled by exact powers of two read off their bits (:func:`pow2_normalize`, exact for subnormal
entries too) before anything is squared or multiplied: the Gram roots and isotropic scales carry
their power of two apart and apply it last, each factor of an msign argument is unit-scaled
(:func:`unit_scale`: ``msign`` ignores positive factors), and rules without msign scale argument
groups and their outputs (:func:`scale_group`). So a result is right whenever it and the roots
are representable; otherwise the update is NaN and the emitted function raises a clear error
(overflow, or an output below ``tiny/(16 eps)`` of its dtype: :func:`output_status`).
"""

import jax
import jax.numpy as jnp

from numerics.kernels.argcheck import check_group, check_scalar, check_shapes  # noqa: F401 (check_group: inlined by the printers)

MSIGN_METHODS = ("newton_schulz", "svd")


def compute_dtype(dtype):
    """Float32 for 16-bit inputs (eigh and SVD have no 16-bit kernels), else the dtype itself."""
    return jnp.float32 if jnp.dtype(dtype).itemsize < 4 else dtype


def lapack_guard(a):
    """``(A with every non-finite matrix zeroed, ok)``; ``ok`` is ``(..., 1, 1)``, True where finite.

    Callers pass the zeroed matrices to LAPACK and NaN the results where ``ok`` is False.
    """
    ok = jnp.all(jnp.isfinite(a), axis=(-2, -1), keepdims=True)
    return jnp.where(ok, a, 0), ok


def max_abs(a):
    """``max |a_ij|`` per matrix, shape ``(..., 1, 1)``, with 1 in place of 0 (a safe divisor)."""
    m = jnp.max(jnp.abs(a), axis=(-2, -1), keepdims=True)
    return jnp.where(m > 0, m, jnp.ones_like(m))


def float_layout(dtype):
    """``(integer dtype of the same width, mantissa bits, exponent bias)`` of a float dtype."""
    info = jnp.finfo(dtype)
    return {16: jnp.int16, 32: jnp.int32, 64: jnp.int64}[info.bits], info.nmant, info.maxexp - 1


def pow2(n, dtype):
    """``2**n`` in ``dtype`` for integer ``n`` in the normal exponent range, built from its bits (exact)."""
    it, nmant, bias = float_layout(dtype)
    n = jnp.clip(jnp.asarray(n), 1 - bias, bias)
    return jax.lax.bitcast_convert_type(jnp.left_shift((n + bias).astype(it), nmant), dtype)


def pow2_scale(x, n):
    """``x · 2**n`` for integer ``n`` (broadcast), exact whenever ``x`` and the result are normal numbers.

    Three multiplications by powers of two of one sign, each in the normal range: the partial products
    lie between ``x`` and the result, so nothing over- or underflows on the way (``n`` up to ±3·1022).
    """
    _, _, bias = float_layout(x.dtype)
    left = jnp.asarray(n, jnp.int32)
    for _ in range(3):
        step = jnp.clip(left, 2 - bias, bias - 1)
        x = x * pow2(step, x.dtype)
        left = left - step
    return x


def pow2_normalize(a, axes=(-2, -1)):
    """``(a · 2**k, k)`` with ``max|a · 2**k|`` in ``[1, 2)`` over ``axes`` (``k`` int32, keepdims), exact.

    In the compute dtype (float32 for 16-bit inputs). Exact also for subnormal entries: XLA on the
    CPU flushes subnormal operands to zero (float32 entries below 1.2e-38, float64 below 2.2e-308),
    so the exponent is read off the bits and a subnormal entry is rebuilt from its integer mantissa,
    never multiplied as it is. A zero matrix gets ``k = 0``; a matrix with NaN/Inf becomes all NaN
    (``k = 0``), so the non-finite value reaches every result computed from it.
    """
    ct = compute_dtype(a.dtype)
    x = a.astype(ct)
    it, nmant, bias = float_layout(ct)
    bits = jax.lax.bitcast_convert_type(x, it)
    mag = jnp.bitwise_and(bits, jnp.asarray(jnp.iinfo(it).max, it))  # |x| as an integer, same order as |x|
    top = jnp.max(mag, axis=axes, keepdims=True, initial=0)
    field = jnp.right_shift(top, nmant)  # biased exponent of max|x|; 0 for a subnormal maximum
    sub = jnp.right_shift(jax.lax.bitcast_convert_type(top.astype(ct), it), nmant)  # float(mantissa)'s
    e = jnp.where(field > 0, field - bias, sub - 2 * bias + 1 - nmant)
    bad = field >= 2 * bias + 1  # a NaN or Inf somewhere
    k = jnp.where((top == 0) | bad, 0, -e).astype(jnp.int32)
    normal = pow2_scale(x, k)
    tiny = pow2_scale(mag.astype(ct), k + 1 - bias - nmant)  # |x| = mantissa · 2^(1−bias−nmant)
    tiny = jnp.where(bits < 0, -tiny, tiny)
    out = jnp.where(jnp.right_shift(mag, nmant) > 0, normal, tiny)
    return jnp.where(bad, jnp.asarray(jnp.nan, ct), out), k


def scale_group(arrays, damping, multiple):
    """``(arrays · 2**k, λ · 4**k, k)``: one group of an emitted function's arguments brought near 1, exactly.

    ``2**-k`` is about the largest ``max|x_ij|`` of the group's nonzero matrices, and of ``√λ`` unless
    ``damping`` is None (then ``None`` is returned for it); ``k`` (int32, ``(..., 1, 1)``) is rounded
    down to a multiple of ``multiple`` so that the outputs' powers of two are whole. The printer
    takes the groups and the outputs' powers from the formulas (:mod:`derivations.printing.scaling`)
    and scales the outputs back with :func:`pow2_scale`.
    """
    never = jnp.iinfo(jnp.int32).max
    scaled, ks = zip(*(pow2_normalize(a) for a in arrays))
    k = jnp.asarray(never, jnp.int32)
    for x, kx in zip(scaled, ks):
        k = jnp.minimum(k, jnp.where(jnp.any(x != 0, axis=(-2, -1), keepdims=True), kx, never))
    if damping is not None:
        root = jnp.sqrt(jnp.asarray(damping, scaled[0].dtype))
        _, k_root = pow2_normalize(root, axes=())
        k = jnp.where(root > 0, jnp.minimum(k, k_root), k)
    k = jnp.where(k == never, 0, k)
    k = jnp.floor_divide(k, multiple) * multiple
    out = tuple(pow2_scale(x, k - kx).astype(a.dtype) for x, kx, a in zip(scaled, ks, arrays))
    lam = None if damping is None else pow2_scale(jnp.asarray(damping, scaled[0].dtype), 2 * k)
    return out, lam, k


def unit_scale(a, axes=(-2, -1)):
    """``a`` times the power of two that puts ``max|a|`` over ``axes`` in ``[1, 2)``; same dtype, exact.

    ``msign`` ignores a positive factor, so each factor of an msign argument is unit-scaled before
    the product is formed: neither the product nor its terms can over- or underflow, whatever the
    scale of the gradient (float32 gradients of size 1e-39 are subnormal) or of the partner's root.
    """
    return pow2_normalize(a, axes)[0].astype(a.dtype)


UNROLL_LIMIT = 64  # matrices per batched LAPACK call that the CPU path unrolls into single calls


def real_scalar(x):
    """A checked scalar as JAX takes it: arrays and tracers as they are, any other real number as a float.

    ``fractions.Fraction`` or ``decimal.Decimal`` pass :func:`check_scalar` (``float`` converts them) but
    are no JAX type; jit would reject them with a multi-line TypeError.
    """
    return x if isinstance(x, jax.core.Tracer) or hasattr(x, "dtype") else float(x)


def per_matrix_on_cpu(fn, a):
    """``fn(a)`` for a batched LAPACK ``fn``; on the CPU one single-matrix call per matrix.

    jaxlib's CPU kernels split a batch over the intra-op pool and wait inside a pool worker for
    it; two such kernels at once on a 2-worker pool deadlock (seen at Llama-3-8B attention shapes
    with gdb). A single-matrix call never waits on the pool. Up to ``UNROLL_LIMIT`` matrices the
    calls are independent operations, which XLA runs in parallel (24 eighs of 64 × 64 on 2 cores
    with one OpenBLAS thread: 8.7 ms, as fast as the batched call's 9.0 ms; compiling 64 calls
    takes 1.5 s, 256 take 7.5 s); larger batches run one matrix at a time in a ``lax.map``
    (12.2 ms for the same 24; a loop body runs its calls in sequence). Other platforms keep the
    batched call.
    """
    if a.ndim == 2 or a.size == 0:  # an empty batch: the batched call returns empty results
        return fn(a)

    def single_calls(x):
        flat = x.reshape(-1, *x.shape[-2:])
        if flat.shape[0] <= UNROLL_LIMIT:
            outs = [fn(flat[i]) for i in range(flat.shape[0])]
            out = jax.tree.map(lambda *ys: jnp.stack(ys), *outs)
        else:
            out = jax.lax.map(fn, flat)
        return jax.tree.map(lambda y: y.reshape(*x.shape[:-2], *y.shape[1:]), out)

    return jax.lax.platform_dependent(a, cpu=single_calls, default=fn)


#: the Gram route (eigh of ``WᵀW + λI``) is taken while every matrix of a batch has
#: ``e_min ≥ GRAM_ROUTE_RATIO · e_max`` (condition number of ``W`` at most 10); otherwise the roots
#: come from the SVD of ``W`` itself, which does not square the condition number
GRAM_ROUTE_RATIO = 1e-2


def scale_with_damping(w, damping):
    """``(W · 2**k, √λ · 2**k, k)`` in the compute dtype: ``2**-k`` is about ``max(max|w_ij|, √λ)``.

    Exact (:func:`pow2_normalize`: subnormal entries included), so ``[W; √λ I]`` keeps its singular
    vectors and its singular values scale by exactly ``2**k``; ``k`` is int32 of shape ``(..., 1, 1)``.
    A negative ``λ`` gives a NaN root (and NaN results).
    """
    a, k_w = pow2_normalize(w)
    root = jnp.sqrt(jnp.asarray(damping, a.dtype))
    _, k_root = pow2_normalize(root, axes=())
    k = jnp.where(root > 0, jnp.minimum(k_w, k_root), k_w)
    return pow2_scale(a, k - k_w), pow2_scale(root, k), k


def right_singular(a):
    """``(σ, V)``: singular values (padded with zeros to ``n``) and right singular vectors of ``a`` (``m × n``).

    ``m ≥ n``: the SVD of ``R`` from ``a = QR`` (``n × n``; ``Q`` is never formed). ``σ`` is accurate to
    ``eps·σ_max`` absolute, so small singular values keep ``eps·κ`` relative accuracy.
    """
    m, n = a.shape[-2:]
    if m >= n:
        _, sv, vt = jnp.linalg.svd(jnp.linalg.qr(a, mode="r"), full_matrices=False)
    else:
        _, sv, vt = jnp.linalg.svd(a, full_matrices=True)
        sv = jnp.concatenate([sv, jnp.zeros((*sv.shape[:-1], n - m), sv.dtype)], axis=-1)
    return sv, vt.mT


def gram_eigh(w, damping, side):
    """``WᵀW + λI`` (``side="right"``) or ``WWᵀ + λI`` (``"left"``) as ``(r, V, k)``, ``= V diag(r²) Vᵀ · 4**-k``.

    ``r`` are the singular values of ``[W; √λ I] · 2**k`` (:func:`scale_with_damping`; nothing over-
    or underflows, whatever the scale of ``W``), and the numerical rank cut is applied to them, not
    to their squares: ``r_i ≤ max(m, n)·eps·max(r)`` (``W`` of shape ``m × n``, eps of the compute
    dtype) is set to 0, which :func:`psd_power` maps to 0 for negative powers (pseudo-inverse roots).
    With ``λ ≥ (max(m, n)·eps)²·‖W‖²`` the cut is never active.

    Two routes, same result: while every finite matrix of the batch has eigenvalues
    ``e_min ≥ GRAM_ROUTE_RATIO · e_max`` (condition number of ``[W; √λ I]`` at most 10), the
    eigendecomposition of the Gram matrix (error about ``eps·κ²``, at most ``100·eps``); otherwise
    the QR and SVD of ``W`` itself (:func:`right_singular`, error about ``eps·κ``: the condition
    number is not squared), for the whole batch (a ``lax.cond``: only one route runs). A matrix
    with NaN/Inf gives NaN.
    """
    ct = compute_dtype(w.dtype)
    a = w.astype(ct)
    if side == "left":
        a = a.mT
    a, root, k = scale_with_damping(a, damping)
    lam = root * root
    tol = max(a.shape[-2:]) * jnp.finfo(ct).eps
    g = a.mT @ a
    # exact symmetry matters: jax 0.10's CPU eigh never returned on a float32 Gram matrix
    # formed as Wᵀ W without it (seen in benchmarks/halfsplit.py)
    g = 0.5 * (g + g.mT) + lam * jnp.eye(g.shape[-1], dtype=ct)
    g, ok = lapack_guard(g)
    evals, evecs = per_matrix_on_cpu(jnp.linalg.eigh, g)
    well = (evals[..., :1] >= GRAM_ROUTE_RATIO * evals[..., -1:]) | ~ok[..., 0]

    def by_gram(_):
        return jnp.sqrt(jnp.maximum(evals, 0)), evecs

    def by_svd(_):
        sv, v = per_matrix_on_cpu(right_singular, lapack_guard(a)[0])
        return jnp.sqrt(sv * sv + lam[..., 0]), v

    r, v = jax.lax.cond(jnp.all(well), by_gram, by_svd, None)
    r = jnp.where(r > tol * jnp.max(r, axis=-1, keepdims=True), r, 0)
    nan = jnp.asarray(jnp.nan, ct)
    return jnp.where(ok[..., 0], r, nan), jnp.where(ok, v, nan), k


def gram_eigh_stacked(ws, damping, side):
    """:func:`gram_eigh` of several same-shape matrices in one batched call.

    One LAPACK call instead of several (fewer kernel launches; see :func:`per_matrix_on_cpu`); matrices of
    different shapes (a LoRA pair's ``B`` and ``Aᵀ``) get one call each.
    """
    if len({tuple(w.shape) for w in ws}) > 1:
        return tuple(gram_eigh(w, damping, side) for w in ws)
    r, v, k = gram_eigh(jnp.stack(ws), damping, side)
    return tuple((r[i], v[i], k[i]) for i in range(len(ws)))


def psd_power(eig, p, dtype):
    """``V diag(r²)^p Vᵀ · 4**(-p k)`` from :func:`gram_eigh`: a power of the damped Gram matrix.

    Negative powers are pseudo-inverse powers: the ``r`` that :func:`gram_eigh` cut to 0 (at the
    numerical rank of ``[W; √λ I]``, ``r_i ≤ max(m, n)·eps·max(r)``) map to 0. For an undamped
    rank-deficient partner this gives the minimum-norm solution of the derived problem (an update
    along the partner's null space leaves the product unchanged); a zero partner gives a zero
    update. The scale ``4**(-p k)`` is applied last, exactly for ``2p`` whole (the roots and
    inverses), so the result is right whenever it is representable.
    """
    r, v, k = eig
    if p < 0:
        kept = r > 0
        powered = jnp.where(kept, jnp.where(kept, r, 1) ** (2 * p), 0)
    else:
        powered = r ** (2 * p)
    out = (v * powered[..., None, :]) @ v.mT
    if float(2 * p).is_integer():
        out = pow2_scale(out, -int(2 * p) * k)
    else:
        half = jnp.exp2(-p * k.astype(out.dtype))  # 2**(-2pk) in two factors that stay in range
        out = out * half * half
    return out.astype(dtype)


def psd_power_split(eig, p, blocks=False):
    """``(X, e)`` with ``X · 2**e`` the power :func:`psd_power` returns, ``2p`` whole (the roots and inverses).

    ``X`` is in the compute dtype with ``max|X| ∈ [1, 2)`` (``e`` int32, ``(..., 1, 1)``): the scale is carried
    apart, so a root of a huge or tiny partner never under- or overflows before the output's last step
    (:func:`pow2_unscale`, which also flags an output below the dtype's range). ``blocks``: ``eig`` holds the
    blocks ``(..., k, c, c)`` of one block-diagonal partner; they share one ``e`` (blocks far below the
    largest lose what lies below the dtype's range, which is negligible next to it).
    """
    if not float(2 * p).is_integer():
        raise ValueError(f"psd_power_split: 2p must be whole, got p = {p}")
    r, v, k = eig
    if p < 0:
        kept = r > 0
        powered = jnp.where(kept, jnp.where(kept, r, 1) ** (2 * p), 0)
    else:
        powered = r ** (2 * p)
    out, k_out = pow2_normalize((v * powered[..., None, :]) @ v.mT)
    e = -int(2 * p) * k - k_out
    if blocks:
        nonzero = jnp.any(out != 0, axis=(-2, -1), keepdims=True)
        low = jnp.iinfo(jnp.int32).min // 4
        top = jnp.max(jnp.where(nonzero, e, low), axis=-3, keepdims=True)
        top = jnp.where(top == low, 0, top)
        out = pow2_scale(out, jnp.where(nonzero, e - top, 0))
        e = top[..., 0, :, :]
    return out, e


def polar_factor(w, damping):
    """``U_W = W (WᵀW + λI)^{-1/2}`` from the SVD of ``W`` itself: ``U diag(s / (s² + λ)^{1/2}) Vᵀ``.

    Formed from singular vectors, not as the product ``W C_W⁻¹`` (whose small directions would carry an
    error of ``eps·κ(W)``); pseudo-inverse cut as in :func:`gram_eigh` (``(s² + λ)^{1/2}`` at or below
    ``max(m, n)·eps`` of its largest gives 0). ``W`` is scaled by a power of two first (exact), so its
    size does not matter; a matrix with NaN/Inf gives NaN.
    """
    ct = compute_dtype(w.dtype)
    a, root, _ = scale_with_damping(w.astype(ct), damping)
    a, ok = lapack_guard(a)
    u, s, vt = per_matrix_on_cpu(lambda x: jnp.linalg.svd(x, full_matrices=False), a)
    r = jnp.sqrt(s * s + root[..., 0] * root[..., 0])
    kept = r > max(a.shape[-2:]) * jnp.finfo(ct).eps * jnp.max(r, axis=-1, keepdims=True)
    ratio = jnp.where(kept, s / jnp.where(kept, r, 1), 0)
    return jnp.where(ok, (u * ratio[..., None, :]) @ vt, jnp.nan).astype(w.dtype)


def isotropic_scale(w, damping):
    """``c_W = (‖W‖_F² / d_h + λ)^{1/2}`` per matrix, shape ``(..., 1, 1)``, with the scale taken out exactly.

    ``c = 2**-k (‖W 2**k‖_F² / d_h + λ 4**k)^{1/2}`` (:func:`scale_with_damping`), so the squares stay in range.
    """
    c, e = isotropic_scale_split(w, damping)
    return pow2_scale(c, e).astype(w.dtype)


def isotropic_scale_split(w, damping):
    """``(c, e)`` with ``c_W = c · 2**e`` (:func:`isotropic_scale`); ``c`` in the compute dtype, near 1."""
    a, root, k = scale_with_damping(w.astype(compute_dtype(w.dtype)), damping)
    sq = jnp.sum(a * a, axis=(-2, -1), keepdims=True)
    return jnp.sqrt(sq / w.shape[-1] + root * root), -k


def split_scalar(x, dtype):
    """``(m, e)`` with ``x = m · 2**e`` exactly, ``|m| ∈ [1, 2)`` (or 0), ``m`` in the compute dtype of ``dtype``.

    A scalar argument (``eps``, ``group_size``) enters an output as its mantissa; its power of two joins the
    output's exponent (:func:`pow2_unscale`), so ``eps = 1e-38`` times a partner's small root cannot flush
    the update to zero unnoticed.
    """
    m, k = pow2_normalize(jnp.asarray(x, compute_dtype(dtype)), axes=())
    return m, -k


def msign_svd(a):
    """``U Vᵀ`` over the singular values above ``max(m, n)·eps·σ_max`` (zero ones map to 0).

    ``A`` is divided by ``max|a_ij|`` first (msign ignores positive scale); a matrix with NaN/Inf
    gives NaN.
    """
    ac = a.astype(compute_dtype(a.dtype))
    ac, ok = lapack_guard(ac / max_abs(ac))
    u, s, vt = per_matrix_on_cpu(lambda x: jnp.linalg.svd(x, full_matrices=False), ac)
    tol = max(a.shape[-2:]) * jnp.finfo(ac.dtype).eps * s[..., :1]
    keep = (s > tol).astype(ac.dtype)
    out = jnp.where(ok, (u * keep[..., None, :]) @ vt, jnp.nan)
    return out.astype(a.dtype)


def schedule_array(schedule):
    """A schedule as an array ``(steps, k+1)``; a tuple of coefficient tuples is padded with zeros.

    A shorter step padded with zero high-order coefficients is the same polynomial.
    """
    if hasattr(schedule, "shape"):
        return jnp.asarray(schedule)
    width = max(len(step) for step in schedule)
    return jnp.asarray([list(step) + [0.0] * (width - len(step)) for step in schedule])


NS_UNROLL_STEPS = 16  # Newton–Schulz schedules up to this many steps are unrolled, longer ones loop
MAX_SCHEDULE_STEPS = 100  # longer schedules are refused (coeffsearch uses the same bound)


def newton_schulz(x, schedule):
    """msign by odd-polynomial iterations, one polynomial per row of ``schedule``.

    Step ``(c_0, c_1, …, c_k)`` maps ``X ← c_0 X + (c_1 A + c_2 A² + … + c_k A^k) X`` with
    ``A = X Xᵀ`` formed on the short side, i.e. each singular value goes to
    ``p(σ) = c_0 σ + c_1 σ³ + … + c_k σ^{2k+1}``. The iteration starts from ``X / ‖X‖_F`` (so
    ``σ ≤ 1``; a zero matrix stays zero). ``X`` is first divided by ``max|x_ij|``, so ``‖X‖_F²``
    lies in ``[1, mn]`` and nothing overflows or underflows; the Frobenius division is then folded
    into the first step: ``‖X‖_F² = tr(A)`` comes from that step's own Gram matrix, and
    ``c_0 X/ν + (B/ν) X`` scales a ``k × k`` matrix instead of the whole ``X`` (one pass over ``X``
    fewer; 16-bit inputs keep an explicit float32 normalisation). ``schedule`` is data: an array
    ``(steps, k+1)`` (or a tuple of coefficient tuples) scanned by ``jax.lax.scan``, so schedules
    of one shape share one compilation; up to ``NS_UNROLL_STEPS`` steps the scan is unrolled, a
    longer schedule runs as a loop (compile time independent of its length; at most
    ``MAX_SCHEDULE_STEPS``, see :func:`check_schedule`). Runs in the input dtype.

    Orientation: the same polynomial is applied as ``X (c_1 A + …)`` with ``A = XᵀX`` when ``X`` is
    held tall. On the CPU a batch of matrices runs tall (XLA's batched ``X Xᵀ`` is slow there: 24 ×
    (64, 768), 5 steps, 37 ms tall against 67 ms wide on 2 cores); a single matrix and every other
    platform run wide (one 1024 × 4096: 0.80 s wide against 1.02 s tall).
    """
    if x.ndim == 2:
        return _newton_schulz_oriented(x, schedule, wide=True)
    return jax.lax.platform_dependent(x, cpu=lambda x: _newton_schulz_oriented(x, schedule, wide=False),
                                      default=lambda x: _newton_schulz_oriented(x, schedule, wide=True))


def _newton_schulz_oriented(x, schedule, wide):
    """:func:`newton_schulz` with the short side first (``wide``) or last."""
    coeffs = schedule_array(schedule)
    flip = x.shape[-2] > x.shape[-1] if wide else x.shape[-2] < x.shape[-1]
    if flip:
        x = x.mT
    xc = x.astype(compute_dtype(x.dtype))
    xc = xc / max_abs(xc)
    short = x.shape[-2] if wide else x.shape[-1]
    eye = jnp.eye(short, dtype=x.dtype)
    degree = coeffs.shape[-1]
    gram = (lambda x: x @ x.mT) if wide else (lambda x: x.mT @ x)
    times = (lambda b, x: b @ x) if wide else (lambda b, x: x @ b)

    def gram_polynomial(a, c):
        """``c_1 A + c_2 A² + … + c_k A^k`` by Horner's rule."""
        b = c[-1] * a
        for j in range(degree - 2, 0, -1):
            b = (b + c[j] * eye) @ a
        return b

    def step(x, c):
        c = c.astype(x.dtype)
        if degree == 1:
            return c[0] * x, None
        return c[0] * x + times(gram_polynomial(gram(x), c), x), None

    if degree == 1 or xc.dtype != x.dtype:
        norm = jnp.sqrt(jnp.sum(xc * xc, axis=(-2, -1), keepdims=True))
        x = (xc / jnp.where(norm > 0, norm, 1)).astype(x.dtype)
        rest = coeffs
    else:  # first step on X/ν with ν = ‖X‖_F: c_0 X/ν + B(A/ν²) X/ν
        a = gram(xc)
        sq = jnp.trace(a, axis1=-2, axis2=-1)[..., None, None]  # ‖X‖_F² ∈ [1, mn], or 0
        nu = jnp.sqrt(jnp.where(sq > 0, sq, 1))
        c = coeffs[0].astype(x.dtype)
        x = (c[0] / nu) * xc + times(gram_polynomial(a / (nu * nu), c) / nu, xc)
        rest = coeffs[1:]
    x, _ = jax.lax.scan(step, x, rest, unroll=True if coeffs.shape[0] <= NS_UNROLL_STEPS else 1)
    return x.mT if flip else x


def spectral_sign(a, method, schedule):
    """``msign(A)`` by ``"newton_schulz"`` (with ``schedule``) or ``"svd"``."""
    if method == "svd":
        return msign_svd(a)
    return newton_schulz(a, schedule)


def spectral_sign_stacked(arrays, method, schedule):
    """:func:`spectral_sign` of several same-shape matrices in one batched call."""
    out = spectral_sign(jnp.stack(arrays), method, schedule)
    return tuple(out[i] for i in range(len(arrays)))


#: an output whose largest entry is below ``tiny · 2**(nmant − UNDERFLOW_BITS) = tiny / (16 eps)`` (of the dtype
#: it is computed in) counts as underflowed: entries flushed to zero (below ``tiny``) may then exceed ``16 eps``
#: of its largest
UNDERFLOW_BITS = 4


def underflow_limit(dtype):
    """The smallest largest-entry an output of ``dtype`` may have: below it, it counts as underflowed.

    ``tiny / (16 eps)`` of the compute dtype (XLA on the CPU flushes results below ``tiny`` to zero, so
    below this limit entries above ``16 eps`` of the largest may have been lost): about 6e-33 for float32
    and bfloat16, 7e-294 for float64. For float16 the smallest normal number, 6.1e-5: below it every entry
    is subnormal (absolute spacing ``2**-24``). That is the limit :func:`output_status` applies to an
    output without its own flag; :func:`pow2_unscale` decides a float16 output by its rounding error.
    """
    info, ci = jnp.finfo(dtype), jnp.finfo(compute_dtype(dtype))
    return max(float(info.tiny), float(ci.tiny) * 2.0 ** (ci.nmant - UNDERFLOW_BITS))


def underflow_reason(dtype):
    """What an underflow of an output of ``dtype`` means, for error messages (one phrase)."""
    info, ci = jnp.finfo(dtype), jnp.finfo(compute_dtype(dtype))
    if float(info.tiny) > float(ci.tiny) * 2.0 ** (ci.nmant - UNDERFLOW_BITS):
        return (f"it lies below the normal range of {info.dtype} (smallest normal {float(info.tiny):.3g}), where "
                f"rounding to subnormal numbers loses more than eps = {float(info.eps):.2g} of it")
    return (f"its largest entry is below {underflow_limit(dtype):.3g} = tiny/(16 eps) of {ci.dtype}, below which "
            f"entries flushed to zero are no longer negligible")


def pow2_unscale(x, n, dtype=None):
    """``(x · 2**n, lost)``: an output's mantissa scaled to its value; ``lost`` is True where it underflows.

    ``x · 2**n`` is formed in the compute dtype (the caller casts it to the output dtype ``dtype``, default
    ``x.dtype``). ``lost``: a nonzero matrix whose largest entry lands below ``tiny/(16 eps)`` of the
    compute dtype, decided from the exponents, so a result flushed to zero entirely is caught too; for a
    16-bit output also a matrix that rounding to ``dtype`` changes by more than ``eps`` of that dtype
    (Frobenius norm, relative; at most ``eps/2`` in the normal range, more only among the subnormals).
    ``n`` is an integer (int32) that broadcasts against ``x``'s matrices.
    """
    dtype = x.dtype if dtype is None else dtype
    ct = compute_dtype(x.dtype)
    xc = x.astype(ct)
    y = pow2_scale(xc, n)
    num, den = underflow_limit(ct).as_integer_ratio()  # a power of two: 2**limit
    limit = num.bit_length() - den.bit_length()
    unit, k = pow2_normalize(xc)
    lost = jnp.any(unit != 0, axis=(-2, -1), keepdims=True) & (n - k < limit)
    if jnp.dtype(dtype).itemsize < 4:
        top, k_y = pow2_normalize(y)  # the errors measured at unit scale (exact): no squares underflow
        err = pow2_scale(y.astype(dtype).astype(ct) - y, k_y)
        rounding = jnp.sum(err * err, axis=(-2, -1), keepdims=True)
        lost = lost | (rounding > float(jnp.finfo(dtype).eps) ** 2 * jnp.sum(top * top, axis=(-2, -1), keepdims=True))
    return y, jnp.any(lost)


def output_status(arrays, underflow=False, flagged=()):
    """``0``: every output is finite and representable; ``1``: one holds NaN/Inf; ``2``: one underflows.

    One reduction per output (``max|x|``, which propagates NaN). ``underflow``: the outputs' own flags from
    :func:`pow2_unscale`; ``flagged[i]`` is True for an output that has one. An output without its own flag
    underflows when it is nonzero with ``max|x|`` below :func:`underflow_limit` of its dtype (about 6e-33 in
    float32 and bfloat16, 7e-294 in float64, 6.1e-5 in float16): it may have lost entries that are not
    negligible next to its largest (and an output flushed to zero entirely is caught only by a flag).
    """
    bad, under = jnp.asarray(False), jnp.asarray(underflow)
    for i, a in enumerate(arrays):
        m = jnp.max(jnp.abs(a)) if a.size else jnp.zeros((), a.dtype)
        bad = bad | ~jnp.isfinite(m)
        if not (i < len(flagged) and flagged[i]):
            under = under | ((m > 0) & (m < underflow_limit(a.dtype)))
    return jnp.where(bad, 1, jnp.where(under, 2, 0)).astype(jnp.int32)


def nan_unless(ok, arrays):
    """``arrays`` where ``ok``, else all NaN.

    The emitted functions pass ``ok = output_status(outputs) == 0``: the inputs themselves are not
    scanned (that pass cost 1.9 ms of a 90 ms half-split update at 12 × (768, 64)). A NaN/Inf input
    still makes the whole result NaN, because every kernel spreads one over the whole matrix it
    computes (``x / max|x_ij|`` divides by NaN or Inf; LAPACK results are NaN where
    :func:`lapack_guard` failed), so each output computed from the input has a NaN. The test suite
    plants NaN and ±Inf in every input of every emitted function to hold this.
    """
    return tuple(jnp.where(ok, a, jnp.nan).astype(a.dtype) for a in arrays)


def raise_if_not_finite(function, status, arrays, caller=None):
    """After a call: raise ``ValueError`` naming the non-finite input, the overflow or the underflow.

    ``status`` is :func:`output_status`'s. Skipped when it is a tracer (under an outer ``jit`` or
    ``vmap`` nothing can be raised: the update is then all NaN, and LAPACK never sees a bad value).
    ``caller``: ``(public name, {argument: array})`` of a stored-layout entry point that called this
    function on arrays it built; the error then names that function and its own arguments.
    """
    if isinstance(status, jax.core.Tracer) or int(status) == 0:
        return
    if caller is not None:
        function, arrays = caller
    dtype = next(iter(arrays.values())).dtype
    for name, x in arrays.items():  # only after a failure: the inputs are scanned here, not in the update
        if not bool(jnp.all(jnp.isfinite(jnp.asarray(x)))):
            raise ValueError(f"{function}: {name} contains NaN or Inf")
    sizes = ", ".join(f"max|{name}| = {float(jnp.max(jnp.abs(jnp.asarray(x)), initial=0)):.3g}"
                      for name, x in arrays.items())
    if int(status) == 2:
        raise ValueError(f"{function}: the result underflows {dtype} ({underflow_reason(dtype)}) with {sizes}; "
                         f"make the result larger (scale the arguments, or a larger eps where there is one) "
                         f"or use a wider dtype")
    raise ValueError(f"{function}: the update overflowed to NaN/Inf in {dtype} although every input is finite "
                     f"({sizes}); use a wider dtype or a larger damping")


def check_schedule_length(function, schedule):
    """At most ``MAX_SCHEDULE_STEPS`` steps (an array's first axis, a tuple's or list's length; static under ``jit``)."""
    steps = len(schedule.shape) and schedule.shape[0] if hasattr(schedule, "shape") else (
        len(schedule) if isinstance(schedule, (tuple, list)) else 0)
    if steps > MAX_SCHEDULE_STEPS:
        raise ValueError(f"{function}: schedule has {steps} steps, more than MAX_SCHEDULE_STEPS = "
                         f"{MAX_SCHEDULE_STEPS}; a certified schedule needs far fewer (polar-express-5 has 5)")


def check_schedule(function, schedule):
    """A non-empty schedule of finite coefficients: a tuple of coefficient tuples or an array ``(steps, k+1)``.

    At most ``MAX_SCHEDULE_STEPS`` steps (checked under ``jit`` too: the length is static).
    """
    check_schedule_length(function, schedule)
    if isinstance(schedule, jax.core.Tracer):
        return
    if hasattr(schedule, "shape"):
        if len(schedule.shape) != 2 or 0 in schedule.shape or not jnp.issubdtype(schedule.dtype, jnp.floating):
            raise ValueError(f"{function}: schedule must be a float array of shape (steps, k+1), got shape "
                             f"{tuple(schedule.shape)} and dtype {schedule.dtype}")
        if not bool(jnp.all(jnp.isfinite(schedule))):
            raise ValueError(f"{function}: schedule contains NaN or Inf")
        return
    if not isinstance(schedule, (tuple, list)) or not schedule:
        raise TypeError(f"{function}: schedule must be a non-empty tuple of coefficient tuples or an array "
                        f"(steps, k+1), got {type(schedule).__name__}")
    for step in schedule:
        if not isinstance(step, (tuple, list)) or not step or not all(
                isinstance(c, (int, float)) and not isinstance(c, bool) and abs(c) < 1.7e308 for c in step):
            raise ValueError(f"{function}: each schedule step must be a tuple of finite floats "
                             f"(c_0, c_1, ...), got {step!r}")


def validate_inputs(function, shapes, arrays, eps, damping, method, schedule):
    """Check arguments before tracing; raise ``ValueError``/``TypeError`` naming the argument.

    ``shapes`` maps each argument name to its two trailing dimension names, e.g.
    ``{"W_Q": ("d", "d_h")}``; every dimension name must get one size, every argument the same
    leading (batch) shape and the same floating dtype, and ``d_h ≤ d``. Shapes and dtypes are
    checked under ``jit`` and ``vmap`` too (they are static); values (``eps``, ``damping``,
    finiteness) only outside them. A nonzero ``eps`` or ``damping`` outside the normal range of the
    compute dtype is refused (XLA on the CPU flushes a subnormal one to zero).
    """
    dtype = None
    for name in shapes:
        x = arrays[name]
        if not hasattr(x, "shape") or not hasattr(x, "dtype") or not hasattr(x, "ndim"):
            raise TypeError(f"{function}: {name} must be an array, got {type(x).__name__}; "
                            f"convert it with jnp.asarray({name})")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{function}: {name} must be real floating point, got dtype {x.dtype}")
        if x.dtype == jnp.float64 and not jax.config.jax_enable_x64:
            raise TypeError(f"{function}: {name} is float64 but JAX's x64 mode is off, so it would be computed "
                            f"and returned in float32; call jax.config.update('jax_enable_x64', True) first, "
                            f"or pass float32")
        if dtype is None:
            dtype = x.dtype
        elif x.dtype != dtype:
            raise TypeError(f"{function}: {name} has dtype {x.dtype} but earlier arguments have {dtype}; "
                            f"cast all inputs to one dtype")
    check_shapes(function, shapes, arrays)
    info = jnp.finfo(compute_dtype(dtype))
    for name, value in (("eps", eps), ("damping", damping)):
        if not isinstance(value, jax.core.Tracer):
            check_scalar(function, name, value)
            if float(value) != 0 and not float(info.tiny) <= float(value) <= float(info.max):
                raise ValueError(f"{function}: {name} = {value} is outside the normal range of {info.dtype} "
                                 f"[{float(info.tiny):.3g}, {float(info.max):.3g}], the dtype the update is computed "
                                 f"in; use 0 or a value in that range, or a wider dtype")
    if not isinstance(method, str) or method not in MSIGN_METHODS:
        raise ValueError(f"{function}: msign must be one of {MSIGN_METHODS}, got {method!r}")
    if method == "newton_schulz":
        check_schedule(function, schedule)
    else:  # the schedule is not used, but its length is capped whatever msign is
        check_schedule_length(function, schedule)


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


def require_arrays(function, arrays):
    """Arrays (``.shape``, ``.dtype``, ``.ndim``) of one floating dtype, with no zero-size matrix dimension.

    The stored-layout entry points call this first, so that errors name their own arguments: their
    adapters stack and concatenate the inputs, which would promote mixed dtypes silently, a width of 0
    would hold 0 heads, and the core functions would name their own (internal) arguments.
    """
    first = None
    for name, x in arrays.items():
        if not all(hasattr(x, a) for a in ("shape", "dtype", "ndim")):
            raise TypeError(f"{function}: {name} must be an array, got {type(x).__name__}; "
                            f"convert it with jnp.asarray({name})")
        if x.ndim >= 2 and 0 in x.shape[-2:]:
            raise ValueError(f"{function}: {name} has shape {tuple(x.shape)}, an empty matrix; both of its last "
                             f"two dimensions must be at least 1")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise TypeError(f"{function}: {name} must be real floating point, got dtype {x.dtype}")
        if x.dtype == jnp.float64 and not jax.config.jax_enable_x64:
            raise TypeError(f"{function}: {name} is float64 but JAX's x64 mode is off, so it would be computed "
                            f"and returned in float32; call jax.config.update('jax_enable_x64', True) first, "
                            f"or pass float32")
        if first is None:
            first = name
        elif x.dtype != arrays[first].dtype:
            raise TypeError(f"{function}: {name} has dtype {x.dtype} but {first} has {arrays[first].dtype}; "
                            f"cast all inputs to one dtype")


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


def split_heads(w, head_dim):
    """``(..., d, H·d_h) → (..., H, d, d_h)`` (heads are contiguous column blocks)."""
    d, width = w.shape[-2], w.shape[-1]
    return jnp.moveaxis(w.reshape(*w.shape[:-2], d, width // head_dim, head_dim), -2, -3)


def merge_heads(w):
    """``(..., H, d, d_h) → (..., d, H·d_h)``, the inverse of :func:`split_heads`."""
    w = jnp.moveaxis(w, -3, -2)
    return w.reshape(*w.shape[:-2], w.shape[-2] * w.shape[-1])


def block_right(x, blocks):
    """``X · blockdiag(C_1, …, C_k)`` for ``X: (..., d, k·c)`` and ``blocks: (..., k, c, c)``."""
    k, c = blocks.shape[-3], blocks.shape[-1]
    xb = x.reshape(*x.shape[:-1], k, c)
    out = jnp.einsum("...dkc,...kcj->...dkj", xb, blocks.astype(x.dtype))
    return out.reshape(x.shape)

