"""Only certified defaults: ``msign="auto"`` and the Gram form's default restarts run, per
dtype, only positions that ``python -m coeffsearch restarts`` certifies; where none certify, ``"auto"`` runs
the standard iteration and ``describe_pairs`` says so.

The routine's table (:func:`foundation.compute.jax_spectral_sign.certified_restarts`) is data; it is
re-checked here against the project's restart certification, and a table claiming the uncertified
``(2,)`` in bfloat16 (the old default) is caught, both by the re-check and on the adversarial bfloat16
input that exposed it (256 × 1024, singular values spread geometrically over [1e-3, 1], a few repeated).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import coeffsearch
from coeffsearch.restart_model import DTYPES, Model, RestartError, Uncertifiable, default_lower
from coeffsearch.restarts import search
from coeffsearch.validate_model import shipped
from foundation.compute import jax_spectral_sign
from foundation.compute.jax_msign import newton_schulz
from foundation.compute.jax_spectral_sign import certified_restarts, msign_choice, spectral_sign
from foundation.compute.spectra import with_singular_values
from numerics.optimizer import describe_pairs

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

TABLE_SCHEDULES = ("polar-express-5", "muon", "cesista")  # the defaults and optax's presets ("standard", "dion")
PUBLISHED = (2,)


def _certifies(name, dtype, positions, stated=False):
    """Whether ``positions`` certify; with ``stated``, a shipped certificate of exactly these (re-proven after
    the suite, ``tests/coeffsearch/test_joint_search.py``) is taken as stated."""
    cert = shipped().get(name)
    if stated and cert is not None and cert["dtype"] == dtype and tuple(cert["restarts"]) == tuple(positions):
        return True
    schedule = coeffsearch.get(name)
    lower = default_lower(schedule.lower, dtype)
    try:
        search(name, schedule.steps, Model(dtype, "1", lower), at=positions)
    except (Uncertifiable, RestartError):
        return False
    return True


def _any_certifies(name, dtype):
    schedule = coeffsearch.get(name)
    lower = default_lower(schedule.lower, dtype)
    try:
        search(name, schedule.steps, Model(dtype, "1", lower))
    except Uncertifiable:
        return False
    return True


def table_problems(lookup, names=TABLE_SCHEDULES, exhaustive=True):
    """Every way the table ``lookup(schedule) -> {dtype: positions}`` disagrees with the certification: an
    entry that does not certify, the published (2,) passed over where it certifies, a dtype left out where
    positions certify, float64 not following float32."""
    out = []
    for name in names:
        entry = lookup(coeffsearch.get(name).as_floats())
        if entry.get("float64") != entry.get("float32"):
            out.append(f"{name}: float64 {entry.get('float64')} is not float32's {entry.get('float32')}")
        for dtype in DTYPES:
            positions = entry.get(dtype)
            if positions is None:
                if exhaustive and _any_certifies(name, dtype):
                    out.append(f"{name} {dtype}: left out, but restart positions certify")
            elif not _certifies(name, dtype, tuple(positions), stated=not exhaustive):
                out.append(f"{name} {dtype}: {positions} is not certified")
            elif tuple(positions) != PUBLISHED and _certifies(name, dtype, PUBLISHED):
                out.append(f"{name} {dtype}: {positions} chosen although the published {PUBLISHED} certifies")
    return out


@pytest.mark.parametrize("name", TABLE_SCHEDULES)
def test_the_table_agrees_with_the_restart_certification(name):
    """Every entry certifies and the published (2,) is not passed over; that no dtype is left out where
    positions certify tries every position set (a minute in bfloat16) and runs after the suite."""
    entry = certified_restarts(coeffsearch.get(name).as_floats())
    assert entry, name
    assert table_problems(certified_restarts, (name,), exhaustive=False) == []


@pytest.mark.e2e
@pytest.mark.parametrize("name", TABLE_SCHEDULES)
def test_no_dtype_is_left_out_where_positions_certify(name):
    assert table_problems(certified_restarts, (name,)) == []


def test_the_cited_gram_recipe_runs_its_certified_restarts():
    """The table's float16 entry is the shipped certificate's (re-proven after the suite); the full
    re-check of this entry against the search is e2e (about a minute: bfloat16 tries every position set)."""
    entry = certified_restarts(coeffsearch.get("gram-polar-express").as_floats())
    assert entry["float16"] == tuple(shipped()["gram-polar-express"]["restarts"]) == (2,)


@pytest.mark.e2e
def test_the_cited_gram_recipe_entry_agrees_with_the_restart_certification():
    assert table_problems(certified_restarts, ("gram-polar-express",)) == []


def test_the_polar_express_bfloat16_gap_and_float16_positions():
    entry = certified_restarts(coeffsearch.get("polar-express-5").as_floats())
    assert "bfloat16" not in entry and entry["float16"] == (1, 3) and entry["float32"] == (2,)


def test_a_table_claiming_the_old_default_in_bfloat16_is_caught():
    def planted(schedule):
        entry = certified_restarts(schedule)
        return {**entry, "bfloat16": PUBLISHED}

    problems = table_problems(planted, ("polar-express-5",))
    assert any(line.startswith("polar-express-5 bfloat16: (2,) is not certified") for line in problems)


def test_auto_never_picks_an_uncertified_gram_iteration():
    wide = (256, 1024)
    for name in (*TABLE_SCHEDULES, "quintic"):
        schedule = coeffsearch.get(name).as_floats()
        entry = certified_restarts(schedule)
        for dtype in ("float64", *DTYPES):
            chosen, restarts, why = msign_choice(wide, dtype, "auto", schedule)
            if dtype in entry:
                assert (chosen, restarts) == ("gram_newton_schulz", entry[dtype]), (name, dtype)
            else:
                assert chosen == "newton_schulz" and "certified" in why, (name, dtype)


def test_gram_without_certified_restarts_is_refused_in_one_line():
    pe5 = coeffsearch.get("polar-express-5").as_floats()
    with pytest.raises(ValueError) as info:
        spectral_sign(jnp.zeros((4, 16), jnp.bfloat16), "gram_newton_schulz", pe5)
    assert "no restart positions are certified" in str(info.value) and "\n" not in str(info.value)
    # given positions are the caller's choice, not a default: they run
    assert spectral_sign(jnp.zeros((4, 16), jnp.bfloat16), "gram_newton_schulz", pe5, (1, 3)).shape == (4, 16)


def test_the_lookup_is_data_and_refuses_nothing_it_cannot_see():
    pe5 = coeffsearch.get("polar-express-5").as_floats()
    assert certified_restarts(jnp.asarray(pe5)) == certified_restarts(pe5)  # arrays and tuples alike
    seen = []
    jax.jit(lambda s: seen.append(certified_restarts(s)) or s)(jnp.asarray(pe5))  # traced: unknown, so standard
    assert seen == [{}]


@pytest.fixture(scope="module")
def adversarial():
    """256 × 1024 in bfloat16, singular values geometric over [1e-3, 1] with a few repeated."""
    rng = np.random.default_rng(0)
    s = np.geomspace(1e-3, 1, 256)
    s[:8], s[100:108], s[-4:] = 1.0, s[100], 1e-3
    return jnp.asarray(with_singular_values(rng, 256, 1024, np.sort(s)[::-1]), jnp.bfloat16)


def _norm2(y):
    return float(np.linalg.norm(np.asarray(y.astype(jnp.float32), np.float64), 2))


def test_auto_on_the_adversarial_bfloat16_input_stays_with_the_standard_iteration(adversarial):
    pe5 = coeffsearch.get("polar-express-5").as_floats()
    auto = jax.jit(lambda a: spectral_sign(a, "auto", pe5))(adversarial)
    standard = jax.jit(lambda a: newton_schulz(a, pe5))(adversarial)
    assert np.array_equal(np.asarray(auto), np.asarray(standard))
    assert _norm2(auto) < 1.3  # about 1.14


def test_the_old_uncertified_default_overshoots_there(adversarial, monkeypatch):
    """The planted table (2,) in bfloat16: auto then runs Gram and ‖Y‖₂ reaches about 1.67."""
    pe5 = coeffsearch.get("polar-express-5").as_floats()
    monkeypatch.setattr(jax_spectral_sign, "certified_restarts", lambda s: {"bfloat16": PUBLISHED})
    planted = jax.jit(lambda a: spectral_sign(a, "auto", pe5))(adversarial)
    assert _norm2(planted) > 1.5


def test_describe_prints_the_choice():
    params = {"wide16": jnp.zeros((256, 1024), jnp.bfloat16), "wide32": jnp.zeros((256, 1024), jnp.float32),
              "square": jnp.zeros((64, 64), jnp.bfloat16)}
    text = describe_pairs(params, pairs=None, msign="auto")
    lines = {line.split()[0]: line for line in text.splitlines()}
    assert ("'auto' -> newton_schulz: no Gram restart positions certified for this schedule in bfloat16"
            in lines["wide16"])
    assert "'auto' -> gram_newton_schulz (restarts after 2): restart positions certified in float32" in lines["wide32"]
    assert "flop model" in lines["square"]
    assert "msign" not in describe_pairs(params, pairs=None)  # without msign: the table as before
