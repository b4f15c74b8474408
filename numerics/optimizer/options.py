"""Options of the direction: the typed record the rules take, and the checks that build it.

Also :func:`check_gradients_match`: ``update``'s gradients against the params.

A Newton–Schulz schedule is a tuple of steps ``(c_0, …, c_k)``, each mapping a singular value
``σ ↦ c_0 σ + c_1 σ³ + … + c_k σ^{2k+1}`` (:func:`resolve_schedule`, refused when its iterates leave
``[−100, 100]`` on ``[0, 1]``: :func:`check_schedule_bounded`). The damping ``λ`` of every Gram root
``(WᵀW + λI)^{1/2}`` is a finite real ``≥ 0`` (:func:`real_scalar`) that must be 0 or a normal number
of the dtype each pair computes its roots in (:func:`check_damping_range`). :class:`DirectionOptions`
carries the budget ``ε``, ``λ``, the ``msign`` method and the schedule to the emitted rule functions.
"""

from __future__ import annotations

import decimal
import math
import numbers
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import coeffsearch
from foundation.compute import jax_exact_scaling, jax_msign
from foundation.compute.argcheck import check_whole
from foundation.polynomial import MAX_STEP_COEFFICIENTS, ScheduleError

from .pairs import Plan, named_leaves

GAUGES = ("none", "horizontal_projection", "rebalance")
GRAM_ROOTS = ("eigh",)
MSIGN_METHODS = jax_msign.MSIGN_METHODS
NONFINITE_POLICIES = ("skip", "raise")
SCHEDULE_BOUND = 100.0  # the largest |σ| a Newton–Schulz step may reach from σ ∈ [0, 1] (see check_schedule_bounded)

Schedule = tuple[tuple[float, ...], ...]

