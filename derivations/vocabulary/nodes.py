"""Matrix-expression vocabulary: the SymPy nodes the derivations are written in.

SymPy has products, sums and transposes of matrix symbols, but no spectral sign, no PSD
root of a Gram matrix and no polar factor. Those are added here as ``MatrixExpr``
subclasses, together with the scalar nodes of an optimization problem (Frobenius inner
product, operator and nuclear norms). Matrices carry their structural facts as data
(:class:`FactMatrix`), and the lemmas consult those facts before they rewrite anything.

Conventions:

* ``msign(A) = U Vᵀ`` over the nonzero singular values of ``A = U Σ Vᵀ`` (a partial
  isometry: zero singular values map to zero).
* ``GramSqrt(W, λ, "right") = (WᵀW + λI)^{1/2}`` for a tall ``W`` (the ``C_W`` of the
  polar decomposition ``W = U_W C_W``); ``side="left"`` is ``(WWᵀ + λI)^{1/2}`` for a wide
  ``W`` (``W = C_W U_W``).
* ``PolarFactor(W, λ, side)``: ``W C_W⁻¹`` (right) or ``C_W⁻¹ W`` (left); it has orthonormal
  columns (rows) when ``λ = 0`` and ``W`` has full column (row) rank.

Every node also states its homogeneity degree, ``_degree(self, scaling)``: how its value scales when its
arguments are scaled (``msign(cA) = msign(A)``: degree 0; ``‖cA‖_op = c‖A‖_op``: the degree of ``A``), which
the exact-scaling plan of the emitted JAX code reads (:mod:`derivations.printing.scaling`, where ``scaling``
and its helpers are described).
"""

from __future__ import annotations

from sympy import Basic, Expr, Rational, S, Symbol, Tuple, sympify
from sympy.core.symbol import Str
from sympy.core.sympify import _sympify
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixExpr, MatrixSymbol, Transpose

# Structural facts a matrix can carry.
FULL_COLUMN_RANK = "full_column_rank"
FULL_ROW_RANK = "full_row_rank"
ORTHONORMAL_COLUMNS = "orthonormal_columns"
ORTHONORMAL_ROWS = "orthonormal_rows"
SYMMETRIC = "symmetric"
SPD = "symmetric_positive_definite"
ISOTROPIC_COLUMNS = "isotropic_columns"  # WᵀW = c² I for a scalar c > 0
BLOCK_DIAGONAL = "block_diagonal"  # W = blockdiag(B_1, …, B_k): stored and computed block by block
KNOWN_FACTS = frozenset(
    {FULL_COLUMN_RANK, FULL_ROW_RANK, ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS, SYMMETRIC, SPD,
     ISOTROPIC_COLUMNS, BLOCK_DIAGONAL}
)
SIDES = ("right", "left")


def facts_of(expr: Basic) -> frozenset:
    """Structural facts that hold for ``expr`` (empty for an expression with no known facts)."""
    getter = getattr(expr, "facts", None)
    if getter is not None:
        return frozenset(getter)
    if isinstance(expr, Transpose):
        swap = {ORTHONORMAL_COLUMNS: ORTHONORMAL_ROWS, ORTHONORMAL_ROWS: ORTHONORMAL_COLUMNS,
                FULL_COLUMN_RANK: FULL_ROW_RANK, FULL_ROW_RANK: FULL_COLUMN_RANK}
        return frozenset(swap.get(f, f) for f in facts_of(expr.arg))
    return frozenset()


def short_name(matrix: Basic) -> str:
    """``W_K`` → ``K``; the label used for the derived objects ``C_K``, ``U_K``, ``P_K``."""
    if not hasattr(matrix, "name"):
        return f"[{matrix}]"
    return str(matrix.name).removeprefix("W_")


def latex_subscript(matrix: Basic, printer) -> str:
    """:func:`short_name` in LaTeX: ``K`` for ``W_K``; a compound base as its own LaTeX (``W_{Q} C_{K}``)."""
    return short_name(matrix) if hasattr(matrix, "name") else printer._print(matrix)


def root_subscript(node, printer) -> str:
    """The subscript of a Gram root or polar factor in LaTeX: the base's (:func:`latex_subscript`), transposed for a
    left one, since ``(XXᵀ)^{1/2}`` is the right Gram root of ``Xᵀ``: ``C_{X^{\\top}}`` (so that the left and
    the right root of one matrix never print alike)."""
    sub = latex_subscript(matrix := node.base, printer)
    if node.side == "right":
        return sub
    return rf"{sub}^{{\top}}" if hasattr(matrix, "name") else rf"\left({sub}\right)^{{\top}}"


