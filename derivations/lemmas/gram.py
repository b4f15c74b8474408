"""Gram Newton–Schulz: an odd-polynomial iteration run on its Gram matrix (Lemmas GF, GG, GC, GU, GR, GT, GX, GK).

J. Zhang, N. Amsel, B. Chen, T. Dao (2026), *Gram Newton–Schulz*. An odd step
``p(X) = c_0 X + c_1 X XᵀX + … + c_k X (XᵀX)^k`` is ``q(R) X`` with ``R = XXᵀ`` and
``q(R) = c_0 I + c_1 R + … + c_k R^k`` (or ``X q(S)`` with ``S = XᵀX``: Lemma GF). The Gram matrix of
``q(R) X`` is ``q(R) R q(R)`` (GG), and polynomials in one matrix commute (GC), so it is also
``R q(R)²``. Unrolling the iterates (GU), replacing their Gram matrices by the recurrence
``R_{t+1} = q_t(R_t) R_t q_t(R_t)`` (GR) and naming the product ``Q_T = q_{T−1}(R_{T−1}) ⋯ q_0(R_0)``
(GT) gives ``X_T = Q_T X_0``. A restart at ``s`` continues from ``Y_s = Q_s X_0`` with the Gram
matrix recomputed from ``Y_s``, which equals ``R_s`` (GX). Lemma GK states which matrix products
each iteration executes; its check counts the products the JAX routines actually run.

The symbol-level lemmas (GU, GR, GT, GX) rewrite with definitions the rule module passes in (which
symbol is which product); the engine checks every such step on random instances of *all* the
definitions, so a wrong pairing fails its check. The trusted kernel proves them too, for all sizes: GU and GT
unfold the step's definitions (which must be the derivation's); GR and GX prove each claimed equality of Gram
matrices (``A_t = R_t``, ``G_s = R_s``) from the derivation's definitions, the earlier claims first (the base
case, then each induction step, whose identity is the statement their self-check evaluates). What the trusted kernel
proves is the claims for the steps the derivation names (three); that they hold for every ``t`` is the
induction, stated in the side conditions and checked at instances only.
"""

from __future__ import annotations

from sympy import Basic, Expr, S, Symbol, sympify
from sympy.core.symbol import Str
from sympy.matrices.expressions import Identity, MatAdd, MatMul, MatrixSymbol, Transpose

from derivations.lemmas.base import Case, Lemma, NotApplicable, rewrite_nodes, stated_by
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, replace_free, rewrite_adjacent, total, transpose
from derivations.vocabulary.evaluate import EvaluationError, InstanceSampler
from derivations.vocabulary.nodes import SYMMETRIC, FactMatrix, dimension
from derivations.vocabulary.spectral_nodes import Flops

SIDES = ("left", "right")


# ---- building blocks ----------------------------------------------------------------------------
def gram_power(r, j: int):
    """``R^j`` as a product of ``j`` factors (``I`` for ``j = 0``)."""
    return Identity(r.rows) if j == 0 else product(*[r] * j)


def gram_polynomial(r, coeffs):
    """``q(R) = c_0 I + c_1 R + … + c_k R^k``."""
    return total(*[product(c, gram_power(r, j)) for j, c in enumerate(coeffs)])


def odd_step(x, coeffs):
    """``p(X) = c_0 X + c_1 X XᵀX + … + c_k X (XᵀX)^k``, the product written out."""
    return total(*[product(c, *([x, transpose(x)] * j), x) for j, c in enumerate(coeffs)])


def gram_symbol(name: str, size):
    """A symmetric ``size × size`` matrix symbol (a Gram matrix or a polynomial in one)."""
    return FactMatrix(name, size, size, [SYMMETRIC])


def _gram_of(x, side):
    return product(x, transpose(x)) if side == "left" else product(transpose(x), x)


def _check_side(side):
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")


def _check_gram(x, gram, side):
    size = x.rows if side == "left" else x.cols
    if gram.shape != (size, size):
        raise ValueError(f"the Gram matrix {gram} of {x} ({side}) must be {size} x {size}, got {gram.shape}")


