"""Cross-checking hand formulas: the parser, the decision, every diagnosis on a planted near miss,
chains with a planted wrong step, identities, the classics, and hostile input."""

import json
import subprocess
import sys
import time

import pytest
from sympy import sstr

from derivations import classics, halfsplit
from derivations.crosscheck import checker, identities, rule_lookup, target_cache
from derivations.crosscheck.chain import check_blocks, check_chain_file
from derivations.crosscheck.checker import compare, parse_for
from derivations.crosscheck.cli import main as crosscheck_main
from derivations.parsing.formula import parse
from derivations.parsing.formula_syntax import FormulaError, parse_tree
from derivations.parsing.targets import target_of

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


@pytest.fixture(scope="module")
def query():
    return target_of(halfsplit.query_side(), halfsplit)


def check(target, text):
    return compare(target, parse_for(target, text))


# ---- equal formulas -----------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "dW_Q* = (-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1",  # copied from --emit text
    r"-\frac{\varepsilon}{2}\operatorname{msign}\left(G_{Q} (W_K^{\top} W_K)^{-1/2}\right) C_K^{-1}",  # LaTeX
    "-eps/2 * msign(G_M @ W_K @ inv(sqrtm(W_K.T @ W_K))) @ inv(C_K)",  # notebook, through G_Q = G_M W_K
])
def test_one_result_written_three_ways_is_equal(query, text):
    v = check(query, text)
    assert v.verdict == "equal", v.diagnosis
    assert v.instances >= 2 and v.counterexample is None and v.scale == "1"


def test_emitted_result_round_trips_symbolically(query):
    v = check(query, sstr(halfsplit.query_side().formula))
    assert (v.verdict, v.method) == ("equal", "symbolic")


# ---- every diagnosis on a planted near miss ---------------------------------------------------------
@pytest.mark.parametrize("text, scale, words", [
    ("-eps*msign(G_Q*C_K^-1)*C_K^-1", "2", "ε where the derivation has ε/2"),
    ("eps/2*msign(G_Q*C_K^-1)*C_K^-1", "-1", "sign is flipped"),
    ("-eps/2*msign(G_Q*C_K^-1)*(W_K^T W_K)^-1", None, "inverse Gram matrix instead of the inverse square root"),
    ("-eps/2*msign(G_Q*C_K^-1)", None, "whitening C_K^-1 missing"),
    ("-eps/2*msign(G_Q)*C_K^-1*C_K^-1", None, "on the wrong side"),
    ("-eps/2*msign(G_K*C_Q^-1)*C_Q^-1", None, "Q and K swapped"),
    ("-eps/2*msign(G_Q*C_Q^-1)*C_Q^-1", None, "wrong factor"),
    ("-eps/2*msign(G_Q*C_K)*C_K^-1", None, "C_K instead of its inverse"),
    ("-eps^2/2*msign(G_Q*C_K^-1)*C_K^-1", "epsilon", "epsilon × the derived result"),
])
def test_planted_near_miss_is_diagnosed(query, text, scale, words):
    v = check(query, text)
    assert v.verdict == "different"
    assert v.scale == scale
    assert any(words in d for d in v.diagnosis), v.diagnosis
    ce = v.counterexample
    assert ce["derived"] != ce["candidate"] and "G_Q" in ce["inputs"] and ce["relative_difference"] > 1e-3


def test_transpose_diagnosis():
    v = checker.compare(*identities.identity_target("msign(A B)", "msign(A^T B)",
                                                       identities.parse_assumptions(["A: square"])))
    assert v.verdict == "different"
    assert any("A transposed" in d for d in v.diagnosis), v.diagnosis


def test_unrelated_formula_gets_no_false_diagnosis(query):
    v = check(query, "-eps/2*msign(G_Q)")
    assert v.verdict == "different" and v.scale is None
    assert all("whitening" in d or "none of" in d for d in v.diagnosis)


