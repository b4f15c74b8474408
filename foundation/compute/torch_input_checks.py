"""The arguments of an emitted PyTorch function, checked first; every error names the function and the argument.

:mod:`foundation.compute.jax_input_checks`, one to one: tensors of one floating dtype, the shapes by name
(:mod:`foundation.compute.argcheck`), ``eps`` and ``damping`` finite, ``>= 0`` and within the normal range of
the compute dtype, the msign method, a schedule of at most ``MAX_SCHEDULE_STEPS`` finite steps and the
restart positions (``check_schedule_length`` and ``check_restarts`` are the JAX module's plain-Python checks).
A bool tensor, an integer or complex tensor and anything not a ``torch.Tensor`` are refused. Every value is
concrete in PyTorch, so every check always runs. Inlined verbatim into the emitted modules.
"""

import torch

from foundation.compute.argcheck import check_scalar, check_shapes
from foundation.compute.jax_input_checks import check_restarts, check_schedule_length
from foundation.compute.jax_msign import MSIGN_METHODS
from foundation.compute.torch_exact_scaling import compute_dtype


def real_scalar(x):
    """A checked scalar as the routines take it: a tensor as it is, any other real number as a float."""
    return x if isinstance(x, torch.Tensor) else float(x)


def check_schedule(function, schedule):
    """A non-empty schedule of finite coefficients: a tuple of coefficient tuples or a tensor ``(steps, k+1)``,
    of at most ``MAX_SCHEDULE_STEPS`` steps."""
    check_schedule_length(function, schedule)
    if isinstance(schedule, torch.Tensor):
        if schedule.ndim != 2 or 0 in schedule.shape or not schedule.dtype.is_floating_point:
            raise ValueError(f"{function}: schedule must be a float tensor of shape (steps, k+1), got shape "
                             f"{tuple(schedule.shape)} and dtype {schedule.dtype}")
        if not bool(torch.all(torch.isfinite(schedule))):
            raise ValueError(f"{function}: schedule contains NaN or Inf")
        return
    if not isinstance(schedule, (tuple, list)) or not schedule:
        raise TypeError(f"{function}: schedule must be a non-empty tuple of coefficient tuples or a tensor "
                        f"(steps, k+1), got {type(schedule).__name__}")
    for step in schedule:
        if not isinstance(step, (tuple, list)) or not step or not all(
                isinstance(c, (int, float)) and not isinstance(c, bool) and abs(c) < 1.7e308 for c in step):
            raise ValueError(f"{function}: each schedule step must be a tuple of finite floats "
                             f"(c_0, c_1, ...), got {step!r}")


def require_tensor(function, name, x):
    """``x`` is a ``torch.Tensor`` of a real floating dtype (bool, integer and complex tensors are refused)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{function}: {name} must be a torch.Tensor, got {type(x).__name__}; "
                        f"convert it with torch.as_tensor({name})")
    if not x.dtype.is_floating_point:
        raise TypeError(f"{function}: {name} must be real floating point, got dtype {x.dtype}")


def validate_inputs(function, shapes, arrays, eps, damping, method, schedule, restarts=None, gram_aspect=None):
    """Check the arguments; raise ``ValueError``/``TypeError`` naming the argument.

    ``shapes`` maps each argument name to its two trailing dimension names (``{"W_Q": ("d", "d_h")}``); every
    dimension name must get one size, every argument the same leading (batch) shape and the same floating
    dtype, and ``d_h ≤ d``. A nonzero ``eps`` or ``damping`` outside the normal range of the compute dtype is
    refused.
    """
    dtype = None
    for name in shapes:
        x = arrays[name]
        require_tensor(function, name, x)
        if dtype is None:
            dtype = x.dtype
        elif x.dtype != dtype:
            raise TypeError(f"{function}: {name} has dtype {x.dtype} but earlier arguments have {dtype}; "
                            f"cast all inputs to one dtype")
    check_shapes(function, shapes, arrays)
    info = torch.finfo(compute_dtype(dtype))
    for name, value in (("eps", eps), ("damping", damping)):
        check_scalar(function, name, value)
        if float(value) != 0 and not float(info.tiny) <= float(value) <= float(info.max):
            raise ValueError(f"{function}: {name} = {value} is outside the normal range of {info.dtype} "
                             f"[{float(info.tiny):.3g}, {float(info.max):.3g}], the dtype the update is computed "
                             f"in; use 0 or a value in that range, or a wider dtype")
    if not isinstance(method, str) or method not in MSIGN_METHODS:
        raise ValueError(f"{function}: msign must be one of {MSIGN_METHODS}, got {method!r}")
    if method != "svd":
        check_schedule(function, schedule)
    else:  # the schedule is not used, but its length is capped whatever msign is
        check_schedule_length(function, schedule)
    check_restarts(function, method, schedule, restarts, gram_aspect)


def require_arrays(function, arrays):
    """Tensors of one floating dtype, with no zero-size matrix dimension (the stored-layout entry points call
    this first, so that errors name their own arguments)."""
    first = None
    for name, x in arrays.items():
        require_tensor(function, name, x)
        if x.ndim >= 2 and 0 in x.shape[-2:]:
            raise ValueError(f"{function}: {name} has shape {tuple(x.shape)}, an empty matrix; both of its last "
                             f"two dimensions must be at least 1")
        if first is None:
            first = name
        elif x.dtype != arrays[first].dtype:
            raise TypeError(f"{function}: {name} has dtype {x.dtype} but {first} has {arrays[first].dtype}; "
                            f"cast all inputs to one dtype")
