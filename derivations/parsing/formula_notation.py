"""The build rules of the notation beyond products, sums and powers (a mixin of
:class:`derivations.parsing.formula.Builder`): definitions, singular values, sums, the Kronecker product,
``vec``, ``min``/``max``, ``rank`` and ``matrix_power``.

Semantics (also on the notation page of the docs):

* **Definitions** ``L = G G^T; …`` or ``… where L = G G^T``: ``L`` stands for its expression wherever it is used
  (so ``L^{-1/4}`` is the power of the Gram matrix ``G Gᵀ``); definitions are seen by every formula of an
  identity or a chain; a name defined twice, or in terms of itself, is refused.
* **SVD** ``U, Σ, V = svd(G)``: the thin SVD ``G = U Σ Vᵀ`` (``G`` with at least as many rows as columns;
  an identity draws such sizes), ``U`` with orthonormal columns, ``Σ`` the diagonal of singular values in
  descending order, ``V`` orthogonal. It makes ``G`` the matrix in scope of a bare ``σ_k`` and of ``Σ_{>r}``.
* **Singular values** ``σ_k(X)`` of any matrix (``k`` counts from 1; zero past ``min(m, n)``;
  ``σ_max``/``σ_min``); a bare ``σ_k`` is a singular value of the matrix in scope: the one of ``svd(G)``,
  or in a derivation the matrix its SVD nodes are of (``classics.eckart_young``: ``A``). An index is a whole
  number: a literal or a size (``r + 1``).
* **Sums** over singular values (the body mentions ``σ_i`` with the sum's index ``i``): ``\\sum_{i>r}
  \\sigma_i^2``, ``\\sum_{i=1}^{r}``, ``\\sum_i``; the body is a sum of powers ``c σ_i^p`` with coefficients free
  of ``i``. Any other sum is over heads or blocks and is expanded: the index in a name's subscript
  (``W_{O,h}``, ``X_h``) or on its own becomes each value in turn, from the numeric bounds (at most 16 terms,
  64 with the sums inside it), or ``h = 1, 2, 3`` when the bounds are not numbers (an upper bound that is a
  name, ``\\sum_{h=1}^{H}``, is then 3 wherever it appears in an identity or a chain).
* **Kronecker** ``A ⊗ B`` (``\\otimes``, ``kron(A, B)``) and ``vec(X)`` (columns stacked); ``A ⊗ B`` next to
  another factor must be bracketed. An ``I`` in a Kronecker product needs a size (``I_n``) in a derivation's
  formula; an identity infers it.
"""

from __future__ import annotations

from sympy import Add, Integer, S, Symbol, expand
from sympy.matrices.expressions import Identity

from derivations.parsing.formula_tokens import FormulaError, Node
from derivations.parsing.notation import MAX_SUM_TERMS, SUM_TERMS
from derivations.parsing.notation_nodes import Kron, MatrixRank, MaxOf, MinOf, SingularSum, SingularValueOf, Vec
from derivations.vocabulary.spectral_nodes import Singular, SingularTail, SingularValue, SvdFactor, TruncatedSvd

MAX_EXPANDED = 64  # terms of one sum over heads, its nested sums included
MAX_NODES = 5_000  # nodes of a built definition or power (a chain of definitions that doubles is refused)


class Eye:
    """``c·I`` whose size comes from its neighbours."""

    def __init__(self, coeff=S.One):
        self.coeff = coeff


def is_matrix(x) -> bool:
    return getattr(x, "is_Matrix", False)


def mentions_sigma(tree, index: str) -> bool:
    """Whether ``tree`` holds a singular value ``σ_{index}`` (a sum over singular values)."""
    stack = [tree]
    while stack:
        n = stack.pop()
        if not isinstance(n, Node):
            continue
        if n.kind == "sv" and n.args[0].kind == "name" and n.args[0].value == index:
            return True
        stack.extend(_children(n))
    return False


def _children(n: Node) -> list:
    out = []
    for a in n.args:
        if isinstance(a, Node):
            out.append(a)
        elif isinstance(a, tuple):
            out.extend(x for x in a if isinstance(x, Node))
    return out


def expansion(tree) -> int:
    """How many terms the sums over heads in ``tree`` expand to, nested sums multiplied (no spectral sums)."""
    if not isinstance(tree, Node):
        return 0
    if tree.kind == "sum" and not mentions_sigma(tree.args[0], tree.value[0]):
        _, bound, upper = tree.args
        lo = int(bound.value) if bound is not None and bound.kind == "num" else 1
        hi = int(upper.value) if upper is not None and upper.kind == "num" else lo + SUM_TERMS - 1
        return max(1, hi - lo + 1) * max(1, expansion(tree.args[0]))
    return sum(expansion(c) for c in _children(tree))


