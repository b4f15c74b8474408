"""A diagnosis for every wrong formula: the near variants at every occurrence, the same slips
found from the candidate's side, and the first differing subexpression localised with its scale, transpose
or exponent, else a counterexample of just that part. Each formerly undiagnosed miss (they all ended in "no
scalar multiple and none of the near variants of the derived result matches") is a case below with the
words its diagnosis must carry; every claim is checked at full precision, and the diagnosis never changes a
verdict."""

import dataclasses
import json

import pytest
from sympy import sstr

from derivations.crosscheck import diagnosis, identities, relations, rule_lookup
from derivations.crosscheck.checker import compare, parse_for
from derivations.crosscheck.cli import main as crosscheck_main
from derivations.crosscheck.mutations import mutations
from derivations.crosscheck.verdict import show
from derivations.parsing.targets import target_of
from derivations.vocabulary.nodes import FactMatrix, GramInvSqrt, GramSqrt, dimension, positive_symbol

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

OLD = "no scalar multiple and none of the near variants"

# derivations built once per module (each is checked step by step when built); where a case needs only a
# derived expression over the half-split names, it is put on the query side's target (same names, facts,
# definitions and sizes) instead of building one more derivation
ON_QUERY = {
    "halfsplit.isotropic_query": "-eps/(2 c_K) msign(G_Q)",
    "halfsplit.product_step": "-eps/2 msign(G_M P_K) - eps/2 msign(P_Q G_M)",
    "joint.block_roots": "-eps/2 msign([G_Q C_K^-1 | G_K C_Q^-1]) blockdiag(C_K^-1, C_Q^-1)",
}


@pytest.fixture(scope="module")
def target():
    built = {}

    def get(name):
        if name not in built:
            if name in ON_QUERY:
                query = get("halfsplit.query")
                built[name] = dataclasses.replace(query, name=name, expr=parse_for(query, ON_QUERY[name]))
            else:
                built[name] = target_of(*rule_lookup.find_derivation(name, use_cache=False))
        return built[name]
    return get


def check(target, name, text, **kw):
    if name.startswith("identity"):
        lhs, rhs = text.split(" ;; ")
        facts = [f for f in name.split(" | ")[1:]]
        return compare(*identities.identity_target(lhs, rhs, identities.parse_assumptions(facts)), **kw)
    t = target(name)
    return compare(t, parse_for(t, text), **kw)


def said(v, *words):
    text = "\n".join(v.diagnosis)
    return all(w in text for w in words)


# ---- formerly undiagnosed misses, each with the words its diagnosis carries ----------------------------
MISSES = [
    # G_M's transpose dropped in an expanded form (G_K = G_Mᵀ W_Q written out)
    ("halfsplit.key", "-eps/2 msign(G_M W_Q C_Q^-1) C_Q^-1", ["the candidate with G_M transposed equals"]),
    # C_K^{-1/2}: the Gram matrix to the power -1/4 where the derivation has -1/2, at both places
    ("halfsplit.query", "-eps/2 msign(G_Q C_K^{-1/2}) C_K^{-1/2}",
     ["= C_K^(-1/2) in place of C_K^-1 (Gram exponent -1/4 instead of -1/2) (at all 2 occurrences)"]),
    # the outer Gram W_K W_Kᵀ: on the wrong side of G_Q, or between G_M and W_K
    ("halfsplit.query", "-eps/2 msign((W_K W_K^T)^{-1/2} G_Q) C_K^-1", ["C_K^-1 on the wrong side: before G_Q"]),
    ("halfsplit.query", "-eps/2 msign(G_M (W_K W_K^T)^{-1/2} W_K) C_K^-1",
     ["the candidate with the whitening (W_K*W_K.T)^(-1/2) on the wrong side"]),
    ("identity | W: square", "msign(G (W^T W)^{-1/2}) (W^T W)^{-1/2} ;; msign(G (W W^T)^{-1/2}) (W W^T)^{-1/2}",
     ["the Gram matrix W*W.T in place of W.T*W", "(at all 2 occurrences)"]),
    # msign of a sum
    ("halfsplit.product_step", "-eps/2 msign(G_M P_K + P_Q G_M)", ["msign of the sum instead of the sum of msigns"]),
    # swapped blocks in blockdiag(C_K⁻¹, C_Q⁻¹)
    ("joint.block_roots", "-eps/2 msign([G_Q C_K^-1 | G_K C_Q^-1]) blockdiag(C_Q^-1, C_K^-1)",
     ["the blocks C_K^-1 and C_Q^-1 of blockdiag(C_K^-1, C_Q^-1) swapped"]),
    # a per-head msign on the O side
    ("hybrid_ov.block_roots",
     "-eps/2 [msign(G_O1 C_V1t^-1) | msign(G_O2 C_V2t^-1)] blockdiag(C_V1t^-1, C_V2t^-1)",
     ["msign block by block (per head) instead of one msign over the whole [G_O1*C_V1t^-1 | G_O2*C_V2t^-1]"]),
    # λ where the derivation has 2λ
    ("sylvester.achieved_change", "-eps msign(G_M) - lambda H",
     ["the candidate's term (-lambda)*H where the derived result has (-2*lambda)*H: 1/2 × it",
      "(the coefficient -lambda where the derived result has -2*lambda)", "(the only difference)"]),
    # the sign of one term
    ("sylvester.achieved_change", "-eps msign(G_M) + 2 lambda H", ["the sign of the term (-2*lambda)*H flipped"]),
    # powers of c_K in the isotropic rule
    ("halfsplit.isotropic_query", "-eps/(2 c_K^2) msign(G_Q)",
     ["the candidate is c_K^-1 × the derived result", "c_K^-2 where the derived result has c_K^-1"]),
    ("halfsplit.isotropic_query", "-eps c_K/2 msign(G_Q)", ["c_K where the derived result has c_K^-1"]),
    # the root instead of the inverse root at every occurrence
    ("halfsplit.query", "-eps/2 msign(G_Q C_K) C_K", ["C_K instead of its inverse C_K^-1 (at all 2 occurrences)"]),
    # the inverse Gram instead of the inverse root, at every occurrence
    ("halfsplit.query", "-eps/2 msign(G_Q inv(W_K^T W_K)) inv(W_K^T W_K)",
     ["the inverse Gram matrix instead of the inverse square root", "(at all 2 occurrences)"]),
    # Shampoo with exponent -1/2 (its one-step preconditioner has -1/4 on both sides)
    ("classics.shampoo", "(G G^T)^{-1/2} G (G^T G)^{-1/2}",
     ["the candidate with exponent -1/4 in place of -1/2 in every Gram root"]),
    # even powers in a Newton–Schulz polynomial: on the singular values, and in a Gram-form step
    ("classics.odd_polynomial", "U (a Sigma + b Sigma^2 + c Sigma^4) V^T",
     ["the candidate's term b*Sigma*Sigma where the derived result has b*Sigma^(3): exponent 2 where the "
      "derived result has 3", "exponent 4 where the derived result has 5"]),
    ("identity", "(a I + b X X^T + c X X^T X X^T) X ;; a X + b (X X^T)^{1/2} X + c X X^T X",
     ["(X*X.T)^(1/2) where the derived result has X*X.T: exponent 1/2 of the Gram matrix X*X.T where the "
      "derived result has 1", "a missing factor X.T*X"]),
]


