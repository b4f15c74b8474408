"""What a candidate is compared with: a :class:`Target` (a reference expression with the names,
definitions and sizes needed to sample instances), read off a derivation by :func:`target_of`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sympy import Basic, Symbol, sstr
from sympy.matrices.expressions import MatrixSymbol

from derivations.parsing.notation import GREEK
from derivations.vocabulary.latex_notation import latex
from derivations.vocabulary.nodes import GramSqrt, IsotropicScale, PolarFactor, Projector, _Derived


@dataclass
class Target:
    """A reference expression with the names, definitions and sizes needed to sample instances."""

    name: str
    expr: Basic
    namespace: dict
    definitions: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)
    sizes: list = field(default_factory=list)
    symbolic_dims: dict | None = None


def _named_nodes(exprs) -> dict:
    """Names of every symbol and every derived node that prints as a bare name (``C_K``, ``H``), the latter also
    under the name its LaTeX reads as when that is a Greek subscript (``H_{\\lambda}``: ``H_lambda``)."""
    out = {}
    for e in exprs:
        for node in _preorder(e):
            if isinstance(node, MatrixSymbol) or (isinstance(node, Symbol) and not node.is_integer):
                out.setdefault(str(node.name), node)
            elif isinstance(node, (_Derived, IsotropicScale)):
                text = sstr(node)
                if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", text):
                    out.setdefault(text, node)
                    m = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)_\{\\([A-Za-z]+)\}", latex(node))
                    if m and m.group(2) in GREEK:  # and the name its LaTeX reads as: H_{\lambda} is H_lambda
                        out.setdefault(f"{m.group(1)}_{GREEK[m.group(2)]}", node)
    for name, node in list(out.items()):  # C_X, U_X, P_X, c_X of every tall factor W_X
        if isinstance(node, MatrixSymbol) and name.startswith("W_"):
            label = name[2:]
            out.setdefault(f"C_{label}", GramSqrt(node))
            out.setdefault(f"U_{label}", PolarFactor(node))
            out.setdefault(f"P_{label}", Projector(node))
            out.setdefault(f"c_{label}", IsotropicScale(node))
    return out


def _preorder(e):
    stack = [e]
    while stack:
        node = stack.pop()
        if not isinstance(node, Basic):
            continue
        yield node
        stack.extend(node.args)


def target_of(der, module=None) -> Target:
    """The comparison target of a derivation (its result and its context)."""
    ctx = der.context
    definitions = dict(ctx.definitions)
    exprs = [der.formula, *definitions, *definitions.values(), *der.start.parts(), *getattr(der, "names", ())]
    sizes = [dict(ctx.mpmath_dims)] if ctx.mpmath_dims else []
    sizes += [dict(s) for s in ctx.check_dims if dict(s) not in sizes]
    if ctx.symbolic_dims and dict(ctx.symbolic_dims) not in sizes:
        sizes.insert(0, dict(ctx.symbolic_dims))
    if module is not None:  # the rule's other symbols and chain-rule definitions (G_K next to G_Q)
        for value in vars(module).values():
            if isinstance(value, (MatrixSymbol, Symbol)):
                exprs.append(value)
            elif isinstance(value, dict) and value and all(isinstance(k, MatrixSymbol) for k in value):
                for k, v in value.items():
                    if not (isinstance(v, Basic) and _sized(k, sizes)):  # stated at sizes this derivation has
                        continue
                    if k not in definitions and not _uses(v, definitions):
                        definitions[k] = v
                    exprs += [k, v]
    namespace = _named_nodes(exprs)
    for dim in getattr(der, "dimensions", ()):  # shape symbols a count or a bound is written in (classics)
        namespace.setdefault(str(dim), dim)
    for sym in sorted(der.formula.atoms(Symbol), key=str):  # every name the result prints with (n, T, V/d)
        namespace.setdefault(str(sym), sym)
    return Target(der.name, der.formula, namespace, definitions, dict(ctx.scalars), sizes[:3],
                  dict(ctx.symbolic_dims) or None)


def _sized(name, sizes) -> bool:
    """Every dimension of ``name``'s shape has a value at the derivation's sizes (``joint.update`` has no d_h)."""
    dims = set().union(*(getattr(n, "free_symbols", set()) for n in name.shape))
    return not sizes or all(dims <= set(s) for s in sizes)


def _uses(expr, definitions) -> bool:
    return bool(set(definitions) & expr.atoms(MatrixSymbol))


__all__ = ["Target", "target_of"]
