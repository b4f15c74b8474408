"""The horizontal projection derived as an orthogonal projection (normal equations).

The vertical directions of ``M = W_Q W_Kᵀ`` are ``V(A) = (W_Q A, −W_K Aᵀ)``. Projecting a pair
``m = (m_Q, m_K)`` orthogonally onto their complement means ``min_A ‖m + V(A)‖_F²``, whose normal
equations are ``V*V(A) = −V*(m)``. The engine supplies both operators:

* ``V*`` is read off the horizontality identity ``⟨(Δ_Q, Δ_K), V(A)⟩ = ⟨W_QᵀΔ_Q − Δ_KᵀW_K, A⟩``
  (:func:`derivations.gauge.horizontality`, an adjoint move);
* ``V*V(X) = W_QᵀW_Q X + X W_KᵀW_K`` is computed from them (:func:`normal_operator`) and read as the
  Sylvester operator with SPD coefficients (full column rank), so ``X`` solves
  ``W_QᵀW_Q X + X W_KᵀW_K = m_KᵀW_K − W_Qᵀm_Q`` and the projection is ``m + V(X)``.

``measurements`` solves ``min_A ‖m + V(A)‖²`` independently (vectorized ``V``, dense least squares).
"""

from __future__ import annotations

from functools import cache

import numpy as np
from sympy import Add
from sympy.matrices.expressions import MatrixSymbol

from derivations import gauge_directions as G
from derivations.engine.derivation import identity_chain
from derivations.sylvester import sylvester_operator
from derivations.vocabulary.algebra import product, total
from derivations.vocabulary.evaluate import evaluate_on
from derivations.vocabulary.nodes import RegularizedSylvester

X = MatrixSymbol("X", G.d_h, G.d_h)


def adjoint_of_vertical(dq, dk):
    """``V*(Δ_Q, Δ_K)``: the coefficient of ``A`` in the derived horizontality identity."""
    formula = G.horizontality().formula
    terms = formula.args if isinstance(formula, Add) else (formula,)
    coeffs = [t.args[0] if t.args[1] == G.A else t.args[1] for t in terms]
    return total(*coeffs).xreplace({G.D_Q: dq, G.D_K: dk})


@cache
def normal_operator():
    """``V*(V(X))`` for the vertical map ``V``, collected by the engine's sound normal form."""
    return identity_chain("projection.normal_operator", "Horizontal projection: the normal operator V*V",
                          adjoint_of_vertical(*G.vertical(X)), G.context(),
                          statement="V*(V(X)) with V(X) = (W_Q X, −W_K Xᵀ) and V* read off the horizontality identity")


def coefficient():
    """``X`` with ``V*V(X) = −V*(m)``: the inner Sylvester solve read off :func:`normal_operator`."""
    left, right, damping = sylvester_operator(normal_operator().formula, X, side="inner")
    v_star = adjoint_of_vertical(G.m_Q, G.m_K)
    negated = [product(-1, t) for t in (v_star.args if isinstance(v_star, Add) else (v_star,))]
    rhs = total(*sorted(negated, key=_leading_sign))  # written a − b rather than −b + a
    return RegularizedSylvester(left, right, damping, rhs, "inner")


def _leading_sign(term) -> bool:
    coeff = term.as_coeff_matrices()[0] if hasattr(term, "as_coeff_matrices") else 1
    return bool(coeff < 0)


def projected():
    """``m + V(X)``: the orthogonal projection of ``(m_Q, m_K)`` onto the horizontal space."""
    vq, vk = G.vertical(coefficient())
    return total(G.m_Q, vq), total(G.m_K, vk)


def least_squares_projection(w_q, w_k, m_q, m_k):
    """``m + V(A*)`` with ``A* = argmin ‖m + V(A)‖_F²`` by dense least squares on vectorized ``V``."""

    k = w_q.shape[1]
    cols = []
    for idx in range(k * k):
        e = np.zeros(k * k)
        e[idx] = 1.0
        vq, vk = (evaluate_on(v, {"W_Q": w_q, "W_K": w_k, "A": e.reshape(k, k)}) for v in G.vertical(G.A))
        cols.append(np.concatenate([np.ravel(vq), np.ravel(vk)]))
    v = np.stack(cols, axis=1)
    m = np.concatenate([np.ravel(m_q), np.ravel(m_k)])
    a, *_ = np.linalg.lstsq(v, -m, rcond=None)
    out = m + v @ a
    return out[:m_q.size].reshape(m_q.shape), out[m_q.size:].reshape(m_k.shape)


def measurements(rng):

    w_q, w_k, m_q, m_k = (rng.standard_normal((8, 3)) for _ in range(4))
    values = {"W_Q": w_q, "W_K": w_k, "m_Q": m_q, "m_K": m_k}
    got = [evaluate_on(p, values) for p in projected()]
    ref = least_squares_projection(w_q, w_k, m_q, m_k)
    err = max(np.max(np.abs(a - b)) / np.max(np.abs(b)) for a, b in zip(got, ref, strict=False))
    return [("derived horizontal projection vs dense least squares over the vertical directions, relative error",
             err, 1e-10)]