def polynomial_in(e, r) -> bool:
    """True when ``e`` is built from ``R``, ``I`` and scalars by sums and products (a polynomial in ``R``)."""
    if e == r or isinstance(e, Identity):
        return e.shape == r.shape
    if isinstance(e, MatMul):
        coeff, mats = e.as_coeff_matrices()
        return bool(mats) and not getattr(coeff, "is_Matrix", False) and all(polynomial_in(m, r) for m in mats)
    if isinstance(e, MatAdd):
        return all(polynomial_in(t, r) for t in e.args)
    return False


def _coeff_mats(term):
    if isinstance(term, MatMul):
        return term.as_coeff_matrices()
    return S.One, [term]


def _odd_power(mats, x):
    """``j`` when ``mats`` is ``X, Xᵀ, X, …, X`` (``2j + 1`` factors), else None."""
    if len(mats) % 2 == 0:
        return None
    xt = transpose(x)
    if all(m == (x if i % 2 == 0 else xt) for i, m in enumerate(mats)):
        return len(mats) // 2
    return None


# ---- GF: an odd step is a polynomial in the Gram matrix ------------------------------------------
def _factor_rewrite(expr, *, matrix, gram, side="left", **_):
    """``Σ_j c_j X (XᵀX)^j → (Σ_j c_j R^j) X`` (left, ``R = XXᵀ``) or ``X (Σ_j c_j S^j)`` (right, ``S = XᵀX``)."""
    _check_side(side)
    _check_gram(matrix, gram, side)

    def rule(e):
        if not isinstance(e, MatAdd):
            return None
        matched, rest = [], []
        for term in e.args:
            coeff, mats = _coeff_mats(term)
            j = _odd_power(list(mats), matrix)
            if j is None or getattr(coeff, "is_Matrix", False):
                rest.append(term)
            else:
                matched.append((coeff, j))
        if len(matched) < 2 or not any(j for _, j in matched):
            return None
        poly = total(*[product(c, gram_power(gram, j)) for c, j in matched])
        factored = product(poly, matrix) if side == "left" else product(matrix, poly)
        return total(factored, *rest), [f"{gram} = {_gram_of(matrix, side)} (the Gram matrix of {matrix})"]

    return rewrite_nodes(expr, rule, f"no sum of odd powers X (XᵀX)^j of {matrix} to factor")


_n, _m = dimension("n"), dimension("m")
_SIZES = {_n: 3, _m: 7}
_C = tuple(Symbol(f"c_{j}", real=True) for j in range(3))


def _wide():
    x = MatrixSymbol("X", _n, _m)
    return x, gram_symbol("R", _n), gram_symbol("S", _m)


def _factor_ids():
    x, r, s = _wide()
    sampler = InstanceSampler(_SIZES, definitions={r: _gram_of(x, "left"), s: _gram_of(x, "right")})
    p = odd_step(x, _C)
    return ([Case(p, product(gram_polynomial(r, _C), x), {"matrix": x, "gram": r, "side": "left"}),
             Case(p, product(x, gram_polynomial(s, _C)), {"matrix": x, "gram": s, "side": "right"})], sampler)


GRAM_FACTOR = Lemma(
    key="gram_factor", number="GF", title="An odd polynomial step is a polynomial in the Gram matrix",
    statement=stated_by(_factor_ids),
    conditions=(r"R = XX^{\top} \text{ (left) or } S = X^{\top}X \text{ (right)}",),
    rewrite=_factor_rewrite, identities=_factor_ids, algebraic=True,
)


# ---- GG: the Gram matrix of q(R) X -----------------------------------------------------------------
def _fold_rewrite(expr, *, matrix, gram, side="left", **_):
    """``X Xᵀ → R`` (left) or ``XᵀX → S`` (right) wherever the two factors are adjacent."""
    _check_side(side)
    _check_gram(matrix, gram, side)
    pattern = [matrix, transpose(matrix)] if side == "left" else [transpose(matrix), matrix]
    out, hits = rewrite_adjacent(expr, pattern, [gram])
    if not hits:
        raise NotApplicable(f"no adjacent {' '.join(map(str, pattern))} to name {gram}")
    return out, [f"{gram} = {_gram_of(matrix, side)}"]


