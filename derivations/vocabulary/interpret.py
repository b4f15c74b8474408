"""One dispatch for every interpreter of the vocabulary, in the style of SymPy's printers.

An interpreter (the numeric evaluator, the symbolic model, a code printer) is a subclass of
:class:`sympy.printing.printer.Printer`. For a node it tries, in order:

1. the node's own method named by the interpreter's ``printmethod`` (``_numeric``,
   ``_symbolic``, ``_jaxcode``, ``_numpycode``), called as ``node.<printmethod>(interpreter)``:
   a new node brings all its rules in its own class, so adding a node touches one file;
2. the interpreter's ``<rule_prefix><Class>`` method (``_eval_MatMul``, ``_print_Msign``) for the
   first class along the node's method resolution order, exactly as SymPy's ``Printer._print``;
3. otherwise :class:`MissingRule`, which names the node and the interpreter: the same failure for
   every interpreter, never a silent wrong answer or broken code.
"""

from __future__ import annotations

from sympy.printing.printer import Printer


class MissingRule(TypeError):
    """An interpreter has no rule for a node (names the node's class, the node and the interpreter)."""

    def __init__(self, interpreter: str, expr, hint: str = ""):
        self.interpreter, self.node = interpreter, type(expr).__name__
        super().__init__(f"{interpreter} has no rule for {type(expr).__name__}: {expr}"
                         + (f" ({hint})" if hint else ""))


def find_rule(interpreter, expr):
    """The bound rule ``interpreter`` applies to ``expr`` (``rule(expr)``), or ``None``."""
    hook = getattr(type(expr), interpreter.printmethod, None) if interpreter.printmethod else None
    if hook is not None and not isinstance(expr, type):
        return lambda e, **kw: hook(e, interpreter, **kw)
    for cls in type(expr).__mro__:
        method = getattr(interpreter, f"{interpreter.rule_prefix}{cls.__name__}", None)
        if method is not None:
            return method
    return None


class Interpreter(Printer):
    """Base of the interpreters: class-hierarchy dispatch, node-carried rules, strict failures."""

    #: prefix of the per-class rule methods
    rule_prefix = "_eval_"
    #: name of the per-node rule method (SymPy's ``printmethod``)
    printmethod: str | None = None
    #: how failures name this interpreter
    interpreter_name = "interpreter"

    def _print(self, expr, **kwargs):
        rule = find_rule(self, expr)
        if rule is None:
            return self.emptyPrinter(expr)
        self._print_level += 1
        try:
            return rule(expr, **kwargs)
        finally:
            self._print_level -= 1

    def emptyPrinter(self, expr):  # SymPy's name for the fallback
        raise MissingRule(self.interpreter_name, expr)

    def doprint(self, expr):
        return self._print(expr)
