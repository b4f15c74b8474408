"""The benchmark commands' models and argument handling (their timings are never asserted)."""

import subprocess
import sys

import pytest

from benchmarks.step import flop_model, ns_flops


def test_newton_schulz_flops_count_every_product():
    # one quintic step on 2 × 3: A = X Xᵀ (2·2·2·3 = 24), A·A (2·8 = 16), B X (24)
    assert ns_flops(2, 3, 1, 3) == 64
    assert ns_flops(3, 2, 1, 3) == 64  # formed on the short side
    assert ns_flops(2, 3, 5, 2) == 5 * 48  # cubic: no A·A


def test_flop_model_reproduces_the_published_estimate_at_gpt2_small():
    cm, muon = flop_model(768, 12, 12, 64, steps=5, degree=3)
    assert cm / muon == pytest.approx(0.31, abs=0.01)  # the flop model
    # Llama-3-8B: the O side's global d × H·d_h sign alone is half of Muon's two square signs
    cm, muon = flop_model(4096, 32, 8, 128, steps=5, degree=3)
    assert 0.5 < cm / muon < 0.52


@pytest.mark.parametrize("args", [["--shapes", "gpt3"], ["--repeats", "0"], ["--dtype", "int8"]])
def test_step_benchmark_rejects_bad_arguments_with_one_line(args):
    out = subprocess.run([sys.executable, "-m", "benchmarks.step", *args], check=False, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "error" in out.stderr


def test_lapack_threads_limits_the_library_jaxlib_calls_and_restores_it():
    from threadpoolctl import threadpool_info

    from numerics.kernels.lapack_threads import lapack_threads

    def scipy_threads():
        return {i["filepath"]: i["num_threads"] for i in threadpool_info() if "scipy" in i["filepath"]}

    before = scipy_threads()
    assert before, "SciPy's OpenBLAS (jaxlib's CPU LAPACK) is not loaded"
    with lapack_threads(1):
        assert set(scipy_threads().values()) == {1}
    assert scipy_threads() == before
    with pytest.raises(ValueError, match="positive int"):
        lapack_threads(0)


def test_step_measure_returns_times_and_the_paired_ratio(monkeypatch):
    """``benchmarks.gpu`` unpacks ``measure``'s result; SGD in place of both optimizers keeps this fast."""
    import jax.numpy as jnp
    import optax

    from benchmarks import step
    monkeypatch.setitem(step.SHAPES, "tiny", (32, 2, 1, 16))
    monkeypatch.setattr(step, "compositional_muon", lambda lr, pairs: optax.sgd(lr))
    monkeypatch.setattr(step.optax.contrib, "muon", lambda lr, ns_coeffs: optax.sgd(lr))
    t_cm, t_muon, ratio = step.measure("tiny", 3, jnp.float32)
    assert t_cm > 0 and t_muon > 0 and ratio > 0
    c_cm, c_muon, *rest = step.measure_with_compile("tiny", 3, jnp.float32)  # the first step's compile times first
    assert c_cm > 0 and c_muon > 0 and len(rest) == 3 and all(x > 0 for x in rest)


def test_paired_ratio_is_the_median_of_per_round_ratios():
    from benchmarks.interleave import paired_ratio
    assert paired_ratio([1.0, 4.0, 3.0], [2.0, 2.0, 1.0]) == 2.0  # ratios 0.5, 2, 3
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0, 2.0])
