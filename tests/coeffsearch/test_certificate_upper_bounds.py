"""Certificates are upper bounds in every printed digit.

Each printed bound is compared with an enclosure recomputed here at 300 bits, independently of the
certifier (mpmath ``iv``, the polynomial summed term by term, the band's worst error taken from the
enclosure); the re-check catches a bound a hair too small, whether a file was edited or the certifier
itself rounds the wrong way (the 53-bit ``1 − band[0]`` the Muon certificate once printed, planted back).
"""

import copy
import json
from fractions import Fraction

import mpmath
import pytest
from mpmath import iv

import coeffsearch
from coeffsearch import certify as certify_module
from coeffsearch.certify import CertificateError, certify, check_upper_bounds, iv_precision, recheck
from coeffsearch.restart_certificate import check_upper_bounds as check_restart_bounds
from coeffsearch.restart_certificate import recheck as recheck_restarts
from coeffsearch.restart_model import Model
from coeffsearch.restarts import search

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

FOUR = ("cubic", "muon", "quintic", "you")  # the schedules whose printed worst error was too small


def _fraction(x):
    man, exp = (x if isinstance(x, mpmath.mpf) else mpmath.mpf(x)).man_exp  # mpmath.mpf(x) would round x
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def _lower(name):
    lower = coeffsearch.get(name).lower
    return repr(lower) if lower else "1e-3"


@pytest.fixture(scope="module")
def certificates():
    return {name: certify(coeffsearch.get(name).steps, _lower(name), "1", name) for name in coeffsearch.names()}


def _worst_at_300_bits(name):
    """An enclosure of max |1 − p| on the final image and the image, computed here at 300 bits: values at
    the endpoints by direct term-by-term summation, over the certifier's critical-point enclosures by the
    mean-value form p(m) + p'(X)(X − m) (tight where p' vanishes). Returns the upper end of the worst error,
    its lower end, and the image ``(a, b)``."""
    steps = coeffsearch.get(name).steps

    def p(coeffs, x):
        return sum((c * x ** (2 * j + 1) for j, c in enumerate(coeffs)), iv.mpf(0))

    def dp(coeffs, x):
        return sum((c * (2 * j + 1) * x ** (2 * j) for j, c in enumerate(coeffs)), iv.mpf(0))

    with iv_precision(300), mpmath.workprec(310):
        lo, hi = mpmath.mpf(iv.mpf(_lower(name)).a), mpmath.mpf(1)
        for step in steps:
            coeffs = [iv.mpf(c) for c in step]
            values = [p(coeffs, iv.mpf(lo)), p(coeffs, iv.mpf(hi))]
            for y0, y1 in certify_module._critical_ys(tuple(step), 300):
                x = iv.sqrt(iv.mpf([y0, y1]))
                xa, xb = max(mpmath.mpf(x.a), lo), min(mpmath.mpf(x.b), hi)
                if xa <= xb:
                    m = (xa + xb) / 2
                    values.append(p(coeffs, iv.mpf(m)) + dp(coeffs, iv.mpf([xa, xb])) * (iv.mpf([xa, xb]) - m))
            lo = min(mpmath.mpf(v.a) for v in values)
            hi = max(mpmath.mpf(v.b) for v in values)
        worst = max(abs(1 - iv.mpf(lo)), abs(iv.mpf(hi) - 1))
        return mpmath.mpf(worst.b), mpmath.mpf(worst.a), (lo, hi)


@pytest.mark.parametrize("name", FOUR)
def test_printed_worst_error_is_above_its_300_bit_enclosure(certificates, name):
    worst, _, _ = _worst_at_300_bits(name)
    assert Fraction(certificates[name].worst_error) >= _fraction(worst)


def test_muon_worst_error_is_not_the_53_bit_subtraction(certificates):
    cert = certificates["muon"]
    with mpmath.workprec(53):
        rounded = 1 - mpmath.mpf(cert.band[0])
    assert Fraction(cert.worst_error) > _fraction(rounded)
    assert Fraction(cert.worst_error) >= 1 - Fraction(cert.band[0])  # exactly, from the printed band


def test_every_registered_certificate_passes_the_independent_check(certificates):
    for name, cert in certificates.items():
        assert check_upper_bounds(cert) == [], name


def _planted_53_bit_worst(band):
    """The certifier's old worst error: ``1 − band[0]`` in mpmath's default 53-bit context, rounded to nearest."""
    with mpmath.workprec(53):
        return max(abs(1 - band[0]), abs(1 - band[1]))


@pytest.mark.parametrize("name", FOUR)
def test_recheck_catches_the_certifier_rounding_its_worst_error_down(monkeypatch, name):
    monkeypatch.setattr(certify_module, "_worst", _planted_53_bit_worst)
    cert = certify(coeffsearch.get(name).steps, _lower(name), "1", name)
    # the recomputation repeats the planted rounding, so only the independent check can see it
    with pytest.raises(CertificateError, match="worst_error.*not an upper bound"):
        recheck(cert)


