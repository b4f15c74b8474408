"""The chain rule through a product: factor gradients, checked against automatic differentiation (Lemma CR)."""

from __future__ import annotations

from functools import cache

import mpmath
import numpy as np
from sympy import S
from sympy.matrices.expressions import MatMul, MatrixSymbol, Transpose

from derivations.lemmas.base import _SMALL, Applies, Case, Lemma, NotApplicable, Offer, _fresh, _k, _m, _n, _tall
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import map_bottom_up, product, replace_free, rewrite_adjacent, transpose
from derivations.vocabulary.evaluate import InstanceSampler, _size, evaluate, free_symbols
from derivations.vocabulary.nodes import FULL_COLUMN_RANK, FULL_ROW_RANK, FactMatrix, dimension


# ---- chain rule: factor gradients ---------------------------------------------------------
def _chain_rule_rewrite(expr, *, gradients, reverse=False, **_):
    """Replace ``G_M W_K`` by ``G_Q`` (or, reversed, ``G_Q`` by ``G_M W_K``)."""
    out, used = expr, []
    for name, definition in gradients.items():
        if reverse:
            before = out
            out = replace_free(out, name, definition)
            out = replace_free(out, transpose(name), transpose(definition))
            if out != before:
                used.append(f"{name} = {definition}")
            continue
        coeff, mats = definition.as_coeff_matrices() if isinstance(definition, MatMul) else (S.One, [definition])
        for pattern, replacement in ((list(mats), [name]),
                                     ([transpose(m) for m in reversed(mats)], [transpose(name)])):
            out, hits = (rewrite_adjacent(out, pattern, replacement) if coeff == 1
                         else _rewrite_scaled(out, pattern, replacement, coeff))
            if hits:
                used.append(f"{name} = {definition}")
    if not used:
        raise NotApplicable("no product of the loss gradient and a partner to name as a factor gradient")
    return out, [f"{u} (chain rule through M)" for u in dict.fromkeys(used)]


def _rewrite_scaled(expr, pattern: list, replacement: list, coeff) -> tuple:
    """``k P`` inside a product becomes ``(k / c) G`` for the definition ``G = c P`` (a scalar ``c``, as for
    ``M = τ W_Q W_Kᵀ``): each run ``P`` replaced, the product's coefficient divided by ``c`` once per run."""
    count = 0

    def visit(e):
        nonlocal count
        if not isinstance(e, MatMul):
            return e
        k, mats = e.as_coeff_matrices()
        new, hits = rewrite_adjacent(product(*mats), pattern, replacement)
        if not hits:
            return e
        count += hits
        return product(k / coeff**hits, new)

    return map_bottom_up(expr, visit), count


def _loss_gradient(gradients, loss_gradient=None):
    """The loss gradient ``G_M`` in the definitions: given, common to all of them, or the factor without facts."""
    if loss_gradient is not None:
        return loss_gradient
    factor_sets = []
    for definition in gradients.values():
        mats = definition.as_coeff_matrices()[1] if isinstance(definition, MatMul) else [definition]
        factor_sets.append({m.arg if isinstance(m, Transpose) else m for m in mats})
    common = set.intersection(*factor_sets) if len(factor_sets) > 1 else set()
    if len(common) == 1:
        return common.pop()
    # the partners carry facts (FactMatrix); the loss gradient is the one plain matrix they all share
    plain = {m for m in (common if len(factor_sets) > 1 else factor_sets[0]) if not isinstance(m, FactMatrix)}
    if len(plain) == 1:
        return plain.pop()
    raise NotApplicable(f"cannot tell the loss gradient from the partners in {dict(gradients)}; "
                        f"pass loss_gradient=")


