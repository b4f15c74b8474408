"""Norm families: each ball solved through its dual norm, certified, and printed for every target."""

import dataclasses

import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from sympy import Symbol, sstr
from sympy.matrices.expressions import MatrixSymbol

from derivations.engine import norms as N
from derivations.engine.derivation import Problem
from derivations.engine.latex import latex
from derivations.printing.jax_printer import JaxPrinter
from derivations.printing.numpy_printer import NumpyPrinter
from derivations.vocabulary.interpret import MissingRule
from derivations.vocabulary.nodes import Inner, MatrixFunction, OpNorm
from derivations.vocabulary.numeric import NumericEvaluator, evaluate
from foundation.compute import jax_exact_scaling, jax_spectral_sign, numpy_exact_scaling, numpy_routines
from foundation.compute.reference import MpmathBackend

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

A, B = MatrixSymbol("A", 5, 3), MatrixSymbol("B", 5, 3)
beta = Symbol("beta", positive=True)


@pytest.mark.parametrize("family", N.FAMILIES, ids=lambda f: f.key)
def test_solve_is_certified_by_duality_in_float64_and_mpmath(family):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 3))
    errors = N.duality_errors(family, a, 0.7, rng=rng)
    assert max(errors.values()) < 1e-12, errors
    with mpmath.workdps(50):
        backend = MpmathBackend(50)
        errors = N.duality_errors(family, backend.asarray(a), 0.7, backend=backend)
    assert errors["value"] < 1e-40 and errors["feasible"] < 1e-40


@pytest.mark.parametrize("planted, caught_by", [
    (dataclasses.replace(N.FROBENIUS, sharp_of=lambda a: a), "feasible"),             # forgot to normalize
    (dataclasses.replace(N.OPERATOR, dual_of=N.FrobeniusNorm), "value"),              # wrong dual norm
    (dataclasses.replace(N.MAX_ABS, sharp_of=lambda a: 2 * N.Sign(a),
                         dual_of=lambda a: 2 * N.EntrywiseL1Norm(a)), "feasible"),    # outside the ball
    (dataclasses.replace(N.NUCLEAR, dual_of=N.FrobeniusNorm, sharp_of=N.FrobeniusUnit), "feasible"),
    (dataclasses.replace(N.OPERATOR, dual_of=OpNorm, sharp_of=N.TopSingular), "dual"),  # feasible, not optimal
])
def test_planted_wrong_solve_fails_its_certificate(planted, caught_by):
    errors = N.duality_errors(planted, np.random.default_rng(2).standard_normal((5, 3)), 0.7, trials=200)
    assert errors[caught_by] > 1e-3, errors


def test_ball_parts_names_what_is_wrong():
    z = MatrixSymbol("Z", 5, 3)
    assert N.ball_parts(Problem(z, Inner(A, z), N.FrobeniusNorm(z), beta)) == (N.FROBENIUS, A)
    with pytest.raises(N.NotABall, match="not the norm of a registered family"):
        N.ball_parts(Problem(z, Inner(A, z), Inner(z, z), beta))
    with pytest.raises(N.NotABall, match="not the variable"):
        N.ball_parts(Problem(z, Inner(A, z), OpNorm(2 * z), beta))
    with pytest.raises(N.NotABall, match="objective"):
        N.ball_parts(Problem(z, Inner(z, z), OpNorm(z), beta))


def _expressions():
    out = [Inner(A, B)]
    for f in N.FAMILIES:
        z, value = f.solve(A, beta)
        out += [z, value, f.norm(A), f.dual_of(A)]
    return out


def _run(printer_cls, expr, values, namespace):
    printer = printer_cls({"A": "A", "B": "B"}, {beta: "beta"})
    lines = printer.body([("out", expr)])
    ns = dict(namespace, **values)
    exec("\n".join(lines), ns)  # noqa: S102 (runs the printed code)
    return np.squeeze(np.asarray(ns["out"], dtype=float))


@pytest.mark.parametrize("expr", _expressions(), ids=sstr)
def test_every_scalar_and_argmin_prints_for_every_target(expr):
    rng = np.random.default_rng(3)
    values = {"A": rng.standard_normal((5, 3)), "B": rng.standard_normal((5, 3)), "beta": 0.7}
    ref = np.asarray(evaluate(expr, {A: values["A"], B: values["B"], beta: 0.7}), dtype=float)
    np_ns = {"np": np, "msign_svd": numpy_routines.msign_svd, "unit_scale": numpy_exact_scaling.unit_scale}
    jax_ns = {"jnp": jnp, "compute_dtype": jax_exact_scaling.compute_dtype,
              "spectral_sign": jax_spectral_sign.spectral_sign,
              "unit_scale": jax_exact_scaling.unit_scale, "msign": "svd", "schedule": (), "restarts": None,
              "gram_aspect": None}
    assert np.allclose(_run(NumpyPrinter, expr, values, np_ns), ref, atol=1e-12)
    assert np.allclose(_run(JaxPrinter, expr, values, jax_ns), ref, atol=1e-10)
    assert sstr(expr) and latex(expr)


def test_scalars_broadcast_over_a_batch():
    rng = np.random.default_rng(4)
    batch = rng.standard_normal((4, 5, 3))
    z, _ = N.FROBENIUS.solve(A, beta)
    got = _run(JaxPrinter, z, {"A": batch, "beta": 0.7}, {"jnp": jnp})
    for i in range(4):
        assert np.allclose(got[i], evaluate(z, {A: batch[i], beta: 0.7}))
    zero = _run(JaxPrinter, z, {"A": np.zeros((5, 3)), "beta": 0.7}, {"jnp": jnp})
    assert np.all(np.isfinite(zero)) and not zero.any()  # A♯ of zero is zero, never NaN


def test_missing_rule_names_node_and_interpreter():
    class Unknown(MatrixFunction):
        pass

    with pytest.raises(MissingRule, match="numeric evaluator has no rule for Unknown"):
        NumericEvaluator({A: np.ones((5, 3))})(Unknown(A))
    with pytest.raises(TypeError, match="NumpyPrinter has no rule for Unknown"):
        NumpyPrinter({"A": "A"}, {}).body([("out", Unknown(A))])


@pytest.mark.parametrize("lemma", [*N.NORM_LEMMAS, *(N.solve_lemma(f) for f in N.FAMILIES)], ids=lambda lem: lem.key)
def test_family_lemmas_pass_their_self_checks(lemma):
    result = lemma.self_check(np.random.default_rng(0))
    assert result.passed, result.failures


def test_planted_false_rewrite_fails_the_self_check():
    """A 'unitary invariance' that also drops a factor without orthonormal columns is caught."""
    from sympy.matrices.expressions import MatMul

    def drop_outer(expr, **_):
        if isinstance(expr, N.FrobeniusNorm) and isinstance(expr.args[0], MatMul):
            return N.FrobeniusNorm(expr.args[0].args[0]), []
        return N._isometry_rewrite(expr)

    planted = dataclasses.replace(N.UNITARY_INVARIANCE, rewrite=drop_outer)
    assert not planted.self_check(np.random.default_rng(0)).passed
