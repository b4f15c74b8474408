"""Norm and sharp-map nodes of the vocabulary: ``‖A‖_F``, ``‖A‖_max``, the entrywise ℓ1 norm, the largest
column norm ``‖A‖_{1→2}`` and its dual ``‖A‖_{2,1}``, the aspect scale ``√(m/n)``, the RMS→RMS operator norm, and
the sharp maps ``sign(A)``, ``A/‖A‖_F``, ``colunit(A)`` and the top singular pair ``u₁v₁ᵀ``. Each node carries
its evaluation and printing rules and its homogeneity degree
(``_degree``, read by :mod:`derivations.printing.scaling`); the norm families
that solve a ball through its dual norm are in :mod:`derivations.engine.norms`."""

from __future__ import annotations

import mpmath
import numpy as np
from sympy import S
from sympy.core.sympify import _sympify
from sympy.matrices.expressions import Identity, Transpose

from derivations.vocabulary.nodes import MatrixFunction, OpNorm, PolarFactor, _MatrixScalar

# ---- entrywise helpers shared by the float64 and mpmath backends ----------------------------


def _entries(a):
    if isinstance(a, mpmath.matrix):
        return [a[i, j] for i in range(a.rows) for j in range(a.cols)]
    return list(np.ravel(a))


def _entrywise(a, fn):
    if isinstance(a, mpmath.matrix):
        return a.apply(fn)
    return np.vectorize(fn, otypes=[float])(a) if np.ndim(a) else fn(a)


def _sign(x):
    return (x > 0) - (x < 0)


def _bind(printer, code: str) -> str:
    """A name for ``code`` in the printer's straight-line program (so it is printed once)."""
    if code.isidentifier():
        return code
    printer.counter += 1
    name = f"t_{printer.counter}"
    printer.lines.append(f"{name} = {code}")
    return name


def _module(printer) -> str:
    return "jnp" if printer.printmethod == "_jaxcode" else "np"


_AXES = "axis=(-2, -1), keepdims=True"


# ---- scalar nodes ---------------------------------------------------------------------------
class FrobeniusNorm(_MatrixScalar):
    """``‖A‖_F = ⟨A, A⟩^{1/2}`` (self-dual)."""

    is_nonnegative = True

    def _degree(self, scaling):
        """A norm: ``‖cA‖ = c‖A‖``, the degree of ``A``."""
        return scaling.degree(self.args[0])

    def _numeric(self, ev):
        a = ev(self.args[0])
        return ev.backend.inner(a, a) ** 0.5

    def _sympystr(self, printer):
        return f"||{printer._print(self.args[0])}||_F"

    def _latex(self, printer):
        return rf"\left\| {printer._print(self.args[0])} \right\|_{{F}}"

    def _numpycode(self, printer):
        return (f"{_module(printer)}.sqrt({_module(printer)}.sum("
                f"{_bind(printer, printer._print(self.args[0]))} ** 2, {_AXES}))")

    _jaxcode = _numpycode


class MaxAbsNorm(_MatrixScalar):
    """``‖A‖_max = max_ij |A_ij|`` (the elementwise ℓ∞ norm)."""

    is_nonnegative = True

    def _degree(self, scaling):
        """A norm: ``‖cA‖ = c‖A‖``, the degree of ``A``."""
        return scaling.degree(self.args[0])

    def _numeric(self, ev):
        return max(abs(x) for x in _entries(ev(self.args[0])))

    def _sympystr(self, printer):
        return f"||{printer._print(self.args[0])}||_max"

    def _latex(self, printer):
        return rf"\left\| {printer._print(self.args[0])} \right\|_{{\max}}"

    def _numpycode(self, printer):
        m = _module(printer)
        return f"{m}.max({m}.abs({printer._print(self.args[0])}), {_AXES})"

    _jaxcode = _numpycode


class EntrywiseL1Norm(_MatrixScalar):
    """``‖A‖_1 = Σ_ij |A_ij|`` (dual of the max-abs norm)."""

    is_nonnegative = True

    def _degree(self, scaling):
        """A norm: ``‖cA‖ = c‖A‖``, the degree of ``A``."""
        return scaling.degree(self.args[0])

    def _numeric(self, ev):
        return sum((abs(x) for x in _entries(ev(self.args[0]))), ev.backend.scalar(0))

    def _sympystr(self, printer):
        return f"||{printer._print(self.args[0])}||_1"

    def _latex(self, printer):
        return rf"\left\| {printer._print(self.args[0])} \right\|_{{1}}"

    def _numpycode(self, printer):
        m = _module(printer)
        return f"{m}.sum({m}.abs({printer._print(self.args[0])}), {_AXES})"

    _jaxcode = _numpycode


def _column_norms(a) -> list:
    """The 2-norm of every column of a float64 array or an mpmath matrix."""
    if isinstance(a, mpmath.matrix):
        return [mpmath.sqrt(mpmath.fsum(a[i, j] ** 2 for i in range(a.rows))) for j in range(a.cols)]
    return list(np.linalg.norm(np.asarray(a, dtype=np.float64), axis=0))


