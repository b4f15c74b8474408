"""The outputs of an emitted PyTorch function: scaled back, and checked for NaN, overflow and underflow.

:mod:`foundation.compute.jax_output_checks`, one to one: :func:`pow2_unscale` forms ``X · 2**e`` and flags it
as underflowed, from the exponents, when its largest entry lands below ``tiny/(16 eps)`` of the compute dtype
(for 16-bit outputs also when rounding to the dtype loses more than ``eps``); :func:`output_status` says
whether an output is NaN/Inf or underflows, :func:`nan_unless` makes the whole update NaN, and
:func:`raise_if_not_finite` raises one clear error naming the input, the overflow or the underflow. The
limit and the words are :mod:`foundation.compute.output_limits`' (``torch.finfo`` has no ``nmant``: the
mantissa width is read off ``eps``). Inlined verbatim into the emitted modules.
"""

import torch

from foundation.compute.output_limits import UNDERFLOW_BITS, result_error
from foundation.compute.torch_exact_scaling import (
    compute_dtype,
    exponent_fields,
    float_layout,
    max_exponent,
    pow2_normalize,
    pow2_scale,
)


def underflow_limit(dtype):
    """The smallest largest-entry an output of ``dtype`` may have: ``max(tiny, tiny_c · 2**(nmant_c − 4))`` with
    ``_c`` the compute dtype (6e-33 for float32 and bfloat16, 7e-294 for float64, 6.1e-5 for float16)."""
    info, compute = torch.finfo(dtype), torch.finfo(compute_dtype(dtype))
    return max(float(info.tiny), float(compute.tiny) * 2.0 ** (float_layout(compute_dtype(dtype))[1] - UNDERFLOW_BITS))


def underflow_reason(dtype):
    """What an underflow of an output of ``dtype`` means, for error messages (one phrase)."""
    info, compute = torch.finfo(dtype), torch.finfo(compute_dtype(dtype))
    if float(info.tiny) > float(compute.tiny) * 2.0 ** (float_layout(compute_dtype(dtype))[1] - UNDERFLOW_BITS):
        return (f"it lies below the normal range of {info.dtype} (smallest normal {float(info.tiny):.3g}), where "
                f"rounding to subnormal numbers loses more than eps = {float(info.eps):.2g} of it")
    return (f"its largest entry is below {underflow_limit(dtype):.3g} = tiny/(16 eps) of {compute.dtype}, "
            f"below which entries flushed to zero are no longer negligible")


def pow2_unscale(x, n, dtype=None):
    """``(x · 2**n, lost)``: an output's mantissa scaled to its value; ``lost`` is True where it underflows.

    Formed in the compute dtype (the caller casts it to ``dtype``). ``lost``: a nonzero matrix whose largest
    entry lands below :func:`underflow_limit`, decided from the exponents; for a 16-bit output also a matrix
    that rounding to ``dtype`` changes by more than ``eps`` of that dtype (Frobenius norm, relative).
    """
    dtype = x.dtype if dtype is None else dtype
    ct = compute_dtype(x.dtype)
    xc = x.to(ct)
    y = pow2_scale(xc, n)
    num, den = underflow_limit(ct).as_integer_ratio()  # a power of two: 2**limit
    limit = num.bit_length() - den.bit_length()
    k, largest = max_exponent(exponent_fields(xc.contiguous())[1], ct)  # the exponent of max|x| alone
    lost = (largest != 0) & (n - k < limit)
    if dtype.itemsize < 4:
        top, k_y = pow2_normalize(y)  # the errors measured at unit scale (exact): no squares underflow
        err = pow2_scale(y.to(dtype).to(ct) - y, k_y)
        rounding = (err * err).sum(dim=(-2, -1), keepdim=True)
        lost = lost | (rounding > torch.finfo(dtype).eps ** 2 * (top * top).sum(dim=(-2, -1), keepdim=True))
    return y, torch.any(lost)


def group_underflow(arrays):
    """True where a nonzero argument of one scaling group lies below :func:`underflow_limit` of its dtype after
    ``scale_group`` brought the group's largest near 1 (arguments further apart than the dtype's digits),
    decided from the exponent bits."""
    lost = torch.tensor(False)
    for x in arrays:
        ct = compute_dtype(x.dtype)
        num, den = underflow_limit(x.dtype).as_integer_ratio()  # a power of two: 2**limit
        k, largest = max_exponent(exponent_fields(x.to(ct).contiguous())[1], ct)
        lost = lost | torch.any((largest != 0) & (-k < num.bit_length() - den.bit_length()))
    return lost


def output_status(arrays, underflow=False, flagged=()):
    """``0``: every output is finite and representable; ``1``: one holds NaN/Inf; ``2``: one underflows.

    ``underflow``: the outputs' own flags from :func:`pow2_unscale`; ``flagged[i]`` is True for an output that
    has one. An output without its own flag underflows when it is nonzero with ``max|x|`` below
    :func:`underflow_limit` of its dtype.
    """
    bad, under = torch.tensor(False), torch.as_tensor(underflow)
    for i, a in enumerate(arrays):
        m = a.abs().max() if a.numel() else torch.zeros((), dtype=a.dtype)
        bad = bad | ~torch.isfinite(m)
        if not (i < len(flagged) and flagged[i]):
            under = under | ((m > 0) & (m < underflow_limit(a.dtype)))
    return torch.where(bad, 1, torch.where(under, 2, 0)).to(torch.int32)


def nan_unless(ok, arrays):
    """``arrays`` where ``ok``, else all NaN (every routine spreads a NaN/Inf input over the whole matrix it
    computes, so a non-finite input reaches every output computed from it)."""
    return tuple(torch.where(ok, a, torch.full_like(a, float("nan"))) for a in arrays)


def raise_if_not_finite(function, status, arrays, caller=None):
    """After a call: raise ``ValueError`` naming the non-finite input, the overflow or the underflow.

    ``status`` is :func:`output_status`'s (read as a Python int: under ``torch.compile`` a graph break, so the
    error is raised there too). ``caller``: ``(public name, {argument: tensor})`` of a stored-layout entry point.
    """
    if int(status) == 0:
        return
    if caller is not None:
        function, arrays = caller
    dtype = next(iter(arrays.values())).dtype
    for name, x in arrays.items():  # only after a failure: the inputs are scanned here, not in the update
        if not bool(torch.all(torch.isfinite(x))):
            raise ValueError(f"{function}: {name} contains NaN or Inf")
    sizes = ", ".join(f"max|{name}| = {float(x.abs().max()) if x.numel() else 0.0:.3g}" for name, x in arrays.items())
    raise ValueError(result_error(function, int(status), str(dtype).removeprefix("torch."),
                                  underflow_reason(dtype), sizes))
