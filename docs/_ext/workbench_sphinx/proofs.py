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
import re
from typing import ClassVar

import numpy as np
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from derivations.cli import render
from derivations.engine.derivation import Solution
from derivations.engine.latex import latex, state_latex

from . import rst, signatures
from .evidence import EVIDENCE_DIR, check_details, check_sizes, evidence_line, legend, sizes_sentence, sizes_text
from .notation import condition_rst, docstring_rst, symbol_lines, symbols_in, tidy_latex
from .objects import FailedDerivation, catalogue
from .pages import has_page

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


# ---- theorems and proofs -------------------------------------------------------------------


def theorem_result(der) -> str:
    """The derived statement in LaTeX: the minimizer and value, or the identity ``start = end``."""
    if isinstance(der.state, Solution):
        return state_latex(der.state)
    return rf"{latex(der.start.expr)} = {latex(der.formula)}"


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


_NOT_YET = re.compile(r"Lemma (\S+)'s statement is not yet a SymPy object")


def grouped_reasons(why: dict) -> dict:
    """``{reason: steps}`` with the lemmas whose statements are not yet SymPy objects named in one reason."""
    lemmas = {m.group(1): n for reason, n in why.items() if (m := _NOT_YET.fullmatch(reason))}
    if len(lemmas) < 2:
        return dict(why)
    names = list(lemmas)
    joined = f"the statements of Lemmas {', '.join(names[:-1])} and {names[-1]} are not yet SymPy objects"
    out = {joined: sum(lemmas.values())}
    out.update({reason: n for reason, n in why.items() if not _NOT_YET.fullmatch(reason)})
    return out


def proof_summary(der) -> str:
    """The proof's first line: how many steps are proven for all sizes (the legend says what that
    means), why the others are checked at instances only, and the derivation's fingerprint."""
    status = der.proof_status()
    reasons = grouped_reasons(status["why"])   # one reason: its count is the "at instances only" count
    why = "; ".join(reason if n == 1 or len(reasons) == 1 else f"{n}: {reason}" for reason, n in reasons.items())
    rest = status["at instances"]
    text = (f"Proven for all sizes: {status['for all sizes']} of {len(der.steps)} steps"
            + (f"; at instances only: {rest}" + (f" — {why}" if why else "") if rest else "") + ".")
    return f"{rst.text(text)} Fingerprint {rst.literal(der.fingerprint())}."


def step_rst(step, der, after_latex: str | None, lemma: str, where: str = "the theorem's result") -> list[str]:
    """One step: its lemma and note, its evidence line (the details folded under it), its result
    (``after_latex``; ``None`` for a last step whose result is printed ``where``, not twice)."""
    note = f" — {condition_rst(step.note)}" if step.note else ""
    result = rst.math_block(after_latex) if after_latex is not None else [
        rst.text(f"⟹ {where}."), ""]
    item = [f"**Step {step.index}** · {lemma}{note}.", "",
            f".. workbench-details:: {evidence_line(step)}", "", *rst.indent(check_details(step, der)), "",
            *result]
    return [".. container:: workbench-step", "", *rst.indent(item)]


def ends_at_result(der) -> bool:
    """Whether the last step's expression is the theorem's result (then the proof does not repeat it)."""
    if not der.steps:
        return False
    last = tex(state_latex(der.steps[-1].after))
    if isinstance(der.state, Solution):
        return last == tex(theorem_result(der))
    return last == tex(latex(der.formula))


#: side conditions longer than this (characters, as the engine records them) are folded under a summary
FOLD_CONDITIONS_CHARS = 100


def conditions_rst(conds) -> list[str]:
    """A theorem's side conditions: inline when short, else folded (each step's details repeat its own)."""
    if not conds:
        return ["**Side conditions:** none.", ""]
    if sum(len(c) for c in conds) <= FOLD_CONDITIONS_CHARS:
        return ["**Side conditions:** " + "; ".join(condition_rst(c) for c in conds) + ".", ""]
    items = [f"* {condition_rst(c)}" for c in conds]
    return [f".. workbench-details:: Side conditions ({len(conds)})", "",
            *rst.indent(items), ""]


