"""Input checks of the stored-layout entry points (called by emitted code, inlined into standalone modules).

The adapters themselves (split heads, repeat a shared head over its group, stack a group's heads,
block-diagonal partners, merge back) are printed from the reduction steps of the derivations
(:mod:`derivations.printing.layout`); what stays hand-written is what the derivations say nothing
about: checking that the stored arrays have the layouts the adapters assume. Each check returns the
group size ``G = H / H_kv``. Imports nothing but ``jax.numpy`` helpers that a standalone emitted
module inlines as well.
"""

from foundation.compute.jax_input_checks import require_arrays


def _same_shapes(function, pairs):
    for name, x, ref_name, ref in pairs:
        if getattr(x, "shape", None) != getattr(ref, "shape", None):
            what = "its weight" if ref_name is None else ref_name
            raise ValueError(f"{function}: {name} must have the shape of {what} {tuple(ref.shape)}, "
                             f"got {tuple(getattr(x, 'shape', ()))}")


def check_qk_heads(W_Q, W_K, G_Q, G_K, head_dim):
    """``W_Q, G_Q: (..., d, H·d_h)``, ``W_K, G_K: (..., d, H_kv·d_h)`` with ``H_kv`` dividing ``H``; returns ``G``."""
    require_arrays("gqa_qk", {"W_Q": W_Q, "W_K": W_K, "G_Q": G_Q, "G_K": G_K})
    _same_shapes("gqa_qk", [("G_Q", G_Q, None, W_Q), ("G_K", G_K, None, W_K)])
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:  # True is not a width
        raise ValueError(f"gqa_qk: head_dim must be a positive int, got {head_dim!r}")
    for name, x in (("W_Q", W_Q), ("W_K", W_K)):
        if x.ndim < 2 or x.shape[-1] % head_dim:
            raise ValueError(f"gqa_qk: {name} has width {x.shape[-1]}, not a multiple of head_dim = {head_dim}")
    heads, kv_heads = W_Q.shape[-1] // head_dim, W_K.shape[-1] // head_dim
    if heads % kv_heads:
        raise ValueError(f"gqa_qk: {heads} query heads cannot be grouped over {kv_heads} key heads")
    return heads // kv_heads


def check_ov_heads(W_O, W_V, G_O, G_V, head_dim):
    """``W_O, G_O: (..., d, H·d_h)``, ``W_V, G_V: (..., H_kv·d_h, d)`` with ``H_kv`` dividing ``H``; returns ``G``."""
    require_arrays("hybrid_ov", {"W_O": W_O, "W_V": W_V, "G_O": G_O, "G_V": G_V})
    _same_shapes("hybrid_ov", [("G_O", G_O, None, W_O), ("G_V", G_V, None, W_V)])
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:  # True is not a width
        raise ValueError(f"hybrid_ov: head_dim must be a positive int, got {head_dim!r}")
    if W_O.ndim < 2 or W_V.ndim < 2 or W_O.shape[-1] % head_dim or W_V.shape[-2] % head_dim:
        raise ValueError(f"hybrid_ov: W_O width {W_O.shape[-1]} and W_V height {W_V.shape[-2]} must be "
                         f"multiples of head_dim = {head_dim}")
    if W_V.shape[-1] != W_O.shape[-2] or W_V.shape[:-2] != W_O.shape[:-2]:
        raise ValueError(f"hybrid_ov: W_V must have shape (..., H_kv·d_h, {W_O.shape[-2]}) with the leading "
                         f"axes of W_O {tuple(W_O.shape)}, got {tuple(W_V.shape)}")
    heads, kv_heads = W_O.shape[-1] // head_dim, W_V.shape[-2] // head_dim
    if heads % kv_heads:
        raise ValueError(f"hybrid_ov: {heads} output heads cannot be grouped over {kv_heads} value heads")
    return heads // kv_heads


def check_joint_pair(W_Q, W_K, G_Q, G_K):
    """All four ``(..., d, d_h)`` (one head pair); returns ``G = 1``."""
    require_arrays("joint_qk", {"W_Q": W_Q, "W_K": W_K, "G_Q": G_Q, "G_K": G_K})
    _same_shapes("joint_qk", [("W_K", W_K, "W_Q", W_Q), ("G_Q", G_Q, "W_Q", W_Q), ("G_K", G_K, "W_Q", W_Q)])
    return 1