#: ``optax.contrib.muon``'s preset names: ``"standard"`` is Keller Jordan's ``(3.4445, −4.7750, 2.0315)``
#: repeated ``ns_steps`` times, ``"dion"`` the five steps of Ahn et al., Dion (2025), as optax ships them
OPTAX_PRESETS: dict[str, Any] = {
    "standard": (3.4445, -4.7750, 2.0315),
    "dion": ((4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
             (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)),
}


def shown_path(name: str) -> str:
    """A parameter's path as messages print it: quoted (``'attn/wq'``), or ``<root>`` when the params are one
    array, whose path is empty."""
    return repr(name) if name else "<root> (the params are one array)"


def check_hyperparameter_precision(**values: Any) -> None:
    """Refuse rates near 1 and ``eps`` that arrive as 16-bit floats, naming them and the fix.

    ``optax.inject_hyperparams`` casts every number to the parameters' dtype unless given
    ``hyperparam_dtype``: with bfloat16 weights ``adam_b2 = 0.999`` becomes exactly 1, ``1 − b2ᵗ = 0``
    and every AdamW step is NaN (then skipped, so nothing trains and nothing is said); float16 makes
    ``eps = 1e-8`` zero. Only the dtype is known under ``jit``, so the check is on the dtype.
    """
    for name, value in values.items():
        dtype = getattr(value, "dtype", None)
        if dtype is not None and jnp.issubdtype(dtype, jnp.floating) and jnp.dtype(dtype).itemsize < 4:
            raise ValueError(f"compositional_muon: {name} arrived as {jnp.dtype(dtype).name}, which cannot hold it "
                             f"(0.999 rounds to 1 in bfloat16, 1e-8 to 0 in float16); with bfloat16 or float16 "
                             f"weights pass hyperparam_dtype=jnp.float32 to optax.inject_hyperparams")


def check_hyperparameter_values(rates: dict[str, Any], nonnegative: dict[str, Any],
                                learning_rates: dict[str, Any]) -> None:
    """Refuse a concrete hyperparameter outside its range, naming it (a ``TypeError`` for a string or a bool).

    ``rates`` (``beta``, ``adam_b1``, ``adam_b2``): real numbers in ``[0, 1)``: at 1 the bias correction
    ``1 − βᵗ`` is 0, so every step would be NaN and skipped, and nothing would train, silently. ``nonnegative``
    (``eps``, weight decays): finite and ``>= 0``. ``learning_rates``: a finite real number (of either sign, as
    optax takes it) or a schedule. A callable (schedule) and a traced value (injected under ``jit``) pass.
    """
    for name, value in {**rates, **nonnegative, **learning_rates}.items():
        if value is None or callable(value) or isinstance(value, jax.core.Tracer):
            continue
        if name in learning_rates:
            number = isinstance(value, numbers.Real) or (getattr(value, "shape", None) == () and jnp.issubdtype(
                getattr(value, "dtype", object), jnp.number))
            if not number or isinstance(value, (bool, np.bool_)) or jnp.iscomplexobj(value):
                raise TypeError(f"compositional_muon: {name} must be a real number or a schedule (a function of the "
                                f"step count), got {value!r}")
            if not math.isfinite(float(value)):
                raise ValueError(f"compositional_muon: {name} must be finite, got {value!r}")
            continue
        v = real_scalar(name, value)
        if name in rates and not v < 1:
            raise ValueError(f"compositional_muon: {name} must be in [0, 1), got {value!r}; at 1 the bias "
                             f"correction 1 - {name}^t is 0 and every step would be NaN")


def momentum_dtype(mu_dtype: Any) -> Any:
    """``mu_dtype`` as a canonical floating dtype (``None`` stays ``None``: the momentum takes each parameter's).

    A dtype, a scalar type (``jnp.bfloat16``) or a name (``"bfloat16"``), or a 0-d floating array: what
    ``optax.inject_hyperparams`` hands over for a scalar type, which it takes for a schedule because it is
    callable (``jnp.bfloat16(count)``, at ``init`` and traced under ``jit``); the array's dtype is the one meant.
    Refused with a ``TypeError`` naming the value otherwise. (A NumPy scalar type such as ``np.float16`` does not
    survive ``inject_hyperparams``, which casts its value to the hyperparameters' dtype; give a name or
    ``static_args=('mu_dtype',)`` then.)
    """
    if mu_dtype is None:
        return None
    if isinstance(mu_dtype, (jax.Array, jax.core.Tracer)) and mu_dtype.shape == ():
        dtype = mu_dtype.dtype  # jnp.bfloat16(count) from inject_hyperparams
    else:
        try:
            dtype = jnp.dtype(mu_dtype)
        except (TypeError, ValueError):
            raise TypeError(f"compositional_muon: mu_dtype must be a floating dtype (jnp.bfloat16, 'float32', ...), "
                            f"got {mu_dtype!r}, which is not a dtype") from None
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"compositional_muon: mu_dtype must be a floating dtype (jnp.bfloat16, 'float32', ...), "
                        f"got {mu_dtype!r}: {jnp.dtype(dtype).name} is not a floating dtype")
    return jax.dtypes.canonicalize_dtype(dtype)


@dataclass(frozen=True)
class DirectionOptions:
    """What every emitted rule of one step is called with.

    ``eps``: the budget ``ε`` (2 in the optimizer: each half of a pair's product change has operator
    norm 1); ``damping``: ``λ``; ``msign``: ``"newton_schulz"`` or ``"svd"``; ``schedule``: the
    resolved Newton–Schulz schedule. The rules run with ``check_finite=False`` (the optimizer's guard
    handles NaN/Inf).
    """

    eps: float
    damping: float
    msign: str
    schedule: Schedule

    def kwargs(self, module: ModuleType) -> dict[str, Any]:
        """Keyword arguments of an emitted rule function of ``module``."""
        return {"eps": self.eps, "damping": self.damping, "msign": self.msign,
                "schedule": schedule_for(module, self.schedule), "check_finite": False}


