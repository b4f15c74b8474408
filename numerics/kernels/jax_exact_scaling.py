"""Exact scaling by powers of two: how the JAX kernels keep every number in range.

A float is ``m · 2**e``; multiplying it by ``2**k`` changes only ``e``, so it is exact whenever the
result is a normal number. XLA on the CPU flushes subnormal numbers to zero, operands included, so
inputs are scaled by exact powers of two read off their bits (:func:`pow2_normalize`, exact for
subnormal entries too) before anything is squared or multiplied. The Gram roots and isotropic
scales carry their power of two apart and apply it last, each factor of an msign argument is
unit-scaled (:func:`unit_scale`: ``msign`` ignores positive factors), rules without msign scale
argument groups and their outputs (:func:`scale_group`), and scalar arguments enter as mantissa and
exponent (:func:`split_scalar`). Every kernel batches over leading axes; eigh and SVD run in at
least float32 (:func:`compute_dtype`). The emitted modules inline these functions verbatim
(:mod:`derivations.printing.codegen`), so they import nothing but ``jax``.
"""

import jax
import jax.numpy as jnp


def compute_dtype(dtype):
    """Float32 for 16-bit inputs (eigh and SVD have no 16-bit kernels), else the dtype itself."""
    return jnp.float32 if jnp.dtype(dtype).itemsize < 4 else dtype


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


def split_scalar(x, dtype):
    """``(m, e)`` with ``x = m · 2**e`` exactly, ``|m| ∈ [1, 2)`` (or 0), ``m`` in the compute dtype of ``dtype``.

    A scalar argument (``eps``, ``group_size``) enters an output as its mantissa; its power of two joins the
    output's exponent (:func:`pow2_unscale`), so ``eps = 1e-38`` times a partner's small root cannot flush
    the update to zero unnoticed.
    """
    m, k = pow2_normalize(jnp.asarray(x, compute_dtype(dtype)), axes=())
    return m, -k
