"""The PyTorch step benchmark ``benchmarks.torch_step``: its JSON document and floor, its usage errors, and the
fairness of its comparison (the timings are never asserted)."""

import contextlib
import io
import json

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the PyTorch optimizer is optional)")

from benchmarks import step, torch_step  # noqa: E402
from benchmarks.interleave import interleaved  # noqa: E402
from foundation import commandline  # noqa: E402
from tests.inprocess import run_case  # noqa: E402
from tests.project.test_progress import FakeTerminal  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """The direct optimizer steps here on one thread, as the command runs them: on a loaded 2-core machine
    OpenMP's spinning threads make a tiny step take seconds."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def small_run():
    """One ``--small --repeats 1 --json`` run in this process (torch's thread count set to 3 before it, not the
    command's 1), and the thread count before and after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    out, err = io.StringIO(), FakeTerminal()  # stderr a terminal: a progress bar would show at once
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(commandline, "PROGRESS_DELAY", 0.0)
        rc = torch_step.main(["--small", "--repeats", "1", "--json"])
    after = torch.get_num_threads()
    torch.set_num_threads(threads)
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue(), "escaped": ""}, 3, after


def test_json_is_the_whole_stdout_with_times_ratios_and_the_flop_floor(small_run):
    row, _, _ = small_run
    assert row["rc"] == 0 and not row["escaped"], row["stderr"][-2000:]
    assert row["stderr"] == ""  # no progress bar with --json, though stderr is a terminal
    doc = json.loads(row["stdout"])  # stdout is one JSON document and nothing else
    assert set(doc) == {"settings", "median_s", "ratio", "flops", "flop_ratio"}
    assert set(doc["median_s"]) == set(torch_step.LABELS) and all(t > 0 for t in doc["median_s"].values())
    pairs = {"cm/torch-muon", "cm/muon-path", "muon-path/torch-muon"}
    assert set(doc["ratio"]) == pairs == set(doc["flop_ratio"]) and all(r > 0 for r in doc["ratio"].values())
    s = doc["settings"]
    assert (s["d"], s["heads"], s["head_dim"], s["threads"], s["ns_steps"], s["mlp"]) == (96, 12, 8, 1, 5, False)
    # the floor is benchmarks.step's flop model of the attention matrices at the run's sizes
    cm, muon = step.flop_model(96, 12, 12, 8, 5, 3, "newton_schulz")
    assert doc["flops"] == {"cm": cm, "muon-path": muon, "torch-muon": muon}
    assert doc["flop_ratio"]["cm/torch-muon"] == pytest.approx(cm / muon)


def test_the_rounds_show_a_bar_on_a_terminal_unless_quiet(monkeypatch):
    """Planted: the same rounds without ``quiet`` (what ``--json`` must not show)."""
    monkeypatch.setattr(commandline, "PROGRESS_DELAY", 0.0)
    for quiet, expected in ((False, "timing a"), (True, "")):
        err = FakeTerminal()
        with contextlib.redirect_stderr(err):
            interleaved({"a": lambda: None}, 2, warmup=0, quiet=quiet)
        assert (expected in err.getvalue()) if expected else err.getvalue() == ""


def test_the_thread_count_is_restored_after_the_run(small_run):
    _, before, after = small_run
    assert after == before


def test_the_mlp_adds_one_newton_schulz_per_matrix_to_every_optimizer():
    d, _, _, _, f = step.dims("gpt2", small=True)
    extra = 2 * step.ns_flops(d, f, 5, 3)
    with_mlp, without = torch_step.flop_floor(True, True), torch_step.flop_floor(True, False)
    assert all(with_mlp[k] - without[k] == extra for k in torch_step.LABELS)
    assert [n for n, _ in torch_step.make_layer(True, True).named_parameters()] == [
        "q.weight", "k.weight", "v.weight", "o.weight", "c_fc.weight", "c_proj.weight"]


@pytest.mark.parametrize("argv", [["--bogus"], ["--repeats", "0"], ["--threads", "0"], ["--repeats", "1.5"]])
def test_a_bad_option_is_one_line_and_exit_2(argv):
    row = run_case("benchmarks.torch_step", argv)
    assert row["rc"] == 2 and not row["stdout"] and not row["escaped"]
    assert len(row["stderr"].splitlines()) == 1 and "error: " in row["stderr"]


def first_update(optimizer, layer_params):
    before = [p.detach().clone() for p in layer_params]
    optimizer.step()
    return [p.detach() - b for p, b in zip(layer_params, before, strict=True)]


def test_torch_muon_and_the_muon_path_take_the_same_first_step_up_to_bfloat16():
    """What makes the comparison fair: on the same weights and gradients the first step of ``torch.optim.Muon``
    (Newton–Schulz in bfloat16) is the project's Muon path's (float32) to bfloat16 accuracy: the same momentum
    direction, iteration and shape scaling. Planted: ``torch.optim.Muon`` with one Newton–Schulz step fewer."""
    found = torch_step.optimizers(small=True, mlp=True)
    ours = first_update(found["muon-path"], found["muon-path"].param_groups[0]["params"])

    def deviation(muon):
        theirs = first_update(muon, muon.param_groups[0]["params"])
        return max(float((a - b).norm() / b.norm()) for a, b in zip(theirs, ours, strict=True))

    assert deviation(found["torch-muon"]) < 0.03
    layer = torch_step.with_gradients(torch_step.make_layer(True, True))
    fewer = torch.optim.Muon(layer.parameters(), lr=torch_step.LR, weight_decay=0.0,
                             ns_coefficients=torch_step.NS_COEFFICIENTS, ns_steps=torch_step.NS_STEPS - 1)
    assert deviation(fewer) > 0.1


def test_a_different_newton_schulz_iteration_is_refused():
    """Planted: ``torch.optim.Muon`` with 4 steps, and the project's optimizer with its own default schedule."""
    found = torch_step.optimizers(small=True, mlp=False)
    layer = torch_step.with_gradients(torch_step.make_layer(True, False))
    fewer = torch.optim.Muon(layer.parameters(), lr=0.02, ns_coefficients=torch_step.NS_COEFFICIENTS, ns_steps=4)
    with pytest.raises(ValueError, match="same iteration"):
        torch_step.check_same_iteration({**found, "torch-muon": fewer})
    polar = torch_step.CompositionalMuon(layer, 0.02, heads=12)  # polar-express-5: other coefficients per step
    with pytest.raises(ValueError, match="cm runs the Newton-Schulz schedule"):
        torch_step.check_same_iteration({**found, "cm": polar})


def test_without_torch_the_command_says_so_in_one_line(monkeypatch):
    """Planted: the module as it is where PyTorch is not installed (its guarded imports not done)."""
    monkeypatch.delitem(vars(torch_step), "torch")
    row = run_case("benchmarks.torch_step", ["--small"])
    assert row["rc"] == 2 and not row["stdout"] and not row["escaped"]
    assert row["stderr"].splitlines() == [f"benchmarks.torch_step: error: {torch_step.NO_TORCH}"]