def chain_rule_products(gradients, loss_gradient=None):
    """How each factor gradient arises: ``(G_M, left, right, slots)`` with ``M = left · right``.

    ``left`` and ``right`` are ``(partner, transposed)`` or ``None`` (a factor no definition
    names); ``slots[G] = (side, transposed)`` is the factor that ``G`` differentiates. Read off
    the definitions: ``G = G_M W`` is the gradient of ``L(X Wᵀ)`` in ``X``, ``G = G_Mᵀ W`` of
    ``L(W Xᵀ)``, ``G = Wᵀ G_M`` of ``L(W X)``.
    """
    s = _loss_gradient(gradients, loss_gradient)
    left, right, slots = None, None, {}

    def put(current, value, what):
        if current is not None and current != value:
            raise NotApplicable(f"the factor gradients do not come from one product: {what} is both "
                                f"{current[0]} and {value[0]}")
        return value

    for name, definition in gradients.items():
        coeff, mats = definition.as_coeff_matrices() if isinstance(definition, MatMul) else (S.One, [definition])
        if coeff != 1 or len(mats) != 2:
            raise NotApplicable(f"{name} = {definition} is not a loss gradient times one partner")
        a, b = mats
        if a == s:  # G = G_M W: M = X Wᵀ (W = Aᵀ for a wide partner A: M = X A)
            slots[name] = ("left", False)
            right = put(right, (b.arg, False) if isinstance(b, Transpose) else (b, True), "the right factor")
        elif a == transpose(s):  # G = G_Mᵀ W: M = W Xᵀ
            slots[name] = ("right", True)
            left = put(left, (b.arg, True) if isinstance(b, Transpose) else (b, False), "the left factor")
        elif b == s and isinstance(a, Transpose):  # G = Wᵀ G_M: M = W X
            slots[name] = ("right", False)
            left = put(left, (a.arg, False), "the left factor")
        else:
            raise NotApplicable(f"{name} = {definition} is none of G_M W, G_Mᵀ W, Wᵀ G_M for G_M = {s}")
    return s, left, right, slots


def _jax():
    import jax  # lazy: derivations imports without JAX; only the float64 chain-rule check differentiates with it
    return jax


@cache
def _jax_gradient_fn(lt: bool, rt: bool):
    """Jitted ``(∂L/∂M, ∂L/∂left, ∂L/∂right)`` for ``L(M) = Σ c sin(M) + ½ Σ b M²``, ``M = left · right``."""
    jax = _jax()
    jnp = jax.numpy

    def loss_of_m(m, c, b):
        return jnp.sum(c * jnp.sin(m) + 0.5 * b * m * m)

    def loss(lx, rx, c, b):
        return loss_of_m((lx.T if lt else lx) @ (rx.T if rt else rx), c, b)

    def grads(lx, rx, c, b):
        m = (lx.T if lt else lx) @ (rx.T if rt else rx)
        return (jax.grad(loss_of_m)(m, c, b),) + jax.grad(loss, argnums=(0, 1))(lx, rx, c, b)

    return jax.jit(grads)


@cache
def _jax_middle_fn():
    """Jitted ``(∂L/∂M, ∂L/∂X)`` for the same random loss of ``M = L X R`` (a middle factor)."""
    jax = _jax()
    jnp = jax.numpy

    def loss_of_m(m, c, b):
        return jnp.sum(c * jnp.sin(m) + 0.5 * b * m * m)

    def grads(lx, x, rx, c, b):
        return jax.grad(loss_of_m)(lx @ x @ rx, c, b), jax.grad(lambda y: loss_of_m(lx @ y @ rx, c, b))(x)

    return jax.jit(grads)


def _middle(definition, s):
    """``(L, R)`` when ``definition`` is ``Lᵀ G_M Rᵀ`` (the gradient of ``L(L X R)`` in ``X``), else ``None``."""
    coeff, mats = definition.as_coeff_matrices() if isinstance(definition, MatMul) else (S.One, [definition])
    if coeff == 1 and len(mats) == 3 and mats[1] == s:
        return transpose(mats[0]), transpose(mats[2])
    return None


def _value_of(m, out, rng, backend, dims):
    """``m``'s value in ``out`` (a transpose of a sampled symbol included); sampled and stored if new."""
    if m in out:
        return out[m]
    if isinstance(m, Transpose) and m.arg in out:
        return out[m.arg].T
    base = m.arg if isinstance(m, Transpose) else m
    out[base] = backend.asarray(rng.standard_normal(tuple(_size(x, dims) for x in base.shape)))
    return out[base].T if isinstance(m, Transpose) else out[base]


