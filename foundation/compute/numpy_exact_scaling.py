"""Exact scaling by powers of two in NumPy, and the checks of an emitted NumPy function's outputs.

The float64 counterparts of :mod:`foundation.compute.jax_exact_scaling` and
:mod:`foundation.compute.jax_output_checks`, with the same names and signatures: both targets print the same
lines from one scaling plan (:mod:`derivations.printing.split_mode`), so a Gram root, an isotropic scale or a
scalar enters an output as its mantissa ``m`` and its power of two ``e`` (``x = m · 2**e``), argument groups
are brought near 1 before they are multiplied, and every output is scaled back once at the end
(:func:`pow2_unscale`). Multiplying by ``2**k`` (``np.ldexp``) changes only the exponent, so it is exact
whenever the result is a normal number; NumPy keeps subnormal numbers, so ``np.frexp`` reads their
exponents directly. A result that is not representable is refused as in the JAX target
(:func:`raise_if_not_finite`, the limit and words of :mod:`foundation.compute.output_limits`): its largest
entry below ``tiny/(16 eps) = 2**-974`` (about 6.3e-294), or an overflow to Inf. Everything is float64:
the ``dtype`` arguments of the shared signatures are accepted and not needed.
"""

import numpy as np

from foundation.compute.output_limits import result_error, underflow_bound, underflow_phrase


def pow2_scale(x, n):
    """``x · 2**n`` for integer ``n`` (broadcast): exact while the result is a normal number; past the largest
    exponent ``±Inf``, below the normal range rounded to a subnormal number or 0 (no warning)."""
    n = np.clip(np.asarray(n), -(1 << 20), 1 << 20).astype(np.int64)  # far past any exponent range
    with np.errstate(over="ignore", under="ignore"):
        return np.ldexp(np.asarray(x, dtype=np.float64), n)


def pow2_exponent(m):
    """``k`` (int64) with ``m · 2**k`` in ``[1, 2)`` for ``m > 0`` (read off ``np.frexp``, subnormals included);
    0 where ``m`` is 0 or not finite."""
    m = np.asarray(m, dtype=np.float64)
    return np.where((m > 0) & np.isfinite(m), 1 - np.frexp(m)[1], 0).astype(np.int64)


def pow2_normalize(a, axes=(-2, -1)):
    """``(a · 2**k, k)`` with ``max|a · 2**k|`` over ``axes`` in ``[1, 2)`` (``k`` keepdims), exactly; a zero
    matrix gets ``k = 0``."""
    a = np.asarray(a, dtype=np.float64)
    k = pow2_exponent(np.max(np.abs(a), axis=axes, keepdims=True) if axes else np.abs(a))
    return pow2_scale(a, k), k


def scale_group(arrays, damping, multiple):
    """``(arrays · 2**k, λ · 4**k, k)``: one group of an emitted function's arguments brought near 1, exactly.

    ``2**-k`` is about the largest ``max|x_ij|`` of the group's nonzero matrices, and of ``√λ`` unless
    ``damping`` is None (then ``None`` is returned for it); ``k`` (``(..., 1, 1)``) is rounded down to a
    multiple of ``multiple``, so that the outputs' powers of two are whole. As the JAX routine of the name.
    """
    never = np.iinfo(np.int32).max
    k = np.asarray(never, dtype=np.int64)
    for a in arrays:
        x, kx = pow2_normalize(a)
        k = np.minimum(k, np.where(np.any(x != 0, axis=(-2, -1), keepdims=True), kx, never))
    if damping is not None:
        root = np.sqrt(np.asarray(damping, dtype=np.float64))
        k = np.where(root > 0, np.minimum(k, pow2_exponent(root)), k)
    k = np.where(k == never, 0, k)
    k = np.floor_divide(k, multiple) * multiple
    lam = None if damping is None else pow2_scale(damping, 2 * k)
    return tuple(pow2_scale(a, k) for a in arrays), lam, k


def unit_scale(a, axes=(-2, -1)):
    """``a`` times the power of two that puts ``max|a|`` over ``axes`` in ``[1, 2)``, exactly: each factor of an
    ``msign`` argument, before the product is formed (``msign`` ignores a positive factor)."""
    return pow2_normalize(a, axes)[0]


def split_scalar(x, dtype=None):
    """``(m, e)`` with ``x = m · 2**e`` exactly, ``|m| ∈ [1, 2)`` (or 0): a scalar argument's mantissa and
    exponent (``eps = 1e300`` times a partner's tiny root cannot overflow before the last step)."""
    m, k = pow2_normalize(np.asarray(x, dtype=np.float64), axes=())
    return m, -k


def underflow_limit(dtype=np.float64):
    """The smallest largest-entry a float64 output may have: ``tiny/(16 eps)``, as in the JAX target."""
    return underflow_bound(np.finfo(np.float64), np.finfo(np.float64))


def underflow_reason(dtype=np.float64):
    """What an underflow of a float64 output means (one phrase, the JAX target's)."""
    return underflow_phrase(np.finfo(np.float64), np.finfo(np.float64))


def pow2_unscale(x, n, dtype=None):
    """``(x · 2**n, lost)``: an output's mantissa scaled to its value; ``lost`` is True when a nonzero matrix's
    largest entry lands below :func:`underflow_limit`, decided from the exponents (so a result rounded to
    zero entirely is caught too)."""
    x = np.asarray(x, dtype=np.float64)
    largest = np.max(np.abs(x), axis=(-2, -1), keepdims=True)
    limit = int(np.frexp(underflow_limit())[1]) - 1  # a power of two: 2**limit
    lost = (largest != 0) & (np.asarray(n) - pow2_exponent(largest) < limit)
    return pow2_scale(x, n), bool(np.any(lost))


def group_underflow(arrays):
    """True where a nonzero argument of one scaling group lies below :func:`underflow_limit` after
    :func:`scale_group`: arguments further apart than float64's digits, refused as in the JAX target (which
    would lose the smaller ones' entries to flushed subnormals), so that both targets refuse alike."""
    return any(bool(np.any((top != 0) & (top < underflow_limit())))
               for top in (np.max(np.abs(np.asarray(x, dtype=np.float64)), axis=(-2, -1)) for x in arrays))


def output_status(arrays, underflow=False, flagged=()):
    """``0``: every output finite and representable; ``1``: one holds NaN/Inf; ``2``: one underflows.

    ``underflow``: the outputs' own flags from :func:`pow2_unscale`; ``flagged[i]`` is True for an output that
    has one. An output without its own flag underflows when it is nonzero with ``max|x|`` below
    :func:`underflow_limit`.
    """
    bad, under = False, bool(underflow)
    for i, a in enumerate(arrays):
        m = float(np.max(np.abs(a))) if np.size(a) else 0.0
        bad = bad or not np.isfinite(m)
        if not (i < len(flagged) and flagged[i]):
            under = under or 0 < m < underflow_limit()
    return 1 if bad else 2 if under else 0


def raise_if_not_finite(function, status, arrays):
    """Raise ``ValueError`` for a nonzero :func:`output_status`: the non-finite input named, else the overflow or
    the underflow with the sizes of the arguments ``arrays`` (name -> array), in the JAX target's words."""
    if status == 0:
        return
    for name, x in arrays.items():
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{function}: {name} contains NaN or Inf")
    sizes = ", ".join(f"max|{name}| = {float(np.max(np.abs(x), initial=0)):.3g}" for name, x in arrays.items())
    raise ValueError(result_error(function, status, "float64", underflow_reason(), sizes))