def derivation_rst(der, rule_name: str, heading: str = "-", page_sizes: dict | None = None) -> list[str]:
    """Theorem and proof of one derivation (the page's legend explains the evidence lines; where the
    steps are checked is said here only when it differs from ``page_sizes``, said once by the legend)."""
    title = der.title
    conds = side_conditions(der)
    out = [f".. _{derivation_label(der.name)}:", "", rst.text(title), heading * (len(rst.text(title)) + 4), ""]
    out += [".. prf:theorem::", "   :nonumber:", f"   :label: theorem-{rst.label(der.name)}", ""]
    body = [f"{rst.literal(der.name)} — {condition_rst(der.statement or title)}.", "",
            ".. rst-class:: workbench-label", "", "**Starting from**", "",
            *rst.math_block(tex(state_latex(der.start))), *conditions_rst(conds)]
    if der.steps and isinstance(der.state, Solution):
        body += [".. rst-class:: workbench-label", "", "**Result**", "", *rst.math_block(tex(theorem_result(der)))]
    elif der.steps:  # an identity: its start is printed just above, so the result is its other side only
        body += [".. rst-class:: workbench-label", "", "**Result:** the start equals", "",
                 *rst.math_block(tex(latex(der.formula)))]
    else:  # nothing to rewrite: the start is the result (printing "X = X" would say nothing)
        body += [f"**Result:** the start itself: no step changes it, so there is no proof to show (fingerprint "
                 f"{rst.literal(der.fingerprint())}).", ""]
        return out + rst.indent(body)
    out += rst.indent(body) + [".. prf:proof::", ""]
    proof = [proof_summary(der), ""]
    sizes = check_sizes(der)
    if sizes != page_sizes:
        proof += [".. workbench-details:: Checked at sizes of its own (not the legend's)", "",
                  *rst.indent([sizes_sentence(sizes, "Every step of this proof is checked "), ""])]
    last = der.steps[-1] if ends_at_result(der) else None
    for step in der.steps:
        after = None if step is last else r"\Longrightarrow\ " + tex(state_latex(step.after))
        proof += step_rst(step, der, after, lemma_ref(step.lemma))
    out += rst.indent(proof)
    return out


def common_sizes(derivations) -> dict | None:
    """Where most derivations of a page check their steps (said once, in the legend; a derivation
    checked elsewhere says so in its proof)."""
    found = [check_sizes(der) for der in derivations]
    if not found:
        return None
    return max(found, key=lambda sizes: (found.count(sizes), -found.index(sizes)))


def rule_symbols(shown) -> list[str]:
    """The "Symbols on this page" legend (folded): every symbol of :data:`notation.SYMBOLS` that the
    derivations ``shown`` on the page display."""
    texts = []
    for der in shown:
        texts.append(tex(state_latex(der.start)))
        texts += [tex(state_latex(step.after)) for step in der.steps]
    keys = symbols_in(texts)
    if not keys:
        return []
    return [f".. workbench-details:: Symbols on this page ({len(keys)}): what each means", "",
            *rst.indent(symbol_lines(keys))]


# ---- directives ----------------------------------------------------------------------------


class DerivationDirective(SphinxDirective):
    """``.. derivation:: NAME`` — one derivation as theorem and proof."""

    reads_catalogue = True  # prints from the catalogue: objects.read_order reads its page last

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

    reads_catalogue = True  # prints from the catalogue: objects.read_order reads its page last

    required_arguments = 1
    has_content = False

    def run(self):
        cat = catalogue(self.config)
        entry = cat.rule(self.arguments[0])
        mark_rendered(self.env, "rule", entry.name)
        rule = entry.rule
        lines = [f".. _{rule_label(entry.name)}:", "", rst.prose(rule.description or rule.title), "",
                 f"Command line: {rst.literal(f'python -m derivations.{entry.name} --emit jax|numpy|latex|text')} "
                 f"and {rst.literal(f'python -m derivations.{entry.name} --check')}.", ""]
        depth = "../" * self.env.docname.count("/")
        own = [der for der in entry.derivations if cat.home(der) == entry.name]
        sizes = common_sizes(own)
        lines += legend(json_href=f"{depth}{EVIDENCE_DIR}/{entry.name}.json", sizes=sizes) + rule_symbols(own)
        for der in entry.derivations:
            home = cat.home(der)
            if home != entry.name:
                lines += [(f"* {rst.literal(der.name)} (used here) is derived on the {rst.literal(home)} page: "
                          f"{rst.ref(der.title, derivation_label(der.name))}."), ""]
                continue
            mark_rendered(self.env, "derivation", der.name)
            lines += derivation_rst(der, entry.name, page_sizes=sizes)
        return rst.parse(self, lines)


