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
from typing import ClassVar

import numpy as np
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from . import rst
from .objects import catalogue

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


def _latex():
    from derivations.printing.latex import latex, state_latex
    return latex, state_latex


def _sizes(dims: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in dims.items())


def theorem_result(der) -> str:
    """The derived statement in LaTeX: the minimizer and value, or the identity ``start = end``."""
    latex, state_latex = _latex()
    from derivations.engine.derivation import Solution
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


def check_lines(step, der, rule_name: str) -> list[str]:
    """The evidence recorded for one step, stated as what was measured."""
    from derivations.engine import derivation as engine
    check = step.check
    ftol = getattr(engine, "FLOAT64_TOL", None)
    mtol = getattr(engine, "MPMATH_TOL", None)
    digits = getattr(engine, "MPMATH_DPS", 50)
    sizes = "; ".join(_sizes(d) for d in getattr(der.context, "check_dims", []))
    what = _KIND.get(step.kind, f"{step.kind} step")
    f64 = (f"float64 — worst relative residual {check.float64_error:.1e} over {check.trials} random "
           f"instances" + (f" (sizes {sizes})" if sizes else "") + (f", tolerance {ftol:.0e}" if ftol else ""))
    if check.mpmath_error is None:
        mp = (f"mpmath at {digits} digits — not run when the derivation is built; "
              f"python -m derivations.{rule_name} --check runs it")
    else:
        mp = f"mpmath at {digits} digits — residual {check.mpmath_error:.1e}" + (f", tolerance {mtol:.0e}" if mtol else "")
    subchecks = getattr(check, "subchecks", None) or {}
    if subchecks:
        f64 += "; worst error of each sub-check: " + ", ".join(f"{k} {float(v):.1e}" for k, v in subchecks.items())
    return [f"* {rst.text('How: ' + what + '.')}",
            f"* {rst.text(f64 + '.')}",
            f"* {rst.text(mp + '.')}",
            f"* {rst.text('symbolic — ' + symbolic_status(check.symbolic, der) + '.')}"]


def side_conditions(der) -> list[str]:
    seen = []
    for step in der.steps:
        for cond in step.conditions:
            if cond not in seen:
                seen.append(cond)
    return seen


def lemma_ref(lemma) -> str:
    return rst.ref(f"Lemma {lemma.number}: {lemma.title}", lemma_label(lemma.key))


def derivation_rst(der, rule_name: str, heading: str = "-") -> list[str]:
    """Theorem and proof of one derivation."""
    _, state_latex = _latex()
    title = der.title
    conds = side_conditions(der)
    out = [f".. _{derivation_label(der.name)}:", "", rst.text(title), heading * (len(rst.text(title)) + 4), ""]
    out += [f".. prf:theorem:: {rst.text(title)}", f"   :label: theorem-{rst.label(der.name)}", ""]
    body = [f"{rst.literal(der.name)} — {rst.text(der.statement or title)}.", "",
            "**Starting from**", "", *rst.math_block(state_latex(der.start)),
            "**Side conditions**", ""]
    body += [f"* {rst.text(c)}" for c in conds] or ["* none"]
    body += ["", "**Result**", "", *rst.math_block(theorem_result(der)),
             f"Fingerprint {rst.literal(der.fingerprint())} (a hash of the start and every step's result).", ""]
    out += rst.indent(body) + [".. prf:proof::", ""]
    proof = [(f"The chain of {len(der.steps)} recorded steps below leads from the start to the result; "
             "every step was checked when the derivation was built."), ""]
    for step in der.steps:
        note = f" — {rst.text(step.note)}" if step.note else ""
        item = [f"**Step {step.index}** ({rst.text(step.kind.replace('_', ' '))}): {lemma_ref(step.lemma)}{note}.",
                "", *rst.math_block(r"\Longrightarrow\ " + state_latex(step.after))]
        if step.conditions:
            item += ["Side conditions discharged:", ""] + [f"* {rst.text(c)}" for c in step.conditions] + [""]
        else:
            item += ["Side conditions discharged: none.", ""]
        item += ["Check:", "", *check_lines(step, der, rule_name), ""]
        proof += [".. container:: workbench-step", "", *rst.indent(item)]
    out += rst.indent(proof)
    return out


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
    from derivations.cli import render
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
            from .objects import FailedDerivation
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
        for name, signature, doc in public_functions(entry, source):
            lines += [rst.text(name), "~" * (len(rst.text(name)) + 4), "", *rst.literal_block(signature, "python")]
            fn = derived.get(name)
            if fn is not None:
                refs = ", ".join(rst.ref(der.name, derivation_label(der.name)) for der in fn.derivations()
                                 if hasattr(der, "steps"))
                if refs:
                    lines += [f"Printed from the derivations {refs}.", ""]
            if doc:
                lines += rst.literal_block(doc, "text")
        return rst.parse(self, lines)


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
    import inspect
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
    latex, _ = _latex()
    check = getattr(lemma, "check", None)
    if check is not None:
        doc = _doc_paragraphs(check)
        what = doc[0] if doc else f"the lemma's own numerical check ({check.__name__}) of the statement above"
        return [rst.text("A dedicated numerical check: " + what), ""]
    if getattr(lemma, "identities", None) is None:
        doc = _doc_paragraphs(lemma.self_check)
        return [rst.text(doc[0]), ""] if doc else []
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
    from .objects import FailedDerivation
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
                      f".. prf:lemma:: {rst.text(lemma.title)}", f"   :label: prf-{lemma_label(lemma.key)}", ""]
            body = [f"Key {rst.literal(lemma.key)}.", "", *rst.math_block(lemma.statement)]
            conds = getattr(lemma, "conditions", ()) or ()
            body += (["**Side conditions**", ""] + [f"* {rst.math(c)}" for c in conds] + [""]
                     if conds else ["No side conditions.", ""])
            lines += rst.indent(body)
            lines += ["**Self-check.**", "", *self_check_description(lemma), *self_check_result(lemma, rng)]
            users = cat.users(lemma)
            if users:
                lines += ["**Used by** " + ", ".join(rst.ref(d.name, derivation_label(d.name)) for d in users) + ".", ""]
            else:
                lines += ["Not used by any derivation of the rule modules.", ""]
        return rst.parse(self, lines)
