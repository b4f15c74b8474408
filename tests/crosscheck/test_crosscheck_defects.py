"""The cross-checker's defects in identity mode, each with a test that fails without its
fix (a planted variant inside the test where one can be planted): lowercase names read as matrices when
used as matrices and the scalars listed, Gram roots printed as what they are, tolerances relative to the
magnitudes, identities checked on tall and wide instances with the shapes printed, a scale that appears on
one side only, counts with a diagnosis instead of ``scale: 1``, and a scalar ``G`` in chain files."""

import json

import pytest

from derivations.crosscheck import checker, diagnosis, evaluation, identities, verdict
from derivations.crosscheck.chain import check_chain_file
from derivations.crosscheck.checker import compare
from derivations.crosscheck.cli import main as crosscheck_main
from derivations.crosscheck.identities import identity_target, parse_assumptions
from derivations.crosscheck.inputs import BadInput
from derivations.parsing.formula_syntax import parse_tree

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


def identity(lhs, rhs, *facts, diagnose=True):
    return compare(*identity_target(lhs, rhs, parse_assumptions(list(facts))), diagnose=diagnose)


def run_json(argv, capsys):
    status = crosscheck_main([*argv, "--json"])
    return status, json.loads(capsys.readouterr().out)


# ---- a differing candidate with no scalar factor: exit 1 and a JSON object, never a traceback ----------
@pytest.mark.parametrize("lhs, rhs, facts", [
    ("msign(G (W^T W)^{-1/2}) (W^T W)^{-1/2}", "msign(G) (W^T W)^{-1/2}", ["W: full column rank"]),
    ("msign(A)", "A", []),
    ("A (A^T A)^{-1/2}", "A (A^T A)^{-1}", []),
])
def test_a_differing_identity_without_a_scalar_factor_is_diagnosed(lhs, rhs, facts, capsys):
    argv = ["identity", lhs, rhs, *[x for f in facts for x in ("--assume", f)]]
    status, out = run_json(argv, capsys)
    assert status == 1 and out["verdict"] == "different" and out["diagnosis"] and out["counterexample"]
    assert crosscheck_main(argv) == 1
    assert "DIFFERENT" in capsys.readouterr().out


# ---- lowercase names used as matrices are matrices; the scalars are listed --------------------------
def test_transposed_lowercase_names_are_matrices(monkeypatch, capsys):
    """``m_Q m_Kᵀ = m_K m_Qᵀ`` was EQUAL: lowercase names were scalars. Now they are matrices (transposed),
    the identity is DIFFERENT with a counterexample, and no name is listed as a scalar."""
    status, out = run_json(["identity", "m_Q m_K^T", "m_K m_Q^T"], capsys)
    assert status == 1 and out["verdict"] == "different" and out["scalars"] == []
    assert set(out["counterexample"]["inputs"]) == {"m_Q", "m_K"}
    assert all(isinstance(row, list) for row in out["counterexample"]["inputs"]["m_Q"])
    # planted: without reading the uses, both names are scalars again and the false EQUAL comes back
    monkeypatch.setattr(identities, "name_uses", lambda trees: ({}, {}))
    assert identity("m_Q m_K^T", "m_K m_Q^T").verdict == "equal"


@pytest.mark.parametrize("lhs, rhs, matrices", [
    ("msign(m)", "m", {"m"}), ("inv(s) s", "s s^-1", {"s"}), ("x.T", "x", {"x"}), ("x^{-T}", "inv(x)^T", {"x"}),
    ("<a, b> c", "tr(a^T b) c", {"a", "b"}), ("||m_Q||_F / c", "sqrt(tr(m_Q^T m_Q)) / c", {"m_Q"}),
])
def test_names_used_as_matrices_are_matrices(lhs, rhs, matrices):
    _, builder = identities.build_with_inference([lhs, rhs], parse_assumptions([]))
    scalars = identities.scalar_names(builder.namespace)
    assert set(builder.namespace) - set(scalars) == matrices


def test_declared_matrices_and_scalars(capsys):
    """``--assume 'm_Q: matrix'`` declares a matrix whatever its case (and ``square`` and a size do too);
    ``G: scalar`` a scalar whatever its case; the scalars are listed in the text and the JSON."""
    assert crosscheck_main(["identity", "m_Q m_K", "m_K m_Q"]) == 0  # scalars: they commute
    text = capsys.readouterr().out
    assert "scalars:   m_K, m_Q" in text and "--assume 'NAME: matrix'" in text
    argv = ["identity", "m_Q m_K", "m_K m_Q", "--assume", "m_Q: matrix", "--assume", "m_K: square"]
    status, out = run_json(argv, capsys)
    assert status == 1 and out["scalars"] == []
    status, out = run_json(["identity", "G A", "A G", "--assume", "G: scalar"], capsys)
    assert status == 0 and out["scalars"] == ["G"]
    assert identities.scalar_names(identity_target("x y", "y x", parse_assumptions(["x: 2x2"]))[0].namespace) == ["y"]


