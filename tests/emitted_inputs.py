"""Example calls of every public emitted function: positional arrays and keywords, small shapes.

Shared by the golden-copy test and the non-finite propagation test. ``target="numpy"`` gets the
dense block-diagonal partner where the JAX function takes the blocks.
"""

import scipy.linalg

D, DH, HEADS, KV = 6, 2, 4, 2


def example_call(rng, name, target="jax"):
    """``(args, kwargs)`` for the public function ``name`` (shapes from its docstring)."""
    def r(*shape):
        return rng.standard_normal(shape)
    def tall():
        return r(D, DH)
    blocks = r(2, D, DH)
    dense = scipy.linalg.block_diag(*blocks)
    partner = blocks if target == "jax" else dense
    table = {
        "halfsplit_qk": ([tall(), tall(), tall(), tall()], {"eps": 0.3}),
        "isotropic_qk": ([tall(), tall(), tall(), tall()], {"eps": 0.3}),
        "halfsplit_v": ([tall(), r(DH, D)], {"eps": 0.3}),
        "hybrid_v": ([tall(), r(DH, D)], {"eps": 0.3}),
        "gqa_query": ([tall(), tall()], {"eps": 0.3}),
        "gqa_key": ([r(2 * D, DH), tall()], {"eps": 0.3, "group_size": 2}),
        "gqa_value": ([r(2 * D, DH), r(DH, D)], {"eps": 0.3, "group_size": 2}),
        "gqa_isotropic_query": ([tall(), tall()], {"eps": 0.3}),
        "gqa_isotropic_key": ([r(2 * D, DH), tall()], {"eps": 0.3, "group_size": 2}),
        "gqa_qk": ([r(D, HEADS * DH), r(D, KV * DH), r(D, HEADS * DH), r(D, KV * DH)], {"eps": 0.3, "head_dim": DH}),
        "joint_whitened": ([partner, r(D, 2 * DH)], {"eps": 0.3}),
        "joint_qk": ([tall(), tall(), tall(), tall()], {"eps": 0.3}),
        "hybrid_o": ([partner, r(D, 2 * DH)], {"eps": 0.3}),
        "hybrid_ov": ([r(D, HEADS * DH), r(HEADS * DH, D), r(D, HEADS * DH), r(HEADS * DH, D)],
                      {"eps": 0.3, "head_dim": DH}),
        "sylvester_qk": ([tall(), tall(), r(D, D)], {"eps": 0.3, "damping": 0.1}),
        "horizontal_projection": ([tall(), tall(), tall(), tall()], {}),
        "balance_qk": ([r(2 * D, DH), tall()], {}),
        "lora_halfsplit": ([tall(), r(DH, D - 1), tall(), r(DH, D - 1)], {"eps": 0.3}),
        "lora_horizontal_projection": ([tall(), r(DH, D - 1), tall(), r(DH, D - 1)], {}),
        "mla_query_up": ([r(DH, D), r(3, D), r(DH, 3)], {"eps": 0.3}),
        "mla_key_up": ([r(DH, D), r(3, D), r(DH, 3)], {"eps": 0.3}),
        "mla_value_up": ([tall(), r(3, D), r(DH, 3)], {"eps": 0.3}),
        "mla_output": ([r(DH, D), tall()], {"eps": 0.3}),
        "mla_query_down": ([r(2 * D, 3), r(3, D)], {"eps": 0.3}),
        "mla_kv_down": ([r(2 * D, 3), r(3, D)], {"eps": 0.3}),
        "mla_query_uncompressed": ([r(DH, D), r(DH, D)], {"eps": 0.3}),
        "mla_key_up_uncompressed": ([r(DH, D), r(3, D), r(DH, 3)], {"eps": 0.3}),
        "mla_kv_down_uncompressed": ([r(2 * D, 3), r(3, D)], {"eps": 0.3}),
        "tied_embedding": ([r(2 * D, DH + 2)], {"eps": 0.3}),
    }
    return table[name]
