"""Exact scaling by powers of two: how the JAX routines keep every number in range.

A float is ``m · 2**e``; multiplying it by ``2**k`` changes only ``e``, so it is exact whenever the
result is a normal number. XLA on the CPU flushes subnormal numbers to zero, operands included, so
inputs are scaled by exact powers of two read off their bits (:func:`pow2_normalize`, exact for
subnormal entries too) before anything is squared or multiplied. The Gram roots and isotropic
scales carry their power of two apart and apply it last, each factor of an msign argument is
unit-scaled (:func:`unit_scale`: ``msign`` ignores positive factors), rules without msign scale
argument groups and their outputs (:func:`scale_group`), and scalar arguments enter as mantissa and
exponent (:func:`split_scalar`). Every routine batches over leading axes; eigh and SVD run in at
least float32 (:func:`compute_dtype`). Standalone emitted modules inline these functions verbatim
(:mod:`derivations.printing.codegen`), so they import nothing but ``jax``.
"""

import jax
import jax.numpy as jnp


def compute_dtype(dtype):
    """Float32 for 16-bit inputs (eigh and SVD have no 16-bit implementations), else the dtype itself."""
    return jnp.float32 if jnp.dtype(dtype).itemsize < 4 else dtype


def max_abs(a):
    """``max |a_ij|`` per matrix, shape ``(..., 1, 1)``, with 1 in place of 0 (a safe divisor)."""
    m = jnp.max(jnp.abs(a), axis=(-2, -1), keepdims=True)
    return jnp.where(m > 0, m, jnp.ones_like(m))


def float_layout(dtype):
    """``(integer dtype of the same width, mantissa bits, exponent bias)`` of a float dtype."""
    info = jnp.finfo(dtype)
    return {16: jnp.int16, 32: jnp.int32, 64: jnp.int64}[info.bits], info.nmant, info.maxexp - 1


def typed(value, like):
    """``value`` as a scalar of ``like``'s dtype: ``jax.lax`` operations broadcast a scalar operand, but do not
    promote one of another dtype."""
    return jnp.dtype(like.dtype).type(value)


def exponent_fields(x):
    """``(bits, magnitude, field)`` of float ``x`` as integers of its width: the bits, the bits without the
    sign (ordered as ``|x|``) and the biased exponent field (0 for zeros and subnormals, all ones for NaN/Inf).

    The bit-level routines here use ``jax.lax`` directly: ``jnp``'s wrappers trace through a ``jit`` of their
    own per new shape (about 10 ms per :func:`pow2_normalize` of a new shape against 2 ms), which made these
    few integer operations a third of the time to trace an optimizer step.
    """
    it, nmant, _ = float_layout(x.dtype)
    bits = jax.lax.bitcast_convert_type(x, it)
    mag = jax.lax.bitwise_and(bits, typed(jnp.iinfo(it).max, bits))
    return bits, mag, jax.lax.shift_right_logical(mag, typed(nmant, mag))


def with_exponent(bits, field, mantissa, dtype):
    """The float of ``dtype`` with the sign of ``bits``, biased exponent ``field`` (any integer) and ``mantissa``
    bits: ``±0`` where ``field <= 0`` (below the normal range), ``±Inf`` where it is past the largest exponent."""
    it, nmant, bias = float_layout(dtype)
    top = 2 * bias + 1  # the all-ones field of Inf and NaN
    field = jnp.broadcast_to(field, bits.shape)
    clipped = jax.lax.convert_element_type(jax.lax.clamp(typed(0, field), field, typed(top, field)), it)
    mantissa = jax.lax.select(jax.lax.ge(field, typed(top, field)), jnp.zeros_like(mantissa), mantissa)
    mag = jax.lax.bitwise_or(jax.lax.shift_left(clipped, typed(nmant, clipped)), mantissa)
    mag = jax.lax.select(jax.lax.le(field, typed(0, field)), jnp.zeros_like(mag), mag)
    sign = jax.lax.bitwise_and(bits, typed(jnp.iinfo(it).min, bits))
    return jax.lax.bitcast_convert_type(jax.lax.bitwise_or(mag, sign), dtype)


def exponent_dtype(dtype):
    """The integer dtype exponent arithmetic runs in: int64 for float64, int32 otherwise (no 16-bit overflow)."""
    return jnp.int64 if jnp.dtype(dtype).itemsize == 8 else jnp.int32