def _column_code(printer, a: str) -> str:
    """Code of the column 2-norms of ``a``, shape ``(..., 1, n)``."""
    m = _module(printer)
    return f"{m}.sqrt({m}.sum({a} ** 2, axis=-2, keepdims=True))"


class MaxColumnNorm(_MatrixScalar):
    """``‖A‖_{1→2} = max_j ‖A e_j‖₂``: the ℓ1 → ℓ2 operator norm (the largest column norm)."""

    is_nonnegative = True

    def _degree(self, scaling):
        """A norm: ``‖cA‖ = c‖A‖``, the degree of ``A``."""
        return scaling.degree(self.args[0])

    def _numeric(self, ev):
        return max(_column_norms(ev(self.args[0])))

    def _sympystr(self, printer):
        return f"||{printer._print(self.args[0])}||_1->2"

    def _latex(self, printer):
        return rf"\left\| {printer._print(self.args[0])} \right\|_{{1 \to 2}}"

    def _numpycode(self, printer):
        a = _bind(printer, printer._print(self.args[0]))
        return f"{_module(printer)}.max({_column_code(printer, a)}, axis=-1, keepdims=True)"

    _jaxcode = _numpycode


class ColumnNormSum(_MatrixScalar):
    """``‖A‖_{2,1} = Σ_j ‖A e_j‖₂``: the dual of the ℓ1 → ℓ2 operator norm."""

    is_nonnegative = True

    def _degree(self, scaling):
        """A norm: ``‖cA‖ = c‖A‖``, the degree of ``A``."""
        return scaling.degree(self.args[0])

    def _numeric(self, ev):
        return sum(_column_norms(ev(self.args[0])), ev.backend.scalar(0))

    def _sympystr(self, printer):
        return f"||{printer._print(self.args[0])}||_2,1"

    def _latex(self, printer):
        return rf"\left\| {printer._print(self.args[0])} \right\|_{{2,1}}"

    def _numpycode(self, printer):
        a = _bind(printer, printer._print(self.args[0]))
        return f"{_module(printer)}.sum({_column_code(printer, a)}, axis=-1, keepdims=True)"

    _jaxcode = _numpycode


class AspectScale(_MatrixScalar):
    """``√(m/n)`` for an ``m × n`` matrix: the RMS→RMS norm is ``‖A‖_op / √(m/n)``.

    It depends on the shape alone, so it is built on a canonical matrix of that shape: a polar factor ``U_W`` (or its
    transpose) stands for its partner ``W`` (the same shape, and the matrix the emitted code holds), and a square
    identity gives ``1``."""

    is_positive = True

    def __new__(cls, arg):
        arg = _sympify(arg)
        if isinstance(arg, Identity):
            return S.One
        if isinstance(arg, PolarFactor):
            arg = arg.base
        elif isinstance(arg, Transpose) and isinstance(arg.arg, PolarFactor):
            arg = Transpose(arg.arg.base)
        return _MatrixScalar.__new__(cls, arg)

    def _degree(self, scaling):
        """Degree 0: a function of the shape alone."""
        return {}

    def _numeric(self, ev):
        m, n = ev.shape(self.args[0])
        return (ev.backend.scalar(m) / n) ** 0.5

    def ratio(self):
        rows, cols = self.args[0].shape
        return rows / cols

    def _sympystr(self, printer):
        return f"sqrt({printer._print(self.ratio())})"

    def _latex(self, printer):
        return rf"\sqrt{{{printer._print(self.ratio())}}}"

    def _numpycode(self, printer):
        a = _bind(printer, printer._print(self.args[0]))
        return f"({a}.shape[-2] / {a}.shape[-1]) ** 0.5"

    _jaxcode = _numpycode


class RmsOpNorm(_MatrixScalar):
    """``‖A‖_{RMS→RMS} = sup ‖Ax‖_rms / ‖x‖_rms = √(n/m) ‖A‖_op`` for ``A`` of shape ``m × n``."""

    is_nonnegative = True

    def _degree(self, scaling):
        """A norm: ``‖cA‖ = c‖A‖``, the degree of ``A``."""
        return scaling.degree(self.args[0])

    def _numeric(self, ev):
        return ev(OpNorm(self.args[0])) / ev(AspectScale(self.args[0]))

    def _sympystr(self, printer):
        return f"||{printer._print(self.args[0])}||_rms"

    def _latex(self, printer):
        return rf"\left\| {printer._print(self.args[0])} \right\|_{{\mathrm{{RMS}}\to\mathrm{{RMS}}}}"

    def _numpycode(self, printer):
        m = _module(printer)
        a = _bind(printer, printer._print(self.args[0]))
        return f"{m}.linalg.norm({a}, ord=2, {_AXES}) * ({a}.shape[-1] / {a}.shape[-2]) ** 0.5"

    _jaxcode = _numpycode


