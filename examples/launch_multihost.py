"""The Compositional Muon update on every device of every process: a multi-host GPU/TPU cluster, or localhost.

Start one copy of this script per process (per host on a GPU or TPU cluster); all copies run the same code.
``jax.distributed.initialize`` connects them, ``jax.devices()`` then lists every process's devices, and the
update runs on a ``(layers, heads)`` mesh of all of them, two ways (``numerics.distributed``): sharded by
GSPMD (``numerics.sharding``'s specs) and head-parallel under ``shard_map`` (each device runs the per-head
query/key rule on its own heads). Each process checks the shards it holds against the update computed
unsharded on one of its own devices, and process 0 prints the verdict over all processes.

On a cluster, pass no connection arguments: ``jax.distributed.initialize()`` finds the coordinator, the
process count and this process's id from the scheduler (SLURM, Open MPI, a TPU pod, Kubernetes)::

    srun --nodes=2 --ntasks-per-node=1 python examples/launch_multihost.py --mesh 2x8 --heads 16 --kv-heads 8

On one machine, for testing, two processes of 4 CPU devices each (what ``tests/numerics/test_distributed.py`` runs)::

    export XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu
    python examples/launch_multihost.py --coordinator localhost:12355 --num-processes 2 --process-id 0 &
    python examples/launch_multihost.py --coordinator localhost:12355 --num-processes 2 --process-id 1

``--num-processes 1`` alone runs in one process without ``jax.distributed``. Exit status: 0 when both ways
equal the unsharded update to ``--tolerance``, 1 when not, 2 for a bad declaration (one line naming the
argument and what was expected: a process count that does not divide the mesh's devices, a mesh that does
not use every device, heads or kv heads that do not divide the mesh's heads axis).
"""

from __future__ import annotations

import sys

import jax
import numpy as np
from jax.experimental import multihost_utils

from foundation.commandline import OneLineParser, UsageError, int_option, usage_error
from numerics import distributed

PROG = "launch_multihost"
#: the ranges of the integer options (foundation.commandline.int_option)
MAX_PROCESSES = 4096
MAX_TIMEOUT = 86400  # seconds: a day
MAX_SIZE = 4096
MAX_STEPS = 1000


def parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--coordinator", help="HOST:PORT of process 0 (omit on a cluster scheduler)")
    p.add_argument("--num-processes", type=int_option(1, MAX_PROCESSES, "a count"),
                   help=f"how many processes take part, 1 to {MAX_PROCESSES} (omit on a cluster scheduler)")
    p.add_argument("--process-id", type=int_option(0, MAX_PROCESSES - 1, "a process id"),
                   help="this process's id, 0 .. num-processes - 1")
    p.add_argument("--init-timeout", type=int_option(1, MAX_TIMEOUT, "seconds"), default=120,
                   help=f"seconds to wait for every process, 1 to {MAX_TIMEOUT} (default 120)")
    p.add_argument("--mesh", default="2x4", help="LAYERSxHEADS device mesh over all processes (default 2x4)")
    p.add_argument("--layers", type=int_option(1, MAX_SIZE, "a count"), default=2, help=f"1 to {MAX_SIZE} (default 2)")
    p.add_argument("--d", type=int_option(1, MAX_SIZE, "a width"), default=32,
                   help=f"model width, 1 to {MAX_SIZE} (default 32)")
    p.add_argument("--heads", type=int_option(1, MAX_SIZE, "a count"), default=8, help=f"1 to {MAX_SIZE} (default 8)")
    p.add_argument("--kv-heads", type=int_option(1, MAX_SIZE, "a count"), default=4,
                   help=f"1 to {MAX_SIZE} (default 4)")
    p.add_argument("--head-dim", type=int_option(1, MAX_SIZE, "a width"), default=4,
                   help=f"1 to {MAX_SIZE} (default 4)")
    p.add_argument("--steps", type=int_option(1, MAX_STEPS, "a count"), default=2,
                   help=f"momentum steps compared, 1 to {MAX_STEPS} (default 2)")
    p.add_argument("--qk-rule", default="half_split", help="the optimizer's qk_rule (default half_split)")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="max |difference| / max |update| allowed per parameter (default 1e-4, float32)")
    return p


