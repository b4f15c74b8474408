"""NumPy printer: a float64 reference module (SVD msign, eigh roots) that imports numpy and its routines.

By default the routines come from :mod:`foundation.compute.numpy_runtime` (one import naming exactly the names the
printed code reads); a standalone module (``--emit numpy --standalone``) inlines the routines its code reaches
instead and imports only ``numpy``. The exponent handling is the JAX target's, printed from the same scaling plan
(:mod:`derivations.printing.split_mode`): the two targets agree on what is right and on what is refused.
"""

from __future__ import annotations

from derivations.engine.rule import EmittedFunction
from derivations.printing.array_module import docstring, header
from derivations.printing.codegen import (
    UnsafeText,
    UnsupportedNode,
    check_docstring,
    check_identifier,
    check_resolved,
    docstring_fragment,
    free_globals,
    routine_parts,
)
from derivations.printing.function_spec import FunctionSpec, Parameter, render_functions
from derivations.printing.split_mode import SHARED_NOTES, ScaledPrinter, compute
from foundation.compute import numpy_runtime


class NumpyPrinter(ScaledPrinter):
    """``_print_<Node>`` rules that call the NumPy routines (:mod:`foundation.compute.numpy_runtime`); the split
    mode and the unit-scaled msign arguments are :class:`~derivations.printing.split_mode.ScaledPrinter`'s."""

    def _print_Msign(self, expr):
        return f"msign_svd({self._unit_arg(expr.arg)})"

    def _print_GramInvSqrt(self, expr):
        if self.split and self._splittable_root(expr):
            return self._root_value(expr)
        return f"psd_power({self._eigh(expr)}, -0.5)"

    def _print_GramSqrt(self, expr):
        if self.split and self._splittable_root(expr):
            return self._root_value(expr)
        return f"psd_power({self._eigh(expr)}, 0.5)"

    def _print_GramPower(self, expr):
        return f"psd_power({self._eigh(expr)}, {float(expr.exponent)!r})"

    def _print_PolarFactor(self, expr):
        if expr.side != "right":
            raise UnsupportedNode(f"NumpyPrinter prints right polar factors only, not {expr}")
        return f"polar_factor({self._print(expr.base)}, {self._damping_of(expr)})"

    def _print_RegularizedSylvester(self, expr):
        if expr.side == "inner":
            return (f"sylvester_gram({self._print(expr.left)}, {self._print(expr.right)}, damping, "
                    f"{self._print(expr.rhs)})")
        return (f"sylvester_dense({self._print(expr.left)}, {self._print(expr.right)}, "
                f"{self._scalar(expr.damping)}, {self._print(expr.rhs)})")


#: the name the emitted code gives the arguments as they were passed (the error names their sizes)
GIVEN = "given"


def _arg_doc(fn: EmittedFunction) -> str:
    """What the keyword arguments are and what the function checks, for this function only."""
    kws = (["eps (step budget ε >= 0)"] if fn.needs_eps else []) + \
        [f"{n} (> 0)" for n in fn.extra_scalars.values()] + \
        ["damping (λ > 0; required)" if fn.positive_damping else "damping (λ >= 0)"]
    return (f"Arguments after * : {', '.join(kws)}. Inputs must be real and finite (checked, with a ValueError or\n"
            "    TypeError naming the argument) and are converted to float64; msign is computed by SVD over\n"
            "    the nonzero singular values; undamped rank-deficient partners give the minimum-norm result\n"
            "    (pseudo-inverse roots). Leading axes are batched. Results are right at any input scale while\n"
            "    they are representable: roots and scalars carry their powers of two apart until the last step,\n"
            "    as in the JAX module; an overflow or an underflow (largest entry below tiny/(16 eps) of\n"
            "    float64) raises a ValueError naming the arguments and their sizes.")


def emit_numpy(title: str, command: str, functions: list[EmittedFunction], scalars: dict,
               standalone: bool = False) -> str:
    """The module text (deterministic byte for byte); its routines imported from
    :mod:`foundation.compute.numpy_runtime`, or with ``standalone`` inlined (those its code reaches)."""
    head = header(docstring_fragment(title) + " (float64 NumPy reference)", docstring_fragment(command), functions, [])
    own = f"__all__ = {sorted(fn.name for fn in functions)!r}\n"
    printed = [render_functions([function_spec(fn, scalars)]) for fn in functions]
    imported, constants, routines = routine_parts("\n".join([own, *printed]), numpy_runtime, standalone,
                                                  SHARED_NOTES)
    numpy = "import numpy as np\n" if "np" in free_globals("\n".join([routines, *printed])) else ""
    parts = [check_docstring(head, "module docstring"), "\n".join(filter(None, [numpy, imported])), own,
             *([constants] if constants else []), *(["\n" + routines + "\n"] if routines else []), *printed]
    return check_resolved("\n".join(parts).rstrip() + "\n", "the emitted NumPy module")


def function_spec(fn: EmittedFunction, scalars: dict) -> FunctionSpec:
    """The function emitted for ``fn``: keyword scalars, one ``validate_arrays`` check, the printed formulas."""
    args = fn.argument_names
    for name in [fn.name, *args, *(out for out, _ in fn.outputs), *fn.extra_scalars.values(), *scalars.values()]:
        check_identifier(name, f"{fn.name}: function, argument or output name")
    shapes = {m.name: (str(m.rows), str(m.cols)) for m in fn.inputs}  # dense, as the symbols are
    names = [out for out, _ in fn.outputs]
    if GIVEN in [*args, *names]:
        raise UnsafeText(f"{fn.name}: {GIVEN!r} names the arguments as given in the emitted code")
    c = compute(fn, scalars, NumpyPrinter)
    outs = "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    lost = f", {' | '.join(c.lost)}" if c.lost else ""
    flagged = f", flagged={c.flagged!r}" if any(c.flagged) else ""
    body = (f"{GIVEN} = {{{', '.join(f'{a!r}: {a}' for a in args)}}}  # for the error: scaling rebinds the names",
            *c.lines,
            f"status = output_status({outs}{lost}{flagged})",
            f"raise_if_not_finite({fn.name!r}, status, {GIVEN})")
    extra = list(fn.extra_scalars.values())
    keywords = [*([Parameter("eps")] if fn.needs_eps else []), *(Parameter(n) for n in extra),
                Parameter("damping", None if fn.positive_damping else "0.0")]
    positive = tuple(extra + (["damping"] if fn.positive_damping else []))
    checks = (f"{', '.join(args)}{',' if len(args) == 1 else ''} = validate_arrays(",
              f"    {fn.name!r}, {shapes!r},",
              "    {" + ", ".join(f"{a!r}: {a}" for a in args) + "},",
              "    {" + ", ".join(f"{p.name!r}: {p.name}" for p in keywords) + f"}}, positive={positive!r})")
    doc = check_docstring(docstring(fn, _arg_doc(fn), shapes=shapes), f"docstring of {fn.name}")
    return FunctionSpec(fn.name, tuple(Parameter(a) for a in args), tuple(keywords), docstring=doc, checks=checks,
                        body=(*body, f"return {', '.join(names)}"))
