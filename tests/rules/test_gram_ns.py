"""Gram Newton–Schulz: the derivation (``derivations.gram_ns``), its flop counts, and the JAX routine
(``foundation.compute.gram_newton_schulz``) against SVD, the standard iteration and the certified restarts."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import coeffsearch
from benchmarks.gram import chosen
from coeffsearch.restart_certificate import certify_positions
from coeffsearch.restart_model import Model, default_lower
from derivations import gram_ns as G
from derivations.engine.derivation import StepCheckFailed, identity_chain
from derivations.lemmas import gram as GL
from foundation.compute.flop_count import executed_matmul_flops, routine_flops
from foundation.compute.gram_newton_schulz import gram_newton_schulz, gram_newton_schulz_oriented, restart_flags
from foundation.compute.jax_msign import newton_schulz
from foundation.compute.spectra import with_singular_values
from tests.inprocess import run_case

PE5 = coeffsearch.get("polar-express-5").as_floats()
MUON = coeffsearch.get("muon")


# ---- the derivation -------------------------------------------------------------------------------
@pytest.mark.parametrize("side", GL.SIDES)
def test_the_chain_ends_in_the_gram_form(side):
    assert str(G.one_step(side).formula) == ("(a_0*I + b_0*R + c_0*R*R)*X" if side == "left"
                                             else "X*(a_0*I + b_0*R + c_0*R*R)")
    assert str(G.gram_update(side).formula) == "R*(a_0*I + b_0*R + c_0*R*R)*(a_0*I + b_0*R + c_0*R*R)"
    end = "Q_3*X_0" if side == "left" else "X_0*Q_3"
    assert str(G.telescoping(side).formula) == end and str(G.restart(side).formula) == end
    for der in (G.one_step(side), G.gram_update(side)):
        assert all(s.check.symbolic.startswith("verified symbolically") for s in der.steps)
    for der in G.derivations():
        assert all(s.check.passed for s in der.steps), der.name


def test_the_gram_lemmas_are_all_used():
    used = {lem.number for der in G.derivations() for lem in der.lemmas_used()}
    assert {"GC", "GG", "GT", "GX", "GF", "GR", "GU", "GK"} <= used


def test_a_wrong_gram_recurrence_fails_its_step():
    """Planted: the iterates' Gram matrices paired with the wrong step of the recurrence."""
    it = G.iteration("left")
    der = identity_chain("planted.recurrence", "planted", it.x[G.STEPS], G.context(it.definitions))
    der.apply(GL.UNROLL, iterates={it.x[t + 1]: it.definitions[it.x[t + 1]] for t in range(G.STEPS)})
    wrong = dict(zip(it.a, [it.r[0], it.r[2], it.r[1]], strict=True))
    with pytest.raises(StepCheckFailed, match="lemma GR"):
        der.apply(GL.GRAM_RECURRENCE, grams=wrong)


@pytest.mark.parametrize("side", GL.SIDES)
def test_telescoping_into_the_wrong_q_fails_its_step(side):
    """Planted: all three steps' polynomials named Q_2 (an off-by-one in the accumulated product)."""
    it = G.iteration(side)
    der = identity_chain("planted.telescope", "planted", it.x[G.STEPS], G.context(it.definitions))
    der.apply(GL.UNROLL, iterates={it.x[t + 1]: it.definitions[it.x[t + 1]] for t in range(G.STEPS)})
    der.apply(GL.GRAM_RECURRENCE, grams=dict(zip(it.a, it.r, strict=True)))
    three = tuple(reversed(it.qr)) if side == "left" else tuple(it.qr)
    with pytest.raises(StepCheckFailed, match="lemma GT"):
        der.apply(GL.TELESCOPING, products={it.q[2]: three})


def test_a_flop_model_that_forgets_the_restarts_fails_against_the_routine(monkeypatch):
    """Planted: the Gram form's products without the extra Gram formation and Q X of each restart."""
    honest = GL.executed_products

    def forgetful(kind, side, n, m, steps, restarts):
        return honest(kind, side, n, m, steps, 0 * restarts) if kind == "gram" else honest(kind, side, n, m, steps,
                                                                                          restarts)
    monkeypatch.setattr(GL, "executed_products", forgetful)
    with pytest.raises(StepCheckFailed, match="lemma GK"):
        G.flops.__wrapped__("gram", "left")


