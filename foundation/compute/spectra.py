"""Random test matrices with prescribed spectra (for checks, tests and validation)."""

from __future__ import annotations

import numpy as np


def random_orthonormal(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """A Haar-distributed ``rows × cols`` matrix with orthonormal columns (``rows ≥ cols``)."""
    if rows < cols:
        raise ValueError(f"orthonormal columns need rows >= cols, got {rows}x{cols}")
    q, r = np.linalg.qr(rng.standard_normal((rows, cols)))
    return q * np.sign(np.diag(r))


def with_singular_values(rng: np.random.Generator, rows: int, cols: int, sigma) -> np.ndarray:
    """``U diag(σ) Vᵀ`` with Haar ``U, V``; ``len(σ) ≤ min(rows, cols)`` (the rest are zero).

    Examples:
      >>> import numpy as np
      >>> from foundation.compute.spectra import with_singular_values
      >>> a = with_singular_values(np.random.default_rng(0), 3, 5, [2.0, 1.0])
      >>> a.shape, np.linalg.svd(a, compute_uv=False).round(12)
      ((3, 5), array([2., 1., 0.]))
    """
    sigma = np.asarray(sigma, dtype=np.float64)
    k = sigma.size
    if k > min(rows, cols):
        raise ValueError(f"{k} singular values do not fit a {rows}x{cols} matrix")
    u = random_orthonormal(rng, rows, k)
    v = random_orthonormal(rng, cols, k)
    return (u * sigma) @ v.T


def log_spaced_spectrum(rng: np.random.Generator, count: int, condition: float) -> np.ndarray:
    """``count`` singular values in ``[1/condition, 1]``, log-uniform, including both ends."""
    if count == 1:
        return np.ones(1)
    inner = np.exp(rng.uniform(-np.log(condition), 0.0, size=count - 2))
    return np.sort(np.concatenate([[1.0, 1.0 / condition], inner]))[::-1]


def random_batch(rng: np.random.Generator, batch: tuple, rows: int, cols: int,
                 condition: float = 10.0) -> np.ndarray:
    """A ``batch + (rows, cols)`` stack of matrices with condition number ``condition``."""
    out = np.empty(tuple(batch) + (rows, cols))
    for idx in np.ndindex(*batch):
        s = log_spaced_spectrum(rng, min(rows, cols), condition)
        out[idx] = with_singular_values(rng, rows, cols, s)
    return out