def emitted_source(entry, target: str = "jax") -> str:
    return render(entry.rule, target)


def public_functions(entry, source: str) -> list:
    """``(name, arguments, docstring)`` of every public function of the emitted module (the arguments
    as an ``ast.arguments``)."""
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
        out.append((name, node.args, ast.get_docstring(node) or ""))
    return out


class EmittedFunctionsDirective(SphinxDirective):
    """``.. emitted-functions:: MODULE`` — signature and docstring of each emitted JAX function."""

    reads_catalogue = True  # prints from the catalogue: objects.read_order reads its page last

    required_arguments = 1
    has_content = False

    def run(self):
        entry = catalogue(self.config).rule(self.arguments[0])
        mark_rendered(self.env, "emitted", entry.name)
        source = emitted_source(entry)
        derived = {fn.name: fn for fn in entry.functions}
        lines = [(f"The whole module: :doc:`{listing_doc(entry.name)}` "
                  f"({rst.literal(f'python -m derivations.{entry.name} --emit jax')})."), ""]
        functions = public_functions(entry, source)
        shared = shared_notes({name: doc for name, _, doc in functions})
        for names, units in shared:  # said once, folded: the same notes on every rule page
            who = ("every function below" if len(names) == len(functions)
                   else ", ".join(names[:-1]) + " and " + names[-1])
            topics = notes_summary(units)
            notes = [".. rst-class:: workbench-doc", "", *rst.literal_block(joined_notes(units), "text")]
            lines += [f".. workbench-details:: Notes shared by {who}: {topics}", "", *rst.indent(notes)]
        arguments = {name: args for name, args, _ in functions}
        common = signatures.shared_keywords(arguments)
        lines += signatures.shared_sentence(arguments, common)
        for name, args, doc in functions:
            lines += [rst.text(name), "~" * (len(rst.text(name)) + 4), ""]
            fn = derived.get(name)
            if fn is not None:
                refs = ", ".join(rst.ref(der.name, derivation_label(der.name)) for der in fn.derivations()
                                 if hasattr(der, "steps"))
                if refs:
                    lines += [".. rst-class:: workbench-from", "", f"Printed from {refs}.", ""]
            shown, folded = own_notes_split(doc, shared)
            lines += [".. rst-class:: workbench-doc", "",
                      *rst.literal_block(function_source(signatures.short_signature(name, args, common), shown),
                                         "python")]
            if folded:
                notes = [".. rst-class:: workbench-doc", "", *rst.literal_block(joined_notes(folded), "text")]
                lines += [f".. workbench-details:: Notes ({len(folded)})", "", *rst.indent(notes)]
        return rst.parse(self, lines)


#: a function's own docstring unit at least this long is folded under its first words
FOLD_NOTE_CHARS = 150


def notes_summary(units) -> str:
    return "; ".join(" ".join(text.split()[:3]) + " …" for _, text in units)


def own_notes_split(doc: str, shared) -> tuple[list, list]:
    """A function's docstring units without the shared notes: ``(shown, folded)``, the long ones folded
    and hard-wrapped prose joined into one line per unit (the page wraps it to its width)."""
    common = {text for _, units in shared for _, text in units}
    units = [(n, reflowed(text)) for n, text in doc_units(doc) if text not in common]
    return ([u for u in units if len(u[1]) < FOLD_NOTE_CHARS], [u for u in units if len(u[1]) >= FOLD_NOTE_CHARS])


