"""How the pages write the engine's symbols: display names, side conditions as math, the glossary.

The engine names a symbol for code (``W_Qbar``, ``G_Mheads``, ``Z_o_side``); a reader should see
the paper's notation (:math:`\\bar W_Q`, :math:`\\tilde G_M`, :math:`Z_O`). :func:`tidy_latex` rewrites the
printer's LaTeX on the way to the page, :func:`condition_rst` turns a side condition (prose with
SymPy-style formulas such as ``G_K = G_M.T*W_Q`` or ``(W_KᵀW_K)^1/2``) into prose with inline
math, and :data:`SYMBOLS` says what each symbol means, for the "Symbols on this page" legend of a
rule page and for the notation page (``.. symbol-table::``).
"""

from __future__ import annotations

import re

from sphinx.util.docutils import SphinxDirective

from . import rst

#: symbol (as the LaTeX printer writes it, without subscript braces) → (LaTeX, meaning)
SYMBOLS: dict[str, tuple[str, str]] = {
    "W_Q": (r"W_Q", "query weights of one head, d × d_h (stored layout: all heads side by side)"),
    "W_K": (r"W_K", "key weights of one head, d × d_h"),
    "W_V": (r"W_V", "value weights of one head, d_h × d"),
    "W_O": (r"W_O", "output weights of one head, d × d_h"),
    "M": (r"M", "the QK product W_Q W_Kᵀ that the loss sees"),
    "G_M": (r"G_M", "gradient of the loss with respect to the product M (never formed in practice)"),
    "G_Q": (r"G_Q", "query factor gradient, G_M W_K (chain rule)"),
    "G_K": (r"G_K", "key factor gradient, G_Mᵀ W_Q"),
    "G_V": (r"G_V", "value factor gradient, W_Oᵀ G_M"),
    "G_O": (r"G_O", "output factor gradient"),
    "C_Q": (r"C_Q", "Gram root (W_QᵀW_Q + λI)^{1/2} of the query factor"),
    "C_K": (r"C_K", "Gram root (W_KᵀW_K + λI)^{1/2} of the key factor"),
    "C_O": (r"C_O", "Gram root of the output factor"),
    "U_Q": (r"U_Q", "polar factor W_Q C_Q⁻¹ (orthonormal columns)"),
    "U_K": (r"U_K", "polar factor W_K C_K⁻¹ (orthonormal columns)"),
    "U_O": (r"U_O", "polar factor W_O C_O⁻¹"),
    "Qbar": (r"\bar{W}_{Q}", "the query heads of one GQA group stacked row-wise, G·d × d_h"),
    "Obar": (r"\bar{W}_{O}", "the output heads of one GQA group stacked row-wise, G·d × d_h"),
    "Mbar": (r"\bar{G}_{M}", "the group's QK product gradients stacked row-wise"),
    "MObar": (r"\bar{G}_{M}^{\mathrm{OV}}", "the group's OV product gradients stacked row-wise"),
    "Mheads": (r"\tilde{G}_{M}", "the product gradients of all heads side by side"),
    "P_V": (r"P_V", "block-diagonal matrix of the transposed value heads: the O side's partner"),
    "Z": (r"Z", "the whitened variable of a change of variables (Z_Q = ΔW_Q C_K, …)"),
    "epsilon": (r"\epsilon", "step budget: the operator norm allowed for the change of the product"),
    "lambda": (r"\lambda", "damping added to every Gram matrix (W^T W + λI)"),
    "G": (r"G", "group size in grouped-query attention: query heads per key/value head"),
}

#: symbols that stand for a family of subscripted names (the Z of Z_Q and Z_K)
SUBSCRIPTED_FAMILIES = frozenset({"Z"})

_LATEX_SUB = re.compile(r"(\\?[A-Za-z]+)_\{([A-Za-z0-9_]+)\}")


