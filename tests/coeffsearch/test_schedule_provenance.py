"""Shipped Newton–Schulz constants against their cited sources (coeffsearch.provenance).

A certificate certifies whatever coefficients it is given, so these are the tests that notice a wrong
digit: every registered schedule has a record of its source's printed digits, compared exactly, and a
stated property, recomputed. The planted mistakes (one changed digit in every coefficient of every
literal schedule, one changed recipe argument, a wrong source record) are kept here as tests.
"""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import pytest

import coeffsearch
from coeffsearch import Recipe, Schedule, provenance, registry
from coeffsearch.provenance import SOURCES, check, check_registry, mismatches

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def bump(text: str) -> str:
    """``text`` with its last digit changed (9 → 8, any other d → d + 1)."""
    i = max(k for k, ch in enumerate(text) if ch.isdigit())
    d = int(text[i])
    return text[:i] + str(d - 1 if d == 9 else d + 1) + text[i + 1:]


def replanted(schedule: Schedule, steps) -> Schedule:
    return Schedule(schedule.name, steps, schedule.source, schedule.lower)


def test_every_registered_schedule_has_a_record_and_passes():
    assert set(SOURCES) == set(coeffsearch.names())
    assert check_registry() == []


def test_the_records_hold_the_digits_as_printed():
    # spot checks of the records themselves, as their sources print them
    assert SOURCES["muon"].source.printed == (("3.4445", "-4.7750", "2.0315"),)
    assert SOURCES["you"].source.printed[0] == ("3955/1024", "-8306/1024", "5008/1024")
    assert SOURCES["quintic"].source.printed == (("15/8", "-10/8", "3/8"),)
    assert SOURCES["polar-express"].source.arguments == {"lower": "1e-3", "steps": 8,
                                                          "cushion": "0.02407327424182761"}
    # the You schedule's decimals are p/1024 exactly, not rounded
    assert [Fraction(c) * 1024 for c in coeffsearch.get("you").steps[0]] == [3955, -8306, 5008]


LITERAL = [n for n in sorted(SOURCES) if SOURCES[n].source.arguments is None]


@pytest.mark.parametrize("name", LITERAL)
def test_one_changed_digit_in_any_coefficient_is_caught_naming_it(name):
    shipped = coeffsearch.get(name)
    positions = [(t, j) for t, step in enumerate(shipped.steps) for j in range(len(step))]
    for t, j in positions:
        steps = [list(s) for s in shipped.steps]
        steps[t][j] = bump(steps[t][j])
        lines = mismatches(replanted(shipped, steps))
        assert len(lines) == 1, (t, j, lines)
        assert lines[0].startswith(f"schedule {name!r}: step {t + 1} coefficient c_{j} = {steps[t][j]} differs"), lines
        # and the whole check (digits, then the claim) refuses it too
        assert check(replanted(shipped, steps)) == lines


@pytest.mark.parametrize(("name", "key", "value"), [
    ("polar-express", "cushion", "0.02407327424182762"), ("polar-express", "cushion", "0.02417327424182761"),
    ("polar-express", "lower", "2e-3"), ("cans", "lower", "1e-4"), ("cans", "steps", 6)])
def test_one_changed_recipe_argument_is_caught(name, key, value):
    shipped = coeffsearch.get(name)
    planted = Schedule(name, None, shipped.source, shipped.lower,
                       recipe=Recipe({**shipped.recipe.arguments, key: value}))
    lines = mismatches(planted)
    assert len(lines) == 1 and lines[0].startswith(f"schedule {name!r}: recipe argument {key} = {value} differs "
                                                   f"from its source's "), lines
    assert check(planted) == lines
    if value != "0.02407327424182762":  # a change in the 16th digit moves no coefficient beyond 1e-14: (a) only
        # the computed coefficients no longer reproduce the printed ones either (the claim, recomputed)
        assert provenance.claim_failure(planted) is not None


def test_a_changed_design_bound_and_a_swapped_kind_are_caught():
    pe5 = coeffsearch.get("polar-express-5")
    assert mismatches(Schedule(pe5.name, pe5.steps, pe5.source, 2e-3)) == [
        "schedule 'polar-express-5': design lower bound 0.002 differs from its source's 1e-3"]
    pe = coeffsearch.get("polar-express")
    literal = mismatches(Schedule(pe.name, pe.steps, pe.source, pe.lower))
    assert literal == ["schedule 'polar-express': its source publishes a greedy-minimax recipe, the registry "
                       "ships literal steps"]


def test_a_planted_digit_in_the_registry_is_reported_by_the_registry_check(scratch_registry):
    muon = coeffsearch.get("muon")
    steps = [list(s) for s in muon.steps]
    steps[2][1] = "-4.7570"  # two digits swapped in the third step
    registry._REGISTRY["muon"] = replanted(muon, steps)
    lines = check_registry()
    assert len(lines) == 1 and lines[0].startswith("schedule 'muon': step 3 coefficient c_1 = -4.7570 differs "
                                                    "from its source's -4.7750"), lines


