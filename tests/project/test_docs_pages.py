"""The newcomer pages and the readability of the proof pages.

Fast tests of the docs extension's pieces (side conditions typeset as math, internal symbol names
replaced, command discovery), of the hand-written pages (every code block is executed at build time
or checked here), and one small Sphinx build of a rule page with its 50-digit evidence, folded
details and command output. The full site is tested by tests/project/test_docs.py after .ci/run builds it.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("sphinx", reason="the docs extra is not installed (pip install -e '.[docs]')")
from sphinx.errors import SphinxError

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

from workbench_sphinx import commands, notation, objects, proofs, rst, signatures  # noqa: E402 (the sys.path entry)
from workbench_sphinx.checks import external_assets  # noqa: E402 (as above)
from workbench_sphinx.evidence import sizes_list  # noqa: E402 (as above)

from derivations import registry  # noqa: E402 (after the importorskip above)
from derivations import sylvester as sylvester_rule  # noqa: E402 (as above)
from derivations.engine.latex import derivation_latex  # noqa: E402 (as above)
from foundation.commandline import OneLineParser, plain_text  # noqa: E402 (as above)
from tests.project.test_docs import _plain, build, visible_words  # noqa: E402 (the small-project builder of the docs tests)
from tests.project.test_layers import PACKAGES as LAYERED_PACKAGES  # noqa: E402 (as above)
from tests.tex_checks import balanced  # noqa: E402 (as above)

#: side conditions as the engine records them (from halfsplit, gqa, hybrid_ov, joint, the classics)
CONDITIONS = [
    "W_K = U_K C_K with C_K = (W_KᵀW_K)^1/2 (full column rank, λ = 0)",
    "G_K = G_M.T*W_Q (chain rule through M)",
    "G_K = G_Mbar.T*W_Qbar (chain rule through M)",
    "β = epsilon/(2*G) > 0",
    "S S**(-1) = I (S invertible)",
    "(C_K*W_Q.T*W_Q*C_K)^(1/4) invertible (a power of an SPD matrix)",
    "U_P_V = W C⁻¹ with W = P_V (full column rank or λ > 0)",
    "every block X_i = E_iᵀ X (rows) or X E_i (columns) with E_i a selection of orthonormal columns, so "
    "‖X_i‖_op ≤ ‖X‖_op: the stacked constraint implies every per-block one",
    "the blocks are side by side with equal row counts: [A_1 B_1ᵀ | A_2 B_2ᵀ] = [A_1 | A_2] blockdiag(B_1, B_2)ᵀ "
    "and Σ_i ⟨G_i, X_i⟩ = ⟨[G_1 | G_2], [X_1 | X_2]⟩",
    "A_0 = R_0: both start at the Gram matrix of X_0 and follow R_(t+1) = q_t(R_t) R_t q_t(R_t) (Lemma GG)",
]
#: what must never reach a reader outside math: SymPy's operators and the engine's internal names
ASCII_MATH = re.compile(r"\.T\b|\*|\^\d|\^\(|[A-Z]_[A-Za-z]|bar\b")


def prose_outside_math(rst_text: str) -> str:
    return re.sub(r"\\(.)", r"\1", re.sub(r":math:`[^`]*`", " ", rst_text))   # reST escapes removed


@pytest.mark.parametrize("condition", CONDITIONS)
def test_side_conditions_are_typeset_as_math(condition):
    out = notation.condition_rst(condition)
    assert not ASCII_MATH.search(prose_outside_math(out)), out
    maths = re.findall(r":math:`([^`]*)`", out)
    assert maths and all(balanced(m) for m in maths), out
    assert not re.search(r"Qbar|Mbar|P_V\b", " ".join(maths)), out
    # what the pages did before: the condition escaped as text (the planted mistake this test catches)
    assert ASCII_MATH.search(prose_outside_math(rst.text(condition)))


def test_internal_names_become_the_papers_notation():
    tidy = notation.tidy_latex
    assert tidy(r"W_{Qbar}^{\top} G_{Mbar}") == r"\bar{W}_{Q}^{\top} \bar{G}_{M}"
    assert tidy(r"G_{Mheads} P_{V}") == r"\tilde{G}_{M} P_{V}"
    assert tidy(r"Z_{o_side} + C_{P_V}") == r"Z_{O} + C_{P_{V}}"
    assert tidy(r"A + - \frac{\epsilon}{2} B") == r"A - \frac{\epsilon}{2} B"
    assert tidy(r"W_{Q} C_{K}^{-1}") == r"W_{Q} C_{K}^{-1}"             # ordinary names untouched


def test_step_notes_with_delta_bars_and_subscripted_operators_are_one_formula():
    """gqa's first step note: Δ, a combining macron (W̄) and ``max_h`` stay inside the math, and ``^T`` is a
    transpose (they used to fall out of it as raw text)."""
    rst_text = notation.condition_rst("max_h ‖W_{Q,h} ΔW_Kᵀ‖_op ≤ ‖W̄ ΔW_Kᵀ‖_op")
    assert rst_text.startswith(":math:`") and rst_text.count(":math:") == 1 and rst_text.endswith("`"), rst_text
    assert r"\max_{h}" in rst_text and r"\Delta W_{K}" in rst_text and r"\bar{W}" in rst_text, rst_text
    assert r"^{\top}" in notation.condition_rst("C_K = (W_K^T W_K)^1/2")


def test_symbols_are_found_in_the_displayed_math():
    keys = notation.symbols_in([r"\bar{W}_{Q} \tilde{G}_{M} P_{V}", r"C_{K}^{-1}"])
    assert {"Qbar", "Mheads", "P_V", "C_K"} <= set(keys) and "W_O" not in keys
    # a symbol inside a longer name is not that symbol: no group size G or product M in G_M
    assert notation.symbols_in([r"G_{M} W_{Q}"]) == ["W_Q", "G_M"]
    assert {"G", "M", "epsilon", "Z"} <= set(notation.symbols_in([r"G W_{Q} + M", r"\frac{\epsilon}{2} Z_{Q}"]))


def test_every_command_is_discovered_and_its_subcommands_read_from_usage():
    from derivations import registry
    found = commands.discover()
    assert {"coeffsearch", "derivations.crosscheck", "derivations.regenerate", "numerics.train"} <= set(found)
    assert {f"derivations.{name}" for name in registry.rule_names()} <= set(found)
    assert not any(".emitted" in name or name.endswith("__main__") for name in found)
    usage = "usage: python -m coeffsearch [-h] {minimax,band,certify} ...\n\npositional arguments:"
    assert commands.subcommands(usage) == ["minimax", "band", "certify"]
    assert commands.subcommands("usage: x [--emit {jax,numpy}] [--check]\n\n") == []   # an option's choices


def test_commands_with_the_same_options_show_their_help_once():
    """The rule modules' ``--help`` texts differ only in their name, description and examples: one group, whose
    help the command page shows once (planted: a member with one more option is a command of its own)."""
    def helps(options):
        return (f"usage: python -m derivations.NAME [-h] {options}\n\nDescription of NAME.\n\noptions:\n"
                f"  -h, --help  show this help message and exit\n  {options}  what it does\n\n"
                f"examples:\n  python -m derivations.NAME {options}\n")
    found = {f"derivations.{n}": helps("--check").replace("NAME", n) for n in ("gqa", "halfsplit", "joint")}
    found["derivations.regenerate"] = helps("--regenerate").replace("NAME", "regenerate")
    found["coeffsearch"] = helps("--check").replace("derivations.NAME", "coeffsearch")
    assert commands.groups(found) == [["derivations.gqa", "derivations.halfsplit", "derivations.joint"],
                                      ["derivations.regenerate"], ["coeffsearch"]]
    found["derivations.joint"] = found["derivations.joint"].replace("[-h] --check", "[-h] --check [--json]")
    assert commands.groups(found)[:2] == [["derivations.gqa", "derivations.halfsplit"], ["derivations.joint"]]


def test_help_texts_show_rst_markup_as_what_it_names():
    """A description written for the docs (``:mod:`x```, a double-backtick literal) reads as plain text in a
    terminal and on the command page (planted: argparse's own help keeps the markup)."""
    description = "Checks :mod:`derivations.crosscheck` and :func:`~a.b` on ``W = W_0 + B A``."
    assert plain_text(description) == "Checks derivations.crosscheck and a.b on W = W_0 + B A."
    shown = OneLineParser(prog="x", description=description).format_help()
    assert "derivations.crosscheck" in shown and "``" not in shown and ":mod:" not in shown
    assert ":mod:`" in argparse.ArgumentParser(prog="x", description=description).format_help()


def test_commands_are_looked_for_in_every_package_of_the_layers(tmp_path):
    """The docs read the packages from pyproject.toml, as the layer test does: a package installed there is
    searched for commands (planted: a new package with a command only pyproject.toml names)."""
    assert commands.PACKAGES == LAYERED_PACKAGES
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools.packages.find]\ninclude = ["newpkg*"]\n')
    (tmp_path / "newpkg").mkdir()
    (tmp_path / "newpkg" / "tool.py").write_text('def main():\n    pass\n\nif __name__ == "__main__":\n    main()\n')
    assert commands.project_packages(tmp_path) == ("newpkg", "benchmarks")
    assert commands.discover(tmp_path, commands.project_packages(tmp_path)) == ["newpkg.tool"]