@pytest.mark.parametrize("name, text, words", MISSES, ids=[f"{n}: {t}" for n, t, _ in MISSES])
def test_each_former_miss_is_diagnosed(target, name, text, words):
    v = check(target, name, text)
    assert v.verdict == "different"
    assert said(v, *words) and not said(v, OLD), v.diagnosis


# ---- near variants at every occurrence ---------------------------------------------------------------
def test_a_slip_is_tried_at_each_occurrence_and_at_all_of_them(target):
    t = target("halfsplit.query")
    variants = {words: sstr(e) for words, e in mutations(t.expr, t.namespace)}
    assert variants["C_K instead of its inverse C_K^-1 (at all 2 occurrences)"] == "(-epsilon/2)*msign(G_Q*C_K)*C_K"
    assert variants["C_K instead of its inverse C_K^-1 (occurrence 2 of 2)"] == "(-epsilon/2)*msign(G_Q*C_K^-1)*C_K"
    assert variants["C_K instead of its inverse C_K^-1 (occurrence 1 of 2)"] == "(-epsilon/2)*msign(G_Q*C_K)*C_K^-1"
    v = check(target, "halfsplit.query", "-eps/2 msign(G_Q C_K) C_K^-1")
    assert said(v, "(occurrence 1 of 2)") and not said(v, "(at all"), v.diagnosis


# ---- localisation: the first differing subexpression and how it differs ---------------------------------
LOCALISED = [
    # no relation fits: a counterexample of just that part, and it is the only difference
    ("halfsplit.query", "-eps/2 msign(G_Q C_K^-1) C_Q^-1",
     ["first difference: the candidate's part C_Q^-1 where the derived result has C_K^-1; no multiple, "
      "transpose or power of it fits; on d = 3, d_h = 2 the candidate's is [[", "(the only difference)"]),
    # two slips: the first is found inside msign, with the definition G_K = G_Mᵀ W_Q written out
    ("halfsplit.key", "-eps/2 msign(G_M W_Q C_Q^-1) C_Q",
     ["first difference: the candidate's part G_M where the derived result has G_M.T: its transpose "
      "(with G_K = G_M.T*W_Q written out)"]),
    # a candidate that cannot be evaluated: the part that is not defined, and why
    ("halfsplit.query", "-eps/2 msign(G_M (W_K W_K^T)^{-1/2} W_K) C_K",
     ["the candidate cannot be evaluated on d = 3, d_h = 2: (W_K*W_K.T)^(-1/2) is not defined there "
      "(W_K*W_K.T is 3×3 of rank 2: singular; the derived result has the Gram matrix on the other side, C_K^-1"]),
    ("halfsplit.query", "-eps/2 G_Q C_K^-1 C_K^-1",
     ["the candidate's part G_Q*C_K^-1 where the derived result has msign(G_Q*C_K^-1): msign left out"]),
    ("identity | A: square", "msign(A B) ;; msign(B A)",
     ["the candidate's part B*A where the derived result has A*B: its factors in another order"]),
    ("identity | lam: positive", "msign(G (W^T W + lam I)^{-1/2}) ;; msign(G (W^T W)^{-1/2})",
     ["the damping 0 where the derived result has lam"]),
    ("classics.odd_polynomial", "a X + b X X^T X + c X X^T X X^T X X^T X",
     ["first difference: an extra factor X.T*X (the candidate's X*X.T*X*X.T*X*X.T*X is the derived result's "
      "U*Sigma^(5)*V.T with it inserted)"]),
    ("identity | A: square", "msign(A) ;; A^T A",
     ["the candidate differs from the derived result as a whole: no multiple, transpose or power of it fits"]),
]


