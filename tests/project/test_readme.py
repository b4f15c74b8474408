"""Every ```python block of the README runs as written.

Each block is a fragment of a user's program, so each gets the names a user would already have (random
weights and gradients of the stated shapes, a params pytree, a training step) from :data:`PRELUDES`,
keyed by the block's first line; a block with no prelude must be self-contained. The quick start's
``halfsplit_jax`` module is written by the quick start's own command. The extension example is also
run, and its result checked, by tests/engine/test_extend.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)

#: first line of a block -> the code that defines what the block takes from the surrounding program
PRELUDES = {
    "from halfsplit_jax import halfsplit_qk, halfsplit_v": """
import numpy as np
rng = np.random.default_rng(0)
W_Q, W_K, G_Q, G_K = (rng.standard_normal((3, 16, 4), np.float32) for _ in range(4))
W_O_head, G_V, lr = rng.standard_normal((3, 16, 4), np.float32), rng.standard_normal((3, 4, 16), np.float32), 1e-2
""",
    "import optax": """
import numpy as np
rng = np.random.default_rng(0)
normal = lambda *shape: rng.standard_normal(shape, np.float32)
d, dh = 64, 2  # 32 query heads and 8 kv heads of width 2
params = {"layers": {"wq": normal(d, 32 * dh), "wk": normal(d, 8 * dh), "wo": normal(d, 32 * dh),
                     "wv": normal(8 * dh, d)}, "embed": normal(100, d), "head": normal(d, 100)}
grads = {"layers": {k: normal(*v.shape) for k, v in params["layers"].items()}, "embed": normal(100, d),
         "head": normal(d, 100)}
""",
    "train_step = checked_jit(train_step)": """
import numpy as np
import optax
from numerics.optimizer import AutoPairs, checked_jit, compositional_muon
opt = compositional_muon(1e-2, pairs=AutoPairs(heads=2))
rng = np.random.default_rng(0)
params = {"attn": {k: rng.standard_normal(s, np.float32) for k, s in
                   (("wq", (8, 4)), ("wk", (8, 4)), ("wo", (8, 4)), ("wv", (4, 8)))}}
def train_step(params, grads, state):
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state
""",
    "from numerics.optimizer import LoRAPair, MLAPair, compositional_muon, describe_pairs": """
import numpy as np
rng = np.random.default_rng(0)
normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)
zeros = lambda *shape: np.zeros(shape, np.float32)
lora_grads = {"q_proj": {"lora_A": {"weight": zeros(4, 64)}, "lora_B": {"weight": normal(64, 4)}}}
""",
}
#: what each block must leave behind (so that a block cut short, or one that stopped doing anything, fails)
AFTER = {
    "from halfsplit_jax import halfsplit_qk, halfsplit_v": "assert dW_Q.shape == W_Q.shape and dW_V.shape == G_V.shape",
    "import optax": "assert set(updates) == set(params)",
    "from numerics.optimizer import LoRAPair, MLAPair, compositional_muon, describe_pairs": """
assert not updates["q_proj"]["lora_A"]["weight"].any() and updates["q_proj"]["lora_B"]["weight"].any()
assert "1 MLA blocks" in describe_pairs(mla, [block]) and len(mla_state) == 3
""",
    "train_step = checked_jit(train_step)": """
state = opt.init(params)
bad = {"attn": {k: np.full_like(v, np.nan) if k == "wv" else v for k, v in params["attn"].items()}}
try:
    train_step(params, bad, state)
except ValueError as exc:
    assert "attn/wv" in str(exc) and "\\n" not in str(exc), exc
else:
    raise AssertionError("a NaN gradient went through checked_jit")
""",
}


def first_line(block: str) -> str:
    return block.strip().splitlines()[0].split("#")[0].strip()


def test_every_block_is_known():
    """A new README block needs a prelude here (or is the extension example, run by test_extend.py)."""
    assert len(BLOCKS) >= 3
    unknown = [first_line(b) for b in BLOCKS if first_line(b) not in PRELUDES and "derive(" not in b]
    assert unknown == []


@pytest.mark.e2e  # each block is a user's program, run as a Python process
@pytest.mark.parametrize("block", [b for b in BLOCKS if first_line(b) in PRELUDES], ids=first_line)
def test_readme_block_runs(block, tmp_path):
    if first_line(block).startswith("from halfsplit_jax"):  # the quick start's first command writes it
        out = tmp_path / "halfsplit_jax.py"
        subprocess.run([sys.executable, "-m", "derivations.halfsplit", "--emit", "jax", "--out", str(out)],
                       check=True, cwd=ROOT, timeout=300)
    program = PRELUDES[first_line(block)] + block + AFTER[first_line(block)]
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path,
                          timeout=600, check=False,
                          env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]


#: the README says what the project is, the quick start, the four uses with an example each and where the docs are;
#: history goes to CHANGELOG.md and reference to the docs
MAX_README_LINES = 250


def test_the_readme_stays_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"
