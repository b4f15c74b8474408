"""The NumPy runtime of the emitted float64 reference modules: every routine that printed NumPy code may call.

A module printed by ``python -m derivations.<rule> --emit numpy`` imports the names its code uses from
here; ``--emit numpy --standalone`` inlines the source of the routines its code reaches instead,
transitively (:func:`derivations.printing.codegen.routine_closure`), in the order of :data:`__all__`.
Nothing is defined here: every name is the defining module's own object.
"""

from foundation.compute.numpy_routines import (
    check_group,
    check_scalar,
    check_shapes,
    finite_for_lapack,
    gram_eigh,
    isotropic_scale,
    msign_svd,
    polar_factor,
    psd_power,
    scale_of,
    sylvester_dense,
    sylvester_gram,
    validate_arrays,
)

__all__ = [
    "check_scalar", "check_shapes", "check_group", "validate_arrays", "finite_for_lapack", "scale_of", "gram_eigh",
    "psd_power", "polar_factor", "isotropic_scale", "msign_svd", "sylvester_dense", "sylvester_gram",
]
