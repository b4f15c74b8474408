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

import contextlib
import os
from dataclasses import dataclass

import numpy as np

from coeffsearch.certify import certify
from foundation.compute.spectra import with_singular_values

ROUNDING_ULPS = 8
DTYPES = ("float64", "float32", "bfloat16")
#: a rank-one shape (1xN, Nx1) has one normalized singular value, 1: it is certified on [1 - this, 1]
RANK_ONE_MARGIN = 1e-6
#: the most multiply-adds ``batch·M·N·min(M, N)`` of one validation pass (4096x4096 once, 1024x4096 sixteen
#: times); each pass runs per dtype, wide and tall, in Newton–Schulz and in the SVD of its output
MAX_WORK = 2**36
#: bytes held per test-matrix entry at the peak (measured about 15 float64 copies: the float64 batch, its
#: cast per dtype, Newton–Schulz temporaries, the SVD workspace), and the fixed cost of JAX
BYTES_PER_ENTRY = 16 * 8
FIXED_BYTES = 512 * 2**20


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


def available_bytes() -> int | None:
    """Memory this process can still get: ``MemAvailable`` of ``/proc/meminfo`` (else free pages), capped by
    a cgroup v2/v1 limit less its usage; None when none of them can be read."""
    found = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    if not found:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit) as fh, open(usage) as gh:
                text = fh.read().strip()
                if text != "max":
                    found.append(int(text) - int(gh.read().strip()))
        except (OSError, ValueError):
            pass
    return min(found) if found else None


def estimated_bytes(shape, batch: int) -> int:
    """Peak memory of :func:`validate` on ``batch`` matrices of ``shape`` (an estimate from measurements)."""
    return BYTES_PER_ENTRY * batch * shape[0] * shape[1] + FIXED_BYTES


def check_size(shape, batch: int, available: int | None = None):
    """Refuse (``ValueError``, one line) work above :data:`MAX_WORK` or memory above what is available."""
    m, n = shape
    work = batch * m * n * min(m, n)
    if work > MAX_WORK:
        raise ValueError(f"{batch} x {m}x{n} needs {work:.3g} multiply-adds per pass, more than the bound "
                         f"{MAX_WORK:.3g} (batch·M·N·min(M, N) <= 2**36, e.g. 4096x4096 with --batch 1); "
                         f"use a smaller --shape or --batch")
    need = estimated_bytes(shape, batch)
    available = available_bytes() if available is None else available
    if available is not None and need > available:
        raise ValueError(f"{batch} x {m}x{n} needs about {need / 2**30:.3g} GiB of memory, but "
                         f"{max(available, 0) / 2**30:.3g} GiB is available; use a smaller --shape or --batch")


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


def jax_routines():
    """``(jax, newton_schulz, gram_newton_schulz, inverse_root)`` with float64 enabled, imported on first use: the
    coeffsearch command line imports without JAX, and only validation runs the routines."""
    import jax  # lazy: coeffsearch imports without JAX; only validation runs the routines

    from foundation.compute import gram_newton_schulz, jax_inverse_root, jax_msign  # lazy: imports JAX (as above)

    jax.config.update("jax_enable_x64", True)
    return jax, jax_msign.newton_schulz, gram_newton_schulz.gram_newton_schulz, jax_inverse_root.inverse_root


def validate(steps, dtypes=DTYPES, shape=(256, 512), lower: float = 1e-3, batch: int = 3, seed: int = 0,
             progress=None):
    """Observed vs certified bands per dtype (float steps are run; the certificate uses the decimals);
    ``progress``: a bar updated once per dtype."""
    jax, newton_schulz, _, _ = jax_routines()
    jnp = jax.numpy
    rng = np.random.default_rng(seed)
    mats = test_matrices(rng, shape, lower, batch)
    lows = [np.linalg.svd(x, compute_uv=False).min() / np.linalg.norm(x) for x in mats]
    l_obs = float(min(lows))
    # a rank-one shape has one normalized singular value, 1 (to rounding): certify a little interval below it
    cert = certify(steps, repr(min(l_obs, 1 - RANK_ONE_MARGIN)), 1)
    band = (float(cert["band"][0]), float(cert["band"][1]))
    float_steps = tuple(tuple(float(c) for c in s) for s in steps)
    rows = []
    for name in dtypes:
        dt = {"float64": jnp.float64, "float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[name]
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
        if progress is not None:
            progress.update(1)
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