class FactMatrix(MatrixSymbol):
    """A matrix symbol that carries its structural facts as data.

    ``FactMatrix("W_K", d, d_h, facts=[FULL_COLUMN_RANK])``. The facts are part of the
    node's arguments, so they survive every SymPy rebuild and take part in equality.
    """

    def __new__(cls, name, n, m, facts=()):
        n, m = _sympify(n), _sympify(m)
        cls._check_dim(n)
        cls._check_dim(m)
        if isinstance(name, str):
            name = Str(name)
        if isinstance(facts, Tuple):
            facts = [str(f) for f in facts]
        unknown = set(facts) - KNOWN_FACTS
        if unknown:
            raise ValueError(f"unknown structural fact(s) {sorted(unknown)}; known: {sorted(KNOWN_FACTS)}")
        return Basic.__new__(cls, name, n, m, Tuple(*[Str(f) for f in sorted(set(facts))]))

    @property
    def facts(self) -> frozenset[str]:
        return frozenset(f.name for f in self.args[3])

    def _eval_transpose(self):
        if SYMMETRIC in self.facts or SPD in self.facts:
            return self
        return Transpose(self)


class _Derived(MatrixExpr):
    """Base of the nodes defined as a function of a base matrix (opaque to substitution)."""

    opaque = True  # substitutions of the base matrix do not reach inside


def _check_side(side) -> Str:
    side = str(side)
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    return Str(side)


class MatrixFunction(MatrixExpr):
    """A matrix function of one matrix argument, of the argument's shape (msign, entrywise sign, …)."""

    def __new__(cls, arg):
        arg = _sympify(arg)
        if not getattr(arg, "is_Matrix", False):
            raise TypeError(f"{cls.__name__} takes a matrix expression, got {arg!r}")
        return Basic.__new__(cls, arg)

    @property
    def arg(self) -> Basic:
        return self.args[0]

    @property
    def shape(self) -> tuple[Expr, Expr]:
        return self.arg.shape


class Msign(MatrixFunction):
    """Spectral sign ``msign(A) = U Vᵀ`` over the nonzero singular values of ``A``."""

    def _degree(self, scaling):
        """Degree 0: ``msign(cA) = msign(A)`` for ``c > 0``."""
        return scaling.invariant(self.arg)

    def _sympystr(self, printer):
        return f"msign({printer._print(self.arg)})"

    def _latex(self, printer):
        return rf"\operatorname{{msign}}\left({printer._print(self.arg)}\right)"


class _GramNode(_Derived):
    """Common part of the Gram-root nodes: base matrix ``W``, damping ``λ``, side."""

    exponent = S.Half

    def __new__(cls, base, damping=S.Zero, side="right"):
        base = _sympify(base)
        return Basic.__new__(cls, base, sympify(damping), _check_side(side))

    @property
    def base(self) -> MatrixExpr:
        return self.args[0]

    @property
    def damping(self) -> Expr:
        return self.args[1]

    @property
    def side(self) -> str:
        return self.args[2].name

    @property
    def size(self) -> Expr:
        return self.base.shape[1] if self.side == "right" else self.base.shape[0]

    @property
    def shape(self) -> tuple[Expr, Expr]:
        return (self.size, self.size)

    @property
    def facts(self) -> frozenset[str]:
        return frozenset({SYMMETRIC, SPD})

    def gram(self) -> MatrixExpr:
        """The Gram matrix ``WᵀW`` (right) or ``WWᵀ`` (left), without damping."""
        w = self.base
        return w.T * w if self.side == "right" else w * w.T

    def _eval_transpose(self):
        return self  # a PSD root of a symmetric matrix is symmetric

    def label(self) -> str:
        return f"C_{short_name(self.base)}"

    def _degree(self, scaling):
        """``(WᵀW + λI)^p`` has ``2p`` times the degree of ``W`` (``λ`` scaled as ``W``'s square)."""
        return scaling.times(2 * self.exponent, scaling.gram_base(self))


class GramSqrt(_GramNode):
    """``C_W = (WᵀW + λI)^{1/2}`` (right) or ``(WWᵀ + λI)^{1/2}`` (left), symmetric PSD."""

    exponent = S.Half

    def _sympystr(self, printer):
        return self.label()

    def _latex(self, printer):
        return f"C_{{{root_subscript(self, printer)}}}"


