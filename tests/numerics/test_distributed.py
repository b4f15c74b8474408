"""The update across processes and head-parallel: ``numerics.distributed`` and
``examples/launch_multihost.py``.

One test (run by ``.ci/run`` after the suite, like the docs-site tests: set ``WORKBENCH_MULTIPROCESS=1``)
starts the launch script twice, as two ``jax.distributed`` processes of 4 CPU devices each on
localhost (gloo collectives), and reads what both printed: the update sharded over all 8 devices by GSPMD,
and head-parallel under ``shard_map``, each equal to the update computed unsharded in one process. The
processes are killed when they outlive the time limit. The other tests run in this process: bad
declarations (one line, exit 2, before any connection), the one non-finite decision for all devices
(``jax.vmap`` with an axis name stands in for the mesh axis) and the state's specs.

Tolerance: ``max|Δ| / max|update| ≤ 1e-4`` per parameter, in float32. The spread update is not bitwise the
unsharded one: XLA compiles each device's smaller blocks with other dot ops and summation orders, and the
O side's one spectral sign sums ``X Xᵀ`` over devices; Newton–Schulz amplifies that float32 rounding to about
``2e-5`` (measured); a wrong split (a rule given a device's heads where it needs all) differs by 0.1 to 1.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from numerics import distributed
from numerics.optimizer import compositional_muon, skip_nonfinite_updates

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "launch_multihost.py"
#: seconds both processes may take together (about 100 s alone; several times that on a loaded 2-core machine)
LIMIT = 540


def load_script():
    spec = importlib.util.spec_from_file_location("launch_multihost", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not os.environ.get("WORKBENCH_MULTIPROCESS"),
                    reason="end to end across two processes (about 100 s of CPU): .ci/run runs it after the suite "
                           "with WORKBENCH_MULTIPROCESS=1")
def test_two_processes_equal_the_single_process_update(tmp_path):
    """2 processes x 4 CPU devices, a 2 x 4 (layers, heads) mesh, 8 heads over 4 kv heads, two momentum steps."""
    flags = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_force_host_platform_device_count=4"]))
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    command = [sys.executable, str(SCRIPT), "--coordinator", f"localhost:{free_port()}", "--num-processes", "2",
               "--init-timeout", "300"]
    procs, outs = [], []
    deadline = time.monotonic() + LIMIT
    try:
        for i in range(2):
            with open(tmp_path / f"out{i}", "w") as out, open(tmp_path / f"err{i}", "w") as err:
                procs.append(subprocess.Popen([*command, "--process-id", str(i)], cwd=ROOT, env=env, stdout=out,
                                              stderr=err, text=True))
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, p in enumerate(procs):
        outs.append((tmp_path / f"out{i}").read_text())
        errors = "\n".join(ln for ln in (tmp_path / f"err{i}").read_text().splitlines() if "[Gloo]" not in ln)
        assert p.returncode == 0, f"process {i} exited {p.returncode}:\n{outs[i][-2000:]}\n{errors[-3000:]}"
        assert f"process {i} of 2: 4 of 8 devices, mesh layers=2 x heads=4; W_Q's update sharded as " \
               "('layers', None, 'heads')" in outs[i], outs[i]
        for way in ("gspmd", "head_parallel"):
            found = re.search(rf"process {i}: {way}: max relative difference (\S+) on its shards", outs[i])
            assert found and float(found[1]) <= 1e-4, outs[i]
    verdict = re.search(r"all processes: gspmd (\S+), head_parallel (\S+) \(tolerance 0.0001\); equal to the "
                        r"single-process update: True", outs[0])
    assert verdict and max(float(verdict[1].rstrip(",")), float(verdict[2])) <= 1e-4, outs[0]


@pytest.mark.parametrize("argv, message", [
    (["--coordinator", "localhost:1", "--num-processes", "3", "--process-id", "0"],
     "--num-processes 3 does not divide the 8 devices of --mesh 2x4; expected one of [1, 2, 4, 8]"),
    (["--num-processes", "1", "--heads", "6", "--kv-heads", "2"],
     "--heads 6 is not a multiple of the mesh's 'heads' axis size 4; expected --heads 4, 8, 12, ..."),
    (["--num-processes", "1", "--heads", "8", "--kv-heads", "2"],
     "--kv-heads 2 is not a multiple of the mesh's 'heads' axis size 4; expected --kv-heads 4, 8, 12, ..."),
    (["--num-processes", "1", "--mesh", "1x4", "--heads", "12", "--kv-heads", "8"],
     "--kv-heads 8 does not divide --heads 12; expected a divisor of 12"),
    (["--num-processes", "1", "--mesh", "2by4"], "--mesh '2by4' is not LAYERSxHEADS; expected two sizes such as 2x4"),
    (["--num-processes", "2"], "--num-processes 2 needs --coordinator and --process-id"),
    (["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "2"],
     "--process-id 2 is out of range; expected 0 .. 1"),
    (["--num-processes", "1"], "--mesh 2x4 has 8 devices, the 1 process(es) hold 1; expected"),
])
def test_bad_declarations_are_one_line_and_exit_2(capsys, argv, message):
    """Refused before connecting (the last after: this process holds 1 device), never a traceback."""
    assert load_script().main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1, out.err
    assert out.err.startswith("launch_multihost: error: ") and message in out.err, out.err


def test_one_device_overflow_skips_the_step_on_every_device():
    """A step that overflows on one device only (its heads) is skipped on all, as the unsharded update skips it.

    Each of two devices runs the real non-finite guard on its own block (``vmap`` over an axis named like the
    mesh's); the gradient of device 0 overflows ``3e38 x`` in float32. Without the shared decision (the plain
    vmapped update, kept here as the planted mistake) device 1 applies its step and moves its momentum."""
    opt = skip_nonfinite_updates(optax.trace(decay=0.9), optax.scale(3e38))
    grads = {"w": jnp.array([[10.0, 10.0], [1e-3, 1e-3]], jnp.float32)}
    state = jax.vmap(opt.init)({"w": jnp.zeros((2, 2), jnp.float32)})
    whole = {"w": grads["w"].reshape(1, 4)}
    whole_updates, whole_state = opt.update(whole, opt.init(jax.tree.map(jnp.zeros_like, whole)))
    assert not bool(whole_state[-1].last_finite) and not np.any(np.asarray(whole_updates["w"]))

    def guarded(g, s):
        return distributed._global_guard(lambda g, s, p: opt.update(g, s, p), ("heads",))(g, s, None)

    updates, new = jax.vmap(guarded, axis_name="heads")(grads, state)
    assert not np.any(np.asarray(updates["w"])) and not np.any(np.asarray(new[0].trace["w"]))
    assert np.asarray(new[-1].last_finite).tolist() == [False, False]
    assert np.asarray(new[-1].notfinite_count).tolist() == [1, 1] == np.asarray(new[-1].total_notfinite).tolist()
    planted_updates, planted = jax.vmap(opt.update)(grads, state)
    assert np.asarray(planted[-1].last_finite).tolist() == [False, True] and np.any(np.asarray(planted[0].trace["w"]))


def test_state_specs_follow_the_parameters():
    """The momentum of each parameter is split like the parameter; counts and the guard are whole."""
    params = {k: jax.ShapeDtypeStruct(v.shape, v.dtype)
              for k, v in distributed.host_problem(2, 8, 4, 2, 2, steps=0)[0].items()}
    specs = distributed.head_specs()
    opt = compositional_muon(0.02, pairs=[distributed.QKPair("wq", "wk", 4, 2), distributed.OVPair("wo", "wv", 4, 2)])
    state = distributed.state_specs(jax.eval_shape(opt.init, params), specs)
    assert state[1].inner_states["cm"].inner_state[0].mu == specs
    assert state[1].inner_states["cm"].inner_state[0].count == P() and state[-1].last_finite == P()
    assert distributed.head_specs(None)["wq"] == P(None, None, "heads") and specs["gain"] == P()


def test_head_parallel_refuses_an_optimizer_without_the_guard():
    opt = optax.sgd(0.1)
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match="head_parallel: make_optimizer must return a compositional_muon optimizer"):
        distributed._global_guard(opt.update, ("heads",))(params, opt.init(params), params)
