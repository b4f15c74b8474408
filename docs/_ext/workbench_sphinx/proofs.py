"""Directives that print derivations as theorem + proof, emitted functions, listings and lemmas.

* ``.. derivation:: halfsplit.query`` — the theorem (statement, side conditions, result) and its
  proof as the chain of recorded steps: each step's expression, the lemma (a link into the lemma
  reference), the side conditions it discharged and the check that backed it;
* ``.. rule-derivations:: halfsplit`` — every derivation of a rule module, in reading order (a
  derivation that belongs to another module is linked, not repeated);
* ``.. emitted-functions:: halfsplit`` — signature and docstring of each public function of the
  emitted JAX module, with a link to the full listing;
* ``.. emitted-listing:: halfsplit`` — that full listing, generated at build time;
* ``.. lemma-reference::`` — every lemma: statement, side conditions, what its self-check
  verifies (and its measured error), and which derivations use it.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import ClassVar

import numpy as np
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from derivations.cli import render
from derivations.engine import derivation as engine
from derivations.engine.derivation import Solution
from derivations.printing.latex import latex, state_latex

from . import rst
from .notation import condition_rst, docstring_rst, symbol_lines, symbols_in, tidy_latex
from .objects import FailedDerivation, catalogue

#: the folder of the built site that holds each rule module's evidence at full precision
EVIDENCE_DIR = "evidence"

# ---- labels --------------------------------------------------------------------------------


def derivation_label(name: str) -> str:
    return "derivation-" + rst.label(name)


def lemma_label(key: str) -> str:
    return "lemma-" + rst.label(key)


def rule_label(name: str) -> str:
    return "rule-" + rst.label(name)


def listing_doc(name: str) -> str:
    return f"/listings/{name}"


def mark_rendered(env, kind: str, name: str):
    """Remember that this document rendered ``name`` (checked for completeness at the end)."""
    store = env.workbench_rendered if hasattr(env, "workbench_rendered") else {}
    env.workbench_rendered = store
    store.setdefault(env.docname, set()).add((kind, name))


# ---- states and checks ---------------------------------------------------------------------


def _sizes(dims: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in dims.items())


def theorem_result(der) -> str:
    """The derived statement in LaTeX: the minimizer and value, or the identity ``start = end``."""
    if isinstance(der.state, Solution):
        return state_latex(der.state)
    return rf"{latex(der.start.expr)} = {latex(der.formula)}"


_KIND = {
    "rewrite": "both sides evaluated on random instances that satisfy the side conditions",
    "change_of_variables": "both sides evaluated with the old variable expressed through the new one",
    "solve": "the claimed minimizer checked against the problem on random instances",
    "back_substitute": "the minimizer in the original variable checked against the original problem",
    "restrict": ("the objective compared, and the new constraint checked to bound the old one from above, on "
                 "random instances (a restriction: the feasible set shrinks)"),
}


def symbolic_status(status: str, der) -> str:
    """What the symbolic check showed, in words that claim no more than it did."""
    dims = getattr(der.context, "symbolic_dims", {}) or {}
    at = f" at sizes {_sizes(dims)}" if dims else ""
    if status == "proved":
        return (f"the two sides agree exactly as rational functions of the entries of explicit "
                f"symbolic matrices{at} (an identity at those sizes, not a proof for every size)")
    if status == "numeric only":
        return "not shown symbolically (the explicit model does not cover this step): numeric evidence only"
    if status == "n/a":
        return "not applicable to this kind of step"
    return status if ("size" in status or not at) else f"{status}{at}"


def _f64_sizes(der) -> str:
    return "; ".join(_sizes(d) for d in getattr(der.context, "check_dims", []))


def short_symbolic(status: str) -> str:
    """The symbolic verdict in a few words (the legend says what each means)."""
    if status == "proved" or status.startswith("verified"):
        return "exact"
    if status.startswith("n/a: certified by duality"):
        return "n/a (duality certificate)"
    if status.startswith("n/a"):
        return "n/a"
    if status.startswith("not modelled"):
        return "not modelled"
    if status == "numeric only":
        return "numeric only"
    return status.split(":")[0]


def _rounded(x: float) -> str:
    """One significant digit for display (the evidence JSON keeps every digit); exact zero is 0."""
    return "0" if x == 0 else f"{x:.0e}"


def evidence_line(step) -> str:
    """One line of evidence for a step: float64, mpmath at 50 digits, symbolic (rounded for display)."""
    check = step.check
    mp = "not run" if check.mpmath_error is None else _rounded(check.mpmath_error)
    return (f"float64 {_rounded(check.float64_error)} ({check.trials} instances) · mpmath {mp} · "
            f"symbolic {short_symbolic(check.symbolic)}")


def check_details(step, der) -> list[str]:
    """The details behind the evidence line: every sub-check and the full symbolic verdict."""
    check = step.check
    lines = [f"* {rst.text('How: ' + _KIND.get(step.kind, step.kind.replace('_', ' ') + ' step') + '.')}"]
    subchecks = getattr(check, "subchecks", None) or {}
    if subchecks and list(subchecks) != ["before = after"]:
        lines.append("* " + rst.text("Worst error of each sub-check: "
                                     + ", ".join(f"{k} {float(v):.1e}" for k, v in subchecks.items()) + "."))
    lines.append(f"* {rst.text('Symbolic: ' + symbolic_status(check.symbolic, der) + '.')}")
    if getattr(check, "instance", ""):
        lines.append(f"* {rst.text('Kernel: ' + check.instance + '.')}")
    return lines


def check_lines(step, der, rule_name: str) -> list[str]:
    """The evidence recorded for one step: the one-line summary, then the details."""
    return [f"* {rst.text('Evidence: ' + evidence_line(step) + '.')}", *check_details(step, der)]


def legend(der_or_none=None, json_href: str | None = None) -> list[str]:
    """How to read a step's evidence line: said once per page."""
    ftol = getattr(engine, "FLOAT64_TOL", 1e-9)
    mtol = getattr(engine, "MPMATH_TOL", None)
    digits = getattr(engine, "MPMATH_DPS", 50)
    kinds = "; ".join(f"*{rst.text(kind.replace('_', ' '))}*: {rst.text(how)}" for kind, how in _KIND.items())
    lines = [".. rst-class:: workbench-legend", "",
             (f"**Reading a step.** Each step names the lemma it applies (a link to the lemma reference), shows "
              f"the expression it leads to, and one evidence line that unfolds into the side conditions the step "
              f"discharged and how it was checked: "
              f"*float64* — the worst relative residual over random instances (tolerance {ftol:.0e}); "
              f"*mpmath* — the residual at {digits} digits on one instance, computed while this page was built"
              + (f" (tolerance {mtol:.0e})" if mtol else "") + "; *symbolic* — *exact*: the two sides agree "
              "as rational functions of the entries of explicit symbolic matrices at the sizes given (an identity "
              "at those sizes, not a proof for every size); *not modelled*: numeric evidence only; *n/a*: a solve "
              "or restriction step, certified by duality or checked as an inequality. Numbers are rounded for "
              "display. How each kind of step is checked — " + kinds
              + (f"; every number at full precision: `evidence JSON <{json_href}>`__." if json_href else ".")), ""]
    return lines


