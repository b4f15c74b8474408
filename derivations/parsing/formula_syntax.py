"""A formula language for matrix expressions, read without evaluating any Python: tokens, errors and the syntax
tree (:func:`parse_tree`); the grammar is :mod:`derivations.parsing.formula_atoms`, the spelling tables
:mod:`derivations.parsing.notation`, and :mod:`derivations.parsing.formula` builds the expression.

The parser is a hand-written recursive descent over a closed grammar; the tree it builds names
the project's own vocabulary (:mod:`derivations.vocabulary.nodes`), and nothing ever calls ``eval``,
``sympify`` or ``parse_expr`` on user text. It reads

* what ``--emit text`` and the cross-checker print: ``(-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1``, ``W_Q.T``,
  ``(S**(-1)).T``, ``<A, B>``, ``||X||_op``, ``||X||_*``, ``[A | B]``, ``blockdiag(A, B)``, ``C_P_V``,
  ``sigma_(r + 1)``, ``sqrt(sum_(i>r) sigma_i^2)``, ``Sigma_(>r)``, ``kron(A, B)``, ``vec(X)``, ``min(a, b)``;
* the usual notebook spellings: ``@`` and juxtaposition for products, ``X.T``, ``X^T``, ``X^-1``, ``X**-1``,
  ``inv(X)``, ``jnp.linalg.inv(X)``, ``np.linalg.matrix_power(X, 3)``, ``sqrtm(X)``, ``msign(X)``, ``tr(X)``,
  ``rank(X)``, ``eps`` for ``epsilon``, ``1e-12``, ``I`` for the identity of whatever size its neighbours
  need (``I_n`` of size ``n``), and Unicode (``ε``, ``λ``, ``σ_i``, ``Σ``, ``∑_h``, ``⊗``, ``ᵀ``, ``⁻¹``,
  ``⟨A, B⟩``, ``‖X‖_op``, ``−``, ``C̄_Q``);
* a LaTeX subset: ``\\operatorname{msign}``, ``\\operatorname{tr}``, ``\\mathrm{rank}``, ``^{\\top}``,
  ``^{-1}``, ``^{-T}``, ``^{1/2}``, ``\\frac``, ``\\tfrac``, ``\\dfrac`` (``\\frac12``), ``\\varepsilon``,
  ``\\sigma_{r+1}``, ``\\Sigma``, ``\\sum_{h=1}^{3}``, ``\\sum_{i>r}``, ``\\otimes``, ``\\min``, ``\\max``,
  ``\\langle A, B\\rangle``, ``\\|X\\|_{op}``, ``\\left(``/``\\right)``, ``\\Delta W_Q`` (read as ``dW_Q``),
  decorations (``\\bar C_Q``, ``\\hat m``, ``\\tilde W``, ``W^\\star``), subscripts in braces (``W_{K}``,
  ``W_{O,h}``, ``H_{\\lambda}``), and what the LaTeX printer writes: ``C_{…}``/``U_{…}`` of an expression
  (``C_{A^{\\top}}``, the left Gram root of ``A``), ``\\left[A \\,\\middle|\\, B\\right]``, ``\\mathbb{I}``;
* definitions: ``L = G G^T; L^{-1/4} G`` or ``L^{-1/4} G where L = G G^T`` (``\\text{where}``, several
  separated by commas or ``and``), and ``U, Σ, V = svd(G)``.

Errors are :class:`FormulaError` with the column (1-based) where the problem is and the text around it with
a caret ``‸`` at that column, on one line.
"""


from __future__ import annotations

from sympy import Rational

from derivations.parsing.formula_atoms import _WORD_COMMANDS, Grammar
from derivations.parsing.formula_tokens import FormulaError, Node, Token, pointer, tokenize
from derivations.parsing.notation import DECORATIONS, FUNCTIONS, GREEK, STAR, WHERE_WORDS, decorate

_ATOM_COMMANDS = {"\\frac", "\\tfrac", "\\dfrac", "\\sqrt", "\\langle", "\\operatorname", "\\mathrm", "\\text",
                  "\\textrm", "\\Delta", "\\sum", "\\min", "\\max", "\\mathbb"}
_DEFINE = (":=", "=", "\\coloneqq", "\\coloneq", "\\triangleq")
_STARS = ("*", "\\star", "\\ast")


