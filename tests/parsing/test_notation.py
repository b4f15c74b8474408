"""The notation the cross-checker reads: every accepted spelling parses and gives the right
verdict on a true and on a wrong formula; what the tool prints parses back (against hand-made targets and the
cheap real ones); definitions, singular values, sums, Kronecker products and sizes in ``--assume`` in
identities and chain files; hostile input ends in one column-pointed line and exit 2; and every command of the
notation page (docs/crosscheck_notation.rst) exits as the page says.

Cost: about 90 comparisons at 50 digits (0.05–0.3 s each) and two small classic derivations built once."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from sympy import sstr
from sympy.matrices.expressions import MatrixSymbol, ZeroMatrix

from derivations.crosscheck import checker, identities
from derivations.crosscheck.chain import check_blocks, check_chain_file
from derivations.crosscheck.checker import compare, parse_for
from derivations.crosscheck.cli import main as crosscheck_main
from derivations.crosscheck.identities import identity_target, parse_assumptions
from derivations.crosscheck.inputs import BadInput
from derivations.crosscheck.rule_lookup import find_derivation
from derivations.crosscheck.verdict import show
from derivations.parsing.formula import Builder
from derivations.parsing.formula_syntax import FormulaError, parse_tree
from derivations.parsing.notation_nodes import Kron, SingularSum, Vec
from derivations.parsing.targets import Target, target_of
from derivations.vocabulary.nodes import GramInvSqrt, GramSqrt, Msign, dimension, positive_symbol
from derivations.vocabulary.spectral_nodes import PsdPower, SingularValue

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "crosscheck_notation.rst"

# (spellings shown, lhs, a true rhs, a wrong rhs, --assume facts): the lhs and the true rhs use the spellings
ROWS = [
    ("σ_k(X), ‖X‖_op", "σ_1(A)", "‖A‖_op", "σ_2(A)", []),
    ("\\sigma_{r+1}(X), sigma_(r + 1)(X)", r"\sigma_{r+1}(A)", "sigma_(r + 1)(A)", "sigma_(r)(A)", []),
    ("\\sigma_{\\max}, sigma_min", r"\sigma_{\max}(A) + sigma_min(A)", "sigma_1(A) + sigma_3(A)", "2 sigma_1(A)",
     ["A: 4x3"]),
    ("U, Σ, V = svd(G)", "U, Σ, V = svd(G); U Σ V^T", "G", "U V^T", []),
    ("\\Sigma^{-2}", r"U, \Sigma, V = svd(G); U \Sigma^{-2} U^T", "inv(G G^T)", "U Σ^{-1} U^T", ["G: square"]),
    ("bare σ_k after svd", "U, Sigma, V = svd(G); sigma_1", "||G||_op", "sigma_2", []),
    ("Sigma_(>r), Sigma_(<=r)", "U, Sigma, V = svd(G); U Sigma_(>1) V^T + U Sigma_(<=1) V^T", "G",
     "U Sigma_(>1) V^T", []),
    ("\\sum_{i>r} \\sigma_i^2, sum_(i=1)^(r)", r"\sum_{i>r} \sigma_i(A)^2", "||A||_F^2 - sum_(i=1)^(r) sigma_i(A)^2",
     r"\sum_{i>r} \sigma_i(A)", []),
    ("sqrt(sum_(i>r) sigma_i^2), \\sum_{i \\ge r+1}", "sqrt(sum_(i>r) sigma_i(A)^2)",
     r"\Big(\sum_{i \ge r+1} \sigma_i(A)^2\Big)^{1/2}", "sqrt(sum_(i>=r) sigma_i(A)^2)", []),
    ("\\sum_i \\sigma_i, ∑_i", r"\sum_i \sigma_i(A)", "||A||_*", r"∑_i \sigma_i(A)^2", []),
    ("\\sum_{h=1}^{3} W_{O,h}", r"\sum_{h=1}^{3} W_{O,h}^\top W_{O,h}", "W_O_1^T W_O_1 + W_O_2^T W_O_2 + W_O_3^T W_O_3",
     "W_O_1^T W_O_1 + W_O_2^T W_O_2", []),
    ("Σ_h X_h", "Σ_h X_h", "X_1 + X_2 + X_3", "X_1 + X_2", []),
    ("∑_{h=1}^{2} h X_h", "∑_{h=1}^{2} h X_h", "X_1 + 2 X_2", "X_1 + X_2", []),
    ("\\sum_{h=1}^{H}", r"\frac{1}{H} \sum_{h=1}^{H} X_h", "(X_1 + X_2 + X_3)/3", "(X_1 + X_2 + X_3)/2", []),
    ("min, max", "min(a, b) + max(a, b)", "a + b", "2 min(a, b)", []),
    ("\\min\\{a, b\\}, \\max", r"\min\{a, b\}", r"\min(b, a)", r"\max\{a, b\}", []),
    ("rank, \\operatorname{rank}", "rank(A B)", r"\operatorname{rank}(B)", "rank(A)", ["A: 5x5", "B: 5x2"]),
    ("tr, \\operatorname{tr}, ^\\top", "tr(A^T B)", r"\operatorname{tr}(B^\top A)", "tr(A B)", ["A: square"]),
    ("\\mathrm{tr}, trace, \\mathrm{Tr}", r"\mathrm{tr}(A B)", "trace(B A)", r"\mathrm{Tr}(A^T B)", ["A: square"]),
    ("np.trace, jnp.trace, @", "np.trace(A @ B)", "jnp.trace(B @ A)", "np.trace(A.T @ B)", ["A: square"]),
    ("kron, \\otimes", "kron(A, B)^T", r"A^T \otimes B^T", "kron(B^T, A^T)", []),
    ("(A ⊗ B)(C ⊗ D)", "(A ⊗ B)(C ⊗ D)", "kron(A C, B D)", "kron(A, B) kron(D, C)",
     ["A: 2x3", "B: 2x2", "C: 3x2", "D: 2x2"]),
    ("vec, \\operatorname{vec}", "vec(A X B)", r"(B^\top \otimes A) \operatorname{vec}(X)", "(B ⊗ A) vec(X)", []),
    ("I ⊗ A", "vec(A X)", "(I ⊗ A) vec(X)", "(A ⊗ I) vec(X)", []),
    ("S^{-T}", "S^{-T}", "(S^T)^{-1}", "S^{-1}", ["S: square"]),
    ("S⁻ᵀ, lone I", "S⁻ᵀ S^T", "I", "S^{-1} S^T", ["S: square"]),
    ("\\bar C_Q", r"\bar C_Q", "C_Qbar", "C_Q", []),
    ("C̄_Q, m̂, \\overline, \\hat, \\tilde", "C̄_Q m̂", r"\overline{C}_Q \hat{m}", r"\bar{C_Q} \tilde m", ["m: scalar"]),
    ("\\Delta W_Q^\\star", r"\Delta W_Q^\star", "dW_Qstar", "dW_Q", []),
    ("W^*, W^{\\star}, W^⋆", "W^*", r"W^{\star} + W^⋆ - Wstar", "W", []),
    ("\\frac12, \\tfrac, \\dfrac", r"\frac12 A", r"\tfrac{1}{2} A", r"\dfrac{1}{3} A", []),
    ("\\frac\\varepsilon2, eps", r"\frac{\varepsilon}{2} X", "eps/2 X", r"\frac\varepsilon3 X", []),
    ("L = …; where", "L = G G^T; L^{-1/4} G R^{-1/4} where R = G^T G", "msign(G)", "L^{-1/4} G where L = G G^T",
     ["G: full column rank"]),
    ("\\text{where} … and …", r"L^{-1/2} G \text{where} L = G G^T", r"msign(G) \text{ where } R = G G^T and S = R",
     "L^{-1/4} G where L = G G^T", ["G: square"]),
    ("L^{-1/4} of an spd L", "L^{-1/4}", "inv(sqrtm(sqrtm(L)))", "L^{-1/2}", ["L: spd"]),
    ("sum of Grams ^{1/2}", "(A^T A + B^T B)^{1/2} (A^T A + B^T B)^{1/2}", "A^T A + B^T B", "A^T A", []),
    ("jnp.linalg.inv", "jnp.linalg.inv(X) X", "I", "X", ["X: square"]),
    ("np.linalg.inv, **, matrix_power", "np.linalg.inv(X) ** 2", "np.linalg.matrix_power(X, -2)", "X ** -1",
     ["X: 2x2"]),
    ("X @ X @ X, X**3", "X @ X @ X", "X**3", "X**2", ["X: square"]),
    ("1e-12", "x + 1e-12 x", "1.000000000001 x", "x", []),
    ("2.5E+3", "2.5E+3 x", "2500 x", "2.5e-3 x", []),
    ("W: d x d_h", "W^T W", "W.T @ W", "2 W^T W", ["W: d x d_h"]),
    ("A: n x r, full column rank", "A^T A", "C_A^2", "C_A", ["A: n × r, full column rank"]),
    ("0", "A - A", "0", "A", []),
    ("U_A", "A (A^T A)^{-1/2}", "U_A", "A", ["A: full column rank"]),
]


def verdict(lhs, rhs, facts):
    return compare(*identity_target(lhs, rhs, parse_assumptions(facts)), diagnose=False).verdict


@pytest.mark.parametrize("shown, lhs, true, wrong, facts", ROWS, ids=[r[0] for r in ROWS])
def test_each_spelling_gives_the_right_verdicts(shown, lhs, true, wrong, facts):
    assert verdict(lhs, true, facts) == "equal"
    assert verdict(lhs, wrong, facts) == "different"


def test_every_spelling_tested_here_is_on_the_notation_page():
    """The page lists what the table above tests (its spellings, as inline literals)."""
    text = PAGE.read_text(encoding="utf-8")
    literals = set(re.findall(r"``(.+?)``", text))
    for word in ("σ_k(X)", "U, Σ, V = svd(G)", "Sigma_(>r)", "\\sum_{h=1}^{3}", "Σ_h", "\\min\\{a, b\\}",
                 "\\operatorname{rank}(X)", "np.trace(X)", "kron(A, B)", "\\operatorname{vec}(X)", "S^{-T}", "S⁻ᵀ",
                 "\\bar C_Q", "C̄_Q", "m̂", "\\Delta W_Q^\\star", "W^*", "W^⋆", "\\frac{a}{b}", "\\tfrac{a}{b}",
                 "\\dfrac{a}{b}", "1e-12", "2.5E+3", "jnp.linalg.inv(X)", "matrix_power(X, 3)", "W: d x d_h",
                 "X**3", "\\text{where}", "0", "U_W"):
        assert word in literals, word


# ---- what the tool prints parses back --------------------------------------------------------------
def _target(name, expr, namespace):
    return Target(name, expr, namespace, {}, {}, [{dimension("d"): 4, dimension("d_h"): 2},
                                                  {dimension("d"): 5, dimension("d_h"): 3}])


def test_gram_roots_of_any_matrix_read_back_by_the_name_printed():
    """``C_P_V`` (``hybrid_ov.o_side``) and ``C_P`` (``joint.update``): Gram roots of matrices not named ``W_…``,
    printed as ``C_<name>``, read back as the same roots (planted: without the fallback the name is unknown)."""
    d, d_h = dimension("d"), dimension("d_h")
    p_v, g_o = MatrixSymbol("P_V", d, d_h), MatrixSymbol("G_O", d, d_h)
    expr = -positive_symbol("epsilon") / 2 * Msign(g_o * GramInvSqrt(p_v)) * GramInvSqrt(p_v)
    target = _target("o_side", expr, {"P_V": p_v, "G_O": g_o, "epsilon": positive_symbol("epsilon")})
    text = show(expr, target.namespace)
    assert text == "(-epsilon/2)*msign(G_O*C_P_V^-1)*C_P_V^-1"
    assert parse_for(target, text) == expr and compare(target, parse_for(target, text)).verdict == "equal"
    assert parse_for(target, "C_P_V") == GramSqrt(p_v)
    planted = Builder(target.namespace)
    planted._named_root = lambda name: None
    with pytest.raises(FormulaError, match="unknown name 'C_P_V'"):
        planted.build(parse_tree(text))


def test_other_spellings_of_a_derivations_names():
    d = dimension("d")
    g_tilde, c_bar, g_o1 = (MatrixSymbol(n, d, d) for n in ("G_tilde", "C_Qbar", "G_O1"))
    ns = {"G_tilde": g_tilde, "C_Qbar": c_bar, "G_O1": g_o1}
    assert Builder(ns).build(parse_tree(r"\tilde G")) == g_tilde
    assert Builder(ns).build(parse_tree(r"\bar{C}_Q")) == c_bar
    assert Builder(ns).build(parse_tree("Cbar_Q")) == c_bar
    assert Builder(ns).build(parse_tree(r"\sum_{h=1}^{1} G_{O,h}")) == g_o1


def test_a_zero_result_and_a_lone_identity_read_back():
    d = dimension("d")
    w = MatrixSymbol("W", d, d)
    zero = _target("zero", ZeroMatrix(d, d), {"W": w})
    assert show(zero.expr) == "0" and parse_for(zero, "0") == ZeroMatrix(d, d)
    assert compare(zero, parse_for(zero, "W - W")).verdict == "equal"
    eye = _target("eye", w * w.I, {"W": w})
    assert compare(eye, parse_for(eye, "I")).verdict == "equal"


@pytest.fixture(scope="module")
def eckart_young():
    return target_of(*find_derivation("classics.eckart_young", use_cache=False))


@pytest.fixture(scope="module")
def eckart_young_frobenius(eckart_young):  # built with it (the classics module is built once)
    return target_of(*find_derivation("classics.eckart_young.frobenius", use_cache=False))


def test_singular_values_as_the_classics_print_them(eckart_young, eckart_young_frobenius):
    assert show(eckart_young.expr) == "sigma_(r + 1)" and isinstance(eckart_young.expr, SingularValue)
    for text in ("sigma_(r + 1)", r"\sigma_{r+1}", "σ_(r + 1)", "||A - A_r||_op"):
        assert compare(eckart_young, parse_for(eckart_young, text), diagnose=False).verdict == "equal", text
    assert compare(eckart_young, parse_for(eckart_young, r"\sigma_r"), diagnose=False).verdict == "different"
    printed = show(eckart_young_frobenius.expr)
    assert printed == "sqrt(sum_(i>r) sigma_i^2)"
    for text in (printed, r"\Big(\sum_{i>r} \sigma_i^2\Big)^{1/2}", r"\|A - A_r\|_F",
                 "sqrt(||A||_F^2 - sum_(i<=r) sigma_i^2)"):
        v = compare(eckart_young_frobenius, parse_for(eckart_young_frobenius, text), diagnose=False)
        assert v.verdict == "equal", text
    wrong = parse_for(eckart_young_frobenius, "sqrt(sum_(i>=r) sigma_i^2)")
    assert compare(eckart_young_frobenius, wrong, diagnose=False).verdict == "different"


def test_the_sizes_a_result_prints_with_are_names_of_the_target():
    """``tied_embeddings.update`` prints ``sqrt(V/d)``: ``V`` and ``d`` are sizes of the target (planted: a
    namespace without them refuses the printed formula)."""
    target = target_of(*find_derivation("tied_embeddings.update", use_cache=False))
    text = show(target.expr, target.namespace)
    assert "sqrt(V/d)" in text and compare(target, parse_for(target, text)).verdict == "equal"
    assert compare(target, parse_for(target, "-eps sqrt(d/V) msign(G_E)"), diagnose=False).verdict == "different"
    bare = Target(target.name, target.expr, {k: v for k, v in target.namespace.items() if k not in ("V", "d")})
    with pytest.raises(FormulaError, match="unknown name 'V'"):
        parse_for(bare, text)


def test_printed_forms_of_the_new_nodes_read_back():
    """Each new node prints as text that reads back as the same node."""
    (lhs, rhs), builder = identities.build_with_inference(
        ["vec(A X B) + kron(B^T, A) vec(X)", "sigma_(r + 1)(A) + sum_(i>r) sigma_i(A)^2 + min(a, rank(A))"],
        parse_assumptions(["A: 3x4", "B: 4x3", "X: 4x4"]))
    assert lhs.atoms(Vec) and lhs.atoms(Kron) and rhs.atoms(SingularSum)
    for expr in (lhs, rhs):
        again, _ = identities.build_with_inference([show(expr, builder.namespace)], parse_assumptions(
            ["A: 3x4", "B: 4x3", "X: 4x4"]))
        assert set(again[0].args) == set(expr.args), (sstr(expr), sstr(again[0]))  # a sum's terms in any order
    psd = identities.build_with_inference(["L^{-1/4}"], parse_assumptions(["L: spd"]))[0][0]
    assert isinstance(psd, PsdPower) and show(psd) == "(L)^(-1/4)"


# ---- sizes, definitions, chains -----------------------------------------------------------------------
def test_symbolic_sizes_are_declared_and_never_merged():
    target, cand = identity_target("W^T W", "W.T @ W", parse_assumptions(["W: d x d_h"]))
    assert target.namespace["W"].shape == (dimension("d"), dimension("d_h"))
    assert {frozenset(map(str, s)) for s in target.sizes} == {frozenset({"d", "d_h"})}
    with pytest.raises(FormulaError, match="shapes do not compose: d×d_h times d×d_h"):
        identity_target("W W", "W", parse_assumptions(["W: d x d_h"]))
    with pytest.raises(FormulaError, match="declare them"):
        identity_target("(A ⊗ B)(C ⊗ D)", "kron(A C, B D)", parse_assumptions([]))
    with pytest.raises(BadInput, match="'n' is a size"):
        parse_assumptions(["A: n x r", "n: scalar"])
    target, _ = identity_target("sigma_(r)(A) + sigma_(k)(A)", "sigma_(k)(A) + sigma_(r)(A)",
                                parse_assumptions(["k: integer"]))
    assert all(s.is_integer for s in (target.namespace["k"], target.namespace["r"]))  # declared, or an index


def test_definitions_are_shared_and_checked():
    assert verdict("L^{-1/4} G", "L = G G^T; (G G^T)^{-1/4} G", ["G: square"]) == "equal"  # seen by both sides
    for lhs, words in [("L = G; L = G^T; L", "defined twice, differently"), ("L = L L; L", "in terms of itself"),
                       ("U, V = svd(G); U", "three matrices"), ("svd(G)", "define them"),
                       ("A = X; A^T where A = X^T", "defined twice, differently")]:
        with pytest.raises(FormulaError, match=words):
            identity_target(lhs, "X", parse_assumptions([]))


SHAMPOO_WRONG = """<!-- assume: G: full column rank -->
$$L := G G^\\top$$