def side_conditions(der) -> list[str]:
    seen = []
    for step in der.steps:
        for cond in step.conditions:
            if cond not in seen:
                seen.append(cond)
    return seen


def lemma_ref(lemma) -> str:
    return rst.ref(f"Lemma {lemma.number}: {lemma.title}", lemma_label(lemma.key))


def tex(text: str) -> str:
    return tidy_latex(text)


def derivation_rst(der, rule_name: str, heading: str = "-") -> list[str]:
    """Theorem and proof of one derivation (the page's legend explains the evidence lines)."""
    title = der.title
    conds = side_conditions(der)
    out = [f".. _{derivation_label(der.name)}:", "", rst.text(title), heading * (len(rst.text(title)) + 4), ""]
    out += [".. prf:theorem::", "   :nonumber:", f"   :label: theorem-{rst.label(der.name)}", ""]
    body = [f"{rst.literal(der.name)} — {condition_rst(der.statement or title)}.", "",
            "**Starting from**", "", *rst.math_block(tex(state_latex(der.start))),
            "**Side conditions**", ""]
    body += [f"* {condition_rst(c)}" for c in conds] or ["* none"]
    body += ["", "**Result**", "", *rst.math_block(tex(theorem_result(der))),
             f"Fingerprint {rst.literal(der.fingerprint())} (a hash of the start and every step's result).", ""]
    out += rst.indent(body) + [".. prf:proof::", ""]
    sizes = _f64_sizes(der)
    mp_sizes = _sizes(getattr(der.context, "mpmath_dims", {}) or {})
    sym_sizes = _sizes(getattr(der.context, "symbolic_dims", {}) or {})
    proof = [rst.text(f"{len(der.steps)} steps, each checked: float64 at sizes {sizes or 'of the context'}"
                      + (f"; mpmath at {mp_sizes}" if mp_sizes else "")
                      + (f"; symbolic model at {sym_sizes}" if sym_sizes else "") + "."), ""]
    status = der.proof_status()
    why = "; ".join(f"{n}: {reason}" for reason, n in status["why"].items())
    proof += [rst.text(f"Proven for all sizes: {status['for all sizes']} of {len(der.steps)} steps (the trusted "
                       "kernel matched each, with symbolic dimensions, against the statement of the lemma it "
                       f"cites); checked at instances only: {status['at instances']}"
                       + (f" ({why})" if why else "") + "."), ""]
    for step in der.steps:
        note = f" — {condition_rst(step.note)}" if step.note else ""
        item = [f"**Step {step.index}** · {lemma_ref(step.lemma)}{note}.", "",
                *rst.math_block(r"\Longrightarrow\ " + tex(state_latex(step.after)))]
        folded = (["* Discharged: " + "; ".join(condition_rst(c) for c in step.conditions) + "."]
                  if step.conditions else []) + check_details(step, der)
        item += [f".. workbench-details:: Evidence: {evidence_line(step)}", "", *rst.indent(folded), ""]
        proof += [".. container:: workbench-step", "", *rst.indent(item)]
    out += rst.indent(proof)
    return out