class GramInvSqrt(_GramNode):
    """``C_W⁻¹ = (WᵀW + λI)^{-1/2}``: exists when ``λ > 0`` or ``W`` has full rank on its side."""

    exponent = -S.Half

    def _sympystr(self, printer):
        return f"{self.label()}^-1"

    def _latex(self, printer):
        return f"C_{{{root_subscript(self, printer)}}}^{{-1}}"



class GramPower(GramSqrt):
    """``(WᵀW + λI)^p`` (right) or ``(WWᵀ + λI)^p`` (left) for a rational ``p`` other than ±1/2.

    Evaluated as the PSD power of the Gram matrix (eigendecomposition); the symbolic model
    treats it as an opaque symmetric matrix, so an identity involving it is numeric only.
    """

    def __new__(cls, base, damping, side, power):
        obj = GramSqrt.__new__(cls, base, damping, side)
        power = sympify(power)  # a lemma statement's pattern exponent stays a symbol; every instance is rational
        obj._args = obj._args + (power if power.free_symbols else Rational(power),)
        return obj

    @property
    def exponent(self):
        return self.args[3]

    def _damped_gram(self):
        g = self.gram()
        return g if self.damping == 0 else MatAdd(g, MatMul(self.damping, Identity(self.size)))

    def _sympystr(self, printer):
        return f"({printer._print(self._damped_gram())})^({self.exponent})"

    def _latex(self, printer):
        """``C_W^{2p}``: the Gram root's power, as the docs write it (``C_W`` is ``(WᵀW + λI)^{1/2}``)."""
        return rf"C_{{{root_subscript(self, printer)}}}^{{{printer._print(2 * self.exponent)}}}"


class PolarFactor(_Derived):
    """``U_W = W C_W⁻¹`` (right) or ``C_W⁻¹ W`` (left): the isometric polar factor of ``W``."""

    def __new__(cls, base, damping=S.Zero, side="right"):
        return Basic.__new__(cls, _sympify(base), sympify(damping), _check_side(side))

    base = _GramNode.base
    damping = _GramNode.damping
    side = _GramNode.side

    @property
    def shape(self) -> tuple[Expr, Expr]:
        return self.base.shape

    @property
    def facts(self) -> frozenset[str]:
        if self.damping != 0:
            return frozenset()
        needed = FULL_COLUMN_RANK if self.side == "right" else FULL_ROW_RANK
        if needed not in facts_of(self.base):
            return frozenset()
        return frozenset({ORTHONORMAL_COLUMNS if self.side == "right" else ORTHONORMAL_ROWS})

    def gram_sqrt(self) -> GramSqrt:
        return GramSqrt(self.base, self.damping, self.side)

    def gram_inv_sqrt(self) -> GramInvSqrt:
        return GramInvSqrt(self.base, self.damping, self.side)

    def _degree(self, scaling):
        """Degree 0: ``W C_W⁻¹`` is unchanged when ``W`` (and ``λ`` as its square) is scaled."""
        scaling.gram_base(self)  # λ follows W's group: the emitted code damps the root it computes
        return {}

    def _sympystr(self, printer):
        return f"U_{short_name(self.base)}"

    def _latex(self, printer):
        """``U_{W}`` (right); a left one is the transpose of the right polar factor of ``Wᵀ``:
        ``U_{W^{\\top}}^{\\top}``."""
        if self.side == "left":
            return f"U_{{{root_subscript(self, printer)}}}^{{\\top}}"
        return f"U_{{{latex_subscript(self.base, printer)}}}"


class HStack(MatrixExpr):
    """``[A | B | …]``: horizontal concatenation of matrices with equal row counts."""

    def __new__(cls, *blocks):
        blocks = [_sympify(b) for b in blocks]
        if len(blocks) < 2 or len({b.shape[0] for b in blocks}) != 1:
            raise ValueError(f"HStack needs two or more blocks with equal rows, got {[b.shape for b in blocks]}")
        return Basic.__new__(cls, *blocks)

    def _degree(self, scaling):
        """The degree of its blocks, which must agree (as the terms of a sum)."""
        return scaling.same_degree(*self.args)

    @property
    def shape(self) -> tuple[Expr, Expr]:
        return (self.args[0].shape[0], sum((b.shape[1] for b in self.args), S.Zero))

    def _sympystr(self, printer):
        return "[" + " | ".join(printer._print(b) for b in self.args) + "]"

    def _latex(self, printer):
        return r"\left[" + r" \,\middle|\, ".join(printer._print(b) for b in self.args) + r"\right]"


