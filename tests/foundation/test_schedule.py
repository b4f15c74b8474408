"""The one Schedule type (foundation.schedule): validated once where it is made, literal or recipe,
registrable either way, carrying its certificate; a certificate cannot be relabelled to a recipe schedule."""

import json

import pytest

import coeffsearch
from coeffsearch import registry
from coeffsearch.certify import CertificateError, certify, recheck
from foundation.polynomial import MAX_SCHEDULE_STEPS, ScheduleError
from foundation.schedule import Recipe, Schedule

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


@pytest.fixture
def scratch_registry(monkeypatch):
    """The registry as it is, restored after the test (a test registers throwaway schedules)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_registered_schedules_are_the_one_type_and_say_their_provenance():
    kinds = {name: coeffsearch.get(name).provenance for name in coeffsearch.names()}
    assert kinds["muon"] == "literal" and kinds["cans"] == "recipe" and kinds["polar-express"] == "recipe"
    assert all(isinstance(coeffsearch.get(n), Schedule) for n in coeffsearch.names())
    muon = coeffsearch.get("muon")
    assert muon.degree == 5 and muon.matmuls == 15 and muon.as_floats()[0] == (3.4445, -4.775, 2.0315)


@pytest.mark.parametrize("steps, words", [
    ((), "non-empty"),
    ((("nan", "1"),), "not a finite number"),
    ((("1e999", "1"),), "float64 range"),
    ((("-1.5", "0.5"),), "slope"),
    ((("1.5", True),), "not a finite number"),
    ((("1.5", "-0.5"),) * (MAX_SCHEDULE_STEPS + 1), f"at most {MAX_SCHEDULE_STEPS}"),
])
def test_a_literal_schedule_is_validated_when_it_is_made(steps, words):
    with pytest.raises(ScheduleError, match=words):
        Schedule("mine", steps, "test")


def test_name_lower_bound_and_provenance_are_checked():
    with pytest.raises(ScheduleError, match="not allowed"):
        Schedule('x"""; import os', (("1.5", "-0.5"),), "test")
    with pytest.raises(ScheduleError, match="exactly one"):
        Schedule("both", (("1.5", "-0.5"),), "test", recipe=Recipe({"lower": "0.1", "steps": 2}))
    with pytest.raises(ScheduleError, match="exactly one"):
        Schedule("neither", None, "test")
    with pytest.raises(ScheduleError, match=r"\(0, 1\)"):
        Schedule("low", (("1.5", "-0.5"),), "test", lower=1.5)


def test_numbers_are_kept_as_decimal_strings():
    s = Schedule("mine", [[1.5, "-0.5"]], "test")
    assert s.steps == (("1.5", "-0.5"),) and s.provenance == "literal"


def test_a_recipe_schedule_with_its_own_function_can_be_registered(scratch_registry):
    calls = []

    def scaled_cubic(steps, scale):
        calls.append(steps)
        return [[str(1.5 * scale), str(-0.5 * scale)]] * steps

    s = coeffsearch.register(Schedule("my-cubic", None, "a test recipe", recipe=Recipe({"steps": 3, "scale": 1},
                                                                                          scaled_cubic)))
    assert calls == []  # computed on first use, not when registered
    assert coeffsearch.resolve("my-cubic").steps == (("1.5", "-0.5"),) * 3 and calls == [3]
    assert s.steps is s.steps and calls == [3]  # once
    assert s.provenance == "recipe" and "scaled_cubic(steps=3, scale=1)" in s.recipe.description


def test_a_recipe_that_computes_bad_steps_is_refused_naming_it(scratch_registry):
    bad = Schedule("bad-recipe", None, "test", recipe=Recipe({"n": 2}, lambda n: [["-1", "2"]] * n))
    with pytest.raises(ScheduleError, match=r"bad-recipe.*recipe <lambda>\(n=2\).*slope"):
        _ = bad.steps


def test_a_greedy_recipe_registers_like_the_published_ones(scratch_registry):
    s = coeffsearch.register(Schedule("greedy-2", None, "test", lower=0.1, recipe=Recipe({"lower": "0.1", "steps": 2})))
    assert len(s.steps) == 2 and s.degree == 5 and float(s.steps[0][0]) > 1.5


def test_a_certificate_file_resolves_with_its_certificate(tmp_path):
    cert = certify(coeffsearch.get("muon").steps, "1e-3", name="muon")
    path = tmp_path / "muon-cert.json"
    path.write_text(cert.to_json())
    s = coeffsearch.resolve(str(path))
    assert s.certificate is not None and s.certificate["kind"] == "certificate"
    assert s.steps == coeffsearch.get("muon").steps and s.lower == pytest.approx(1e-3)


@pytest.mark.parametrize("label", ["cans", "polar-express"])
def test_a_certificate_cannot_be_relabelled_to_a_recipe_schedule(label):
    text = certify(coeffsearch.get("muon").steps, "1e-3", name="muon").to_json()
    assert recheck(text).name == "muon"
    data = json.loads(text)
    data["name"] = label
    with pytest.raises(CertificateError, match="published schedule with other coefficients"):
        recheck(json.dumps(data))