def _hand_pages():
    return [p for p in DOCS.rglob("*.rst") if "_build" not in p.parts]


def test_every_code_block_of_the_pages_runs_or_is_checked():
    """Python on a page is an ``.. executed::`` block (run at build time); shell blocks may only
    install, and what they install is checked here; every ``python -m`` named on a page exists."""
    known = set(commands.discover()) | {"sphinx", "pytest", "pip", "venv"}
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for page in _hand_pages():
        text = page.read_text()
        for lang, body in re.findall(r"^\.\. code-block:: *(\w+)\n\n((?:(?: {3}.*)?\n)+)", text, re.MULTILINE):
            assert lang in ("bash", "text"), f"{page.name}: a {lang} code block is not executed (use .. executed::)"
            if lang == "bash":
                for line in filter(None, (ln.strip() for ln in body.splitlines())):
                    assert re.match(r"(python3 -m venv \.venv|\.venv/bin/pip install -e \"\.\[[\w,]+\]\")$", line), \
                        f"{page.name}: shell line not checked by the suite: {line}"
                    for extra in re.findall(r"\[([\w,]+)\]", line)[0].split(",") if "pip" in line else []:
                        assert extra in extras, f"{page.name}: extra {extra!r} is not in pyproject.toml"
        for module in re.findall(r"python -m ([\w.]+)", text):
            if not module.endswith("."):                                   # not a template (derivations.<rule>)
                assert module in known, f"{page.name}: python -m {module} is not a command of the project"