def _fold_ids():
    x, r, s = _wide()
    sampler = InstanceSampler(_SIZES, definitions={r: _gram_of(x, "left"), s: _gram_of(x, "right")})
    qr, qs = gram_polynomial(r, _C), gram_polynomial(s, _C)
    left, right = product(qr, x), product(x, qs)
    return ([Case(product(left, transpose(left)), product(qr, r, qr), {"matrix": x, "gram": r, "side": "left"}),
             Case(product(transpose(right), right), product(qs, s, qs), {"matrix": x, "gram": s, "side": "right"})],
            sampler)


GRAM_UPDATE = Lemma(
    key="gram_update", number="GG", title="The Gram matrix of q(R) X is q(R) R q(R)",
    statement=stated_by(_fold_ids),
    conditions=(r"q(R)^{\top} = q(R) \text{ since } R \text{ is symmetric}",),
    rewrite=_fold_rewrite, identities=_fold_ids, algebraic=True,
)


# ---- GC: polynomials in R commute --------------------------------------------------------------------
def _commute_rewrite(expr, *, matrix, **_):
    """In every run of adjacent factors that are polynomials in ``R``, move the bare ``R`` factors first."""
    def rule(e):
        if not isinstance(e, MatMul):
            return None
        coeff, mats = e.as_coeff_matrices()
        out, i, changed = [], 0, False
        while i < len(mats):
            j = i
            while j < len(mats) and polynomial_in(mats[j], matrix):
                j += 1
            if j == i:
                out.append(mats[i])
                i += 1
                continue
            run = list(mats[i:j])
            moved = [f for f in run if f == matrix] + [f for f in run if f != matrix]
            changed |= moved != run
            out += moved
            i = j
        if not changed:
            return None
        return product(coeff, *out), [f"every factor moved is a polynomial in {matrix}"]

    return rewrite_nodes(expr, rule, f"no product of polynomials in {matrix} with {matrix} to move first")


def _commute_ids():
    r = gram_symbol("R", _n)
    q = gram_polynomial(r, _C)
    p = gram_polynomial(r, tuple(reversed(_C)))
    return ([Case(product(q, r, q), product(r, q, q), {"matrix": r}),
             Case(product(p, q, r), product(r, p, q), {"matrix": r})], InstanceSampler(_SIZES))


POLYNOMIALS_COMMUTE = Lemma(
    key="polynomials_commute", number="GC", title="Polynomials in one matrix commute",
    statement=stated_by(_commute_ids),
    conditions=(r"p, q \text{ polynomials with scalar coefficients}",),
    rewrite=_commute_rewrite, identities=_commute_ids, algebraic=True,
)


# ---- GU, GR, GT, GX: iterates, the Gram recurrence, telescoping, restarts ----------------------------
def _replace(expr, pairs, nothing):
    """Replace each symbol of ``pairs`` by its expression until none is left; the pairs used."""
    out, used = expr, []
    for _ in range(len(pairs) + 1):
        before = out
        for sym, value in pairs.items():
            new = replace_free(out, sym, value)
            if new != out:
                used.append((sym, value))
                out = new
        if out == before:
            break
    if not used:
        raise NotApplicable(nothing)
    return out, list(dict.fromkeys(used))


def _unroll_rewrite(expr, *, iterates, **_):
    """Every iterate ``X_{t+1}`` → its definition ``q_t(R_t) X_t`` (or ``X_t q_t(R_t)``), down to ``X_0``."""
    out, used = _replace(expr, iterates, "no iterate of the iteration to unroll")
    return out, [f"{s} = {v}" for s, v in used]


def _recurrence_rewrite(expr, *, grams, **_):
    """The Gram matrices ``A_t = X_t X_tᵀ`` of the iterates → the recurrence ``R_t`` (GG, by induction)."""
    out, used = _replace(expr, grams, "no Gram matrix of an iterate to replace")
    return out, [f"{s} = {v}: both start at the Gram matrix of X_0 and follow R_(t+1) = q_t(R_t) R_t q_t(R_t) "
                 "(Lemma GG)"
                 for s, v in used]