class BlockDiag(MatrixExpr):
    """``blockdiag(A, B, …)``."""

    def __new__(cls, *blocks):
        return Basic.__new__(cls, *[_sympify(b) for b in blocks])

    def _degree(self, scaling):
        """The degree of its blocks, which must agree (as the terms of a sum)."""
        return scaling.same_degree(*self.args)

    @property
    def shape(self) -> tuple[Expr, Expr]:
        return (sum((b.shape[0] for b in self.args), S.Zero), sum((b.shape[1] for b in self.args), S.Zero))

    def _eval_transpose(self):
        return BlockDiag(*[Transpose(b).doit() for b in self.args])

    def _sympystr(self, printer):
        return "blockdiag(" + ", ".join(printer._print(b) for b in self.args) + ")"

    def _latex(self, printer):
        return r"\operatorname{blockdiag}\left(" + ", ".join(printer._print(b) for b in self.args) + r"\right)"


class Projector(_Derived):
    """``P_W = U_W U_Wᵀ``: the orthogonal projector onto the column space of a tall ``W``."""

    def __new__(cls, base):
        return Basic.__new__(cls, _sympify(base))

    @property
    def base(self) -> MatrixExpr:
        return self.args[0]

    @property
    def shape(self) -> tuple[Expr, Expr]:
        return (self.base.shape[0], self.base.shape[0])

    @property
    def facts(self) -> frozenset[str]:
        return frozenset({SYMMETRIC})

    def _eval_transpose(self):
        return self

    def _sympystr(self, printer):
        return f"P_{short_name(self.base)}"

    def _degree(self, scaling):
        """Degree 0: the range of ``cW`` is the range of ``W``."""
        return scaling.invariant(self.base)

    def _latex(self, printer):
        return f"P_{{{latex_subscript(self.base, printer)}}}"


class RegularizedSylvester(_Derived):
    """``H`` solving ``(𝒜 + λI) H + H (ℬ + λI) = D`` for two tall factors ``A, B`` (``d × d_h``).

    ``side="outer"``: ``𝒜 = A Aᵀ``, ``ℬ = B Bᵀ`` (``d × d``, rank ``d_h``; unique when ``λ > 0``).
    ``side="inner"``: ``𝒜 = AᵀA``, ``ℬ = BᵀB`` (``d_h × d_h``, SPD for full-rank factors).
    """

    def __new__(cls, left, right, damping, rhs, side="outer"):
        left, right, rhs = _sympify(left), _sympify(right), _sympify(rhs)
        side = str(side)
        if side not in ("outer", "inner"):
            raise ValueError(f"side must be 'outer' or 'inner', got {side!r}")
        k = 0 if side == "outer" else 1
        if rhs.shape != (left.shape[k], right.shape[k]):
            raise ValueError(f"Sylvester right-hand side must be {left.shape[k]} x {right.shape[k]}, got {rhs.shape}")
        return Basic.__new__(cls, left, right, sympify(damping), rhs, Str(side))

    left = property(lambda self: self.args[0])
    right = property(lambda self: self.args[1])
    damping = property(lambda self: self.args[2])
    rhs = property(lambda self: self.args[3])
    side = property(lambda self: self.args[4].name)

    def grams(self):
        """``(𝒜, ℬ)`` as matrix expressions."""
        a, b = self.left, self.right
        if self.side == "outer":
            return a * a.T, b * b.T
        return a.T * a, b.T * b

    def _degree(self, scaling):
        """The degree of ``D`` less twice the factors' (``λ`` as their square), the two factors scaled as one."""
        scaling.share_scale(self.left, self.right)
        factor = scaling.tie(self.left)
        return scaling.plus(scaling.degree(self.rhs), scaling.times(-2, factor))

    @property
    def shape(self) -> tuple[Expr, Expr]:
        return self.rhs.shape

    def _sympystr(self, printer):
        return "H" if self.side == "outer" else "X"

    def _latex(self, printer):
        return r"H_{\lambda}" if self.side == "outer" else "X"


class _MatrixScalar(Expr):
    """A real scalar computed from matrices (inner products and norms)."""

    is_commutative = True
    is_real = True

    def __new__(cls, *args):
        args = [_sympify(a) for a in args]
        for a in args:
            if not getattr(a, "is_Matrix", False):
                raise TypeError(f"{cls.__name__} takes matrix expressions, got {a!r}")
        return Basic.__new__(cls, *args)


