"""Shared machinery of the code printers: emission specs, common subexpressions, dispatch.

A :class:`MatrixCodePrinter` turns the derived expressions of an :class:`~derivations.engine.rule.EmittedFunction`
into straight-line array code. Common subexpressions are computed once: every spectral sign,
Gram root and isotropic scale gets a named temporary, and so does any other product or sum that
occurs more than once; the Gram roots of one partner share a single eigendecomposition. Nodes
without a ``_print_<Node>`` method are an error (the printer is strict), never broken code.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import keyword
import symtable
import textwrap
import types
from typing import Any

from sympy import Add, Basic, Mul, Pow, Rational, S, Symbol, preorder_traversal
from sympy.matrices.expressions import MatAdd, MatMul, MatrixSymbol, Transpose

from derivations.engine.derivation import Derivation
from derivations.vocabulary.algebra import product
from derivations.vocabulary.interpret import Interpreter, MissingRule, find_rule
from derivations.vocabulary.nodes import (
    BLOCK_DIAGONAL,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    IsotropicScale,
    Msign,
    PolarFactor,
    RegularizedSylvester,
    facts_of,
    short_name,
)


class UnsafeText(ValueError):
    """Text that would not stay inert in emitted code (an identifier that is not one, a docstring that
    would not be one string literal): the printers refuse to emit rather than emit it."""


def docstring_fragment(text) -> str:
    """``text`` escaped for a triple-quoted (non-raw) docstring: the literal evaluates to ``text`` again and
    nothing in it can end the string. Backslashes and double quotes get a backslash; every character that
    is not printable (line breaks, NUL and other controls, U+2028/U+2029, format characters) is written as
    its ``\\x``/``\\u`` escape. Printable text without ``\\`` or ``"`` comes back unchanged."""
    out = []
    for ch in str(text):
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ascii(ch)[1:-1])
    return "".join(out)