def _telescope_rewrite(expr, *, products, **_):
    """Name the accumulated product: every run ``q_t(R_t) Q_t`` (or ``Q_t q_t(R_t)``) → ``Q_{t+1}``.

    ``products`` maps ``Q_{t+1}`` to its factors ``(q_t(R_t), Q_t)`` (``(q_0(R_0),)`` for ``Q_1``), in the
    order of ``t``; runs are folded until none is left, so ``q_2 q_1 q_0 X_0`` becomes ``Q_3 X_0``.
    """
    out, used = expr, []
    for _ in range(len(products) + 1):
        before = out
        for sym, factors in products.items():
            out, hits = rewrite_adjacent(out, list(factors), [sym])
            if hits:
                used.append(f"{sym} = {product(*factors)}")
        if out == before:
            break
    if not used:
        raise NotApplicable("no product of the steps' polynomials to name Q_t")
    return out, list(dict.fromkeys(used)) + ["Q_0 = I: one factor per step, by associativity"]


def _restart_rewrite(expr, *, restarted, grams, **_):
    """A restart at ``s``: ``Y_s → Q_s X_0`` and its recomputed Gram ``Y_s Y_sᵀ`` → ``R_s``."""
    out, used = _replace(expr, {**restarted, **grams}, "no restarted iterate or its Gram matrix to replace")
    return out, [f"{s} = {v}" for s, v in used]


def _two_steps(side="left"):
    """Symbols and definitions of two steps of the iteration and of its Gram form (self-check
    instances; the right orientation's names carry a prime, so both live in one sampler)."""
    shape = (_n, _m) if side == "left" else (_m, _n)  # the Gram matrix is n × n either way
    tag = "" if side == "left" else "'"

    def name(base, t):
        return f"{base}{tag}_{t}"

    coeffs = [tuple(Symbol(f"{c}_{t}", real=True) for c in "abc") for t in range(2)]
    xs = [MatrixSymbol(name("X", t), *shape) for t in range(3)]
    a = [gram_symbol(name("A", t), _n) for t in range(2)]
    r = [gram_symbol(name("R", t), _n) for t in range(2)]
    q = [gram_symbol(name("Q", t), _n) for t in range(1, 3)]
    y = MatrixSymbol(name("Y", 1), *shape)
    g = gram_symbol(name("G", 1), _n)

    def step(poly, x):
        return product(poly, x) if side == "left" else product(x, poly)

    qa = [gram_polynomial(a[t], coeffs[t]) for t in range(2)]
    qr = [gram_polynomial(r[t], coeffs[t]) for t in range(2)]
    defs = {a[0]: _gram_of(xs[0], side), xs[1]: step(qa[0], xs[0]), a[1]: _gram_of(xs[1], side),
            xs[2]: step(qa[1], xs[1]),
            r[0]: _gram_of(xs[0], side), r[1]: product(qr[0], r[0], qr[0]),
            q[0]: qr[0], q[1]: step(qr[1], q[0]) if side == "left" else product(q[0], qr[1]),
            y: step(q[0], xs[0]), g: _gram_of(y, side)}
    return {"x": xs, "a": a, "r": r, "q": q, "y": y, "g": g, "qa": qa, "qr": qr, "defs": defs, "side": side}


