"""``derive()`` open to new problems, through the public API: a researcher's own lemma joins the search
(the README's example), chain-rule definitions with any number of partners (the middle factor of
``M = A W Bᵀ`` under the operator, Frobenius and RMS→RMS norms, found, emitted and equal to closed forms
computed here in NumPy), wide partners (the LoRA pair ``B A``, both halves in one ``Context``), isometries
removed from the RMS→RMS norm with its aspect scale, and every failure a ``SearchFailed`` whose first line
says why the most promising branch stopped, its states printed simplified.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import mpmath
import numpy as np
import pytest
from sympy.matrices.expressions import MatrixSymbol

from derivations import (
    FAMILIES,
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    Context,
    Derivation,
    EmittedFunction,
    FactMatrix,
    Inner,
    Lemma,
    OpNorm,
    Problem,
    RuleModule,
    SearchFailed,
    StepCheckFailed,
    derive,
    dimension,
    positive_symbol,
    product,
    transpose,
)
from derivations import lemmas as L
from derivations.cli import render
from derivations.engine import derivation, search
from derivations.engine import norms as N
from derivations.lemmas import chain_rule
from derivations.lemmas.base import _NP
from foundation.compute.reference import MpmathBackend

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

NORMS = {f.key: f for f in FAMILIES}
k, l, m, n = (dimension(s) for s in "klmn")  # noqa: E741 (the dimensions as printed)
eps = positive_symbol("epsilon")
A, B = FactMatrix("A", k, m, [FULL_COLUMN_RANK]), FactMatrix("B", l, n, [FULL_COLUMN_RANK])
W, dW = MatrixSymbol("W", m, n), MatrixSymbol("dW", m, n)
G_M, G_A, G_W, G_B = (MatrixSymbol("G_M", k, l), MatrixSymbol("G_A", k, m), MatrixSymbol("G_W", m, n),
                      MatrixSymbol("G_B", l, n))
#: M = A W Bᵀ: every factor's gradient, as a model stores them (the middle one has two partners)
GRADIENTS = {G_A: product(G_M, B, transpose(W)), G_W: product(transpose(A), G_M, B), G_B: product(transpose(G_M), A, W)}
LIGHT = {k: 6, l: 5, m: 3, n: 2}


# ---- independent NumPy references -------------------------------------------------------------
def _inv_sqrt(s):
    w, v = np.linalg.eigh(s)
    return (v / np.sqrt(w)) @ v.T


def _msign(x):
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    return u @ vt


def _middle_closed_form(family, a, b, g_m, eta):
    """``ΔW`` for ``min ⟨G_M, A ΔW Bᵀ⟩ s.t. ‖A ΔW Bᵀ‖ ≤ η``: with ``A = U_A C_A``, ``B = U_B C_B`` the problem is
    ``min ⟨Ĝ, Z⟩ s.t. ‖U_A Z U_Bᵀ‖ ≤ η`` in ``Z = C_A ΔW C_B``, ``Ĝ = C_A⁻¹ Aᵀ G_M B C_B⁻¹``."""
    ca, cb = _inv_sqrt(a.T @ a), _inv_sqrt(b.T @ b)
    g_hat = ca @ a.T @ g_m @ b @ cb
    sharp = {"operator": _msign(g_hat), "frobenius": g_hat / np.linalg.norm(g_hat),
             "rms": np.sqrt(a.shape[0] / b.shape[0]) * _msign(g_hat)}[family]  # ‖·‖_rms = √(cols/rows)‖·‖_op
    return -eta * ca @ sharp @ cb


def _norm(family, x):
    return {"operator": np.linalg.norm(x, 2), "frobenius": np.linalg.norm(x),
            "rms": np.sqrt(x.shape[1] / x.shape[0]) * np.linalg.norm(x, 2)}[family]


# ---- the middle factor, three norms -------------------------------------------------------------
@pytest.fixture(scope="module")
def middle_module():
    """The middle factor of ``A W Bᵀ`` derived under three norms with one ``Context`` (all three factor gradients
    defined), emitted as one NumPy module (float64, SVD msign) and, for the RMS→RMS rule, as JAX."""
    ctx = Context(definitions=GRADIENTS, check_dims=[LIGHT])
    change = product(A, dW, transpose(B))
    ders = {key: derive(Problem(dW, Inner(G_M, change), NORMS[key].norm(change), eps), ctx, name=f"middle.{key}")
            for key in ("operator", "frobenius", "rms")}
    fns = [EmittedFunction(f"middle_{key}", f"middle factor, {key} norm", [A, B, G_W], [("dW", der)])
           for key, der in ders.items()]
    emitted: dict = {"numpy": {}, "jax": {}}
    for target, chosen in (("numpy", fns), ("jax", fns[-1:])):
        module = RuleModule(name="middle", title="Middle factor", derivations=lambda: list(ders.values()),
                            functions=lambda chosen=chosen: chosen, scalars={eps: "eps"})
        exec(render(module, target), emitted[target])  # noqa: S102 (the emitted module)
    return ders, emitted


@pytest.mark.parametrize("family", ["operator", "frobenius", "rms"])
def test_middle_factor_found_emitted_and_equal_to_the_closed_form(middle_module, family):
    ders, emitted = middle_module
    der = ders[family]
    assert {s.lemma.number for s in der.steps} >= {"CR", "4", "6a", "6b", {"operator": "2", "frobenius": "2u",
                                                                              "rms": "2r"}[family]}
    rng = np.random.default_rng(3)
    for kk, ll, mm, nn in ((7, 6, 3, 2), (5, 5, 4, 4)):  # tall factors, and square ones
        a, b, g_m = rng.standard_normal((kk, mm)), rng.standard_normal((ll, nn)), rng.standard_normal((kk, ll))
        got = emitted["numpy"][f"middle_{family}"](a, b, a.T @ g_m @ b, eps=0.3)
        want = _middle_closed_form(family, a, b, g_m, 0.3)
        assert np.allclose(got, want, rtol=1e-9, atol=1e-11)
        if family == "rms" and kk == 7:  # the JAX printer's aspect scales (shapes read at run time)
            jax_got = emitted["jax"]["middle_rms"](a, b, a.T @ g_m @ b, eps=0.3, msign="svd")
            assert np.allclose(np.asarray(jax_got), want, rtol=1e-9, atol=1e-11)
        # the closed form is checked too: feasible with a tight budget, and no feasible point does better
        change = a @ want @ b.T
        assert _norm(family, change) == pytest.approx(0.3, rel=1e-9)
        for _ in range(20):
            y = a @ rng.standard_normal((mm, nn)) @ b.T
            assert np.sum(g_m * y) * 0.3 / _norm(family, y) >= np.sum(g_m * change) - 1e-9


def test_chain_rule_with_any_number_of_partners_matches_automatic_differentiation():
    """Four factors ``M = A₁ A₂ X Bᵀ`` (float64 and 50-digit mpmath), and the three gradients of ``A W Bᵀ`` in one
    instance: every factor gradient from differentiating one random loss equals its definition."""
    d = dimension("d")
    a1, a2 = FactMatrix("A_1", k, d, [FULL_COLUMN_RANK]), FactMatrix("A_2", d, m, [FULL_COLUMN_RANK])
    g_x, g_mm = MatrixSymbol("G_X", m, n), MatrixSymbol("G_M", k, l)
    four = {g_x: product(transpose(a2), transpose(a1), g_mm, B)}
    dims = {**LIGHT, d: 4}
    rng = np.random.default_rng(0)
    out, _ = chain_rule._chain_instance({}, rng, _NP, dims, gradients=four)
    assert np.allclose(out[g_x], out[a2].T @ out[a1].T @ out[g_mm] @ out[B], atol=1e-12)
    with mpmath.workdps(50):
        out, _ = chain_rule._chain_instance({}, rng, MpmathBackend(50), dims, gradients=four)
        diff = out[g_x] - out[a2].T * out[a1].T * out[g_mm] * out[B]
        assert mpmath.mnorm(diff, 1) < mpmath.mpf(10) ** -40
    out, overridden = chain_rule._chain_instance({}, rng, _NP, LIGHT, gradients=GRADIENTS)
    assert overridden == {G_M, G_A, G_W, G_B}
    for name, definition in GRADIENTS.items():
        factors = [out[f.arg].T if f.is_Transpose else out[f] for f in definition.args]
        assert np.allclose(out[name], np.linalg.multi_dot(factors), atol=1e-12), name


def test_chain_rule_instance_samples_a_missing_partner_in_its_own_shape():
    """A partner missing from the instance (tall, wide, or on the left) is sampled in its own shape; before the fix
    this raised a bare ``StopIteration``."""
    v, left = FactMatrix("V", n, l, [FULL_ROW_RANK]), FactMatrix("L", k, m, [FULL_COLUMN_RANK])
    g_x, g_y, g = MatrixSymbol("G_X", k, n), MatrixSymbol("G_Y", m, l), MatrixSymbol("G", k, l)
    rng = np.random.default_rng(1)
    for grads, check in (({g_x: product(g, transpose(v))}, lambda o: o[g] @ o[v].T),
                         ({g_y: product(transpose(left), g)}, lambda o: o[left].T @ o[g])):
        out, _ = chain_rule._chain_instance({}, rng, _NP, LIGHT, gradients=grads)
        name = next(iter(grads))
        assert np.allclose(out[name], check(out), atol=1e-12)


def test_planted_wrong_product_in_the_general_chain_rule_fails_the_step(monkeypatch):
    """An autodiff instance of ``M = F₁ ⋯ F_k`` that differentiates another product (its last, square factor
    transposed) disagrees with the rewrite ``Aᵀ G_M B → G_W``: the chain-rule step fails its check."""
    true_fn = chain_rule._jax_chain_fn

    def planted(der):
        der.apply(L.ADJOINT_MOVE, variable=dW)
        return der.apply(L.CHAIN_RULE, gradients=GRADIENTS)
    change = product(A, dW, transpose(B))
    problem = Problem(dW, Inner(G_M, change), OpNorm(change), eps)
    ctx = Context(definitions=GRADIENTS, check_dims=[{k: 5, l: 5, m: 3, n: 5}])
    assert planted(Derivation("chain.ok", "ok", problem, ctx)).steps[-1].check.passed
    monkeypatch.setattr(chain_rule, "_jax_chain_fn", lambda count: lambda fs, c, b: _wrong(true_fn(count), fs, c, b))
    with pytest.raises(StepCheckFailed, match="chain.planted step 2 .*lemma CR"):
        planted(Derivation("chain.planted", "planted", problem, ctx))


def _wrong(fn, fs, c, b):
    """The gradients of another product: the last factor (square at the planted sizes) transposed."""
    gm, gs = fn((*fs[:-1], fs[-1].T), c, b)
    return gm, (*gs[:-1], gs[-1].T)


# ---- wide partners: the LoRA pair in one Context ---------------------------------------------
def test_lora_pair_with_a_wide_factor_in_one_context():
    d_out, d_in, r = dimension("d_out"), dimension("d_in"), dimension("r")
    b_, a_ = FactMatrix("B", d_out, r, [FULL_COLUMN_RANK]), FactMatrix("A", r, d_in, [FULL_ROW_RANK])
    g_w, g_b, g_a = MatrixSymbol("G_W", d_out, d_in), MatrixSymbol("G_B", d_out, r), MatrixSymbol("G_A", r, d_in)
    db, da = MatrixSymbol("dB", d_out, r), MatrixSymbol("dA", r, d_in)
    ctx = Context(definitions={g_b: product(g_w, transpose(a_)), g_a: product(transpose(b_), g_w)},
                  check_dims=[{d_out: 7, d_in: 5, r: 2}])
    half = eps / 2
    found = {v: derive(Problem(v, Inner(g_w, ch), OpNorm(ch), half), ctx, name=f"lora.{v}")
             for v, ch in ((db, product(db, a_)), (da, product(b_, da)))}
    fn = EmittedFunction("lora_pair", "LoRA half-split", [b_, a_, g_b, g_a], [("dB", found[db]), ("dA", found[da])])
    module: dict = {}
    exec(render(RuleModule(name="lora_pair", title="LoRA pair", derivations=lambda: list(found.values()),  # noqa: S102
                           functions=lambda: [fn], scalars={eps: "eps"}), "numpy"), module)
    rng = np.random.default_rng(4)
    bv, av, gw = rng.standard_normal((9, 3)), rng.standard_normal((3, 6)), rng.standard_normal((9, 6))
    got_b, got_a = module["lora_pair"](bv, av, gw @ av.T, bv.T @ gw, eps=0.2)
    ca, cb = _inv_sqrt(av @ av.T), _inv_sqrt(bv.T @ bv)  # C_A = (A Aᵀ)^{1/2} for the wide A
    assert np.allclose(got_b, -0.1 * _msign(gw @ av.T @ ca) @ ca, atol=1e-11)
    assert np.allclose(got_a, -0.1 * cb @ _msign(cb @ bv.T @ gw), atol=1e-11)
    assert np.linalg.norm(got_b @ av, 2) == pytest.approx(0.1) and np.linalg.norm(bv @ got_a, 2) == pytest.approx(0.1)


# ---- the RMS→RMS isometry lemma ---------------------------------------------------------------
def test_rms_isometry_lemma_checks_and_a_scale_free_variant_fails():
    assert L.RMS_ISOMETRY.self_check(np.random.default_rng(0)).passed
    assert L.RMS_ISOMETRY in L.ALL_LEMMAS and L.RMS_ISOMETRY in search.search_lemmas()
    careless = replace(L.RMS_ISOMETRY, rewrite=lambda expr, **kw: (L.RMS_ISOMETRY.rewrite(expr, **kw)[0].replace(
        lambda e: e.is_Pow and e.exp == -1, lambda e: 1), []))  # the isometry stripped, its aspect forgotten
    failed = careless.self_check(np.random.default_rng(0))
    assert not failed.passed and failed.errors["rewrite preserves value"] > 0.1


# ---- a researcher's lemma --------------------------------------------------------------------
def _readme_lemma_block() -> str:
    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = text.split("**Your own lemma in the search.**", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


@pytest.fixture(scope="module")
def readme_lemma():
    ns: dict = {}
    exec(_readme_lemma_block(), ns)  # noqa: S102 (the README's example, run as a user would)
    return ns


#: the registered homogeneity of norms (Lemma Hn) taken out of a search: a researcher's lemma under its key replaces it
WITHOUT_HN = replace(L.HOMOGENEITY, applies=L.Applies(lambda view: []))


def test_readme_lemma_joins_the_search_and_is_cited(readme_lemma):
    code = _readme_lemma_block()
    assert re.findall(r"^from derivations(\.\w+)+ import", code, re.MULTILINE) == []  # public API only
    rule, lemma = readme_lemma["rule"], readme_lemma["HOMOGENEITY"]
    assert str(rule.formula) == "(-epsilon/s)*msign(G)"
    ctx = Context(check_dims=[{m: 5, n: 3}])
    assert lemma.key == L.HOMOGENEITY.key  # under Lemma Hn's key: the researcher's lemma takes its place
    own = derive(readme_lemma["problem"], ctx, lemmas=[lemma], name="scaled_muon")
    assert own.steps[0].lemma is lemma and [s.lemma.number for s in own.steps] == ["H", "1"]
    assert own.formula == rule.formula
    registered = derive(readme_lemma["problem"], ctx, name="scaled_muon")  # Lemma Hn, registered, does it too
    assert [s.lemma.number for s in registered.steps] == ["Hn", "1"] and registered.formula == rule.formula
    with pytest.raises(SearchFailed) as info:  # without either: no lemma takes the scale out of the norm
        derive(readme_lemma["problem"], ctx, lemmas=[WITHOUT_HN], name="scaled_muon")
    first = str(info.value).splitlines()[0]
    assert first.startswith("derive: no derivation of scaled_muon found: the most promising branch")
    assert "solve: the constraint bounds s*dW, not the variable dW itself" in first


def test_planted_scale_forgotten_by_the_scaled_solve_fails_its_check(readme_lemma, monkeypatch):
    """``s ‖ΔW‖_op ≤ ε`` is the ball of radius ``ε/s``; a solve that keeps the radius ``ε`` is caught by the stated
    constraint evaluated at its argmin (the duality certificate of the forgotten ball alone would pass)."""
    rule = readme_lemma["rule"]
    assert rule.steps[-1].check.subchecks["stated constraint tight"] < 1e-12
    def squared(problem):  # the radius β/c² in place of β/c: a ball the certificate alone accepts
        ball = N.unscaled(problem)
        return problem if ball is problem else replace(ball, budget=ball.budget ** 2 / problem.budget)
    monkeypatch.setattr(derivation, "unscaled", squared)
    with pytest.raises(SearchFailed) as info:
        derive(readme_lemma["problem"], Context(check_dims=[{m: 5, n: 3}]), lemmas=[readme_lemma["HOMOGENEITY"]])
    assert "solve (operator ball): pruned by its check (sub-check 'stated constraint tight' failed" in str(info.value)


def test_a_lemma_failing_its_self_check_cannot_join(readme_lemma):
    lemma, sym = readme_lemma["HOMOGENEITY"], readme_lemma
    false = replace(lemma, identities=lambda: ([(OpNorm(product(sym["s"], sym["Z"])), 2 * sym["s"] * OpNorm(sym["Z"]))],
                                               lemma.identities()[1]))
    with pytest.raises(SearchFailed, match=r"^derive: lemma H \(Homogeneity of the operator norm\) fails its "
                                           r"self-check.*sub-check 'statement'"):
        derive(sym["problem"], Context(check_dims=[{m: 5, n: 3}]), lemmas=[false])
    with pytest.raises(SearchFailed, match="lemmas= takes a list of Lemma objects"):
        derive(sym["problem"], Context(check_dims=[{m: 5, n: 3}]), lemmas=lemma)
    with pytest.raises(SearchFailed, match="^derive: context must be a Context, got"):
        derive(sym["problem"], {"check_dims": [{m: 5, n: 3}]})
    with pytest.raises(SearchFailed, match="^derive: cannot start scaled: .*dimension below 2"):
        derive(sym["problem"], Context(check_dims=[{m: 1, n: 3}]), name="scaled")
    with pytest.raises(SearchFailed, match="^derive: the search for odd stopped on AttributeError"):
        derive(sym["problem"], Context(definitions={sym["G"]: "G_M W"}, check_dims=[{m: 5, n: 3}]), name="odd")


def test_a_lemma_whose_code_raises_never_escapes_derive(readme_lemma):
    """A rewrite that raises ``StopIteration`` (or any exception) prunes its branch and is reported; the search
    goes on and finds the derivation with the good lemma."""
    def broken(expr, **_):
        return next(iter(())), []
    bad = Lemma(key="broken", number="X", title="Broken", statement="", rewrite=broken)
    ns = readme_lemma
    rule = derive(ns["problem"], Context(check_dims=[{m: 5, n: 3}]), lemmas=[bad, ns["HOMOGENEITY"]])
    assert [s.lemma.number for s in rule.steps] == ["H", "1"]
    with pytest.raises(SearchFailed) as info:
        derive(ns["problem"], Context(check_dims=[{m: 5, n: 3}]), lemmas=[bad, WITHOUT_HN])
    assert "Lemma X (Broken): StopIteration" in str(info.value)


# ---- failures are explained, their states simplified ------------------------------------------
def test_dead_end_states_are_printed_simplified(monkeypatch):
    """``min ⟨G, ΔW Bᵀ⟩ s.t. ‖ΔW Bᵀ‖_rms`` without Lemma 2r: the search stops at states that hold
    ``C_B C_B⁻¹``; the report prints them cancelled (a planted report that does not simplify shows them)."""
    g, x = MatrixSymbol("G", m, l), MatrixSymbol("dW", m, n)
    problem = Problem(x, Inner(g, product(x, transpose(B))), NORMS["rms"].norm(product(x, transpose(B))), eps)
    monkeypatch.setattr(L, "RMS_ISOMETRY", replace(L.RMS_ISOMETRY, applies=None))

    def failure() -> str:
        with pytest.raises(SearchFailed) as info:
            derive(problem, Context(check_dims=[{m: 4, n: 2, l: 5}]), name="stuck.rms", max_expansions=12)
        return str(info.value)
    msg = failure()
    first = msg.splitlines()[0]
    assert re.match(r"derive: no derivation of stuck\.rms found: the most promising branch \(after \[.*\], "
                    r"\d+ obstacles left\) stopped at .*: ", first)
    assert "C_B*C_B^-1" not in msg and "C_B^-1*C_B" not in msg
    monkeypatch.setattr(search, "cancel_roots", lambda expr: expr)
    assert "C_B*C_B^-1" in failure()