@pytest.mark.parametrize("field", ["worst_error", "band_upper", "band_lower", "step_output"])
def test_a_bound_tampered_just_past_its_true_value_is_caught(certificates, field):
    cert = certificates["muon"]
    _, worst, (a, b) = _worst_at_300_bits("muon")  # lower end of the worst error's enclosure
    data = json.loads(cert.to_json())
    nudge = mpmath.mpf(10) ** -25  # wider than the 300-bit enclosures, far inside the printed 20 digits
    with mpmath.workprec(300):
        if field == "worst_error":
            data["worst_error"] = mpmath.nstr(worst - nudge, 45)
        elif field == "band_upper":
            data["band"][1] = mpmath.nstr(b - nudge, 45)
        elif field == "band_lower":
            data["band"][0] = mpmath.nstr(a + nudge, 45)
        else:
            data["steps"][0]["output"][1] = mpmath.nstr(mpmath.mpf(data["steps"][0]["output"][1]) - 1, 20)
    bad = certify_module.Certificate.from_json(data)
    assert check_upper_bounds(bad), field
    with pytest.raises(CertificateError):
        recheck(bad)


@pytest.mark.parametrize("prec, digits", [(53, 5), (400, 100)])
def test_the_independent_check_is_finer_than_any_certificate(prec, digits):
    # a 400-bit certificate printed to 100 digits is checked at 500 bits, not at a coarser 300
    cert = certify(coeffsearch.get("muon").steps, "1e-3", "1.01", "muon", prec=prec, digits=digits)
    assert check_upper_bounds(cert) == [] and recheck(cert) == cert
    assert check_upper_bounds(cert, prec=300) != [] or prec < 300  # what a fixed 300 bits would refuse


def test_decimal_rounding_direction_is_decided_exactly():
    # x one ulp (at 400 bits) above 0.1: a comparison rounded to nearest could take "0.1" as >= x
    with mpmath.workprec(400):
        x = mpmath.mpf("0.1") + mpmath.mpf(2) ** -399
    with iv_precision(300):
        up = certify_module.decimal_up(x, 5)
        down = certify_module.decimal_down(x, 5)
    exact = _fraction(x)
    assert Fraction(up) >= exact >= Fraction(down) and up != "0.1"


@pytest.fixture(scope="module")
def restart_cert():
    chosen, _ = search("muon", coeffsearch.get("muon").steps, Model("float16"), restarts=1)
    return chosen.certificate


def test_restart_certificate_bounds_hold_at_300_bits(restart_cert):
    assert check_restart_bounds(restart_cert) == []


@pytest.mark.parametrize("key", ["max_abs_q", "deviation"])
def test_restart_bound_a_hair_too_small_is_caught(restart_cert, key):
    bad = copy.deepcopy(restart_cert)
    bad[key]["bound"] = mpmath.nstr(mpmath.mpf(bad[key]["bound"]) * (1 - mpmath.mpf("1e-7")), 10)  # past rounding
    assert any("not an upper bound" in line for line in check_restart_bounds(bad))
    with pytest.raises(CertificateError):
        recheck_restarts(bad)


def test_restart_recheck_catches_bounds_rounded_down_by_the_prover(monkeypatch):
    from coeffsearch import restart_bounds

    monkeypatch.setattr(restart_bounds, "decimal_up", restart_bounds.decimal_down)  # planted: rounds inward
    chosen, _ = search("muon", coeffsearch.get("muon").steps, Model("float16"), restarts=1)
    with pytest.raises(CertificateError, match="not an upper bound|does not contain"):
        recheck_restarts(chosen.certificate)


def _main(argv, capsys):
    from coeffsearch.__main__ import main

    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_recheck_accepts_a_certificate_and_names_the_enclosure(tmp_path, capsys, certificates):
    path = tmp_path / "muon.json"
    path.write_text(certificates["muon"].to_json())
    code, out, _ = _main(["certify", "--recheck", str(path)], capsys)
    assert code == 0 and "every printed bound contains its 300-bit enclosure" in out


def test_cli_recheck_fails_a_certificate_from_a_certifier_that_rounds_down(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(certify_module, "_worst", _planted_53_bit_worst)
    path = tmp_path / "muon.json"
    path.write_text(certify(coeffsearch.get("muon").steps, "1e-3", "1", "muon").to_json())
    code, out, _ = _main(["certify", "--recheck", str(path)], capsys)
    assert code == 1 and "FAILED" in out and "not an upper bound" in out


def test_cli_recheck_of_a_restart_certificate(tmp_path, capsys, restart_cert):
    path = tmp_path / "restart.json"
    path.write_text(json.dumps(restart_cert))
    code, out, _ = _main(["certify", "--recheck", str(path)], capsys)
    assert code == 0 and "proven again at 300 bits" in out
    bad = copy.deepcopy(restart_cert)
    bad["deviation"]["bound"] = mpmath.nstr(mpmath.mpf(bad["deviation"]["bound"]) * (1 - mpmath.mpf("1e-7")), 10)
    path.write_text(json.dumps(bad))
    code, out, _ = _main(["certify", "--recheck", str(path)], capsys)
    assert code == 1 and "FAILED" in out


@pytest.mark.parametrize("argv", [["certify", "--recheck", "muon"],
                                  ["certify", "--recheck", "--lower", "1e-2", "muon"]])
def test_cli_recheck_of_what_is_not_a_certificate_is_one_line_exit_2(capsys, argv):
    code, out, err = _main(argv, capsys)
    assert code == 2 and "--recheck" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
