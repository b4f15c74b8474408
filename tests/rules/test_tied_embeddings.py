"""Tied embeddings (``derivations.tied_embeddings``): the step, its two role norms and where the choice holds."""

from dataclasses import replace

import numpy as np
import pytest

from derivations import Msign
from derivations import tied_embeddings as T
from derivations.engine.norms import duality_errors
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.norm_nodes import AspectScale
from numerics.emitted import tied_embeddings as emitted

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def _muon_rms(g, eps):
    """Independent: ``−ε √(V/d) U Vᵀ`` from the SVD of ``G``."""
    u, _, vt = np.linalg.svd(g, full_matrices=False)
    return -eps * np.sqrt(g.shape[0] / g.shape[1]) * u @ vt


def test_derived_step_is_rms_scaled_muon_on_the_summed_gradient():
    rng = np.random.default_rng(0)
    lookup, head = np.zeros((40, 8)), rng.standard_normal((40, 8))
    lookup[[3, 7, 7, 11]] += rng.standard_normal((4, 8))  # the lookup's sparse rows, one token twice
    g = lookup + head
    got = evaluate_on(T.update().formula, {"G_E": g, "epsilon": 0.3})
    assert np.allclose(got, _muon_rms(g, 0.3), atol=1e-12)
    assert T.output_norm(got) == pytest.approx(0.3)
    assert T.input_norm(got) <= 0.3 * np.sqrt(40) / 8 * (1 + 1e-12)  # √V ≤ d: the lookup ball is not binding
    emitted_step = np.asarray(emitted.tied_embedding(g, eps=0.3, msign="svd"))
    assert np.allclose(emitted_step, got, atol=1e-12)


def test_domination_holds_below_sqrt_v_equal_d_and_fails_above():
    rows = {label: value for label, value, _ in T.measurements(np.random.default_rng(1))}
    for vocab, width in ((100, 64), (2000, 64), (5000, 50)):
        unit = np.sqrt(vocab) / width
        key = (f"V = {vocab}, d = {width}: worst N_in / N_out over random steps, "
               f"in units of √V/d = {unit:.3g} (at most 1)")
        assert rows[key] <= 1 + 1e-12
        attained = rows[f"V = {vocab}, d = {width}: N_in / N_out at ΔE = e_t vᵀ, in units of √V/d (= 1: attained)"]
        assert attained == pytest.approx(1.0)
        # √V/d > 1 (V = 5000, d = 50): a one-row step has N_in > N_out, the maximum is not N_out
        assert (attained * unit > 1) == (vocab == 5000)


def test_planted_wrong_exponent_of_the_aspect_scale_fails_the_certificate():
    """The sharp map with √(d/V) instead of √(V/d) (the aspect scale's exponent flipped) is not the steepest
    descent of the head's norm: its duality certificate fails on a tall table."""
    planted = replace(T.RMS, sharp_of=lambda a: (1 / AspectScale(a)) * Msign(a))
    g = np.random.default_rng(2).standard_normal((30, 6))
    assert max(duality_errors(T.RMS, g, 0.3).values()) < 1e-12
    errors = duality_errors(planted, g, 0.3, trials=50)
    assert errors["feasible"] > 1e-3 or errors["value"] > 1e-3, errors