def test_rule_page_shows_50_digit_evidence_folded_details_and_command_output(tmp_path):
    page = """
    Sylvester
    =========

    .. rule-derivations:: sylvester

    .. command-output:: python -m derivations.sylvester --help
       :lines: 3
    """
    pages = {"page": page, "lemmas": "Lemmas\n======\n\n.. lemma-reference::\n",
             "listings/sylvester": "Listing\n=======\n\n.. emitted-listing:: sylvester\n",
             "more": "More\n====\n\n.. emitted-functions:: sylvester\n"}
    out = build(tmp_path, pages)
    html = (out / "page.html").read_text()
    text = _plain(html)
    from derivations import sylvester
    steps = sum(len(d.steps) for d in sylvester.derivations())
    assert len(re.findall(r"float64 \S+, mpmath (?:0|\de-\d+), symbolic", text)) == steps
    assert "not run" not in text
    summaries = re.findall(r'<details class="workbench-details"><summary>([^<]*)</summary>', html)
    assert len([s for s in summaries if s.startswith("float64 ")]) == steps            # each step's, folded
    assert len([s for s in summaries if s.startswith("What the verdicts mean")]) == 1  # the legend's
    assert len([s for s in summaries if s.startswith("Symbols on this page (")]) == 1  # the symbols, folded
    assert text.count("Reading a step.") == 1                             # one legend per page
    assert text.count("the trusted kernel matched") == 1                  # its boilerplate said once, folded
    # a last step that ends at the theorem's result does not print it again (sylvester.adjoint, .achieved_change)
    assert text.count("⟹ the theorem's result.") == 2
    # what a reader sees before unfolding anything: 1,096 words before the proof pages were halved
    assert visible_words(html) <= 700
    assert "$ python -m derivations.sylvester --help" in text and "more lines)" in text
    assert not re.search(r"Theorem \d", text)                             # no second number in the box
    record = json.loads((out / "evidence" / "sylvester.json").read_text())
    assert all(s["mpmath_error"] is not None and s["mpmath_error"] < 1e-30
               for d in record["derivations"] for s in d["steps"])
    assert 'href="evidence/sylvester.json"' in html


