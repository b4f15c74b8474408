"""``X^p``: a rational power of a symmetric positive definite matrix, one vocabulary node with a rule for every
interpreter (the float64 and mpmath evaluators, text, LaTeX, NumPy and JAX code).

The lemmas about it (B1–B7: powers of one base add, the inverse of a power, a symmetric split, …) are in
:mod:`derivations.lemmas.spd_powers`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sympy import Basic, Rational, sympify
from sympy.core.sympify import _sympify

from derivations.vocabulary.nodes import SPD, SYMMETRIC, _Derived


@dataclass(frozen=True)
class _Target:
    """How one printer spells the eigendecomposition of :meth:`SPDPower._numpycode`."""

    module: str
    compute: str  # {a} -> the symmetrized input in the compute dtype
    eigh: str  # {a} -> eigenvalues (ascending) and eigenvectors
    at_least: str  # {x}, {e} -> the floor, at least the dtype's smallest normal number
    back: str  # {a}, then {x} -> the result in the output dtype


_TARGETS = {
    "_numpycode": _Target("np", "({a})", "np.linalg.eigh({a})", "np.maximum({x}, np.finfo({e}.dtype).tiny)",
                          "{{x}}.astype(np.float64)"),
    "_jaxcode": _Target("jnp", "{a}.astype(compute_dtype({a}.dtype))", "per_matrix_on_cpu(jnp.linalg.eigh, {a})",
                        "jnp.maximum({x}, jnp.finfo({e}.dtype).tiny)", "{{x}}.astype({a}.dtype)"),
    "_torchcode": _Target("torch", "{a}.to(compute_dtype({a}.dtype))", "torch.linalg.eigh({a})",
                          "({x}).clamp_min(torch.finfo({e}.dtype).tiny)", "{{x}}.to({a}.dtype)"),
}


class SPDPower(_Derived):
    """``X^p`` for a symmetric positive definite ``X`` (a matrix expression) and a rational ``p``.

    Defined through the eigendecomposition ``X = V diag(x) Vᵀ``: ``X^p = V diag(x^p) Vᵀ``, so
    ``X^a X^b = X^{a+b}``, ``X^0 = I`` and ``X^p`` is symmetric positive definite.
    """

    def __new__(cls, arg, exponent):
        arg = _sympify(arg)
        if not getattr(arg, "is_Matrix", False) or arg.shape[0] != arg.shape[1]:
            raise ValueError(f"SPDPower takes a square matrix expression, got {arg!r}")
        return Basic.__new__(cls, arg, sympify(exponent))

    arg = property(lambda self: self.args[0])
    exponent = property(lambda self: self.args[1])

    @property
    def shape(self):
        return self.arg.shape

    @property
    def facts(self):
        return frozenset({SYMMETRIC, SPD})

    def _eval_transpose(self):
        return self

    def _degree(self, scaling):
        """``p`` times the degree of ``X`` (``(cX)^p = c^p X^p`` for ``c > 0``)."""
        return scaling.times(self.exponent, scaling.degree(self.arg))

    def _numeric(self, ev):
        a = ev(self.arg)
        sym = (a + ev.backend.transpose(a)) * ev.backend.scalar(Rational(1, 2))
        return ev.backend.psd_power(sym, float(self.exponent))

    def _numpycode(self, printer):
        """``V diag(x)^p Vᵀ`` from one eigendecomposition per distinct ``X`` (shared by its powers).

        Eigenvalues are floored at ``n·eps·max(x)`` (as :mod:`numerics.optimizer.gauge_balance` does), so a
        rank-deficient factor gives finite powers. JAX and PyTorch compute in at least float32 and return the
        input's dtype; JAX runs the eigh one matrix at a time on the CPU (``per_matrix_on_cpu``: batched LAPACK
        calls at once can deadlock jaxlib's pool).
        """
        target = _TARGETS[printer.printmethod]
        key = ("spd_eigh", self.arg)
        if key not in printer.temps:
            a = printer._print(self.arg)
            printer.counter += 1
            n = printer.counter
            sym, e, v = f"sym_{n}", f"e_{n}", f"v_{n}"
            xp = target.module
            printer.lines.append(f"{sym} = {target.compute.format(a=a)}")
            printer.lines.append(f"{sym} = 0.5 * ({sym} + {xp}.swapaxes({sym}, -1, -2))")
            printer.lines.append(f"{e}, {v} = {target.eigh.format(a=sym)}")
            floor = f"{e}.shape[-1] * {xp}.finfo({e}.dtype).eps * {e}[..., -1:]"
            printer.lines.append(f"{e} = {xp}.maximum({e}, {target.at_least.format(x=floor, e=e)})")
            printer.temps[key] = (e, v, target.back.format(a=a))
        e, v, back = printer.temps[key]
        powered = f"(({v} * {e}[..., None, :] ** {float(self.exponent)!r}) @ {target.module}.swapaxes({v}, -1, -2))"
        return back.format(x=powered)

    _jaxcode = _numpycode
    _torchcode = _numpycode

    def _sympystr(self, printer):
        return f"({printer._print(self.arg)})^({self.exponent})"

    def _latex(self, printer):
        return rf"\left({printer._print(self.arg)}\right)^{{{printer._print(self.exponent)}}}"
