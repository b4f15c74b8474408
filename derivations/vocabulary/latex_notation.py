"""The workbench's LaTeX notation for expressions: ``\\top`` for transposes, ``\\Delta W`` for steps.

One printer, used by the lemma statements (layer 2) and by the derivation printers above them.
"""

from __future__ import annotations

from sympy.printing.latex import LatexPrinter


class WorkbenchLatexPrinter(LatexPrinter):
    """SymPy's LaTeX printer with the workbench's notation."""

    def _print_Transpose(self, expr):
        arg = self._print(expr.arg)
        if not (expr.arg.is_Symbol or getattr(expr.arg, "is_MatrixSymbol", False)) and (" " in arg or "^" in arg):
            arg = rf"\left({arg}\right)"
        return rf"{arg}^{{\top}}"

    def _print_MatrixSymbol(self, expr):
        name = expr.name
        delta = name.startswith("dW_")
        if delta:
            name = name[1:]
        base, _, sub = name.partition("_")
        text = f"{base}_{{{sub}}}" if sub else base
        return rf"\Delta {text}" if delta else text

    _print_FactMatrix = _print_MatrixSymbol


def latex(expr) -> str:
    """``expr`` in the workbench's LaTeX notation."""
    return WorkbenchLatexPrinter().doprint(expr)
