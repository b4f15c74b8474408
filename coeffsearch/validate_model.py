"""The restart rounding model against measurement (``python -m coeffsearch validate-model``).

A restart certificate (:mod:`coeffsearch.restart_certificate`) bounds ``max |x_T(σ) − 1|`` over
``σ ∈ [l, 1]`` under the rounding model of :mod:`coeffsearch.restart_model`; the model is a model of
the rounding, not a theorem about it, so this module measures whether real runs stay inside it. For
each dtype (float32, float16, bfloat16: JAX, here on the CPU), each schedule and each of

* ``gram``: Gram Newton–Schulz (:func:`foundation.compute.gram_newton_schulz.gram_newton_schulz`) with
  the shipped certified restart positions for that dtype (:data:`SHIPPED`, else the routine's table
  :func:`foundation.compute.jax_spectral_sign.certified_restarts`), and
* ``standard``: the standard iteration (:func:`foundation.compute.jax_msign.newton_schulz`), which per
  singular value is the Gram model with a restart after every iteration (each step forms ``A = XXᵀ``
  afresh, rounds Horner's products and the product with ``X``), certified as such with one more term
  of accumulation (:data:`STANDARD_EXTRA`: each step rounds ``B X`` and then the sum ``c_0 X + B X``
  relative to the new iterate's entries; at ``n = 1`` the measured Muon schedule in bfloat16 exceeded its
  bound, 0.568 against 0.553),

it runs matrices with random (Gaussian entries), clustered and adversarial spectra (singular values at
the σ where the model's own instances come closest to the bound, at ``l`` and log-spaced between, some
repeated) at a few sizes, both orientations, and measures ``‖Y V_S − U_S‖_op`` over the singular pairs
with normalized ``s_i ≥ l`` (:func:`coeffsearch.validate_gram.measure`; it is ``max |x_T(s_i) − 1|``
for ``Y = U x_T(Σ) Vᵀ``) and ``‖Y‖_op``. Reported per dtype, schedule and method: the worst measured
deviation, the certified bound and their ratio (certified / measured: ``≥ 1`` is sound; within 10 is
tight). A row *exceeds* when a measured value is above its certificate (or the output is not finite).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from coeffsearch import registry, restarts
from coeffsearch.restart_certificate import parse
from coeffsearch.restart_model import DEFAULT_GROWTH, UNIT_ROUNDOFF_BITS, Model, RestartError, default_lower
from coeffsearch.validate import jax_routines
from coeffsearch.validate_gram import FLOAT_FORMAT, exceeds_bound, measure, spectrum
from foundation.compute.jax_spectral_sign import certified_restarts
from foundation.compute.spectra import with_singular_values

MODEL_DTYPES = ("float32", "float16", "bfloat16")
METHODS = ("gram", "standard")
SPECTRA = ("random", "clustered", "adversarial")
DEFAULT_SHAPES = ((32, 96), (64, 256))
DEFAULT_SCHEDULES = ("polar-express-5", "muon", "cesista")
TIGHT = 10.0  # a certified bound within this factor of the measured worst is tight
STANDARD_EXTRA = 1  # the standard iteration is certified at accumulation length n + 1 (see the module docstring)
REPEATS = 3  # the adversarial spectrum repeats its two extreme values this often

#: the shipped certificates of the searched schedules (:mod:`coeffsearch.joint_search`), one JSON file each
CERTIFICATE_DIR = Path(__file__).with_name("certificates")


@cache
def shipped() -> dict:
    """``{name: restart certificate}`` of the searched schedules shipped as data (:data:`CERTIFICATE_DIR`)."""
    out = {}
    for path in sorted(CERTIFICATE_DIR.glob("*.json")):
        cert = parse(path.read_text(encoding="utf-8"), f"certificate {path.name}")
        out[cert["name"]] = cert
    return out


def shipped_steps() -> dict:
    """``{name: steps}`` of the shipped searched schedules."""
    return {name: cert["schedule"] for name, cert in shipped().items()}


@dataclass
class Certified:
    """The certificate one (dtype, schedule, method) is compared with (``deviation`` None: none)."""

    dtype: str
    schedule: str
    method: str
    positions: tuple | None
    lower: str
    accumulation: int = 1
    deviation: float | None = None
    image: float | None = None
    worst_sigma: float | None = None  # where the model's instances come closest to bound (b)
    reason: str = ""


@dataclass
class ModelRow:
    """The worst measured values of one (dtype, schedule, method) over every spectrum, size and orientation."""

    dtype: str
    schedule: str
    method: str
    positions: tuple | None
    deviation: float
    norm: float
    certified_deviation: float | None
    certified_image: float | None
    worst_case: str
    per_spectrum: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """Certified over measured deviation (None without a certificate; inf when nothing deviates)."""
        if self.certified_deviation is None:
            return None
        return self.certified_deviation / self.deviation if self.deviation > 0 else math.inf

    @property
    def exceeds(self) -> bool:
        return exceeds_bound(self.deviation, self.norm, self.certified_deviation, self.certified_image)

    @property
    def verdict(self) -> str:
        if self.certified_deviation is None:
            return "no certificate"
        if self.exceeds:
            return "EXCEEDS"
        return "within" if self.ratio is not None and self.ratio <= TIGHT else "within, loose"


# ---- certificates ----------------------------------------------------------------------------------------
def positions_for(name: str, steps, dtype: str, method: str) -> tuple | None:
    """The restart positions run: every position for ``standard``; for ``gram`` the shipped ones
    (:data:`SHIPPED`, else the routine's certified table), None where none are shipped."""
    if method == "standard":
        return tuple(range(1, len(steps)))
    cert = shipped().get(name)
    table = certified_restarts(tuple(tuple(float(c) for c in s) for s in steps))
    if cert is not None:
        table = {**table, cert["dtype"]: tuple(cert["restarts"])}
    found = table.get(dtype)
    return tuple(found) if found is not None else None


def certified(name: str, steps, dtype: str, method: str, accumulation: int = 1) -> Certified:
    """The certificate of ``name``'s ``method`` in ``dtype``: a shipped one as stated (``python -m coeffsearch
    certify FILE`` re-checks it), else computed (:func:`coeffsearch.restarts.evaluate`)."""
    stated = shipped().get(name)
    if stated is not None and method == "gram" and stated["dtype"] == dtype and accumulation == stated["accumulation"]:
        lo, hi = (float(v) for v in stated["final_image"])
        return Certified(dtype, name, method, tuple(stated["restarts"]), stated["lower"], accumulation,
                         float(stated["deviation"]["bound"]), max(abs(lo), abs(hi)),
                         sum(float(v) for v in stated["deviation"]["sigma"]) / 2)
    design = registry.get(name).lower if name in registry.names() else None
    lower = default_lower(design, dtype)
    positions = positions_for(name, steps, dtype, method)
    n = accumulation + (STANDARD_EXTRA if method == "standard" else 0)
    if positions is None:
        return Certified(dtype, name, method, None, lower, n, reason="no restart positions shipped for this dtype")
    model = Model(dtype, DEFAULT_GROWTH, lower, n)
    found = restarts.evaluate(name, steps, positions, model)
    at = found.estimate.deviation_attained_at
    if found.certificate is None:
        return Certified(dtype, name, method, positions, model.lower, n, worst_sigma=at, reason=found.reason)
    cert = found.certificate
    lo, hi = (float(v) for v in cert["final_image"])
    return Certified(dtype, name, method, positions, model.lower, n, float(cert["deviation"]["bound"]),
                     max(abs(lo), abs(hi)), at)


# ---- test matrices ---------------------------------------------------------------------------------------
def adversarial_spectrum(rng, r: int, lower: float, worst: float | None) -> np.ndarray:
    """Singular values of Frobenius norm 1 (so the normalized ones are these): ``worst`` (when below 0.7; up to
    :data:`REPEATS` times, at most half the norm) and just above ``l`` (:data:`REPEATS` times), then
    log-spaced over ``[l, 1]`` filling the norm."""
    marks = [lower * 1.001] * REPEATS
    if worst is not None and lower < worst < 0.7:  # copies of it take at most half the norm
        marks += [worst] * max(1, min(REPEATS, int(0.5 / worst ** 2)))
    marks = marks[:max(r - 1, 1)]
    rest = np.geomspace(1.0, lower, max(r - len(marks), 1))
    room = 1.0 - float(np.sum(np.square(marks)))
    rest = rest * math.sqrt(room) / float(np.linalg.norm(rest))
    return np.sort(np.concatenate([marks, rest]))[::-1]


def model_batch(rng, kind: str, shape, count: int, lower: float, worst: float | None) -> np.ndarray:
    """``count`` float64 matrices of ``shape`` with spectra of one kind of :data:`SPECTRA`."""
    rows, cols = shape
    r = min(shape)
    out = []
    for _ in range(count):
        if kind == "random":
            out.append(rng.standard_normal(shape))
        elif kind == "clustered":
            out.append(with_singular_values(rng, rows, cols, spectrum(rng, "clustered", r)))
        else:
            out.append(with_singular_values(rng, rows, cols, adversarial_spectrum(rng, r, lower, worst)))
    return np.stack(out)


# ---- runs ------------------------------------------------------------------------------------------------
@cache
def _jitted(method: str):
    jax, newton_schulz, gram, _ = jax_routines()
    if method == "gram":
        return jax.jit(gram)
    return jax.jit(newton_schulz)


def run(batch: np.ndarray, dtype: str, method: str, steps, positions) -> list:
    """``[(reference, [output, transposed output of the transpose])]`` per matrix, run in ``dtype``; the
    reference is the input as the dtype holds it (subnormals flushed, as XLA on the CPU does)."""
    jax, _, _, _ = jax_routines()
    jnp = jax.numpy
    dt = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[dtype]
    schedule = jnp.asarray([[float(c) for c in s] for s in steps], jnp.float64)
    held = jnp.asarray(batch, dt)
    reference = np.asarray(held.astype(jnp.float64))
    reference = np.where(np.abs(reference) < 2.0 ** FLOAT_FORMAT[dtype][0], 0.0, reference)
    fn = _jitted(method)
    if method == "gram":
        flags = jnp.asarray([t in positions for t in range(len(steps))])
        given, transposed = fn(held, schedule, flags), fn(held.mT, schedule, flags)
    else:
        given, transposed = fn(held, schedule), fn(held.mT, schedule)
    given = np.asarray(given.astype(jnp.float64))
    transposed = np.asarray(transposed.astype(jnp.float64))
    return [(ref, [a, b.T]) for ref, a, b in zip(reference, given, transposed, strict=True)]


def measure_one(bound: Certified, steps, shapes, count: int, seed: int) -> ModelRow:
    """Run one (dtype, schedule, method) on every spectrum and shape; its worst values as a :class:`ModelRow`."""
    lower = float(bound.lower)
    per = {}
    if not (bound.method == "gram" and bound.positions is None):  # no shipped Gram positions: nothing runs
        for shape in shapes:
            for kind in SPECTRA:
                rng = np.random.default_rng([seed, shape[0], shape[1], SPECTRA.index(kind)])
                batch = model_batch(rng, kind, shape, count, lower, bound.worst_sigma)
                found = [measure(ys, ref, lower) for ref, ys in run(batch, bound.dtype, bound.method, steps,
                                                                     bound.positions)]
                per[f"{kind} {shape[0]}x{shape[1]}"] = {"deviation": max(f[0] for f in found),
                                                        "norm": max(f[1] for f in found)}
    if not per:
        return ModelRow(bound.dtype, bound.schedule, bound.method, bound.positions, math.nan, math.nan,
                        bound.deviation, bound.image, "not run")
    case = max(per, key=lambda k: per[k]["deviation"])
    return ModelRow(bound.dtype, bound.schedule, bound.method, bound.positions, per[case]["deviation"],
                    max(v["norm"] for v in per.values()), bound.deviation, bound.image, case, per)


def validate_model(schedules, dtypes=MODEL_DTYPES, methods=METHODS, shapes=DEFAULT_SHAPES, count: int = 2,
                   seed: int = 0, accumulation: int = 1, bounds: dict | None = None, progress=None) -> tuple:
    """``(rows, bounds)``: one :class:`ModelRow` per dtype, schedule (``{name: steps}``) and method, with
    the :class:`Certified` bound it is compared with (``bounds``, keyed ``(dtype, name, method)``, may be
    given: a test plants a bound that is too small); ``progress``: a bar updated once per dtype, schedule and
    method (skipped ones included)."""
    bounds = dict(bounds or {})
    rows = []
    for dtype in dtypes:
        for name, steps in schedules.items():
            own = shipped().get(name, {}).get("dtype") if name.startswith("searched-") else None
            if own is not None and own != dtype:
                if progress is not None:
                    progress.update(len(methods))
                continue  # a searched schedule runs in the dtype it was searched for
            for method in methods:
                key = (dtype, name, method)
                if key not in bounds:
                    bounds[key] = certified(name, steps, dtype, method, accumulation)
                rows.append(measure_one(bounds[key], steps, shapes, count, seed))
                if progress is not None:
                    progress.update(1)
    return rows, bounds


# ---- report ----------------------------------------------------------------------------------------------
def _where(positions) -> str:
    return "-" if positions is None else (",".join(map(str, positions)) or "none")


def format_report(rows, bounds, shapes) -> str:
    """One line per dtype, schedule and method: measured worst beside certified, their ratio, the verdict."""
    sizes = ", ".join(f"{m}x{n}" for m, n in shapes)
    head = (f"{'dtype':<9} {'schedule':<20} {'method':<9} {'restarts':<9} {'measured':>10} {'certified':>10} "
            f"{'ratio':>8} {'|Y|_op':>8} {'image':>8}  worst case / verdict")
    out = [f"rounding model against measurement: spectra {', '.join(SPECTRA)}; sizes {sizes} and transposed; "
           f"deviation = max |x_T(s_i) - 1| over s_i >= l; ratio = certified / measured", head, "-" * len(head)]
    for r in rows:
        cert = f"{r.certified_deviation:.4g}" if r.certified_deviation is not None else "-"
        image = f"{r.certified_image:.4g}" if r.certified_image is not None else "-"
        ratio = f"{r.ratio:.3g}" if r.ratio is not None else "-"
        out.append(f"{r.dtype:<9} {r.schedule:<20} {r.method:<9} {_where(r.positions):<9} {r.deviation:>10.4g} "
                   f"{cert:>10} {ratio:>8} {r.norm:>8.4g} {image:>8}  {r.worst_case}: {r.verdict}")
    for b in bounds.values():
        if b.deviation is None:
            out.append(f"{b.dtype} {b.schedule} {b.method} (restarts {_where(b.positions)}): no certificate, "
                       f"nothing claimed: {b.reason}")
    return "\n".join(out) + "\n"


def to_json(rows, bounds) -> dict:
    return {"rows": [asdict(r) | {"ratio": r.ratio, "verdict": r.verdict} for r in rows],
            "bounds": [asdict(b) for b in bounds.values()]}


def check_accumulation(n: int, dtypes) -> None:
    """:class:`RestartError` (one line) when ``n`` (and ``n + 1`` for the standard iteration) is not a valid
    accumulation length for every dtype."""
    for d in dtypes:
        Model(d, DEFAULT_GROWTH, "1e-3", n)
        try:
            Model(d, DEFAULT_GROWTH, "1e-3", n + STANDARD_EXTRA)
        except RestartError:
            raise RestartError(f"argument --accumulation: the standard iteration is certified at n + "
                               f"{STANDARD_EXTRA} = {n + STANDARD_EXTRA}, and n·u must be below 1: in {d} n must be "
                               f"below {2 ** UNIT_ROUNDOFF_BITS[d] - STANDARD_EXTRA}") from None
