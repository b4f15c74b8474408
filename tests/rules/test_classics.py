"""The classics as checked derivations: every step holds, a planted wrong step is caught at that step
(named: classic, step, lemma, with a counterexample), the CLI prints the steps, the cross-checker
reaches every classic by name."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from sympy import Rational
from sympy.matrices.expressions import MatrixSymbol

from derivations import classics as C
from derivations.crosscheck.cli import main as crosscheck_main
from derivations.engine import derivation as engine_derivation
from derivations.engine.derivation import StepCheckFailed
from derivations.lemmas import NotApplicable, counting
from derivations.lemmas import spectral as S
from derivations.vocabulary import spectral_nodes as N
from derivations.vocabulary.evaluate import evaluate
from derivations.vocabulary.nodes import FULL_COLUMN_RANK, FactMatrix, dimension

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


@pytest.mark.parametrize("classic", C.CLASSICS, ids=lambda c: c.name)
def test_every_step_of_every_classic_holds(classic):
    ok, evidence = classic.check()
    assert ok, evidence
    for der in classic.derivations():
        assert der.steps and all(s.check.passed and s.check.mpmath_error is not None for s in der.steps)
        assert all(s.lemma.number and s.lemma.title for s in der.steps)


def test_results_are_the_classic_formulas():
    g = C.shampoo().start.expr.atoms(FactMatrix).pop()
    assert str(C.shampoo().formula) == f"msign({g})"
    assert str(C.odd_polynomial().formula) == "U*(a*Sigma + b*Sigma^(3) + c*Sigma^(5))*V.T"
    assert C.attention_rank().formula == C.d_h
    assert C.flops_quadratic().formula == 4 * C.n**2 * C.d and C.flops_linear().formula == 4 * C.n * C.d**2
    assert [x for x in C.crossover() if x.is_positive] == [C.d]
    assert str(C.eckart_young().formula) == "sigma_(r + 1)"
    assert C.lora().formula == C.r * (C.d_in + C.d_out)
    assert C.lora_fraction().formula == C.r * (C.d_in + C.d_out) / (C.d_in * C.d_out)
    assert C.llama_example() == 32 * 16 * ((4096 + 4096) + (4096 + 1024))  # W_Q 4096², W_V 1024 × 4096


# ---- planted wrong steps: each is caught at its step, naming the lemma, with a counterexample ----------------
def _doubled_power(expr, **kw):
    """(U Σ² Uᵀ)^{-1/2} where the statement has ^{-1/4}: the exponent −1/2 instead of −1/4."""
    wrong = expr.replace(lambda e: isinstance(e, N.PsdPower), lambda e: N.PsdPower(e.arg, 2 * e.power))
    return S.SPECTRAL_CALCULUS.rewrite(wrong, **kw)


def _even_powers(expr, **kw):
    """X (XᵀX)^k = U Σ^{2k} Vᵀ: an even power (one Σ lost when the run is merged)."""
    new, conds = S.DIAGONAL_POWERS.rewrite(expr, **kw)
    return new.replace(lambda e: isinstance(e, N.Singular) and e.power > 1,
                       lambda e: N.Singular(e.base, e.power - 1)), conds


def _rank_below_shape(expr, **kw):
    """rank(A) ≤ min(m, n) − 1: one too few."""
    new, conds = counting.RANK_SHAPE.rewrite(expr, **kw)
    return new - 1, conds


def _multiplications_only(expr, **kw):
    """m k p per product: the additions forgotten."""
    new, conds = counting.PRODUCT_COST.rewrite(expr, **kw)
    return new / 2, conds


def _sigma_r(expr, **kw):
    """‖Σ_{>r}‖_op = σ_r instead of σ_{r+1}."""
    new, conds = S.DIAGONAL_NORMS.rewrite(expr, **kw)
    return new.replace(lambda e: isinstance(e, N.SingularValue),
                       lambda e: N.SingularValue(e.args[0], e.args[1] - 1)), conds


def _only_a(expr, **kw):
    """#B + #A = r d_in: only A counted."""
    new, conds = counting.ENTRY_COUNT.rewrite(expr, **kw)
    return new.subs(C.d_out, 0), conds


PLANTED = [
    ("classics.shampoo", lambda plant: C.build_shampoo(plant), S.SPECTRAL_CALCULUS, _doubled_power, 5),
    ("classics.odd_polynomial", lambda plant: C.build_odd_polynomial(plant), S.DIAGONAL_POWERS, _even_powers, 3),
    ("classics.attention_rank", lambda plant: C.build_attention_rank(plant), counting.RANK_SHAPE, _rank_below_shape, 2),
    ("classics.linear_attention.flops_quadratic", lambda plant: C.build_flops("quadratic", plant),
     counting.PRODUCT_COST, _multiplications_only, 1),
    ("classics.eckart_young", lambda plant: C.build_eckart_young("op", plant), S.DIAGONAL_NORMS, _sigma_r, 6),
    ("classics.lora", lambda plant: C.build_lora(plant=plant), counting.ENTRY_COUNT, _only_a, 1),
]


