"""Inverse-root schedules: certificates (classical and searched), planted wrong coefficients refused, the
greedy search beating Newton, validation in mpmath and through the runtime, and the command line."""

import json
from dataclasses import replace

import mpmath
import pytest

from coeffsearch import inverse_root_registry
from coeffsearch.certify import CertificateError
from coeffsearch.inverse_root_certify import certify
from coeffsearch.inverse_root_recheck import check_bounds, recheck
from coeffsearch.inverse_root_search import greedy
from coeffsearch.inverse_root_validate import allowed, validate_mp, validate_runtime
from coeffsearch.inverse_roots import RootSchedule, classical, scalar_trajectory, step_matmuls
from tests.inprocess import run_command

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

ENTRIES = inverse_root_registry.entries()


def run(*args):
    """``python -m coeffsearch ARGS``, its ``main`` called in this process."""
    return run_command("coeffsearch", *args)


@pytest.fixture(scope="module")
def shipped():
    """``{(name, p): certificate}`` of every registered schedule, as shipped."""
    return {e: json.loads(inverse_root_registry.certificate_path(*e).read_text()) for e in ENTRIES}


def test_registered_pairs_and_the_rule_lookup():
    assert ENTRIES == [("newton", 2), ("newton", 4), ("newton_schulz", 2), ("newton_schulz", 4)]
    assert inverse_root_registry.get(inverse_root_registry.DEFAULT, 4).p == 4
    with pytest.raises(KeyError, match="registered: newton"):
        inverse_root_registry.get("newton_schulz", 3)


@pytest.mark.parametrize("entry", ENTRIES)
def test_shipped_certificate_rechecks_and_states_the_registered_schedule(entry, shipped):
    cert = shipped[entry]
    schedule = inverse_root_registry.get(*entry)
    assert cert["schedule"] == [list(s) for s in schedule.steps] and recheck(cert) == cert
    assert float(cert["root_error"]) < 2e-6 and cert["matmuls"] == schedule.matmuls


def test_searched_schedules_beat_newton_in_products_and_error(shipped):
    """The registered searched schedules: fewer products than the classical ones and a smaller certified error."""
    for p in (2, 4):
        newton, searched = shipped[("newton", p)], shipped[("newton_schulz", p)]
        assert searched["matmuls"] < 0.65 * newton["matmuls"]
        assert float(searched["root_error"]) < float(newton["root_error"])


def test_root_error_is_the_scalar_iteration_worst_case():
    """``y x^{1/p} = x_N^{1/p}``: the scalar iteration at 50 digits attains the certified root error (up to the
    printed digits) and never exceeds it, on a grid of [l, 1] with its ends."""
    schedule = inverse_root_registry.get("newton_schulz", 2)
    cert = certify(schedule)
    with mpmath.workdps(50):
        worst = mpmath.mpf(0)
        for x in [*mpmath.linspace(mpmath.log(mpmath.mpf("1e-3")), 0, 400)]:
            x = mpmath.exp(x)
            xn, y = scalar_trajectory(schedule, x)
            assert abs(y * x ** (mpmath.mpf(1) / 2) - xn ** (mpmath.mpf(1) / 2)) < mpmath.mpf("1e-40")
            worst = max(worst, abs(y * mpmath.sqrt(x) - 1))
        assert worst <= mpmath.mpf(cert["root_error"]) and worst > mpmath.mpf(cert["root_error"]) * 0.999


def test_planted_wrong_digit_in_a_certificate_is_refused(shipped):
    cert = json.loads(json.dumps(shipped[("newton_schulz", 4)]))
    cert["name"] = "mine"  # not a registered name: the recomputation itself must catch the digit
    assert recheck(cert) is not None
    cert["schedule"][2][0] = "1.46071139566749"
    with pytest.raises(CertificateError, match="recomputation gives"):
        recheck(cert)


@pytest.mark.parametrize("field,value", [
    (("band", 1), "1.0000000064015644162"),           # the upper end one unit of the 20th digit too low
    (("root_error",), "3.200782203020936e-9"),         # the root error cut in its 17th digit
    (("steps", 3, "factor", 0), "0.69"),               # a factor's lower bound above its enclosure
    (("u_max",), "1.04"),                              # past the last eigenvalue that keeps the factors positive
])
def test_independent_check_refuses_each_planted_bound(field, value, shipped):
    """:func:`check_bounds` proves each printed bound again: a bound moved to the wrong side fails."""
    cert = json.loads(json.dumps(shipped[("newton_schulz", 2)]))
    assert check_bounds(cert) == []
    target = cert
    for key in field[:-1]:
        target = target[key]
    target[field[-1]] = value
    assert len(check_bounds(cert)) == 1


def test_planted_coefficients_under_a_registered_name_are_refused(shipped):
    cert = json.loads(json.dumps(shipped[("newton_schulz", 2)]))
    cert["schedule"][0][1] = "-3.4901358632211644"
    with pytest.raises(CertificateError, match="registered schedule with other coefficients"):
        recheck(cert)


def test_planted_sign_change_fails_positivity():
    steps = list(inverse_root_registry.get("newton_schulz", 2).steps)
    steps[0] = (steps[0][0], steps[0][1].lstrip("-"))
    with pytest.raises(CertificateError, match="step 2: the factor q_2 reaches .* not proven positive"):
        certify(RootSchedule("mine", 2, ("1e-3", "1"), tuple(steps)))