# ---- the command line -----------------------------------------------------------------------------
def test_cli_json_object(capsys):
    status = crosscheck_main(["halfsplit.query", "-eps msign(G_Q C_K^{-1}) C_K^{-1}", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 1
    assert {"verdict", "method", "scale", "diagnosis", "counterexample"} <= set(out)
    assert out["verdict"] == "different" and out["scale"] == "2" and out["method"] in ("numeric", "symbolic")
    assert crosscheck_main(["halfsplit.query", "(-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1"]) == 0
    # a formula with a leading minus and no space is a formula, not an unknown option
    capsys.readouterr()
    assert crosscheck_main(["halfsplit.query", "-(eps/2)*msign(G_Q*C_K^-1)*C_K^-1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "equal"


@pytest.mark.parametrize("argv, words", [
    (["halfsplit.query", "G_Q*W_K"], "shapes do not compose: d×d_h times d×d_h"),
    (["halfsplit.query", "foo"], "unknown name 'foo'; known: "),
    (["halfsplit.query", "msign(G_Q"], "column 10"),
    (["halfsplit.query", "G_Q.T"], "the candidate is d_h×d but halfsplit.query is d×d_h"),
    (["nosuch.rule", "X"], "names start with one of"),
    (["halfsplit.query"], "give DERIVATION FORMULA"),
    (["halfsplit.query", "__import__('os')"], "column 1"),
    (["identity", "A", "B", "--assume", "A: purple"], "unknown fact 'purple'"),
    (["identity", "A", "B", "--assume", "A: 2x3", "--assume", "B: 3x2"], "different shapes"),  # free sizes unify
])
def test_bad_input_is_one_line_exit_2(argv, words, capsys):
    assert crosscheck_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def test_module_entry_point_exit_status():
    run = subprocess.run([sys.executable, "-m", "derivations.crosscheck", "nosuch.rule", "X"],
                         check=False, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr


# ---- identities -----------------------------------------------------------------------------------
def test_identity_needs_its_assumption():
    args = ("msign(W A)", "W msign(A)")
    held = checker.compare(*identities.identity_target(*args, identities.parse_assumptions(
        ["W: orthonormal columns"])))
    assert held.verdict == "equal"
    fails = checker.compare(*identities.identity_target(*args, identities.parse_assumptions(
        ["W: full column rank"])))
    assert fails.verdict == "different" and fails.counterexample is not None


def test_algebraic_difference_is_symbolic():
    v = checker.compare(*identities.identity_target("(A B)^T", "A^T B^T", identities.parse_assumptions(
        ["A: square", "B: square"])))
    assert (v.verdict, v.method) == ("different", "symbolic")


# ---- chains ---------------------------------------------------------------------------------------
HAND = r"""
# Half-split, query side, by hand
<!-- assume: W_K: full column rank -->

$$\min_{\Delta W_Q} \langle G_M, \Delta W_Q W_K^\top \rangle \quad \text{s.t.} \quad
  \|\Delta W_Q W_K^\top\|_{op} \le \varepsilon/2$$

$$\min_{Z} \langle G_M, Z (W_K^T W_K)^{-1/2} W_K^\top \rangle \quad \text{s.t.} \quad
  \|Z (W_K^T W_K)^{-1/2} W_K^T\|_{op} \le \varepsilon/2, \text{where } Z = \Delta W_Q (W_K^T W_K)^{1/2}$$

$$\min_{Z} \langle G_M W_K (W_K^T W_K)^{-1/2}, Z \rangle \quad \text{s.t.} \quad \|Z\|_{op} \le \varepsilon/2$$

$$Z^\star = -\frac{\varepsilon}{2} \operatorname{msign}(G_M W_K (W_K^T W_K)^{-1/2})$$
"""


def test_hand_derivation_holds(tmp_path):
    path = tmp_path / "hand.md"
    path.write_text(HAND)
    report = check_chain_file(str(path))
    assert report.ok and report.held == len(report.steps) == 3


def test_planted_wrong_problem_step_is_caught_there(tmp_path):
    path = tmp_path / "hand.md"
    path.write_text(HAND.replace(r"\langle G_M W_K (W_K^T W_K)^{-1/2}, Z", r"\langle G_M W_K (W_K^T W_K)^{-1}, Z"))
    report = check_chain_file(str(path))
    assert not report.ok and report.failed.index == 2 and report.held == 1
    assert any("inverse Gram" in d for d in report.failed.verdict.diagnosis)


def test_planted_wrong_solution_is_caught(tmp_path):
    path = tmp_path / "hand.md"
    path.write_text(HAND.replace(r"-\frac{\varepsilon}{2}", r"-\varepsilon"))
    report = check_chain_file(str(path))
    assert report.failed.index == 3 and report.failed.kind == "solution" and report.held == 2


def test_equality_chain_wrong_at_exactly_one_step(tmp_path):
    tex = tmp_path / "chain.tex"
    tex.write_text(r"""\begin{align}
    \langle G, A B^\top \rangle &= \operatorname{tr}(G^\top A B^\top) \\
      &= \operatorname{tr}(B^\top G^\top A) \\
      &= \langle G B, A \rangle \\
      &= \langle G^\top B, A \rangle
    \end{align}""")
    report = check_chain_file(str(tex), identities.parse_assumptions(["G: square"]))
    assert report.failed.index == 4 and report.held == 3
    assert report.as_json()["first_failure"]["step"] == 4


@pytest.mark.parametrize("content, words", [
    ("", "is empty"),
    ("no math here, only prose", "no display math"),
    ("$$A = B$$ <!-- assume: A: 2x3 --> <!-- assume: B: 3x2 -->", "different shapes"),  # free sizes unify
    ("$$\\min_{X} \\langle G, X \\rangle$$", "s.t."),
    ("$$A = $$", "empty side"),
])
def test_bad_chain_files(tmp_path, content, words, capsys):
    path = tmp_path / "f.md"
    path.write_text(content)
    assert crosscheck_main(["--chain", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def test_chain_blocks_with_continuation():
    report = check_blocks(["(A B)^T", "= B^T A^T", "= B^T A^T + 0 A^T"], identities.parse_assumptions([]))
    assert report.ok and len(report.steps) == 2


# ---- hostile parser corpus ------------------------------------------------------------------------
HOSTILE = [
    "(" * 100_000 + "X" + ")" * 100_000,  # deep nesting
    "X" * 1_000_000,  # a 1 MB line
    "-" * 50_000 + "X",
    "msign(" * 5000 + "X" + ")" * 5000,
    "__import__('os').system('true')",
    "eval('1')",
    "lambda: 0",
    "X.__class__",
    "\\" * 1000,
    "{" * 3000,
    "X^" * 3000,
    "||" * 10_000,
    "\x00\x01",
    "X ^ 99999999999999",
    "",
    "   ",
    ")",
    "<X, ",
    "\\frac{1}",
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_text_fails_cleanly(text):
    from sympy.matrices.expressions import MatrixSymbol
    ns = {"X": MatrixSymbol("X", 3, 3), "system": MatrixSymbol("system", 3, 3)}
    start = time.perf_counter()
    with pytest.raises(FormulaError):
        parse(text, ns)
    assert time.perf_counter() - start < 30  # generous: fails, does not hang (never a timing claim)


def test_parse_errors_point_at_the_column():
    with pytest.raises(FormulaError, match="column 7"):
        parse_tree("A + B )")


# ---- the classics ---------------------------------------------------------------------------------
@pytest.mark.parametrize("classic", classics.CLASSICS, ids=lambda c: c.name)
def test_classic_holds(classic):
    ok, evidence = classic.check()
    assert ok, evidence


def test_classics_are_reachable_from_the_cross_checker():
    assert crosscheck_main(["classics.shampoo", "U V^T"]) == 0
    assert crosscheck_main(["classics.shampoo", "U Sigma^-1 V^T"]) == 1
    assert crosscheck_main(["classics.lora", "r d_in"]) == 1  # planted mistakes: tests/rules/test_classics.py


def test_target_cache_round_trip(query, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    back = target_cache.target_from_json(json.loads(json.dumps(target_cache.target_to_json(query))))
    assert back.expr == query.expr and back.namespace == query.namespace and back.definitions == query.definitions
    assert target_cache.load_target("halfsplit.query") is None
    target_cache.store_target(query)
    cached = target_cache.load_target("halfsplit.query")
    assert cached is not None and cached.expr == query.expr
    assert check(cached, "-eps*msign(G_Q*C_K^-1)*C_K^-1").scale == "2"


def test_derivation_names_are_cached_per_source_hash(tmp_path, monkeypatch):
    """``--list`` builds every derivation once (about 35 s); later calls read the names back."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(rule_lookup, "RULE_MODULES", ("classics",))
    names = rule_lookup.derivation_names()
    assert "classics.shampoo" in names and set(names.values()) == {"classics"}

    def no_build(name):
        raise AssertionError("built although the names are cached")
    monkeypatch.setattr(rule_lookup, "_module", no_build)
    assert rule_lookup.derivation_names() == names
    with pytest.raises(AssertionError, match="built although"):  # --no-cache rebuilds
        rule_lookup.derivation_names(use_cache=False)
    monkeypatch.setattr(target_cache, "_source_hash", lambda: "edited-sources")  # stale cache: rebuilt
    with pytest.raises(AssertionError, match="built although"):
        rule_lookup.derivation_names()


# ---- a symbolic verdict says how far it reaches -------------------------------------------------
def test_symbolic_verdict_names_the_sizes_it_was_shown_at(query, capsys):
    v = check(query, sstr(halfsplit.query_side().formula))
    assert (v.method, v.sizes) == ("symbolic", {"d": 3, "d_h": 2})
    assert v.method_text == "symbolic at d = 3, d_h = 2"
    assert crosscheck_main(["halfsplit.query", "-eps/2 msign(G_Q C_K^{-1}) C_K^{-1}"]) == 0
    assert "EQUAL (symbolic at d = 3, d_h = 2," in capsys.readouterr().out
    assert crosscheck_main(["halfsplit.query", "-eps/2 msign(G_Q C_K^{-1}) C_K^{-1}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["method"], out["symbolic_sizes"]) == ("symbolic", {"d": 3, "d_h": 2})


def test_a_numeric_verdict_has_no_sizes_and_a_count_identity_holds_for_all_sizes(query):
    v = check(query, "-eps msign(G_Q C_K^{-1}) C_K^{-1}")  # msign is opaque: a numeric verdict
    assert (v.verdict, v.method_text, v.as_json()["symbolic_sizes"]) == ("different", "numeric", None)
    target = target_of(*rule_lookup.find_derivation("classics.lora.fraction"))
    count = compare(target, target.expr)
    assert (count.verdict, count.method_text, count.as_json()["symbolic_sizes"]) == (
        "equal", "symbolic, for all sizes", "all")


def test_a_formula_that_needs_the_gram_root_tied_to_its_matrix_is_shown_symbolically(query):
    """``C_K⁻¹ = (W_Kᵀ W_K)⁻¹ C_K`` holds because ``C_K² = W_Kᵀ W_K``: the model with facts shows it at the symbolic
    sizes (the generic model, where ``C_K`` is any symmetric matrix, could not). The wrong power stays different."""
    v = check(query, "-eps/2*msign(G_Q*C_K^-1)*(W_K^T W_K)^-1*C_K")
    assert (v.verdict, v.method) == ("equal", "symbolic")
    assert check(query, "-eps/2*msign(G_Q*C_K^-1)*(W_K^T W_K)^-1*C_K^-1").verdict == "different"