def check_size(expr, col: int, what: str):
    """Refuse an expression of more than :data:`MAX_NODES` nodes (counted up to the limit)."""
    count, stack = 0, [expr]
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise FormulaError(f"{what} is too large (more than {MAX_NODES} terms and factors written out)", col)
        stack.extend(getattr(node, "args", ()))


def _key(n):
    """The structure of a tree (kinds, values and arguments; columns left out)."""
    if isinstance(n, Node):
        return (n.kind, str(n.value), tuple(_key(a) for a in n.args))
    if isinstance(n, tuple):
        return tuple(_key(a) for a in n)
    return n


def _renamed(name: str, index: str, k: int) -> str | None:
    parts = name.split("_")
    if len(parts) < 2 or index not in parts[1:]:
        return None
    return "_".join([parts[0], *(str(k) if p == index else p for p in parts[1:])])


def substitute(tree: Node, index: str, k: int) -> Node:
    """A copy of ``tree`` with the index ``index`` set to ``k``: ``h`` → ``k``, ``W_O_h`` → ``W_O_k``."""
    if tree.kind == "name":
        if tree.value == index:
            return Node("num", tree.col, value=Integer(k))
        new = _renamed(tree.value, index, k)
        return tree if new is None else Node("name", tree.col, value=new)
    if tree.kind == "sum" and tree.value[0] == index:
        return tree  # an inner sum over the same letter shadows it
    args = tuple(substitute(a, index, k) if isinstance(a, Node) else
                 tuple(substitute(x, index, k) if isinstance(x, Node) else x for x in a) if isinstance(a, tuple)
                 else a for a in tree.args)
    return Node(tree.kind, tree.col, args, tree.value)


def uses_index(tree: Node, index: str) -> bool:
    stack = [tree]
    while stack:
        n = stack.pop()
        if n.kind == "name" and (n.value == index or _renamed(n.value, index, 0) is not None):
            return True
        stack.extend(_children(n))
    return False


def _svd_bases(values) -> list:
    out = []
    for v in values:
        if isinstance(v, (SvdFactor, Singular, TruncatedSvd, SingularValue, SingularTail)) and v.args[0] not in out:
            out.append(v.args[0])
    return out


