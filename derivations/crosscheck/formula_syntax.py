"""A formula language for matrix expressions, read without evaluating any Python: tokens, grammar and
syntax tree (:func:`parse_tree`); :mod:`derivations.crosscheck.formula` builds the expression from the tree.

The parser is a hand-written recursive descent over a closed grammar; the tree it builds names
the project's own vocabulary (:mod:`derivations.engine.vocabulary`), and nothing ever calls ``eval``,
``sympify`` or ``parse_expr`` on user text. It reads

* what ``--emit text`` prints: ``(-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1``, ``W_Q.T``,
  ``(S**(-1)).T``, ``<A, B>``, ``||X||_op``, ``||X||_*``, ``[A | B]``, ``blockdiag(A, B)``;
* the usual notebook spellings: ``@`` and juxtaposition for products, ``X.T``, ``X^T``, ``X^-1``,
  ``inv(X)``, ``sqrtm(X)``, ``msign(X)``, ``tr(X)``, ``eps`` for ``epsilon``, ``I`` for the
  identity of whatever size its neighbours need, and Unicode (``ε``, ``λ``, ``ᵀ``, ``⁻¹``,
  ``⟨A, B⟩``, ``‖X‖_op``, ``−``);
* a LaTeX subset: ``\\operatorname{msign}``, ``^{\\top}``, ``^{-1}``, ``^{1/2}``, ``\\frac``,
  ``\\varepsilon``, ``\\lambda``, ``\\langle A, B\\rangle``, ``\\|X\\|_{op}``, ``\\left(``/``\\right)``,
  ``\\Delta W_Q`` (read as ``dW_Q``), subscripts in braces (``W_{K}``).

Errors are :class:`FormulaError` with the column (1-based) where the problem is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sympy import Rational

MAX_LENGTH = 20_000  # characters
MAX_DEPTH = 60  # nested brackets, powers and unary signs
MAX_TOKENS = 5_000


class FormulaError(ValueError):
    """A formula that cannot be read or built; ``column`` is 1-based (None when not positional)."""

    def __init__(self, message: str, column: int | None = None):
        self.column = column
        super().__init__(f"column {column}: {message}" if column is not None else message)


# ---- tokens -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    kind: str  # num name op latex norm end
    text: str
    col: int


_UNICODE = {"ε": " epsilon ", "ϵ": " epsilon ", "λ": " lambda ", "η": " eta ", "α": " alpha ", "β": " beta ",
            "−": "-", "·": "*", "⋅": "*", "×": "*", "ᵀ": ".T", "⊤": "T", "⁻¹": "^-1", "⁻ᵀ": "^(-T)", "⟨": "<", "⟩": ">",
            "‖": "||", "≤": "<=", "∗": "*", "Δ": "\\Delta "}
_TOKEN = re.compile(r"""
    (?P<ws>\s+|\\[,;:! ]|\\quad|\\qquad)
  | (?P<num>\d+(?:\.\d+)?)
  | (?P<name>[A-Za-z][A-Za-z0-9]*(?:_(?:[A-Za-z0-9]+|\{[A-Za-z0-9]+\}))*)
  | (?P<latex>\\[A-Za-z]+|\\\||\\\{|\\\})
  | (?P<op>\*\*|\|\||\.T\b|<=|[-+*/@^(){}\[\],<>|_.'])
""", re.VERBOSE)
_GREEK = {"varepsilon": "epsilon", "epsilon": "epsilon", "lambda": "lambda", "eta": "eta", "alpha": "alpha",
          "beta": "beta", "gamma": "gamma", "mu": "mu", "sigma": "sigma", "tau": "tau", "rho": "rho",
          "delta": "delta", "theta": "theta", "kappa": "kappa", "nu": "nu"}
_DROP = {"left", "right", "big", "Big", "bigl", "bigr", "Bigl", "Bigr", "bigg", "Bigg", "biggl", "biggr",
         "displaystyle", "mathbf", "boldsymbol", "bm"}


def tokenize(text: str) -> list[Token]:
    """Tokens of ``text`` (columns are positions in the original text, 1-based)."""
    if not isinstance(text, str):
        raise FormulaError(f"a formula is text, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise FormulaError(f"formula too long ({len(text)} characters; the limit is {MAX_LENGTH})")
    out, pos = [], 0
    while pos < len(text):
        ch = text[pos]
        for key, rep in _UNICODE.items():
            if text.startswith(key, pos):
                out.extend(_tokens_of(rep, pos + 1))
                pos += len(key)
                break
        else:
            m = _TOKEN.match(text, pos)
            if m is None:
                raise FormulaError(f"unexpected character {ch!r}", pos + 1)
            if m.lastgroup != "ws":
                out.append(Token(m.lastgroup, m.group(), pos + 1))
            pos = m.end()
        if len(out) > MAX_TOKENS:
            raise FormulaError(f"formula too long (more than {MAX_TOKENS} tokens)")
    out.append(Token("end", "", len(text) + 1))
    return out


def _tokens_of(rep: str, col: int) -> list[Token]:
    return [Token(t.kind, t.text, col) for t in tokenize(rep)[:-1]]


# ---- syntax tree ----------------------------------------------------------------------------
@dataclass
class Node:
    kind: str  # num name neg add mul pow T call inner norm hstack eye
    col: int
    args: tuple = ()
    value: object = None


class _Parser:
    def __init__(self, tokens):
        self.toks = tokens
        self.i = 0
        self.depth = 0
        self.open_norms = 0  # inside ||…||, a norm bar closes instead of opening

    # helpers
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def next(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def at(self, *texts) -> bool:
        t = self.tok
        return t.kind in ("op", "latex", "norm") and t.text in texts

    def expect(self, text, what=""):
        if not self.at(text):
            got = self.tok.text or "end of input"
            raise FormulaError(f"expected {text!r}{what} but found {got!r}", self.tok.col)
        return self.next()

    def enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FormulaError(f"formula nested too deeply (more than {MAX_DEPTH} levels)", self.tok.col)

    def leave(self):
        self.depth -= 1

    def skip_latex_noise(self):
        while self.tok.kind == "latex" and self.tok.text[1:] in _DROP:
            self.next()

    # grammar
    def parse(self) -> Node:
        node = self.sum()
        if self.tok.kind != "end":
            raise FormulaError(f"unexpected {self.tok.text!r}", self.tok.col)
        return node

    def sum(self) -> Node:
        self.enter()
        col = self.tok.col
        terms = []
        sign = 1
        while self.at("+", "-"):
            sign = -sign if self.next().text == "-" else sign
        terms.append((sign, self.term()))
        while self.at("+", "-"):
            sign = 1
            while self.at("+", "-"):
                sign = -sign if self.next().text == "-" else sign
            terms.append((sign, self.term()))
        self.leave()
        if len(terms) == 1 and terms[0][0] == 1:
            return terms[0][1]
        return Node("add", col, tuple(terms))

    def _starts_atom(self) -> bool:
        self.skip_latex_noise()
        t = self.tok
        if t.kind in ("num", "name"):
            return True
        if t.text in ("||", "\\|"):
            return self.open_norms == 0
        if t.kind == "latex":
            return t.text in ("\\frac", "\\tfrac", "\\dfrac", "\\sqrt", "\\langle", "\\operatorname",
                              "\\mathrm", "\\Delta", "\\text") or t.text[1:] in _GREEK
        return t.kind == "op" and t.text in ("(", "[", "<", "{")

    def term(self) -> Node:
        col = self.tok.col
        factors = [("*", self.unary())]
        while True:
            self.skip_latex_noise()
            if self.at("*", "@", "/", "\\cdot", "\\times"):
                op = self.next().text
                factors.append(("/" if op == "/" else "*", self.unary()))
            elif self._starts_atom():  # juxtaposition: G_Q C_K^{-1}
                factors.append(("*", self.unary()))
            else:
                break
        return factors[0][1] if len(factors) == 1 else Node("mul", col, tuple(factors))

    def unary(self) -> Node:
        if self.at("-", "+"):
            self.enter()
            t = self.next()
            inner = self.unary()
            self.leave()
            return Node("neg", t.col, (inner,)) if t.text == "-" else inner
        return self.power()

    def power(self) -> Node:
        base = self.postfix(self.atom())
        if self.at("^", "**"):
            t = self.next()
            self.enter()
            exp = self.exponent(t.text)
            self.leave()
            if exp == "-T":  # the inverse transpose X^{-T} = (X^{-1})^T
                node = Node("T", t.col, (Node("pow", t.col, (base,), Rational(-1)),))
            else:
                node = Node("T", t.col, (base,)) if exp == "T" else Node("pow", t.col, (base,), exp)
            return self.postfix(node)
        return base

    def postfix(self, node: Node) -> Node:
        while True:
            if self.at(".T"):
                node = Node("T", self.next().col, (node,))
            elif self.at("'"):
                raise FormulaError("a prime is ambiguous here; write X.T or X^T for the transpose", self.tok.col)
            else:
                return node

    def exponent(self, op: str):
        """``T``, ``\\top``, ``-T`` (the inverse transpose) or a signed rational (``-1``, ``{1/2}``, ``(-1/4)``,
        ``{\\frac{1}{2}}``)."""
        col = self.tok.col
        closer = None
        if self.at("{", "("):
            closer = "}" if self.next().text == "{" else ")"
        if self.at("-") and self._transpose_at(self.i + 1):
            self.next()
            self._transpose_mark()
            value = "-T"
        elif self._transpose_at(self.i):
            self._transpose_mark()
            value = "T"
        elif self.at("*", "\\star", "\\ast"):
            raise FormulaError("X^* marks an optimum in a chain, not a power; drop it in a formula", col)
        else:
            sign = 1
            while self.at("-", "+"):
                sign = -sign if self.next().text == "-" else sign
            if self.at("\\frac", "\\tfrac", "\\dfrac"):
                self.next()
                num = self._braced_integer()
                den = self._braced_integer()
            else:
                num = self._integer()
                den = 1
                if closer and self.at("/"):
                    self.next()
                    den = self._integer()
            if den == 0:
                raise FormulaError("exponent with a zero denominator", col)
            value = sign * Rational(num, den)
        if closer:
            self.expect(closer, " to close the exponent")
        return value

    def _transpose_at(self, i: int) -> bool:
        """Whether the token at ``i`` is a transpose mark: ``T``, ``\\top``, ``\\intercal``, ``\\mathsf{T}``."""
        t = self.toks[i]
        return t.kind == "name" and t.text == "T" or t.kind == "latex" and t.text in ("\\top", "\\intercal",
                                                                                   "\\mathsf")

    def _transpose_mark(self):
        t = self.next()
        if t.text == "\\mathsf":
            self.expect("{")
            if self.next().text != "T":
                raise FormulaError("expected \\mathsf{T}", t.col)
            self.expect("}")

    def _integer(self) -> int:
        t = self.tok
        if t.kind != "num" or "." in t.text:
            raise FormulaError(f"expected an integer exponent but found {t.text or 'end of input'!r}", t.col)
        if len(t.text) > 6:
            raise FormulaError(f"exponent {t.text} is too large", t.col)
        self.next()
        return int(t.text)

    def _braced_integer(self) -> int:
        self.expect("{")
        n = self._integer()
        self.expect("}")
        return n

    def _group(self, opener, closer) -> Node:
        self.expect(opener)
        self.enter()
        node = self.sum()
        self.leave()
        self.skip_latex_noise()
        self.expect(closer, f" to close the {opener!r}")
        return node

    def _args(self) -> list[Node]:
        self.skip_latex_noise()
        self.expect("(")
        self.enter()
        args = [self.sum()]
        while self.at(","):
            self.next()
            args.append(self.sum())
        self.leave()
        self.skip_latex_noise()
        self.expect(")", " to close the argument list")
        return args

    def _braced_name(self) -> str:
        self.expect("{")
        t = self.next()
        if t.kind != "name":
            raise FormulaError(f"expected a name in braces but found {t.text or 'end of input'!r}", t.col)
        self.expect("}")
        return t.text

    def atom(self) -> Node:
        self.skip_latex_noise()
        t = self.tok
        if t.kind == "num":
            self.next()
            return Node("num", t.col, value=Rational(t.text))
        if t.kind == "name":
            self.next()
            name = _normalize_name(t.text)
            calls = self.at("(") or (self.at("\\left") and self.toks[self.i + 1].text == "(")
            if calls and name in FUNCTIONS:  # otherwise juxtaposition: G_Q (W_K^T W_K)^{-1/2}
                return Node("call", t.col, tuple(self._args()), name)
            return Node("name", t.col, value=name)
        if t.kind == "latex":
            return self._latex_atom(t)
        if self.at("("):
            return self._group("(", ")")
        if self.at("{"):
            return self._group("{", "}")
        if self.at("["):
            self.next()
            self.enter()
            blocks = [self.sum()]
            while self.at("|", ","):
                self.next()
                blocks.append(self.sum())
            self.leave()
            self.expect("]", " to close the block row")
            return blocks[0] if len(blocks) == 1 else Node("hstack", t.col, tuple(blocks))
        if self.at("<"):
            self.next()
            self.enter()
            a = self.sum()
            self.expect(",", " between the two arguments of <A, B>")
            b = self.sum()
            self.leave()
            self.expect(">", " to close <A, B>")
            return Node("inner", t.col, (a, b))
        if self.at("||"):
            return self._norm(t, "||")
        got = t.text or "end of input"
        raise FormulaError(f"expected a name, a number or '(' but found {got!r}", t.col)

    def _norm(self, t, delim) -> Node:
        self.next()
        self.enter()
        self.open_norms += 1
        x = self.sum()
        self.open_norms -= 1
        self.leave()
        self.skip_latex_noise()
        self.expect(delim, " to close the norm")
        kind = "op"
        if self.at("_"):
            self.next()
            kind = self._norm_kind()
        return Node("norm", t.col, (x,), kind)

    def _norm_kind(self) -> str:
        t = self.tok
        braced = self.at("{")
        if braced:
            self.next()
            t = self.tok
        if self.at("\\mathrm", "\\text", "\\operatorname"):
            self.next()
            word = self._braced_name()
        elif self.at("*", "\\ast", "\\star"):
            self.next()
            word = "*"
        elif t.kind in ("name", "num"):
            word = self.next().text
        else:
            raise FormulaError(f"expected a norm subscript (op, *, F) but found {t.text!r}", t.col)
        if braced:
            self.expect("}")
        kinds = {"op": "op", "2": "op", "*": "*", "nuc": "*", "F": "F", "fro": "F"}
        if word not in kinds:
            raise FormulaError(f"unknown norm ||.||_{word}; known: op, 2, *, nuc, F, fro", t.col)
        return kinds[word]

    def _latex_atom(self, t) -> Node:
        cmd = t.text[1:]
        if cmd in _GREEK:
            self.next()
            return Node("name", t.col, value=_GREEK[cmd])
        if cmd in ("frac", "tfrac", "dfrac"):
            self.next()
            num = self._group("{", "}")
            den = self._group("{", "}")
            return Node("mul", t.col, (("*", num), ("/", den)))
        if cmd == "sqrt":
            self.next()
            return Node("call", t.col, (self._group("{", "}"),), "sqrt")
        if cmd in ("operatorname", "mathrm", "text"):
            self.next()
            name = _normalize_name(self._braced_name())
            return Node("call", t.col, tuple(self._args()), name)
        if cmd == "Delta":
            self.next()
            nt = self.tok
            if nt.kind == "name" and not nt.text.startswith("_"):
                self.next()
                return Node("name", t.col, value="d" + _normalize_name(nt.text))
            if self.at("_"):
                self.next()
                sub = self.next()
                if sub.kind == "name" or sub.kind == "num":
                    return Node("name", t.col, value="Delta_" + sub.text)
                if sub.text == "{":
                    inner = self.next().text
                    self.expect("}")
                    return Node("name", t.col, value="Delta_" + inner)
            return Node("name", t.col, value="Delta")
        if cmd == "langle":
            self.next()
            self.enter()
            a = self.sum()
            self.expect(",", " between the two arguments of \\langle A, B \\rangle")
            b = self.sum()
            self.leave()
            self.skip_latex_noise()
            self.expect("\\rangle", " to close \\langle")
            return Node("inner", t.col, (a, b))
        if cmd == "|":
            return self._norm(t, "\\|")
        raise FormulaError(f"unknown LaTeX command {t.text}", t.col)


def _normalize_name(text: str) -> str:
    name = re.sub(r"\{([A-Za-z0-9]+)\}", r"\1", text)
    return {"eps": "epsilon", "lam": "lambda"}.get(name, name)


def parse_tree(text: str) -> Node:
    """The syntax tree of ``text`` (no names resolved)."""
    tokens = tokenize(text)
    if len(tokens) == 1:
        raise FormulaError("empty formula")
    return _Parser(tokens).parse()


FUNCTIONS = ("msign", "inv", "sqrtm", "tr", "trace", "blockdiag", "sqrt", "transpose")


__all__ = ["FUNCTIONS", "FormulaError", "Node", "Token", "parse_tree", "tokenize"]
