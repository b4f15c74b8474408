"""Plain-text printer of derivations: the steps, the lemma used at each, side conditions, checks."""

from __future__ import annotations

from sympy import sstr

from derivations.engine.derivation import Claim, Derivation, Problem, Solution


def state_text(state) -> list[str]:
    """A problem, a solution or an expression as indented lines."""
    if isinstance(state, Problem):
        return [f"minimize over {state.variable}:  {sstr(state.objective)}",
                f"subject to:  {sstr(state.constraint)} <= {sstr(state.budget)}"]
    if isinstance(state, Solution):
        return [f"{state.variable}* = {sstr(state.argmin)}", f"optimal value = {sstr(state.value)}"]
    if isinstance(state, Claim):
        return [f"= {sstr(state.expr)}"]
    raise TypeError(f"unknown state {state!r}")


def check_text(check) -> str:
    if check is None:
        return "not checked"
    mp = "" if check.mpmath_error is None else f", mpmath50 {check.mpmath_error:.1e}"
    return f"float64 {check.float64_error:.1e} over {check.trials} instances{mp}; symbolic: {check.symbolic}"


def derivation_text(der: Derivation) -> str:
    """The whole derivation, step by step."""
    out = [der.title, "=" * len(der.title), f"[{der.name}, fingerprint {der.fingerprint()}]"]
    if der.statement:
        out.append(der.statement)
    out.append("")
    out.append("Start:")
    out += ["    " + line for line in state_text(der.start)]
    for s in der.steps:
        out.append("")
        head = f"Step {s.index}. Lemma {s.lemma.number} ({s.lemma.title})"
        if s.kind == "restrict":
            head += " [restriction: a stronger constraint]"
        out.append(head + (f": {s.note}" if s.note else ""))
        out += ["    " + line for line in state_text(s.after)]
        for c in s.conditions:
            out.append(f"    side condition: {c}")
        out.append(f"    check: {check_text(s.check)}")
    out.append("")
    out.append("Result:")
    out += ["    " + line for line in state_text(der.result)]
    return "\n".join(out) + "\n"


def lemma_text(lemmas) -> str:
    out = ["Lemmas used", "-----------"]
    for lem in lemmas:
        out.append(f"Lemma {lem.number} ({lem.title}): {lem.statement_latex}")
        for c in lem.condition_latex:
            out.append(f"    if {c}")
    return "\n".join(out) + "\n"