$$L^{-1/2} G R^{-1/4} = \\operatorname{msign}(G) \\quad \\text{where } R = G^\\top G$$
"""


def test_chain_definitions_and_the_notation_example(tmp_path):
    report = check_chain_file(str(ROOT / "docs" / "examples" / "notation_shampoo.md"))
    assert report.ok and report.held == 4
    wrong = tmp_path / "wrong.md"
    wrong.write_text(SHAMPOO_WRONG)
    failed = check_chain_file(str(wrong)).failed
    assert failed is not None and failed.index == 1
    assert any("-1/4" in d for d in failed.verdict.diagnosis), failed.verdict.diagnosis


def test_chain_optimum_is_reused_and_min_without_subscript_is_a_function():
    blocks = [r"\min_{Z} \langle G, Z \rangle \quad \text{s.t.} \quad \|Z\|_{op} \le \varepsilon",
              r"Z^\star = -\varepsilon \operatorname{msign}(G)",
              r"\langle G, Z^\star \rangle = -\varepsilon \|G\|_*",
              r"\min\{\varepsilon, 2\varepsilon\} = \varepsilon"]
    report = check_blocks(blocks, parse_assumptions([]))
    assert report.ok and [s.kind for s in report.steps] == ["solution", "equality", "equality"]
    wrong = check_blocks(blocks[:2] + [r"\langle G, Z^\star \rangle = -\varepsilon \|G\|_{op}"], parse_assumptions([]))
    assert wrong.failed is not None and wrong.failed.index == 2


# ---- errors and hostile input -------------------------------------------------------------------------
def test_errors_point_at_the_column_with_a_caret():
    with pytest.raises(FormulaError) as info:
        parse_tree("A + B )")
    assert info.value.column == 7 and "(at ‸ in 'A + B ‸)')" in str(info.value)
    assert info.value.caret == "A + B )\n      ^"
    with pytest.raises(FormulaError, match=r"column 5: .*'A ⊗ ‸B C'|column 3: .*'A ‸⊗ B C'"):
        parse_tree("A ⊗ B C")
    with pytest.raises(FormulaError, match=re.escape("(at ‸ in 'sigma_(‸r)(X) where r = X')")):
        identity_target("sigma_(r)(X) where r = X", "X", parse_assumptions([]))


HOSTILE = ["__import__('os').system('x')", "os.system('x')", "np.linalg.svd(G)", "np.linalg.pinv(G)", "jnp.foo(X)",
           "X.__class__", "1e999999 X", "9" * 50, "\\sum_{h=1}^{100000} X_h",
           "\\sum_{a=1}^{16} \\sum_{b=1}^{16} \\sum_{c=1}^{16} X_{a,b,c}", "A = B B; B = A A; A",
           "; ".join(["A1 = X X", *(f"A{k} = A{k - 1} A{k - 1}" for k in range(2, 21))]) + "; A20",
           "\\sum_h X", "\\sum_{i>r} X_i", "sigma_1", "A ⊗ B C", "X^99999", "matrix_power(X, 1000)",
           "(A+B)^*", "\\bar", "Σ_", "sum_", "x where", "\\sum_i 1/(\\sigma_i(A)^2 + 1)", "\\sigma_{1/2}(X)"]


def test_hostile_input_is_one_column_pointed_line_and_exit_2(capsys):
    for text in HOSTILE:
        assert crosscheck_main(["identity", text, "X"]) == 2, text
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (text, err)
        assert "column" in err or "the definition" in err, (text, err)
    assert crosscheck_main(["classics.shampoo", "__import__('os').system('x')"]) == 2
    assert "column 1" in capsys.readouterr().err


# ---- the notation page ---------------------------------------------------------------------------------
DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. command-output:: (?P<command>.+)\n"
                       r"(?P<options>(?:(?P=indent) {3}:\w+:.*\n)*)", re.MULTILINE)


def test_every_command_of_the_notation_page_exits_as_it_says():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    commands = pytest.importorskip("workbench_sphinx.commands", reason="the docs extra is not installed")
    claims = []
    for m in DIRECTIVE.finditer(PAGE.read_text(encoding="utf-8")):
        status = re.search(r":returncode: *(-?\d+)", m.group("options"))
        claims.append((m.group("command").strip(), int(status.group(1)) if status else 0))
    assert len(claims) >= 15 and {s for _, s in claims} == {0, 1, 2}
    for command, expected in claims:
        words = shlex.split(command)
        status, text = commands.run(words[2], words[3:])
        assert status == expected, (command, text[-400:])
    assert checker.candidate_text("L = G G^T; L^{-1/4}") == "L = G G^T; L^{-1/4}"  # a definition is kept


def test_a_negative_power_of_a_sum_of_grams_is_drawn_definite(monkeypatch):
    """``(AᵀA + BᵀB)^{-1/2}`` exists when the ranks add up to the size: every size drawn has rows(A) + rows(B) ≥
    cols (planted: without the need, some draws are singular, where the power is garbage, not a value)."""
    lhs = "(A^T A + B^T B)^{-1/2} (A^T A + B^T B) (A^T A + B^T B)^{-1/2}"
    target, cand = identity_target(lhs, "I", parse_assumptions([]))
    assert compare(target, cand, diagnose=False).verdict == "equal"

    def definite(sizes_list):
        a, b = target.namespace["A"], target.namespace["B"]
        return all(int((a.rows + b.rows).xreplace(z)) >= int(a.cols.xreplace(z)) for z in sizes_list)

    assert definite(identities._sizes_for([target.expr, cand], count=40))
    monkeypatch.setattr(identities, "_sum_of_grams_needs", lambda total: [])
    assert not definite(identities._sizes_for([target.expr, cand], count=40))
