"""JAX kernels: the one Newton–Schulz, damped Gram roots by eigh, SVD msign, input validation.

The emitted modules inline these functions verbatim (they import nothing but ``jax`` and
``jax.numpy``), so generated code and the validators run the same algorithms. Every kernel
batches over leading axes and keeps the input dtype; eigh and SVD run in at least float32.

Hostile values. No NaN or Inf ever reaches LAPACK (eigh, SVD, Schur): :func:`lapack_guard`
replaces every matrix that holds one by zeros before the call and turns that matrix's results
into NaN after it (a NaN or Inf in an SVD made jaxlib 0.10's ``dgesdd`` spin forever). This works
on traced values, so it holds under ``jit`` and ``vmap`` too. Every kernel spreads a NaN or Inf
over the whole matrix it computes, so the emitted functions check only their outputs (see
:func:`nan_unless`) and name the input when they run outside an outer transformation. Scales are taken out
before squaring (Gram matrices, Frobenius norms), so inputs anywhere in ``[1e-30, 1e30]`` neither
overflow nor underflow in float32.
"""

import jax
import jax.numpy as jnp

from .argcheck import check_group, check_scalar, check_shapes  # noqa: F401 (check_group: inlined by the printers)

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


UNROLL_LIMIT = 64  # matrices per batched LAPACK call that the CPU path unrolls into single calls


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
    if a.ndim == 2:
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


def gram_eigh(w, damping, side):
    """Eigenpairs of ``WᵀW + λI`` (``side="right"``) or ``WWᵀ + λI`` (``"left"``), as ``(e, V, s)``.

    The eigenvalues are ``s² e`` (ascending): ``W`` is divided by ``s = max(max|w_ij|, √λ)`` before
    the Gram matrix is formed, so ``WᵀW`` can neither overflow nor underflow (float32 weights of
    size 1e30 or 1e-30 work) and the damping ``λ/s² ≤ 1``. A matrix with NaN/Inf gives NaN pairs.
    """
    wc = w.astype(compute_dtype(w.dtype))
    lam = jnp.asarray(damping, wc.dtype)
    s = jnp.maximum(max_abs(wc), jnp.sqrt(lam))
    ws = wc / s
    g = ws.mT @ ws if side == "right" else ws @ ws.mT
    # exact symmetry matters: jax 0.10's CPU eigh never returned on a float32 Gram matrix
    # formed as Wᵀ W without it (seen in benchmarks/halfsplit.py)
    g = 0.5 * (g + g.mT) + (jnp.sqrt(lam) / s) ** 2 * jnp.eye(g.shape[-1], dtype=g.dtype)
    g, ok = lapack_guard(g)
    evals, evecs = per_matrix_on_cpu(jnp.linalg.eigh, g)
    nan = jnp.asarray(jnp.nan, g.dtype)
    return jnp.where(ok[..., 0], evals, nan), jnp.where(ok, evecs, nan), s


def gram_eigh_stacked(ws, damping, side):
    """:func:`gram_eigh` of several same-shape matrices in one batched call.

    One LAPACK call instead of several (fewer kernel launches; see :func:`per_matrix_on_cpu`).
    """
    evals, evecs, s = gram_eigh(jnp.stack(ws), damping, side)
    return tuple((evals[i], evecs[i], s[i]) for i in range(len(ws)))


def psd_power(eig, p, dtype):
    """``V diag(s² e)^p Vᵀ`` from :func:`gram_eigh`: a power of the damped Gram matrix.

    Negative powers are pseudo-inverse powers: eigenvalues at or below ``n·eps·max(e)`` (the
    numerical rank cut of ``numpy.linalg.matrix_rank``) map to 0. For an undamped rank-deficient
    partner this gives the minimum-norm solution of the derived problem (an update along the
    partner's null space leaves the product unchanged); a zero partner gives a zero update. With
    ``λ ≥ n·eps·‖W‖²`` the cut is never active.
    """
    evals, evecs, s = eig
    n = evals.shape[-1]
    cut = n * jnp.finfo(evals.dtype).eps * evals[..., -1:]
    if p < 0:
        kept = evals > cut
        powered = jnp.where(kept, jnp.where(kept, evals, 1) ** p, 0)
    else:
        powered = jnp.maximum(evals, 0) ** p
    return ((evecs * powered[..., None, :]) @ evecs.mT * s ** (2 * p)).astype(dtype)