def _iteration_ids(kind):
    cases, defs = [], {}
    for side in SIDES:
        s = _two_steps(side)
        defs.update(s["defs"])
        x, qa, qr = s["x"], s["qa"], s["qr"]

        def chain(polys, end, side=side):
            return product(*reversed(polys), end) if side == "left" else product(end, *polys)

        if kind == "unroll":
            cases.append(Case(x[2], chain(qa, x[0]), {"iterates": {x[2]: s["defs"][x[2]], x[1]: s["defs"][x[1]]}}))
        elif kind == "recurrence":
            cases.append(Case(chain(qa, x[0]), chain(qr, x[0]), {"grams": dict(zip(s["a"], s["r"], strict=True))}))
        elif kind == "telescope":
            q1, q2 = s["q"]
            second = (qr[1], q1) if side == "left" else (q1, qr[1])
            cases.append(Case(chain(qr, x[0]), chain([q2], x[0]), {"products": {q1: (qr[0],), q2: second}}))
        else:
            y, g = s["y"], s["g"]
            start = product(gram_polynomial(g, _C), y) if side == "left" else product(y, gram_polynomial(g, _C))
            end = chain([gram_polynomial(s["r"][1], _C)], chain([s["q"][0]], x[0]))
            cases.append(Case(start, end, {"restarted": {y: s["defs"][y]}, "grams": {g: s["r"][1]}}))
    return cases, InstanceSampler(_SIZES, definitions=defs)


def _definitions_statement(new: str, old: str, param: str, first: bool = False) -> Statement:
    """The definitions ``new = q_t old`` (left) and ``new = old q_t`` (right), ``q_t`` any square matrix (the step's
    polynomial): a step that names them in its parameter ``param`` is an instance when its two sides agree with
    every definition unfolded (``closure="rewrite"``). ``first``: ``old`` may be absent (``Q_1 = q_0``, ``Q_0 = I``).
    Definitions only: the lemma's cases check the unrolled chains numerically."""
    x1, x0 = MatrixSymbol(new, _n, _m), MatrixSymbol(old, _n, _m)
    left, right = MatrixSymbol("q_t", _n, _n), MatrixSymbol("q_t", _m, _m)
    clauses = (Clause(x1, product(left, x0), defines=True), Clause(x1, product(x0, right), defines=True))
    return Statement(clauses, optional=frozenset({x0} if first else ()), closure="rewrite", defined_by=(param,))


UNROLL = Lemma(
    key="gram_unroll", number="GU", title="Unrolling the iterates",
    statement=_definitions_statement("X_t+1", "X_t", "iterates"),
    conditions=(r"q_t = q_t(A_t) \text{ the step's polynomial (Lemma GF)}",
                r"\text{so } X_T = q_{T-1} \cdots q_0\, X_0 \text{ (the definitions unfolded)}"),
    rewrite=_unroll_rewrite, identities=lambda: _iteration_ids("unroll"),
    not_modelled="the unrolled iterates are polynomials of degree 5^T: numeric only",
)

def _induction_statement(restart: bool) -> Statement:
    """The one-step identity of an induction over the iteration's definitions (``closure="induction"``).

    GR: the Gram matrix of the next iterate, ``(q(A) X)(q(A) X)ᵀ = q(A) A q(A)`` for ``A = X Xᵀ`` (and
    ``(X q(S))ᵀ (X q(S)) = q(S) S q(S)`` for ``S = XᵀX``), ``q`` a polynomial with scalar coefficients. GX: a restarted
    iterate ``Y = Q X`` (``X Q``) has the Gram matrix ``Q R Qᵀ`` (``Qᵀ S Q``). The self-check evaluates these clauses;
    the trusted kernel proves each claim ``A_t = R_t`` (``G_s = R_s``) a step makes from the derivation's own
    definitions, one after the other (the base case, then each step with the claims before it): for all sizes,
    for the ``t`` the step names. That the claim holds for *every* ``t`` is the induction this identity drives,
    stated, not checked.
    """
    x, r, s = _wide()
    if restart:
        q_left, q_right = MatrixSymbol("Q", _n, _n), MatrixSymbol("Q'", _m, _m)  # the right orientation primed
        y_left, y_right = MatrixSymbol("Y", _n, _m), MatrixSymbol("Y'", _n, _m)
        left, right = MatMul(q_left, x), MatMul(x, q_right)
        clauses = (Clause(y_left, left, defines=True), Clause(y_right, right, defines=True),
                   Clause(MatMul(left, Transpose(left)), MatMul(q_left, r, Transpose(q_left)), where=(r, x * x.T)),
                   Clause(MatMul(Transpose(right), right), MatMul(Transpose(q_right), s, q_right),
                          where=(s, x.T * x)))
        return Statement(clauses, closure="induction", defined_by=("restarted",), claims=("grams",),
                         sizes=(_SIZES, {_n: 16, _m: 20}))
    left, right = MatMul(gram_polynomial(r, _C), x), MatMul(x, gram_polynomial(s, _C))
    clauses = (Clause(MatMul(left, Transpose(left)), product(gram_polynomial(r, _C), r, gram_polynomial(r, _C)),
                      where=(r, x * x.T)),
               Clause(MatMul(Transpose(right), right), product(gram_polynomial(s, _C), s, gram_polynomial(s, _C)),
                      where=(s, x.T * x)))
    return Statement(clauses, closure="induction", claims=("grams",), sizes=(_SIZES, {_n: 16, _m: 20}))


