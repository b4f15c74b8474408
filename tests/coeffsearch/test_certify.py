"""Certificates: a typed object, re-checked field by field, for every odd degree; malformed files exit 2."""

import json

import numpy as np
import pytest

import coeffsearch
from coeffsearch.certify import Certificate, CertificateError, CertificateFormatError, certify, recheck
from foundation.minimax import limit_polynomial
from tests.inprocess import run_command

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

INPUTS = {"schedule", "interval", "precision_bits", "digits", "name", "kind"}  # what the bounds are computed from


def _leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _tampered(value):
    """A different value of the same type: one more digit on a decimal, another number or text."""
    if isinstance(value, bool) or value is None:
        return "1.0"
    if isinstance(value, int):
        return 64 if value != 64 else 80
    try:
        float(value)
        return value + "1" if "e" not in value else value.replace("e", "1e")
    except ValueError:
        return "cubic" if value == "muon" else value + " (edited)"  # a name moved to another schedule


def _set(data, path, value):
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def test_json_round_trip_and_mapping_access():
    cert = certify(coeffsearch.get("muon").steps[:2], "1e-2", "1", "muon")
    again = Certificate.from_json(cert.to_json())
    assert again == cert and again["band"] == cert.band and recheck(again) == cert


def test_every_tampered_field_is_caught():
    cert = certify(coeffsearch.get("muon").steps[:2], "1e-2", "1.05", "muon")
    leaves = list(_leaves(cert.to_dict()))
    assert len(leaves) > 25
    caught = 0
    for path, value in leaves:
        bad = json.loads(cert.to_json())
        _set(bad, path, _tampered(value))
        with pytest.raises(CertificateError) as info:
            recheck(bad)
        if path[0] not in INPUTS:  # a stated bound: the message names it
            label = str(path[0]) if path[0] != "steps" else f"step {path[1] + 1}"
            assert label in str(info.value) or isinstance(info.value, CertificateFormatError), (path, str(info.value))
        caught += 1
    assert caught == len(leaves)


def test_a_removed_step_row_and_an_extra_field_are_caught():
    cert = json.loads(certify(coeffsearch.get("muon").steps[:2], "1e-2", "1").to_json())
    short = json.loads(json.dumps(cert))
    short["steps"].pop()
    with pytest.raises(CertificateError, match="steps"):
        recheck(short)
    cert["comment"] = "trust me"
    with pytest.raises(CertificateFormatError, match="'comment': not a certificate field"):
        recheck(cert)


def test_malformed_fields_one_line_each():
    cert = json.loads(certify(coeffsearch.get("muon").steps[:1], "1e-2", "1").to_json())
    cert["band"] = ["0.5"]
    cert["worst_error"] = "small"
    del cert["overshoot"]
    with pytest.raises(CertificateFormatError) as info:
        Certificate.from_json(cert, "c.json")
    lines = info.value.lines
    assert len(lines) == 3
    assert any("field 'band': must be a pair" in x for x in lines)
    assert any("field 'worst_error': 'small' is not a decimal number" in x for x in lines)
    assert any("'overshoot' is a required property" in x for x in lines)


@pytest.mark.parametrize("k", [1, 2, 3, 4])  # degrees 3, 5, 7, 9
def test_every_odd_degree_is_certified_and_contains_a_dense_evaluation(k):
    coeffs = [str(c) for c in limit_polynomial(k)]
    steps = [coeffs] * 3
    cert = certify(steps, "1e-2", "1")
    assert len(cert.schedule[0]) == k + 1
    x = np.geomspace(1e-2, 1, 20001)
    for _ in steps:
        x = sum(float(c) * x ** (2 * j + 1) for j, c in enumerate(coeffs))
    lo, hi = float(cert.band[0]), float(cert.band[1])
    assert lo - 1e-12 <= x.min() and x.max() <= hi + 1e-12
    assert x.min() - lo < 1e-6 and hi - x.max() < 1e-6
    assert recheck(cert.to_json()) == cert


def test_a_degree_7_critical_point_inside_the_interval_is_found():
    """p(x) = 2x − x³·(…): an interior maximum that the endpoints alone would miss."""
    steps = [["2.5", "-2", "0.25", "0.05"]]  # degree 7
    cert = certify(steps, "0.1", "1")
    xs = np.linspace(0.1, 1, 200001)
    p = sum(float(c) * xs ** (2 * j + 1) for j, c in enumerate(steps[0]))
    assert cert.steps[0]["critical_points"]
    assert float(cert.band[1]) >= p.max() and float(cert.band[1]) - p.max() < 1e-9
    assert p.max() > max(p[0], p[-1]) + 0.1  # the maximum is interior


def run(*args):
    """``python -m coeffsearch ARGS``, its ``main`` called in this process."""
    return run_command("coeffsearch", *args)


def test_cli_malformed_and_tampered_certificate_files(tmp_path):
    cert = json.loads(certify(coeffsearch.get("muon").steps[:1], "1e-2", "1").to_json())
    good = tmp_path / "good.json"
    good.write_text(json.dumps(cert))
    r = run("certify", str(good))
    assert r.returncode == 0 and "re-checked" in r.stdout
    bad = dict(cert, band=["x", "1"], precision_bits="many")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    r = run("certify", str(path))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(lines) == 1  # one error line
    assert lines[0].startswith("coeffsearch: error: certificate ")
    assert "field 'band/0'" in r.stderr and "(1 more bad field(s))" in r.stderr
    tampered = dict(cert, worst_error="0.001")
    path.write_text(json.dumps(tampered))
    r = run("certify", str(path))
    assert r.returncode == 1 and "FAILED" in r.stdout and "worst_error" in r.stdout