def _display(base: str, sub: str) -> str:
    """The LaTeX of the symbol ``base_sub`` as a reader should see it."""
    m = re.fullmatch(r"([A-Z]*)bar", sub)
    if m and m.group(1):
        if sub == "MObar":
            return SYMBOLS["MObar"][0].replace("G", base, 1)
        return rf"\bar{{{base}}}_{{{m.group(1)}}}"
    if sub == "Mheads":
        return rf"\tilde{{{base}}}_{{M}}"
    if sub == "tilde":
        return rf"\tilde{{{base}}}"
    m = re.fullmatch(r"([a-z])_side", sub)
    if m:
        return rf"{base}_{{{m.group(1).upper()}}}"
    m = re.fullmatch(r"([A-Z])(\d)t", sub)                      # W_V1t: the transposed block of head 1
    if m:
        return rf"{base}_{{{m.group(1)},{m.group(2)}}}^{{\top}}"
    if "_" in sub:                                              # U_P_V → U_{P_{V}}
        head, _, rest = sub.partition("_")
        return rf"{base}_{{{_display(head, rest) if rest else head}}}"
    return rf"{base}_{{{sub}}}"


def tidy_latex(tex: str) -> str:
    """The printer's LaTeX with internal names replaced and ``+ -x`` written ``- x``."""
    tex = _LATEX_SUB.sub(lambda m: _display(m.group(1), m.group(2)), tex)
    return re.sub(r"\+\s*-\s*", "- ", tex)


# ---- side conditions and statements: prose with inline math ------------------------------

_WORD_MATH = {"epsilon": r"\epsilon", "lambda": r"\lambda", "Sigma": r"\Sigma", "sigma": r"\sigma",
              "msign": r"\operatorname{msign}", "blockdiag": r"\operatorname{blockdiag}",
              "diag": r"\operatorname{diag}", "tr": r"\operatorname{tr}", "max": r"\max", "min": r"\min"}
_CHAR_MATH = {"ᵀ": r"^{\top}", "⁻¹": r"^{-1}", "²": r"^{2}", "≤": r"\le ", "≥": r"\ge ", "⟺": r"\iff ", "…": r"\dots ",
              "‖": r"\|", "⟨": r"\langle ", "⟩": r"\rangle ", "×": r"\times ", "·": r"\cdot ", "σ": r"\sigma ",
              "Σ": r"\Sigma ", "λ": r"\lambda ", "ε": r"\epsilon ", "β": r"\beta ", "−": "-", "|": r"\,|\,",
              "⁻": "^{-}", "∈": r"\in ", "→": r"\to ", "Δ": r"\Delta ", "μ": r"\mu "}
_TOKEN = re.compile(r"""
    (?P<id>[A-Za-z]\u0304?[A-Za-z0-9]*(?:_(?:\([^()\s]+\)|[A-Za-z0-9λεμσβ]+))*(?:'(?![A-Za-z])|'s\b)?)
  | (?P<num>\d+(?:\.\d+)?)
  | (?P<pow>\*\*\(?-?[\w/+]+\)?|\^\{[^{}]+\}|\^\(?-?[\w/+]+\)?)
  | (?P<tr>\.T\b)
  | (?P<sub>_[A-Za-z0-9]+|_\{[^{}]+\})
  | (?P<op>⁻¹|[=+\-*/()\[\],ᵀ²≤≥⟺…‖⟨⟩×·σΣλεβ−|<>∈→Δμ])
  | (?P<space>\s+)
  | (?P<other>.)
""", re.VERBOSE)
_PROSE_SINGLE = {"a", "A"}


def _is_math_id(word: str) -> bool:
    if word.endswith("'s"):  # a possessive: prose
        return False
    word = word.removesuffix("'")  # a prime (W_Q')
    return "_" in word or "\u0304" in word or word in _WORD_MATH or (len(word) == 1 and word not in _PROSE_SINGLE) \
        or bool(re.fullmatch(r"[A-Z][a-z]?\d*", word) and word not in ("Lemma", "I'm"))


