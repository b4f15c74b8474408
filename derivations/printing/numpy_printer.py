"""NumPy printer: a float64 reference module (SVD msign, eigh roots) that imports only numpy."""

from __future__ import annotations

from numerics import numpy_kernels as K

from .array_module import docstring, header
from .codegen import EmittedFunction, MatrixCodePrinter, kernel_source

KERNELS = (K.gram_eigh, K.psd_power, K.isotropic_scale, K.msign_svd, K.sylvester_dense, K.sylvester_gram)


class NumpyPrinter(MatrixCodePrinter):
    """``_print_<Node>`` rules that call the inlined NumPy kernels."""

    printmethod = "_numpycode"  # a node may carry its own rule for this target

    def _print_Msign(self, expr):
        return f"msign_svd({self._print(expr.arg)})"

    def _print_GramInvSqrt(self, expr):
        return f"psd_power({self._eigh(expr)}, -0.5)"

    def _print_GramSqrt(self, expr):
        return f"psd_power({self._eigh(expr)}, 0.5)"

    def _print_RegularizedSylvester(self, expr):
        if expr.side == "inner":
            return (f"sylvester_gram({self._print(expr.left)}, {self._print(expr.right)}, damping, "
                    f"{self._print(expr.rhs)})")
        return (f"sylvester_dense({self._print(expr.left)}, {self._print(expr.right)}, "
                f"{self._scalar(expr.damping)}, {self._print(expr.rhs)})")

    def _print_IsotropicScale(self, expr):
        return f"isotropic_scale({self._print(expr.base)}, damping)"


ARG_DOC = """Arguments after * : eps (step budget ε >= 0), damping (λ >= 0). Inputs are converted to
    float64; msign is computed by SVD over the nonzero singular values."""


def emit_numpy(title: str, command: str, functions: list[EmittedFunction], scalars: dict) -> str:
    parts = [header(title + " (float64 NumPy reference)", command, functions, []),
             "import numpy as np\n",
             f"__all__ = {sorted(fn.name for fn in functions)!r}\n",
             "\n" + kernel_source(KERNELS) + "\n"]
    for fn in functions:
        args = fn.argument_names
        printer = NumpyPrinter({a: a for a in args}, {**scalars, **fn.extra_scalars})
        body = printer.body([(out, der.formula) for out, der in fn.outputs])
        outs = ", ".join(out for out, _ in fn.outputs)
        eps_kw = ("eps, " if fn.needs_eps else "") + "".join(f"{v}, " for v in fn.extra_scalars.values())
        lines = ["", f"def {fn.name}({', '.join(args)}, *, {eps_kw}damping=0.0):", docstring(fn, ARG_DOC),
                 *[f"    {a} = np.asarray({a}, dtype=np.float64)" for a in args],
                 *[f"    {line}" for line in body],
                 f"    return {outs}"]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts).rstrip() + "\n"