#: the public name of the scalar-node base, for new norms and other scalar nodes (docs: extending)
MatrixScalar = _MatrixScalar


def _reduction_code(printer, template: str, *args) -> str:
    """``template`` over the trailing two axes of each argument (kept, so scalars broadcast in a batch)."""
    module = "jnp" if printer.printmethod == "_jaxcode" else "np"
    return template.format(*[printer._print(a) for a in args], m=module) + "axis=(-2, -1), keepdims=True)"


class Inner(_MatrixScalar):
    """Frobenius inner product ``⟨A, B⟩ = tr(AᵀB)``."""

    def _degree(self, scaling):
        """Bilinear: the sum of the degrees of ``A`` and ``B``."""
        return scaling.product(*self.args)

    def _numpycode(self, printer):
        return _reduction_code(printer, "{m}.sum(({0}) * ({1}), ", *self.args)

    _jaxcode = _numpycode

    def __new__(cls, a, b):
        obj = super().__new__(cls, a, b)
        if obj.args[0].shape != obj.args[1].shape:
            raise ValueError(f"⟨A, B⟩ needs equal shapes, got {obj.args[0].shape} and {obj.args[1].shape}")
        return obj

    def _sympystr(self, printer):
        return f"<{printer._print(self.args[0])}, {printer._print(self.args[1])}>"

    def _latex(self, printer):
        return rf"\left\langle {printer._print(self.args[0])},\, {printer._print(self.args[1])} \right\rangle"


class OpNorm(_MatrixScalar):
    """Spectral norm ``‖A‖_op`` (largest singular value)."""

    is_nonnegative = True

    def _degree(self, scaling):
        """A norm: ``‖cA‖ = c‖A‖``, the degree of ``A``."""
        return scaling.degree(self.args[0])

    def _numpycode(self, printer):
        return _reduction_code(printer, "{m}.linalg.norm({0}, ord=2, ", *self.args)

    _jaxcode = _numpycode

    def _sympystr(self, printer):
        return f"||{printer._print(self.args[0])}||_op"

    def _latex(self, printer):
        return rf"\left\| {printer._print(self.args[0])} \right\|_{{\mathrm{{op}}}}"


class NuclearNorm(_MatrixScalar):
    """Nuclear norm ``‖A‖_*`` (sum of singular values)."""

    is_nonnegative = True

    def _degree(self, scaling):
        """A norm: ``‖cA‖ = c‖A‖``, the degree of ``A``."""
        return scaling.degree(self.args[0])

    def _numpycode(self, printer):
        return _reduction_code(printer, "{m}.linalg.norm({0}, ord='nuc', ", *self.args)

    _jaxcode = _numpycode

    def _sympystr(self, printer):
        return f"||{printer._print(self.args[0])}||_*"

    def _latex(self, printer):
        return rf"\left\| {printer._print(self.args[0])} \right\|_{{*}}"


class IsotropicScale(_MatrixScalar):
    """Trace-matched scale ``c_W = (‖W‖_F² / d_h + λ)^{1/2}`` of a tall ``W`` (``d_h`` columns)."""

    is_positive = True

    def __new__(cls, base, damping=S.Zero):
        base = _sympify(base)
        if not getattr(base, "is_Matrix", False):
            raise TypeError(f"IsotropicScale takes a matrix, got {base!r}")
        return Basic.__new__(cls, base, sympify(damping))

    @property
    def base(self) -> MatrixExpr:
        return self.args[0]

    @property
    def damping(self) -> Expr:
        return self.args[1]

    def _degree(self, scaling):
        """The degree of ``W`` (one argument; ``λ`` scaled as its square)."""
        return scaling.tie(self.base)

    def _sympystr(self, printer):
        return f"c_{short_name(self.base)}"

    def _latex(self, printer):
        return f"c_{{{latex_subscript(self.base, printer)}}}"


def positive_symbol(name: str) -> Symbol:
    """A positive real scalar symbol (step budgets, norms)."""
    return Symbol(name, positive=True)


def nonnegative_symbol(name: str) -> Symbol:
    """A nonnegative real scalar symbol (damping)."""
    return Symbol(name, nonnegative=True)


def dimension(name: str) -> Symbol:
    """A matrix dimension."""
    return Symbol(name, integer=True, positive=True)