def _id_latex(word: str) -> str:
    if word.endswith("'"):  # a prime: W_Q' → W_{Q}'
        return _id_latex(word[:-1]) + "'"
    if word[1:2] == "\u0304":  # W̄ (a combining macron): the stacked group's matrix
        return rf"\bar{{{word[0]}}}" + _id_latex(word[0] + word[2:])[1:]
    if word in _WORD_MATH:
        return _WORD_MATH[word]
    if word == "dW_Q" or word.startswith("dW_"):
        return r"\Delta " + _id_latex(word[1:])
    base, _, sub = word.partition("_")
    if not sub:
        return word
    if base in _WORD_MATH:  # max_h, msign_…: the operator with its subscript
        return _WORD_MATH[base] + "_{" + sub.replace("(", "").replace(")", "") + "}"
    sub = sub.replace("(", "").replace(")", "")
    if re.fullmatch(r"[A-Za-z0-9_]+", sub):
        return _display(base, sub)
    return rf"{base}_{{{''.join(_CHAR_MATH.get(ch, ch) for ch in sub).strip()}}}"  # H_λ


def _pow_latex(text: str) -> str:
    body = text[2:] if text.startswith("**") else text[1:]
    if body.startswith("{") or body.startswith("("):
        body = body[1:-1]
    return r"^{\top}" if body == "T" else "^{" + body + "}"


def _adjoint_star(tokens, i) -> bool:
    """Whether the ``*`` at ``i`` marks an adjoint (``T*(H)``, ``TT*``): right after a name, before ``(``,
    ``)`` or the end, never between two factors (``a * b``)."""
    after = tokens[i + 1][1] if i + 1 < len(tokens) else ""
    return i > 0 and tokens[i - 1][0] == "id" and (after in ("", "(", ")", "⁻", "ᵀ", "⁻¹") or after.isspace())


def _span_latex(tokens) -> str:
    out = []
    for i, (kind, value) in enumerate(tokens):
        if value == "*" and _adjoint_star(tokens, i):
            out.append("^{*}")
        elif kind == "id":
            out.append(_id_latex(value) + (" " if value in _WORD_MATH or value[-1:].isalpha() else ""))
        elif kind == "pow":
            out.append(_pow_latex(value))
        elif kind == "tr":
            out.append(r"^{\top}")
        elif kind == "sub" and value.startswith("_{"):
            out.append("_{" + "".join(_CHAR_MATH.get(ch, ch) for ch in value[2:-1]).strip() + "}")
        elif kind == "sub":
            body = value[1:]
            out.append(rf"_{{\mathrm{{{body}}}}}" if len(body) > 1 else f"_{{{body}}}")
        elif kind == "space" or value == "*":
            out.append(" ")
        elif value in _CHAR_MATH:
            out.append(_CHAR_MATH[value])
        else:
            out.append(value)
    tex = "".join(out)
    tex = re.sub(r"\^\{\\top\}\^\{-1\}|\^\{-1\}\^\{\\top\}", r"^{-\\top}", tex)
    while re.search(r"\^\{[^{}]*\}\s*\^\{", tex):  # S*⁻ᵀ: one superscript, never a double one
        tex = re.sub(r"\^\{([^{}]*)\}\s*\^\{([^{}]*)\}", r"^{\1\2}", tex)
    return " ".join(tex.split())


def _split_unbalanced(span):
    """Split a run of formula tokens at unmatched brackets and at commas outside brackets.

    Returns ``(kind, tokens)`` pieces: ``"span"`` for a candidate formula, ``"text"`` for a separator.
    """
    closers = {")": "(", "]": "[", "⟩": "⟨"}
    stack, unmatched = [], set()
    for i, (_, v) in enumerate(span):
        if v in "([⟨":
            stack.append(i)
        elif v in closers:
            if stack and span[stack[-1]][1] == closers[v]:
                stack.pop()
            else:
                unmatched.add(i)
    unmatched |= set(stack)
    pieces, current, depth = [], [], 0
    for i, (k, v) in enumerate(span):
        if i in unmatched or (v in ",;" and depth == 0):
            pieces += [("span", current), ("text", [(k, v)])]
            current = []
            continue
        depth += v in "([⟨"
        depth -= v in ")]⟩"
        current.append((k, v))
    return pieces + [("span", current)]