def isotropic_scale(w, damping):
    """``c_W = (‖W‖_F² / d_h + λ)^{1/2}`` per matrix, shape ``(..., 1, 1)``, computed as ``s (‖W/s‖_F² / d_h + λ/s²)^{1/2}``.

    ``s = max(max|w_ij|, √λ)`` keeps the squares in range.
    """
    wc = w.astype(compute_dtype(w.dtype))
    lam = jnp.asarray(damping, wc.dtype)
    s = jnp.maximum(max_abs(wc), jnp.sqrt(lam))
    ws = wc / s
    sq = jnp.sum(ws * ws, axis=(-2, -1), keepdims=True)
    return (s * jnp.sqrt(sq / w.shape[-1] + (jnp.sqrt(lam) / s) ** 2)).astype(w.dtype)


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
    of one shape share one compilation. Runs in the input dtype.

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
    x, _ = jax.lax.scan(step, x, rest, unroll=True)
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


def all_finite(arrays):
    """One boolean: every entry of every array is finite (fuses with the producers under jit)."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in arrays]))


def nan_unless(ok, arrays):
    """``arrays`` where ``ok``, else all NaN.

    The emitted functions pass ``ok = all_finite(outputs)``: the inputs themselves are not scanned
    (that pass cost 1.9 ms of a 90 ms half-split update at 12 × (768, 64)). A NaN/Inf input still
    makes the whole result NaN, because every kernel spreads one over the whole matrix it computes
    (``x / max|x_ij|`` divides by NaN or Inf; LAPACK results are NaN where :func:`lapack_guard`
    failed), so each output computed from the input has a NaN. The test suite plants NaN and ±Inf
    in every input of every emitted function to hold this.
    """
    return tuple(jnp.where(ok, a, jnp.nan).astype(a.dtype) for a in arrays)


def raise_if_not_finite(function, finite, arrays):
    """After a call: raise ``ValueError`` naming the non-finite input, or the overflow.

    Skipped when ``finite`` is a tracer (under an outer ``jit`` or ``vmap`` nothing can be raised:
    the update is then all NaN for a NaN/Inf input, and LAPACK never sees the bad value).
    """
    if isinstance(finite, jax.core.Tracer) or bool(finite):
        return
    for name, x in arrays.items():  # only after a failure: the inputs are scanned here, not in the update
        if not bool(jnp.all(jnp.isfinite(x))):
            raise ValueError(f"{function}: {name} contains NaN or Inf")
    raise ValueError(f"{function}: the update overflowed to NaN/Inf in {next(iter(arrays.values())).dtype} "
                     f"although every input is finite; use a wider dtype or a larger damping")


def check_schedule(function, schedule):
    """A non-empty schedule of finite coefficients: a tuple of coefficient tuples or an array ``(steps, k+1)``."""
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
                isinstance(c, (int, float)) and not isinstance(c, bool) and abs(c) < float("inf") for c in step):
            raise ValueError(f"{function}: each schedule step must be a tuple of finite floats "
                             f"(c_0, c_1, ...), got {step!r}")


def validate_inputs(function, shapes, arrays, eps, damping, method, schedule):
    """Check arguments before tracing; raise ``ValueError``/``TypeError`` naming the argument.

    ``shapes`` maps each argument name to its two trailing dimension names, e.g.
    ``{"W_Q": ("d", "d_h")}``; every dimension name must get one size, every argument the same
    leading (batch) shape and the same floating dtype, and ``d_h ≤ d``. Shapes and dtypes are
    checked under ``jit`` and ``vmap`` too (they are static); values (``eps``, ``damping``,
    finiteness) only outside them.
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
    for name, value in (("eps", eps), ("damping", damping)):
        if not isinstance(value, jax.core.Tracer):
            check_scalar(function, name, value)
    if not isinstance(method, str) or method not in MSIGN_METHODS:
        raise ValueError(f"{function}: msign must be one of {MSIGN_METHODS}, got {method!r}")
    if method == "newton_schulz":
        check_schedule(function, schedule)


