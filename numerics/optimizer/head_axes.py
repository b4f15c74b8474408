"""Muon's matrix view of the attention kernels with head axes that are in no pair.

flax linen ``nn.MultiHeadDotProductAttention`` and flax nnx ``nnx.MultiHeadAttention`` store ``DenseGeneral``
kernels ``query``/``key``/``value (..., d, H, d_h)`` and ``out (..., H, d_h, d)``. A projection in no pair
(``pairs=None``; the O/V of a block whose ``out`` maps to another width; a pair declared for only some of
them) is one linear map ``d → H·d_h`` (``H·d_h → d``), so Muon orthogonalizes it as that matrix, as
``optax.contrib.muon`` does given ``MuonDimensionNumbers(reduction_axis=0, output_axis=(1, 2))``
(``((0, 1), 2)`` for ``out``), not head slice by head slice. The blocks are found as ``pairs="auto"`` finds
them (sibling names and the head-axes shapes, :func:`~numerics.optimizer.framework_pairs.head_axes_counts`;
shapes that also read as stacked 2-D matrices are left as they are); leading (layer) axes stay batched.
"""

from __future__ import annotations

from typing import Any

from optax.contrib import MuonDimensionNumbers

from .framework_pairs import head_axes_counts
from .pairs import auto_layouts, named_leaves

#: ``query``, ``key``, ``value (..., d, H, d_h)``: rows ``d``, columns ``H·d_h``
PROJECTION_AXES = MuonDimensionNumbers(reduction_axis=-3, output_axis=(-2, -1))
#: ``out (..., H, d_h, d)``: rows ``H·d_h``, columns ``d``
OUTPUT_AXES = MuonDimensionNumbers(reduction_axis=(-3, -2), output_axis=-1)


def head_axes_dimension_numbers(params: Any) -> dict[str, MuonDimensionNumbers]:
    """``{path: MuonDimensionNumbers}`` of every attention kernel with head axes in ``params`` (the default
    ``weight_dimension_numbers`` of :func:`~numerics.optimizer.transform.scale_by_compositional_muon`)."""
    leaves = named_leaves(params)
    out = {}
    for layout in auto_layouts(leaves):
        arrays = [leaves[p] for p in layout.paths]
        if head_axes_counts(*arrays) is None or len({x.shape[:-2] for x in arrays}) == 1:
            continue  # not head axes, or shapes that also read as stacked 2-D matrices: not guessed
        query, key, value, output = layout.paths
        out.update({query: PROJECTION_AXES, key: PROJECTION_AXES, value: PROJECTION_AXES, output: OUTPUT_AXES})
    return out