class Parser(Grammar):
    """Recursive descent over the token list; :meth:`parse` returns the tree of one formula."""

    def parse(self) -> Node:
        defs = []
        while (d := self.try_definition()) is not None:
            defs.append(d)
            if not self.at(";"):
                raise FormulaError("a definition is followed by ';' and the expression, e.g. L = G G^T; L^{-1/4} G",
                                   self.tok.col)
            self.next()
        col = self.tok.col
        body = self.sum()
        if self.at(",") and self._word_at(self.i + 1, WHERE_WORDS):
            self.next()
        if n := self._word_at(self.i, WHERE_WORDS):
            self.i += n
            defs += self.where_clause()
        if self.tok.kind != "end":
            raise FormulaError(f"unexpected {self.tok.text!r}", self.tok.col)
        return Node("let", col, (*defs, body)) if defs else body

    def where_clause(self) -> list:
        self.in_where = True
        out = []
        while True:
            d = self.try_definition()
            if d is None:
                raise FormulaError("expected a definition NAME = … after 'where'", self.tok.col)
            out.append(d)
            if self.at(",", ";"):
                self.next()
            elif n := self._word_at(self.i, ("and",)):
                self.i += n
            else:
                break
        self.in_where = False
        return out

    def try_definition(self) -> Node | None:
        """``NAME = expr`` (``:=``, ``\\coloneqq``), or ``U, Σ, V = svd(G)``, at the current token; None (and
        nothing consumed) when the tokens there are not a definition."""
        start, depth, col = self.i, self.depth, self.tok.col
        names = []
        paren = self.at("(")
        if paren:
            self.next()
        while True:
            try:
                target = self.power()
            except FormulaError:
                break
            if target.kind != "name":
                break
            names.append(target.value)
            if not self.at(","):
                break
            self.next()
        if paren and self.at(")"):
            self.next()
        if names and self.at(*_DEFINE):
            self.next()
            return Node("def", col, (self.sum(),), tuple(names))
        self.i, self.depth = start, depth
        return None

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
        if t.kind == "num":
            return True
        if t.kind == "name":
            return t.text not in WHERE_WORDS and not (self.in_where and t.text == "and")
        if t.text in ("||", "\\|"):
            return self.open_norms == 0
        if t.kind == "latex":
            if t.text in _WORD_COMMANDS:
                return not self._word_at(self.i, (*WHERE_WORDS, "and"))
            return t.text in _ATOM_COMMANDS or t.text[1:] in GREEK or t.text[1:] in DECORATIONS
        return t.kind == "op" and t.text in ("(", "[", "<", "{", "Σ")

    def term(self) -> Node:
        col = self.tok.col
        first, bare = self.kron()
        factors = [("*", first)]
        while True:
            self.skip_latex_noise()
            if self.at("*", "@", "/", "\\cdot", "\\times"):
                op = self.next().text
            elif self._starts_atom():  # juxtaposition: G_Q C_K^{-1}
                op = "*"
            else:
                break
            node, more = self.kron()
            factors.append(("/" if op == "/" else "*", node))
            bare = bare or more
        if bare and len(factors) > 1:
            raise FormulaError("a Kronecker product next to another factor is ambiguous: put it in parentheses, "
                               "e.g. (B^T ⊗ A) vec(X)", bare)
        return factors[0][1] if len(factors) == 1 else Node("mul", col, tuple(factors))

    def kron(self) -> tuple:
        """``A ⊗ B ⊗ …`` (``\\otimes``) and the column of its first ``⊗`` (None for a plain factor)."""
        first = self.unary()
        if not self.at("\\otimes"):
            return first, None
        col = self.tok.col
        parts = [first]
        while self.at("\\otimes"):
            self.next()
            parts.append(self.unary())
        return Node("kron", col, tuple(parts)), col

    def unary(self) -> Node:
        if self.at("-", "+"):
            self.enter()
            t = self.next()
            inner = self.unary()
            self.leave()
            return Node("neg", t.col, (inner,)) if t.text == "-" else inner
        return self.power()

    def _star_at(self, i: int) -> int:
        """Tokens of an optimum mark after ``^`` at ``i``: ``*``/``\\star`` (1) or ``{\\star}`` (3); 0 if none."""
        t = self.toks[i]
        if t.kind in ("op", "latex") and t.text in _STARS:
            return 1
        after = self.toks[i + 1: i + 3]
        if t.text == "{" and len(after) == 2 and after[0].text in _STARS and after[1].text == "}":
            return 3
        return 0

    def power(self) -> Node:
        base = self.postfix(self.atom())
        while self.at("^") and (n := self._star_at(self.i + 1)):
            if base.kind != "name":
                raise FormulaError("X^* marks an optimum and only a name carries it (W^*, \\Delta W_Q^\\star); "
                                   "write a transpose as X^T", self.tok.col)
            self.i += 1 + n
            base = Node("name", base.col, value=decorate(base.value, STAR))
        if self.at("^", "**"):
            t = self.next()
            self.enter()
            exp = self.exponent()
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

    def exponent(self):
        """``T``, ``\\top``, ``-T`` (the inverse transpose) or a signed rational (``-1``, ``{1/2}``, ``(-1/4)``,
        ``{\\frac{1}{2}}``, ``\\frac12``, ``0.5``)."""
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
        else:
            sign = 1
            while self.at("-", "+"):
                sign = -sign if self.next().text == "-" else sign
            if self.at("\\frac", "\\tfrac", "\\dfrac"):
                self.next()
                num, den = self._frac_integer(), self._frac_integer()
            else:
                num, den = self._exponent_number(), 1
                if closer and self.at("/"):
                    self.next()
                    den = self._exponent_number()
            if den == 0:
                raise FormulaError("exponent with a zero denominator", col)
            value = sign * Rational(num) / Rational(den)
        if closer:
            self.expect(closer, " to close the exponent")
        return value

    def _transpose_at(self, i: int) -> bool:
        """Whether the token at ``i`` is a transpose mark: ``T``, ``\\top``, ``\\intercal``, ``\\mathsf{T}``,
        ``\\mathrm{T}``."""
        t = self.toks[i]
        if t.kind == "latex" and t.text in ("\\mathsf", "\\mathrm", "\\text"):
            return i + 2 < len(self.toks) and self.toks[i + 1].text == "{" and self.toks[i + 2].text == "T"
        return t.kind == "name" and t.text == "T" or t.kind == "latex" and t.text in ("\\top", "\\intercal")

    def _transpose_mark(self):
        t = self.next()
        if t.kind == "latex" and t.text not in ("\\top", "\\intercal"):
            self.expect("{")
            self.next()
            self.expect("}")

    def _exponent_number(self):
        t = self.tok
        if t.kind != "num" or "e" in t.text.lower():
            raise FormulaError(f"expected a number in the exponent but found {t.text or 'end of input'!r}", t.col)
        if len(t.text) > 6:
            raise FormulaError(f"exponent {t.text} is too large", t.col)
        self.next()
        return Rational(t.text)

    def _frac_integer(self) -> int:
        if self.at("{"):
            self.next()
            n = self._exponent_number()
            self.expect("}")
            return n
        self._split_digit()
        return self._exponent_number()



