"""Input checks of the stored-layout entry points for the PyTorch modules: :mod:`foundation.compute.ov_layout`'s.

The checks themselves (which stored arrays the adapters take, and the group size ``G = H / H_kv`` they
return) are target-free; only the first thing each does, :func:`~foundation.compute.torch_input_checks.
require_arrays`, differs between JAX arrays and tensors. So each check here is the same code object as
:mod:`foundation.compute.ov_layout`'s, bound to this module's globals, where ``require_arrays`` is the
PyTorch one: its source, and so what a standalone emitted module inlines, is that of
:mod:`foundation.compute.ov_layout`.
"""

import types

from foundation.compute import ov_layout
from foundation.compute.ov_layout import _same_shapes
from foundation.compute.torch_input_checks import require_arrays

__all__ = ["_same_shapes", "check_joint_pair", "check_ov_heads", "check_qk_heads", "require_arrays"]


def reading_torch_checks(check):
    """``check`` (a function of :mod:`foundation.compute.ov_layout`) with its own code, reading the names it
    calls from this module (``require_arrays`` of tensors, ``_same_shapes``)."""
    return types.FunctionType(check.__code__, globals(), check.__name__, check.__defaults__)


check_qk_heads = reading_torch_checks(ov_layout.check_qk_heads)
check_ov_heads = reading_torch_checks(ov_layout.check_ov_heads)
check_joint_pair = reading_torch_checks(ov_layout.check_joint_pair)