def test_the_flop_counts_match_the_stated_model_and_the_routines():
    n, m, t = 768, 3072, 5
    assert G.flop_count("standard", n, m, t) == t * (4 * n * n * m + 2 * n ** 3)  # independent hand formulas
    for k in range(t):
        assert G.flop_count("gram", n, m, t, k) == 4 * (k + 1) * n * n * m + 2 * n ** 3 * (4 * t - 3 * k - 3)
    assert G.flop_count("gram", m, n, t, 1) == G.flop_count("gram", n, m, t, 1)  # either orientation
    assert G.flop_count("gram", n, m, t, t - 1) == G.flop_count("standard", n, m, t)  # a restart every step
    for kind, side, size, steps, restarts in [("gram", "left", (5, 11), 6, 2), ("gram", "right", (3, 4), 4, 3),
                                              ("standard", "right", (2, 9), 3, 0)]:
        assert routine_flops(kind, side, *size, steps, restarts) == G.flop_count(kind, *size, steps, restarts)
    with pytest.raises(ValueError, match="restarts must be in"):
        G.flop_count("gram", n, m, t, t)


def test_the_counter_counts_only_the_branch_that_runs():
    a = jnp.ones((3, 4), jnp.float32)

    def fn(flag):
        return jax.lax.cond(flag, lambda: (a @ a.T) @ a, lambda: a @ (a.T @ a))
    assert executed_matmul_flops(fn, jnp.asarray(True)) == 2 * 3 * 4 * 3 + 2 * 3 * 3 * 4
    assert executed_matmul_flops(fn, jnp.asarray(False)) == 2 * 4 * 3 * 4 + 2 * 3 * 4 * 4


def test_counting_without_computing_the_matrices_equals_running_the_program():
    """The count decides the routines' branches from their flags without computing a matrix; running the whole
    program on the data (``concrete=True``) gives the same count, restarts and orientations included."""
    for kind, side, (n, m), steps, restarts in [("gram", "left", (3, 7), 5, 2), ("gram", "right", (2, 5), 4, 3),
                                                ("gram", "left", (4, 4), 3, 0), ("standard", "right", (3, 6), 3, 0)]:
        x = jnp.zeros((n, m) if side == "left" else (m, n), jnp.float32)
        schedule = ((1.875, -1.25, 0.375),) * steps
        positions = tuple(range(1, restarts + 1))
        fn = (partial(newton_schulz, schedule=schedule) if kind == "standard" else
              partial(gram_newton_schulz_oriented, schedule=schedule, restarts=positions, wide=side == "left"))
        assert executed_matmul_flops(fn, x) == executed_matmul_flops(fn, x, concrete=True) > 0


def test_a_branch_the_matrix_decides_is_counted_by_running_it():
    def fn(x):
        return jax.lax.cond(jnp.sum(x) > 0, lambda: x @ x, lambda: x)
    assert executed_matmul_flops(fn, jnp.ones((4, 4))) == 2 * 4 ** 3
    assert executed_matmul_flops(fn, -jnp.ones((4, 4))) == 0


# ---- the routine --------------------------------------------------------------------------------------
def _scalar_iteration(sigma, schedule):
    for step in schedule:
        sigma = sigma * sum(c * sigma ** (2 * j) for j, c in enumerate(step))
    return sigma


