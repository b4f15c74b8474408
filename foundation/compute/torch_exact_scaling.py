"""Exact scaling by powers of two in PyTorch: the routines of :mod:`foundation.compute.jax_exact_scaling`, one to one.

A float is ``m · 2**e``; multiplying it by ``2**k`` changes only ``e``, so it is exact whenever the
result is a normal number. The routines here work on the bits (``Tensor.view`` of the integer dtype of
the same width), as the JAX ones do, so both targets give the same answers, subnormal entries included:
a result below the normal range is ``±0`` on every device, as on XLA's CPU. Every routine batches over
leading axes; eigh and SVD run in at least float32 (:func:`compute_dtype`). Standalone emitted modules
inline these functions verbatim, so they import nothing but ``torch``.
"""

import torch


def compute_dtype(dtype):
    """Float32 for 16-bit inputs (the linear algebra runs in at least float32), else the dtype itself."""
    return torch.float32 if dtype.itemsize < 4 else dtype


def max_abs(a):
    """``max |a_ij|`` per matrix, shape ``(..., 1, 1)``, with 1 in place of 0 (a safe divisor)."""
    m = a.abs().amax(dim=(-2, -1), keepdim=True)
    return torch.where(m > 0, m, torch.ones_like(m))


def float_layout(dtype):
    """``(integer dtype of the same width, mantissa bits, exponent bias)`` of a float dtype (read off its finfo:
    ``eps = 2**-nmant``, ``max < 2**(bias + 1)``)."""
    info = torch.finfo(dtype)
    nmant = int(1 / info.eps).bit_length() - 1
    bias = int(info.max).bit_length() - 1
    return {16: torch.int16, 32: torch.int32, 64: torch.int64}[info.bits], nmant, bias


def exponent_fields(x):
    """``(bits, magnitude, field)`` of float ``x`` as integers of its width: the bits, the bits without the
    sign (ordered as ``|x|``) and the biased exponent field (0 for zeros and subnormals, all ones for NaN/Inf)."""
    it, nmant, _ = float_layout(x.dtype)
    bits = x.view(it)
    mag = bits & torch.iinfo(it).max
    return bits, mag, mag >> nmant


def with_exponent(bits, field, mantissa, dtype):
    """The float of ``dtype`` with the sign of ``bits``, biased exponent ``field`` (any integer) and ``mantissa``
    bits: ``±0`` where ``field <= 0`` (below the normal range), ``±Inf`` where it is past the largest exponent."""
    it, nmant, bias = float_layout(dtype)
    top = 2 * bias + 1  # the all-ones field of Inf and NaN
    field = field.expand(bits.shape)
    clipped = field.clamp(0, top).to(it)
    mantissa = torch.where(field >= top, torch.zeros_like(mantissa), mantissa)
    mag = (clipped << nmant) | mantissa
    mag = torch.where(field <= 0, torch.zeros_like(mag), mag)
    sign = bits & torch.iinfo(it).min
    return (mag | sign).view(dtype)


def exponent_dtype(dtype):
    """The integer dtype exponent arithmetic runs in: int64 for float64, int32 otherwise (no 16-bit overflow)."""
    return torch.int64 if dtype.itemsize == 8 else torch.int32


def pow2_scale(x, n):
    """``x · 2**n`` for integer ``n`` (broadcast), exact whenever ``x`` and the result are normal numbers.

    On the bits: ``n`` is added to the exponent field, the mantissa kept, so nothing is multiplied and
    nothing over- or underflows on the way. A result past the largest exponent is ``±Inf``; one below the
    normal range is ``±0``, as is a zero or subnormal ``x``; NaN and ``±Inf`` stay as they are.
    """
    n = torch.as_tensor(n, device=x.device)
    shape = torch.broadcast_shapes(x.shape, n.shape)
    x, n = x.expand(shape).contiguous(), n.expand(shape)
    _, nmant, bias = float_layout(x.dtype)
    bits, mag, field = exponent_fields(x)
    wide = exponent_dtype(x.dtype)
    reach = 1 << 20  # far past any exponent range
    shift = n.clamp(-reach, reach).to(wide)
    wide_field = field.to(wide)
    mantissa = mag & ((1 << nmant) - 1)
    moved = torch.where(wide_field == 0, wide_field, wide_field + shift)
    special = field == 2 * bias + 1  # NaN and ±Inf
    return torch.where(special, x, with_exponent(bits, moved, mantissa, x.dtype))


