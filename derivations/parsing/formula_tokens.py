"""Tokens, syntax-tree nodes and errors of the formula language (:mod:`derivations.parsing.formula_syntax`):
one error type that points at the column, with a caret, on one line."""

from __future__ import annotations

import re
from dataclasses import dataclass

from derivations.parsing.notation import UNICODE

MAX_LENGTH = 20_000  # characters
MAX_DEPTH = 60  # nested brackets, powers and unary signs
MAX_TOKENS = 5_000
_WINDOW = 30  # characters shown on either side of an error's column


def pointer(text: str, column: int) -> str:
    """The text around ``column`` (1-based) on one line, with a caret ``‸`` at the column."""
    at = max(0, min(column - 1, len(text)))
    start, end = max(0, at - _WINDOW), min(len(text), at + _WINDOW)
    shown = ("…" if start else "") + text[start:at] + "‸" + text[at:end] + ("…" if end < len(text) else "")
    return " ".join(shown.split()) if "\n" in shown or "\t" in shown else shown


class FormulaError(ValueError):
    """A formula that cannot be read or built; ``column`` is 1-based (None when not positional). With the
    formula's ``text`` the message shows it around the column with a caret (:func:`pointer`), and
    :attr:`caret` is the two-line form (the text, and a caret under the column)."""

    def __init__(self, message: str, column: int | None = None, text: str | None = None):
        self.column, self.message, self.text = column, message, text
        out = f"column {column}: {message}" if column is not None else message
        if column is not None and text:
            out += f" (at ‸ in {pointer(text, column)!r})"
        super().__init__(out)

    def with_text(self, text: str | None) -> FormulaError:
        """The same error pointing into ``text`` (itself when it already has a text or no column)."""
        if self.text is not None or self.column is None or not text:
            return self
        return FormulaError(self.message, self.column, text)

    @property
    def caret(self) -> str:
        """The formula's line and a caret under the column (empty without a text)."""
        if not self.text or self.column is None:
            return ""
        line_start = self.text.rfind("\n", 0, self.column - 1) + 1
        line_end = self.text.find("\n", line_start)
        line = self.text[line_start: None if line_end < 0 else line_end]
        return f"{line}\n{' ' * (self.column - 1 - line_start)}^"


# ---- tokens -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    kind: str  # num name op latex end
    text: str
    col: int


_MARKS = "\u0302-\u0305"  # combining hat, tilde, macron, overline (C̄_Q)
_TOKEN = re.compile(rf"""
    (?P<ws>\s+|\\[,;:! ]|\\quad|\\qquad)
  | (?P<num>(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z][A-Za-z0-9{_MARKS}]*
             (?:_(?:[A-Za-z0-9][A-Za-z0-9{_MARKS}]*|\{{\s*[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*(?:\s*,\s*[A-Za-z0-9]+)*\s*\}}))*)
  | (?P<latex>\\[A-Za-z]+|\\\||\\\{{|\\\}})
  | (?P<op>\*\*|\|\||\.T\b|<=|>=|:=|[-+*/@^(){{}}\[\],<>|_.'=;])
""", re.VERBOSE)


_SUPERSCRIPT_DIGITS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_SUPERSCRIPT = re.compile("⁻?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")


def tokenize(text: str) -> list[Token]:
    """Tokens of ``text`` (columns are positions in the original text, 1-based)."""
    if not isinstance(text, str):
        raise FormulaError(f"a formula is text, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise FormulaError(f"formula too long ({len(text)} characters; the limit is {MAX_LENGTH})")
    out, pos = [], 0
    while pos < len(text):
        ch = text[pos]
        if ch == "Σ":  # a sum (Σ_h …) or the diagonal matrix of an SVD: the grammar decides
            out.append(Token("op", "Σ", pos + 1))
            pos += 1
            continue
        sup = _SUPERSCRIPT.match(text, pos)
        if sup is not None:  # Σ³, X⁻², C⁻¹ (⁻ᵀ is a table entry): a power in superscript digits
            out.extend(_tokens_of(f"^({sup.group().translate(_SUPERSCRIPT_DIGITS)})", pos + 1))
            pos = sup.end()
            continue
        for key, rep in UNICODE.items():
            if text.startswith(key, pos):
                out.extend(_tokens_of(rep, pos + 1))
                pos += len(key)
                break
        else:
            m = _TOKEN.match(text, pos)
            if m is None:
                raise FormulaError(f"unexpected character {ch!r}", pos + 1, text)
            if m.group() == "\\mid":  # the separator of a block row, [A \mid B]
                out.append(Token("op", "|", pos + 1))
            elif m.group() == "\\middle" and text.startswith("|", m.end()):  # [A \middle| B], as LaTeX prints it
                out.append(Token("op", "|", pos + 1))
                pos = m.end() + 1
                continue
            elif m.lastgroup != "ws":
                out.append(Token(m.lastgroup, m.group(), pos + 1))
            pos = m.end()
        if len(out) > MAX_TOKENS:
            raise FormulaError(f"formula too long (more than {MAX_TOKENS} tokens)")
    out.append(Token("end", "", len(text) + 1))
    return out


def _tokens_of(rep: str, col: int) -> list[Token]:
    return [Token(t.kind, t.text, col) for t in tokenize(rep)[:-1]]


# ---- syntax tree ----------------------------------------------------------------------------
@dataclass(eq=False)
class Node:
    """A node of the syntax tree. ``kind``: num name neg add mul pow T call inner norm hstack kron sv
    sigma_part sum def let root (``C_{…}``/``U_{…}`` of an expression, ``value`` ``"C"`` or ``"U"``);
    ``source`` is the formula's text on the root (for error pointers)."""

    kind: str
    col: int
    args: tuple = ()
    value: object = None
    source: str | None = None


__all__ = ["MAX_DEPTH", "FormulaError", "Node", "Token", "pointer", "tokenize"]