def _middle_instance(env, rng, backend, dims, s, middles):
    """The chain-rule instance of ``M = L X R``: ``G_M`` and ``G_X`` from differentiating the random loss
    (``jax.grad`` in float64, complex steps in mpmath), ``L`` and ``R`` from ``env`` where sampled."""
    if len(set(middles.values())) != 1 or None in middles.values():
        raise NotApplicable(f"the factor gradients do not all come from one product L X R: {middles}")
    (lm, rm), = set(middles.values())
    name = next(iter(middles))
    out = dict(env)
    lv, rv = _value_of(lm, out, rng, backend, dims), _value_of(rm, out, rng, backend, dims)
    xv = backend.asarray(rng.standard_normal(tuple(_size(x, dims) for x in name.shape)))
    m_shape = tuple(_size(x, dims) for x in s.shape)
    c, b = rng.uniform(0.5, 1.5, m_shape) * rng.choice([-1.0, 1.0], m_shape), rng.uniform(-1.0, 1.0, m_shape)
    if backend.name == "float64":
        with _jax().enable_x64(True):
            grad_m, grad_x = (np.asarray(g) for g in _jax_middle_fn()(lv, xv, rv, c, b))
    else:
        cm, bm = backend.asarray(c), backend.asarray(b)

        def loss(m):
            return mpmath.fsum(cm[i, j] * mpmath.sin(m[i, j]) + bm[i, j] * m[i, j] ** 2 / 2
                               for i in range(m.rows) for j in range(m.cols))

        grad_m, grad_x = _complex_step(loss, lv * xv * rv), _complex_step(lambda y: loss(lv * y * rv), xv)
    out[s] = grad_m
    for g in middles:
        out[g] = grad_x
    return out, {s, *middles}


def _jax_loss_gradients(lv, rv, c, b, lt, rt):
    with _jax().enable_x64(True):
        return tuple(np.asarray(g) for g in _jax_gradient_fn(bool(lt), bool(rt))(lv, rv, c, b))


def _chain_instance(env, rng, backend, dims, *, gradients, loss_gradient=None, **_):
    """Values for ``G_M`` and the factor gradients from differentiating a random scalar loss.

    ``L(M) = Σ c_ij sin(M_ij) + ½ Σ b_ij M_ij²`` of ``M = left · right``
    (:func:`chain_rule_products`; the factors come from ``env`` where sampled, fresh otherwise).
    float64: ``jax.grad`` of ``L`` in ``M`` and in each factor; mpmath: complex-step derivatives
    ``Im L(X + i h E_k) / h`` at the working precision (exact to ``O(h²)``, no cancellation). The
    chain rule's own definitions are never used, so a step that rewrites with a wrong definition
    disagrees with the derivatives.
    """
    middles = {name: _middle(definition, _loss_gradient(gradients, loss_gradient))
               for name, definition in gradients.items()}
    if any(v is not None for v in middles.values()):  # G_X = Lᵀ G_M Rᵀ: a middle factor of M = L X R
        if len(set(middles.values())) != 1 or None in middles.values():  # several factors of a longer product
            return _general_instance(env, rng, backend, dims, _loss_gradient(gradients, loss_gradient), gradients)
        return _middle_instance(env, rng, backend, dims, _loss_gradient(gradients, loss_gradient), middles)
    try:
        s, left, right, slots = chain_rule_products(gradients, loss_gradient)
    except NotApplicable:  # more than one partner on a side: the general chain M = F_1 ⋯ F_k
        return _general_instance(env, rng, backend, dims, _loss_gradient(gradients, loss_gradient), gradients)
    m_shape = tuple(_size(x, dims) for x in s.shape)
    out = dict(env)

    def factor(side):
        spec = left if side == "left" else right
        if spec is not None:  # a partner: its value in env, else sampled in its own shape
            return _value_of(spec[0], out, rng, backend, dims), spec[1]
        name = next(g for g, (sd, _) in slots.items() if sd == side)  # no partner: a slot is on this side
        value = backend.asarray(rng.standard_normal(tuple(_size(x, dims) for x in name.shape)))
        return value, slots[name][1]

    (lv, lt), (rv, rt) = factor("left"), factor("right")
    c, b = rng.uniform(0.5, 1.5, m_shape) * rng.choice([-1.0, 1.0], m_shape), rng.uniform(-1.0, 1.0, m_shape)
    if backend.name == "float64":
        grad_m, grad_left, grad_right = _jax_loss_gradients(lv, rv, c, b, lt, rt)
        out[s] = grad_m
        for name, (side, _) in slots.items():
            out[name] = grad_left if side == "left" else grad_right
        return out, {s, *slots}
    cm, bm = backend.asarray(c), backend.asarray(b)
    def prod(lx, rx):
        return (lx.T if lt else lx) * (rx.T if rt else rx)
    h = mpmath.mpf(10) ** (-(mpmath.mp.dps + 10))

    def loss(m):
        return mpmath.fsum(cm[i, j] * mpmath.sin(m[i, j]) + bm[i, j] * m[i, j] ** 2 / 2
                           for i in range(m.rows) for j in range(m.cols))

    def complex_step(f, x):
        g = mpmath.zeros(x.rows, x.cols)
        for i in range(x.rows):
            for j in range(x.cols):
                shifted = mpmath.matrix(x)
                shifted[i, j] += mpmath.mpc(0, h)
                g[i, j] = mpmath.im(f(shifted)) / h
        return g

    out[s] = complex_step(loss, prod(lv, rv))
    for name, (side, _) in slots.items():
        out[name] = complex_step((lambda x: loss(prod(x, rv))) if side == "left" else (lambda x: loss(prod(lv, x))),
                                 lv if side == "left" else rv)
    return out, {s, *slots}