def max_exponent(mag, dtype, axes=(-2, -1)):
    """``(k, top)``: ``top`` the largest of the magnitudes ``mag`` (:func:`exponent_fields` of a ``dtype`` array)
    over ``axes`` (keepdim), ``k`` (int32) the power of two with ``max|x| · 2**k`` in ``[1, 2)``, read off
    ``top``'s bits (a subnormal maximum through its mantissa converted exactly); ``k = 0`` for a zero or
    non-finite maximum."""
    it, nmant, bias = float_layout(dtype)
    top = mag.amax(dim=axes, keepdim=True) if axes else mag
    top_field = top >> nmant  # 0 for a subnormal maximum
    sub = top.to(dtype).view(it) >> nmant  # the exponent of float(mantissa)
    e = torch.where(top_field > 0, top_field - bias, sub - (2 * bias - 1 + nmant))
    none = (top == 0) | (top_field >= 2 * bias + 1)
    return torch.where(none, torch.zeros_like(e), -e).to(torch.int32), top


def pow2_normalize(a, axes=(-2, -1)):
    """``(a · 2**k, k)`` with ``max|a · 2**k|`` in ``[1, 2)`` over ``axes`` (``k`` int32, keepdim), exact.

    In the compute dtype (float32 for 16-bit inputs), on the bits: the exponent of ``max|a|`` is read off
    them, each entry's exponent field is moved by ``k`` and its mantissa kept, and a subnormal entry is
    first rebuilt as its integer mantissa (converted exactly) times ``2**(1 − bias − nmant)``. Entries
    that land below the normal range become 0. A zero matrix gets ``k = 0``; a matrix with NaN/Inf
    becomes all NaN (``k = 0``), so the non-finite value reaches every result computed from it.
    """
    ct = compute_dtype(a.dtype)
    x = a.to(ct).contiguous()
    it, nmant, bias = float_layout(ct)
    bits, mag, field = exponent_fields(x)
    k, top = max_exponent(mag, ct, axes)
    bad = (top >> nmant) >= 2 * bias + 1  # NaN/Inf
    rebuilt = mag.to(ct).view(it)  # a subnormal's mantissa, exact
    normal = field > 0
    entry_field = torch.where(normal, field, (rebuilt >> nmant) + (1 - bias - nmant))
    mantissa = torch.where(normal, mag, rebuilt) & ((1 << nmant) - 1)
    moved = entry_field + k.to(it)
    moved = torch.where(mag == 0, torch.zeros_like(moved), moved)
    out = with_exponent(bits, moved, mantissa, ct)
    return torch.where(bad, torch.full_like(out, float("nan")), out), k


def scale_group(arrays, damping, multiple):
    """``(arrays · 2**k, λ · 4**k, k)``: one group of an emitted function's arguments brought near 1, exactly.

    ``2**-k`` is about the largest ``max|x_ij|`` of the group's nonzero matrices, and of ``√λ`` unless
    ``damping`` is None (then ``None`` is returned for it); ``k`` (int32, ``(..., 1, 1)``) is rounded
    down to a multiple of ``multiple`` so that the outputs' powers of two are whole.
    """
    never = torch.iinfo(torch.int32).max
    scaled, ks = zip(*(pow2_normalize(a) for a in arrays), strict=True)
    k = torch.tensor(never, dtype=torch.int32)
    for x, kx in zip(scaled, ks, strict=True):
        nonzero = (x != 0).any(dim=-1, keepdim=True).any(dim=-2, keepdim=True)
        k = torch.minimum(k, torch.where(nonzero, kx, never))
    if damping is not None:
        root = torch.sqrt(torch.as_tensor(damping, dtype=scaled[0].dtype))
        _, k_root = pow2_normalize(root, axes=())
        k = torch.where(root > 0, torch.minimum(k, k_root), k)
    k = torch.where(k == never, 0, k)
    k = torch.div(k, multiple, rounding_mode="floor") * multiple
    out = tuple(pow2_scale(x, k - kx).to(a.dtype) for x, kx, a in zip(scaled, ks, arrays, strict=True))
    lam = None if damping is None else pow2_scale(torch.as_tensor(damping, dtype=scaled[0].dtype), 2 * k)
    return out, lam, k


def unit_scale(a, axes=(-2, -1)):
    """``a`` times the power of two that puts ``max|a|`` over ``axes`` in ``[1, 2)``; same dtype, exact.

    ``msign`` ignores a positive factor, so each factor of an msign argument is unit-scaled before the
    product is formed: neither the product nor its terms can over- or underflow.
    """
    return pow2_normalize(a, axes)[0].to(a.dtype)


def split_scalar(x, dtype):
    """``(m, e)`` with ``x = m · 2**e`` exactly, ``|m| ∈ [1, 2)`` (or 0), ``m`` in the compute dtype of ``dtype``."""
    m, k = pow2_normalize(torch.as_tensor(x, dtype=compute_dtype(dtype)), axes=())
    return m, -k
