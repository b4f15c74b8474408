"""Inverse-root schedules run on matrices: in mpmath at high precision, and through the runtime routine.

A test matrix is ``X = Q diag(λ) Qᵀ`` with ``Q`` a product of three Householder reflections (orthogonal to
the working precision) and a spectrum in ``[l, 1]`` that holds both ends (the hardest eigenvalues) and
random ones between. In mpmath (:func:`validate_mp`) the coupled iteration runs on ``X`` itself, and the
measured error is ``‖X^{1/p} Y − I‖₂``, which the certificate bounds by its root error ``δ'`` (the
matrices commute, so it is ``max_i |λ_i^{1/p} y(λ_i) − 1|``); the relative error ``‖Y − X^{-1/p}‖₂ /
‖X^{-1/p}‖₂`` is printed beside it. Through the runtime (:func:`validate_runtime`,
:func:`foundation.compute.jax_inverse_root.inverse_root`) the input is scaled at random and normalized
by the routine (its Frobenius norm), so the spectrum is chosen with ``λ_min ≥ l √n``: the normalized
eigenvalues then stay in ``[l, 1]``. The reference is the float64 eigendecomposition of the input as
rounded to the dtype, so the measured error is the routine's own. The check is on the relative error,
which ``δ'`` bounds too (``Y − X^{-1/p} = X^{-1/p}(X^{1/p} Y − I)``), plus a rounding allowance of
``ROUNDING · n · u`` in the compute dtype and ``u`` of the output dtype; the root error ``‖X^{1/p} Y − I‖₂``
of a rounded output also carries ``κ(X)^{1/p}`` times the output's rounding, so it is reported, not checked.
"""

from __future__ import annotations

import mpmath
import numpy as np

from coeffsearch.inverse_roots import RootSchedule
from coeffsearch.validate import jax_routines

#: the rounding allowance of a runtime run: ``ROUNDING · n · u`` of the compute dtype plus ``u`` of the output
ROUNDING = 4
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8}


def spectrum(n: int, lower: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` eigenvalues in ``[lower, 1]``: both ends, the rest log-uniform between."""
    inner = np.exp(rng.uniform(np.log(lower), 0.0, max(n - 2, 0)))
    return np.concatenate([[lower, 1.0], inner])[:n]


def _householder(v):
    n = v.rows
    return mpmath.eye(n) - (2 / (v.T * v)[0]) * (v * v.T)


def mp_matrix(eigenvalues, rng):
    """``(X, Q)`` in mpmath: ``X = Q diag(λ) Qᵀ``, ``Q`` three Householder reflections."""
    n = len(eigenvalues)
    q = mpmath.eye(n)
    for _ in range(3):
        q = q * _householder(mpmath.matrix([mpmath.mpf(float(x)) for x in rng.standard_normal(n)]))
    return q * mpmath.diag([mpmath.mpf(e) for e in eigenvalues]) * q.T, q


def iterate_mp(schedule: RootSchedule, x):
    """``Y_N`` of the coupled iteration on the mpmath matrix ``x`` (already normalized)."""
    n = x.rows
    m, y = x, mpmath.eye(n)
    for step in schedule.steps:
        c = [mpmath.mpf(v) for v in step]
        t = c[-1] * mpmath.eye(n)
        for v in reversed(c[:-1]):
            t = t * m + v * mpmath.eye(n)
        y = y * t
        m = t ** schedule.p * m
    return y


def _spectral_norm(a) -> mpmath.mpf:
    return max(abs(e) for e in mpmath.eigsy((a + a.T) / 2, eigvals_only=True))


def validate_mp(schedule: RootSchedule, n: int = 6, batch: int = 2, dps: int = 40, seed: int = 0) -> list[dict]:
    """Rows ``{"matrix", "root_error", "relative_error"}`` of ``batch`` mpmath runs at ``dps`` digits."""
    rng = np.random.default_rng(seed)
    rows = []
    with mpmath.workdps(dps):
        for i in range(batch):
            lam = spectrum(n, float(schedule.interval[0]), rng)
            x, q = mp_matrix(lam, rng)
            y = iterate_mp(schedule, x)
            root = q * mpmath.diag([mpmath.mpf(e) ** (mpmath.mpf(1) / schedule.p) for e in lam]) * q.T
            inverse = q * mpmath.diag([mpmath.mpf(e) ** (-mpmath.mpf(1) / schedule.p) for e in lam]) * q.T
            err = _spectral_norm(root * y - mpmath.eye(n))
            rel = _spectral_norm(y - inverse) / _spectral_norm(inverse)
            rows.append({"matrix": i, "root_error": float(err), "relative_error": float(rel)})
    return rows


def runtime_matrices(n: int, lower: float, batch: int, seed: int) -> np.ndarray:
    """``batch`` float64 SPD matrices whose Frobenius-normalized eigenvalues lie in ``[lower, 1]``, at random scales."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(batch):
        lam = spectrum(n, min(lower * np.sqrt(n) * 1.01, 0.5), rng)
        q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        out.append((q * lam) @ q.T * 2.0 ** rng.integers(-20, 20))
    return np.stack([(x + x.T) / 2 for x in out])


def validate_runtime(schedule: RootSchedule, dtype: str, n: int = 32, batch: int = 3, seed: int = 0) -> dict:
    """``{"dtype", "root_error", "relative_error", "allowance"}``: the worst of ``batch`` runtime runs, and the
    rounding allowance of the relative error (``δ'`` is added by :func:`allowed`)."""
    jax, _, _, inverse_root = jax_routines()  # float64 enabled
    x = runtime_matrices(n, float(schedule.interval[0]), batch, seed)
    xd = jax.numpy.asarray(x, dtype)
    rounded = np.asarray(xd.astype("float64"))
    run = jax.jit(inverse_root, static_argnums=1)  # one compilation per dtype, not one per operation
    out = np.asarray(run(xd, schedule.p, jax.numpy.asarray(schedule.as_floats())).astype("float64"))
    e, v = np.linalg.eigh(rounded)
    root = (v * e[..., None, :] ** (1 / schedule.p)) @ v.transpose(0, 2, 1)
    inverse = (v * e[..., None, :] ** (-1 / schedule.p)) @ v.transpose(0, 2, 1)
    err = np.linalg.norm(root @ out - np.eye(n), 2, axis=(-2, -1))
    rel = np.linalg.norm(out - inverse, 2, axis=(-2, -1)) / np.linalg.norm(inverse, 2, axis=(-2, -1))
    compute = "float32" if dtype == "bfloat16" else dtype
    allowance = ROUNDING * n * UNIT_ROUNDOFF[compute] + UNIT_ROUNDOFF[dtype]
    return {"dtype": dtype, "root_error": float(err.max()), "relative_error": float(rel.max()),
            "allowance": allowance}


def allowed(root_error: str, row: dict) -> float:
    """The bound a measured relative error must keep: the certified ``δ'`` plus the row's rounding allowance."""
    return float(root_error) + row.get("allowance", 0.0)