def test_greedy_search_reproduces_the_registered_schedule_and_beats_newton():
    """The search's output is the registered schedule (here, every digit; elsewhere the floats' last digits may
    move with the platform's arithmetic, so the check allows 1e-12 relative)."""
    searched = greedy(4, "1e-3", 6)
    registered = inverse_root_registry.get("newton_schulz", 4).steps
    assert all(abs(float(a) - float(b)) <= 1e-12 * abs(float(b))
               for s, r in zip(searched.steps, registered, strict=True) for a, b in zip(s, r, strict=True))
    first, newton = (float(certify(replace(s, steps=s.steps[:1]))["worst_error"]) for s in (searched, classical(4, 1)))
    assert first < 0.99 * newton


def test_matmul_count():
    assert step_matmuls(1, 2, last=False) == 3 and step_matmuls(1, 4, last=False) == 4
    assert step_matmuls(2, 4, last=True) == 2 and classical(2, 12).matmuls == 34


@pytest.mark.parametrize("entry", [("newton", 4), ("newton_schulz", 2)])
def test_mpmath_validation_within_the_certified_root_error(entry, shipped):
    rows = validate_mp(inverse_root_registry.get(*entry), n=5, batch=1)
    delta = float(shipped[entry]["root_error"])
    assert all(r["root_error"] <= delta * (1 + 1e-12) and r["relative_error"] <= delta * (1 + 1e-12) for r in rows)
    assert rows[0]["root_error"] > 0.99 * delta  # the spectrum holds l, where the worst case lies


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_runtime_validation_within_band_plus_rounding(dtype, shipped):
    schedule = inverse_root_registry.get("newton_schulz", 4)
    row = validate_runtime(schedule, dtype, n=16, batch=2)
    assert row["relative_error"] <= allowed(shipped[("newton_schulz", 4)]["root_error"], row)


def test_validation_catches_a_schedule_cut_short():
    """Planted: the last step dropped; the mpmath error then exceeds the full schedule's certificate."""
    full = inverse_root_registry.get("newton_schulz", 2)
    short = replace(full, steps=full.steps[:-1])
    assert validate_mp(short, n=4, batch=1)[0]["root_error"] > 100 * float(certify(full)["root_error"])


def test_cli_certify_schedule_file_and_refusals(tmp_path, shipped):
    good = tmp_path / "s.json"
    good.write_text(classical(2, 9, "1e-2", name="mine").to_json())
    r = run("certify", str(good), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["kind"] == "inverse-root-certificate"
    bad = tmp_path / "bad.json"
    cert = json.loads(json.dumps(shipped[("newton", 2)]))
    cert["schedule"][3][1] = "-0.6"
    bad.write_text(json.dumps(cert))
    r = run("certify", str(bad))
    assert r.returncode == 1 and r.stdout.count("\n") == 1 and "FAILED" in r.stdout
    r = run("certify", str(inverse_root_registry.certificate_path("newton", 2)))
    assert r.returncode == 0 and "re-checked" in r.stdout


@pytest.mark.parametrize("argv,needle", [
    (["inverse-root-search", "--p", "0", "--lower", "1e-3", "--steps", "3"], "--p"),
    (["inverse-root-search", "--p", "2", "--lower", "2", "--steps", "3"], "must be below 1"),
    (["inverse-root-search", "--p", "2", "--lower", "1e-3", "--steps", "0"], "--steps"),
    (["inverse-root-search", "--p", "2", "--lower", "1e-3", "--steps", "3", "--degree", "9"], "--degree"),
    (["inverse-root-search", "--p", "2", "--lower", "1e-3", "--steps", "3", "--name", "a\nb"], "--name"),
])
def test_cli_usage_errors_one_line_exit_2(argv, needle):
    r = run(*argv)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr


def test_cli_options_that_do_not_apply_to_an_inverse_root_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(classical(2, 3, "1e-2", name="mine").to_json())
    for argv in (["certify", str(path), "--lower", "1e-2"], ["validate", str(path), "--gram"],
                 ["validate", str(path), "--dtype", "float16"]):
        r = run(*argv)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, argv
    for doc, needle in (({"interval": ["0", "1"]}, "need 0 < l < u"),
                        ({"steps": [["1.5", "-1e-999999999"]]}, "not a decimal number"),
                        ({"p": 2.0}, "p must be an integer"), ({"name": "a\nb"}, "name")):
        path.write_text(json.dumps({"kind": "inverse-root", "p": 2, "interval": ["1e-2", "1"],
                                    "steps": [["1.5", "-0.5"]], **doc}))
        r = run("certify", str(path))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and needle in r.stderr, (doc, r.stderr)


def test_cli_search_writes_a_file_that_certifies(tmp_path):
    out = tmp_path / "found.json"
    r = run("inverse-root-search", "--p", "2", "--lower", "1e-1", "--steps", "1", "--json", "--out", str(out))
    assert r.returncode == 0 and r.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["kind"] == "inverse-root" and float(doc["certified"]["root_error"]) < 0.4
    r = run("certify", str(out))
    assert r.returncode == 0 and "certified root error" in r.stdout
    r = run("validate", str(out), "--dtype", "float32", "--batch", "1")
    assert r.returncode == 0 and r.stdout.count("inside") == 2 and "OUTSIDE" not in r.stdout
