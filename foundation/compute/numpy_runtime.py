"""The NumPy runtime of the emitted float64 reference modules: every routine that printed NumPy code may call.

A module printed by ``python -m derivations.<rule> --emit numpy`` imports the names its code uses from
here; ``--emit numpy --standalone`` inlines the source of the routines its code reaches instead,
transitively (:func:`derivations.printing.codegen.routine_closure`), in the order of :data:`__all__`, and
writes the constants they read as assignments.
Nothing is defined here: every name is the defining module's own object.
"""

from foundation.compute.numpy_exact_scaling import (
    group_underflow,
    output_status,
    pow2_exponent,
    pow2_normalize,
    pow2_scale,
    pow2_unscale,
    raise_if_not_finite,
    scale_group,
    split_scalar,
    underflow_limit,
    underflow_reason,
    unit_scale,
)
from foundation.compute.numpy_routines import (
    check_group,
    check_scalar,
    check_shapes,
    damping_root,
    finite_for_lapack,
    gram_eigh,
    isotropic_scale,
    isotropic_scale_split,
    msign_svd,
    polar_factor,
    psd_power,
    psd_power_split,
    safe_ratio,
    scale_of,
    sylvester_dense,
    sylvester_gram,
    sylvester_products_split,
    validate_arrays,
)
from foundation.compute.output_limits import UNDERFLOW_BITS, result_error, underflow_bound, underflow_phrase

__all__ = [
    "UNDERFLOW_BITS",
    "check_scalar", "check_shapes", "check_group", "validate_arrays", "finite_for_lapack",
    # exact powers of two, output checks
    "pow2_scale", "pow2_exponent", "pow2_normalize", "scale_group", "unit_scale", "split_scalar", "underflow_bound",
    "underflow_phrase", "underflow_limit", "underflow_reason", "result_error", "pow2_unscale",
    "group_underflow", "output_status",
    "raise_if_not_finite",
    # powers of WᵀW + λI, msign, regularized Sylvester solves
    "scale_of", "damping_root", "gram_eigh", "psd_power", "psd_power_split", "polar_factor", "isotropic_scale",
    "isotropic_scale_split", "msign_svd", "sylvester_dense", "sylvester_gram", "safe_ratio",
    "sylvester_products_split",
]
