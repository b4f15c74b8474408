"""The JAX runtime of the emitted modules: every routine and constant that printed JAX code may call, in one place.

A module printed by ``python -m derivations.<rule> --emit jax`` imports the names its code uses from
here (``from foundation.compute.jax_runtime import (...)``); ``--emit jax --standalone`` inlines the
source of the routines its code reaches instead, transitively (:func:`derivations.printing.codegen.routine_closure`),
and writes the constants they read as assignments. :data:`__all__` lists the exports in that order:
constants first, then each routine after the ones it calls where that reads best. Nothing is defined
here: every name is the defining module's own object, so an emitted module computes exactly what the
compute modules compute.
"""

from foundation.compute.argcheck import check_group, check_scalar, check_shapes
from foundation.compute.gram_newton_schulz import gram_newton_schulz, gram_newton_schulz_oriented, restart_flags
from foundation.compute.jax_damped_gram import (
    GRAM_ROUTE_RATIO,
    gram_eigh,
    gram_eigh_stacked,
    isotropic_scale,
    isotropic_scale_split,
    polar_factor,
    psd_power,
    psd_power_split,
    right_singular,
    scale_with_damping,
)
from foundation.compute.jax_exact_scaling import (
    compute_dtype,
    exponent_dtype,
    exponent_fields,
    float_layout,
    max_abs,
    max_exponent,
    pow2_normalize,
    pow2_scale,
    scale_group,
    split_scalar,
    typed,
    unit_scale,
    with_exponent,
)
from foundation.compute.jax_head_layout import block_right, merge_heads, split_heads
from foundation.compute.jax_input_checks import (
    check_restarts,
    check_schedule,
    check_schedule_length,
    real_scalar,
    require_arrays,
    validate_inputs,
)
from foundation.compute.jax_inverse_root import (
    check_root_input,
    inverse_root,
    inverse_root_eigh,
    matrix_power,
    root_scale,
    spd_power,
)
from foundation.compute.jax_lapack_calls import lapack_guard, per_matrix_on_cpu
from foundation.compute.jax_msign import (
    MAX_SCHEDULE_STEPS,
    MSIGN_METHODS,
    _newton_schulz_oriented,
    msign_svd,
    newton_schulz,
    schedule_array,
)
from foundation.compute.jax_output_checks import (
    group_underflow,
    nan_unless,
    output_status,
    pow2_unscale,
    raise_if_not_finite,
    underflow_limit,
    underflow_reason,
)
from foundation.compute.jax_spectral_sign import (
    GRAM_ASPECT,
    GRAM_METHODS,
    GRAM_RESTARTS,
    certified_restarts,
    default_restarts,
    gram_chosen,
    gram_flags,
    msign_choice,
    spectral_sign,
    spectral_sign_stacked,
)
from foundation.compute.jax_sylvester import (
    SYLVESTER_SOLVERS,
    check_dense_damping,
    safe_ratio,
    sylvester_dense,
    sylvester_factor_svd,
    sylvester_gram,
    sylvester_products,
    sylvester_products_split,
)
from foundation.compute.output_limits import UNDERFLOW_BITS, result_error, underflow_bound, underflow_phrase
from foundation.compute.ov_layout import _same_shapes, check_joint_pair, check_ov_heads, check_qk_heads

__all__ = [
    # constants
    "MSIGN_METHODS", "GRAM_METHODS", "GRAM_ASPECT", "GRAM_RESTARTS", "GRAM_ROUTE_RATIO", "MAX_SCHEDULE_STEPS",
    "UNDERFLOW_BITS", "SYLVESTER_SOLVERS",
    # exact powers of two, guarded LAPACK calls, output checks
    "compute_dtype", "lapack_guard", "max_abs", "float_layout", "typed", "exponent_fields", "with_exponent",
    "exponent_dtype", "max_exponent", "pow2_scale", "pow2_normalize", "scale_group", "underflow_bound",
    "underflow_phrase", "underflow_limit", "underflow_reason", "result_error", "pow2_unscale",
    "group_underflow", "unit_scale",
    "real_scalar", "per_matrix_on_cpu",
    # powers of WᵀW + λI
    "scale_with_damping", "right_singular", "gram_eigh", "gram_eigh_stacked", "psd_power", "psd_power_split",
    "polar_factor", "isotropic_scale", "isotropic_scale_split", "split_scalar",
    # msign: SVD, Newton–Schulz, Gram Newton–Schulz and the choice between them
    "msign_svd", "schedule_array", "newton_schulz", "_newton_schulz_oriented", "restart_flags",
    "gram_newton_schulz", "gram_newton_schulz_oriented", "default_restarts", "gram_chosen", "certified_restarts",
    "msign_choice", "gram_flags", "spectral_sign", "spectral_sign_stacked",
    # inverse p-th roots of SPD matrices: the coupled Newton–Schulz iteration and the eigh reference
    "check_root_input", "root_scale", "matrix_power", "inverse_root", "inverse_root_eigh", "spd_power",
    # results and arguments
    "output_status", "nan_unless", "raise_if_not_finite", "check_scalar", "check_shapes", "check_group",
    "check_schedule_length", "check_schedule", "check_restarts", "validate_inputs",
    # regularized Sylvester solves
    "safe_ratio", "sylvester_factor_svd", "sylvester_products", "sylvester_products_split", "sylvester_dense",
    "sylvester_gram",
    # attention heads in the stored layouts, and their checks
    "block_right", "require_arrays", "check_dense_damping", "split_heads", "merge_heads", "_same_shapes",
    "check_qk_heads", "check_ov_heads", "check_joint_pair",
]
