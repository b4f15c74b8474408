"""``X^p``: a rational power of a symmetric positive definite matrix, one vocabulary node with a rule for every
interpreter (the float64 and mpmath evaluators, text, LaTeX, NumPy, JAX and PyTorch code).

The lemmas about it (B1–B7: powers of one base add, the inverse of a power, a symmetric split, …) are in
:mod:`derivations.lemmas.spd_powers`.
"""

from __future__ import annotations

from sympy import Basic, Rational, sympify
from sympy.core.sympify import _sympify

from derivations.vocabulary.nodes import SPD, SYMMETRIC, _Derived


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

    @property
    def arg(self) -> Basic:
        """``X``, the base."""
        return self.args[0]

    @property
    def exponent(self) -> Basic:
        """``p``, a rational number."""
        return self.args[1]

    @property
    def shape(self) -> tuple:
        return self.arg.shape

    @property
    def facts(self) -> frozenset:
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
        rank-deficient factor gives finite powers.
        """
        key = ("spd_eigh", self.arg)
        if key not in printer.temps:
            a = printer._print(self.arg)
            printer.counter += 1
            n = printer.counter
            sym, e, v = f"sym_{n}", f"e_{n}", f"v_{n}"
            printer.lines.append(f"{sym} = ({a})")
            printer.lines.append(f"{sym} = 0.5 * ({sym} + np.swapaxes({sym}, -1, -2))")
            printer.lines.append(f"{e}, {v} = np.linalg.eigh({sym})")
            printer.lines.append(f"{e} = np.maximum({e}, np.maximum({e}.shape[-1] * np.finfo({e}.dtype).eps"
                                 f" * {e}[..., -1:], np.finfo({e}.dtype).tiny))")
            printer.temps[key] = (e, v)
        e, v = printer.temps[key]
        return f"(({v} * {e}[..., None, :] ** {float(self.exponent)!r}) @ np.swapaxes({v}, -1, -2)).astype(np.float64)"

    def _jaxcode(self, printer):
        """The runtime's ``spd_power`` (JAX and PyTorch): by eigh, or, for an inverse root ``X^{-1/q}`` in a function
        with the static option ``root``, by the option's choice (``"newton_schulz"``: the certified matmul-only
        iteration whose coefficients the module holds as ``INVERSE_ROOT_SCHEDULES``)."""
        key = ("spd_power", self)
        if key not in printer.temps:  # one call per distinct power, however often the formula uses it
            a, p = printer._print(self.arg), float(self.exponent)
            q = 1 / -self.exponent if self.exponent < 0 else None
            if q is not None and q.is_integer and "root" in getattr(printer, "static_options", ()):
                call = f"spd_power({a}, {p!r}, root, INVERSE_ROOT_SCHEDULES.get({int(q)}))"
            else:
                call = f"spd_power({a}, {p!r})"
            printer.counter += 1
            printer.temps[key] = f"power_{printer.counter}"
            printer.lines.append(f"{printer.temps[key]} = {call}")
        return printer.temps[key]

    _torchcode = _jaxcode

    def _sympystr(self, printer):
        return f"({printer._print(self.arg)})^({self.exponent})"

    def _latex(self, printer):
        return rf"\left({printer._print(self.arg)}\right)^{{{printer._print(self.exponent)}}}"