# ---- any number of partners: M = F_1 ⋯ F_k ---------------------------------------------------
def product_chain(definition, loss_gradient):
    """``(factors, slot, transposed, coeff)`` of one definition read as a chain rule through ``M = F_1 ⋯ F_k``.

    ``G = P_1 ⋯ P_a G_M Q_1 ⋯ Q_b`` is the gradient of ``L(L X R)`` in ``X`` with ``L = (P_1 ⋯ P_a)ᵀ``,
    ``R = (Q_1 ⋯ Q_b)ᵀ``; ``G = P G_Mᵀ Q`` that of ``L(Q Xᵀ P)``. ``factors`` lists ``M``'s factors with
    ``None`` at the variable's place ``slot``; ``transposed``: ``X`` enters ``M`` as ``Xᵀ``; ``coeff``: the scalar
    ``c`` of ``M = c F_1 ⋯ F_k`` (``G = c P G_M Q``, a temperature ``τ``).
    """
    coeff, mats = definition.as_coeff_matrices() if isinstance(definition, MatMul) else (S.One, [definition])
    hits = [i for i, m in enumerate(mats) if m in (loss_gradient, transpose(loss_gradient))]
    if coeff == 0 or len(hits) != 1:
        raise NotApplicable(f"{definition} is not a product of partners with the loss gradient {loss_gradient} "
                            f"once")
    i = hits[0]
    before, after = list(mats[:i]), list(mats[i + 1:])
    if mats[i] == loss_gradient:
        left, right = [transpose(m) for m in reversed(before)], [transpose(m) for m in reversed(after)]
        return [*left, None, *right], len(left), False, coeff
    return [*after, None, *before], len(after), True, coeff


def chain_factors(gradients, loss_gradient):
    """``(factors, slots, coeff)``: ``M``'s factors in order (a partner, or ``None`` where only a variable stands) and,
    per factor gradient, ``(index, transposed)`` of the factor it differentiates; every definition must read
    as the same product (:func:`product_chain`)."""
    chains = {name: product_chain(d, loss_gradient) for name, d in gradients.items()}
    lengths, coeffs = {len(c) for c, *_ in chains.values()}, {c for *_, c in chains.values()}
    if len(lengths) != 1 or len(coeffs) != 1:
        raise NotApplicable(f"the factor gradients do not come from one product: {dict(gradients)} name "
                            f"products of {sorted(lengths)} factors with the scalars {sorted(map(str, coeffs))}")
    factors: list = [None] * lengths.pop()
    for name, (chain, *_) in chains.items():
        for j, f in enumerate(chain):
            if f is not None and factors[j] is not None and factors[j] != f:
                raise NotApplicable(f"the factor gradients do not come from one product: factor {j + 1} is both "
                                    f"{factors[j]} and {f} ({name} = {gradients[name]})")
            factors[j] = factors[j] if f is None else f
    return factors, {name: (slot, t) for name, (_, slot, t, _) in chains.items()}, coeffs.pop()