def parse_tree(text: str) -> Node:
    """The syntax tree of ``text`` (no names resolved)."""
    tokens = tokenize(text)
    if len(tokens) == 1:
        raise FormulaError("empty formula")
    try:
        node = Parser(tokens).parse()
    except FormulaError as exc:
        raise exc.with_text(text) from None
    node.source = text
    return node


def parse_definitions(text: str) -> list[Node]:
    """The definitions of a where clause's text (``L = G G^T, U, Σ, V = svd(G) and R = G^T G``) as ``def``
    nodes, each with ``text`` as its source."""
    tokens = tokenize(text)
    try:
        parser = Parser(tokens)
        nodes = parser.where_clause()
        if parser.tok.kind != "end":
            raise FormulaError(f"unexpected {parser.tok.text!r} after the definitions", parser.tok.col)
    except FormulaError as exc:
        raise exc.with_text(text) from None
    for node in nodes:
        node.source = text
    return nodes


def parse_definition(text: str) -> Node:
    """The definition ``NAME := …`` (or ``=``, ``U, Σ, V = svd(G)``) that ``text`` holds, as a ``def`` node."""
    tokens = tokenize(text)
    try:
        parser = Parser(tokens)
        node = parser.try_definition()
        if node is None:
            raise FormulaError("expected a definition NAME := …", tokens[0].col)
        if parser.tok.kind != "end":
            raise FormulaError(f"unexpected {parser.tok.text!r} after the definition", parser.tok.col)
    except FormulaError as exc:
        raise exc.with_text(text) from None
    node.source = text
    return node


__all__ = ["FUNCTIONS", "FormulaError", "Node", "Parser", "Token", "parse_definition", "parse_definitions",
           "parse_tree", "pointer", "tokenize"]