def rule_symbols(entry) -> list[str]:
    """The "Symbols on this page" legend: every symbol of :data:`notation.SYMBOLS` the page shows."""
    texts = []
    for der in entry.derivations:
        texts.append(tex(state_latex(der.start)))
        texts += [tex(state_latex(step.after)) for step in der.steps]
    keys = symbols_in(texts)
    if not keys:
        return []
    return [".. rst-class:: workbench-legend", "", "**Symbols on this page.**", "", *symbol_lines(keys)]


# ---- directives ----------------------------------------------------------------------------


class DerivationDirective(SphinxDirective):
    """``.. derivation:: NAME`` — one derivation as theorem and proof."""

    required_arguments = 1
    has_content = False

    def run(self):
        cat = catalogue(self.config)
        der = cat.derivation(self.arguments[0])
        home = cat.home(der)
        mark_rendered(self.env, "derivation", der.name)
        return rst.parse(self, derivation_rst(der, home))


class RuleDerivationsDirective(SphinxDirective):
    """``.. rule-derivations:: MODULE`` — every derivation of a rule module."""

    required_arguments = 1
    has_content = False

    def run(self):
        cat = catalogue(self.config)
        entry = cat.rule(self.arguments[0])
        mark_rendered(self.env, "rule", entry.name)
        rule = entry.rule
        lines = [f".. _{rule_label(entry.name)}:", "", rst.text(rule.description or rule.title), "",
                 f"Command line: {rst.literal(f'python -m derivations.{entry.name} --emit jax|numpy|latex|text')} "
                 f"and {rst.literal(f'python -m derivations.{entry.name} --check')}. Derivations on this page: "
                 + ", ".join(rst.literal(d.name) for d in entry.derivations) + ".", ""]
        depth = "../" * self.env.docname.count("/")
        lines += legend(json_href=f"{depth}{EVIDENCE_DIR}/{entry.name}.json") + rule_symbols(entry)
        for der in entry.derivations:
            home = cat.home(der)
            if home != entry.name:
                lines += [(f"* {rst.literal(der.name)} (used here) is derived on the page of "
                          f"{rst.literal(home)}: {rst.ref(der.title, derivation_label(der.name))}."), ""]
                continue
            mark_rendered(self.env, "derivation", der.name)
            lines += derivation_rst(der, entry.name)
        return rst.parse(self, lines)


def emitted_source(entry, target: str = "jax") -> str:
    return render(entry.rule, target)


def public_functions(entry, source: str) -> list:
    """``(name, signature, docstring)`` of every public function of the emitted module."""
    tree = ast.parse(source)
    wanted = [fn.name for fn in entry.functions]
    if entry.rule.jax_extra:
        wanted += [n for n in entry.rule.jax_extra()[1] if n not in wanted]
    found = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    out = []
    for name in wanted:
        node = found.get(name)
        if node is None:
            raise FailedDerivation(f"emitted module of {entry.name} has no function {name!r}")
        out.append((name, f"def {name}({ast.unparse(node.args)})", ast.get_docstring(node) or ""))
    return out


