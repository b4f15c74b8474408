"""The registry's words match what the sources publish.

Polar Express's Algorithm 1 prints all 8 tuples, and the registry says so; CANS's digits come from
NVIDIA-NeMo/Emerging-Optimizers' code, the paper's table was not reached, and the registry says that
instead of citing the paper. Each rule is checked by :mod:`coeffsearch.provenance`, and each check is
shown to fail on the old wording.
"""

import pytest

import coeffsearch
from coeffsearch import registry
from coeffsearch.provenance import SOURCES, check, check_registry
from foundation.schedule import Recipe, Schedule

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def test_the_registry_passes_the_wording_checks():
    assert check_registry() == []


def test_polar_express_says_all_eight_tuples_are_published():
    record = SOURCES["polar-express"].source
    assert len(record.printed) == 8 and "all 8 tuples printed in full" in record.citation
    assert "all 8" in coeffsearch.get("polar-express").source


def test_cans_names_the_code_it_took_the_digits_from_and_does_not_cite_the_paper():
    record = SOURCES["cans"].source
    text = coeffsearch.get("cans").source
    assert record.citation.startswith("code, not a paper: NVIDIA-NeMo/Emerging-Optimizers")
    assert "arXiv" not in record.citation and "arXiv" not in text  # the unreached paper is not cited
    assert record.unreached and "not reached" in record.note and "not reached" in text
    assert "NVIDIA-NeMo/Emerging-Optimizers" in text


def _with_text(name, text):
    old = registry.get(name)
    return Schedule(name, None, text, old.lower, recipe=Recipe(dict(old.recipe.arguments)))


@pytest.mark.parametrize("name, old_text, needle", [
    ("polar-express", "Amsel, Persson, Musco, Gower 2025 (Polar Express), greedy minimax: l = 1e-3, 8 steps, "
     "cushion 0.02407327424182761, no safety factor (computed here; first and last tuples published)",
     "reproduces all 8 printed tuples"),
    ("cans", "Grishina, Smirnov, Rakhuba 2025 (CANS), greedy minimax with no cushion or safety: l = 1e-3, "
     "5 steps (computed here; first tuple published as about (8.4703, -25.1081, 18.6293))", "was not reached"),
])
def test_the_old_wording_is_caught(name, old_text, needle):
    lines = check(_with_text(name, old_text))
    assert any(needle in line for line in lines), lines
