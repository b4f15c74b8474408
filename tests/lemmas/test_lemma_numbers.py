"""Every lemma has a number of its own, declared where the lemma is made.

Every page cites a step's lemma by its number (``Lemma 1m``). The norm families' solve lemmas were numbered
``1`` and the first letter of the family's key, so a new family whose key began with ``m`` was silently cited as
``1m``, the max-abs family's lemma, and the uniqueness test saw only the registered list, never the solve lemmas.
Now a family declares its solve lemma's number (``solve_number``), a lemma without a number is refused when it is
made, and the uniqueness is asserted over every lemma the workbench can cite (:func:`derivations.registry.
every_lemma`: the lemma families, the norm families' lemmas and solve lemmas, any lemma a registry module
defines). Planted: a family declaring the max-abs family's number, a family and a lemma declaring none, a rule
module's lemma with a number in use, and a lemma family's second lemma under a key in use; each is refused with
one line naming both lemmas (or the one without a number).
"""

from __future__ import annotations

import dataclasses

import pytest

from derivations import lemmas as L
from derivations import registry
from derivations import sylvester as some_rule_module
from derivations.engine import norms as N

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def _family(key, number="1x", **changes):
    """A new norm family (the Frobenius family's norm and maps under another key)."""
    return dataclasses.replace(N.FROBENIUS, key=key, title=f"{key} norm", solve_number=number, **changes)


def test_every_lemma_the_workbench_can_cite_has_its_own_number_and_key():
    every = registry.every_lemma()
    keys = {lem.key for lem in every}
    assert {lem.key for lem in L.ALL_LEMMAS} | {lem.key for lem in N.NORM_LEMMAS} <= keys
    assert {N.solve_lemma(f).key for f in N.FAMILIES} <= keys        # the solve lemmas too, not only the list
    assert [N.solve_lemma(f).number for f in N.FAMILIES] == [f.solve_number for f in N.FAMILIES]
    assert len(every) >= 60
    assert L.duplicate_numbers(every) == []


def test_a_new_family_declaring_a_number_in_use_is_refused_naming_both_lemmas(monkeypatch):
    mirror = _family("mirror", number=N.MAX_ABS.solve_number)   # what the derived number 1m gave it silently
    with pytest.raises(ValueError) as info:
        N.solve_lemma(mirror)
    message = str(info.value)
    assert "\n" not in message and "lemma number '1m' is declared twice" in message
    assert "steepest_descent_max_abs" in message and "steepest_descent_mirror" in message
    monkeypatch.setattr(N, "FAMILIES", (*N.FAMILIES, mirror))    # registered: every_lemma refuses it the same way
    with pytest.raises(ValueError, match=r"lemma number '1m' is declared twice") as again:
        registry.every_lemma()
    assert "steepest_descent_max_abs" in str(again.value) and "steepest_descent_mirror" in str(again.value)


def test_a_new_family_with_a_number_of_its_own_is_accepted(monkeypatch):
    monkeypatch.setattr(N, "FAMILIES", (*N.FAMILIES, _family("mirror", number="1x")))
    assert N.solve_lemma(N.FAMILIES[-1]).number == "1x"
    assert L.duplicate_numbers(registry.every_lemma()) == []


@pytest.mark.parametrize("number", ["", "  "])
def test_a_family_or_a_lemma_that_declares_no_number_is_refused(number):
    with pytest.raises(ValueError, match=r"norm family 'mirror' declares no solve_number"):
        _family("mirror", number=number)
    with pytest.raises(ValueError, match=r"lemma 'ring' \(.*\) declares no number"):
        dataclasses.replace(L.RING, number=number)


def test_a_rule_modules_lemma_with_a_number_in_use_is_found_naming_both(monkeypatch):
    planted = dataclasses.replace(L.RING, key="planted_split", title="planted split", number="B3")
    monkeypatch.setattr(some_rule_module, "PLANTED_SPLIT", planted, raising=False)
    assert L.duplicate_numbers(registry.every_lemma()) == [
        "lemma number 'B3' is declared twice: Lemma B3 (spd_power_split: Symmetric split of an SPD power) and "
        "Lemma B3 (planted_split: planted split)"]


def test_a_second_lemma_under_a_key_in_use_is_found_naming_both(monkeypatch):
    planted = dataclasses.replace(L.RING, number="R2", title="planted ring")
    monkeypatch.setattr(some_rule_module, "PLANTED_RING", planted, raising=False)
    problems = L.duplicate_numbers(registry.every_lemma())
    assert problems == [f"lemma key 'ring' is declared twice: Lemma R (ring: {L.RING.title}) and Lemma R2 (ring: "
                        "planted ring)"], problems


def test_the_same_lemma_reached_twice_is_no_duplicate():
    assert L.duplicate_numbers([L.RING, L.RING, dataclasses.replace(L.RING)]) == []
