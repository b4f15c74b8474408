"""Shared fixtures: the emitted modules are generated once per session and imported from disk."""

import importlib.util
import sys

import jax
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