def test_a_schedule_registered_without_a_source_is_reported(scratch_registry):
    coeffsearch.register(Schedule("unsourced", [["1.5", "-0.5"]], "my notes"))
    assert check_registry() == [
        "schedule 'unsourced' has no provenance record (coeffsearch.provenance.SOURCES): add its source, the "
        "digits as printed and a property the source states"]


def wrong_record(name, t, j, value):
    """A record (and the schedule made from it) with one printed number changed: the claim must notice."""
    src = SOURCES[name].source
    printed = [list(s) for s in src.printed]
    printed[t][j] = value
    src = dataclasses.replace(src, printed=tuple(tuple(s) for s in printed))
    steps = tuple(tuple(str(Fraction(c).numerator / Fraction(c).denominator) if "/" in c else c for c in s)
                  for s in src.printed) * src.repeat
    return SOURCES[name].claim.check(steps, src)


@pytest.mark.parametrize(("name", "t", "j", "value", "needle"), [
    ("muon", 0, 0, "3.1445", "stated plateau error ≈ 0.3, recomputed"),
    ("cubic", 0, 0, "1.6", "stated p(1) = 1, p'(1) = 0, but here p(1) - 1 = 1/10"),
    ("quintic", 0, 2, "4/8", "stated p(1) = 1, p'(1) = p''(1) = 0"),
    ("you", 0, 0, "4955/1024", "stated: more accurate than Jordan's quintic"),
    ("cesista", 1, 2, "3.6377", "step 2: p(x) = x has 0 positive fixed points"),
    ("cesista", 0, 2, "2.92700", "coefficients with four decimals"),
])
def test_a_wrong_source_record_fails_its_stated_property(name, t, j, value, needle):
    reason = wrong_record(name, t, j, value)
    assert reason is not None and needle in reason, reason


@pytest.mark.parametrize(("name", "t", "j", "value"), [
    ("polar-express-5", 1, 0, "4.052929935166739"),
    ("polar-express", 2, 1, "-2.918902115962949"),
    ("cans", 3, 2, "0.5075"),
])
def test_a_wrong_printed_digit_of_a_computed_schedule_fails_the_recomputation(name, t, j, value):
    src = SOURCES[name].source
    printed = [list(s) for s in src.printed]
    printed[t][j] = value
    src = dataclasses.replace(src, printed=tuple(tuple(s) for s in printed))
    reason = SOURCES[name].claim.check(coeffsearch.get(name).steps, src)
    assert reason is not None and reason.startswith(f"step {t + 1} coefficient c_{j}: computed"), reason


def test_cesista_peak_constraint_can_fail():
    # a first step whose peak (about 1.31) exceeds the second step's right fixed point (about 1.32 → lowered)
    steps = [list(s) for s in coeffsearch.get("cesista").steps]
    steps[1] = ["3.9505", "-6.3029", "2.8377"]
    reason = SOURCES["cesista"].claim.check(tuple(tuple(s) for s in steps), SOURCES["cesista"].source)
    assert reason is not None and "the peak of the previous iteration" in reason, reason


def test_cesista_basin_constraint_can_fail():
    steps = [list(s) for s in coeffsearch.get("cesista").steps]
    steps[4] = steps[2]  # a wider basin after a narrower one
    reason = SOURCES["cesista"].claim.check(tuple(tuple(s) for s in steps), SOURCES["cesista"].source)
    assert reason is not None and reason.startswith("step 5: stated 'the attractor basins grow smaller"), reason


def test_the_optimizer_presets_are_the_recorded_digits():
    from numerics.optimizer.options import OPTAX_PRESETS

    assert OPTAX_PRESETS["standard"] == tuple(float(c) for c in SOURCES["muon"].source.printed[0])
    assert OPTAX_PRESETS["dion"] == tuple(tuple(float(c) for c in s) for s in SOURCES["cesista"].source.printed)


def test_the_sources_command_shows_each_source_and_exits_1_on_a_planted_digit(scratch_registry, capsys, tmp_path):
    from coeffsearch.__main__ import main

    assert main(["sources", "--json", "--out", str(tmp_path / "s.json")]) == 0
    assert capsys.readouterr().out == ""  # --out: the JSON document went to the file
    rows = json.loads((tmp_path / "s.json").read_text())
    assert [row["verdict"] for row in rows] == ["ok"] * len(coeffsearch.names())
    assert main(["sources"]) == 0
    out = capsys.readouterr().out
    assert all(f"{name}: ok" in out for name in coeffsearch.names())
    assert "github.com/KellerJordan/Muon, muon.py" in out and "plateaus at an error of ≈ 0.3" in out
    quintic = coeffsearch.get("quintic")
    registry._REGISTRY["quintic"] = replanted(quintic, [["1.875", "-1.26", "0.375"]] * 8)
    assert main(["sources", "quintic", "muon"]) == 1
    out = capsys.readouterr().out
    assert "quintic: FAIL" in out and "muon: ok" in out
    assert "FAIL: schedule 'quintic': step 1 coefficient c_1 = -1.26 differs from its source's -10/8" in out
    assert main(["sources", "no-such"]) == 2
    assert "unknown schedule 'no-such'" in capsys.readouterr().err