@pytest.mark.parametrize(("name", "build", "lemma", "wrong", "step"), PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_wrong_step_is_caught_at_that_step(name, build, lemma, wrong, step, monkeypatch):
    build(None)  # the right lemma: every step holds
    with pytest.raises(StepCheckFailed) as info:
        build({lemma.key: C.planted(lemma, wrong)})
    text = str(info.value)
    assert text.startswith(f"{name} step {step} (")
    assert f"lemma {lemma.number} ({lemma.title})" in text
    if "sub-check 'instance of the statement'" in text:  # the trusted kernel refused it first
        monkeypatch.setattr(engine_derivation, "step_instance", lambda *a, **k: ("(bypassed)", None))
        with pytest.raises(StepCheckFailed) as info:  # and the numbers refute it on their own
            build({lemma.key: C.planted(lemma, wrong)})
        text = str(info.value)
        assert text.startswith(f"{name} step {step} (")
    assert "counterexample:" in text and "error" in text


def test_a_failing_classic_makes_the_cli_exit_1(monkeypatch, capsys):
    wrong = C.planted(S.DIAGONAL_NORMS, _sigma_r)
    bad = C.Classic("classics.planted", "Planted", "σ_r", lambda: (C.build_eckart_young("op", {wrong.key: wrong}),))
    monkeypatch.setattr(C, "CLASSICS", (bad,))
    assert C.main([]) == 1
    assert "classics.eckart_young step 6" in capsys.readouterr().out


# ---- lemmas refuse without their side conditions -------------------------------------------------------------
def test_lemmas_refuse_without_their_facts():
    n = dimension("n")
    plain = MatrixSymbol("G", n, n)
    with pytest.raises(NotApplicable, match="full column rank"):
        S.SVD.apply(plain, matrix=plain)
    tall = FactMatrix("X", dimension("m"), n, [FULL_COLUMN_RANK])
    u, s, _ = N.svd_parts(tall)  # U is m × n: orthonormal columns, not orthogonal
    with pytest.raises(NotApplicable, match="orthogonal"):
        S.SPECTRAL_CALCULUS.apply(N.PsdPower(u * s * u.T, Rational(-1, 4)))


def test_flops_are_counted_by_executing_the_products():
    q, k, v = C._qkv()
    rng = np.random.default_rng(0)
    env = {x: rng.standard_normal((5, 3)) for x in (q, k, v)}
    dims = {C.n: 5, C.d: 3}
    quad = evaluate(N.Flops(q * N.Group(k.T * v)), env, dims=dims)
    assert quad == 4 * 5 * 3 * 3
    assert evaluate(N.Flops(N.Group(q * k.T) * v), env, dims=dims) == 4 * 5 * 5 * 3


# ---- command line and cross-checks -----------------------------------------------------------------------------
def test_cli_prints_every_step(capsys):
    assert C.main(["classics.shampoo", "classics.lora"]) == 0
    out = capsys.readouterr().out
    assert "lemma f (Spectral calculus" in out and "side condition: U is orthogonal" in out
    assert "result: r*(d_in + d_out)" in out and "check: holds" in out


def test_cli_unknown_classic_exits_2(capsys):
    assert C.main(["classics.nope"]) == 2
    assert "known: classics.shampoo" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "formula", "status"), [
    ("classics.shampoo", "U V^T", 0),
    ("classics.shampoo", "msign(G)", 0),
    ("classics.shampoo", "(G G^T)^{-1/2} G", 0),
    ("classics.shampoo", "U Sigma^{-1} V^T", 1),
    ("classics.odd_polynomial", "U (a Sigma + b Sigma^3 + c Sigma^5) V^T", 0),
    ("classics.odd_polynomial", "a X + b X X^T X + c X X^T X X^T X", 0),
    ("classics.odd_polynomial", "U (a Sigma + b Sigma^2 + c Sigma^4) V^T", 1),
    ("classics.linear_attention", "Q (K^T V)", 0),
    ("classics.linear_attention.flops_quadratic", "4 n^2 d", 0),
    ("classics.linear_attention.flops_linear", "4 n^2 d", 1),
    ("classics.attention_rank", "d_h", 0),
    ("classics.lora", "r d_in + r d_out", 0),
    ("classics.lora.fraction", "r/d_in + r/d_out", 0),
    ("classics.lora", "sigma_r", 2),
    ("classics.nope", "U", 2),
])
def test_cross_checker_reaches_the_classics(name, formula, status, capsys):
    assert crosscheck_main([name, formula, "--no-cache"]) == status


def test_count_cross_check_reports_scale_and_sizes(capsys):
    assert crosscheck_main(["classics.lora", "r d_in", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "different" and out["method"] == "symbolic"
    ce = out["counterexample"]
    assert ce["derived"] != ce["candidate"] and set(ce["sizes"]) <= {"r", "d_in", "d_out"}
    assert crosscheck_main(["classics.linear_attention.flops_quadratic", "2 n^2 d", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["scale"] == "1/2"


@pytest.mark.parametrize("argv, message", [(["--bogus"], "unrecognized arguments"), (["nope"], "unknown classic")])
def test_classics_command_bad_input_is_one_line_exit_2(argv, message):
    out = subprocess.run([sys.executable, "-m", "derivations.classics", *argv], check=False, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr


def test_classics_command_on_a_full_disk_is_one_line_exit_2():
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "derivations.classics", "classics.lora"], check=False, stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "cannot write to stdout" in out.stderr