@pytest.mark.parametrize("argv, words", [
    (["identity", "x^T", "1/x"], "used as a matrix"),  # transposed and a divisor: say so, do not guess
    (["identity", "x", "x", "--assume", "x: matrix", "--assume", "x: scalar"], "both a scalar and a matrix"),
])
def test_contradictory_names_are_one_line_exit_2(argv, words, capsys):
    assert crosscheck_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err


def test_inverse_transpose_notation():
    tree = parse_tree("S^{-T}")
    assert tree.kind == "T" and tree.args[0].kind == "pow" and tree.args[0].value == -1
    for text in ("S^-T", "S^{-\\top}", "S⁻ᵀ", "(S^T)^{-1}"):
        assert identity("S^{-T}", text, "S: square").verdict == "equal", text
    assert identity("S^{-T}", "S^{-1}", "S: square").verdict == "different"


# ---- Gram roots printed as what they are ------------------------------------------------------------
def test_left_gram_root_is_not_printed_as_c_a(monkeypatch, capsys):
    """``msign(A) Aᵀ = (A Aᵀ)^{1/2}`` is EQUAL and the candidate prints as ``(A*A.T)^(1/2)``, not ``C_A``
    (which names ``(AᵀA)^{1/2}``); the printed text reads back as the same matrix."""
    argv = ["identity", "msign(A) A^T", "(A A^T)^{1/2}", "--assume", "A: full column rank"]
    assert crosscheck_main(argv) == 0
    text = capsys.readouterr().out
    assert "candidate: (A*A.T)^(1/2)" in text and "C_A" not in text
    assert identity("(A A^T)^{1/2}", "(A*A.T)^(1/2)").verdict == "equal"
    v = identity("(W^T W + lambda I)^{-1/2} A", "A")
    assert v.reference == "(lambda*I + W.T*W)^(-1/2)*A", v.reference
    assert identity("(W^T W)^{-1/2}", "inv(sqrtm(W^T W))").reference == "C_W^-1"  # C_W is (WᵀW)^{1/2}
    # planted: every root printed by its label gives the old, wrong name
    monkeypatch.setattr(verdict._Printer, "_named", lambda self, node: True)
    assert identity("msign(A) A^T", "(A A^T)^{1/2}").candidate == "C_A"


def test_damped_derivation_still_prints_its_named_root(capsys):
    """In ``damped.query`` the name ``C_K`` is the damped root ``(W_KᵀW_K + λI)^{1/2}``: printed as such."""
    assert crosscheck_main(["damped.query", "2 (-eps/2) msign(G_Q C_K^-1) C_K^-1"]) == 1
    assert "  derived:   (-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1\n" in capsys.readouterr().out


# ---- tolerances relative to the magnitudes -----------------------------------------------------------
def test_a_true_identity_with_tiny_sides_is_equal_and_a_tiny_true_difference_is_not(monkeypatch):
    """Both sides of ``msign(A) Aᵀ = (A Aᵀ)^{1/2}`` times 10^-40 agree (their difference is ~1e-90, below any
    absolute cutoff such as 1e-30, but so are the sides); a relative difference of 1e-3 at that magnitude
    is DIFFERENT, and named."""
    fact = "A: full column rank"
    assert identity("10^-40 msign(A) A^T", "10^-40 (A A^T)^{1/2}", fact).verdict == "equal"
    v = identity("10^-40 msign(A) A^T", "10^-40 (1 + 10^-3) (A A^T)^{1/2}", fact)
    assert v.verdict == "different" and v.scale == "1001/1000", (v.scale, v.diagnosis)
    # planted: an absolute cutoff of 1e-30 (the old one) calls the tiny difference equal
    monkeypatch.setattr(checker, "_agree", lambda a, b, tol: evaluation._difference(a, b)[0] <= 1e-30)
    assert identity("10^-40 msign(A) A^T", "10^-40 (1 + 10^-3) (A A^T)^{1/2}", fact,
                    diagnose=False).verdict == "equal"


# ---- tall and wide instances, and the shapes said ----------------------------------------------------
def _orientations(out, name="A") -> set:
    """Which of tall (1), square (0) and wide (-1) the matrix ``name`` was on the instances of ``out``."""
    return {(int(r) > int(c)) - (int(r) < int(c)) for r, c in (entry[name].split("x") for entry in out["shapes"])}


