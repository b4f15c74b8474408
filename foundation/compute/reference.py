"""Float64 NumPy and arbitrary-precision mpmath references of the workbench's operations.

Both backends expose the same functions, so an expression can be evaluated either way
(:func:`derivations.vocabulary.evaluate.evaluate`). mpmath code scopes its precision with ``workdps``.
"""

from __future__ import annotations

import mpmath
import numpy as np
import scipy.linalg

from foundation.compute import numpy_routines


class NumpyBackend:
    """Float64 NumPy routines (batched over leading axes where that is free)."""

    name = "float64"

    @staticmethod
    def asarray(x):
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def eye(n):
        return np.eye(n)

    @staticmethod
    def zeros(shape):
        return np.zeros(shape)

    @staticmethod
    def scalar(x):
        return float(x)

    @staticmethod
    def transpose(a):
        return np.swapaxes(a, -1, -2)

    @staticmethod
    def matmul(a, b):
        return a @ b

    msign = staticmethod(numpy_routines.msign_svd)

    @staticmethod
    def psd_power(a, p):
        """``A^p`` for symmetric PSD ``A`` by eigh; negative powers need ``A`` positive definite."""
        w, v = np.linalg.eigh(a)
        if p < 0 and np.any(w <= 0):
            raise np.linalg.LinAlgError("negative power of a singular PSD matrix")
        # numpy_routines.psd_power takes root singular values r (eigenvalues r²); for p < 0 eigenvalues
        # at or below n·eps·max(w) count as 0 (a pseudo-inverse power)
        cut = w.shape[-1] * np.finfo(np.float64).eps * w[..., -1:] if p < 0 else 0.0
        return numpy_routines.psd_power((np.sqrt(np.where(w > cut, w, 0.0)), v, 1.0), p)

    sylvester = staticmethod(numpy_routines.sylvester_dense)

    @staticmethod
    def inverse(a):
        """``A⁻¹`` (LAPACK through :func:`numpy.linalg.inv`, batched; a singular ``A`` raises)."""
        return np.linalg.inv(a)

    @staticmethod
    def hstack(blocks):
        return np.concatenate(blocks, axis=-1)

    @staticmethod
    def blockdiag(blocks):
        return scipy.linalg.block_diag(*blocks)

    @staticmethod
    def inner(a, b):
        return float(np.sum(a * b))

    @staticmethod
    def op_norm(a):
        return float(np.linalg.norm(a, 2))

    @staticmethod
    def nuclear_norm(a):
        return float(np.linalg.norm(a, "nuc"))

    @staticmethod
    def max_abs(a):
        return float(np.max(np.abs(a))) if np.size(a) else 0.0


class MpmathBackend:
    """mpmath routines at ``dps`` decimal digits (the caller scopes precision with ``workdps``)."""

    name = "mpmath"

    def __init__(self, dps: int = 50):
        self.dps = dps

    def asarray(self, x):
        if isinstance(x, mpmath.matrix):
            return x
        x = np.asarray(x, dtype=np.float64)
        return mpmath.matrix([[mpmath.mpf(float(v)) for v in row] for row in x])

    @staticmethod
    def eye(n):
        return mpmath.eye(n)

    @staticmethod
    def orthonormalize(a):
        """Columns of ``a`` made orthonormal to the working precision (skinny QR)."""
        q, _ = mpmath.qr(a, mode="skinny")
        return q

    @staticmethod
    def zeros(shape):
        return mpmath.zeros(*shape)

    @staticmethod
    def scalar(x):
        return mpmath.mpf(x)

    @staticmethod
    def transpose(a):
        return a.T

    @staticmethod
    def matmul(a, b):
        return a * b

    def msign(self, a):
        m, n = a.rows, a.cols
        if m < n:
            return self.msign(a.T).T
        u, s, v = mpmath.svd_r(a, full_matrices=False, compute_uv=True)
        smax = max(s) if len(s) else mpmath.mpf(0)
        tol = max(m, n) * mpmath.mpf(10) ** (-self.dps + 5) * smax
        out = mpmath.zeros(m, n)
        for k in range(len(s)):
            if s[k] > tol:
                out += u[:, k] * v[k, :]
        return out

    @staticmethod
    def psd_power(a, p):
        w, q = mpmath.eigsy(a)
        n = a.rows
        d = mpmath.zeros(n, n)
        for i in range(n):
            if p < 0 and w[i] <= 0:
                raise ZeroDivisionError("negative power of a singular PSD matrix")
            d[i, i] = mpmath.power(max(w[i], 0), p)
        return q * d * q.T

    @staticmethod
    def inverse(a):
        return mpmath.inverse(a)

    @staticmethod
    def hstack(blocks):
        rows = blocks[0].rows
        return mpmath.matrix([[v for b in blocks for v in b.tolist()[i]] for i in range(rows)])

    @staticmethod
    def blockdiag(blocks):
        n, m = sum(b.rows for b in blocks), sum(b.cols for b in blocks)
        out = mpmath.zeros(n, m)
        r = c = 0
        for b in blocks:
            for i in range(b.rows):
                for j in range(b.cols):
                    out[r + i, c + j] = b[i, j]
            r, c = r + b.rows, c + b.cols
        return out

    @staticmethod
    def sylvester(w_q, w_k, damping, d):
        """Solve the regularized Sylvester equation as a Kronecker linear system (small sizes)."""
        n, m = d.rows, d.cols
        a = w_q * w_q.T + mpmath.eye(n) * damping
        b = w_k * w_k.T + mpmath.eye(m) * damping
        big = mpmath.zeros(n * m, n * m)
        for i in range(n):
            for j in range(m):
                row = i * m + j
                for k in range(n):
                    big[row, k * m + j] += a[i, k]
                for k in range(m):
                    big[row, i * m + k] += b[k, j]
        x = mpmath.lu_solve(big, mpmath.matrix([d[i, j] for i in range(n) for j in range(m)]))
        return mpmath.matrix([[x[i * m + j] for j in range(m)] for i in range(n)])

    @staticmethod
    def inner(a, b):
        return mpmath.fsum(a[i, j] * b[i, j] for i in range(a.rows) for j in range(a.cols))

    @staticmethod
    def op_norm(a):
        s = mpmath.svd_r(a, compute_uv=False)
        return max(s)

    @staticmethod
    def nuclear_norm(a):
        return mpmath.fsum(mpmath.svd_r(a, compute_uv=False))

    @staticmethod
    def max_abs(a):
        if isinstance(a, mpmath.matrix):
            return max((abs(a[i, j]) for i in range(a.rows) for j in range(a.cols)), default=mpmath.mpf(0))
        return abs(a)