class EmittedFunctionsDirective(SphinxDirective):
    """``.. emitted-functions:: MODULE`` — signature and docstring of each emitted JAX function."""

    required_arguments = 1
    has_content = False

    def run(self):
        entry = catalogue(self.config).rule(self.arguments[0])
        mark_rendered(self.env, "emitted", entry.name)
        source = emitted_source(entry)
        derived = {fn.name: fn for fn in entry.functions}
        lines = [(f"Generated by {rst.literal(f'python -m derivations.{entry.name} --emit jax')}; the full module, "
                 f"as emitted when these pages were built: :doc:`{listing_doc(entry.name)}`."), ""]
        functions = public_functions(entry, source)
        shared = shared_paragraphs([doc for _, _, doc in functions])
        if shared:
            lines += ["**Notes shared by every function below.**", "", ".. rst-class:: workbench-doc", "",
                      *rst.literal_block("\n\n".join(shared), "text")]
        for name, signature, doc in functions:
            lines += [rst.text(name), "~" * (len(rst.text(name)) + 4), "", *rst.literal_block(signature, "python")]
            fn = derived.get(name)
            if fn is not None:
                refs = ", ".join(rst.ref(der.name, derivation_label(der.name)) for der in fn.derivations()
                                 if hasattr(der, "steps"))
                if refs:
                    lines += [f"Printed from the derivations {refs}.", ""]
            own = [p for p in _paragraphs(doc) if p not in shared]
            if own:
                lines += [".. rst-class:: workbench-doc", "", *rst.literal_block("\n\n".join(own), "text")]
        return rst.parse(self, lines)


def _paragraphs(doc: str) -> list[str]:
    return [p.strip("\n") for p in doc.split("\n\n") if p.strip()]


def shared_paragraphs(docs) -> list[str]:
    """Docstring paragraphs that two or more functions repeat word for word (shown once)."""
    if len(docs) < 2:
        return []
    counts: dict = {}
    for doc in docs:
        for p in dict.fromkeys(_paragraphs(doc)):
            counts[p] = counts.get(p, 0) + 1
    return [p for p, n in counts.items() if n >= 2]


class EmittedListingDirective(SphinxDirective):
    """``.. emitted-listing:: MODULE`` — the whole emitted JAX module."""

    required_arguments = 1
    has_content = False

    def run(self):
        entry = catalogue(self.config).rule(self.arguments[0])
        mark_rendered(self.env, "listing", entry.name)
        source = emitted_source(entry)
        lines = [(f"The module {rst.literal(f'python -m derivations.{entry.name} --emit jax')} prints, "
                 f"generated from the live derivations when this page was built "
                 f"({len(source.splitlines())} lines)."), "", *rst.literal_block(source, "python")]
        return rst.parse(self, lines)


# ---- lemmas --------------------------------------------------------------------------------


def _doc_paragraphs(obj) -> list[str]:
    """The paragraphs of a docstring, each joined into one line."""
    doc = inspect.cleandoc(getattr(obj, "__doc__", None) or "")
    return [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]


def _cases(lemma):
    """``(lhs, rhs)`` pairs and the sampler of an identity-based self-check."""
    if callable(getattr(lemma, "cases", None)):
        cases, sampler = lemma.cases()
    else:
        cases, sampler = lemma.identities()
    return [(c.lhs, c.rhs) if hasattr(c, "lhs") else tuple(c) for c in cases], sampler


def self_check_description(lemma) -> list[str]:
    """What the lemma's self-check evaluates, read off the lemma object and its code."""
    check = getattr(lemma, "check", None)
    if check is not None:
        doc = _doc_paragraphs(check)
        what = doc[0] if doc else f"the lemma's own numerical check ({check.__name__}) of the statement above"
        return [docstring_rst("A dedicated numerical check: " + what), ""]
    if getattr(lemma, "identities", None) is None:
        doc = _doc_paragraphs(lemma.self_check)
        return [docstring_rst(doc[0]), ""] if doc else []
    pairs, sampler = _cases(lemma)
    dims = getattr(sampler, "dims", {}) or {}
    method = _doc_paragraphs(type(lemma).self_check)
    # the method's docstring is public API (autodoc renders it too), so it is reST already
    lines = [" ".join(method[1:]) if len(method) > 1 else "Evaluates both sides on random instances.",
             "", rst.text("The instances of the statement it uses"
                          + (f" (random matrices at sizes {_sizes(dims)})" if dims else "") + ":"), ""]
    for lhs, rhs in pairs:
        lines += rst.math_block(rf"{latex(lhs)} = {latex(rhs)}")
    return lines