def declared(args) -> tuple[int, int]:
    """The mesh, with every declaration that can be checked before connecting (a bad one: one line, exit 2)."""
    try:
        layers_axis, heads_axis = (int(n) for n in args.mesh.lower().split("x"))
    except ValueError:
        raise UsageError(f"--mesh {args.mesh!r} is not LAYERSxHEADS; expected two sizes such as 2x4") from None
    if layers_axis < 1 or heads_axis < 1:
        raise UsageError(f"--mesh {args.mesh!r} has a size below 1; expected two positive sizes such as 2x4")
    if args.num_processes is not None:
        distributed.check_processes(args.num_processes, layers_axis * heads_axis, f"--mesh {args.mesh}",
                                    "--num-processes")
        if args.process_id is not None and not 0 <= args.process_id < args.num_processes:
            raise UsageError(f"--process-id {args.process_id} is out of range; expected 0 .. {args.num_processes - 1}")
    given = [a for a in ("coordinator", "num_processes", "process_id") if getattr(args, a) is not None]
    if given and given != ["num_processes"] and len(given) != 3:
        raise UsageError("--coordinator, --num-processes and --process-id go together (or give none on a cluster "
                         f"scheduler); got only {', '.join('--' + a.replace('_', '-') for a in given)}")
    if given == ["num_processes"] and args.num_processes != 1:
        raise UsageError(f"--num-processes {args.num_processes} needs --coordinator and --process-id; expected "
                         f"--num-processes 1 alone, or all three")
    distributed.check_heads(args.heads, args.kv_heads, heads_axis, names=("--heads", "--kv-heads"))
    return layers_axis, heads_axis


def connect(args) -> None:
    """``jax.distributed.initialize``: from the arguments on localhost, from the scheduler on a cluster."""
    if args.num_processes == 1 and args.coordinator is None:
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes
    try:
        if args.coordinator is None:
            jax.distributed.initialize(initialization_timeout=args.init_timeout)
        else:
            jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id,
                                       initialization_timeout=args.init_timeout)
    except (ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"jax.distributed.initialize failed ({first}); on a machine without a cluster scheduler "
                         f"pass --coordinator HOST:PORT, --num-processes N and --process-id I") from None


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        layers_axis, heads_axis = declared(args)
        connect(args)
        if jax.device_count() != layers_axis * heads_axis:
            raise UsageError(f"--mesh {args.mesh} has {layers_axis * heads_axis} devices, the {jax.process_count()} "
                             f"process(es) hold {jax.device_count()}; expected a mesh of all {jax.device_count()} "
                             f"devices")
        result = distributed.compare(layers=args.layers, d=args.d, heads=args.heads, kv_heads=args.kv_heads,
                                     head_dim=args.head_dim, steps=args.steps, mesh_shape=(layers_axis, heads_axis),
                                     qk_rule=args.qk_rule)
    except (UsageError, distributed.DeclarationError) as exc:
        return usage_error(PROG, exc)
    me = jax.process_index()
    print(f"process {me} of {result['processes']}: {jax.local_device_count()} of {result['devices']} devices, "
          f"mesh layers={layers_axis} x heads={heads_axis}; W_Q's update sharded as {result['spec']}")
    ways = ("gspmd", "head_parallel")
    for way in ways:
        print(f"process {me}: {way}: max relative difference {result[way]:.3e} on its shards, bitwise equal: "
              f"{result['bitwise'][way]}")
    local = np.array([result[way] for way in ways])
    worst = multihost_utils.process_allgather(local).reshape(-1, len(ways)).max(axis=0) if result["processes"] > 1 \
        else local
    ok = bool(np.all(worst <= args.tolerance))
    if me == 0:
        print("all processes: " + ", ".join(f"{w} {x:.3e}" for w, x in zip(ways, worst, strict=True))
              + f" (tolerance {args.tolerance:g}); equal to the single-process update: {ok}")
    if result["processes"] > 1:
        jax.distributed.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
