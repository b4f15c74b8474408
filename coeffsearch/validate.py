"""Run a schedule with the project's one Newton–Schulz (JAX) on matrices with prescribed spectra.

The test matrices form a batch with condition numbers from 1 to the largest the interval allows,
and run both as given and transposed (wide and tall).

For each dtype the observed singular values of the output are compared with the certified band
of the schedule on ``[l, 1]``, where ``l`` is the smallest normalized singular value of the test
matrices (``σ_min / ‖X‖_F``). Float rounding moves the observed values by a few units of the
dtype's precision per step, so "inside" allows ``ROUNDING_ULPS · eps(dtype)`` of slack,
stated in the report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from numerics.spectra import with_singular_values

from .certify import certify

ROUNDING_ULPS = 8
DTYPES = ("float64", "float32", "bfloat16")


@dataclass
class ValidationRow:
    dtype: str
    shape: tuple
    lower: float
    observed: tuple
    certified: tuple
    slack: float
    max_error: float  # ‖X − U Vᵀ‖_op of the output, worst matrix

    @property
    def inside(self) -> bool:
        """Observed band within the certified one ± slack (False for a diverged run: NaN compares False)."""
        return self.certified[0] - self.slack <= self.observed[0] and self.observed[1] <= self.certified[1] + self.slack


def parse_shape(text: str) -> tuple:
    """``"1024x4096"`` → ``(1024, 4096)``."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"shape must look like 1024x4096, got {text!r}")
    return int(parts[0]), int(parts[1])


def test_matrices(rng, shape, lower, count: int = 3):
    """Matrices whose normalized singular values span ``[lower, ·]`` (condition numbers 1, mid, max)."""
    m, n = shape
    r = min(m, n)
    kappa_max = max(1.0, 1.0 / (lower * np.sqrt(r)))  # keeps σ_min/‖X‖_F ≥ lower
    out = []
    for kappa in np.geomspace(1.0, kappa_max, count):
        sigma = np.geomspace(1.0, 1.0 / kappa, r) * rng.uniform(0.5, 2.0)
        out.append(with_singular_values(rng, m, n, sigma))
    return out


def validate(steps, dtypes=DTYPES, shape=(256, 512), lower: float = 1e-3, batch: int = 3, seed: int = 0):
    """Observed vs certified bands per dtype (float steps are run; the certificate uses the decimals)."""
    import jax
    import jax.numpy as jnp

    from numerics.jax_kernels import newton_schulz

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(seed)
    mats = test_matrices(rng, shape, lower, batch)
    lows = [np.linalg.svd(x, compute_uv=False).min() / np.linalg.norm(x) for x in mats]
    l_obs = float(min(lows))
    cert = certify(steps, repr(l_obs), 1)
    band = (float(cert["band"][0]), float(cert["band"][1]))
    float_steps = tuple(tuple(float(c) for c in s) for s in steps)
    rows = []
    for name in dtypes:
        dt = {"float64": jnp.float64, "float32": jnp.float32, "bfloat16": jnp.bfloat16}[name]
        x = jnp.asarray(np.stack(mats), dt)  # a batch, run as given and transposed (tall and wide)
        svs = []
        for stack in (x, x.mT):
            y = np.asarray(newton_schulz(stack, float_steps).astype(jnp.float64))
            # a schedule that overflows (e.g. coefficients near 1e308) gives Inf/NaN: reported as
            # diverged (observed band NaN, never "inside"), and never handed to LAPACK
            svs.append(np.linalg.svd(y, compute_uv=False).ravel() if np.all(np.isfinite(y)) else np.array([np.nan]))
        sv = np.concatenate(svs)
        observed = (float(sv.min()), float(sv.max())) if np.all(np.isfinite(sv)) else (float("nan"), float("nan"))
        err = float(np.max(np.abs(sv - 1.0)))
        slack = ROUNDING_ULPS * float(jnp.finfo(dt).eps)
        rows.append(ValidationRow(name, shape, l_obs, observed, band, slack, err))
    return rows


def format_rows(name: str, rows) -> str:
    head = (f"{'schedule':<16} {'dtype':<9} {'shape':<11} {'l':>9} {'observed band':>25} "
            f"{'certified band':>25} {'slack':>8} {'max|σ-1|':>9} inside")
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(f"{name:<16} {r.dtype:<9} {r.shape[0]}x{r.shape[1]:<6} {r.lower:>9.2e} "
                   f"[{r.observed[0]:.6f}, {r.observed[1]:.6f}]{'':>2} [{r.certified[0]:.6f}, {r.certified[1]:.6f}]"
                   f"{'':>2} {r.slack:>8.1e} {r.max_error:>9.4f} {'yes' if r.inside else 'NO'}")
    return "\n".join(out) + "\n"