@cache
def _jax_chain_fn(k: int):
    """Jitted ``(∂L/∂M, (∂L/∂F_1, …, ∂L/∂F_k))`` for the random loss of ``M = F_1 ⋯ F_k``."""
    jax = _jax()
    jnp = jax.numpy

    def loss_of_m(m, c, b):
        return jnp.sum(c * jnp.sin(m) + 0.5 * b * m * m)

    def chain(fs):
        m = fs[0]
        for f in fs[1:]:
            m = m @ f
        return m

    def grads(fs, c, b):
        return jax.grad(loss_of_m)(chain(fs), c, b), jax.grad(lambda xs: loss_of_m(chain(xs), c, b))(fs)

    return jax.jit(grads)


def _general_instance(env, rng, backend, dims, s, gradients):
    """The chain-rule instance of ``M = F_1 ⋯ F_k`` (:func:`chain_factors`): the partners from ``env`` (sampled
    in their own shapes where missing), a factor only a variable stands for sampled in the variable's shape;
    ``G_M`` and every factor gradient by differentiating the random loss (``jax.grad`` in float64, complex
    steps in mpmath), never from the definitions."""
    factors, slots, coeff = chain_factors(gradients, s)
    out = dict(env)
    out.update(InstanceSampler(dims).sample(rng, free_symbols(coeff) - set(out), backend))
    scale = evaluate(coeff, out, backend, dims)
    values = []
    for j, f in enumerate(factors):
        if f is not None:
            values.append(_factor_value(f, out, rng, backend, dims))
            continue
        name, t = next((g, t) for g, (slot, t) in slots.items() if slot == j)
        shape = tuple(_size(x, dims) for x in name.shape)
        values.append(backend.asarray(rng.standard_normal(shape[::-1] if t else shape)))
    if coeff != 1:  # M = c F_1 ⋯ F_k: differentiate with c F_1 in the first place, then ∂/∂F_1 = c ∂/∂(c F_1)
        values[0] = values[0] * scale
    m_shape = tuple(_size(x, dims) for x in s.shape)
    c, b = rng.uniform(0.5, 1.5, m_shape) * rng.choice([-1.0, 1.0], m_shape), rng.uniform(-1.0, 1.0, m_shape)
    if backend.name == "float64":
        with _jax().enable_x64(True):
            grad_m, grad_fs = _jax_chain_fn(len(values))(tuple(values), c, b)
        grad_m, grad_fs = np.asarray(grad_m), [np.asarray(g) for g in grad_fs]
    else:
        cm, bm = backend.asarray(c), backend.asarray(b)

        def loss(fs):
            m = fs[0]
            for f in fs[1:]:
                m = m * f
            return mpmath.fsum(cm[i, j] * mpmath.sin(m[i, j]) + bm[i, j] * m[i, j] ** 2 / 2
                               for i in range(m.rows) for j in range(m.cols))
        m = values[0]
        for f in values[1:]:
            m = m * f
        grad_m = _complex_step(lambda x: loss([x]), m)
        grad_fs = [_complex_step(lambda x, j=j: loss([*values[:j], x, *values[j + 1:]]), values[j])
                   if any(slot == j for slot, _ in slots.values()) else None for j in range(len(values))]
    if coeff != 1 and grad_fs[0] is not None:
        grad_fs[0] = grad_fs[0] * scale
    out[s] = grad_m
    for name, (slot, t) in slots.items():
        out[name] = grad_fs[slot].T if t else grad_fs[slot]
    return out, {s, *slots}


def _factor_value(f, out, rng, backend, dims):
    """A partner's value: a (transposed) symbol from ``out`` or sampled (:func:`_value_of`); another expression
    (a Gram root, say) evaluated on ``out`` with its missing symbols sampled."""
    if isinstance(f.arg if isinstance(f, Transpose) else f, MatrixSymbol):
        return _value_of(f, out, rng, backend, dims)
    missing = free_symbols(f) - set(out)
    out.update(InstanceSampler(dims).sample(rng, missing, backend))
    return evaluate(f, out, backend, dims)


