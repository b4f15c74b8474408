"""The run's one XLA compilation cache (tests/conftest.py): the test processes and their subprocesses share it."""

import os
import subprocess
import sys
import textwrap
import uuid

import jax
import jax.numpy as jnp
import pytest

CACHE_HITS = "/jax/compilation_cache/cache_hits"


@pytest.mark.skipif(os.environ.get("WORKBENCH_TEST_COMPILE_CACHE") == "0", reason="turned off for this run")
def test_a_subprocess_loads_what_this_process_compiled():
    cache = os.environ["JAX_COMPILATION_CACHE_DIR"]
    assert jax.config.jax_compilation_cache_dir == cache and os.path.isdir(cache)
    salt = 1.0 + uuid.uuid4().int % 10**9 / 10**10  # a program no other test compiles
    jax.jit(lambda x: jnp.sin(x) * salt).lower(jnp.ones(3)).compile()
    code = textwrap.dedent(f"""
        import jax, jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
        hits = []
        jax.monitoring.register_event_listener(lambda event, **kwargs: hits.append(event))
        x = jnp.ones(3)
        before = hits.count({CACHE_HITS!r})
        jax.jit(lambda x: jnp.sin(x) * {salt!r}).lower(x).compile()
        print(hits.count({CACHE_HITS!r}) - before)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr[-2000:]