def test_notes_emitted_functions_repeat_are_shown_once_and_nothing_is_dropped(halfsplit_source):
    names = ("halfsplit_qk", "halfsplit_v", "isotropic_qk")
    found = {node.name: ast.get_docstring(node) for node in ast.parse(halfsplit_source).body
             if isinstance(node, ast.FunctionDef)}
    docs = {name: found[name] for name in names}
    # a layout adapter (as gqa_qk is) repeats none of them: the others' notes are still shown once
    docs["layout_adapter"] = "Stored layouts to per-head calls.\n\nReturns the updates in the stored layouts."
    shared = proofs.shared_notes(docs)
    assert [group for group, _ in shared] == [names]
    shown = proofs.joined_notes(shared[0][1])
    assert "Arguments after *" in shown and "Inputs are checked" in shown
    assert "Shapes:" not in shown                     # a one-line note stays with its function
    for name in names:
        own = proofs.own_notes(docs[name], shared)
        assert "Shapes:" in own and "Arguments after *" not in own and "Inputs are checked" not in own, name
        assert set(docs[name].splitlines()) - {""} <= set(own.splitlines()) | set(shown.splitlines()), name
    assert proofs.own_notes(docs["layout_adapter"], shared) == docs["layout_adapter"]
    # the pages before: whole paragraphs compared, so halfsplit_v printed the shared notes a second time
    paragraphs = [{p.strip() for p in docs[name].split("\n\n")} for name in names]
    assert not any("Arguments after *" in p for p in set.intersection(*paragraphs))


def test_a_failing_command_stops_the_build(tmp_path):
    page = "Page\n====\n\n.. command-output:: python -m derivations.sylvester --emit nonsense\n"
    with pytest.raises(SphinxError, match=r"page\.rst, line \d+: python -m derivations\.sylvester --emit nonsense "
                                          r"exited 2, expected 0"):
        build(tmp_path, {"page": page})


def test_the_50_digit_check_runs_and_a_failure_names_the_derivation():
    from derivations import sylvester
    from derivations.engine.derivation import CheckResult
    der = sylvester.derivations()[0]
    objects.with_mpmath(der, "derivations.sylvester")
    assert all(step.check.mpmath_error is not None for step in der.steps)

    def failing(**kwargs):
        raise AssertionError("planted.step step 1 (rewrite): sub-check 'mpmath 50 digits' failed")
    step = SimpleNamespace(check=CheckResult(1e-16, None, "proved", 3))
    planted = SimpleNamespace(name="planted.step", steps=[step], context=SimpleNamespace(mpmath_dims={"n": 3}),
                              check=failing)
    with pytest.raises(objects.FailedDerivation, match=r"derivation planted\.step \(module m\) fails its 50-digit "
                                                       r"check: planted\.step step 1"):
        objects.with_mpmath(planted, "m")


def test_an_executed_block_shows_the_plot_it_made(tmp_path):
    page = """
    Plot
    ====

    .. executed::
       :figure: A straight line, drawn while the page was built.

       import matplotlib.pyplot as plt
       fig, ax = plt.subplots()
       ax.plot([0, 1], [0, 1])
       print("plotted")
    """
    out = build(tmp_path, {"plot": page})
    html = (out / "plot.html").read_text()
    images = re.findall(r'<img [^>]*src="(_images/executed-plot-\d+\.png)"', html)
    assert len(images) == 1 and (out / images[0]).stat().st_size > 1000
    assert "A straight line, drawn while the page was built." in _plain(html) and "plotted" in _plain(html)
    assert external_assets(out) == []


def test_a_figure_block_without_a_figure_stops_the_build(tmp_path):
    page = "Plot\n====\n\n.. executed::\n   :figure: nothing\n\n   x = 1\n"
    with pytest.raises(SphinxError, match=r"plot\.rst, line \d+: the block has ':figure:' but made no matplotlib "
                                          r"figure"):
        build(tmp_path, {"plot": page})