@pytest.mark.parametrize("name, text, words", LOCALISED, ids=[f"{n}: {t}" for n, t, _ in LOCALISED])
def test_the_first_difference_is_localised(target, name, text, words):
    v = check(target, name, text)
    assert v.verdict == "different"
    assert said(v, *words) and not said(v, OLD), v.diagnosis


# ---- every claim is checked at full precision; the verdict is never the diagnosis's ---------------------
def test_a_variant_that_agrees_only_to_float64_is_not_claimed(target, monkeypatch):
    """The candidate is ``(1 + 10^-12) ×`` a near variant: equal in a float64 screen, different at 50 digits.
    The diagnosis names the first difference, never "equals the derived result with"; with the confirmation
    at full precision planted away (a float64 tolerance), the false claim appears."""
    text = "-(1 + 10^-12) eps/2 msign(G_Q C_K) C_K"
    v = check(target, "halfsplit.query", text)
    assert v.verdict == "different" and v.scale is None
    assert not said(v, "equals the derived result") and said(v, "C_K where the derived result has C_K^-1"), \
        v.diagnosis
    monkeypatch.setattr(diagnosis, "EQUAL_TOL", 1e-8)
    monkeypatch.setattr(relations, "EQUAL_TOL", 1e-8)
    assert said(check(target, "halfsplit.query", text), "equals the derived result with C_K instead")


@pytest.mark.parametrize("name, text", [(n, t) for n, t, _ in MISSES[:4] + LOCALISED[:3]] + [
    ("halfsplit.key", "-eps/2 msign(G_M^T W_Q C_Q^-1) C_Q^-1"),  # equal, in another form
    ("halfsplit.query", "-eps/2 msign(G_M W_K (W_K^T W_K)^{-1/2}) inv(sqrtm(W_K^T W_K))"),
])
def test_the_diagnosis_never_changes_the_verdict(target, name, text):
    with_it, without = check(target, name, text), check(target, name, text, diagnose=False)
    assert (with_it.verdict, with_it.counterexample, with_it.scale is None) == \
        (without.verdict, without.counterexample, without.scale is None)
    assert (with_it.diagnosis == []) == (with_it.verdict == "equal")


def test_a_scale_by_a_scalar_node_keeps_every_digit(target):
    """``c_K`` is a node evaluated at 50 digits: converting it at mpmath's default 15 digits lost the scale on
    most draws."""
    t = target("halfsplit.isotropic_query")
    cand = parse_for(t, "-eps/(2 c_K^2) msign(G_Q)")
    for seed in range(3):
        assert compare(t, cand, seed=seed).scale == "c_K^-1"


def test_an_undamped_root_is_not_printed_by_the_name_of_the_damped_one():
    """In ``damped.query`` the name ``C_K`` is ``(W_KᵀW_K + λI)^{1/2}``: the undamped root is written out."""
    d, d_h, lam = dimension("d"), dimension("d_h"), positive_symbol("lambda")
    w = FactMatrix("W_K", d, d_h, [])
    names = {"C_K": GramSqrt(w, lam)}
    assert show(GramInvSqrt(w), names) == "(W_K.T*W_K)^(-1/2)"
    assert show(GramInvSqrt(w, lam), names) == "C_K^-1" and show(GramInvSqrt(w), {}) == "C_K^-1"


def test_the_command_line_prints_the_diagnosis(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert crosscheck_main(["halfsplit.query", "-eps/2 msign(G_Q C_K) C_K", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "different" and out["scale"] is None
    assert any("(at all 2 occurrences)" in d for d in out["diagnosis"]), out["diagnosis"]


def test_a_count_that_is_a_bare_dimension_is_compared(tmp_path, monkeypatch, capsys):
    """``classics.attention_rank`` is ``d_h``: its value at a size is a Python int, which had no ``is_number``
    (a traceback instead of the verdict)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert crosscheck_main(["classics.attention_rank", "2 d_h", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["scale"] == "2" and out["counterexample"]["sizes"] == {"d_h": 2}, out
