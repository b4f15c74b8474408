"""Notebook reprs: a ``Derivation``, a ``Problem``, a ``Lemma`` and a cross-check ``Verdict``
render themselves in Jupyter through ``_repr_latex_`` and ``_repr_markdown_``.

The LaTeX is the LaTeX printer's own (:func:`derivations.engine.latex.state_latex`), and every formula is
typeset by the MathJax the docs ship (``sphinx-mathjax-offline``), run by ``node`` where it is installed: a
TeX error (an unbalanced brace, an undefined macro) fails. Text that is not math is escaped for Markdown,
and no Python repr (``MatrixSymbol(…)``, ``<… object at 0x…>``) reaches the reader.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from derivations import Lemma, halfsplit
from derivations import lemmas as L
from derivations.crosscheck.verdict import Verdict
from derivations.engine import norms as N
from derivations.engine.derivation import CheckResult
from derivations.engine.latex import latex, state_latex
from derivations.lemmas.base import markdown_text
from tests.tex_checks import balanced

#: what a Python repr looks like when it leaks into a repr meant for a reader
PYTHON_REPR = re.compile(r"object at 0x|\b(?:MatrixSymbol|Symbol|Problem|Solution|Claim|CheckResult|Lemma|Step|"
                         r"Verdict|Mul|Add|Transpose|Inverse)\(|\bNone\b|<function|<bound")


@pytest.fixture(scope="module")
def query():
    return halfsplit.query_side()


def _math(text: str) -> list[str]:
    """The display and inline formulas of a Markdown or LaTeX repr, delimiters removed."""
    display = re.findall(r"\$\$(.+?)\$\$", text, re.DOTALL)
    inline = re.findall(r"(?<![$\\])\$(?!\$)(.+?)(?<!\\)\$", re.sub(r"\$\$.+?\$\$", " ", text, flags=re.DOTALL))
    return display + inline


def _prose(markdown: str) -> str:
    """The Markdown outside math and code spans."""
    return re.sub(r"`[^`]*`", " ", re.sub(r"\$\$.+?\$\$", " ", markdown, flags=re.DOTALL))


def test_derivation_reprs_show_every_step_and_the_result(query):
    tex = query._repr_latex_()
    assert tex.startswith("$$") and tex.endswith("$$")
    assert state_latex(query.start) in tex and state_latex(query.state) in tex   # the printer's own LaTeX
    assert [rf"\text{{Lemma {s.lemma.number}}}" in tex for s in query.steps] == [True] * len(query.steps)
    md = query._repr_markdown_()
    assert md.startswith(f"**{markdown_text(query.title)}** (`halfsplit.query`)")
    rows = [line for line in md.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(query.steps)
    for step, row in zip(query.steps, rows, strict=True):
        assert len(re.findall(r"(?<!\\)\|", row)) == 5, row            # four cells: every | in text escaped
        assert markdown_text(step.lemma.title) in row and f"{step.check.float64_error:.0e}" in row
    assert md.rstrip().endswith(f"$${state_latex(query.state)}$$")
    for text in (tex, md):
        assert not PYTHON_REPR.search(_prose(text)), PYTHON_REPR.search(_prose(text))
        assert all(balanced(m) for m in _math(text))


def test_problem_reprs_are_the_printers_statement(query):
    problem = query.start
    assert problem._repr_latex_() == f"$${state_latex(problem)}$$"
    md = problem._repr_markdown_()
    assert f"${latex(problem.variable)}$" in md and f"$${state_latex(problem)}$$" in md
    assert r"\Delta W_{Q}" in md and r"W_{K}^{\top}" in md and "dW_Q" not in md     # the papers' notation


def test_every_lemma_renders_its_statement_and_conditions():
    for lemma in L.ALL_LEMMAS:
        tex, md = lemma._repr_latex_(), lemma._repr_markdown_()
        assert lemma.statement_latex in tex and all(c in tex for c in lemma.condition_latex), lemma.key
        assert md.startswith(f"**Lemma {markdown_text(lemma.number)} — {markdown_text(lemma.title)}.**")
        assert tex[2:-2] in md
        assert not PYTHON_REPR.search(_prose(md)), (lemma.key, md)


def test_markdown_text_escapes_what_markdown_would_read_as_markup():
    title = "planted: A_1 * B | C [x] <y> $z$ `w`"
    lemma = Lemma(key="planted", number="P_1", title=title, statement=r"A^{\top} = A")
    md = lemma._repr_markdown_()
    prose = md.split("\n")[0]
    assert not re.search(r"(?<!\\)[*_|\[\]<>$`]", prose.replace("**", "").split(" (`planted`)")[0]), prose
    assert re.sub(r"\\(.)", r"\1", markdown_text(title)) == title          # shows exactly these characters
    assert markdown_text("a\n  b") == "a b"


def _failed_check_step(der):
    """A copy of ``der`` whose last step's check failed, with text that Markdown would misread."""
    der = copy.deepcopy(der)
    der.steps[-1].check = CheckResult(2e-3, None, "", 3, {}, "planted step 8 | sub-check '*before = after*' failed")
    return der


def test_a_failed_check_is_shown_not_hidden(query):
    md = _failed_check_step(query)._repr_markdown_()
    row = [line for line in md.splitlines() if line.startswith("| 8 |")][0]
    assert "**failed**" in row and "mpmath not run" in row and len(re.findall(r"(?<!\\)\|", row)) == 5