SYLVESTER_SOLVERS = ("structured", "dense")


def safe_ratio(num, den):
    """``num / den`` where ``den > 0``, else 0 (a direction with no extent and no damping)."""
    pos = den > 0
    return jnp.where(pos, num / jnp.where(pos, den, 1), 0)


def sylvester_factor_svd(w_q, w_k, damping, d):
    """Thin SVDs of both factors (one stacked call) with the shared scale of the Sylvester operator.

    Returns ``(U_Q, U_K, Vᵀ_Q, Vᵀ_K, r_Q, r_K, μ, m, ok)``: singular values ``s = m r`` with
    ``m = max(s_Q,max, s_K,max, √(2λ))`` and ``μ = 2λ/m²``, so every ratio below is formed from
    numbers in ``[0, 1]``; ``ok`` is False where a factor holds NaN/Inf (its results are NaN).
    """
    ct = compute_dtype(d.dtype)
    w = jnp.stack([w_q, w_k]).astype(ct)  # one stacked SVD
    scale = max_abs(w)
    w, ok = lapack_guard(w / scale)
    u, s, vt = per_matrix_on_cpu(lambda x: jnp.linalg.svd(x, full_matrices=False), w)
    s = s * scale[..., 0]
    root = jnp.sqrt(2 * jnp.asarray(damping, ct))
    m = jnp.maximum(jnp.maximum(s[0, ..., :1], s[1, ..., :1]), root)
    m = jnp.where(m > 0, m, 1)
    return u[0], u[1], vt[0], vt[1], s[0] / m, s[1] / m, (root / m) ** 2, m, ok[0] & ok[1]


def sylvester_products(w_q, w_k, damping, d, solver):
    """``(H W_K, Hᵀ W_Q)`` for ``(W_Q W_Qᵀ + λI) H + H (W_K W_Kᵀ + λI) = D``, ``λ > 0``.

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
    if solver == "dense":
        h = sylvester_dense(w_q, w_k, damping, d)
        return h @ w_k.astype(h.dtype), h.mT @ w_q.astype(h.dtype)
    uq, uk, vtq, vtk, rq, rk, mu, m, ok = sylvester_factor_svd(w_q, w_k, damping, d)
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
    return dq_out.astype(d.dtype), dk_out.astype(d.dtype)


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

    Both Grams are diagonalized by one stacked eigh: ``X = V_Q [(V_Qᵀ R V_K) / (α_i + β_j)] V_Kᵀ``
    with ``α = s_Q² e_Q``, ``β = s_K² e_K`` (scales of :func:`gram_eigh` taken out as ``m = max(s_Q, s_K)``);
    a pair with ``α_i + β_j = 0`` (undamped rank-deficient partners) gets 0, the minimum-norm solution.
    """
    (aq, vq, sq), (ak, vk, sk) = gram_eigh_stacked((w_q, w_k), damping, "right")
    m = jnp.maximum(sq, sk)
    alpha, beta = aq * (sq / m)[..., 0] ** 2, ak * (sk / m)[..., 0] ** 2
    rt = vq.mT @ (r.astype(vq.dtype) / m / m) @ vk
    den = alpha[..., :, None] + beta[..., None, :]
    return (vq @ safe_ratio(rt, den) @ vk.mT).astype(r.dtype)


def require_arrays(function, arrays):
    """Each value must already be an array (``.shape``, ``.dtype``, ``.ndim``); the error names it."""
    for name, x in arrays.items():
        if not all(hasattr(x, a) for a in ("shape", "dtype", "ndim")):
            raise TypeError(f"{function}: {name} must be an array, got {type(x).__name__}; "
                            f"convert it with jnp.asarray({name})")


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

