"""The optimizer update sharded over 8 forced host devices equals the unsharded update (float32)."""

import os
import subprocess
import sys

import pytest

SCRIPT = """
import jax
from numerics import sharding
assert len(jax.devices()) == 8, jax.devices()
worst, shardings = sharding.compare(layers=2, d=32, heads=4, kv_heads={kv}, head_dim=8, steps=2, mesh_shape=(2, 4),
                                    gauge="{gauge}")
spec = shardings["wq"].spec
print(f"max relative difference {{worst:.3e}}; W_Q update sharded as {{spec}}")
assert worst < 1e-4, worst
assert tuple(spec) == ("layers", None, "heads"), spec
"""


def run(kv, gauge):
    flags = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_force_host_platform_device_count=8"]))
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")  # conftest's optimization level 0 kept: faster
    return subprocess.run([sys.executable, "-c", SCRIPT.format(kv=kv, gauge=gauge)], capture_output=True, text=True,
                          env=env, check=False, timeout=500)


@pytest.mark.e2e
def test_sharded_update_equals_unsharded_on_8_devices():
    """Grouped-query attention (4 heads over 2 kv heads), 2 layers, a 2 × 4 mesh, two momentum steps."""
    out = run(2, "none")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "max relative difference" in out.stdout