def test_identity_runs_on_tall_wide_and_square_instances_and_says_so(capsys):
    """``msign(A) msign(A)ᵀ B = B`` holds for wide and square ``A`` only: a square-only check calls it EQUAL.
    It is DIFFERENT on a tall instance; with ``A: wide`` it is EQUAL, and the shapes are printed."""
    status, out = run_json(["identity", "msign(A) msign(A)^T B", "B"], capsys)
    assert status == 1 and _orientations(out) == {-1, 0, 1}, out["shapes"]
    status, out = run_json(["identity", "msign(A) msign(A)^T B", "B", "--assume", "A: wide"], capsys)
    assert status == 0 and _orientations(out) == {-1, 0}, out["shapes"]
    assert crosscheck_main(["identity", "msign(A) msign(A)^T B", "B", "--assume", "A: wide"]) == 0
    shapes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  shapes:    A ")]
    assert len(shapes) == 1 and shapes[0].count(";") == 2, shapes  # one entry per size drawn


def test_an_inverse_gram_root_is_checked_where_it_is_defined_and_both_directions_agree(capsys):
    """``A (AᵀA)^{-1/2} = msign(A)`` needs full column rank: the sizes drawn are tall or square (a wide
    ``A`` makes ``AᵀA`` singular), and the verdict is the same whichever side is the derived one (it was
    EQUAL one way and DIFFERENT the other)."""
    for lhs, rhs in (("A (A^T A)^{-1/2}", "msign(A)"), ("msign(A)", "A (A^T A)^{-1/2}")):
        status, out = run_json(["identity", lhs, rhs], capsys)
        assert status == 0 and _orientations(out) == {0, 1} and out["skipped"] == 0, out["shapes"]
    target, _ = identity_target("A^T (A A^T)^{-1}", "A^T (A A^T)^{-1}", parse_assumptions([]))
    assert all(s[next(d for d in s if str(d) == "rows(A)")] <= s[next(d for d in s if str(d) == "cols(A)")]
               for s in target.sizes)
    assert identities.rank_needs([target.expr])  # the inverse of A Aᵀ needs rows(A) <= cols(A)


def test_gram_roots_singular_by_shape_keep_every_digit(monkeypatch):
    """On a tall ``A``, ``A Aᵀ`` is singular: its root from an eigendecomposition keeps 25 of 50 digits, enough
    to call the true ``msign(A) Aᵀ − (A Aᵀ)^{1/2} = 0`` DIFFERENT. Evaluated as ``A (AᵀA)^{-1/2} Aᵀ`` it keeps
    all 50 (and so does ``(AᵀA)^{1/2}`` of a wide ``A``)."""
    target, cand = identity_target("msign(A) A^T - (A A^T)^{1/2}", "0 A A^T", parse_assumptions(["A: tall"]))
    inst = next(i for i in evaluation._instances(target, [target.expr, cand]) if len(set(i.sizes.values())) == 2)
    assert abs(max(evaluation._flat(evaluation._value(target.expr, inst, True)), key=abs)) < 1e-45
    assert compare(target, cand).verdict == "equal"
    assert identity("(A^T A)^{1/2} - msign(A)^T A", "0 A^T A", "A: wide").verdict == "equal"
    monkeypatch.setattr(evaluation, "_full_rank_form", lambda expr, sizes: expr)  # planted: as written
    assert abs(max(evaluation._flat(evaluation._value(target.expr, inst, True)), key=abs)) > 1e-35
    assert compare(target, cand, diagnose=False).verdict == "different"


def test_skipped_instances_are_counted_and_printed(monkeypatch, capsys):
    real = checker._value
    calls = {"n": 0}

    def fails_once(expr, inst, mp, dps=evaluation.DPS, strict=False):
        calls["n"] += 1
        if calls["n"] == 1:
            raise evaluation.NotConverged("svd: no convergence")
        return real(expr, inst, mp, dps, strict)

    monkeypatch.setattr(checker, "_value", fails_once)
    v = identity("msign(A)", "msign(A)")
    assert v.verdict == "equal" and v.skipped == 1 and v.instances == 5
    assert "1 more skipped" in verdict.format_verdict(v, "identity")