def test_emitted_signatures_say_the_shared_keyword_arguments_once(halfsplit_source):
    found = {node.name: node.args for node in ast.parse(halfsplit_source).body if isinstance(node, ast.FunctionDef)}
    args = {name: found[name] for name in ("halfsplit_qk", "halfsplit_v", "isotropic_qk")}
    shared = signatures.shared_keywords(args)
    assert {"damping=0.0", "msign='newton_schulz'", "check_finite=True"} <= set(shared)
    sentence = " ".join(signatures.shared_sentence(args, shared))
    for name, arguments in args.items():
        short = signatures.short_signature(name, arguments, shared)
        full = f"def {name}({ast.unparse(arguments)})"
        assert short.endswith(", ...)") and "damping" not in short and len(short) < len(full) / 2, short
        # nothing dropped: every keyword argument is in the short signature or in the one sentence
        for pair in signatures.keyword_defaults(arguments):
            assert pair in short or rst.literal(pair) in sentence, (name, pair)
        assert [a.arg for a in arguments.args] == re.findall(r"\w+", short.split("(", 1)[1].split("*")[0])
    # a function that takes only some of them is named; one with **kwargs is left as it is
    extra = ast.parse("def adapter(W, *, eps, damping=0.0): pass\ndef kw(W, *, damping=0.0, **options): pass").body
    args["adapter"] = extra[0].args
    partial = signatures.shared_keywords(args)
    assert "all but" in " ".join(signatures.shared_sentence(args, partial)) and rst.literal("adapter") in \
        " ".join(signatures.shared_sentence(args, partial))
    assert signatures.short_signature("adapter", extra[0].args, partial) == "def adapter(W, *, eps, ...)"
    assert signatures.shared_keywords({"a": args["halfsplit_v"], "kw": extra[1].args}) == []


def test_the_symbols_legend_lists_only_the_derivations_shown_and_is_folded():
    ders = sylvester_rule.derivations()
    lines = proofs.rule_symbols(ders[:1])                  # sylvester.adjoint shows W_Q and W_K only
    assert lines[0] == ".. workbench-details:: Symbols on this page (2): what each means"
    assert not any(r"G_M" in line for line in lines) and any(r"G_M" in line for line in proofs.rule_symbols(ders))
    assert proofs.rule_symbols([]) == []


def test_long_side_conditions_are_folded_and_short_ones_shown():
    assert proofs.conditions_rst([]) == ["**Side conditions:** none.", ""]
    assert proofs.conditions_rst(["β > 0"])[0].startswith("**Side conditions:** ")
    folded = proofs.conditions_rst(CONDITIONS[:3])
    assert folded[0] == ".. workbench-details:: Side conditions (3)"
    assert len([line for line in folded if line.startswith("   * ")]) == 3


def test_lemmas_not_yet_sympy_objects_are_named_in_one_reason():
    why = {"Lemma GU's statement is not yet a SymPy object": 1, "a solve step (certified by duality)": 1,
           "Lemma GR's statement is not yet a SymPy object": 2}
    assert proofs.grouped_reasons(why) == {"the statements of Lemmas GU and GR are not yet SymPy objects": 3,
                                           "a solve step (certified by duality)": 1}
    one = {"Lemma K's statement is not yet a SymPy object": 1}
    assert proofs.grouped_reasons(one) == one


def test_an_emitted_function_reads_as_its_source_with_hand_wrapped_prose_joined(halfsplit_source):
    found = {node.name: ast.get_docstring(node) for node in ast.parse(halfsplit_source).body
             if isinstance(node, ast.FunctionDef)}
    docs = {name: found[name] for name in ("halfsplit_qk", "halfsplit_v", "isotropic_qk")}
    shown, folded = proofs.own_notes_split(docs["halfsplit_qk"], proofs.shared_notes(docs))
    source = proofs.function_source("def halfsplit_qk(W_Q, W_K, G_Q, G_K, *, eps, ...)", shown)
    lines = source.splitlines()
    assert lines[0] == "def halfsplit_qk(W_Q, W_K, G_Q, G_K, *, eps, ...):" and lines[-1] == '    """'
    assert "Arguments after *" not in source                                    # shown once, as a shared note
    assert all(len(text) >= proofs.FOLD_NOTE_CHARS for _, text in folded)       # a long note is folded
    assert all(len(text) < proofs.FOLD_NOTE_CHARS for _, text in shown)
    # the formulas laid out one per line stay so; every word of the docstring's own notes is there
    assert any(line.strip().startswith("dW_Q = ") for line in lines) and any(
        line.strip().startswith("dW_K = ") for line in lines)
    assert sorted(" ".join(text for _, text in shown + folded).split()) == sorted(
        proofs.own_notes(docs["halfsplit_qk"], proofs.shared_notes(docs)).split())
    wrapped = ("head_dim is the width d_h of one head, a positive int that divides both stored head widths, with\n"
               "H_kv dividing H; anything else is refused.")
    assert proofs.reflowed(wrapped) == " ".join(wrapped.split())                # hard-wrapped prose: one line
    laid_out = "dW_Q = (-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1    (halfsplit.query)\ndW_K = x    (halfsplit.key)"
    assert proofs.reflowed(laid_out) == laid_out
    assert proofs.function_source("def f(x)", []) == "def f(x)"


