"""Symbolic verification of a step on explicit small matrices of symbols.

Every matrix symbol becomes an explicit matrix of fresh real symbols (symmetric when the
symbol carries that fact); Gram roots become generic symmetric matrices and their inverse
roots the exact inverses, polar factors ``W C⁻¹``; msign nodes and projectors become opaque
matrices of fresh symbols (one per distinct node). When the two sides of a step agree as rational
functions of these entries, the step holds for *every* value of them **at those sizes**: the
verdict says "verified symbolically at sizes (d=3, d_h=2)", never "proved" (no statement about
other sizes is made). When they disagree, the step is refuted at those sizes, provided the lemma
uses nothing the model leaves out (the engine only asks for lemmas marked ``algebraic``); a node
without an exact model (the spectral norms' values, Sylvester solutions) makes the verdict
"not modelled".

Where that generic model does not show the sides equal, :func:`verify_equal` asks the model *with facts*
(``facts=True``), in which the structure the generic one forgets holds identically:

* a matrix with orthonormal columns (rows) is the first columns (rows) of a Cayley transform
  ``(I − K)(I + K)⁻¹`` of a skew-symmetric ``K`` of fresh symbols, so ``UᵀU = I``;
* an undamped Gram root is tied to its matrix: ``W = U C`` (``C`` symmetric, ``U`` orthonormal columns), so
  ``C_W = C`` squares to ``WᵀW``, ``W C_W⁻¹ = U`` is orthonormal and ``(WWᵀ)^{1/2} = U C Uᵀ`` (a wide ``W = C V``
  likewise);
* msign obeys its defining identities: ``msign(c X) = msign(X)`` (``c > 0``), ``msign(U X Vᵀ) = U msign(X) Vᵀ``
  for isometries ``U``, ``V``, ``msign(Xᵀ) = msign(X)ᵀ``, ``msign(X) msign(X)ᵀ X = X = X msign(X)ᵀ msign(X)``, and
  ``msign(X)ᵀ msign(X) = I`` for ``X`` of full column rank; what remains is one opaque matrix per argument.

Each parametrization is dense in the matrices with those facts (a square orthogonal factor is evaluated
with and without a reflection, the two components of the orthogonal group), so a rational identity in
the parameters holds for every matrix with the facts, and a disagreement refutes the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from sympy import Matrix, S, Symbol, cancel, diag, symbols
from sympy.matrices.expressions import MatMul, MatrixSymbol, Transpose

from derivations.engine.norms import EntrywiseL1Norm, families
from derivations.engine.rational_zero import is_zero
from derivations.vocabulary.algebra import is_symmetric, product, tidy
from derivations.vocabulary.interpret import Interpreter, MissingRule
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    FULL_ROW_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    GramInvSqrt,
    GramSqrt,
    Msign,
    PolarFactor,
    facts_of,
)


class Unsupported(MissingRule):
    """The expression holds a node that has no exact explicit model (a :class:`MissingRule`)."""

    def __init__(self, message: str, expr=None):
        TypeError.__init__(self, message)
        self.interpreter, self.node = "symbolic model", type(expr).__name__ if expr is not None else ""


class ExplicitModel(Interpreter):
    """Explicit symbolic matrices for the nodes of a set of expressions.

    One ``_eval_<Node>`` rule per node (or the node's own ``_symbolic``), dispatched along the class
    hierarchy like the numeric evaluator and the printers; a node without one is :class:`Unsupported`.
    """

    printmethod = "_symbolic"
    interpreter_name = "symbolic model"

    def __init__(self, sizes: dict, definitions: dict | None = None, facts: bool = False, reflect: bool = False):
        super().__init__()
        self.sizes = sizes
        self.definitions = definitions or {}
        self.cache = {}
        self.opaque: dict = {}  # (node type, shape) -> [(argument, its fresh matrix)]: equal arguments share one
        self.counter = 0
        self.facts, self.reflect = facts, reflect  # the model with facts; square orthogonal factors reflected
        self.roots: dict = {}  # (W, side) -> the explicit Gram root tied to W
        self.square_orthogonal = False  # a square orthogonal factor was modelled (evaluate the reflection too)

    # ---- the model with facts ---------------------------------------------------------------
    def _orthogonal(self, n):
        """An explicit orthogonal ``n × n`` matrix: the Cayley transform ``(I − K)(I + K)⁻¹`` of a skew-symmetric
        ``K`` of fresh symbols (rational in them), its last column negated when ``reflect``."""
        self.counter += 1
        ks = iter(symbols(f"k{self.counter}_0:{n * (n - 1) // 2}", real=True))
        k = Matrix.zeros(n, n)
        for i in range(n):
            for j in range(i + 1, n):
                k[i, j] = next(ks)
                k[j, i] = -k[i, j]
        q = ((Matrix.eye(n) - k) * (Matrix.eye(n) + k).inv(method="ADJ")).applyfunc(cancel)
        return q * diag(*[1] * (n - 1), -1) if self.reflect else q

    def _orthonormal(self, rows, cols):
        """Orthonormal columns (``rows ≥ cols``) or rows: the leading block of an explicit orthogonal matrix."""
        self.square_orthogonal |= rows == cols
        q = self._orthogonal(max(rows, cols))
        return q[:, :cols] if rows >= cols else q[:rows, :]

    def tie(self, *exprs):
        """Tie every undamped Gram root of a free matrix symbol to it (``W = U C``, ``C_W = C``; a wide ``W = C V``)."""
        for expr in exprs:
            for node in expr.atoms(GramSqrt, GramInvSqrt, PolarFactor):
                w = node.base
                if (node.damping != 0 or not isinstance(w, MatrixSymbol) or w in self.definitions or w in self.cache
                        or {ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS} & facts_of(w)):
                    continue
                rows, cols = self._dim(w.rows), self._dim(w.cols)
                u = self._orthonormal(rows, cols)
                c = self._fresh(min(rows, cols), min(rows, cols), symmetric=True)
                tall = rows >= cols
                self.cache[w] = u * c if tall else c * u
                self.roots[(w, "right" if tall else "left")] = c
                self.roots[(w, "left" if tall else "right")] = u * c * u.T if tall else u.T * c * u

    def _msign_core(self, arg):
        """``msign(arg) = s · U · msign(core) · V`` with the positive scalar dropped, the sign ``s`` kept, and the
        outer isometries taken out: ``(s, U factors, core, V factors)``."""
        coeff, mats = arg.as_coeff_matrices() if isinstance(arg, MatMul) else (S.One, [arg])
        mats, left, right = list(mats), [], []
        while len(mats) > 1 and _isometry(mats[0], ORTHONORMAL_COLUMNS):
            left.append(mats.pop(0))
        while len(mats) > 1 and _isometry(mats[-1], ORTHONORMAL_ROWS):
            right.insert(0, mats.pop())
        sign = S.One if coeff.is_positive else -S.One if coeff.is_negative else None
        core = product(*mats) if sign is not None else product(coeff, *mats)
        return (sign if sign is not None else S.One), left, core, right

    def _eval_Msign(self, e):
        if not self.facts:
            return self._eval_MatrixFunction(e)
        sign, left, core, right = self._msign_core(e.arg)
        arg = self.value(core)
        # msign(Aᵀ) = msign(A)ᵀ: a new argument whose transpose was seen takes that matrix, transposed
        out = self._opaque("Msign", arg, lambda: next(
            (value.T for known, value in self.opaque.get(("Msign", arg.shape[::-1]), []) if _equal(known, arg.T)),
            None))
        for m in reversed(left):
            out = self.value(m) * out
        for m in right:
            out = out * self.value(m)
        return sign * out

    def _msign_identities(self, mats):
        """The factors with msign's defining identities applied: ``M Mᵀ X → X``, ``X Mᵀ M → X`` for ``M = msign(X)``,
        ``Mᵀ M → I`` (``X`` of full column rank) and ``M Mᵀ → I`` (full row rank)."""
        mats = list(mats)
        for i in range(len(mats) - 1):
            m, mt = mats[i], mats[i + 1]
            if isinstance(m, Msign) and mt == Transpose(m):
                x = tidy(m.arg)
                for k in range(1, len(mats) - i - 1):
                    if tidy(product(*mats[i + 2:i + 2 + k])) == x:
                        return self._msign_identities(mats[:i] + mats[i + 2:])
                if FULL_ROW_RANK in facts_of(m.arg):
                    return self._msign_identities(mats[:i] + mats[i + 2:])
            if isinstance(mt, Msign) and m == Transpose(mt):
                x = tidy(mt.arg)
                for k in range(1, i + 1):
                    if tidy(product(*mats[i - k:i])) == x:
                        return self._msign_identities(mats[:i] + mats[i + 2:])
                if FULL_COLUMN_RANK in facts_of(mt.arg):
                    return self._msign_identities(mats[:i] + mats[i + 2:])
        return mats

    def _dim(self, d):
        return int(d.xreplace(self.sizes))

    def _fresh(self, rows, cols, symmetric=False):
        self.counter += 1
        tag = f"x{self.counter}_"
        entries = symbols(f"{tag}0:{rows * cols}", real=True)
        m = Matrix(rows, cols, entries)
        if symmetric:
            m = Matrix(rows, cols, lambda i, j: m[min(i, j), max(i, j)])
        return m

    def value(self, expr):
        if expr in self.cache:
            return self.cache[expr]
        out = self._print(expr)
        self.cache[expr] = out
        return out

    def emptyPrinter(self, expr):
        raise Unsupported(f"no explicit model for {type(expr).__name__}", expr)

    def _eval_MatrixSymbol(self, e):
        if e in self.definitions:
            return self.value(self.definitions[e])
        rows, cols = self._dim(e.rows), self._dim(e.cols)
        if self.facts and (ORTHONORMAL_COLUMNS if rows >= cols else ORTHONORMAL_ROWS) in facts_of(e):
            return self._orthonormal(rows, cols)
        return self._fresh(rows, cols, is_symmetric(e))

    def _eval_Identity(self, e):
        return Matrix.eye(self._dim(e.rows))

    def _eval_ZeroMatrix(self, e):
        return Matrix.zeros(self._dim(e.rows), self._dim(e.cols))

    def _eval_MatMul(self, e):
        coeff, mats = e.as_coeff_matrices()
        if self.facts:
            mats = self._msign_identities(mats)
            if not mats:
                return self.value(coeff) * Matrix.eye(self._dim(e.rows))
        out = self.value(mats[0])
        for m in mats[1:]:
            out = out * self.value(m)
        return self.value(coeff) * out

    def _eval_MatAdd(self, e):
        vals = [self.value(t) for t in e.args]
        return sum(vals[1:], vals[0])

    def _eval_Transpose(self, e):
        return self.value(e.arg).T

    def _eval_Inverse(self, e):
        return self.value(e.arg).inv()

    def _eval_GramSqrt(self, e):
        if e.damping == 0 and (e.base, e.side) in self.roots:
            return self.roots[(e.base, e.side)]
        n = self._dim(e.size)
        return self._fresh(n, n, symmetric=True)

    def _eval_GramInvSqrt(self, e):
        return self.value(GramSqrt(*e.args)).inv()

    def _eval_PolarFactor(self, e):
        w, ci = self.value(e.base), self.value(e.gram_inv_sqrt())
        return w * ci if e.side == "right" else ci * w

    def _eval_HStack(self, e):
        return Matrix.hstack(*[self.value(b) for b in e.args])

    def _eval_BlockDiag(self, e):
        return diag(*[self.value(b) for b in e.args])

    def _eval_Projector(self, e):
        u = self.value(PolarFactor(e.base))
        return u * u.T

    def _eval_MatrixFunction(self, e):
        """msign and the sharp maps: opaque, one fresh matrix per function and (equal) argument."""
        return self._opaque(type(e).__name__, self.value(e.arg))

    def _opaque(self, name: str, arg, known_as=lambda: None):
        """The one matrix the model gives ``name(arg)``: the same for arguments equal as rational functions; a new
        argument gets ``known_as()`` when that is not ``None``, else a fresh matrix of symbols."""
        seen = self.opaque.setdefault((name, arg.shape), [])
        out = next((value for known, value in seen if _equal(known, arg)), None)
        if out is None:
            out = known_as()
            seen.append((arg, self._fresh(*arg.shape) if out is None else out))
            out = seen[-1][1]
        return out

    def _eval_Inner(self, e):
        a, b = self.value(e.args[0]), self.value(e.args[1])
        return sum((a[i] * b[i] for i in range(len(a))), S.Zero)

    def _eval_IsotropicScale(self, e):
        self.counter += 1
        return Symbol(f"c{self.counter}", positive=True)

    def _eval__MatrixScalar(self, e):  # norms (and any other matrix scalar without a rule of its own)
        raise Unsupported("norms have no polynomial model; compare their arguments instead", e)

    def _eval_Expr(self, e):  # scalar arithmetic; a matrix node without a rule is unsupported
        if getattr(e, "is_Matrix", False):
            return self.emptyPrinter(e)
        if e.is_Symbol or e.is_Number:
            return e
        return e.func(*[self.value(a) for a in e.args])


def _isometry(m, fact) -> bool:
    """``m`` has the orthonormality ``fact``, or is square with orthonormal columns or rows (orthogonal)."""
    facts = facts_of(m)
    return fact in facts or m.shape[0] == m.shape[1] and bool({ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS} & facts)


def _equal(a, b) -> bool:
    if hasattr(a, "shape") != hasattr(b, "shape"):
        return False
    if hasattr(a, "shape"):
        if a.shape != b.shape:
            return False
        return all(is_zero(x - y) for x, y in zip(a, b, strict=False))
    return is_zero(a - b)


def _norm_types() -> tuple:
    return (EntrywiseL1Norm, *(f.norm for f in families()))


def _pair_value(model, expr):
    if isinstance(expr, _norm_types()):
        return (type(expr).__name__, model.value(expr.args[0]))
    return (None, model.value(expr))


@dataclass(frozen=True)
class Verdict:
    """Outcome of :func:`verify_equal`: ``status`` is ``verified``, ``refuted`` or ``not modelled``."""

    status: str
    sizes: str
    detail: str = ""

    def __str__(self):
        if self.status == "verified":
            return f"verified symbolically at sizes {self.sizes}" + (f" ({self.detail})" if self.detail else "")
        if self.status == "refuted":
            return f"refuted symbolically at sizes {self.sizes}: {self.detail}"
        return f"not modelled: {self.detail}"


def size_label(sizes: dict) -> str:
    """``(d=3, d_h=2)``."""
    return "(" + ", ".join(f"{k}={v}" for k, v in sorted(sizes.items(), key=lambda kv: str(kv[0]))) + ")"


def verify_equal(pairs, sizes: dict, definitions: dict | None = None,
                 substitution: tuple | None = None) -> Verdict:
    """Compare every ``(before, after)`` pair as rational functions of the explicit entries.

    Norms compare their arguments (equal arguments give equal norms; unequal arguments refute
    nothing about the norms, so they give "not modelled"). ``substitution = (X, expr)`` models a
    change of variables: ``X`` is replaced by ``expr`` in the ``before`` side. Where the generic model does
    not verify the pairs and they hold isometries, Gram roots or msign, the model with facts decides (with a
    reflected square orthogonal factor too, when it modelled one).
    """
    pairs = list(pairs)
    verdict = _compare(ExplicitModel(sizes, definitions), pairs, sizes, substitution)
    if verdict.status == "verified" or not _uses_facts(pairs, definitions):
        return verdict
    model = ExplicitModel(sizes, definitions, facts=True)
    verdict = _compare(model, pairs, sizes, substitution)
    if verdict.status == "verified" and model.square_orthogonal:
        verdict = _compare(ExplicitModel(sizes, definitions, facts=True, reflect=True), pairs, sizes, substitution)
    if verdict.status == "verified":
        return Verdict("verified", verdict.sizes, "with the facts: Gram roots tied to their matrices, isometries "
                                                  "orthonormal, msign's identities")
    return verdict


def _uses_facts(pairs, definitions) -> bool:
    exprs = [e for pair in pairs for e in pair if hasattr(e, "atoms")] + list((definitions or {}).values())
    return any(e.atoms(Msign, GramSqrt, GramInvSqrt, PolarFactor) or any(
        {ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS} & facts_of(s) for s in e.atoms(MatrixSymbol)) for e in exprs)


def _compare(model, pairs, sizes, substitution) -> Verdict:
    label = size_label(sizes)
    try:
        if model.facts:
            model.tie(*[e for pair in pairs for e in pair if hasattr(e, "atoms")], *model.definitions.values(),
                      *(substitution or ()))
        if substitution is not None:
            old, new = substitution
            model.cache[old] = model.value(new)
        for before, after in pairs:
            kb, vb = _pair_value(model, before)
            ka, va = _pair_value(model, after)
            if kb != ka or not _equal(vb, va):
                if kb or ka:
                    return Verdict("not modelled", label, f"the arguments of {before} and {after} differ as "
                                                          "matrices; the norm values have no polynomial model")
                return Verdict("refuted", label, f"{before} and {after} differ as rational functions of the entries")
    except Unsupported as exc:
        return Verdict("not modelled", label, str(exc))
    except (ValueError, ZeroDivisionError) as exc:
        return Verdict("not modelled", label, f"the explicit model failed: {exc}")
    return Verdict("verified", label)


def prove_equal(pairs, sizes: dict, definitions: dict | None = None,
                substitution: tuple | None = None) -> str:
    """Compatibility wrapper of :func:`verify_equal`: ``"proved"`` when verified at these sizes, else
    ``"numeric only"`` (a refutation included). New code should call :func:`verify_equal`."""
    return "proved" if verify_equal(pairs, sizes, definitions, substitution).status == "verified" else "numeric only"