# ---- a scale on one side only ------------------------------------------------------------------------
@pytest.mark.parametrize("lhs, rhs, scale", [
    ("msign(A)", "c msign(A)", "c"),  # the scale only in the candidate: was "no scalar multiple"
    ("c msign(A)", "msign(A)", "c^-1"),  # only in the derived side: was lost to 15-digit arithmetic
    ("msign(A)", "2 c^2 msign(A)", "2*c^2"),
    ("eps msign(A)", "eps^-1 msign(A)", "epsilon^-2"),
])
def test_a_symbolic_scale_on_one_side_is_named(lhs, rhs, scale, monkeypatch):
    v = identity(lhs, rhs)
    assert v.verdict == "different" and v.scale == scale, (v.scale, v.diagnosis)
    assert v.diagnosis[0] == f"the candidate is {scale} × the derived result"
    if lhs == "msign(A)":  # planted: the scalars of the derived side only
        real = diagnosis.free_symbols
        monkeypatch.setattr(diagnosis, "free_symbols", lambda ref, *rest: real(ref))
        assert identity(lhs, rhs).scale is None


def test_a_symbolic_scale_is_found_on_every_draw():
    """The ratios are good to 50 digits: dividing them by ``c^k`` in mpmath's default 15 digits made the
    scale found on some draws and not on others."""
    for seed in range(3):
        for lhs, rhs, scale in (("c msign(A)", "msign(A)", "c^-1"), ("eps^2 A", "A", "epsilon^-2"),
                                ("c A", "c^3 A", "c^2")):
            v = compare(*identity_target(lhs, rhs, parse_assumptions([])), seed=seed)
            assert v.scale == scale, (seed, lhs, rhs, v.diagnosis)


# ---- counts: a diagnosis, and no "scale": "1" on a difference ------------------------------------------
@pytest.mark.parametrize("formula, scale, words", [
    ("r d_in", None, "the candidate is the derived result - d_out*r"),
    ("r d_in d_out", None, "the candidate is the derived result + r*(d_in*d_out - d_in - d_out)"),
    ("r^2 (d_in + d_out)", "r", "the candidate is r × the derived result"),
    ("2 r (d_in + d_out)", "2", "the candidate is 2 × the derived result"),
    ("r (d_in + d_out) + 1", None, "the candidate is the derived result + 1"),
])
def test_lora_count_differences_are_diagnosed(formula, scale, words, capsys):
    status, out = run_json(["classics.lora", formula], capsys)
    assert status == 1 and out["verdict"] == "different"
    assert out["scale"] == scale and out["diagnosis"][0] == words, out
    status, out = run_json(["classics.lora", "r d_in + r d_out"], capsys)
    assert status == 0 and out["scale"] == "1" and out["diagnosis"] == []
    assert crosscheck_main(["classics.lora", formula]) == 1
    head = capsys.readouterr().out.splitlines()[0]
    assert head == "classics.lora: DIFFERENT (symbolic, for all sizes)", head


# ---- chain files: a scalar G -------------------------------------------------------------------------
GQA_BUDGET = r"""The key side of a GQA group gets ε/2 divided by the group size G:

$$\frac{\varepsilon}{2G} \operatorname{msign}(G_K C_Q^{-1}) = \frac{1}{G} \cdot \frac{\varepsilon}{2}
  \operatorname{msign}(G_K C_Q^{-1})$$
"""


def test_chain_reads_a_divisor_g_as_the_group_size(tmp_path, monkeypatch, capsys):
    path = tmp_path / "gqa.md"
    path.write_text(GQA_BUDGET)
    report = check_chain_file(str(path))
    assert report.ok and "G" in report.scalars and report.as_json()["scalars"] == report.scalars
    assert crosscheck_main(["--chain", str(path)]) == 0
    assert "scalars: G, epsilon" in capsys.readouterr().out
    wrong = tmp_path / "wrong.md"  # a planted wrong step is still found
    wrong.write_text(GQA_BUDGET.replace(r"\frac{1}{G} \cdot", r"\frac{2}{G} \cdot"))
    failed = check_chain_file(str(wrong)).failed
    assert failed is not None and failed.verdict.scale == "2"
    # planted: without reading the uses, G is a matrix and the file is refused (dividing by a matrix)
    monkeypatch.setattr(identities, "name_uses", lambda trees: ({}, {}))
    with pytest.raises(BadInput, match="cannot divide by a matrix"):
        check_chain_file(str(path))


def test_chain_with_a_declared_scalar_g(tmp_path):
    path = tmp_path / "gqa.md"
    path.write_text("<!-- assume: G: scalar -->\n$$\\frac{\\varepsilon}{2} G A = A \\frac{G \\varepsilon}{2}$$\n")
    report = check_chain_file(str(path))
    assert report.ok and report.scalars == ["G", "epsilon"]
    path.write_text("$$\\frac{\\varepsilon}{2} G A = A \\frac{G \\varepsilon}{2}$$\n")  # undeclared: a matrix
    assert not check_chain_file(str(path)).ok
