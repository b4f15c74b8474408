"""Gram Newton–Schulz against SVD on hostile spectra, next to the certified restart bounds.

``python -m coeffsearch validate SCHEDULE --gram [--certificate FILE]... [--at S[,S...]]`` runs
:func:`foundation.compute.gram_newton_schulz.gram_newton_schulz` with restart positions in float32, bfloat16 and
float16, each on a batch of matrices with hostile spectra (:data:`SPECTRA`), as given and transposed (both
orientations of the Gram matrix), and compares with the float64 SVD of the input as the dtype holds it.

Measured, per matrix ``X = U Σ Vᵀ`` with normalized singular values ``s_i = σ_i / ‖X‖_F`` (what the iteration
sees) and output ``Y``:

* ``‖Y V_S − U_S‖_op`` over the singular pairs with ``s_i ≥ l`` (``S``): for ``Y = U x_T(Σ) Vᵀ`` this is
  ``max_{i∈S} |x_T(s_i) − 1|``, what bound (b) of a restart certificate bounds (``python -m coeffsearch
  restarts``; eigenvector drift shows here too);
* ``‖Y‖_op``, bounded by the certificate's final image of ``[0, 1]`` (the larger of its two ends in magnitude).

Bound (a), ``max |Q|``, is not measured (the routine does not return ``Q``); a ``Q`` that blows up shows in
both columns. Where the bound comes from, per dtype: a restart certificate for that dtype (its positions,
its ``l`` and its bounds, used as stated: ``python -m coeffsearch certify FILE`` re-checks them); else
the positions of ``--at`` (else the certificates' positions, else the published choice of
:data:`coeffsearch.restarts.PUBLISHED`, else none) certified here under the model's default growth
factor, or, where they cannot be certified, no bound: the row says ``no certified bound`` and claims
nothing. A row exceeds when a measured value is above its certified bound or the output is not finite.

The input as the dtype holds it: rounded to nearest; entries below the dtype's smallest normal number are
flushed to zero in the reference, as XLA on the CPU flushes them (the tiny scale keeps every entry that
matters above them, so on a device that keeps them the difference is within one unit roundoff).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from functools import cache

import numpy as np

from coeffsearch import registry, restarts
from coeffsearch.certify import CertificateFormatError
from coeffsearch.restart_certificate import parse
from coeffsearch.restart_model import DEFAULT_GROWTH, Model, RestartError, check_positions, default_lower
from coeffsearch.validate import jax_routines
from foundation.commandline import FileRefused, UsageError, progress, read_json_file
from foundation.compute.spectra import log_spaced_spectrum, with_singular_values

GRAM_DTYPES = ("float32", "bfloat16", "float16")
#: per dtype: (exponent of the smallest normal number, largest exponent, stored mantissa bits)
FLOAT_FORMAT = {"float32": (-126, 127, 23), "bfloat16": (-126, 127, 7), "float16": (-14, 15, 10)}
SPECTRA = ("clustered", "ill-conditioned", "rank-deficient", "tiny scale", "huge scale")
SPECTRA_TEXT = ("clustered: three clusters at 1, 0.1 and 0.01 of relative width 1e-6; ill-conditioned: log-spaced "
                "from 1 to 1e-6; rank-deficient: exactly half the rank; tiny and huge scale: log-spaced from 1 to "
                "0.1, scaled to max|x_ij| near 2^(e_min + p + 1) and 2^e_max of the dtype")
CONDITION = 1e6
CLUSTERS = (1.0, 0.1, 0.01)
CLUSTER_WIDTH = 1e-6
MIN_SIDE = 4  # the rank-deficient spectrum needs room for rank r/2 >= 2


def exceeds_bound(deviation: float, norm: float, bound_deviation: float | None, bound_image: float | None) -> bool:
    """Whether a measured deviation or norm lies above its certified bound (``False`` without a bound; a non-finite
    measurement exceeds any bound)."""
    if bound_deviation is None or bound_image is None:
        return False
    return not (deviation <= bound_deviation and norm <= bound_image)


@dataclass
class Bound:
    """The certified bounds one dtype is validated against (``deviation`` None: no certified bound)."""

    dtype: str
    positions: tuple
    source: str
    lower: str
    deviation: float | None = None
    image: float | None = None
    max_q: str | None = None
    reason: str = ""


@dataclass
class GramRow:
    """One spectrum in one dtype: the measured values, worst over its matrices and both orientations."""

    dtype: str
    spectrum: str
    positions: tuple
    smallest: float  # smallest normalized singular value of the matrices
    covered: int  # singular pairs with s_i >= l, over the matrices
    total: int  # singular pairs, over the matrices
    deviation: float  # ‖Y V_S − U_S‖_op (inf: the output is not finite)
    norm: float  # ‖Y‖_op (inf: not finite)
    bound_deviation: float | None
    bound_image: float | None

    @property
    def certified(self) -> bool:
        return self.bound_deviation is not None

    @property
    def exceeds(self) -> bool:
        """A measured value above its certified bound (never for a row without one)."""
        return exceeds_bound(self.deviation, self.norm, self.bound_deviation, self.bound_image)

    @property
    def verdict(self) -> str:
        return "no certified bound" if not self.certified else ("EXCEEDS" if self.exceeds else "within")


# ---- test matrices ---------------------------------------------------------------------------------------------
def scaled_to(x: np.ndarray, exponent: int) -> np.ndarray:
    """``x`` times a power of two (exact) so that ``max |x_ij|`` lies in ``[2^(exponent−1), 2^exponent)``."""
    _, e = np.frexp(np.max(np.abs(x)))
    return np.ldexp(x, exponent - int(e))


def spectrum(rng, kind: str, r: int) -> np.ndarray:
    """The singular values of one kind of :data:`SPECTRA` for a matrix of rank at most ``r``."""
    if kind == "clustered":
        sizes = [r // 3, r // 3, r - 2 * (r // 3)]
        return np.concatenate([c * (1 + CLUSTER_WIDTH * rng.standard_normal(k)) for c, k in zip(CLUSTERS, sizes,
                                                                                                  strict=True)])
    if kind == "ill-conditioned":
        return log_spaced_spectrum(rng, r, CONDITION)
    if kind == "rank-deficient":
        return log_spaced_spectrum(rng, r // 2, 10.0)
    return log_spaced_spectrum(rng, r, 10.0)


def hostile_batch(rng, shape, dtype: str, count: int) -> tuple:
    """``(float64 batch, spectrum name per matrix)``: ``count`` matrices of each of :data:`SPECTRA`."""
    rows, cols = shape
    low, high, mantissa = FLOAT_FORMAT[dtype]
    out, names = [], []
    for kind in SPECTRA:
        for _ in range(count):
            x = with_singular_values(rng, rows, cols, spectrum(rng, kind, min(rows, cols)))
            if kind == "tiny scale":
                x = scaled_to(x, low + mantissa + 1)
            elif kind == "huge scale":
                x = scaled_to(x, high)
            out.append(x)
            names.append(kind)
    return np.stack(out), names


# ---- measurement -----------------------------------------------------------------------------------------------
def op_norm(a: np.ndarray) -> float:
    """``‖a‖_op`` from the largest eigenvalue of the smaller Gram matrix (float64: its rounding, about
    ``1e-16 ‖a‖²``, is far below every bound compared with; much cheaper than an SVD)."""
    g = a.T @ a if a.shape[0] >= a.shape[1] else a @ a.T
    return float(np.sqrt(max(float(np.linalg.eigvalsh(g)[-1]), 0.0)))


def measure(ys, x: np.ndarray, lower: float) -> tuple:
    """``(‖Y V_S − U_S‖_op, ‖Y‖_op, smallest s_i, |S|, rank)``, the first two the worst over the outputs ``ys``
    (each an approximation of ``msign(x)``, of ``x``'s shape) for the input ``x`` (float64; one SVD)."""
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    fro = float(np.linalg.norm(s))
    normalized = s / fro if fro > 0 else s
    keep = normalized >= lower
    deviation, norm = 0.0, 0.0
    for y in ys:
        if not np.all(np.isfinite(y)):
            deviation, norm = math.inf, math.inf
            continue
        if keep.any():
            deviation = max(deviation, op_norm(y @ vt[keep].T - u[:, keep]))
        norm = max(norm, op_norm(y))
    return deviation, norm, float(normalized.min()), int(keep.sum()), len(s)


@cache
def _jitted_gram():
    jax, _, gram, _ = jax_routines()
    return jax.jit(gram)


def run_dtype(batch: np.ndarray, dtype: str, steps, positions) -> list:
    """``[(reference, [output, transposed output of the transpose])]`` per matrix of ``batch``, in ``dtype``:
    the Gram matrix ``XXᵀ`` and ``XᵀX`` (the reference: the input as the dtype holds it, in float64)."""
    jax, _, _, _ = jax_routines()
    jnp = jax.numpy
    dt = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}[dtype]
    schedule = jnp.asarray([[float(c) for c in s] for s in steps], jnp.float64)
    flags = jnp.asarray([t in positions for t in range(len(steps))])
    held = jnp.asarray(batch, dt)
    reference = np.asarray(held.astype(jnp.float64))
    reference = np.where(np.abs(reference) < 2.0 ** FLOAT_FORMAT[dtype][0], 0.0, reference)
    given = np.asarray(_jitted_gram()(held, schedule, flags).astype(jnp.float64))
    transposed = np.asarray(_jitted_gram()(held.mT, schedule, flags).astype(jnp.float64))
    return [(ref, [a, b.T]) for ref, a, b in zip(reference, given, transposed, strict=True)]


