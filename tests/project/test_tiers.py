"""The test tiers: ``pytest -m fast`` never runs an end-to-end check, ``pytest -m e2e`` runs them all."""

from types import SimpleNamespace

import pytest

from tests.conftest import e2e_left_out

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def _item(*marks):
    return SimpleNamespace(marks=marks, get_closest_marker=lambda name: name if name in marks else None)


def test_the_fast_tier_leaves_out_the_e2e_checks_of_a_fast_module():
    fast, both = _item("fast"), _item("fast", "e2e")
    assert e2e_left_out("fast", [fast, both]) == ([fast], [both])
    assert e2e_left_out("", [fast, both]) == ([fast], [both])  # planted: a run with no mark expression


def test_a_mark_expression_naming_e2e_keeps_them():
    fast, both = _item("fast"), _item("fast", "e2e")
    for expr in ("e2e", "not e2e", "e2e or not e2e"):
        assert e2e_left_out(expr, [fast, both])[0] == [fast, both]
