"""The arguments of an emitted JAX function, checked before tracing; every error names the argument.

Shapes and dtypes are static, so they are checked under ``jit`` and ``vmap`` too; values (``eps``,
``damping``, finiteness, the Newton–Schulz schedule's coefficients) only outside them. The
plain-Python checks shared with the NumPy modules are in :mod:`foundation.compute.argcheck`; these add
what depends on JAX: one floating dtype for all arrays (float64 only with x64 on), ``eps`` and
``damping`` within the normal range of the compute dtype (a subnormal one is flushed to zero on the
CPU), the msign method and a schedule of at most :data:`~foundation.compute.jax_msign.MAX_SCHEDULE_STEPS`
finite steps. Inlined verbatim into the emitted modules.
"""

import jax
import jax.numpy as jnp

from foundation.compute.argcheck import check_scalar, check_shapes
from foundation.compute.jax_exact_scaling import compute_dtype
from foundation.compute.jax_msign import MAX_SCHEDULE_STEPS, MSIGN_METHODS
from foundation.compute.jax_spectral_sign import GRAM_METHODS


def real_scalar(x):
    """A checked scalar as JAX takes it: arrays and tracers as they are, any other real number as a float.

    ``fractions.Fraction`` or ``decimal.Decimal`` pass :func:`check_scalar` (``float`` converts them) but
    are no JAX type; jit would reject them with a multi-line TypeError.
    """
    return x if isinstance(x, jax.core.Tracer) or hasattr(x, "dtype") else float(x)


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


def check_restarts(function, method, schedule, restarts, gram_aspect):
    """``restarts`` (``None`` or distinct step positions in ``[1, steps − 1]``) and ``gram_aspect`` (``None`` or
    a finite number ``>= 1``): given only with a Gram method (``"gram_newton_schulz"``, ``"auto"``)."""
    if method not in GRAM_METHODS:
        for name, value in (("restarts", restarts), ("gram_aspect", gram_aspect)):
            if value is not None:
                raise ValueError(f"{function}: {name} = {value!r} is used only by msign='gram_newton_schulz' or "
                                 f"'auto', not msign={method!r}; leave it None or change msign")
        return
    steps = schedule.shape[0] if hasattr(schedule, "shape") else len(schedule)
    if gram_aspect is not None and (isinstance(gram_aspect, bool) or not isinstance(gram_aspect, (int, float))
                                    or not 1 <= gram_aspect < float("inf")):
        raise ValueError(f"{function}: gram_aspect must be None or a finite number >= 1 (the long/short side "
                         f"ratio above which msign='auto' runs Gram Newton–Schulz), got {gram_aspect!r}")
    if restarts is None:
        return
    if not isinstance(restarts, (tuple, list)) or not all(
            isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= steps - 1 for s in restarts) or len(
            set(restarts)) != len(restarts):
        raise ValueError(f"{function}: restarts must be None or a tuple of distinct step positions s with "
                         f"1 <= s <= {steps - 1} (restart after iteration s of the {steps}-step schedule), "
                         f"got {restarts!r}")


def validate_inputs(function, shapes, arrays, eps, damping, method, schedule, restarts=None, gram_aspect=None):
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
    if method != "svd":
        check_schedule(function, schedule)
        check_restarts(function, method, schedule, restarts, gram_aspect)
    else:  # the schedule is not used, but its length is capped whatever msign is
        check_schedule_length(function, schedule)
        check_restarts(function, method, schedule, restarts, gram_aspect)


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