def _complex_step(f, x):
    """``∂f/∂x`` entrywise by complex steps ``Im f(x + i h E_ij) / h`` at the working precision (mpmath)."""
    h = mpmath.mpf(10) ** (-(mpmath.mp.dps + 10))
    g = mpmath.zeros(x.rows, x.cols)
    for i in range(x.rows):
        for j in range(x.cols):
            shifted = mpmath.matrix(x)
            shifted[i, j] += mpmath.mpc(0, h)
            g[i, j] = mpmath.im(f(shifted)) / h
    return g


def _chain_offers(view):
    """Search: name the factor gradients the search may use (none offered when it has no definitions)."""
    if not view.gradients:
        return []
    return [Offer("Lemma CR (name the factor gradients)", {"gradients": view.gradients})]


def _chain_ids():
    w_q, w_k = _tall("W_Q", FULL_COLUMN_RANK), _tall("W_K", FULL_COLUMN_RANK)
    g_m, g_q, g_k = _fresh("G_M", _m, _m), _fresh("G_Q", _m, _n), _fresh("G_K", _m, _n)
    qk = {g_q: product(g_m, w_k), g_k: product(transpose(g_m), w_q)}
    w_o, g_v = _tall("W_O", FULL_COLUMN_RANK), _fresh("G_V", _n, _m)
    ov = {g_v: product(transpose(w_o), g_m)}
    # M = B A with a wide partner A (r × d_in, full row rank): G_B = G_M Aᵀ, G_A = Bᵀ G_M
    w_b, w_a = _tall("B", FULL_COLUMN_RANK), FactMatrix("A", _n, _k, [FULL_ROW_RANK])
    g_w, g_b, g_a = _fresh("G_W", _m, _k), _fresh("G_B", _m, _n), _fresh("G_A", _n, _k)
    wide = {g_b: product(g_w, transpose(w_a)), g_a: product(transpose(w_b), g_w)}
    # a middle factor of M = L X R: G_X = Lᵀ G_M Rᵀ
    w_l, w_r = _tall("L", FULL_COLUMN_RANK), FactMatrix("R", _n, _k, [FULL_ROW_RANK])
    g_x = _fresh("G_X", _n, _n)
    middle = {g_x: product(transpose(w_l), g_w, transpose(w_r))}
    families = (qk, ov, wide, middle)
    cases = [Case(definition, name, {"gradients": grads})
             for grads in families for name, definition in grads.items()]
    cases += [Case(name, definition, {"gradients": grads, "reverse": True})
              for grads in families for name, definition in grads.items()]
    # every factor of M = L X R at once (the general chain, any number of partners): the middle one's case
    x, g_l, g_r = _fresh("X", _n, _n), _fresh("G_L", _m, _n), _fresh("G_R", _n, _k)
    three = {g_l: product(g_w, transpose(w_r), transpose(x)), g_x: middle[g_x],
             g_r: product(transpose(x), transpose(w_l), g_w)}
    cases.append(Case(middle[g_x], g_x, {"gradients": three}))
    return cases, InstanceSampler(_SMALL)


def _chain_statement() -> Statement:
    """``M = L X R`` (``L``, ``R`` may be absent): ``G_X = ∂ℒ/∂X = Lᵀ G_M Rᵀ``. A definition that a step
    brings; the self-check compares it with automatic differentiation of a random loss."""
    p, q, a, b = (dimension(s) for s in "pqab")
    lf, rf = _fresh("L", a, p), _fresh("R", q, b)
    return Statement((Clause(_fresh("G_X", p, q), product(transpose(lf), _fresh("G_M", a, b), transpose(rf)),
                             defines=True),), optional=frozenset({lf, rf}),
                     sizes=({p: 3, q: 4, a: 5, b: 6}, {p: 16, q: 17, a: 18, b: 19}))


CHAIN_RULE = Lemma(
    key="chain_rule", number="CR", title="Chain rule through the product",
    statement=_chain_statement(),
    rewrite=_chain_rule_rewrite, identities=_chain_ids, instance=_chain_instance,
    not_modelled="checked against automatic differentiation of a random loss, not against its own definitions",
    applies=Applies(_chain_offers, order=60),
)
