"""LaTeX printer of expressions and derivations (``\\top`` for transposes, ``\\Delta W`` names)."""

from __future__ import annotations

from derivations.lemmas.base import markdown_text
from derivations.vocabulary.latex_notation import WorkbenchLatexPrinter, latex  # noqa: F401 (the printer's home)


def state_latex(state) -> str:
    """A derivation's state as LaTeX: a problem (``objective``, ``constraint``, ``budget``), a solution
    (``argmin``, ``value``) or a claim (``expr``). Read by its fields, so that the engine's own notebook
    reprs (:mod:`derivations.engine.derivation`, which this module must not import) print with it."""
    if hasattr(state, "objective"):
        return (rf"\min_{{{latex(state.variable)}}}\ {latex(state.objective)}"
                rf"\quad \text{{s.t.}}\quad {latex(state.constraint)} \le {latex(state.budget)}")
    if hasattr(state, "argmin"):
        return rf"{latex(state.variable)}^{{\star}} = {latex(state.argmin)},\quad \text{{value }} {latex(state.value)}"
    if hasattr(state, "expr"):
        return latex(state.expr)
    raise TypeError(f"unknown state {state!r}")


#: Unicode that the derivation's plain-text notes use, as LaTeX (so pdflatex accepts the document)
_UNICODE = {"ε": r"$\varepsilon$", "λ": r"$\lambda$", "Δ": r"$\Delta$", "ᵀ": r"$^{\top}$", "⁻¹": r"$^{-1}$",
            "≤": r"$\le$", "≥": r"$\ge$", "‖": r"$\|$", "⟨": r"$\langle$", "⟩": r"$\rangle$", "²": r"$^2$",
            "Σ": r"$\Sigma$", "β": r"$\beta$", "−": "-", "∈": r"$\in$", "×": r"$\times$", "·": r"$\cdot$",
            "∘": r"$\circ$", "̄": "", "⊥": r"$\perp$", "…": r"\dots{}"}


def _escape(text: str) -> str:
    text = text.replace("_", r"\_").replace("&", r"\&").replace("%", r"\%").replace("#", r"\#")
    for char, tex in _UNICODE.items():
        text = text.replace(char, tex)
    return text


def derivation_latex(der) -> str:
    """A ``\\subsection`` with one display per step, its lemma, side conditions and check."""
    out = [rf"\subsection*{{{_escape(der.title)}}}", rf"\texttt{{{_escape(der.name)}}}: "
           rf"{_escape(der.statement)}", r"\begin{align*}", rf"&{state_latex(der.start)} \\"]
    for s in der.steps:
        tag = rf"\text{{Lemma {s.lemma.number}}}"
        out.append(rf"\Rightarrow\ &{state_latex(s.after)} && {tag} \\")
    out.append(r"\end{align*}")
    out.append(r"\begin{enumerate}")
    for s in der.steps:
        conds = "; ".join(_escape(c) for c in s.conditions) or "none"
        chk = s.check
        evidence = "" if chk is None else (f" Checked: float64 error {chk.float64_error:.1e}"
                                           + ("" if chk.mpmath_error is None else
                                              f", mpmath error {chk.mpmath_error:.1e}")
                                           + f", symbolic: {chk.symbolic}.")
        note = f" ({_escape(s.note)})" if s.note else ""
        out.append(rf"\item Lemma {s.lemma.number}, {_escape(s.lemma.title)}{note}. "
                   rf"Side conditions: {conds}.{evidence}")
    out.append(r"\end{enumerate}")
    return "\n".join(out) + "\n"


def lemmas_latex(lemmas) -> str:
    out = [r"\subsection*{Lemmas used}", r"\begin{description}"]
    for lem in lemmas:
        conds = ", ".join(rf"${c}$" for c in lem.condition_latex)
        out.append(rf"\item[Lemma {lem.number}] {_escape(lem.title)}: ${lem.statement_latex}$"
                   + (f" (if {conds})" if conds else ""))
    out.append(r"\end{description}")
    return "\n".join(out) + "\n"


def document_latex(title: str, derivations, lemmas) -> str:
    body = "\n".join(derivation_latex(d) for d in derivations)
    return (r"\documentclass{article}" "\n" r"\usepackage{amsmath,amssymb}" "\n"
            rf"\title{{{_escape(title)}}}" "\n" r"\begin{document}" "\n" r"\maketitle" "\n"
            + body + "\n" + lemmas_latex(lemmas) + r"\end{document}" "\n")


def latex_text(text: str) -> str:
    """Text for ``\\text{…}``: LaTeX's special characters escaped."""
    return "".join("\\" + c if c in "_&%#$" else c for c in str(text))


def check_text(check) -> str:
    """A step's recorded check in one table cell (float64 residual, mpmath when run, symbolic verdict)."""
    if check is None:
        return "not checked"
    parts = [f"float64 {check.float64_error:.0e} ({check.trials} instances)"]
    parts.append("mpmath not run" if check.mpmath_error is None else f"mpmath {check.mpmath_error:.0e}")
    if check.symbolic:
        parts.append(f"symbolic: {markdown_text(check.symbolic)}")
    if getattr(check, "instance", ""):
        parts.append(f"kernel: {markdown_text(check.instance)}")  # the trusted kernel's verdict
    if check.failure:
        parts.append(f"**failed**: {markdown_text(check.failure)}")
    return " · ".join(parts)