def validate_gram(steps, bounds: dict, shape=(64, 256), count: int = 1, seed: int = 0, progress=None) -> list:
    """One :class:`GramRow` per dtype of ``bounds`` (``{dtype: Bound}``) and spectrum of :data:`SPECTRA`;
    ``progress``: a bar updated once per dtype."""
    rows = []
    for dtype, bound in bounds.items():
        rng = np.random.default_rng(seed)
        batch, names = hostile_batch(rng, shape, dtype, count)
        lower = float(bound.lower)
        found = [measure(ys, ref, lower) for ref, ys in run_dtype(batch, dtype, steps, bound.positions)]
        for kind in SPECTRA:
            mine = [f for f, name in zip(found, names, strict=True) if name == kind]
            rows.append(GramRow(dtype, kind, bound.positions, min(f[2] for f in mine), sum(f[3] for f in mine),
                                sum(f[4] for f in mine), max(f[0] for f in mine), max(f[1] for f in mine),
                                bound.deviation, bound.image))
        if progress is not None:
            progress.update(1)
    return rows


# ---- bounds: from certificates, or certified here --------------------------------------------------------------
def read_restart_certificate(path: str, what: str = "argument --certificate") -> dict:
    """A restart certificate file, checked against its schema; :class:`UsageError` (one line) otherwise."""
    try:
        data = read_json_file(path, registry.MAX_FILE_BYTES, what)
    except FileRefused as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(data, dict) or data.get("kind") != "restart-certificate":
        raise UsageError(f"{what}: {path!a} is not a restart certificate (write one with "
                         f"python -m coeffsearch restarts SCHEDULE --dtype DTYPE --json --out FILE)")
    try:
        return parse(data, f"{what} {path!a}")
    except CertificateFormatError as exc:
        raise UsageError(exc.line) from None


