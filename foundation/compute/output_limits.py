"""When an emitted function's output counts as underflowed, and the one error for a result that is not representable.

Shared by the JAX and NumPy routines (:mod:`foundation.compute.jax_output_checks`,
:mod:`foundation.compute.numpy_exact_scaling`), so that both targets refuse the same results with the same
words. Plain Python, reading only a ``finfo`` (NumPy's or JAX's): inlined into standalone modules.

An output whose largest entry is below ``tiny · 2**(nmant − UNDERFLOW_BITS) = tiny/(16 eps)`` of the dtype
it is computed in counts as underflowed: entries below ``tiny`` (flushed to zero by XLA on the CPU, or
subnormal with few digits) may then exceed ``16 eps`` of its largest.
"""

#: an output whose largest entry is below ``tiny · 2**(nmant − UNDERFLOW_BITS) = tiny / (16 eps)`` (of the dtype
#: it is computed in) counts as underflowed: entries flushed to zero (below ``tiny``) may then exceed ``16 eps``
#: of its largest
UNDERFLOW_BITS = 4


def underflow_bound(info, compute):
    """The smallest largest-entry an output may have: ``max(tiny, tiny_c · 2**(nmant_c − UNDERFLOW_BITS))``.

    ``info`` and ``compute`` are the ``finfo`` of the output dtype and of the dtype it is computed in
    (``tiny_c/(16 eps_c)``: 6e-33 for float32, 7e-294 for float64; for float16 its smallest normal number).
    """
    return max(float(info.tiny), float(compute.tiny) * 2.0 ** (compute.nmant - UNDERFLOW_BITS))


def underflow_phrase(info, compute):
    """What an underflow of an output means (one phrase), for ``finfo`` ``info`` of the output and ``compute``."""
    if float(info.tiny) > float(compute.tiny) * 2.0 ** (compute.nmant - UNDERFLOW_BITS):
        return (f"it lies below the normal range of {info.dtype} (smallest normal {float(info.tiny):.3g}), where "
                f"rounding to subnormal numbers loses more than eps = {float(info.eps):.2g} of it")
    return (f"its largest entry is below {underflow_bound(info, compute):.3g} = tiny/(16 eps) of {compute.dtype}, "
            f"below which entries flushed to zero are no longer negligible")


def result_error(function, status, dtype, reason, sizes):
    """The message of a result that underflows (``status`` 2, ``reason`` from :func:`underflow_phrase`) or
    overflowed (any other nonzero status) in ``dtype`` although every input is finite; ``sizes``: the
    arguments' ``max|x|``, as text."""
    if status == 2:
        return (f"{function}: the result underflows {dtype} ({reason}) with {sizes}; make the result larger "
                f"(scale the arguments, or a larger eps where there is one) or use a wider dtype")
    return (f"{function}: the update overflowed to NaN/Inf in {dtype} although every input is finite ({sizes}); "
            f"use a wider dtype or a larger damping")
