"""Benchmark: one PyTorch optimizer step, ``CompositionalMuon`` against ``torch.optim.Muon``, on the CPU.

    python -m benchmarks.torch_step [--repeats N] [--mlp] [--small] [--threads N] [--json]

The parameters are one GPT-2-small attention layer stored as ``nn.Linear`` weights ``(out, in)``: ``q, k, v,
o`` of ``768 × 768`` (12 heads of 64), and with ``--mlp`` its MLP, ``c_fc (3072 × 768)`` and
``c_proj (768 × 3072)``. Three optimizers get the same parameters and the same gradients and step in
interleaved rounds (:mod:`benchmarks.interleave`):

- ``cm``: :class:`numerics.torch_optimizer.CompositionalMuon`, the pairs found from the module (half-split QK,
  hybrid OV, damping ``1e-2``), the MLP matrices by its Muon path, msign by the emitted Newton–Schulz in
  float32;
- ``muon-path``: the same optimizer without pairs: every matrix ``√max(1, fan_out/fan_in) msign(m̂)`` in
  float32 (the like-for-like reference for the arithmetic);
- ``torch-muon``: ``torch.optim.Muon``: per matrix Nesterov momentum, Newton–Schulz in **bfloat16** (its fixed
  convention: the gradient is cast before the iteration), the step scaled by ``√max(1, A/B)`` of the shape
  ``(A, B) = (out, in)`` (``adjust_lr_fn="original"``, its default).

All three run the same Newton–Schulz polynomial the same number of times: ``torch.optim.Muon`` takes one
``(a, b, c)`` for every step, so the project's optimizers get its default ``(3.4445, −4.7750, 2.0315)``
repeated :data:`NS_STEPS` times (:func:`check_same_iteration` refuses anything else). Weight decay is 0 for
all. The step times are medians over rounds; each ratio is the median over rounds of the two optimizers'
times within a round. Beside the measured ratio the flop model of :mod:`benchmarks.step`
(:func:`benchmarks.step.flop_model`, plus :func:`benchmarks.step.ns_flops` per MLP matrix) gives the floor
the ratio would reach if every flop ran at one rate: matrix products and ``eigh`` only (momentum and
elementwise work left out, bfloat16 and float32 products counted alike). ``--threads`` sets
``torch.set_num_threads`` for the run (default 1: reproducible on a shared machine) and restores it after.
The last line is ``cm/torch-muon median step time ratio: R``.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys

from benchmarks.interleave import MAX_REPEATS, MAX_THREADS, interleaved, paired_ratio
from benchmarks.step import SMALL_FACTOR, dims, flop_model, ns_flops
from foundation.commandline import (
    OneLineParser,
    UsageError,
    int_option,
    stdout_closed,
    usage_error,
    write_result,
)

if importlib.util.find_spec("torch") is not None:  # PyTorch is optional: without it main() says so in one line
    import torch
    from torch import nn

    from numerics.torch_optimizer import CompositionalMuon

PROG = "python -m benchmarks.torch_step"
NO_TORCH = ("PyTorch is not installed; install it with pip install 'optimizer-workbench[torch]' (torch==2.13.0)")
#: ``torch.optim.Muon``'s default Newton–Schulz step ``(a, b, c)`` and step count, given to every optimizer
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
LR = 0.02
LABELS = ("cm", "muon-path", "torch-muon")


def make_layer(small: bool, mlp: bool, seed: int = 0) -> nn.ModuleDict:
    """GPT-2-small's attention (``--small``: :func:`benchmarks.step.dims`'s sizes) as ``nn.Linear`` weights without
    biases, ``q, k, v, o``, and with ``mlp`` its MLP ``c_fc, c_proj``; weights from ``seed``."""
    d, heads, _, hd, f = dims("gpt2", small)
    torch.manual_seed(seed)
    layers = {"q": nn.Linear(d, heads * hd, bias=False), "k": nn.Linear(d, heads * hd, bias=False),
              "v": nn.Linear(d, heads * hd, bias=False), "o": nn.Linear(heads * hd, d, bias=False)}
    if mlp:
        layers.update(c_fc=nn.Linear(d, f, bias=False), c_proj=nn.Linear(f, d, bias=False))
    return nn.ModuleDict(layers)


def with_gradients(layer: nn.ModuleDict, seed: int = 1) -> nn.ModuleDict:
    """``layer`` with a standard normal gradient on every weight (from ``seed``: every copy gets the same)."""
    generator = torch.Generator().manual_seed(seed)
    for p in layer.parameters():
        p.grad = torch.randn(p.shape, generator=generator, dtype=p.dtype)
    return layer


def optimizers(small: bool, mlp: bool) -> dict:
    """``{label: optimizer}`` of :data:`LABELS`, each on its own copy of the same layer and gradients."""
    heads = dims("gpt2", small)[1]
    schedule = {"ns_coeffs": NS_COEFFICIENTS, "ns_steps": NS_STEPS, "heads": heads}
    found = {"cm": CompositionalMuon(with_gradients(make_layer(small, mlp)), LR, **schedule),
             "muon-path": CompositionalMuon(with_gradients(make_layer(small, mlp)), LR, pairs=None, **schedule),
             "torch-muon": torch.optim.Muon(with_gradients(make_layer(small, mlp)).parameters(), lr=LR,
                                            weight_decay=0.0, momentum=0.95, nesterov=True,
                                            ns_coefficients=NS_COEFFICIENTS, ns_steps=NS_STEPS)}
    check_same_iteration(found)
    return found


def check_same_iteration(found: dict) -> None:
    """Refuse optimizers that do not run one Newton–Schulz polynomial the same number of times: the project's
    schedule must be ``torch.optim.Muon``'s ``(a, b, c)`` repeated its ``ns_steps`` times."""
    group = found["torch-muon"].param_groups[0]
    muon = tuple(tuple(float(c) for c in group["ns_coefficients"]) for _ in range(group["ns_steps"]))
    for label in ("cm", "muon-path"):
        ours = tuple(tuple(float(c) for c in step) for step in found[label]._settings["schedule"])
        if ours != muon:
            raise ValueError(f"{label} runs the Newton-Schulz schedule {ours}, torch.optim.Muon {muon}: "
                             f"the comparison needs the same iteration")