def _same_schedule(a, b) -> bool:
    return len(a) == len(b) and all([Fraction(c) for c in s] == [Fraction(c) for c in t] for s, t in zip(a, b,
                                                                                                          strict=True))


def certificate_bound(path: str, cert: dict) -> Bound:
    lo, hi = (float(v) for v in cert["final_image"])
    return Bound(cert["dtype"], tuple(cert["restarts"]), f"certificate {path}", cert["lower"],
                 float(cert["deviation"]["bound"]), max(abs(lo), abs(hi)), cert["max_abs_q"]["bound"])


def computed_bound(name, steps, dtype, positions, source, lower) -> Bound:
    """The positions certified here (:func:`coeffsearch.restarts.evaluate`), or the reason there is no bound."""
    try:
        model = Model(dtype, DEFAULT_GROWTH, lower)
    except RestartError as exc:
        raise UsageError(str(exc)) from None
    found = restarts.evaluate(name, steps, positions, model)
    if found.certificate is None:
        return Bound(dtype, positions, source, model.lower, reason=found.reason)
    cert = found.certificate
    lo, hi = (float(v) for v in cert["final_image"])
    return Bound(dtype, positions, source, model.lower, float(cert["deviation"]["bound"]), max(abs(lo), abs(hi)),
                 cert["max_abs_q"]["bound"])