def _verdict(**changes):
    """A verdict as the checker returns one for ``ε`` where the derivation has ``ε/2`` (the fields of
    ``compare``'s result, the counterexample's values shortened to 2 × 2)."""
    fields = dict(verdict="different", method="numeric", instances=6, scale="2",
                  diagnosis=["the candidate is 2 × the derived result (ε where the derivation has ε/2)"],
                  counterexample={"sizes": {"d": 3, "d_h": 2}, "relative_difference": 1.0,
                                  "inputs": {"W_K": [[-1.25, 0.5], [0.25, 2.0]], "G_Q": [[1.0, -2.0], [0.5, 0.0]]},
                                  "defined": {"G_Q": "G_M*W_K"},
                                  "derived": [[0.07682, 0.072398], [0.52215, -0.340754]],
                                  "candidate": [[0.153639, 0.144797], [1.0443, -0.681508]]},
                  reference="(-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1",
                  candidate="(-epsilon)*msign(G_Q*C_K^-1)*C_K^-1")
    return Verdict(**{**fields, **changes})


def test_verdict_markdown_has_what_the_command_line_prints():
    md = _verdict()._repr_markdown_()
    assert md.startswith("**Cross-check: DIFFERENT** (numeric; 6 random instances at 50 digits)")
    assert "- derived: ` (-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1 `" in md
    assert "- candidate: ` (-epsilon)*msign(G_Q*C_K^-1)*C_K^-1 `" in md
    assert "- diagnosis: the candidate is 2 × the derived result" in md
    assert "Counterexample at d = 3, d\\_h = 2, relative difference 1 " in md
    block = md.split("```text\n", 1)[1].split("```", 1)[0]
    assert "G_Q (= G_M*W_K) =" in block and "derived value =" in block and "candidate value =" in block
    assert "1.0443" in block and "0.07682" in block
    assert not PYTHON_REPR.search(_prose(md.replace(block, ""))), md
    equal = _verdict(verdict="equal", method="symbolic", sizes={"d": 3, "d_h": 2}, diagnosis=[],
                     counterexample=None, candidate="(-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1")._repr_markdown_()
    assert equal.startswith("**Cross-check: EQUAL** (symbolic at d = 3, d\\_h = 2; 6 random instances")
    assert "Counterexample" not in equal and "diagnosis" not in equal


def test_verdict_markdown_keeps_hostile_text_as_text():
    md = _verdict(candidate="A`B | *C*", diagnosis=["a | b * c_d [e]"],
                  counterexample=None)._repr_markdown_()
    assert "- candidate: `` A`B | *C* ``" in md                       # a code span no backtick inside ends
    assert "- diagnosis: a \\| b \\* c\\_d \\[e\\]" in md
    assert "could not be evaluated" in _verdict(counterexample={**_verdict().counterexample,
                                                                "candidate": None})._repr_markdown_()


# ---- the LaTeX, typeset by the docs' own MathJax ------------------------------------------------

#: MathJax 3 in node: TeX -> MathML for every formula on stdin (a JSON list); ``noundefined`` is left out,
#: so an unknown macro is an error, not red text
MATHJAX = """
const texs = JSON.parse(require('fs').readFileSync(0, 'utf8'));
require(process.argv[1] + '/node-main.js').init({
  loader: {load: ['input/tex-base', '[tex]/ams', '[tex]/newcommand']},
  tex: {packages: ['base', 'ams', 'newcommand']},
}).then((MathJax) => {
  console.log(JSON.stringify(texs.map((t) => {
    try { return MathJax.tex2mml(t, {display: true}); } catch (e) { return '<merror>' + e.message + '</merror>'; }
  })));
}).catch((e) => { console.error(e); process.exit(3); });
"""


def mathjax_errors(formulas: list[str]) -> list[tuple[str, str]]:
    """``(formula, error)`` for every formula MathJax cannot typeset."""
    node = shutil.which("node") or shutil.which("nodejs")
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if node is None or spec is None or not spec.submodule_search_locations:
        pytest.skip("node or the docs extra (sphinx-mathjax-offline) is not installed: MathJax cannot run here")
    mathjax = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    done = subprocess.run([node, "-e", MATHJAX, str(mathjax)], input=json.dumps(formulas), capture_output=True,
                          text=True, timeout=120, check=True)
    out = json.loads(done.stdout)
    return [(tex, re.sub(r"<[^>]+>|\s+", " ", mml).strip()) for tex, mml in zip(formulas, out, strict=True)
            if "<merror" in mml]


def test_mathjax_finds_a_tex_error():
    assert [e for _, e in mathjax_errors([r"\frac{a}{b}", r"\frac{a}{", r"\nosuchmacro x"])] == \
        ["Missing close brace", r"Undefined control sequence \nosuchmacro"]


def test_every_latex_repr_is_typeset_by_mathjax(query):
    reprs = [query._repr_latex_(), query._repr_markdown_(), query.start._repr_latex_(),
             query.start._repr_markdown_(), _failed_check_step(query)._repr_markdown_()]
    claim = halfsplit.isotropic_query()                                    # an identity chain (a claim)
    reprs += [claim._repr_latex_(), claim._repr_markdown_()]
    lemmas = [*L.ALL_LEMMAS, *N.NORM_LEMMAS, *(N.solve_lemma(f) for f in N.FAMILIES)]
    reprs += [r for lemma in lemmas for r in (lemma._repr_latex_(), lemma._repr_markdown_())]
    formulas = list(dict.fromkeys(m for r in reprs for m in _math(r)))
    assert len(formulas) > 50
    assert mathjax_errors(formulas) == []
