"""Shared fixtures: the emitted modules are generated once per session and imported from disk."""

import importlib.util
import os
import sys

# XLA's CPU compiler spends most of a compile in LLVM's optimisation passes, and the suite compiles
# hundreds of small programs whose run time is negligible: at backend optimisation level 0 they
# compile about twice as fast (the optimizer's update on a small model: 2.3-3.2 s against 5.0-5.8 s).
# The operations and their IEEE semantics are the same (no fast-math at any level); the benchmarks
# and the docs build run at XLA's default level. Set before JAX starts its backend; subprocesses inherit it.
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))

import jax  # noqa: E402
import pytest

jax.config.update("jax_enable_x64", True)


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def halfsplit_source():
    from derivations import halfsplit
    from derivations.cli import render
    return render(halfsplit.rule_module(), "jax")


@pytest.fixture(scope="session")
def halfsplit_jax(tmp_path_factory, halfsplit_source):
    path = tmp_path_factory.mktemp("emitted") / "halfsplit_jax.py"
    path.write_text(halfsplit_source)
    return load_module(path, "halfsplit_jax")


@pytest.fixture(scope="session")
def halfsplit_numpy(tmp_path_factory):
    from derivations import halfsplit
    from derivations.cli import render
    path = tmp_path_factory.mktemp("emitted") / "halfsplit_numpy.py"
    path.write_text(render(halfsplit.rule_module(), "numpy"))
    return load_module(path, "halfsplit_numpy")