def self_check_result(lemma, rng) -> list[str]:
    """Run the self-check once more; a failure stops the build, the errors are shown."""
    try:
        result = lemma.self_check(rng)
    except Exception as exc:
        raise FailedDerivation(f"lemma {lemma.number} ({lemma.key}): self-check raised "
                               f"{type(exc).__name__}: {exc}") from exc
    if getattr(result, "passed", True) is False:
        raise FailedDerivation(f"lemma {lemma.number} ({lemma.key}): self-check failed: "
                               + "; ".join(getattr(result, "failures", [])))
    errors = getattr(result, "errors", None)
    if isinstance(errors, dict) and errors:
        shown = ", ".join(f"{name} {float(err):.1e}" for name, err in errors.items())
        return [rst.text(f"Run when these pages were built: worst error of each sub-check: {shown}."), ""]
    return [rst.text(f"Run when these pages were built: largest error {float(result):.1e}."), ""]


class LemmaReferenceDirective(SphinxDirective):
    """``.. lemma-reference::`` — every lemma, with the derivations that use it."""

    has_content = False
    option_spec: ClassVar[dict] = {"seed": directives.nonnegative_int}

    def run(self):
        cat = catalogue(self.config)
        rng = np.random.default_rng(self.options.get("seed", 0))
        lines = []
        for lemma in cat.lemmas():
            mark_rendered(self.env, "lemma", lemma.key)
            head = f"Lemma {lemma.number}: {lemma.title}"
            lines += [f".. _{lemma_label(lemma.key)}:", "", rst.text(head), "-" * (len(rst.text(head)) + 4), "",
                      ".. prf:lemma::", "   :nonumber:", f"   :label: prf-{lemma_label(lemma.key)}", ""]
            body = [f"Key {rst.literal(lemma.key)}.", "", *rst.math_block(tidy_latex(lemma.statement_latex))]
            conds = lemma.condition_latex
            body += (["**Side conditions**", ""] + [f"* {rst.math(tidy_latex(c))}" for c in conds] + [""]
                     if conds else ["No side conditions.", ""])
            lines += rst.indent(body)
            lines += ["**Self-check.**", "", *self_check_description(lemma), *self_check_result(lemma, rng)]
            users = cat.users(lemma)
            if users:
                lines += ["**Used by** " + ", ".join(rst.ref(d.name, derivation_label(d.name)) for d in users) + ".",
                          ""]
            else:
                lines += ["Not used by any derivation of the rule modules.", ""]
        return rst.parse(self, lines)


# ---- rule modules without a page of their own ------------------------------------------------


def pageless_rules(env, cat, folder: str) -> list:
    """Registered rule modules with no ``<folder>/<name>.rst`` page (found, not listed by hand)."""
    return [entry for entry in cat.rules.values() if not (Path(env.srcdir) / folder / f"{entry.name}.rst").is_file()]


class OtherRulesDirective(SphinxDirective):
    """``.. other-rules::`` — every rule module without its own page under ``rules/``: its
    derivations and emitted functions, so a new rule module is documented before anyone writes a page."""

    has_content = False

    def run(self):
        cat = catalogue(self.config)
        lines = []
        for entry in pageless_rules(self.env, cat, "rules"):
            title = rst.text(entry.rule.title or entry.name)
            lines += [title, "-" * (len(title) + 4), "", f".. rule-derivations:: {entry.name}", ""]
            if entry.functions:
                lines += [f".. emitted-functions:: {entry.name}", ""]
            else:
                mark_rendered(self.env, "emitted", entry.name)
                mark_rendered(self.env, "listing", entry.name)
                lines += [rst.text(f"The rule module {entry.name} emits no functions."), ""]
        if not lines:
            lines = ["Every rule module has its own page.", ""]
        return rst.parse(self, lines)


class OtherListingsDirective(SphinxDirective):
    """``.. other-listings::`` — the emitted module of every rule module without a listing page."""

    has_content = False

    def run(self):
        cat = catalogue(self.config)
        lines = []
        for entry in pageless_rules(self.env, cat, "listings"):
            if not entry.functions:
                continue
            title = rst.text(f"{entry.name}: the emitted JAX module")
            lines += [title, "-" * (len(title) + 4), "", f".. emitted-listing:: {entry.name}", ""]
        if not lines:
            lines = ["Every emitted module has its own listing page.", ""]
        return rst.parse(self, lines)