#: a docstring line that the next line's first word would have pushed past this width was wrapped by hand
WRAP_WIDTH = 80


def reflowed(unit: str) -> str:
    """A unit of hard-wrapped prose on one line (the page wraps it to its width); a unit laid out by
    hand (a line that ends short, an indented line, columns aligned with spaces) as it is."""
    lines = unit.splitlines()
    wrapped = all(len(line) + 1 + len(nxt.split()[0] if nxt.split() else "") > WRAP_WIDTH and "   " not in line
                  and not nxt[:1].isspace() for line, nxt in zip(lines, lines[1:], strict=False))
    return " ".join(line.strip() for line in lines) if len(lines) > 1 and wrapped else unit


def function_source(signature: str, units) -> str:
    """The signature with the docstring units under it, as the function reads in its module."""
    if not units:
        return signature
    body = [units[0][1], "", *(text for _, text in units[1:])] if len(units) > 1 else [units[0][1]]
    body = "\n".join(body).splitlines()   # a blank line after the summary only: a unit wrapped by the page
    # starts at the left edge, each unit indented
    return "\n".join([signature + ":", '    """' + body[0], *("    " + line if line else "" for line in body[1:]),
                      '    """'])


def doc_units(doc: str) -> list[tuple[int, str]]:
    """A docstring as ``(paragraph, unit)`` pairs: its paragraphs, each cut where a line that ends a
    sentence is followed by one that starts a new one (``Shapes: ….`` then ``Arguments after * …``)."""
    units = []
    for number, para in enumerate(p.strip("\n") for p in doc.split("\n\n") if p.strip()):
        current: list[str] = []
        for line in para.splitlines():
            if current and current[-1].rstrip().endswith(".") and line.lstrip()[:1].isupper():
                units.append((number, "\n".join(current)))
                current = []
            current.append(line)
        units.append((number, "\n".join(current)))
    return units


def joined_notes(units) -> str:
    """Units back into text: one paragraph's units on consecutive lines, paragraphs apart."""
    out, last = [], None
    for number, text in units:
        out.append(("\n" if last == number else "\n\n") + text if out else text)
        last = number
    return "".join(out)


#: a docstring unit that several functions repeat is shown once when it is at least this long (a short
#: note, such as one function's shapes, stays with the function)
SHARED_MIN_CHARS = 200


def shared_notes(docs: dict) -> list[tuple[tuple, list]]:
    """The long docstring units that two or more functions repeat word for word, grouped by the
    functions that repeat them: ``[(names, [(paragraph, unit), …]), …]`` (each group shown once)."""
    units = {name: doc_units(doc) for name, doc in docs.items()}
    holders: dict = {}
    for name, found in units.items():
        for _, text in found:
            if len(text) >= SHARED_MIN_CHARS and name not in holders.setdefault(text, []):
                holders[text].append(name)
    groups: dict = {}
    for name, found in units.items():
        for number, text in found:
            names = tuple(holders.get(text, ()))
            if len(names) >= 2 and names[0] == name:
                groups.setdefault(names, []).append((number, text))
    return list(groups.items())


def own_notes(doc: str, shared) -> str:
    """A docstring without the units shown once as shared notes."""
    common = {text for _, units in shared for _, text in units}
    return joined_notes([(n, text) for n, text in doc_units(doc) if text not in common])


class EmittedListingDirective(SphinxDirective):
    """``.. emitted-listing:: MODULE`` — the whole emitted JAX module."""

    reads_catalogue = True  # prints from the catalogue: objects.read_order reads its page last

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
                          + (f" (random matrices at sizes {sizes_text(dims)})" if dims else "") + ":"), ""]
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

    reads_catalogue = True  # prints from the catalogue: objects.read_order reads its page last

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
    return [entry for entry in cat.rules.values() if not has_page(env.srcdir, folder, entry.name)]


class OtherRulesDirective(SphinxDirective):
    """``.. other-rules::`` — every rule module without its own page under ``rules/``: its
    derivations and emitted functions, so a new rule module is documented before anyone writes a page."""

    reads_catalogue = True  # prints from the catalogue: objects.read_order reads its page last

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
