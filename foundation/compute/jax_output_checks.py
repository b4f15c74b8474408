"""The outputs of an emitted JAX function: scaled back, and checked for NaN, overflow and underflow.

An output leaves the computation as a mantissa ``X`` and a power of two ``e`` (the inputs were scaled
exactly, :mod:`foundation.compute.jax_exact_scaling`); :func:`pow2_unscale` forms ``X · 2**e`` and flags
it as underflowed, from the exponents, when its largest entry lands below ``tiny/(16 eps)`` of the
compute dtype (below that, entries flushed to zero by XLA on the CPU are no longer negligible next to
the largest; for 16-bit outputs also when rounding to the dtype loses more than ``eps``). So a result
is right whenever it and the roots are representable; otherwise :func:`output_status` says which,
:func:`nan_unless` makes the whole update NaN, and :func:`raise_if_not_finite` raises one clear error
naming the input, the overflow or the underflow. Inputs are not scanned: every routine spreads a NaN or
Inf over the whole matrix it computes, so checking the outputs suffices. The limit and the error's words are
the NumPy target's too (:mod:`foundation.compute.output_limits`). Inlined verbatim into the emitted modules.
"""

import jax
import jax.numpy as jnp

from foundation.compute.jax_exact_scaling import (
    compute_dtype,
    exponent_fields,
    max_exponent,
    pow2_normalize,
    pow2_scale,
)
from foundation.compute.output_limits import result_error, underflow_bound, underflow_phrase


def underflow_limit(dtype):
    """The smallest largest-entry an output of ``dtype`` may have: below it, it counts as underflowed.

    ``tiny / (16 eps)`` of the compute dtype (XLA on the CPU flushes results below ``tiny`` to zero, so
    below this limit entries above ``16 eps`` of the largest may have been lost): about 6e-33 for float32
    and bfloat16, 7e-294 for float64. For float16 the smallest normal number, 6.1e-5: below it every entry
    is subnormal (absolute spacing ``2**-24``). That is the limit :func:`output_status` applies to an
    output without its own flag; :func:`pow2_unscale` decides a float16 output by its rounding error.
    """
    return underflow_bound(jnp.finfo(dtype), jnp.finfo(compute_dtype(dtype)))


def underflow_reason(dtype):
    """What an underflow of an output of ``dtype`` means, for error messages (one phrase)."""
    return underflow_phrase(jnp.finfo(dtype), jnp.finfo(compute_dtype(dtype)))


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
    k, largest = max_exponent(exponent_fields(xc)[1], ct)  # the exponent of max|x| alone: nothing is rescaled
    lost = (largest != 0) & (n - k < limit)
    if jnp.dtype(dtype).itemsize < 4:
        top, k_y = pow2_normalize(y)  # the errors measured at unit scale (exact): no squares underflow
        err = pow2_scale(y.astype(dtype).astype(ct) - y, k_y)
        rounding = jnp.sum(err * err, axis=(-2, -1), keepdims=True)
        lost = lost | (rounding > float(jnp.finfo(dtype).eps) ** 2 * jnp.sum(top * top, axis=(-2, -1), keepdims=True))
    return y, jnp.any(lost)


def group_underflow(arrays):
    """True where a nonzero argument of one scaling group lies below :func:`underflow_limit` of its dtype after
    :func:`~foundation.compute.jax_exact_scaling.scale_group` brought the group's largest near 1: arguments
    further apart than the dtype's digits (a gradient of 1e37 beside weights of 1 in float32), whose smaller ones
    then lose entries to the subnormals XLA on the CPU flushes, and would give a wrong result without an error.
    Decided from the exponent bits (a flushed subnormal maximum is still seen)."""
    lost = jnp.asarray(False)
    for x in arrays:
        ct = compute_dtype(x.dtype)
        num, den = underflow_limit(x.dtype).as_integer_ratio()  # a power of two: 2**limit
        k, largest = max_exponent(exponent_fields(x.astype(ct))[1], ct)
        lost = lost | jnp.any((largest != 0) & (-k < num.bit_length() - den.bit_length()))
    return lost


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
    still makes the whole result NaN, because every routine spreads one over the whole matrix it
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
    raise ValueError(result_error(function, int(status), dtype, underflow_reason(dtype), sizes))
