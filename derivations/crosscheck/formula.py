"""A formula language for matrix expressions, parsed without evaluating any Python.

The parser is a hand-written recursive descent over a closed grammar; it builds the project's
own vocabulary (:mod:`derivations.engine.vocabulary`) and never calls ``eval``, ``sympify`` or
``parse_expr`` on user text. It reads

* what ``--emit text`` prints: ``(-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1``, ``W_Q.T``,
  ``(S**(-1)).T``, ``<A, B>``, ``||X||_op``, ``||X||_*``, ``[A | B]``, ``blockdiag(A, B)``;
* the usual notebook spellings: ``@`` and juxtaposition for products, ``X.T``, ``X^T``, ``X^-1``,
  ``inv(X)``, ``sqrtm(X)``, ``msign(X)``, ``tr(X)``, ``eps`` for ``epsilon``, ``I`` for the
  identity of whatever size its neighbours need, and Unicode (``ε``, ``λ``, ``ᵀ``, ``⁻¹``,
  ``⟨A, B⟩``, ``‖X‖_op``, ``−``);
* a LaTeX subset: ``\\operatorname{msign}``, ``^{\\top}``, ``^{-1}``, ``^{1/2}``, ``\\frac``,
  ``\\varepsilon``, ``\\lambda``, ``\\langle A, B\\rangle``, ``\\|X\\|_{op}``, ``\\left(``/``\\right)``,
  ``\\Delta W_Q`` (read as ``dW_Q``), subscripts in braces (``W_{K}``).

Fractional powers are defined for Gram matrices only: ``(AᵀA + λI)^p`` is the PSD power of the
Gram matrix (``p = ±1/2`` are the vocabulary's ``C_A`` and ``C_A⁻¹``), so ``sqrtm(W_K^T W_K)`` is
``C_K`` and ``(G G^T)^{-1/4}`` a quarter inverse root.

Errors are :class:`FormulaError` with the column (1-based) where the problem is: unknown names
list the known ones, products and sums whose shapes don't compose show both shapes.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from sympy import Basic, Integer, Rational, S, sqrt
from sympy.matrices.expressions import Identity, Inverse, MatAdd, MatMul, Transpose

from derivations.engine.algebra import product, tidy, total, transpose
from derivations.engine.vocabulary import (
    BlockDiag,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    HStack,
    Inner,
    Msign,
    NuclearNorm,
    OpNorm,
)

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
            "−": "-", "·": "*", "⋅": "*", "×": "*", "ᵀ": ".T", "⊤": "T", "⁻¹": "^-1", "⟨": "<", "⟩": ">",
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
        """``T``, ``\\top`` or a signed rational (``-1``, ``{1/2}``, ``(-1/4)``, ``{\\frac{1}{2}}``)."""
        col = self.tok.col
        closer = None
        if self.at("{", "("):
            closer = "}" if self.next().text == "{" else ")"
        if self.tok.kind == "name" and self.tok.text == "T" or self.at("\\top", "\\intercal", "\\mathsf"):
            t = self.next()
            if t.text == "\\mathsf":
                self.expect("{")
                if self.next().text != "T":
                    raise FormulaError("expected \\mathsf{T}", t.col)
                self.expect("}")
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


# ---- building SymPy expressions --------------------------------------------------------------
FUNCTIONS = ("msign", "inv", "sqrtm", "tr", "trace", "blockdiag", "sqrt", "transpose")


class _Eye:
    """``c·I`` whose size comes from its neighbours."""

    def __init__(self, coeff=S.One):
        self.coeff = coeff


def _shape_text(m) -> str:
    return f"{m.shape[0]}×{m.shape[1]}"


def _is_matrix(x) -> bool:
    return getattr(x, "is_Matrix", False)


class Builder:
    """Turns a syntax tree into a SymPy expression with the names of ``namespace``.

    ``namespace`` maps names to matrix expressions and scalars. ``declare`` (optional) is called
    with ``(name, column)`` for a name not in the namespace and returns an object or None.
    """

    def __init__(self, namespace: dict, declare=None):
        self.namespace = dict(namespace)
        self.declare = declare

    def build(self, node: Node):
        out = self._build(node)
        if isinstance(out, _Eye):
            raise FormulaError("I needs a size: write it next to a matrix", node.col)
        return out

    def same(self, x, y, message: str, col):
        """Require equal dimensions ``x`` and ``y`` (a subclass may solve for them instead)."""
        if x != y:
            raise FormulaError(message, col)

    def square(self, x, what: str, col):
        self.same(x.shape[0], x.shape[1], f"{what} needs a square matrix, got {_shape_text(x)}", col)

    def _known(self) -> str:
        names = sorted(self.namespace)
        return ", ".join(names) + "; functions: " + ", ".join(FUNCTIONS)

    def _build(self, n: Node):
        method = getattr(self, f"_b_{n.kind}")
        return method(n)

    def _b_num(self, n):
        return n.value

    def _b_name(self, n):
        name = n.value
        if name in self.namespace:
            return self.namespace[name]
        if name == "I":
            return _Eye()
        if self.declare is not None:
            obj = self.declare(name, n.col)
            if obj is not None:
                self.namespace[name] = obj
                return obj
        if name in FUNCTIONS:
            raise FormulaError(f"{name} is a function: write {name}(X)", n.col)
        raise FormulaError(f"unknown name {name!r}; known: {self._known()}", n.col)

    def _b_neg(self, n):
        x = self._build(n.args[0])
        if isinstance(x, _Eye):
            return _Eye(-x.coeff)
        return product(-1, x) if _is_matrix(x) else -x

    def _b_add(self, n):
        terms = []
        for sign, t in n.args:
            x = self._build(t)
            if sign < 0:
                x = _Eye(-x.coeff) if isinstance(x, _Eye) else (product(-1, x) if _is_matrix(x) else -x)
            terms.append((t.col, x))
        mats = [(c, x) for c, x in terms if _is_matrix(x)]
        eyes = [x for _, x in terms if isinstance(x, _Eye)]
        scalars = [(c, x) for c, x in terms if not _is_matrix(x) and not isinstance(x, _Eye)]
        if mats and scalars:
            raise FormulaError(f"cannot add a scalar to a {_shape_text(mats[0][1])} matrix", scalars[0][0])
        if eyes and not mats:
            if scalars:
                raise FormulaError("cannot add a scalar to I", n.col)
            return _Eye(sum((e.coeff for e in eyes), S.Zero))
        if not mats:
            return sum((x for _, x in scalars), S.Zero)
        first = mats[0][1]
        for c, x in mats[1:]:
            for k in (0, 1):
                self.same(first.shape[k], x.shape[k],
                          f"cannot add a {_shape_text(first)} matrix and a {_shape_text(x)} matrix", c)
        if eyes:
            self.square(first, "adding I", n.col)
        out = [x for _, x in mats] + [product(e.coeff, Identity(first.shape[0])) for e in eyes]
        return total(*out)

    def _b_mul(self, n):
        coeff = S.One
        mats = []  # (col, matrix or _Eye)
        for op, t in n.args:
            x = self._build(t)
            if op == "/":
                if _is_matrix(x) or isinstance(x, _Eye):
                    raise FormulaError("cannot divide by a matrix; write inv(X) or X^-1", t.col)
                if x == 0:
                    raise FormulaError("division by zero", t.col)
                coeff = coeff / x
            elif _is_matrix(x) or isinstance(x, _Eye):
                mats.append((t.col, x))
            else:
                coeff = coeff * x
        real = [(c, m) for c, m in mats if not isinstance(m, _Eye)]
        for _c, m in mats:
            if isinstance(m, _Eye):
                coeff = coeff * m.coeff
        if not real:
            return _Eye(coeff) if mats else coeff
        for (_, a), (c1, b) in itertools.pairwise(real):
            self.same(a.shape[1], b.shape[0], f"shapes do not compose: {_shape_text(a)} times {_shape_text(b)}", c1)
        return product(coeff, *[m for _, m in real])

    def _b_T(self, n):
        x = self._build(n.args[0])
        if isinstance(x, _Eye) or not _is_matrix(x):
            return x
        return transpose(x)

    def _b_pow(self, n):
        base = self._build(n.args[0])
        p = n.value
        if isinstance(base, _Eye):
            return _Eye(base.coeff ** p)
        if not _is_matrix(base):
            return base ** p
        self.square(base, "a power", n.col)
        return matrix_power(base, p, n.col)

    def _b_inner(self, n):
        a, b = (self._build(x) for x in n.args)
        if isinstance(a, _Eye) and _is_matrix(b):
            a = product(a.coeff, Identity(b.shape[0]))
        if isinstance(b, _Eye) and _is_matrix(a):
            b = product(b.coeff, Identity(a.shape[0]))
        if not (_is_matrix(a) and _is_matrix(b)):
            raise FormulaError("<A, B> takes two matrices", n.col)
        for k in (0, 1):
            self.same(a.shape[k], b.shape[k], f"<A, B> needs equal shapes, got {_shape_text(a)} and "
                      f"{_shape_text(b)}", n.col)
        return Inner(a, b)

    def _b_norm(self, n):
        x = self._build(n.args[0])
        if not _is_matrix(x):
            raise FormulaError("a matrix norm takes a matrix", n.col)
        if n.value == "op":
            return OpNorm(x)
        if n.value == "*":
            return NuclearNorm(x)
        return sqrt(Inner(x, x))

    def _b_hstack(self, n):
        blocks = [self._build(b) for b in n.args]
        for b, node in zip(blocks, n.args, strict=False):
            if not _is_matrix(b):
                raise FormulaError("a block row [A | B] holds matrices", node.col)
            self.same(blocks[0].shape[0], b.shape[0], f"blocks of [A | B] need equal rows, got "
                      f"{_shape_text(blocks[0])} and {_shape_text(b)}", node.col)
        return HStack(*blocks)

    def _b_call(self, n):
        name = n.value
        args = [self._build(a) for a in n.args]
        need_one = {"msign", "inv", "sqrtm", "tr", "trace", "sqrt", "transpose"}
        if name not in FUNCTIONS:
            raise FormulaError(f"unknown function {name!r}; known functions: {', '.join(FUNCTIONS)}", n.col)
        if name in need_one and len(args) != 1:
            raise FormulaError(f"{name} takes one argument, got {len(args)}", n.col)
        if name == "sqrt":
            if _is_matrix(args[0]) or isinstance(args[0], _Eye):
                raise FormulaError("sqrt is the scalar square root; write sqrtm(X) for a matrix", n.col)
            return sqrt(args[0])
        if name == "blockdiag":
            if not all(_is_matrix(a) for a in args):
                raise FormulaError("blockdiag takes matrices", n.col)
            return BlockDiag(*args)
        x = args[0]
        if isinstance(x, _Eye):
            raise FormulaError(f"{name}(I) needs a size", n.col)
        if not _is_matrix(x):
            raise FormulaError(f"{name} takes a matrix, got the scalar {x}", n.col)
        if name == "msign":
            return Msign(x)
        if name == "transpose":
            return transpose(x)
        self.square(x, name, n.col)
        if name == "inv":
            return matrix_power(x, Integer(-1), n.col)
        if name == "sqrtm":
            return matrix_power(x, S.Half, n.col)
        return Inner(Identity(x.shape[0]), x)


def gram_of(expr):
    """``(W, λ, side)`` when ``expr`` is ``WᵀW + λI`` (right) or ``WWᵀ + λI`` (left), else None."""
    expr = tidy(expr)
    damping = S.Zero
    if isinstance(expr, MatAdd):
        rest = []
        for t in expr.args:
            c, mats = t.as_coeff_matrices() if isinstance(t, MatMul) else (S.One, [t])
            if len(mats) == 1 and isinstance(mats[0], Identity):
                damping += c
            else:
                rest.append(t)
        if len(rest) != 1 or damping == 0:
            return None
        expr = rest[0]
    if isinstance(expr, (GramSqrt, GramInvSqrt)):
        return None
    if not isinstance(expr, MatMul):
        return None
    coeff, mats = expr.as_coeff_matrices()
    if coeff != 1 or len(mats) % 2:
        return None
    k = len(mats) // 2
    left, right = product(*mats[:k]), product(*mats[k:])
    if tidy(transpose(left)) != right:
        return None
    if len(left.atoms(Transpose)) > len(right.atoms(Transpose)):
        return (right, damping, "right")  # Wᵀ W with W = right
    return (left, damping, "left")  # W Wᵀ with W = left


def _gram_root(base, damping, side, p):
    if p == S.Half:
        return GramSqrt(base, damping, side)
    if p == -S.Half:
        return GramInvSqrt(base, damping, side)
    w = base
    gram = product(transpose(w), w) if side == "right" else product(w, transpose(w))
    if damping != 0:
        gram = total(gram, product(damping, Identity(gram.shape[0])))
    if p.is_integer:
        if p > 0:
            return product(*([gram] * int(p)))
        return Inverse(product(*([gram] * int(-p))))
    return GramPower(base, damping, side, p)


def matrix_power(x, p, col=None):
    """``x^p``: integer powers of square matrices; rational powers of Gram matrices and Gram roots."""
    p = Rational(p)
    if x.shape[0] != x.shape[1]:
        raise FormulaError(f"a power needs a square matrix, got {_shape_text(x)}", col)
    if isinstance(x, (GramSqrt, GramInvSqrt)):
        return _gram_root(x.base, x.damping, x.side, x.exponent * p)
    g = gram_of(x)
    if g is not None and not (p.is_integer and p > 0):
        w, damping, side = g
        return _gram_root(w, damping, side, p)
    if p == 1:
        return x
    if p.is_integer:
        if p > 0:
            return product(*([x] * int(p)))
        if isinstance(x, Inverse):
            return matrix_power(x.arg, -p, col)
        return Inverse(x) if p == -1 else Inverse(product(*([x] * int(-p))))
    raise FormulaError(f"fractional power {p} needs a Gram matrix (AᵀA or AAᵀ, + λI), a Gram root C_W, "
                       "or write it with msign", col)


def parse(text: str, namespace: dict, declare=None) -> Basic:
    """The SymPy expression for ``text`` with names from ``namespace`` (see :class:`Builder`)."""
    return Builder(namespace, declare).build(parse_tree(text))


def shape_of(expr) -> tuple | None:
    """The shape of a matrix expression, None for a scalar."""
    return tuple(expr.shape) if _is_matrix(expr) else None


__all__ = ["FUNCTIONS", "Builder", "FormulaError", "GramPower", "Node", "gram_of", "matrix_power", "parse",
           "parse_tree", "shape_of", "tokenize"]