GRAM_RECURRENCE = Lemma(
    key="gram_recurrence", number="GR", title="The Gram recurrence reproduces the iterates' Gram matrices",
    statement=_induction_statement(restart=False),
    conditions=(r"\text{so, by induction on } t\text{: } A_t = X_tX_t^{\top} = R_t \text{ for } R_0 = X_0X_0^{\top},\ "
                r"R_{t+1} = q_t(R_t)\,R_t\,q_t(R_t) \text{ (each claimed } A_t = R_t \text{ proven from the "
                r"definitions)}",),
    rewrite=_recurrence_rewrite, identities=lambda: _iteration_ids("recurrence"),
    not_modelled="the recurrence has degree 5^t in X_0: numeric only",
)

TELESCOPING = Lemma(
    key="gram_telescoping", number="GT", title="Telescoping the steps into Q",
    statement=_definitions_statement("Q_t+1", "Q_t", "products", first=True),
    conditions=(r"Q_0 = I", r"q_t = q_t(R_t) \text{ the step's polynomial}",
                r"\text{so } q_{T-1} \cdots q_0\, X_0 = Q_T X_0 \text{ (the definitions unfolded, associativity)}"),
    rewrite=_telescope_rewrite, identities=lambda: _iteration_ids("telescope"),
    not_modelled="Q_T has degree 5^T in X_0: numeric only",
)

RESTART = Lemma(
    key="gram_restart", number="GX", title="A restart continues the same iteration",
    statement=_induction_statement(restart=True),
    conditions=(r"\text{so, by induction on } s\text{: } Y_sY_s^{\top} = Q_s R_0 Q_s^{\top} = R_s "
                r"\text{ for } Y_s = Q_s X_0 \text{ (each claimed } G_s = R_s \text{ proven from the definitions)}",),
    rewrite=_restart_rewrite, identities=lambda: _iteration_ids("restart"),
    not_modelled="the restarted iterate has degree 5^s in X_0: numeric only",
)


# ---- GK: the products each iteration executes -------------------------------------------------------
KINDS = ("standard", "gram")


def routine_flops(kind: str, side: str, n: int, m: int, steps: int, restarts: int = 0) -> int:
    """Matmul flops the project's routine executes (:func:`foundation.compute.flop_count.routine_flops`)."""
    from foundation.compute.flop_count import routine_flops as count  # lazy: derivations imports without JAX
    return count(kind, side, n, m, steps, restarts)


