"""The atoms of the formula language and the token helpers every rule uses: numbers, names (dotted NumPy/JAX
paths, decorations, ``\\Delta W``), LaTeX commands, norms, block rows, singular values ``σ_k``/``σ_k(X)``, parts
of ``Σ`` and sums ``\\sum_{h=1}^{3} …``. :class:`derivations.parsing.formula_syntax.Parser` adds the
operators (sums, products, Kronecker products, powers) and definitions on top of :class:`Grammar`, whose
atoms call back into them (``self.sum()`` for a bracketed expression, ``self.term()`` for a sum's body)."""

from __future__ import annotations

from sympy import Rational

from derivations.parsing.formula_tokens import MAX_DEPTH, FormulaError, Node, Token
from derivations.parsing.notation import (
    ALIASES,
    DECORATIONS,
    DOTTED,
    DOTTED_REFUSED,
    DROP,
    FUNCTIONS,
    GREEK,
    RELATIONS,
    decorate,
    normalize_name,
)

_WORD_COMMANDS = ("\\text", "\\mathrm", "\\textrm", "\\operatorname")
_MAX_NUMBER = 40  # characters of a numeric literal
_MAX_EXP10 = 300  # |e| of a literal's decimal exponent


def _number(t: Token):
    """The exact rational value of a numeric literal (``0.5``, ``1e-12``, ``2.5E+3``)."""
    mantissa, _, exp = t.text.lower().partition("e")
    if len(t.text) > _MAX_NUMBER or (exp and abs(int(exp)) > _MAX_EXP10):
        raise FormulaError(f"number {t.text} is out of range", t.col)
    return Rational(mantissa) * Rational(10) ** int(exp or 0)