def _strip(span):
    """Split leading and trailing spaces off a span: ``(lead, core, tail)``."""
    start, end = 0, len(span)
    while start < end and span[start][0] == "space":
        start += 1
    while end > start and span[end - 1][0] == "space":
        end -= 1
    return span[:start], span[start:end], span[end:]


def _mathy(span) -> bool:
    ids = [v for k, v in span if k == "id"]
    return bool(ids) or any(k in ("pow", "tr") or v in "=≤≥<>" for k, v in span)


def condition_rst(text: str) -> str:
    """A side condition or statement as reST: prose escaped, every formula as inline math."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(" ".join(str(text).split()))]
    pieces, span = [], []

    def flush():
        nonlocal span
        for kind, piece in _split_unbalanced(span):
            lead, core, tail = _strip(piece)
            if kind == "span" and core and _mathy(core):
                pieces.extend([("text", "".join(v for _, v in lead)), ("math", _span_latex(core)),
                               ("text", "".join(v for _, v in tail))])
            else:
                pieces.append(("text", "".join(v for _, v in piece)))
        span = []

    for kind, value in tokens:
        prose_word = kind == "id" and not _is_math_id(value)
        if prose_word or kind == "other" and value not in _CHAR_MATH or value in ".;:" and kind != "tr":
            flush()
            pieces.append(("text", value))
        else:
            span.append((kind, value))
    flush()
    out = []
    for kind, value in pieces:
        if kind == "math":
            out.append(("math", value))
        elif value:
            if out and out[-1][0] == "text":
                out[-1] = ("text", out[-1][1] + value)
            else:
                out.append(("text", value))
    parts = []
    for i, (kind, value) in enumerate(out):
        if kind == "math":
            before = "" if i == 0 or out[i - 1][1][-1:] in " (" else "\\ "
            after = "" if i == len(out) - 1 or out[i + 1][1][:1] in " ),.;:" else "\\ "
            parts.append(f"{before}{rst.math(value)}{after}")
        else:
            parts.append(rst.text_keep_spaces(value))
    return "".join(parts).strip()


# ---- directives -----------------------------------------------------------------------------


def symbols_in(latex_texts) -> list[str]:
    """Keys of :data:`SYMBOLS` whose display form appears in any of ``latex_texts``."""
    joined = " ".join(latex_texts).replace("{", "").replace("}", "")
    found = []
    for key, (tex, _) in SYMBOLS.items():
        plain = tex.replace("{", "").replace("}", "")
        # a whole symbol: not the tail of a longer name or a subscript (the M of G_M), nor its head (the G of
        # G_M); Z stands for its whole family (Z_Q, Z_K, ...)
        before = r"(?<![A-Za-z_\\])" if plain[0].isalpha() else ""
        after = r"(?![A-Za-z])" if key in SUBSCRIPTED_FAMILIES else r"(?![A-Za-z_])"
        if re.search(before + re.escape(plain) + after, joined):
            found.append(key)
    return found


def symbol_lines(keys) -> list[str]:
    lines = []
    for key in keys:
        tex, meaning = SYMBOLS[key]
        lines.append(f"* {rst.math(tex)} — {condition_rst(meaning)}")
    return lines + [""] if lines else []


class SymbolTableDirective(SphinxDirective):
    """``.. symbol-table::`` — every symbol the pages display, with its meaning."""

    has_content = False

    def run(self):
        return rst.parse(self, symbol_lines(SYMBOLS))


def docstring_rst(text: str) -> str:
    """Docstring prose as reST: ````code```` kept as inline code, everything else escaped."""
    parts = re.split(r"``(.+?)``", " ".join(str(text).split()))
    return "".join(rst.literal(p) if i % 2 else rst.text_keep_spaces(p) for i, p in enumerate(parts)).strip()