class RoutineFlops(Expr):
    """Matmul flops a routine executes on ``X`` of shape ``n × m`` (``n ≤ m``; the transpose for
    ``side="right"``) for ``T`` quintic steps and ``K`` restarts, counted by running it
    (:func:`routine_flops`). ``K`` must evaluate to an integer in ``[0, T − 1]``."""

    is_commutative = True
    is_real = True

    def __new__(cls, kind, side, n, m, steps, restarts=S.Zero):
        kind, side = (getattr(a, "name", a) for a in (kind, side))  # a Str when unpickled
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        _check_side(side)
        return Basic.__new__(cls, Str(kind), Str(side), *(sympify(a) for a in (n, m, steps, restarts)))

    kind = property(lambda self: self.args[0].name)
    side = property(lambda self: self.args[1].name)

    def _numeric(self, ev):
        n, m, steps = (ev.size(a) for a in self.args[2:5])
        k = float(ev(self.args[5]))
        if n > m:
            raise EvaluationError(f"the flop model is stated for n <= m, got n = {n}, m = {m}")
        if k != int(k) or not 0 <= k <= steps - 1:
            raise EvaluationError(f"the restart count must be an integer in [0, T - 1], got {k} for T = {steps}")
        return ev.backend.scalar(routine_flops(self.kind, self.side, n, m, steps, int(k)))

    def _sympystr(self, printer):
        args = ", ".join(printer._print(a) for a in self.args[2:5 if self.kind == "standard" else 6])
        return f"flops_{self.kind}_{self.side}({args})"

    def _latex(self, printer):
        args = ", ".join(printer._print(a) for a in self.args[2:5 if self.kind == "standard" else 6])
        return rf"\operatorname{{flops}}_{{\mathrm{{{self.kind}}}}}^{{\mathrm{{{self.side}}}}}\left({args}\right)"


def executed_products(kind, side, n, m, steps, restarts):
    """The products a routine executes, as ``coefficient · flops(product)`` terms (quintic steps).

    Standard (per step): ``A = XXᵀ``, ``A·A`` (Horner), ``B X``. Gram: per segment between restarts
    (``K + 1`` of them) ``R = XXᵀ`` and ``Q X``; per step ``R·R`` (Horner); per step except the first
    of a segment ``Z·Q`` (``Q ← q(R) Q``); per step except the last of a segment ``R·Z`` and ``Z·(RZ)``
    (``R ← q(R) R q(R)``). Right orientation: the same products transposed (``XᵀX``, ``X Q``).
    """
    wide = MatrixSymbol("X", n, m) if side == "left" else MatrixSymbol("X", m, n)
    r, z, q = (MatrixSymbol(name, n, n) for name in ("R", "Z", "Q"))
    gram = Flops(_gram_of(wide, side))
    apply_ = Flops(product(z if kind == "standard" else q, wide) if side == "left"
                   else product(wide, z if kind == "standard" else q))
    horner = Flops(product(r, r))
    if kind == "standard":
        return steps * (gram + horner + apply_)
    inner = steps - restarts - 1
    return ((restarts + 1) * (gram + apply_) + steps * horner
            + inner * (Flops(product(z, q)) + Flops(product(r, z)) + Flops(product(z, r))))


def _routine_rewrite(expr, **_):
    def rule(e):
        if isinstance(e, RoutineFlops):
            n, m, steps, restarts = e.args[2:]
            return executed_products(e.kind, e.side, n, m, steps, restarts), [
                f"the {e.kind} routine executes these products (quintic steps; the "
                + ("restart count K is an integer in [0, T − 1])" if e.kind == "gram" else "short side first)")]
        return None

    return rewrite_nodes(expr, rule, "no routine flop count")


_T = dimension("T")
#: the restart count: a scalar (not a dimension) so that 0 and 1 are allowed; drawn by the lemma's instances
RESTARTS = Symbol("K", nonnegative=True)


def _routine_instance(env, rng, backend, dims, **_):
    """A random restart count ``K ∈ [0, T − 1]`` (the routine runs only for whole counts)."""
    steps = int(dims[_T])
    return {**env, RESTARTS: backend.scalar(int(rng.integers(0, steps)))}, {RESTARTS}


def _routine_ids():
    cases = [Case(RoutineFlops(kind, side, _n, _m, _T, RESTARTS), executed_products(kind, side, _n, _m, _T, RESTARTS))
             for kind in KINDS for side in SIDES]
    return cases, InstanceSampler({_n: 3, _m: 5, _T: 4})


EXECUTED_PRODUCTS = Lemma(
    key="gram_executed_products", number="GK", title="The products each iteration executes",
    statement=stated_by(_routine_ids, instance=_routine_instance),
    conditions=(r"\text{quintic steps; } n \le m;\ 0 \le K \le T-1 \text{ restarts}",),
    rewrite=_routine_rewrite, identities=_routine_ids, instance=_routine_instance,
    not_modelled="a count, checked by running the routines and counting their products",
)