def bounds_for(name, steps, dtypes, certificates: dict, at, lower) -> dict:
    """``{dtype: Bound}``: ``certificates`` (``{path: parsed certificate}``) first, then ``at`` and the defaults.
    :class:`UsageError` for a certificate of another schedule or dtype, two for one dtype, or a conflict."""
    by_dtype: dict[str, tuple[str, dict]] = {}
    for path, cert in certificates.items():
        if not _same_schedule(cert["schedule"], steps):
            raise UsageError(f"argument --certificate: {path!a} certifies other coefficients than schedule {name!r}")
        if cert["dtype"] not in dtypes:
            raise UsageError(f"argument --certificate: {path!a} is for {cert['dtype']}, which --dtype does not run")
        if cert["dtype"] in by_dtype:
            raise UsageError(f"argument --certificate: two certificates for {cert['dtype']}: "
                             f"{by_dtype[cert['dtype']][0]!a} and {path!a}")
        try:
            positions = check_positions(cert["restarts"], len(steps))
        except RestartError as exc:
            raise UsageError(f"argument --certificate: {path!a}: {exc}") from None
        if at is not None and positions != at:
            raise UsageError(f"argument --at: positions {', '.join(map(str, at)) or 'none'} differ from those of "
                             f"certificate {path!a} ({', '.join(map(str, positions)) or 'none'}); drop one of them")
        if lower is not None and Fraction(lower) != Fraction(cert["lower"]):
            raise UsageError(f"argument --lower: {lower} differs from the lower end {cert['lower']} of certificate "
                             f"{path!a}; drop --lower")
        by_dtype[cert["dtype"]] = (path, cert)
    stated = {tuple(c["restarts"]) for _, c in by_dtype.values()}
    if at is not None:
        positions, source = at, "--at"
    elif len(stated) == 1:
        positions, source = next(iter(stated)), "the certificates' positions"
    elif name in restarts.PUBLISHED and max(restarts.PUBLISHED[name]) < len(steps):
        positions, source = restarts.PUBLISHED[name], "the published choice"
    else:
        positions, source = (), "none given"
    design = registry.get(name).lower if name in registry.names() else None
    return {d: certificate_bound(*by_dtype[d]) if d in by_dtype
            else computed_bound(name, steps, d, positions, source, lower or default_lower(design, d)) for d in dtypes}


# ---- report ----------------------------------------------------------------------------------------------------
def _where(positions) -> str:
    return ", ".join(map(str, positions)) or "none"


