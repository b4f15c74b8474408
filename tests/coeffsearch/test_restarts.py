"""Certified restart positions for Gram Newton–Schulz (``python -m coeffsearch restarts``).

One shared certificate (Muon's quintic in float16 with a restart after iteration 2: 38 pieces, under a
second) serves the re-check and edit tests; the command-line tests run small cases through the command's
``main`` in the test's process.
"""

import copy
import json

import numpy as np
import pytest

import coeffsearch
from coeffsearch.certify import CertificateError
from coeffsearch.restart_arithmetic import Intervals, make_step
from coeffsearch.restart_bounds import prove
from coeffsearch.restart_certificate import recheck
from coeffsearch.restart_model import Model, RestartError, Uncertifiable
from coeffsearch.restarts import search
from tests.inprocess import run_command

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

MUON = coeffsearch.get("muon").steps


@pytest.fixture(scope="module")
def muon_fp16():
    """The certificate of Muon in float16 with its restart after iteration 2 (what --restarts 1 chooses)."""
    model = Model("float16")
    chosen, tried = search("muon", MUON, model, restarts=1)
    return chosen, tried, model


def run(*args):
    """``python -m coeffsearch ARGS``, its ``main`` called in this process (pytest-timeout bounds it)."""
    return run_command("coeffsearch", *args)


def test_the_search_certifies_muon_fp16_with_one_restart_and_only_then(muon_fp16):
    chosen, tried, model = muon_fp16
    assert chosen.positions == (2,)
    cert = chosen.certificate
    assert float(cert["max_abs_q"]["bound"]) < 2 ** 11 and float(cert["deviation"]["bound"]) < 1
    assert cert["partition"][0] == "0.0" and cert["partition"][-1] == "1.0"
    with pytest.raises(Uncertifiable, match=r"no restart in float16 .*bound \(a\) fails: at σ = "):
        search("muon", MUON, model, restarts=0)


def _model_instance(steps, positions, u, delta, sigma, rng):
    """An independent float64 run of the stated model: every product rounded by its own random θ = ±u,
    a spurious eigenvalue of −δ or 0 at each Gram formation. Returns ``(max |Q|, x_T)``."""
    def theta():
        return rng.choice((-u, u))

    def spurious():
        return rng.choice((-delta, 0.0))

    coeffs = [tuple(float(c) for c in s) for s in steps]
    x, q_acc, q_max = sigma, None, 0.0
    r = x * x * (1 + theta()) + spurious()
    for t, (a, b, c) in enumerate(coeffs):
        if t in positions:
            x = q_acc * x * (1 + theta())
            r = x * x * (1 + theta()) + spurious()
            q_acc = None
        q = a + (c * r + b) * r * (1 + theta())
        q_acc = q if q_acc is None else q_acc * q * (1 + theta())
        q_max = max(q_max, abs(q_acc))
        if t + 1 < len(coeffs) and t + 1 not in positions:
            r = q * (r * q * (1 + theta())) * (1 + theta())
    return q_max, q_acc * x * (1 + theta())


def test_no_model_instance_exceeds_the_certified_bounds(muon_fp16):
    chosen, _, model = muon_fp16
    cert, rng = chosen.certificate, np.random.default_rng(1)
    u, delta = float(model.u), float(cert["spurious_eigenvalue"])
    worst_q, worst_dev = 0.0, 0.0
    for sigma in np.concatenate([[0.0, 1e-4, 1e-3], np.linspace(1e-3, 1, 200)]):
        for _ in range(20):
            q_max, x_t = _model_instance(MUON, chosen.positions, u, delta, sigma, rng)
            worst_q = max(worst_q, q_max)
            if sigma >= 1e-3:
                worst_dev = max(worst_dev, abs(x_t - 1))
    assert worst_q <= float(cert["max_abs_q"]["bound"])
    assert worst_dev <= float(cert["deviation"]["bound"])
    assert worst_q > 0.9 * float(cert["max_abs_q"]["bound"])  # and the bound is not loose


def test_a_proof_without_the_rounding_terms_is_caught_by_the_model_instances(muon_fp16, monkeypatch):
    """Planted: the proof forgets Horner's rounding and the spurious eigenvalue (δ = 0) while the instances
    keep them; the independent instances then exceed the 'certified' bound."""
    chosen, _, model = muon_fp16
    monkeypatch.setattr(Intervals, "horner_term", lambda self, step, r, theta, instance: self.symmetric(0))
    planted = prove([make_step(s) for s in MUON], chosen.positions, Model("float16", "0"),
                      chosen.certificate["partition"])
    rng = np.random.default_rng(2)
    u, delta = float(model.u), float(chosen.certificate["spurious_eigenvalue"])
    worst = max(_model_instance(MUON, chosen.positions, u, delta, s, rng)[0]
                for s in np.linspace(0, 0.01, 50) for _ in range(5))
    assert worst > float(planted["max_abs_q"]["bound"])


