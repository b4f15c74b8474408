"""Gram schedules searched jointly with restart positions, the shipped results, and the cited Gram recipe.

Guards: the product count of the Gram routine is the flop model's (Lemma GK: ``2K + 2`` large and
``4T − 3K − 3`` small products for ``T`` quintic steps and ``K`` restarts), a miscount is caught; every shipped
searched certificate is within its dtype's band and no slower (flops at 1:4) than the default it replaces;
the registered Zhang–Amsel–Chen–Dao recipe stores Polar Express's first five tuples divided by 1.05^(2j+1),
and one divided by 1.04 is caught by the provenance check. Re-proving the shipped certificates runs after
the suite (``e2e``).
"""

import itertools

import pytest

import coeffsearch
from coeffsearch import joint_search
from coeffsearch.joint_search import DEFAULT_BANDS, flops, gram_products
from coeffsearch.provenance import check
from coeffsearch.registry import GRAM_PE_PRINTED, safety_divided
from coeffsearch.restart_certificate import recheck
from coeffsearch.validate_model import CERTIFICATE_DIR, shipped
from foundation.schedule import Schedule

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

#: the Gram default each searched schedule replaces, per dtype: (schedule, restart positions)
REPLACED = {"float32": ("polar-express-5", (2,)), "float16": ("polar-express-5", (1, 3)),
            "bfloat16": ("muon", (1, 2, 3))}


def test_the_product_count_is_the_flop_model():
    steps = coeffsearch.get("muon").steps
    for k in range(len(steps)):
        for positions in itertools.combinations(range(1, len(steps)), k):
            assert gram_products(steps, positions) == (2 * k + 2, 4 * len(steps) - 3 * k - 3), positions
    assert gram_products(steps, (2,)) != (2, 17)  # a restart that cost nothing would be caught


def test_each_shipped_searched_schedule_is_in_its_band_and_no_slower():
    certs = {c["dtype"]: c for name, c in shipped().items() if name.startswith("searched-")}
    assert set(certs) == set(DEFAULT_BANDS)
    for dtype, cert in certs.items():
        assert cert["name"] == f"searched-{dtype}"
        assert float(cert["deviation"]["bound"]) <= DEFAULT_BANDS[dtype]
        name, positions = REPLACED[dtype]
        assert flops(cert["schedule"], tuple(cert["restarts"])) <= flops(coeffsearch.get(name).steps, positions)


def test_the_gram_recipe_is_polar_express_divided_by_the_safety_factor():
    steps = coeffsearch.get("gram-polar-express").steps
    assert steps == safety_divided(GRAM_PE_PRINTED, "1.05")
    assert float(steps[0][0]) == float(GRAM_PE_PRINTED[0][0]) / 1.05
    assert check(coeffsearch.get("gram-polar-express")) == []
    planted = Schedule("gram-polar-express", safety_divided(GRAM_PE_PRINTED, "1.04"), "divided by 1.04", lower=1e-3)
    assert any("differs from its source's" in line for line in check(planted))


def test_the_gram_recipe_ships_its_float16_certificate():
    cert = shipped()["gram-polar-express"]
    assert cert["dtype"] == "float16" and cert["restarts"] == [2]
    assert [tuple(s) for s in cert["schedule"]] == list(coeffsearch.get("gram-polar-express").steps)


def test_bad_input_is_one_line_and_exit_2(capsys):
    assert joint_search.main(["--bases", "no-such"]) == 2
    assert joint_search.main(["--band", "1.5"]) == 2
    assert joint_search.main(["--safeties", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and "unknown schedule" in err and "--band" in err and "--safeties" in err


@pytest.mark.e2e
@pytest.mark.parametrize("path", sorted(CERTIFICATE_DIR.glob("*.json")), ids=lambda p: p.name)
def test_every_shipped_certificate_rechecks(path):
    recheck(path.read_text(encoding="utf-8"), path.name)