class Grammar:
    """Token helpers and atoms (see the module docstring); a subclass defines ``sum`` and ``term``."""

    def __init__(self, tokens):
        self.toks = list(tokens)
        self.i = 0
        self.depth = 0
        self.open_norms = 0  # inside ||…||, a norm bar closes instead of opening
        self.in_where = False  # inside a where clause, 'and' separates definitions

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def at(self, *texts) -> bool:
        t = self.tok
        return t.kind in ("op", "latex") and t.text in texts

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
        while self.tok.kind == "latex" and self.tok.text[1:] in DROP:
            self.next()

    def _word_at(self, i: int, words) -> int:
        """Tokens taken by one of ``words`` at ``i``: ``where`` (1) or ``\\text{where}`` (4); 0 if none."""
        t = self.toks[i]
        if t.kind == "name" and t.text in words:
            return 1
        if t.kind == "latex" and t.text in _WORD_COMMANDS and i + 3 < len(self.toks):
            a, b, c = self.toks[i + 1: i + 4]
            if a.text == "{" and b.kind == "name" and b.text in words and c.text == "}":
                return 4
        return 0

    def _split_digit(self):
        """Split a numeric token into its first digit and the rest (``\\frac12`` is ``\\frac{1}{2}``)."""
        t = self.tok
        if t.kind == "num" and t.text.isdigit() and len(t.text) > 1:
            self.toks[self.i: self.i + 1] = [Token("num", t.text[0], t.col), Token("num", t.text[1:], t.col + 1)]

    def _frac_operand(self) -> Node:
        """One argument of ``\\frac``/``\\sqrt``: a braced group, or one digit, letter or command."""
        self.skip_latex_noise()
        if self.at("{"):
            return self._group("{", "}")
        self._split_digit()
        t = self.tok
        if t.kind == "num" or (t.kind == "name" and len(t.text) == 1) or (t.kind == "latex" and t.text[1:] in GREEK):
            return self.atom()
        raise FormulaError(f"write the argument of \\frac or \\sqrt in braces, e.g. \\frac{{a}}{{b}}; found "
                           f"{t.text or 'end of input'!r}", t.col)

    def _group(self, opener, closer) -> Node:
        self.expect(opener)
        self.enter()
        node = self.sum()
        self.leave()
        self.skip_latex_noise()
        self.expect(closer, f" to close the {opener!r}")
        return node

    def _args(self) -> list[Node]:
        """``(a, b, …)``, also ``\\left( … \\right)`` and ``\\{ … \\}`` (``\\min\\{a, b\\}``)."""
        self.skip_latex_noise()
        closer = "\\}" if self.at("\\{") else ")"
        self.expect("\\{" if closer == "\\}" else "(")
        self.enter()
        args = [self.sum()]
        while self.at(","):
            self.next()
            args.append(self.sum())
        self.leave()
        self.skip_latex_noise()
        self.expect(closer, " to close the argument list")
        return args

    def _calls(self) -> bool:
        i = self.i
        while self.toks[i].kind == "latex" and self.toks[i].text[1:] in DROP:
            i += 1
        return self.toks[i].text in ("(", "\\{")

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
            return Node("num", t.col, value=_number(t))
        if t.kind == "name":
            return self._name_atom(t)
        if t.kind == "latex":
            return self._latex_atom(t)
        if self.at("Σ"):
            self.next()
            if self.at("_"):
                return self._sigma_part(t.col) if self._part_at() else self._sum(t.col)
            return Node("name", t.col, value="Sigma")
        if self.at("("):
            return self._group("(", ")")
        if self.at("{"):
            return self._group("{", "}")
        if self.at("["):
            return self._block_row(t)
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

    def _block_row(self, t) -> Node:
        self.next()
        self.enter()
        blocks = [self.sum()]
        while self.at("|", ","):
            self.next()
            blocks.append(self.sum())
        self.leave()
        self.skip_latex_noise()  # \right]
        self.expect("]", " to close the block row")
        return blocks[0] if len(blocks) == 1 else Node("hstack", t.col, tuple(blocks))

    def _name_atom(self, t) -> Node:
        self.next()
        path = t.text
        while self.at(".") and self.peek().kind == "name":  # jnp.linalg.inv
            self.next()
            path += "." + self.next().text
        if path != t.text:
            return self._dotted_call(t, path)
        name = normalize_name(t.text)
        head, _, rest = name.partition("_")
        if head == "sigma":  # sigma_i, sigma_(r + 1), sigma_max(X)
            if rest:
                return self._sigma(t.col, _index_node(rest, t.col))
            if self.at("_"):
                return self._sigma(t.col)
        if head == "sum" and (rest or self.at("_")):  # sum_(i>r) …, sum_h …
            return self._sum(t.col, rest or None)
        if name == "Sigma" and self._part_at():
            return self._sigma_part(t.col)
        if self.at("_") and self.peek().text == "{" and (g := self.peek(2)).kind == "latex" and g.text[1:] in GREEK \
                and self.peek(3).text == "}":
            self.next()  # H_{\lambda}: a name subscripted with a Greek letter is H_lambda
            self.next()
            name = f"{name}_{GREEK[self.next().text[1:]]}"
            self.next()
        elif name in ("C", "U") and self.at("_") and self.peek().text == "{":  # C_{X^{\top}}, U_{W_{Q} C_{K}}
            self.next()
            return Node("root", t.col, (self._group("{", "}"),), name)
        fn = ALIASES.get(name, name)
        if fn in FUNCTIONS and self._calls():  # otherwise juxtaposition: G_Q (W_K^T W_K)^{-1/2}
            return Node("call", t.col, tuple(self._args()), fn)
        return Node("name", t.col, value=name)

    def _dotted_call(self, t, path) -> Node:
        if path in DOTTED_REFUSED:
            raise FormulaError(DOTTED_REFUSED[path], t.col)
        if path not in DOTTED:
            known = ", ".join(sorted({p.split(".")[-1] for p in DOTTED}))
            raise FormulaError(f"unknown function {path!r}; NumPy/JAX/SciPy spellings known: {known}", t.col)
        if not self._calls():
            raise FormulaError(f"{path} is a function: write {path}(X)", t.col)
        return Node("call", t.col, tuple(self._args()), DOTTED[path])

    def _latex_atom(self, t) -> Node:
        cmd = t.text[1:]
        if cmd in GREEK:
            self.next()
            if cmd == "sigma" and self.at("_"):
                return self._sigma(t.col)
            if cmd == "Sigma" and self._part_at():
                return self._sigma_part(t.col)
            return Node("name", t.col, value=GREEK[cmd])
        if cmd in ("frac", "tfrac", "dfrac"):
            self.next()
            num = self._frac_operand()
            den = self._frac_operand()
            return Node("mul", t.col, (("*", num), ("/", den)))
        if cmd == "sqrt":
            self.next()
            return Node("call", t.col, (self._frac_operand(),), "sqrt")
        if cmd in ("operatorname", "mathrm", "text", "textrm"):
            self.next()
            name = normalize_name(self._braced_name())
            return Node("call", t.col, tuple(self._args()), ALIASES.get(name, name))
        if cmd == "mathbb":  # \mathbb{I}: the identity
            self.next()
            col, name = self.tok.col, self._braced_name()
            if name != "I":
                raise FormulaError(f"\\mathbb{{{name}}}: only \\mathbb{{I}} (the identity) is a matrix here", col)
            return Node("name", t.col, value="I")
        if cmd in ("min", "max"):
            self.next()
            return Node("call", t.col, tuple(self._args()), cmd)
        if cmd == "sum":
            self.next()
            return self._sum(t.col)
        if cmd in DECORATIONS:
            return self._decorated(t, DECORATIONS[cmd])
        if cmd == "Delta":
            return self._delta(t)
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

    def _delta(self, t) -> Node:
        """``\\Delta W_Q`` is ``dW_Q``; ``\\Delta_Q`` is ``Delta_Q``; a bare ``\\Delta`` is ``Delta``."""
        self.next()
        nt = self.tok
        if nt.kind == "name":
            self.next()
            return Node("name", t.col, value="d" + normalize_name(nt.text))
        if nt.kind == "latex" and nt.text[1:] in DECORATIONS:
            inner = self._decorated(nt, DECORATIONS[nt.text[1:]])
            return Node("name", t.col, value="d" + inner.value)
        if self.at("_"):
            self.next()
            sub = self.next()
            if sub.kind in ("name", "num"):
                return Node("name", t.col, value="Delta_" + sub.text)
            if sub.text == "{":
                inner = self.next().text
                self.expect("}")
                return Node("name", t.col, value="Delta_" + inner)
        return Node("name", t.col, value="Delta")

    def _decorated(self, t, word: str) -> Node:
        """``\\bar C_Q``, ``\\bar{C}_Q``, ``\\bar{C_Q}``: the name with the decoration as a suffix (``C_Qbar``)."""
        self.next()
        braced = self.at("{")
        if braced:
            self.next()
        nt = self.next()
        if nt.kind == "name":
            name = normalize_name(nt.text)
        elif nt.kind == "latex" and nt.text[1:] in GREEK:
            name = GREEK[nt.text[1:]]
        else:
            raise FormulaError(f"{t.text} decorates a name, found {nt.text or 'end of input'!r}", nt.col)
        if braced:
            self.expect("}", f" to close {t.text}{{…}}")
            if self.at("_"):  # \bar{C}_Q
                self.next()
                sub = self._braced_name() if self.at("{") else self.next().text
                name = f"{name}_{normalize_name(sub)}"
        return Node("name", t.col, value=decorate(name, word))

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

    def _subscript(self) -> Node:
        """What follows ``_``: ``{expr}``, ``(expr)``, one name or number, ``\\max``/``\\min``."""
        self.skip_latex_noise()
        if self.at("{") and self.peek().text in ("\\max", "\\min") and self.peek(2).text == "}":
            self.next()
            word = self.next().text[1:]
            self.next()
            return Node("name", self.tok.col, value=word)
        if self.at("{", "("):
            return self._group(self.tok.text, "}" if self.tok.text == "{" else ")")
        t = self.next()
        if t.kind == "num":
            return Node("num", t.col, value=_number(t))
        if t.kind == "name":
            return Node("name", t.col, value=normalize_name(t.text))
        if t.text in ("\\max", "\\min"):
            return Node("name", t.col, value=t.text[1:])
        raise FormulaError(f"expected a subscript but found {t.text or 'end of input'!r}", t.col)

    def _sigma(self, col, index: Node | None = None) -> Node:
        """``σ_k`` (the singular value of the matrix in scope) or ``σ_k(X)``."""
        if index is None:
            self.expect("_")
            index = self._subscript()
        if self._calls():
            args = self._args()
            if len(args) != 1:
                raise FormulaError(f"σ_k(X) takes one matrix, got {len(args)} arguments", col)
            return Node("sv", col, (index, args[0]))
        return Node("sv", col, (index,))

    def _part_at(self) -> bool:
        """``_(>r)``, ``_{\\le r}`` after Σ: a part of the diagonal of singular values."""
        return (self.at("_") and self.peek().text in ("(", "{") and self.peek(2).kind in ("op", "latex")
                and self.peek(2).text in RELATIONS and self.peek(2).text != "=")

    def _sigma_part(self, col) -> Node:
        self.expect("_")
        closer = "}" if self.next().text == "{" else ")"
        relation = RELATIONS[self.next().text]
        bound = self.sum()
        self.expect(closer, " to close the subscript of Σ")
        return Node("sigma_part", col, (bound,), relation)

    def _index_name(self) -> str:
        t = self.next()
        name = normalize_name(t.text) if t.kind == "name" else ""
        if not name or "_" in name:
            raise FormulaError(f"expected the index of the sum (a letter: h, i) but found {t.text or 'end of input'!r}",
                               t.col)
        return name

    def _sum(self, col, index: str | None = None) -> Node:
        """``\\sum_{h=1}^{3} body``, ``\\sum_h body``, ``sum_(i>r) body``: the body is the product that follows."""
        relation = bound = upper = None
        self.skip_latex_noise()
        if index is None:
            self.expect("_", " after the summation sign (\\sum_{h} …, sum_(i>r) …)")
            if self.at("{", "("):
                closer = "}" if self.next().text == "{" else ")"
                index = self._index_name()
                if self.tok.kind in ("op", "latex") and self.tok.text in RELATIONS:
                    relation = RELATIONS[self.next().text]
                    bound = self.sum()
                self.expect(closer, " to close the subscript of the sum")
            else:
                index = self._index_name()
        elif "_" in index or not index.isalpha():
            raise FormulaError(f"expected the index of the sum (a letter: h, i) but found {index!r}", col)
        self.skip_latex_noise()
        if self.at("^"):
            self.next()
            upper = self._group(self.tok.text, "}" if self.tok.text == "{" else ")") if self.at("{", "(") \
                else self._subscript()
        self.enter()
        body = self.term()
        self.leave()
        return Node("sum", col, (body, bound, upper), (index, relation))


def _index_node(text: str, col: int) -> Node:
    """The index of a one-token ``sigma_i``/``sigma_1``/``sigma_max``."""
    if text.isdigit():
        return Node("num", col, value=Rational(text))
    if "_" in text:
        raise FormulaError(f"σ_{text}: one index, e.g. sigma_i, sigma_(r + 1)", col)
    return Node("name", col, value=text)


__all__ = ["Grammar"]
