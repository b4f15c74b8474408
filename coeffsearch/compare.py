"""Side-by-side comparison of schedules: a table and a plot of ``p^{∘k}(σ)`` on a log axis."""

from __future__ import annotations

import numpy as np

from coeffsearch.certify import certify
from coeffsearch.validate import validate
from foundation.polynomial import odd_eval


def compare_rows(named, lower: float = 1e-3, upper: float = 1.0, shape=(128, 256), seed: int = 0, progress=None):
    """Per schedule: steps, matmuls, certified band and worst error on ``[l, u]``, observed bf16 band;
    ``progress``: a bar updated once per schedule."""
    rows = []
    for name, steps in named:
        cert = certify(steps, repr(lower), repr(upper), name)
        bf16 = validate(steps, dtypes=("bfloat16",), shape=shape, lower=lower, seed=seed)[0]
        rows.append({"schedule": name, "steps": len(steps), "matmuls": sum(len(s) for s in steps),
                     "certified_band": [float(cert["band"][0]), float(cert["band"][1])],
                     "worst_error": float(cert["worst_error"]),
                     "bf16_observed_band": list(bf16.observed), "u_max": cert["overshoot"]["u_max"]})
        if progress is not None:
            progress.update(1)
    return rows


def format_compare(rows, lower, upper) -> str:
    head = (f"{'schedule':<18} {'steps':>5} {'matmuls':>7} {'certified band on [l, u]':>28} {'worst |1-p|':>11} "
            f"{'bf16 observed band':>22} {'u_max':>9}")
    out = [f"l = {lower:g}, u = {upper:g}", head, "-" * len(head)]
    def num(x):
        return f"{x:.6f}" if abs(x) < 1e6 else f"{x:.3e}"  # a diverging schedule has a huge band
    for r in rows:
        cb, ob = r["certified_band"], r["bf16_observed_band"]
        out.append(f"{r['schedule']:<18} {r['steps']:>5} {r['matmuls']:>7} {f'[{num(cb[0])}, {num(cb[1])}]':>28} "
                   f"{r['worst_error']:>11.3e} {f'[{ob[0]:.4f}, {ob[1]:.4f}]':>22} {r['u_max']!s:>9}")
    return "\n".join(out) + "\n"


def plot(named, path: str, lower: float = 1e-3):
    """PNG of ``p^{∘k}(σ)`` against ``σ ∈ [lower/10, 1.2]`` (log axis), one curve per schedule."""
    import matplotlib  # lazy: only the plot needs matplotlib, a slow import
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after choosing the backend

    x = np.geomspace(lower / 10, 1.2, 2000)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for name, steps in named:
        y = x.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            for s in steps:
                y = np.clip(odd_eval([float(v) for v in s], y), -10.0, 10.0)
        ax.plot(x, y, label=f"{name} ({len(steps)} steps)")
    ax.axhline(1.0, color="k", lw=0.6)
    ax.axvline(lower, color="grey", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 1.6)
    ax.set_xlabel("normalized singular value σ")
    ax.set_ylabel("p∘…∘p(σ)")
    ax.set_title("Newton–Schulz schedules: composed polynomial")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")  # exactly ``path``: no suffix is added
    plt.close(fig)
