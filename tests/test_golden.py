"""The emitted modules agree with the copies saved before the engine refactor, to float64 rounding.

``tests/golden/`` holds ``python -m derivations.<rule> --emit jax|numpy`` as it was before the
interpreters and lemmas were rebuilt; every public function of a fresh emission is run on the same
random inputs as its golden copy.
"""

from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

from derivations.cli import render
from tests.conftest import load_module

GOLDEN = Path(__file__).parent / "golden"
RULES = ("halfsplit", "joint", "gqa", "sylvester", "hybrid_ov", "gauge")
D, DH, HEADS, KV = 6, 2, 4, 2


def _inputs(rng, name, target):
    """Positional arrays and keywords for each public function (shapes from its docstring)."""
    r = lambda *shape: rng.standard_normal(shape)
    tall = lambda: r(D, DH)
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
        "gqa_qk": ([r(D, HEADS * DH), r(D, KV * DH), r(D, HEADS * DH), r(D, KV * DH)], {"eps": 0.3, "head_dim": DH}),
        "joint_whitened": ([partner, r(D, 2 * DH)], {"eps": 0.3}),
        "joint_qk": ([tall(), tall(), tall(), tall()], {"eps": 0.3}),
        "hybrid_o": ([partner, r(D, 2 * DH)], {"eps": 0.3}),
        "hybrid_ov": ([r(D, HEADS * DH), r(HEADS * DH, D), r(D, HEADS * DH), r(HEADS * DH, D)],
                      {"eps": 0.3, "head_dim": DH}),
        "sylvester_qk": ([tall(), tall(), r(D, D)], {"eps": 0.3, "damping": 0.1}),
        "horizontal_projection": ([tall(), tall(), tall(), tall()], {}),
    }
    return table[name]


@pytest.mark.parametrize("target", ["numpy", "jax"])
@pytest.mark.parametrize("rule", RULES)
def test_fresh_emission_agrees_with_golden_copy(rule, target, tmp_path):
    import importlib
    golden = load_module(GOLDEN / f"{rule}_{target}.py", f"golden_{rule}_{target}")
    path = tmp_path / f"fresh_{rule}_{target}.py"
    path.write_text(render(importlib.import_module(f"derivations.{rule}").rule_module(), target))
    fresh = load_module(path, f"fresh_{rule}_{target}")
    assert set(golden.__all__) <= set(fresh.__all__)  # new functions may be added; none may go
    for name in golden.__all__:
        for damping in ((0.0, 0.05) if name != "sylvester_qk" else (0.1,)):
            args, kwargs = _inputs(np.random.default_rng(hash(name) % 2**32), name, target)
            kwargs = {**kwargs, "damping": damping}
            if target == "jax" and name != "horizontal_projection":
                kwargs["msign"] = "svd"
            want, got = golden.__dict__[name](*args, **kwargs), fresh.__dict__[name](*args, **kwargs)
            want, got = (w if isinstance(w, tuple) else (w,) for w in (want, got))
            for w, g in zip(want, got, strict=True):
                w, g = np.asarray(w, dtype=np.float64), np.asarray(g, dtype=np.float64)
                assert np.max(np.abs(w - g)) <= 1e-11 * max(1.0, np.max(np.abs(w))), (rule, target, name, damping)