def test_recheck_accepts_the_certificate_and_rejects_every_edit(muon_fp16):
    cert = muon_fp16[0].certificate
    assert recheck(copy.deepcopy(cert)) == cert
    edits = {
        "a bound": lambda c: c["max_abs_q"].update(bound="40"),
        "the deviation": lambda c: c["deviation"].update(bound="0.5"),
        "the growth factor": lambda c: c.update(growth="0.5"),
        "a partition point": lambda c: c["partition"].pop(5),
        "a coefficient": lambda c: c["schedule"][0].__setitem__(0, "3.4446"),
        "the dtype": lambda c: c.update(dtype="bfloat16"),
    }
    for what, edit in edits.items():
        bad = copy.deepcopy(cert)
        edit(bad)
        with pytest.raises(CertificateError):
            recheck(bad)
            pytest.fail(f"an edit of {what} was accepted")


def test_removing_the_restart_the_certificate_needs_fails_the_recheck(muon_fp16):
    bad = copy.deepcopy(muon_fp16[0].certificate)
    bad["restarts"] = []
    with pytest.raises(CertificateError, match="cannot be certified.*bound \\(a\\)"):
        recheck(bad)


def test_the_published_choice_is_reproduced_in_float32_and_ranked_by_the_deviation_then_q():
    """Polar Express 5 in float32 with one restart: every position certifies with the same deviation (within
    1 %), and the smallest max |Q| is after iteration 2, the published position."""
    chosen, tried = search("polar-express-5", coeffsearch.get("polar-express-5").steps, Model("float32"), 1)
    assert chosen.positions == (2,)
    assert all(c.certificate for c in tried)
    assert chosen.max_q == min(c.max_q for c in tried)


@pytest.mark.parametrize("args,needle", [
    (["--dtype", "float16", "--at", "7"], "restart position 7 is outside the schedule"),
    (["--dtype", "float16", "--restarts", "9"], "9 restarts but a 5-step schedule has room for at most 4"),
    (["--dtype", "float64"], "argument --dtype: invalid choice"),
    (["--dtype", "float16", "--restarts", "0"], "cannot be certified: bound (a) fails: at σ ="),
    (["--dtype", "float16", "--at", "2,x"], "argument --at"),
    (["--dtype", "float16", "--restarts", "-1"], "argument --restarts"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    out = run("restarts", "muon", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and needle in out.stderr and "Traceback" not in out.stderr


def test_the_command_writes_a_certificate_that_certify_rechecks(tmp_path, muon_fp16):
    path = tmp_path / "muon16.json"
    out = run("restarts", "muon", "--dtype", "float16", "--restarts", "1")
    assert out.returncode == 0, out.stderr
    assert "<- chosen" in out.stdout and "certified: restarts after iterations 2" in out.stdout
    out = run("restarts", "muon", "--dtype", "float16", "--restarts", "1", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == muon_fp16[0].certificate, out.stderr
    assert run("restarts", "muon", "--dtype", "float16", "--restarts", "1", "--json", "--out", str(path)).stdout == ""
    assert json.loads(path.read_text()) == muon_fp16[0].certificate
    ok = run("certify", str(path))
    assert ok.returncode == 0 and "re-checked" in ok.stdout
    edited = json.loads(path.read_text())
    edited["deviation"]["bound"] = "0.1"
    path.write_text(json.dumps(edited))
    bad = run("certify", str(path))
    assert bad.returncode == 1 and "FAILED" in bad.stdout and "deviation" in bad.stdout
    del edited["partition"]
    path.write_text(json.dumps(edited))
    broken = run("certify", str(path))
    assert broken.returncode == 2 and "partition" in broken.stderr and "Traceback" not in broken.stderr


def test_a_search_too_large_is_refused_before_any_work():
    long_schedule = MUON * 4  # 20 steps: 171 sets of two positions
    with pytest.raises(RestartError, match="171 position sets, more than the 64 searched; name the positions"):
        search("muon20", long_schedule, Model("float32"), restarts=2)
