"""Coefficient search: published lists reproduced, certificates rigorous, band search honest."""

import json

import mpmath
import numpy as np
import pytest

import coeffsearch
from coeffsearch.band import image, max_slope, narrowest_band
from coeffsearch.certify import CertificateError, certify, decimal_down, decimal_up, recheck
from coeffsearch.validate import validate
from foundation.minimax import cubic_closed_form, greedy_schedule, limit_polynomial, remez_step
from foundation.polynomial import ScheduleDoc, ScheduleError, odd_eval
from tests.inprocess import run_command

NANOGPT = [(8.156554524902461, -22.48329292557795, 15.878769915207462),
           (4.042929935166739, -2.808917465908714, 0.5000178451051316),
           (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
           (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
           (2.3465413258596377, -1.7097828382687081, 0.42323551169305323)]


def floats(doc):
    return [tuple(float(c) for c in s) for s in doc.steps]


def test_polar_express_8_steps_first_and_last():
    got = floats(greedy_schedule("1e-3", 8, cushion="0.02407327424182761"))
    assert np.allclose(got[0], (8.28721201814563, -23.595886519098837, 17.300387312530933), rtol=0, atol=1e-9)
    assert np.allclose(got[-1], (1.875, -1.25, 0.375), rtol=0, atol=1e-9)


def test_modded_nanogpt_5_steps():
    got = floats(greedy_schedule("1e-3", 5, cushion="0.02", safety="0.02"))
    assert np.allclose(got, NANOGPT, rtol=0, atol=1e-9)
    assert np.allclose(coeffsearch.get("polar-express-5").as_floats(), got, rtol=0, atol=1e-9)


def test_cans_first_tuple_to_published_digits():
    first = coeffsearch.get("cans").as_floats()[0]
    assert np.allclose(first, (8.4703, -25.1081, 18.6293), rtol=0, atol=5e-5)


def test_degree3_closed_form_and_equioscillation():
    with mpmath.workdps(40):
        for low in ("0.001", "0.1", "0.5"):
            res = remez_step(low, 1, degree=3)
            closed = cubic_closed_form(low, 1)
            assert all(abs(a - b) < mpmath.mpf(10) ** -30 for a, b in zip(res.coeffs, closed, strict=False))
    with mpmath.workdps(30):
        res = remez_step("0.01", 1, degree=5)
        errs = [1 - odd_eval(res.coeffs, x) for x in res.reference]
        assert len(errs) == 4
        assert all(abs(abs(e) - res.error) < mpmath.mpf(10) ** -20 for e in errs)
        assert all(errs[i] * errs[i + 1] < 0 for i in range(3))  # alternation
        res7 = remez_step("0.01", 1, degree=7)
        assert res7.converged and res7.error < res.error


def test_limit_polynomials():
    assert [float(c) for c in limit_polynomial(1)] == [1.5, -0.5]
    assert [float(c) for c in limit_polynomial(2)] == [1.875, -1.25, 0.375]


def test_remez_rejects_bad_input():
    with pytest.raises(ValueError, match="odd"):
        remez_step(0.1, 1, degree=4)
    with pytest.raises(ValueError, match="0 < l < u"):
        remez_step(1, 0.5)


def test_muon_certified_bands_match_published():
    steps = coeffsearch.get("muon").steps
    b3 = [float(x) for x in certify(steps, "1e-3", "1")["band"]]
    b2 = [float(x) for x in certify(steps, "1e-2", "1")["band"]]
    assert b3 == pytest.approx([0.4705, 1.2024], abs=1e-4)
    assert b2 == pytest.approx([0.6818, 1.1344], abs=1e-4)


@pytest.mark.parametrize("name", ["muon", "polar-express-5", "you", "cesista", "cubic"])
def test_certificate_contains_dense_float64_evaluation(name):
    steps = coeffsearch.get(name).steps
    cert = certify(steps, "1e-2", "1")
    x = np.geomspace(1e-2, 1, 200001)
    for s in coeffsearch.get(name).as_floats():
        x = sum(c * x ** (2 * j + 1) for j, c in enumerate(s))
    lo, hi = float(cert["band"][0]), float(cert["band"][1])
    assert lo - 1e-12 <= x.min() and x.max() <= hi + 1e-12  # float64 rounding allowance
    assert x.min() - lo < 1e-6 and hi - x.max() < 1e-6  # and the band is tight


def test_certificate_recheck_and_tamper():
    cert = certify(coeffsearch.get("muon").steps, "1e-3", "1.05", "muon")
    recheck(json.loads(cert.to_json()))
    bad = json.loads(cert.to_json())
    bad["steps"][2]["output"][1] = "1.0"
    with pytest.raises(CertificateError, match="step 3"):
        recheck(bad)


def test_overshoot_limits():
    assert float(certify(coeffsearch.get("muon").steps, "1e-3", "1")["overshoot"]["u_max"]) > 1.2
    assert float(certify(coeffsearch.get("polar-express").steps, "1e-3", "1")["overshoot"]["u_max"]) < 1.001


def test_outward_decimals():
    with mpmath.workprec(200):
        x = mpmath.mpf(1) / 3
        assert mpmath.mpf(decimal_down(x, 10)) <= x <= mpmath.mpf(decimal_up(x, 10))


def test_band_feasible_beats_muon_slope_and_is_certified():
    res = max_slope(1e-2, 1, 5, (0.7, 1.3))
    assert res.feasible and res.coeffs[0] > 3.4445
    assert res.band[0] >= 0.7 and res.band[1] <= 1.3
    assert res.certificate is not None


def test_band_infeasible_reports_evidence():
    res = max_slope(1e-3, 1, 5, (0.7, 1.3))
    assert not res.feasible and res.violation > 1e-3
    assert res.feasible_from_lower is not None and 1e-3 < res.feasible_from_lower < 1e-2
    lo, hi = image(res.coeffs, 1e-3, 1, 5)
    assert max(0.7 - lo, hi - 1.3) == pytest.approx(res.violation, rel=1e-6)


def test_narrowest_band_contains_one():
    res = narrowest_band(3.4445, 1e-2, 1, 5)
    muon = image((3.4445, -4.7750, 2.0315), 1e-2, 1, 5)
    assert res.band[0] <= 1 <= res.band[1]
    assert res.band[1] - res.band[0] <= muon[1] - muon[0] + 1e-9


def test_validate_observed_inside_certified():
    rows = validate(coeffsearch.get("muon").steps, shape=(32, 64), lower=1e-2)
    assert [r.dtype for r in rows] == ["float64", "float32", "bfloat16"]
    assert all(r.inside for r in rows)
    assert rows[0].observed[0] >= rows[0].certified[0] - 1e-12


def test_schedule_json_roundtrip_and_errors():
    doc = greedy_schedule("1e-2", 2)
    back = ScheduleDoc.from_json(doc.to_json())
    assert back.steps == doc.steps and back.parameters["steps"] == 2
    with pytest.raises(ScheduleError, match="not valid JSON"):
        ScheduleDoc.from_json("{nope")
    with pytest.raises(ScheduleError, match="not a finite number"):
        ScheduleDoc.from_json('{"steps": [["1.5", "x"]]}')


def run(*args):
    """``python -m coeffsearch ARGS``, its ``main`` called in this process."""
    return run_command("coeffsearch", *args)


@pytest.mark.parametrize("argv,needle", [
    (["minimax", "--degree", "4", "--steps", "3", "--lower", "1e-3"], "must be odd"),
    (["minimax", "--steps", "3", "--lower", "2"], "--lower must be < --upper"),
    (["band", "--steps", "5", "--lower", "1e-2", "--band", "1.1", "1.3"], "must contain 1"),
    (["certify", "adam"], "unknown schedule 'adam'"),
    (["validate", "muon", "--shape", "10by10"], "--shape"),
    (["minimax", "--steps", "0", "--lower", "1e-3"], "must be >= 1"),
])
def test_cli_bad_input_one_line_exit_2(argv, needle):
    r = run(*argv)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr


def test_cli_malformed_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    r = run("certify", str(bad))
    assert r.returncode == 2 and "not valid JSON" in r.stderr


def test_cli_minimax_certify_compare(tmp_path):
    out = tmp_path / "s.json"
    r = run("minimax", "--steps", "3", "--lower", "1e-2", "--json", "--out", str(out))
    assert r.returncode == 0 and out.exists() and r.stdout == ""
    r = run("certify", str(out))
    assert r.returncode == 0 and "certified band" in r.stdout
    r = run("certify", str(out), "--json", "--out", str(tmp_path / "c.json"))
    assert r.returncode == 0 and r.stdout == ""
    r = run("certify", str(tmp_path / "c.json"))
    assert r.returncode == 0 and "re-checked" in r.stdout
    png = tmp_path / "p.png"
    r = run("compare", "muon", str(out), "--lower", "1e-2", "--plot", str(png))
    assert r.returncode == 0 and png.read_bytes()[:4] == b"\x89PNG" and "muon" in r.stdout
    assert run("--help").returncode == 0