def test_sizes_over_the_same_dimensions_are_written_as_tuples():
    assert sizes_list([{"d": 5, "d_h": 2, "n": 10}, {"d": 4, "d_h": 3, "n": 12}]) == \
        "(d, d_h, n) = (5, 2, 10), (4, 3, 12)"
    assert sizes_list([{"n": 3}, {"n": 4}]) == "n = 3, 4"
    assert sizes_list([{"d": 4, "m": 2}, {"d": 3}]) == "d = 4, m = 2; d = 3"       # different dimensions: written out
    assert sizes_list([{}]) == ""


def test_a_derivation_without_steps_states_its_start_as_the_result():
    """``sylvester.normal_operator`` needs no step (the normal form is the collected operator): its theorem says so
    instead of printing ``X = X``, and no empty proof box follows (its fingerprint is in the theorem)."""
    der = sylvester_rule.normal_operator()
    assert not der.steps
    text = "\n".join(proofs.derivation_rst(der, "sylvester"))
    assert "no step changes it" in text and der.fingerprint() in text and "**Result**" not in text
    assert "prf:proof" not in text
    assert "Proven for all sizes: 0 of 0" not in text


def test_an_identity_prints_its_start_once():
    """An identity chain's theorem shows the start under "Starting from" and only the other side under its result
    (``start = end`` repeated the whole start, the longest formula of most balance theorems)."""
    der = sylvester_rule.adjoint()
    text = "\n".join(proofs.derivation_rst(der, "sylvester"))
    start = proofs.tex(proofs.state_latex(der.start))
    assert text.count(start) == 1, text
    assert "the start equals" in text and proofs.tex(proofs.latex(der.formula)) in text


# ---- the catalogue built in worker processes --------------------------------------------------------------------

@pytest.mark.parametrize("rule", objects._rule_module_names())
def test_a_rule_module_survives_the_trip_from_a_worker(rule):
    """What a worker sends back (:func:`objects.built_in_worker`) prints as the original: every step's
    text, LaTeX and recorded checks, and every emitted function's derivations."""
    built = registry.rule_module(rule)
    ders, functions = list(built.derivations()), list(built.functions())
    sent = objects.pickle.loads(objects.cloudpickle.dumps(("ok", ders, functions)))
    assert sent[0] == "ok" and len(sent[1]) == len(ders) and len(sent[2]) == len(functions)
    for old, new in zip(ders, sent[1], strict=True):
        assert [(str(s.before), str(s.after), s.lemma.key, s.check, s.symbolic, s.instance) for s in new.steps] \
            == [(str(s.before), str(s.after), s.lemma.key, s.check, s.symbolic, s.instance) for s in old.steps]
        assert new.fingerprint() == old.fingerprint() and derivation_latex(new) == derivation_latex(old)
    for old, new in zip(functions, sent[2], strict=True):
        assert [(name, str(_formula(d))) for name, d in new.outputs] == \
            [(name, str(_formula(d))) for name, d in old.outputs]


def _formula(output):
    """An emitted output's formula: a derivation's result, or a :class:`DerivedOutput`'s formula."""
    return output.formula() if callable(output.formula) else output.formula


def test_a_derivation_that_fails_in_a_worker_stops_the_build_with_its_message(monkeypatch):
    def failing(path):
        raise objects.FailedDerivation(f"derivation x.y of module {path} could not be built: ValueError: planted")
    monkeypatch.setattr(objects, "load_rule", failing)
    sent = objects.built_in_worker("derivations.halfsplit")
    future = objects.Future()
    future.set_result(sent)
    cat = objects.Catalogue(["derivations.halfsplit"])
    cat._pending = {"derivations.halfsplit": future}
    with pytest.raises(objects.FailedDerivation, match="derivation x.y of module derivations.halfsplit could not be "
                                                        "built: ValueError: planted"):
        cat.rules  # noqa: B018 (the property builds the catalogue)