def check_docstring(source: str, what: str) -> str:
    """``source`` (a docstring literal, possibly indented) if it parses as exactly one string constant,
    else :class:`UnsafeText` (whatever reached it, it cannot have become code)."""
    try:
        body = ast.parse(textwrap.dedent(source)).body
    except (SyntaxError, ValueError) as exc:
        why = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise UnsafeText(f"{what}: the docstring does not parse ({type(exc).__name__}: {why})") from None
    if not (len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        raise UnsafeText(f"{what}: the docstring would not be one string literal (refused: it would run as code)")
    return source


def check_identifier(name, what: str) -> str:
    """``name`` if it is a Python identifier and not a keyword, else :class:`UnsafeText`."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
        raise UnsafeText(f"{what} {ascii(name)[:80]} is not an ASCII Python identifier")
    return name


class UnsupportedNode(MissingRule):
    """The printer has no rule for a node of the expression (a :class:`MissingRule`, as in every interpreter)."""

    def __init__(self, message: str):
        TypeError.__init__(self, message)


class DerivedOutput:
    """An emitted output whose formula is read off derivations rather than being one's result.

    ``source`` names the output (its header line and fingerprint); ``related`` are further
    derivations whose lemmas the output relies on.
    """

    def __init__(self, formula, source, name: str | None = None, related=()):
        self.formula, self.name, self.title = formula, name or source.name, source.title
        self._sources = (source, *related)

    def lemmas_used(self):
        return [lem for der in self._sources for lem in der.lemmas_used()]

    def verified(self) -> DerivedOutput:
        """``self`` once every derivation it is read off is what its checked steps give
        (:meth:`~derivations.engine.derivation.Derivation.verified`)."""
        for der in self._sources:
            der.verified()
        return self

    def fingerprint(self):
        return self._sources[0].fingerprint()


def lemmas_used(functions) -> list:
    """Every lemma used by the derivations behind ``functions``, in first-use order."""
    seen: dict[str, Any] = {}
    for fn in functions:
        for der in fn.derivations():
            for lemma in der.lemmas_used():
                seen.setdefault(lemma.key, lemma)
    return list(seen.values())


def derivation_list(functions) -> list[Derivation]:
    out: dict[str, Derivation] = {}
    for fn in functions:
        for der in fn.derivations():
            out.setdefault(der.name, der)
    return list(out.values())


def routine_source(functions) -> str:
    """Source text of compute routines, to be inlined into an emitted module."""
    return "\n\n".join(inspect.getsource(f).rstrip() for f in functions)


def _global_reads(table: symtable.SymbolTable) -> set[str]:
    """Names read as module globals in the function scopes under ``table`` (nested ones included)."""
    out = set()
    for child in table.get_children():
        out |= {s.get_name() for s in child.get_symbols() if s.is_global() and s.is_referenced()}
        out |= _global_reads(child)
    return out


def free_globals(source: str) -> set[str]:
    """The names the code in ``source`` reads from its module's globals and does not define there itself.

    Read from the compiler's symbol table (:mod:`symtable`), not from the text: a parameter, a local or a
    comprehension variable that happens to share a routine's name is not a read of the routine. Builtins are
    included (a caller intersects with the names it knows).
    """
    top = symtable.symtable(source, "<emitted>", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    reads = {s.get_name() for s in top.get_symbols() if s.is_referenced()} | _global_reads(top)
    return reads - defined


def routine_closure(names, runtime: types.ModuleType) -> list[str]:
    """The exports of ``runtime`` (its ``__all__``) that code reading ``names`` reaches: those among ``names``,
    then transitively every export the source of a reached routine reads (:func:`free_globals`).
    In the order of ``runtime.__all__``; constants are reached but have no source to follow."""
    exported = list(runtime.__all__)
    todo = [n for n in names if n in exported]
    reached: set[str] = set()
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        value = getattr(runtime, name)
        if inspect.isfunction(value):
            todo += [n for n in free_globals(inspect.getsource(value)) if n in exported]
    return [n for n in exported if n in reached]


def runtime_import(runtime: types.ModuleType, names) -> str:
    """``from <runtime> import (...)`` naming ``names`` (constants first, then the rest, each sorted), or ``""``."""
    ordered = sorted(names, key=lambda n: (not n.isupper(), n))
    if not ordered:
        return ""
    return f"from {runtime.__name__} import (\n" + "".join(f"    {n},\n" for n in ordered) + ")\n"


def inlined_routines(names, runtime: types.ModuleType, notes: dict | None = None) -> tuple[str, str]:
    """``(constants, routines)``: the text that defines the exports of ``runtime`` in ``names`` in a standalone
    module, each constant as ``NAME = <repr>`` (with its line of ``notes`` as a comment), each function as its
    source, in the order of ``runtime.__all__``."""
    constants, functions = [], []
    for name in names:
        value = getattr(runtime, name)
        if inspect.isfunction(value):
            functions.append(value)
        else:
            note = (notes or {}).get(name)
            constants.append(f"{name} = {value!r}" + (f"  # {note}" if note else ""))
    return "".join(line + "\n" for line in constants), routine_source(functions)


def routine_parts(code: str, runtime: types.ModuleType, standalone: bool, notes: dict | None = None
                 ) -> tuple[str, str, str]:
    """``(import, constants, routines)`` of a module whose own ``code`` reads exports of ``runtime``: by default
    one import naming exactly the exports ``code`` reads (:func:`runtime_import`); ``standalone``: no import, and
    the definitions of the exports ``code`` reaches (:func:`routine_closure`, :func:`inlined_routines`)."""
    used = free_globals(code) & set(runtime.__all__)
    if not standalone:
        return runtime_import(runtime, used), "", ""
    return ("", *inlined_routines(routine_closure(used, runtime), runtime, notes))


class UnresolvedName(RuntimeError):
    """An emitted module would read a global that nothing defines (a routine the runtime does not export)."""


def check_resolved(source: str, what: str) -> str:
    """``source`` if :func:`unresolved_names` finds nothing, else :class:`UnresolvedName` naming the names."""
    missing = unresolved_names(source)
    if missing:
        raise UnresolvedName(f"{what} reads {', '.join(missing)}, which nothing in it defines")
    return source


def unresolved_names(source: str) -> list[str]:
    """The globals ``source`` reads that neither it nor :mod:`builtins` defines: each would be a ``NameError``
    when the line reading it runs (sorted; empty for a module that is whole)."""
    return sorted(free_globals(source) - set(dir(builtins)))


class MatrixCodePrinter(Interpreter):
    """Straight-line array code for matrix expressions, with common subexpressions named once.

    A SymPy :class:`~sympy.printing.printer.Printer` (through :class:`~derivations.vocabulary.interpret.Interpreter`):
    rules are ``_print_<Class>`` methods found along the node's class hierarchy, or the node's own
    ``_jaxcode``/``_numpycode``; a node without either raises :class:`UnsupportedNode` (a
    :class:`~derivations.vocabulary.interpret.MissingRule`) naming the node and the printer.
    """

    cse_always = (Msign, GramSqrt, GramInvSqrt, IsotropicScale, RegularizedSylvester, PolarFactor)
    #: rule lookup (:func:`derivations.vocabulary.interpret.find_rule`): node method, then ``_print_<Class>``
    rule_prefix = "_print_"

    @property
    def printmethod(self) -> str:  # type: ignore[override]  # a class attribute of Interpreter, derived here
        """The node method a target's printer calls, by SymPy's convention: ``JaxPrinter`` → ``_jaxcode``,
        ``NumpyPrinter`` → ``_numpycode``."""
        return f"_{type(self).__name__.removesuffix('Printer').lower()}code"
    #: stack same-shape eigendecompositions and spectral signs into one batched call
    stack_heavy = False
    #: block-diagonal partners arrive as their stacked blocks (else as dense matrices)
    blocked_partners = False

    @property
    def interpreter_name(self) -> str:  # type: ignore[override]  # as printmethod
        """How failures name this printer (its class name)."""
        return type(self).__name__

    #: the static options of the function being printed (``root``: a node may print a call that reads it)
    static_options: frozenset = frozenset()

    def __init__(self, arguments: dict, scalars: dict):
        super().__init__()
        self.arguments = arguments  # matrix name → code name
        self.scalars = scalars  # Symbol → code name
        self.lines: list[str] = []
        self.temps: dict = {}
        self.counts: dict = {}
        self.counter = 0
        self.groups: dict = {}  # eigh key or Msign node -> the keys/nodes computed with it

    # ---- driver ---------------------------------------------------------------------------
    def body(self, outputs: list) -> list[str]:
        """Lines computing every ``(name, expr)`` of ``outputs``."""
        for _, expr in outputs:
            self._count(expr)
        if self.stack_heavy:
            self._plan_groups([expr for _, expr in outputs])
        for name, expr in outputs:
            code = self._print(expr)
            self.lines.append(f"{name} = {code}")
        return self.lines

    def _plan_groups(self, exprs):
        """Group Gram eigendecompositions and msign nodes of equal shape (first-use order)."""
        grams, signs = {}, {}
        for e in exprs:
            for node in preorder_traversal(e):
                if isinstance(node, (GramSqrt, GramInvSqrt)) and isinstance(node.base, MatrixSymbol):
                    key = ("eigh", node.base, node.side)
                    grams.setdefault((node.side, node.base.shape), {}).setdefault(key, None)
                elif isinstance(node, Msign) and not node.arg.has(Msign):
                    signs.setdefault(node.arg.shape, {}).setdefault(node, None)
        for group in list(grams.values()) + list(signs.values()):
            members = list(group)
            if len(members) > 1:
                for m in members:
                    self.groups[m] = members

    def _count(self, expr):
        self.counts[expr] = self.counts.get(expr, 0) + 1
        if self.counts[expr] > 1:
            return
        if isinstance(expr, (GramSqrt, GramInvSqrt, IsotropicScale, PolarFactor)):
            if not isinstance(expr.base, MatrixSymbol):  # a derived base (N = W_Q C_K): computed once if shared
                self._count(expr.base)
            return
        for a in expr.args:
            if isinstance(a, Basic) and (getattr(a, "is_Matrix", False) or a.has(MatrixSymbol)):
                self._count(a)

    def _print(self, expr: Any, **kwargs: Any) -> str:
        if expr in self.temps:
            return self.temps[expr]
        if expr in self.groups:
            return self._print_group(expr)
        method = find_rule(self, expr)  # the node's own _jaxcode/_numpycode, else _print_<Class> along the MRO
        if method is None:
            return self.emptyPrinter(expr)
        code = method(expr)
        is_compound = isinstance(expr, (MatMul, MatAdd, Transpose)) and self.counts.get(expr, 0) > 1
        if isinstance(expr, self.cse_always) or is_compound:
            name = self._temp_name(expr)
            self.lines.append(f"{name} = {code}")
            self.temps[expr] = name
            return name
        return code

    def emptyPrinter(self, expr):
        raise UnsupportedNode(f"{type(self).__name__} has no rule for {type(expr).__name__}: {expr}")

    def _temp_name(self, expr) -> str:
        if isinstance(expr, GramPower):
            return f"G_{self._derived_name(expr)}"
        if isinstance(expr, PolarFactor):
            return f"U_{self._derived_name(expr)}"
        if isinstance(expr, GramInvSqrt):
            return f"C_{self._derived_name(expr)}_inv"
        if isinstance(expr, GramSqrt):
            return f"C_{self._derived_name(expr)}"
        if isinstance(expr, IsotropicScale):
            return f"c_{self._derived_name(expr)}"
        if isinstance(expr, RegularizedSylvester):
            return "H" if expr.side == "outer" else "X"
        self.counter += 1
        return f"{'msign' if isinstance(expr, Msign) else 't'}_{self.counter}"

    def _print_group(self, expr) -> str:
        """One stacked spectral-sign call for every msign of the group (arguments printed first)."""
        members = self.groups[expr]
        args = [self._print(m.arg) for m in members]
        names = [self._temp_name(m) for m in members]
        self.lines.append(f"{', '.join(names)} = {self._stacked_msign(args)}")
        self.temps.update(zip(members, names, strict=True))
        return self.temps[expr]

    def _stacked_msign(self, args) -> str:
        raise UnsupportedNode(f"{type(self).__name__} cannot stack msign calls")

    def _damping_of(self, node) -> str:
        """The λ a Gram node is computed with: the ``damping`` argument for a root of an argument (whatever the
        derivation's own λ: the emitted functions regularize their partners), the node's own λ for a root of a
        derived matrix (``(NᵀN)^{1/4}`` with ``N = W_Q C_K`` in the balancing gauge is undamped)."""
        if isinstance(node.base, MatrixSymbol) and node.base.name in self.arguments:
            return "damping"
        return self._scalar(node.damping)

    def _derived_name(self, node) -> str:
        """A code name for a node of ``node.base``: its short name, or a counter for a derived base."""
        if isinstance(node.base, MatrixSymbol):
            return short_name(node.base)
        self.counter += 1
        return str(self.counter)

    def _eigh(self, node) -> str:
        key = ("eigh", node.base, node.side)
        if key not in self.temps and key in self.groups:
            members = self.groups[key]
            names = [f"eig_{short_name(k[1])}" for k in members]
            bases = ", ".join(self._print(k[1]) for k in members)
            self.lines.append(f"{', '.join(names)} = gram_eigh_stacked(({bases}), damping, {node.side!r})")
            self.temps.update(zip(members, names, strict=True))
        if key not in self.temps:
            name = f"eig_{self._derived_name(node)}"
            self.lines.append(f"{name} = gram_eigh({self._print(node.base)}, {self._damping_of(node)}, {node.side!r})")
            self.temps[key] = name
        return self.temps[key]

    # ---- matrices -------------------------------------------------------------------------
    def _print_MatrixSymbol(self, expr):
        if expr.name not in self.arguments:
            raise UnsupportedNode(f"matrix {expr.name} is not an argument of the emitted function")
        return self.arguments[expr.name]

    def _print_MatMul(self, expr):
        coeff, mats = expr.as_coeff_matrices()
        blocks = [i for i, m in enumerate(mats) if self.blocked_partners
                  and isinstance(m, (GramSqrt, GramInvSqrt)) and BLOCK_DIAGONAL in facts_of(m.base)]
        if blocks:
            if blocks != [len(mats) - 1] or len(mats) < 2:
                raise UnsupportedNode(f"a block-diagonal factor must be the last of a product: {expr}")
            rest = self._print(product(coeff, *mats[:-1]))
            return f"block_right({rest}, {self._print(mats[-1])})"
        prod = " @ ".join(self._atom(m) for m in mats)
        if coeff == 1:
            return prod
        return f"{self._scalar(coeff)} * {'(' + prod + ')' if len(mats) > 1 else prod}"

    def _print_MatAdd(self, expr):
        parts = []
        for t in expr.args:
            coeff, mats = t.as_coeff_matrices() if isinstance(t, MatMul) else (S.One, [t])
            if coeff.is_Number and coeff < 0:
                parts.append(("-", self._atom(product(-coeff, *mats))))
            else:
                parts.append(("+", self._print(t)))
        text = parts[0][1] if parts[0][0] == "+" else f"-{parts[0][1]}"
        for sign, code in parts[1:]:
            text += f" {sign} {code}"
        return text

    def _print_Transpose(self, expr):
        return f"{self._atom(expr.arg)}.mT"

    def _print_Expr(self, expr):  # a scalar (an optimal value); matrix nodes need their own rule
        if getattr(expr, "is_Matrix", False):
            raise UnsupportedNode(f"{type(self).__name__} has no rule for {type(expr).__name__}: {expr}")
        return self._scalar(expr)

    def _atom(self, expr) -> str:
        code = self._print(expr)
        return f"({code})" if isinstance(expr, (MatAdd, MatMul)) and code not in self.temps.values() else code

    # ---- scalars --------------------------------------------------------------------------
    def _scalar(self, expr) -> str:
        """Code for a scalar expression, by one helper per kind of node."""
        if isinstance(expr, Symbol):
            return self._scalar_symbol(expr)
        if isinstance(expr, IsotropicScale):
            return self._print(expr)
        if isinstance(expr, Rational):  # Integer too
            return self._scalar_rational(expr)
        if isinstance(expr, Mul):
            return self._scalar_mul(expr)
        if isinstance(expr, Pow):
            return f"({self._scalar(expr.base)} ** {self._scalar(expr.exp)})"
        if isinstance(expr, Add):
            return "(" + " + ".join(self._scalar(a) for a in expr.args) + ")"
        if find_rule(self, expr) is not None:  # matrix scalars (norms, inner products) print themselves
            return self._print(expr)
        raise UnsupportedNode(f"no scalar rule for {type(expr).__name__}: {expr}")

    def _scalar_symbol(self, expr: Symbol) -> str:
        if expr not in self.scalars:
            raise UnsupportedNode(f"scalar {expr} is not an argument of the emitted function")
        return self.scalars[expr]

    @staticmethod
    def _scalar_rational(expr: Rational) -> str:
        return str(int(expr)) if expr.q == 1 else f"({expr.p} / {expr.q})"

    def _scalar_mul(self, expr: Mul) -> str:
        """``sign(num / den)``: rational factors split into numerator and denominator, ``x**-1`` below the line."""
        num: list[str] = []
        den: list[str] = []
        sign = ""
        for f in expr.args:
            if isinstance(f, Rational):
                if f < 0:
                    sign, f = "-", -f
                num += [str(f.p)] if f.p != 1 else []
                den += [str(f.q)] if f.q != 1 else []
            elif isinstance(f, Pow) and f.exp == -1:
                den.append(self._scalar(f.base))
            else:
                num.append(self._scalar(f))
        text = " * ".join(num) or "1"
        if den:
            text = f"{text} / {den[0] if len(den) == 1 else '(' + ' * '.join(den) + ')'}"
        return f"{sign}({text})"
