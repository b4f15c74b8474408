"""The duality certificate of a solve step: the objective gradient carried onto the constraint's range.

For ``min ⟨G, L(X)⟩ s.t. ‖K(X)‖ ≤ β`` the matrices of the linear maps ``L`` and ``K`` are built column
by column on a random instance; ``G`` is projected onto the range of ``L`` (``L = K``) or pulled back
through ``K``, and the claimed solution is checked against the dual bound
(:func:`duality_certificate_errors`, used by :class:`derivations.engine.derivation.Derivation`).
"""

from __future__ import annotations

import mpmath
import numpy as np

from derivations import lemmas as L
from derivations.engine.norms import OPERATOR, ball_certificate, family_of
from derivations.vocabulary.evaluate import evaluate, free_symbols
from derivations.vocabulary.nodes import Inner


def duality_certificate_errors(problem, sol, sampler, rng, backend, prepare=None):
    """Duality certificate of ``sol`` for ``problem``: ``min ⟨G, L(X)⟩ s.t. ‖K(X)‖ ≤ β``.

    ``L`` and ``K`` are read off the problem; ``‖·‖`` is a norm of a family of
    :mod:`derivations.engine.norms`. Their matrices are built column by column on the instance. When
    ``L = K``, ``A`` is the orthogonal projection of ``G`` onto the range of ``L``; otherwise (a
    damped constraint, ``K`` of full column rank) ``A = K (KᵀK)⁻¹ Lᵀ G``, so that
    ``⟨G, L(X)⟩ = ⟨A, K(X)⟩`` for every ``X``. Either way ``−β‖A‖_†`` bounds every feasible value
    from below (Hölder, ``‖·‖_†`` the dual norm), and the certificate
    (:func:`derivations.lemmas.operator_ball_certificate`, :func:`derivations.engine.norms.ball_certificate`)
    checks ``Y* = K(X*)`` against it.
    """
    def ev(e, env):
        return evaluate(e, env, backend, sampler.dims)
    x, obj, con = problem.variable, problem.objective, problem.constraint
    family = family_of(con)
    if family is None or not isinstance(obj, Inner):
        raise L.NotApplicable(f"no duality certificate for {obj} s.t. {con}: need ⟨G, L(X)⟩ and ‖K(X)‖ "
                              "for a norm family")
    g_expr, y_expr = obj.args if obj.args[1].has(x) else obj.args[::-1]
    k_expr = con.args[0]
    if g_expr.has(x):
        raise L.NotApplicable(f"the objective {obj} is not ⟨G, L(X)⟩ with G free of {x}")
    syms = free_symbols(obj, con, problem.budget, sol.argmin, sol.value) - {x}
    env = sampler.sample(rng, syms, backend)
    if prepare is not None:  # values a reduction step binds (Derivation._certify)
        env = prepare(env)
    beta, g = ev(problem.budget, env), ev(g_expr, env)
    env[x] = ev(sol.argmin, env)
    y_star, value = ev(k_expr, env), ev(sol.value, env)
    directions = None
    if y_expr == k_expr == x:
        a = g
    elif y_expr == k_expr:
        a, directions = _range_projection(x, y_expr, g, env, ev, backend)
    else:
        a, directions = _pulled_back(x, y_expr, k_expr, g, env, ev, backend)
    if family is OPERATOR:
        return L.operator_ball_certificate(a, y_star, value, beta, backend, rng, directions), env
    return ball_certificate(family, a, y_star, value, beta, backend, rng, directions), env



def _range_projection(x, y_expr, g, env, ev, backend):
    """Orthogonal projection of ``g`` onto the range of the linear map ``X ↦ y_expr`` (on this instance),
    and a sampler of random directions inside that range."""
    columns = _columns(x, y_expr, env, ev, backend)
    y_shape = (g.rows, g.cols) if backend.name == "mpmath" else np.shape(g)
    if backend.name == "mpmath":
        lmat = mpmath.matrix([[c[i] for c in columns] for i in range(len(columns[0]))])
        q, _ = mpmath.qr(lmat, mode="skinny")
        flat = q * (q.T * mpmath.matrix(_flat(g, backend)))
        return mpmath.matrix([[flat[i * y_shape[1] + j] for j in range(y_shape[1])] for i in range(y_shape[0])]), None
    lmat = np.stack(columns, axis=1)
    u, s, _ = np.linalg.svd(lmat, full_matrices=False)
    u = u[:, s > s.max() * 1e-12]
    projected = (u @ (u.T @ np.ravel(g))).reshape(y_shape)
    return projected, lambda r: (lmat @ r.standard_normal(lmat.shape[1])).reshape(y_shape)


def _columns(x, expr, env, ev, backend):
    """The matrix of the linear map ``X ↦ expr`` on this instance, column by column (flattened images
    of the basis matrices)."""
    rows, cols = (env[x].rows, env[x].cols) if backend.name == "mpmath" else np.shape(env[x])
    out = []
    for k in range(rows * cols):
        basis = backend.zeros((rows, cols))
        basis[k // cols, k % cols] = 1
        out.append(_flat(ev(expr, {**env, x: basis}), backend))
    return out


def _pulled_back(x, y_expr, k_expr, g, env, ev, backend):
    """``A = K (KᵀK)⁻¹ Lᵀ g`` with ``⟨g, L(X)⟩ = ⟨A, K(X)⟩`` for all ``X`` (``K`` of full column rank on
    this instance), shaped like ``K(X)``, and a sampler of random directions in the range of ``K``."""
    l_cols, k_cols = _columns(x, y_expr, env, ev, backend), _columns(x, k_expr, env, ev, backend)
    k_shape = (ev(k_expr, env).rows, ev(k_expr, env).cols) if backend.name == "mpmath" else np.shape(ev(k_expr, env))
    if backend.name == "mpmath":
        lmat = mpmath.matrix([[c[i] for c in l_cols] for i in range(len(l_cols[0]))])
        kmat = mpmath.matrix([[c[i] for c in k_cols] for i in range(len(k_cols[0]))])
        flat = kmat * mpmath.lu_solve(kmat.T * kmat, lmat.T * mpmath.matrix(_flat(g, backend)))
        return mpmath.matrix([[flat[i * k_shape[1] + j] for j in range(k_shape[1])] for i in range(k_shape[0])]), None
    lmat, kmat = np.stack(l_cols, axis=1), np.stack(k_cols, axis=1)
    if np.linalg.matrix_rank(kmat) < kmat.shape[1]:
        raise L.NotApplicable("the constraint's map K is not injective on this instance: no pull-back of G")
    flat = kmat @ np.linalg.solve(kmat.T @ kmat, lmat.T @ np.ravel(g))
    return flat.reshape(k_shape), lambda r: (kmat @ r.standard_normal(kmat.shape[1])).reshape(k_shape)


def _flat(v, backend):
    if backend.name == "mpmath":
        return [v[i, j] for i in range(v.rows) for j in range(v.cols)]
    return np.ravel(v)


__all__ = ["duality_certificate_errors"]