@pytest.mark.parametrize("shape", [(6, 20), (20, 6), (2, 3, 5, 9)])
@pytest.mark.parametrize("restarts", [(), (2,), (1, 3)])
def test_the_routine_is_the_schedule_applied_to_the_singular_values(shape, restarts):
    """Against SVD: ``U p_T(Σ/‖X‖_F) Vᵀ`` in float64, and against the standard iteration."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    out = np.asarray(gram_newton_schulz(jnp.asarray(x), PE5, restarts))
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    norm = np.sqrt(np.sum(s * s, axis=-1, keepdims=True))
    expected = (u * _scalar_iteration(s / norm, PE5)[..., None, :]) @ vt
    assert np.max(np.abs(out - expected)) < 1e-12
    assert np.max(np.abs(out - np.asarray(newton_schulz(jnp.asarray(x), PE5)))) < 1e-12


def test_both_orientations_and_restarts_as_traced_data_under_jit():
    x = jnp.asarray(np.random.default_rng(1).standard_normal((4, 7, 30)))
    reference = np.asarray(gram_newton_schulz(x, PE5, (2,)))
    for wide in (True, False):  # the other orientation forms the large Gram matrix: same result
        assert np.max(np.abs(np.asarray(gram_newton_schulz_oriented(x, PE5, (2,), wide)) - reference)) < 1e-12
    fn = jax.jit(lambda x, flags: gram_newton_schulz(x, PE5, flags))
    for positions in [(2,), (1, 4), ()]:
        flags = restart_flags(positions, len(PE5))
        got = np.asarray(fn(x, flags))
        assert np.max(np.abs(got - np.asarray(gram_newton_schulz(x, PE5, positions)))) < 1e-12
    assert fn._cache_size() == 1  # one compilation for every restart set of one length
    assert np.all(np.asarray(gram_newton_schulz(jnp.zeros((3, 5)), PE5, (2,))) == 0)


@pytest.mark.parametrize("restarts,needle", [((5,), "restart position 5 is outside the schedule"),
                                             ((0,), "restart position 0 is outside the schedule"),
                                             ((2, 2), "repeat a position"),
                                             (jnp.zeros(3, bool), "must have shape \\(5,\\)")])
def test_bad_restarts_name_the_position(restarts, needle):
    with pytest.raises(ValueError, match=needle):
        gram_newton_schulz(jnp.ones((3, 5)), PE5, restarts)


@pytest.mark.parametrize("dtype,positions", [("float16", (2,)), ("bfloat16", (1, 2, 3))])
def test_certified_restarts_keep_the_routine_within_the_certified_bound_and_none_does_not(dtype, positions):
    """Muon's quintic on an ill-conditioned 16 × 64 matrix (one singular value 1, the rest 0.01: normalized,
    all in [l, 1], l = 1e-3 or 2u in bfloat16): with the certified restarts every singular value of the result is
    within the certified deviation (b) of 1; without restarts the Gram form leaves it (the model's prediction)."""
    cert = certify_positions("muon", MUON.steps, positions, Model(dtype, lower=default_lower(None, dtype)))
    bound = float(cert["deviation"]["bound"])
    s = np.concatenate([[1.0], np.full(15, 1e-2)])
    x = jnp.asarray(with_singular_values(np.random.default_rng(0), 16, 64, s), dtype)

    def deviation(restarts):
        out = np.asarray(gram_newton_schulz(x, MUON.as_floats(), restarts), np.float64)
        return np.max(np.abs(np.linalg.svd(out, compute_uv=False) - 1))
    assert deviation(positions) <= bound
    assert deviation(()) > bound


# ---- the benchmark's model and arguments (its timings are never asserted) ---------------------------------
def test_the_flop_model_chooses_the_gram_form_above_aspect_one_and_a_half():
    assert chosen(768, 3072, 5, 1) and chosen(64, 768, 5, 1) and chosen(100, 151, 5, 2)
    assert not chosen(100, 150, 5, 2) and not chosen(768, 768, 5, 1)
    assert not chosen(64, 768, 5, 4)  # a restart after every step costs what the standard iteration costs


@pytest.mark.parametrize("args,needle", [(["--shapes", "gpt3"], "unknown shape(s) gpt3"),
                                         (["--restarts", "7"], "restart position 7 is outside the schedule"),
                                         (["--repeats", "0"], "--repeats: must be >= 1")])
def test_the_benchmark_rejects_bad_arguments_with_one_line(args, needle):
    out = run_case("benchmarks.gram", args)  # its main, in this process
    assert out["rc"] == 2 and out["stderr"].count("\n") == 1 and needle in out["stderr"], out