def _coefficient(c: Any) -> float:
    """A schedule coefficient as a float: a real number, never a string or bool (``float("1")`` would pass)."""
    if isinstance(c, (str, bytes, bool, np.bool_)):
        raise ValueError(f"not a real number: {c!r}")
    if isinstance(c, numbers.Real):
        return float(c)
    dtype = getattr(c, "dtype", None)  # a 0-d NumPy or JAX array
    if dtype is not None and getattr(c, "shape", None) == () and (
            jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        return float(c)
    raise ValueError(f"not a real number: {c!r}")


def _check_schedule_size(steps: int, widest: int, ns_coeffs: Any) -> None:
    """At most ``MAX_SCHEDULE_STEPS`` steps of at most ``MAX_STEP_COEFFICIENTS`` coefficients (the work is bounded)."""
    if steps > jax_msign.MAX_SCHEDULE_STEPS or widest > MAX_STEP_COEFFICIENTS:
        raise ValueError(f"compositional_muon: a Newton–Schulz schedule has at most {jax_msign.MAX_SCHEDULE_STEPS} "
                         f"steps of at most {MAX_STEP_COEFFICIENTS} coefficients, got {steps} steps of up to {widest} "
                         f"(ns_coeffs of type {type(ns_coeffs).__name__}); a certified schedule needs far fewer "
                         f"(polar-express-5 has 5 steps of 3)")


#: how many times one step ``(a, b, c)`` runs when ``ns_steps`` is not given (``optax.contrib.muon``'s default)
DEFAULT_NS_STEPS = 5


def _repeated_step(ns_coeffs: Any, ns_steps: Any, bad_coefficient: ValueError) -> list[list[float]]:
    """One step ``(a, b, c, …)`` repeated ``ns_steps`` times (``1 <= ns_steps <= 100``, a concrete integer;
    ``None``: :data:`DEFAULT_NS_STEPS`)."""
    if ns_steps is None:
        ns_steps = DEFAULT_NS_STEPS
    if isinstance(ns_steps, jax.core.Tracer):
        raise TypeError(f"compositional_muon: ns_steps is a traced value (optax.inject_hyperparams injects every "
                        f"number); with ns_coeffs = {ns_coeffs!r} it sets the number of steps of the iteration, "
                        f"so give ns_coeffs as a tuple of steps or a registry name, or pass "
                        f"static_args=('ns_steps',)")
    if getattr(ns_steps, "shape", None) == () and jnp.issubdtype(getattr(ns_steps, "dtype", float), jnp.integer):
        ns_steps = int(ns_steps)  # a concrete 0-d integer array (inject_hyperparams at init)
    if len(ns_coeffs) >= 2 and isinstance(ns_steps, (bool, np.bool_)):
        check_whole("compositional_muon", "ns_steps", ns_steps)  # True is an int in Python: refused as a bool
    if len(ns_coeffs) < 2 or not isinstance(ns_steps, numbers.Integral) or ns_steps < 1:
        raise ValueError(f"compositional_muon: ns_coeffs must have shape (k,) or (n, k) with k >= 2 and "
                         f"ns_steps >= 1, got {ns_coeffs!r} and ns_steps={ns_steps!r}")
    if ns_steps > jax_msign.MAX_SCHEDULE_STEPS:
        raise ValueError(f"compositional_muon: ns_steps = {ns_steps} is more than MAX_SCHEDULE_STEPS = "
                         f"{jax_msign.MAX_SCHEDULE_STEPS}; Newton–Schulz needs far fewer (optax uses 5)")
    ns_steps = int(ns_steps)
    try:
        return [[_coefficient(c) for c in ns_coeffs]] * ns_steps
    except (ValueError, OverflowError, TypeError):
        raise bad_coefficient from None


def resolve_schedule(ns_coeffs: Any, ns_steps: int | None = None) -> Schedule:
    """A Newton–Schulz schedule as a tuple of coefficient tuples, validated as a :class:`coeffsearch.Schedule`.

    ``ns_coeffs``: a name in :mod:`coeffsearch`'s registry or one of ``optax.contrib.muon``'s presets
    (:data:`OPTAX_PRESETS`: ``"standard"``, ``"dion"``), one tuple ``(a, b, c)`` repeated
    ``ns_steps`` times (``None``: 5, optax's default), or a tuple of tuples (then ``ns_steps`` is ignored, as in
    optax). At most ``MAX_SCHEDULE_STEPS`` (100) steps of at most ``MAX_STEP_COEFFICIENTS`` (32) coefficients:
    so ``1 <= ns_steps <= 100``.
    """
    if isinstance(ns_coeffs, jax.core.Tracer):
        raise TypeError("compositional_muon: ns_coeffs is a traced array (optax.inject_hyperparams injects arrays); "
                        "the schedule is static: give it as a tuple of tuples or a registry name")
    if isinstance(ns_coeffs, str) and ns_coeffs in OPTAX_PRESETS and ns_coeffs not in coeffsearch.names():
        return resolve_schedule(OPTAX_PRESETS[ns_coeffs], ns_steps)
    if isinstance(ns_coeffs, str):
        try:
            return coeffsearch.resolve(ns_coeffs).as_floats()
        except (KeyError, ValueError) as exc:
            raise ValueError(f"compositional_muon: ns_coeffs {ns_coeffs!r} is not a schedule: {exc}") from None
    bad_coefficient = ValueError(f"compositional_muon: ns_coeffs must hold finite real numbers, got {ns_coeffs!r}")
    shape_error = ValueError(f"compositional_muon: ns_coeffs must be a registry name, (a, b, c) or a tuple of "
                             f"tuples, got {ns_coeffs!r}")
    try:
        nested = hasattr(ns_coeffs[0], "__len__") and getattr(ns_coeffs[0], "ndim", 1) != 0  # a 0-d JAX array has len
        size = ((len(ns_coeffs), max(len(step) if hasattr(step, "__len__") else 1 for step in ns_coeffs)) if nested
                else (1, len(ns_coeffs)))
    except (TypeError, IndexError, KeyError):
        raise shape_error from None
    _check_schedule_size(*size, ns_coeffs)
    try:
        arr = [[_coefficient(c) for c in step] for step in ns_coeffs] if nested else None
    except (ValueError, OverflowError):
        raise bad_coefficient from None
    except (TypeError, IndexError, KeyError):
        raise shape_error from None
    if arr is None:
        arr = _repeated_step(ns_coeffs, ns_steps, bad_coefficient)
    if not arr or any(len(s) < 2 for s in arr):
        raise ValueError(f"compositional_muon: every Newton–Schulz step needs >= 2 finite coefficients, "
                         f"got {ns_coeffs!r}")
    try:  # the one schedule type validates it (finite in float64, positive slope, at most 100 steps)
        literal = coeffsearch.Schedule("ns_coeffs", tuple(tuple(repr(c) for c in s) for s in arr),
                                       "compositional_muon(ns_coeffs=...)")
    except ScheduleError as exc:
        raise ValueError(f"compositional_muon: every Newton–Schulz step needs >= 2 finite coefficients "
                         f"and a positive slope c_0: {exc}") from None
    return literal.as_floats()


def schedule_for(module: ModuleType, schedule: Schedule) -> Any:
    """The schedule in the form the emitted ``module`` takes (its ``NS_SCHEDULE``'s type)."""
    return schedule if isinstance(module.NS_SCHEDULE, tuple) else jnp.asarray(schedule)


def check_schedule_bounded(schedule: Schedule, bound: float = SCHEDULE_BOUND, points: int = 4097) -> Schedule:
    """Refuse a Newton–Schulz schedule whose iterates leave ``[−bound, bound]``.

    Newton–Schulz starts from ``X/‖X‖_F``, so every singular value starts in ``[0, 1]`` and step
    ``(c_0, …, c_k)`` maps it to ``c_0 σ + c_1 σ³ + … + c_k σ^{2k+1}``. The scalar iteration runs here
    in float64 on ``points`` equally spaced ``σ ∈ [0, 1]``; a schedule that approximates ``msign``
    keeps them near ``[0, 1]`` (every schedule in :mod:`coeffsearch`'s registry stays below 2), and
    one that passes ``bound`` either diverges (the next step raises it to a higher odd power, which
    overflows to NaN/Inf in the update) or makes steps ``bound`` times the budget. A sampled check:
    the optimizer still skips (or refuses) any update that comes out NaN/Inf.
    """
    sigma0 = np.linspace(0.0, 1.0, points)
    x = sigma0.copy()
    with np.errstate(all="ignore"):
        for i, step in enumerate(schedule):
            a, p = x * x, np.zeros_like(x)
            for c in reversed(step[1:]):
                p = (p + c) * a  # c_1 a + c_2 a² + … by Horner's rule
            x = step[0] * x + p * x
            bad = ~(np.abs(x) <= bound)  # NaN counts as out of bounds
            if bad.any():
                j = int(np.argmax(bad))
                raise ValueError(f"compositional_muon: ns_coeffs diverge: Newton–Schulz step {i + 1} of "
                                 f"{len(schedule)} maps the singular value {sigma0[j]:.4g} of the normalized "
                                 f"input to {x[j]:.4g}; a schedule that approximates msign keeps its iterates "
                                 f"within [-{bound:g}, {bound:g}] on [0, 1] (the registry's stay below 2)")
    return schedule


#: the Newton–Schulz starts the project implements (``optax.contrib.muon``'s default, ``X/‖X‖_F``)
PRECONDITIONINGS = ("frobenius",)


def check_preconditioning(preconditioning: Any) -> None:
    """Refuse a ``preconditioning`` other than ``"frobenius"``, naming ``optax.contrib.muon``'s other starts."""
    if not isinstance(preconditioning, str) or preconditioning not in PRECONDITIONINGS:
        raise ValueError(f"compositional_muon: preconditioning must be 'frobenius', got {preconditioning!r}: the "
                         f"project's Newton–Schulz starts from X/‖X‖_F, as optax.contrib.muon's default does; its "
                         f"'spectral', 'aol' and 'schatten' starts are not implemented here")


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool: only ``True``/``False`` (or a NumPy bool), never a truthy string like ``'no'``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"compositional_muon: {name} must be True or False, got {value!r}")


