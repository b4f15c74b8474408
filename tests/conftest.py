"""Shared fixtures: the emitted modules are generated once per session and imported from disk."""

import importlib.util
import os
import shutil
import sys
import tempfile

import pytest

# XLA's CPU compiler spends most of a compile in LLVM's optimisation passes, and the suite compiles
# hundreds of small programs whose run time is negligible: at backend optimisation level 0 they
# compile about twice as fast (the optimizer's update on a small model: 2.3-3.2 s against 5.0-5.8 s).
# The operations and their IEEE semantics are the same (no fast-math at any level); the benchmarks
# and the docs build run at XLA's default level. Set before JAX starts its backend; subprocesses inherit it.
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))

# One XLA compilation cache for the whole run (a directory per pytest-xdist worker): the planted copies of the
# emitted modules (loaded again from their files: the same programs) and every subprocess a test starts compile
# many of the same programs; each is compiled once and loaded from the cache after that (a compile of the emitted
# update is 1-3 s, a load milliseconds). A compiled program is what XLA would compile again: the cache key is
# the program, the compile options, the XLA flags and the jaxlib version. The directory is made by the process
# that imports this file first (the pytest-xdist controller, or the single process with -n 0), inherited
# through the environment by the workers and subprocesses, and removed when that process ends
# (pytest_unconfigure). WORKBENCH_TEST_COMPILE_CACHE=0 turns it off; a JAX_COMPILATION_CACHE_DIR set by the
# user is used as it is (and kept).
CACHE_OWNER = "WORKBENCH_TEST_COMPILE_CACHE_OWNER"
if os.environ.get("WORKBENCH_TEST_COMPILE_CACHE", "1") != "0" and not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="workbench-xla-cache-")
    os.environ[CACHE_OWNER] = str(os.getpid())
elif os.environ.get(CACHE_OWNER) and os.environ.get("PYTEST_XDIST_WORKER"):
    # each pytest-xdist worker keeps its own directory inside the run's (JAX writes entries without a lock:
    # two workers writing one entry at once could make a reader warn on stderr); its subprocesses share it
    worker_dir = os.path.join(os.environ["JAX_COMPILATION_CACHE_DIR"], os.environ["PYTEST_XDIST_WORKER"])
    os.makedirs(worker_dir, exist_ok=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = worker_dir
if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # the suite's compiles are short

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)


def pytest_unconfigure(config):
    """Remove this run's compilation cache (only the process that made it does)."""
    if os.environ.get(CACHE_OWNER) == str(os.getpid()):
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


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


def e2e_left_out(markexpr: str, items: list) -> tuple[list, list]:
    """``(kept, deselected)``: an end-to-end check runs only where the mark expression names ``e2e`` (``-m e2e``,
    ``.ci/run``); ``pytest -m fast`` leaves out the e2e checks of a module marked fast."""
    if "e2e" in markexpr:
        return items, []
    return ([i for i in items if not i.get_closest_marker("e2e")],
            [i for i in items if i.get_closest_marker("e2e")])


def pytest_collection_modifyitems(config, items):
    kept, deselected = e2e_left_out(config.option.markexpr or "", items)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