# ---- sharp maps (matrix nodes) --------------------------------------------------------------
class Sign(MatrixFunction):
    """Entrywise sign: the sharp map of the max-abs norm (``sign(0) = 0``)."""

    def _degree(self, scaling):
        """Degree 0: ``sign(cA) = sign(A)`` for ``c > 0``."""
        return scaling.invariant(self.arg)

    def _numeric(self, ev):
        return _entrywise(ev(self.arg), _sign)

    def _sympystr(self, printer):
        return f"sign({printer._print(self.arg)})"

    def _latex(self, printer):
        return rf"\operatorname{{sign}}\left({printer._print(self.arg)}\right)"

    def _numpycode(self, printer):
        return f"{_module(printer)}.sign({printer._print(self.arg)})"

    _jaxcode = _numpycode


class FrobeniusUnit(MatrixFunction):
    """``A / ‖A‖_F`` (zero for ``A = 0``): the sharp map of the Frobenius norm."""

    def _degree(self, scaling):
        """Degree 0: ``unit_F(cA) = unit_F(A)`` for ``c > 0``."""
        return scaling.invariant(self.arg)

    def _numeric(self, ev):
        a = ev(self.arg)
        norm = ev.backend.inner(a, a) ** 0.5
        return a * (1 / norm) if norm > 0 else a * 0

    def _sympystr(self, printer):
        return f"unit_F({printer._print(self.arg)})"

    def _latex(self, printer):
        arg = printer._print(self.arg)
        return rf"\frac{{{arg}}}{{\left\| {arg} \right\|_{{F}}}}"

    def _numpycode(self, printer):
        m = _module(printer)
        a = _bind(printer, printer._print(self.arg))
        tiny = f"{m}.finfo({a}.dtype).tiny"
        return f"{a} / {m}.maximum({m}.sqrt({m}.sum({a} ** 2, {_AXES})), {tiny})"

    _jaxcode = _numpycode


class TopSingular(MatrixFunction):
    """``u₁v₁ᵀ`` for the top singular pair of ``A``: the sharp map of the nuclear norm.

    Unique when the largest singular value is simple (almost surely for random instances); any
    unit-nuclear-norm matrix in the span of the top singular pairs attains the same value.
    """

    def _degree(self, scaling):
        """Degree 0: the singular vectors of ``cA`` are those of ``A`` for ``c > 0``."""
        return scaling.invariant(self.arg)

    def _numeric(self, ev):
        a = ev(self.arg)
        if isinstance(a, mpmath.matrix):
            u, s, v = mpmath.svd_r(a, full_matrices=False, compute_uv=True)
            k = max(range(len(s)), key=lambda i: s[i])
            return u[:, k] * v[k, :]
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        return np.outer(u[:, 0], vt[0])

    def _sympystr(self, printer):
        return f"top_pair({printer._print(self.arg)})"

    def _latex(self, printer):
        return rf"u_1 v_1^{{\top}}\left({printer._print(self.arg)}\right)"

    def _numpycode(self, printer):
        m = _module(printer)
        a = _bind(printer, printer._print(self.arg))
        printer.counter += 1
        u, vt = f"u_{printer.counter}", f"vt_{printer.counter}"
        cast = f"{a}.astype(compute_dtype({a}.dtype))" if m == "jnp" else a
        printer.lines.append(f"{u}, _, {vt} = {m}.linalg.svd({cast}, full_matrices=False)")
        return f"({u}[..., :, :1] @ {vt}[..., :1, :]).astype({a}.dtype)"

    _jaxcode = _numpycode


class ColumnUnit(MatrixFunction):
    """``colunit(A) = [A e_j / ‖A e_j‖₂]_j`` (a zero column stays zero): the sharp map of the ℓ1 → ℓ2 norm."""

    def _degree(self, scaling):
        """Degree 0: ``colunit(cA) = colunit(A)`` for ``c > 0``."""
        return scaling.invariant(self.arg)

    def _numeric(self, ev):
        a = ev(self.arg)
        norms = _column_norms(a)
        if isinstance(a, mpmath.matrix):
            return mpmath.matrix([[a[i, j] / norms[j] if norms[j] > 0 else 0 * a[i, j] for j in range(a.cols)]
                                  for i in range(a.rows)])
        safe = np.where(np.asarray(norms) > 0, norms, 1.0)
        return a / safe

    def _sympystr(self, printer):
        return f"colunit({printer._print(self.arg)})"

    def _latex(self, printer):
        return rf"\operatorname{{colunit}}\left({printer._print(self.arg)}\right)"

    def _numpycode(self, printer):
        m = _module(printer)
        a = _bind(printer, printer._print(self.arg))
        return f"{a} / {m}.maximum({_column_code(printer, a)}, {m}.finfo({a}.dtype).tiny)"

    _jaxcode = _numpycode

    def _torchcode(self, printer):
        a = _bind(printer, printer._print(self.arg))
        return f"{a} / torch.sqrt(torch.sum({a} ** 2, dim=-2, keepdim=True)).clamp_min(torch.finfo({a}.dtype).tiny)"