def real_scalar(name: str, value: Any, traced: bool = False) -> Any:
    """``value`` as a float: any real scalar (``int``, ``float``, ``Fraction``, ``Decimal``, NumPy or JAX 0-d).

    ``TypeError`` for bool, complex, strings, arrays with axes and traced values; ``ValueError``
    for NaN, Inf and negative values. The messages name ``name``. With ``traced``, a traced 0-d
    real value (a hyperparameter injected by ``optax.inject_hyperparams`` under ``jit``) is returned
    as it is: its value can only be checked when the step runs (:func:`damping_ok`).
    """
    where = f"compositional_muon: {name}"
    if isinstance(value, jax.core.Tracer):
        if not traced:
            raise TypeError(f"{where} must be a concrete real number, got a traced value; build the optimizer "
                            f"outside jit")
        if value.shape != () or not (jnp.issubdtype(value.dtype, jnp.floating)
                                     or jnp.issubdtype(value.dtype, jnp.integer)):
            raise TypeError(f"{where} must be a real scalar, got a traced value of shape {value.shape} and dtype "
                            f"{value.dtype}")
        return value
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "shape"):
        if tuple(value.shape) != ():
            raise TypeError(f"{where} must be a real scalar, got an array of shape {tuple(value.shape)}")
        if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
            raise TypeError(f"{where} must be a real number, got {value!r} of dtype {dtype}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, decimal.Decimal)):
        raise TypeError(f"{where} must be a real number, got {value!r}")
    if isinstance(value, decimal.Decimal) and value.is_nan():  # float() refuses a signaling NaN
        raise ValueError(f"{where} must be finite and >= 0, got {value!r}")
    try:
        v = float(value)  # the nearest float (Fraction and Decimal are rounded correctly)
    except OverflowError:  # an integer beyond every float (10**400)
        raise ValueError(f"{where} must be finite, got a number too large for a float") from None
    if math.isinf(v) and isinstance(value, decimal.Decimal) and value.is_finite():  # Decimal('1e400')
        raise ValueError(f"{where} must be finite, got {value!r}, too large for a float")
    if not (math.isfinite(v) and v >= 0.0):
        raise ValueError(f"{where} must be finite and >= 0, got {value!r}")
    return v


def _root_dtypes(plan: Plan, params: Any) -> list[tuple[Any, Any, Any]]:
    """``(record, weight dtype, dtype its Gram roots are computed in)`` of every pair, LoRA pair and MLA block."""
    leaves = named_leaves(params)
    out = []
    for rec in plan.records:
        dtype = jnp.dtype(leaves[rec.members[0]].dtype)
        out.append((rec, dtype, jnp.dtype(jax_exact_scaling.compute_dtype(dtype))))
    return out


def _own_damping(rec: Any) -> float | None:
    """A declaration's own ``λ`` (a ``LoRAPair``'s ``damping``), or None: it takes the optimizer's."""
    return getattr(rec, "damping", None)


def damping_ok(plan: Plan, params: Any, damping: Any, positive: bool = False) -> jax.Array:
    """The checks of :func:`real_scalar` and :func:`check_damping_range` on a traced ``λ``, as one boolean.

    Finite, ``>= 0`` (``> 0`` with ``positive``), and 0 or a normal number of every pair's root dtype.
    """
    ok = jnp.isfinite(damping) & ((damping > 0) if positive else (damping >= 0))
    for rec, _, ct in _root_dtypes(plan, params):
        if _own_damping(rec) is not None:
            continue  # a concrete number, checked by check_damping_range
        info = jnp.finfo(ct)
        ok &= (damping == 0) | ((damping >= float(info.tiny)) & (damping <= float(info.max)))
    return ok


def check_damping_range(plan: Plan, params: Any, damping: float) -> None:
    """``λ`` must be 0 or a normal number of the dtype each pair computes its Gram roots in.

    That dtype is float32 for 16-bit and float32 weights, float64 for float64. ``damping = 1e300``
    is a float64 number but infinite in float32, where it would turn every root of the pair into
    NaN; a subnormal ``λ`` (``1e-40`` in float32) is flushed to 0 by XLA on the CPU, so the step
    would silently be the undamped one. Refused naming the pair and the usable range. A LoRA pair's
    own ``damping`` is checked the same way; a traced ``damping`` is skipped (see :func:`damping_ok`).
    """
    for rec, dtype, ct in _root_dtypes(plan, params):
        lam = damping if _own_damping(rec) is None else _own_damping(rec)
        if isinstance(lam, jax.core.Tracer):
            continue
        info = jnp.finfo(ct)
        if lam > float(info.max) or 0.0 < lam < float(info.tiny):
            what = "infinite" if lam > 1 else "subnormal"
            raise ValueError(f"compositional_muon: damping = {lam:g} is {what}"
                             f" in {ct.name}, the dtype in which the {rec.label} of {dtype.name} "
                             f"weights computes (WᵀW + λI)^(1/2); use 0 or a damping in [{float(info.tiny):.3g}, "
                             f"{float(info.max):.3g}] (λ is in the units of the squared weights)")


def check_gradients_match(updates: Any, params: Any) -> None:
    """Refuse gradients whose pytree differs from the params', naming the first missing or extra leaf, and a
    complex gradient for a real parameter wherever it sits (:func:`check_real_gradients`)."""
    if params is None:
        return
    have, want = named_leaves(updates), named_leaves(params)  # also refuses unorderable dict keys
    if jax.tree.structure(updates) == jax.tree.structure(params):
        check_real_gradients(have, want)
        return
    missing, extra = [n for n in want if n not in have], [n for n in have if n not in want]
    where = "compositional_muon.update: the gradients do not match the params"
    if missing:
        raise ValueError(f"{where}: no gradient for the parameter {missing[0]!r}"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                         + "; pass one gradient per parameter (the pytree of jax.grad of the params)")
    if extra:
        raise ValueError(f"{where}: a gradient at {extra[0]!r}, which is not a parameter"
                         + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    raise ValueError(f"{where}: the same leaves in different containers, "
                     f"{str(jax.tree.structure(updates))[:200]} and {str(jax.tree.structure(params))[:200]}")


def check_real_gradients(gradients: dict, params: dict) -> None:
    """Refuse a complex gradient for a real parameter, naming the parameter's path: the first of ``{path:
    array}`` whose gradient is complex while its parameter is not (a pair member, a Muon matrix, a bias or an
    AdamW leaf alike). Casting it would be silent and wrong: Muon's ``astype`` drops the imaginary part, AdamW's
    second moment ``g·g`` mixes it in. Dtypes are static, so this raises eagerly, under ``jax.jit`` and under
    ``checked_jit`` alike, while tracing. A complex parameter (selected for AdamW) takes a complex gradient."""
    for name, g in gradients.items():
        p = params.get(name)
        g_dtype, p_dtype = getattr(g, "dtype", None), getattr(p, "dtype", None)
        if (g_dtype is not None and p_dtype is not None and jnp.issubdtype(g_dtype, jnp.complexfloating)
                and not jnp.issubdtype(p_dtype, jnp.complexfloating)):
            raise TypeError(f"compositional_muon.update: the gradient of {shown_path(name)} is "
                            f"{jnp.dtype(g_dtype).name} but "
                            f"the parameter is {jnp.dtype(p_dtype).name}: a real parameter takes a real gradient "
                            f"(differentiate a real loss, or pass jnp.real of the gradient)")