def flop_floor(small: bool, mlp: bool) -> dict:
    """``{label: flops}`` of one step by the flop model of :mod:`benchmarks.step`: the attention matrices'
    (:func:`benchmarks.step.flop_model`, standard Newton–Schulz) plus one Newton–Schulz per MLP matrix."""
    d, heads, kv, hd, f = dims("gpt2", small)
    degree = len(NS_COEFFICIENTS)
    cm, muon = flop_model(d, heads, kv, hd, NS_STEPS, degree, "newton_schulz")
    extra = 2 * ns_flops(d, f, NS_STEPS, degree) if mlp else 0
    return {"cm": cm + extra, "muon-path": muon + extra, "torch-muon": muon + extra}


def measure(repeats: int, small: bool, mlp: bool, quiet: bool = False) -> dict:
    """``{label: [seconds per round]}``: one ``step()`` of each optimizer per round, interleaved (a progress bar
    on a terminal unless ``quiet``)."""
    found = optimizers(small, mlp)
    return interleaved({label: opt.step for label, opt in found.items()}, repeats, quiet=quiet)


def summary(times: dict, small: bool, mlp: bool) -> dict:
    """Medians, paired ratios and the flop model's ratios of :func:`measure`'s result."""
    flops = flop_floor(small, mlp)
    pairs = (("cm", "torch-muon"), ("cm", "muon-path"), ("muon-path", "torch-muon"))
    return {"median_s": {k: statistics.median(v) for k, v in times.items()},
            "ratio": {f"{a}/{b}": paired_ratio(times[a], times[b]) for a, b in pairs},
            "flops": flops, "flop_ratio": {f"{a}/{b}": flops[a] / flops[b] for a, b in pairs}}


def report(result: dict) -> str:
    """The table of :func:`main` (not ``--json``)."""
    s = result["settings"]
    width = f", f = {s['f']}" if s["mlp"] else ""
    lines = [f"one optimizer step, GPT-2-small attention{' + MLP' if s['mlp'] else ''} (d = {s['d']}, "
             f"{s['heads']} heads of {s['head_dim']}{width})"
             f"{f'; --small: d, d_h and f divided by {SMALL_FACTOR}' if s['small'] else ''}; Newton-Schulz "
             f"{s['ns_coefficients']} x {s['ns_steps']}; torch threads {s['threads']}, {s['repeats']} interleaved "
             f"repeats; torch {s['torch']}",
             f"{'optimizer':<11} {'median ms':>10} {'GF':>8} {'GF/s':>6}"]
    lines += [f"{k:<11} {1e3 * t:>10.1f} {result['flops'][k] / 1e9:>8.3f} {result['flops'][k] / 1e9 / t:>6.1f}"
              for k, t in result["median_s"].items()]
    lines.append(f"{'ratio':<22} {'measured':>8} {'flop model':>10}")
    lines += [f"{k:<22} {r:>8.3f} {result['flop_ratio'][k]:>10.3f}" for k, r in result["ratio"].items()]
    lines.append(f"cm/torch-muon median step time ratio: {result['ratio']['cm/torch-muon']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    if stdout_closed("benchmarks.torch_step"):
        return 2
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int_option(1, MAX_REPEATS, "a count"), default=9,
                   help=f"timed steps per optimizer, 1 to {MAX_REPEATS} (default 9)")
    p.add_argument("--mlp", action="store_true", help="add the layer's MLP matrices (c_fc, c_proj) to the parameters")
    p.add_argument("--small", action="store_true", help=f"divide d, d_h and f by {SMALL_FACTOR} (a quick run)")
    p.add_argument("--threads", type=int_option(1, MAX_THREADS, "a thread count"), default=1,
                   help="torch.set_num_threads for the run (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else")
    try:
        args = p.parse_args(argv)
        if "torch" not in globals():
            raise UsageError(NO_TORCH)
    except UsageError as exc:
        return usage_error("benchmarks.torch_step", exc)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        times = measure(args.repeats, args.small, args.mlp, quiet=args.json)
    finally:
        torch.set_num_threads(threads)
    d, heads, _, hd, f = dims("gpt2", args.small)
    settings = {"d": d, "heads": heads, "head_dim": hd, "f": f, "mlp": args.mlp, "small": args.small,
                "repeats": args.repeats, "threads": args.threads, "ns_coefficients": list(NS_COEFFICIENTS),
                "ns_steps": NS_STEPS, "torch": torch.__version__}
    result = {"settings": settings, **summary(times, args.small, args.mlp)}
    text = json.dumps(result, indent=1) if args.json else report(result)
    return write_result("benchmarks.torch_step", text + "\n", 0)


if __name__ == "__main__":
    sys.exit(main())