def pow2_scale(x, n):
    """``x · 2**n`` for integer ``n`` (broadcast), exact whenever ``x`` and the result are normal numbers.

    Computed on the bits: ``n`` is added to the exponent field, the mantissa kept, so nothing is multiplied
    and no partial product can over- or underflow, whatever ``n``. A result past the largest exponent is
    ``±Inf``; one below the normal range is ``±0``, as is a zero or subnormal ``x`` (XLA on the CPU flushes
    subnormal numbers to zero; here every platform gets that answer); NaN and ``±Inf`` stay as they are.
    """
    x, n = jnp.asarray(x), jnp.asarray(n)
    shape = jnp.broadcast_shapes(x.shape, n.shape)
    x, n = jnp.broadcast_to(x, shape), jnp.broadcast_to(n, shape)
    _, nmant, bias = float_layout(x.dtype)
    bits, mag, field = exponent_fields(x)
    wide = exponent_dtype(x.dtype)
    reach = 1 << 20  # far past any exponent range
    shift = jax.lax.convert_element_type(jax.lax.clamp(typed(-reach, n), n, typed(reach, n)), wide)
    wide_field = jax.lax.convert_element_type(field, wide)
    mantissa = jax.lax.bitwise_and(mag, typed((1 << nmant) - 1, mag))
    moved = jax.lax.select(jax.lax.eq(wide_field, typed(0, wide_field)), wide_field,
                           jax.lax.add(wide_field, shift))
    special = jax.lax.eq(field, typed(2 * bias + 1, field))  # NaN and ±Inf
    return jax.lax.select(special, x, with_exponent(bits, moved, mantissa, x.dtype))


def max_exponent(mag, dtype, axes=(-2, -1)):
    """``(k, top)``: ``top`` the largest of the magnitudes ``mag`` (:func:`exponent_fields` of a ``dtype`` array)
    over ``axes`` (keepdims), ``k`` (int32) the power of two with ``max|x| · 2**k`` in ``[1, 2)``, read off
    ``top``'s bits (a subnormal maximum through its mantissa converted exactly); ``k = 0`` for a zero or
    non-finite maximum."""
    it, nmant, bias = float_layout(dtype)
    axes = tuple(a % mag.ndim for a in axes)
    top = jax.lax.expand_dims(jax.lax.reduce_max(mag, axes), axes) if axes else mag
    top_field = jax.lax.shift_right_logical(top, typed(nmant, top))  # 0 for a subnormal maximum
    sub = jax.lax.shift_right_logical(jax.lax.bitcast_convert_type(jax.lax.convert_element_type(top, dtype), it),
                                      typed(nmant, top))  # the exponent of float(mantissa)
    e = jax.lax.select(jax.lax.gt(top_field, typed(0, top)), jax.lax.sub(top_field, typed(bias, top)),
                   jax.lax.sub(sub, typed(2 * bias - 1 + nmant, top)))
    none = jax.lax.bitwise_or(jax.lax.eq(top, typed(0, top)), jax.lax.ge(top_field, typed(2 * bias + 1, top)))
    return jax.lax.convert_element_type(jax.lax.select(none, jnp.zeros_like(e), jax.lax.neg(e)), jnp.int32), top


def pow2_normalize(a, axes=(-2, -1)):
    """``(a · 2**k, k)`` with ``max|a · 2**k|`` in ``[1, 2)`` over ``axes`` (``k`` int32, keepdims), exact.

    In the compute dtype (float32 for 16-bit inputs). Exact also for subnormal entries: XLA on the
    CPU flushes subnormal operands to zero (float32 entries below 1.2e-38, float64 below 2.2e-308),
    so everything is done on the bits: the exponent of ``max|a|`` is read off them, each entry's
    exponent field is moved by ``k`` and its mantissa kept, and a subnormal entry is first rebuilt as
    its integer mantissa (converted exactly) times ``2**(1 − bias − nmant)``. Entries that land below
    the normal range (below ``2**-126`` of the largest in float32) become 0. A zero matrix gets ``k = 0``;
    a matrix with NaN/Inf becomes all NaN (``k = 0``), so the non-finite value reaches every result
    computed from it.
    """
    ct = compute_dtype(a.dtype)
    x = jax.lax.convert_element_type(a, ct)
    it, nmant, bias = float_layout(ct)
    bits, mag, field = exponent_fields(x)
    k, top = max_exponent(mag, ct, axes)
    bad = jax.lax.ge(jax.lax.shift_right_logical(top, typed(nmant, top)), typed(2 * bias + 1, top))  # NaN/Inf
    rebuilt = jax.lax.bitcast_convert_type(jax.lax.convert_element_type(mag, ct), it)  # a subnormal's mantissa, exact
    normal = jax.lax.gt(field, typed(0, field))
    rebuilt_field = jax.lax.shift_right_logical(rebuilt, typed(nmant, rebuilt))
    entry_field = jax.lax.select(normal, field, jax.lax.add(rebuilt_field, typed(1 - bias - nmant, rebuilt)))
    mantissa = jax.lax.bitwise_and(jax.lax.select(normal, mag, rebuilt), typed((1 << nmant) - 1, mag))
    moved = jax.lax.add(entry_field, jnp.broadcast_to(jax.lax.convert_element_type(k, it), entry_field.shape))
    moved = jax.lax.select(jax.lax.eq(mag, typed(0, mag)), jnp.zeros_like(moved), moved)
    out = with_exponent(bits, moved, mantissa, ct)
    return jax.lax.select(jnp.broadcast_to(bad, out.shape), jax.lax.full(out.shape, jnp.nan, ct), out), k


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