def format_gram(name: str, shape, bounds: dict, rows) -> str:
    """Measured next to certified, one row per dtype and spectrum; then where each dtype's bounds come from."""
    head = (f"{'schedule':<16} {'dtype':<9} {'restarts':<9} {'spectrum':<16} {'min s_i':>9} {'in [l,1]':>9} "
            f"{'|YV_S-U_S|':>11} {'bound (b)':>10} {'|Y|_op':>9} {'bound':>9}  verdict")
    out = [f"Gram Newton-Schulz against the float64 SVD, {shape[0]}x{shape[1]} and transposed; {SPECTRA_TEXT}", head,
           "-" * len(head)]
    for r in rows:
        b_dev = f"{r.bound_deviation:.6f}" if r.certified else "-"
        b_img = f"{r.bound_image:.6f}" if r.certified else "-"
        out.append(f"{name:<16} {r.dtype:<9} {_where(r.positions):<9} {r.spectrum:<16} {r.smallest:>9.2e} "
                   f"{f'{r.covered}/{r.total}':>9} {r.deviation:>11.4g} {b_dev:>10} {r.norm:>9.4g} {b_img:>9}  "
                   f"{r.verdict}")
    for b in bounds.values():
        if b.deviation is not None:
            out.append(f"{b.dtype}: restarts after {_where(b.positions)} ({b.source}), l = {b.lower}: certified "
                       f"(b) max |x_T - 1| <= {b.deviation:.8g} on [l, 1], final image within +-{b.image:.8g}, "
                       f"(a) max |Q| <= {b.max_q} (not measured: the routine does not return Q)")
        else:
            out.append(f"{b.dtype}: restarts after {_where(b.positions)} ({b.source}): no certified bound, nothing "
                       f"is claimed: {b.reason}")
    return "\n".join(out) + "\n"


def command(args, shape, resolve) -> tuple:
    """``validate --gram``: ``(report text, rows, bounds)``; :class:`UsageError` for bad input.
    ``resolve``: the command line's schedule resolver (name or schedule file)."""
    if args.dtype == "float64":
        raise UsageError("argument --dtype: float64 has no restart model; --gram runs float32, bfloat16 and float16")
    if min(shape) < MIN_SIDE:
        raise UsageError(f"argument --shape: the hostile spectra need both sides >= {MIN_SIDE} (a rank-deficient "
                         f"spectrum of rank min(M, N)/2 >= 2), got {shape[0]}x{shape[1]}")
    dtypes = GRAM_DTYPES if args.dtype == "all" else (args.dtype,)
    paths = list(args.certificate or [])
    spec = read_spec_certificate(args.schedule)
    if spec is not None:
        paths.insert(0, args.schedule)
    certificates = {p: read_restart_certificate(p, "schedule" if p == args.schedule and spec is not None
                                                else "argument --certificate") for p in dict.fromkeys(paths)}
    if spec is not None:
        cert = certificates[args.schedule]
        name, steps = cert["name"] or args.schedule, [list(s) for s in cert["schedule"]]
    else:
        name, steps, _, _ = resolve(args.schedule)
    try:
        at = check_positions(restarts.parse_positions(args.at), len(steps)) if args.at is not None else None
    except RestartError as exc:
        raise UsageError(str(exc) if str(exc).startswith("argument") else f"argument --at: {exc}") from None
    bounds = bounds_for(name, steps, dtypes, certificates, at, args.lower)
    with progress(total=len(bounds), desc="validate --gram", quiet=args.json) as bar:
        rows = validate_gram(steps, bounds, shape, args.batch, progress=bar)
    return format_gram(name, shape, bounds, rows), rows, bounds


def read_spec_certificate(spec: str) -> dict | None:
    """The SCHEDULE argument as a restart certificate (parsed), or None when it is a name or another file."""
    if spec in registry.names():
        return None
    try:
        data = read_json_file(spec, registry.MAX_FILE_BYTES, "schedule")
    except FileRefused:  # reported in one line when the caller reads it as a schedule
        return None
    return data if isinstance(data, dict) and data.get("kind") == "restart-certificate" else None


def to_json(rows, bounds) -> dict:
    return {"bounds": [asdict(b) for b in bounds.values()],
            "rows": [asdict(r) | {"verdict": r.verdict} for r in rows]}