class NotationRules:
    """Build rules for definitions, singular values, sums and the Kronecker product (see the module docstring).
    Mixed into :class:`~derivations.parsing.formula.Builder`, whose ``_build``, ``_b_add`` and namespace
    they use."""

    namespace: dict
    declare: object

    def _init_notation(self):
        self.defined = {}  # name -> (def node, position among its names)
        self.def_values = {}  # id(def node) -> tuple of built values
        self.building = set()  # ids of definitions being built (a cycle is an error)
        self.svd_defs = []  # def nodes of U, Σ, V = svd(G)
        self.index_mode = 0  # > 0 while building an index (names there are sizes)
        self.sigma_bound = None  # (index, symbol) inside a sum over singular values
        self.sigma_matrices = []

    # ---- definitions ----------------------------------------------------------------------
    def define(self, d: Node):
        """Register the definition ``d`` (its names resolve to its value from now on)."""
        for k, name in enumerate(d.value):
            old = self.defined.get(name)
            if old is not None and old[0] is not d:
                if _key(old[0]) == _key(d):
                    continue  # the same definition written again (on both sides of an identity)
                raise FormulaError(f"{name} is defined twice, differently", d.col)
            if self.declare is None and name in self.namespace:
                raise FormulaError(f"{name} is already a name of the derivation; define a new name", d.col)
            self.defined[name] = (d, k)
        value = d.args[0]
        if value.kind == "call" and value.value == "svd" and d not in self.svd_defs:
            self.svd_defs.append(d)

    def _b_let(self, n):
        for d in n.args[:-1]:
            self.define(d)
        return self._build(n.args[-1])

    def _b_def(self, n):
        raise FormulaError("a definition stands before the formula (L = G G^T; …) or after it (… where L = …)", n.col)

    def defined_value(self, name: str, col: int):
        d, k = self.defined[name]
        key = id(d)
        if key not in self.def_values:
            if key in self.building:
                raise FormulaError(f"{name} is defined in terms of itself", col)
            self.building.add(key)
            try:
                self.def_values[key] = self._definition_value(d)
            finally:
                self.building.discard(key)
        return self.def_values[key][k]

    def _definition_value(self, d: Node) -> tuple:
        value = d.args[0]
        is_svd = value.kind == "call" and value.value == "svd"
        if not is_svd:
            if len(d.value) != 1:
                raise FormulaError("several names are defined at once only by U, Σ, V = svd(G)", d.col)
            out = self._build(value)
            check_size(out, d.col, f"the definition of {d.value[0]}")
            return (out,)
        if len(d.value) != 3 or len(value.args) != 1:
            raise FormulaError("svd(G) gives three matrices: write U, Σ, V = svd(G)", d.col)
        g = self._build(value.args[0])
        if not is_matrix(g):
            raise FormulaError("svd takes a matrix", value.col)
        return (SvdFactor(g, "left"), Singular(g), SvdFactor(g, "right"))

    def _svd_context(self, col: int):
        """The matrix of a bare ``σ_k`` or ``Σ_{>r}``: of ``svd(G)``, or of a derivation's SVD nodes."""
        bases = []
        for d in self.svd_defs:
            g = self.defined_value(d.value[0], col).base
            if g not in bases:
                bases.append(g)
        bases = bases or _svd_bases(self.namespace.values())
        if len(bases) == 1:
            return bases[0]
        if not bases:
            raise FormulaError("σ_k needs its matrix here: write sigma_k(X), or define U, Σ, V = svd(X)", col)
        raise FormulaError(f"σ_k is ambiguous (SVDs of {', '.join(map(str, bases))}): write sigma_k(X)", col)

    # ---- singular values ------------------------------------------------------------------
    def index_value(self, node: Node, x=None):
        """An index or bound: a whole number built from literals and sizes (``σ_max``/``σ_min`` of ``x``)."""
        if x is not None and node.kind == "name" and node.value in ("max", "min"):
            return Integer(1) if node.value == "max" else MinOf(*x.shape)
        self.index_mode += 1
        try:
            v = self._build(node)
        finally:
            self.index_mode -= 1
        if is_matrix(v) or not getattr(v, "is_integer", False):
            raise FormulaError(f"an index is a whole number (a literal or a size such as r + 1), got {v}", node.col)
        return v

    def _b_sv(self, n):
        explicit = len(n.args) > 1
        x = self._build(n.args[1]) if explicit else self._svd_context(n.col)
        if not is_matrix(x):
            raise FormulaError("σ_k(X) takes a matrix", n.col)
        index = n.args[0]
        if self.sigma_bound and index.kind == "name" and index.value == self.sigma_bound[0]:
            self.sigma_matrices.append(x)
            return self.sigma_bound[1]
        k = self.index_value(index, x)
        return SingularValueOf(x, k) if explicit else SingularValue(x, k)

    def _b_sigma_part(self, n):
        """``Σ_{>r}`` (``σ_{r+1}, …`` kept) and ``Σ_{≤r}`` (``σ_1 … σ_r`` kept) of the matrix in scope."""
        g = self._svd_context(n.col)
        r = self.index_value(n.args[0])
        part = "tail" if n.value in (">", ">=") else "head"
        r = r - 1 if n.value in (">=", "<") else r
        return Singular(g, 1, part, r)

    # ---- sums -----------------------------------------------------------------------------
    def _b_sum(self, n):
        body, _, _ = n.args
        index, _ = n.value
        if mentions_sigma(body, index):
            return self._spectral_sum(n)
        return self._expanded_sum(n)

    def _spectral_sum(self, n):
        body, bound, upper = n.args
        index, relation = n.value
        s = Symbol(f"sigma_{index}", positive=True)  # stands for σ_i while the body is built, then removed
        saved = self.sigma_bound, self.sigma_matrices
        self.sigma_bound, self.sigma_matrices = (index, s), []
        try:
            value = self._build(body)
            matrices = self.sigma_matrices
        finally:
            self.sigma_bound, self.sigma_matrices = saved
        if any(m != matrices[0] for m in matrices):
            raise FormulaError("a sum over singular values is over one matrix's σ_i", n.col)
        if is_matrix(value):
            raise FormulaError("a sum over singular values has a scalar body (powers of σ_i)", n.col)
        lo, hi = S.Zero, S.Infinity
        b = None if bound is None else self.index_value(bound)
        if relation in ("=", ">="):
            lo = b - 1
        elif relation == ">":
            lo = b
        elif relation == "<=":
            hi = b
        elif relation == "<":
            hi = b - 1
        if upper is not None:
            hi = self.index_value(upper)
        out = S.Zero
        for term in Add.make_args(expand(value)):
            coeff, p = term.as_coeff_exponent(s)
            if coeff.has(s) or not p.is_Rational:
                raise FormulaError(f"a sum over singular values takes powers of σ_{index} (c σ_i^p); got {term}",
                                   n.col)
            out += coeff * SingularSum(matrices[0], lo, hi, p)
        return out

    def _b_name_in_sum(self, name: str, col: int):
        if self.sigma_bound and name == self.sigma_bound[0]:
            raise FormulaError(f"the index {name} of a sum over singular values appears outside σ_{name}", col)

    def _expanded_sum(self, n):
        body, bound, upper = n.args
        index, relation = n.value
        if relation not in (None, "="):
            raise FormulaError(f"a sum over heads runs {index} = a, …, b: write \\sum_{{{index}=1}}^{{3}}", n.col)
        lo = 1 if bound is None else self._literal(bound, "lower bound")
        hi = lo + SUM_TERMS - 1 if upper is None else self._literal(upper, "upper bound")
        count = hi - lo + 1
        if not 1 <= count <= MAX_SUM_TERMS:
            raise FormulaError(f"a sum over heads has 1 to {MAX_SUM_TERMS} terms, got {count}", n.col)
        if count * max(1, expansion(body)) > MAX_EXPANDED:  # nested sums counted before any is built
            raise FormulaError(f"a sum expands to more than {MAX_EXPANDED} terms", n.col)
        if not uses_index(body, index):
            raise FormulaError(f"the sum's index {index} does not appear in its body (write W_{index} or "
                               f"W_{{O,{index}}})", n.col)
        terms = tuple((1, substitute(body, index, k)) for k in range(lo, hi + 1))
        return self._b_add(Node("add", n.col, terms))

    def _literal(self, node: Node, what: str) -> int:
        v = self.index_value(node)
        if not v.is_Integer:
            raise FormulaError(f"the {what} of a sum over heads is a number here (a derivation's size {v} cannot "
                               "be expanded); write \\sum_{h=1}^{3}", node.col)
        return int(v)

    # ---- Kronecker, vec, min/max, rank, matrix_power --------------------------------------
    def sized_eye(self, col: int):
        raise FormulaError("I in a Kronecker product needs a size: write I_n", col)

    def kron_of(self, parts, col: int):
        coeff, mats = S.One, []
        for x, c in parts:
            if is_matrix(x):
                mats.append(x)
            elif isinstance(x, Eye):  # c·I from its neighbours: sized here
                coeff *= x.coeff
                mats.append(self.sized_eye(c))
            else:
                coeff *= x
        if not mats:
            return coeff
        out = mats[0]
        for m in mats[1:]:
            out = Kron(out, m)
        return out if coeff == 1 else coeff * out

    def _b_kron(self, n):
        return self.kron_of([(self._build(a), a.col) for a in n.args], n.col)

    def notation_call(self, name: str, n: Node, args: list):
        """``vec``, ``kron``, ``min``, ``max``, ``rank``, ``matrix_power``, ``svd`` (None for another function)."""
        if name == "kron":
            if len(args) < 2:
                raise FormulaError("kron takes two or more matrices", n.col)
            return self.kron_of(list(zip(args, (a.col for a in n.args), strict=True)), n.col)
        if name in ("min", "max"):
            if any(is_matrix(a) or isinstance(a, Eye) for a in args):
                raise FormulaError(f"{name} takes scalars (sizes, singular values, norms)", n.col)
            return (MinOf if name == "min" else MaxOf)(*args)
        if name == "svd":
            raise FormulaError("svd(G) gives three matrices: define them, U, Σ, V = svd(G); U Σ V^T", n.col)
        if name in ("vec", "rank") and (len(args) != 1 or not is_matrix(args[0])):
            raise FormulaError(f"{name} takes one matrix", n.col)
        if name == "vec":
            return Vec(args[0])
        if name == "rank":
            return MatrixRank(args[0])
        return None

    @staticmethod
    def power_exponent(n: Node, args: list):
        """The whole number ``k`` of ``matrix_power(X, k)``."""
        if len(args) != 2 or not is_matrix(args[0]) or not getattr(args[1], "is_Integer", False):
            raise FormulaError("matrix_power(X, k) takes a matrix and a whole number", n.col)
        return args[1]

    def identity_of(self, name: str, col: int):
        """``I_n`` (``I_3``, ``I_{d}``): the identity of size ``n``."""
        size = name[2:]
        if size.isdigit():
            return Identity(Integer(size)) if int(size) > 0 else None
        return Identity(self.index_value(Node("name", col, value=size)))


__all__ = ["MAX_EXPANDED", "MAX_NODES", "Eye", "NotationRules", "check_size", "expansion", "is_matrix",
           "mentions_sigma", "substitute", "uses_index"]
