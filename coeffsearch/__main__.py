"""Command line: ``python -m coeffsearch {minimax,band,certify,validate,validate-model,compare,restarts,sources,
inverse-root-search} …``."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import sys

import mpmath

from coeffsearch import (
    inverse_root_cli,
    provenance,
    registry,
    restart_certificate,
    restart_model,
    restarts,
    validate_gram,
    validate_model,
)
from coeffsearch.band import image, max_slope, narrowest_band
from coeffsearch.certify import (
    RECHECK_PREC,
    Certificate,
    CertificateError,
    CertificateFormatError,
    certify,
    recheck,
)
from coeffsearch.compare import compare_rows, format_compare, plot
from coeffsearch.validate import DTYPES, check_size, format_rows, parse_shape, validate
from foundation.commandline import (
    OneLineParser,
    UsageError,
    int_option,
    progress,
    stdout_closed,
    usage_error,
    write_result,
)
from foundation.minimax import greedy_schedule
from foundation.polynomial import MAX_SCHEDULE_STEPS, MAX_STEP_COEFFICIENTS, ScheduleError

#: upper bounds on what sizes the work (each refused above with one line, exit 2; stated in --help)
MAX_DEGREE = 15  # minimax --degree: one greedy step at degree 15 and 200 digits takes about 2 s (31: 14 s)
MAX_DPS = 200  # minimax --dps
MAX_BATCH = 64  # validate --batch
MAX_COMPARE = 16  # compare: schedules in one table


#: what a number on the command line may look like: an ASCII decimal (float() would also take '1_0',
#: Unicode digits and surrounding whitespace, which then reach the output and the JSON as given)
_DECIMAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", re.ASCII)


def _number(minimum: float, strict: bool):
    """An argparse type: a finite decimal number above ``minimum`` (``strict``) or at least ``minimum``."""
    def parse(text):
        if not _DECIMAL.fullmatch(text):
            raise argparse.ArgumentTypeError(f"not a decimal number: {ascii(text)[:80]}")
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {ascii(text)[:80]}") from None
        ok = (v > minimum if strict else v >= minimum) and v < float("inf")
        if not ok:
            raise argparse.ArgumentTypeError(f"must be a finite number {'>' if strict else '>='} {minimum:g}, "
                                             f"got {text}")
        return text
    return parse


_positive = _number(0, strict=True)
_nonneg = _number(0, strict=False)


def _fraction(text):
    """An argparse type: a number in ``[0, 1)`` (a cushion ``c·u`` must stay below ``u``)."""
    v = _nonneg(text)
    if not float(v) < 1:
        raise argparse.ArgumentTypeError(
            f"must be in [0, 1) (the solve interval is [max(l, cushion·u), u]), got {text}")
    return v


# the integer options: the one shared type (foundation.commandline.int_option), each with its range
_seed = int_option(0, 2**63 - 1, "a seed")


def _count(maximum: int):
    """An argparse type: an integer in ``[1, maximum]``."""
    return int_option(1, maximum, "a count")


_steps = _count(MAX_SCHEDULE_STEPS)
#: a number of restarts, 0 to MAX_SCHEDULE_STEPS (the schedule's own length bounds it further)
_count_from_zero = int_option(0, MAX_SCHEDULE_STEPS, "a restart count")
STEPS_HELP = f"number of steps, 1 to {MAX_SCHEDULE_STEPS}"


def _output_options(sub: argparse.ArgumentParser) -> None:
    """``--json`` (print the subcommand's JSON document on stdout instead of its report) and ``--out FILE``
    (write what stdout would get to FILE instead), as every command of the project has them."""
    sub.add_argument("--json", action="store_true", help="print JSON instead of the report")
    sub.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")


def parser() -> OneLineParser:
    """The parser of ``python -m coeffsearch`` and its subcommands."""
    p = OneLineParser(prog="python -m coeffsearch", description="Newton–Schulz coefficient search, certification "
                      "and validation in arbitrary precision.",
                      epilog=f"A schedule has at most {MAX_SCHEDULE_STEPS} steps of at most {MAX_STEP_COEFFICIENTS} "
                             f"coefficients; a schedule file is at most {registry.MAX_FILE_BYTES // 2**20} MiB, and "
                             "its path and name use letters, digits, spaces and _ . / ~ , : + = @ - only.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    m = sub.add_parser("minimax", help="greedy per-step minimax schedule (Polar Express objective, Remez)")
    m.add_argument("--degree", type=_count(MAX_DEGREE), default=5,
                   help=f"odd polynomial degree, 1 to {MAX_DEGREE} (default 5)")
    m.add_argument("--steps", type=_steps, required=True,
                   help=STEPS_HELP + "; once the interval has converged to 1 the rest repeat the limit polynomial")
    m.add_argument("--lower", type=_positive, required=True, help="smallest normalized singular value l")
    m.add_argument("--upper", type=_positive, default="1", help="largest normalized singular value (default 1)")
    m.add_argument("--cushion", type=_fraction, default="0", help="solve on [max(l, cushion·u), u], cushion in [0, 1) "
                                                                  "(default 0)")
    m.add_argument("--safety", type=_nonneg, default="0", help="δ of the safety factor s = 1 + δ (default 0)")
    m.add_argument("--dps", type=_count(MAX_DPS), default=30,
                   help=f"decimal digits of working precision, 1 to {MAX_DPS} (default 30)")
    _output_options(m)

    b = sub.add_parser("band", help="one fixed polynomial at every step: max slope into a band, or narrowest band")
    b.add_argument("--steps", type=_steps, required=True, help=STEPS_HELP)
    b.add_argument("--lower", type=_positive, required=True)
    b.add_argument("--upper", type=_positive, default="1")
    b.add_argument("--band", type=_positive, nargs=2, metavar=("LO", "HI"), help="target band (max-slope objective)")
    b.add_argument("--slope", type=_positive, help="fix a and find the narrowest band containing 1 instead")
    b.add_argument("--seed", type=_seed, default=0)
    _output_options(b)

    c = sub.add_parser("certify", help="rigorous per-step images by interval arithmetic, or re-check a certificate")
    c.add_argument("schedule", help=f"a registered name ({', '.join(registry.names())}), a schedule JSON, "
                                    "or a certificate JSON to re-check (an inverse-root schedule or certificate too)")
    c.add_argument("--steps", type=_steps, help=f"use this many steps, 1 to {MAX_SCHEDULE_STEPS} (a one-polynomial "
                                                "schedule repeats)")
    c.add_argument("--lower", type=_positive, help="default: the schedule's design l, else 1e-3")
    c.add_argument("--upper", type=_positive, default=None, help="default 1")
    _output_options(c)
    c.add_argument("--recheck", action="store_true",
                   help="SCHEDULE must be a certificate file (schedule or restart certificate): recompute every "
                        "field and prove every printed bound again, independently, at 300 bits (100 above the "
                        "certificate's precision); exit 1 on a difference or a bound too small")

    v = sub.add_parser("validate", help="run the schedule (JAX Newton–Schulz) on matrices with prescribed spectra; "
                                        "--gram: Gram Newton–Schulz on hostile spectra against certified bounds")
    v.add_argument("schedule", help="a registered name, a schedule JSON, or (with --gram) a restart certificate")
    v.add_argument("--dtype", choices=("float64", "float32", "bfloat16", "float16", "all"), default="all",
                   help="default all: float64, float32, bfloat16 (with --gram: float32, bfloat16, float16)")
    v.add_argument("--shape", default="256x512",
                   help="MxN (default 256x512); refused when --batch·M·N·min(M, N) > 2**36 or the memory it needs "
                        "(about 128 bytes per entry per matrix) exceeds what is available")
    v.add_argument("--lower", type=_positive, help="default 1e-3 (with --gram: the certificate's l, else the "
                                                    "schedule's design l, else 1e-3)")
    v.add_argument("--batch", type=_count(MAX_BATCH), default=3,
                   help=f"test matrices (condition numbers 1 … max; with --gram: per hostile spectrum), 1 to "
                        f"{MAX_BATCH} (default 3)")
    v.add_argument("--gram", action="store_true",
                   help="validate Gram Newton–Schulz with restarts against SVD on hostile spectra; exit 1 when a "
                        "measured error exceeds its certified bound")
    v.add_argument("--certificate", action="append", metavar="FILE",
                   help="--gram: a restart certificate (python -m coeffsearch restarts ... --json --out FILE) giving "
                        "one dtype its positions and bounds; repeat for more dtypes")
    v.add_argument("--at", metavar="S[,S...]", help="--gram: restart after these iterations where no certificate "
                                                    "gives them ('' for none; default: the certificates', else the "
                                                    "published choice, else none)")
    _output_options(v)

    r = sub.add_parser("restarts", help="certified restart positions for Gram Newton–Schulz (interval arithmetic over "
                                        "every σ in [0, 1] under a stated rounding model)")
    r.add_argument("schedule", help=f"a registered name ({', '.join(registry.names())}) or a schedule JSON")
    r.add_argument("--dtype", required=True, choices=restart_model.DTYPES,
                   help="the dtype whose unit roundoff u sets the model")
    r.add_argument("--restarts", type=_count_from_zero, metavar="K",
                   help="search every set of K restart positions (default: the fewest restarts that certify)")
    r.add_argument("--at", metavar="S[,S...]", help="certify exactly these positions (restart after iteration S)")
    r.add_argument("--growth", type=_nonneg, default=restart_model.DEFAULT_GROWTH,
                   help="growth factor g of the spurious eigenvalue δ = g·u (default 1)")
    r.add_argument("--lower", type=_positive, help="lower end l of bound (b) (default: the schedule's design l, "
                                                   "else 1e-3, but at least 2u: 2^-7 in bfloat16)")
    r.add_argument("--shift", type=_nonneg, default=restart_model.DEFAULT_SHIFT,
                   help="shift factor s: rounding the input and each restart moves a singular value by up to "
                        "ν = s·u (default 1)")
    r.add_argument("--accumulation", type=_count(restart_model.MAX_ACCUMULATION), default=1, metavar="N",
                   help="accumulation length n: every product rounds by at most γ_n = n·u/(1 − n·u) (default 1: "
                        "accumulated in a wider format, rounded once; n·u must be below 1)")
    _output_options(r)

    m = sub.add_parser("validate-model", help="the restart rounding model against measured runs: Gram and standard "
                                              "iterations in float32, float16 and bfloat16 on random, clustered and "
                                              "adversarial spectra, measured worst deviation beside the certified "
                                              "one; exit 1 when a measured value exceeds its certificate")
    m.add_argument("schedules", nargs="*", help=f"0 to {MAX_COMPARE} registered names or schedule files (default: "
                                                f"{', '.join(validate_model.DEFAULT_SCHEDULES)} and the searched ones)")
    m.add_argument("--dtype", choices=(*validate_model.MODEL_DTYPES, "all"), default="all")
    m.add_argument("--method", choices=(*validate_model.METHODS, "both"), default="both",
                   help="gram: the shipped certified restarts; standard: the standard iteration (default both)")
    m.add_argument("--shape", action="append", metavar="MxN",
                   help="a matrix size, both sides >= 4; repeat for more (default 32x96 and 64x256)")
    m.add_argument("--batch", type=_count(MAX_BATCH), default=2, help=f"matrices per spectrum and size, 1 to "
                                                                         f"{MAX_BATCH} (default 2)")
    m.add_argument("--accumulation", type=_count(restart_model.MAX_ACCUMULATION), default=1, metavar="N",
                   help="accumulation length n of the model (the standard iteration is certified at n + 1)")
    _output_options(m)

    k = sub.add_parser("compare", help="table of schedules (and --plot PNG of the composed polynomials)")
    k.add_argument("schedules", nargs="+", help=f"1 to {MAX_COMPARE} schedule names or files")
    k.add_argument("--lower", type=_positive, default="1e-3")
    k.add_argument("--upper", type=_positive, default="1")
    k.add_argument("--plot", metavar="PNG", help="write the plot as PNG to exactly this path (must end in .png)")
    _output_options(k)

    inverse_root_cli.add_search_parser(sub, _positive, _output_options)

    s = sub.add_parser("sources", help="each registered schedule's cited source, its digits as printed and a stated "
                                       "property, checked (exact digits; exit 1 when one differs)")
    s.add_argument("schedules", nargs="*", help="registered names (default: all)")
    _output_options(s)
    return p


def resolve(spec: str) -> tuple[str, list[list[str]], float | None, dict | None]:
    """``(name, steps as decimal strings, design lower, certificate JSON or None)``."""
    try:
        sched = registry.resolve(spec)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    raw = dict(sched.certificate) if sched.certificate is not None else None
    return sched.name, [list(step) for step in sched.steps], sched.lower, raw


def finite_json(obj: object) -> object:
    """``obj`` with every non-finite float replaced by ``None``: standard JSON has no Infinity or NaN."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def json_text(payload: object) -> str:
    """The JSON document ``--json`` prints: ``payload`` indented, non-finite floats as null (a pre-rendered
    string as it is)."""
    if isinstance(payload, str):
        return payload
    return json.dumps(finite_json(payload), indent=2, allow_nan=False) + "\n"


def _check_interval(lower, upper):
    if mpmath.mpf(lower) >= mpmath.mpf(upper):
        raise UsageError(f"--lower must be < --upper, got {lower} >= {upper}")


def cmd_minimax(a: argparse.Namespace) -> tuple[int, object]:
    if a.degree % 2 == 0:
        raise UsageError(f"argument --degree: must be odd, got {a.degree}")
    _check_interval(a.lower, a.upper)
    with progress(total=a.steps, desc="minimax", quiet=a.json) as bar:
        try:
            doc = greedy_schedule(a.lower, a.steps, a.degree, a.cushion, a.safety, a.upper, a.dps, progress=bar)
        except ZeroDivisionError:
            sys.stderr.write(f"coeffsearch: minimax failed: the levelled Remez system is numerically singular on "
                             f"[{a.lower}, {a.upper}] at {a.dps} digits; use a smaller --upper or more --dps\n")
            return 1, None
    print(f"greedy minimax, degree {a.degree}, {a.steps} steps, l = {a.lower}, u = {a.upper}, cushion {a.cushion}, "
          f"safety {a.safety}, {a.dps} digits")
    print(f"{'step':>4}  {'solved on':<33} {'max |1-p|':>12}  coefficients")
    for r, step in zip(doc.report, doc.steps, strict=False):
        iv_ = f"[{float(r['interval'][0]):.6g}, {float(r['interval'][1]):.6g}]"
        flag = "" if r["converged"] else "  (not converged)"
        flag += "  (interval converged: limit polynomial)" if r["interval_collapsed"] else ""
        print(f"{r['step']:>4}  {iv_:<33} {float(r['error']):>12.4e}  ({', '.join(step)}){flag}")
    collapsed = [r["step"] for r in doc.report if r["interval_collapsed"]]
    if collapsed:
        rest = f"step {a.steps} repeats" if collapsed[0] == a.steps else f"steps {collapsed[0]}–{a.steps} repeat"
        print(f"converged: the first {collapsed[0] - 1} step(s) map [l, u] to 1 at {a.dps} digits; {rest} "
              f"the limit polynomial, which fixes 1 (p(1) = 1, p'(1) = 0) and only corrects rounding")
    return 0, doc.to_json()


def cmd_band(a: argparse.Namespace) -> tuple[int, object]:
    _check_interval(a.lower, a.upper)
    if (a.band is None) == (a.slope is None):
        raise UsageError("give exactly one of --band LO HI (maximize the slope) or --slope A (narrowest band)")
    muon = registry.get("muon").as_floats()[0]  # checked against its source in coeffsearch.provenance
    m_lo, m_hi = image(muon, float(a.lower), float(a.upper), a.steps)
    with progress(desc="band search", quiet=a.json) as bar:
        if a.band is not None:
            lo, hi = (float(x) for x in a.band)
            if not lo < 1 < hi:
                raise UsageError(f"argument --band: the band must contain 1 strictly inside, got [{lo}, {hi}]")
            res = max_slope(a.lower, a.upper, a.steps, (lo, hi), seed=a.seed, progress=bar)
        else:
            res = narrowest_band(a.slope, a.lower, a.upper, a.steps, seed=a.seed, progress=bar)
    coeffs = tuple(float(c) for c in res.coeffs)
    out = {"objective": res.objective, "feasible": res.feasible, "steps": a.steps, "lower": a.lower,
           "upper": a.upper, "band_target": a.band, "slope": a.slope, "coefficients": [repr(c) for c in coeffs],
           "image": list(res.band) if res.band else None, "violation": res.violation,
           "feasible_from_lower": res.feasible_from_lower, "notes": res.notes,
           "muon": {"coefficients": list(muon), "image": [m_lo, m_hi]}}
    if res.objective == "narrowest_band" and not res.feasible:
        print(f"INFEASIBLE: slope a = {a.slope} gives no band around 1: {res.notes[0]}")
        print(f"  best (a, b, c) = {coeffs}")
    elif res.objective == "max_slope" and not res.feasible:
        print(f"INFEASIBLE: no fixed quintic maps [{a.lower}, {a.upper}] into [{lo}, {hi}] in {a.steps} steps")
        print(f"  best violation found: {res.violation:.6g} with (a, b, c) = {coeffs}, image "
              f"[{res.band[0]:.6f}, {res.band[1]:.6f}]")
        fl = res.feasible_from_lower
        print(f"  smallest l for which the search is feasible: {fl:.6g}" if fl else
              "  no feasible l found below u")
    else:
        print(f"{res.objective}: (a, b, c) = {coeffs}")
        print(f"  certified image of [{a.lower}, {a.upper}] after {a.steps} steps: "
              f"[{res.band[0]:.10f}, {res.band[1]:.10f}]")
    muon_text = registry.get("muon").steps[0]
    print(f"  Muon ({', '.join(muon_text)}): slope a = {muon_text[0]}, image [{m_lo:.6f}, {m_hi:.6f}]")
    if res.certificate is not None:
        out["certificate"] = res.certificate.to_dict()
    return 0, out


def _steps_for(steps, n):
    if n is None or n == len(steps):
        return steps
    if n < len(steps):
        return steps[:n]
    if all(s == steps[0] for s in steps):
        return [steps[0]] * n
    raise UsageError(f"argument --steps: the schedule has {len(steps)} different steps; cannot use {n}")


def cmd_certify(a: argparse.Namespace) -> tuple[int, object]:
    if a.recheck and (a.lower or a.upper or a.steps):
        raise UsageError("argument --recheck: re-checks a certificate as stated; --lower, --upper and --steps do "
                         "not apply")
    inverse_root = inverse_root_cli.read_document(a.schedule)
    if inverse_root is not None:
        return inverse_root_cli.cmd_certify(a, inverse_root)
    restart_cert = restart_certificate.read_certificate(a.schedule)
    if restart_cert is not None:
        return recheck_restarts(a.schedule, restart_cert)
    name, steps, design_lower, raw = resolve(a.schedule)
    if a.recheck and raw is None:
        raise UsageError(f"argument --recheck: {a.schedule} is not a certificate file (python -m coeffsearch "
                         f"certify SCHEDULE --json --out FILE, or restarts ... --json --out FILE, writes one)")
    if raw is not None and a.lower is None and a.steps is None:
        try:  # malformed: one line per bad field, exit 2; well-formed but wrong: FAILED, exit 1
            stated = Certificate.from_json(raw, f"certificate {a.schedule}")
        except CertificateFormatError as exc:
            raise UsageError(exc.line) from None
        try:
            fresh = recheck(stated)
        except CertificateError as exc:
            print(f"certificate {a.schedule}: FAILED: {exc}")
            return 1, {"certificate": a.schedule, "verdict": "FAILED", "reason": str(exc)}
        print(f"certificate {a.schedule}: re-checked, every stated field equals its recomputation "
              f"({len(fresh.steps)} step images, band, worst error, (0, l] image, overshoot limit) and every "
              f"printed bound contains its {max(RECHECK_PREC, fresh.precision_bits + 100)}-bit enclosure; "
              f"band {fresh.band}")
        return 0, {"certificate": a.schedule, "verdict": "re-checked", "band": list(fresh.band)}
    lower = a.lower or (repr(design_lower) if design_lower else "1e-3")
    upper = a.upper or "1"
    _check_interval(lower, upper)
    steps = _steps_for(steps, a.steps)
    try:
        with progress(total=2 * len(steps), desc="certify", quiet=a.json) as bar:
            cert = certify(steps, lower, upper, name, progress=bar)
    except CertificateError as exc:
        raise UsageError(str(exc)) from None
    print(f"{name}: {len(steps)} steps on [{lower}, {upper}] ({cert['precision_bits']}-bit interval arithmetic)")
    for r in cert["steps"]:
        print(f"  step {r['step']}: [{r['input'][0]}, {r['input'][1]}] -> [{r['output'][0]}, {r['output'][1]}]"
              f"  ({len(r['critical_points'])} interior critical point(s))")
    print(f"  certified band: [{cert['band'][0]}, {cert['band'][1]}], worst |1 - p| <= {cert['worst_error']}")
    print(f"  (0, l] maps into [{cert['below_lower']['output'][0]}, {cert['below_lower']['output'][1]}]")
    print(f"  overshoot: largest u with {cert['overshoot']['criterion']}: {cert['overshoot']['u_max']}")
    return 0, cert.to_json()


def recheck_restarts(path: str, data: dict) -> tuple[int, dict]:
    """``certify FILE`` for a restart certificate: 0 re-checked, 1 a field differs, 2 a malformed file."""
    try:
        fresh = restart_certificate.recheck(data, f"certificate {path}")
    except CertificateFormatError as exc:
        raise UsageError(exc.line) from None
    except CertificateError as exc:
        print(f"certificate {path}: FAILED: {exc}")
        return 1, {"certificate": path, "verdict": "FAILED", "reason": str(exc)}
    where = ", ".join(map(str, fresh["restarts"])) or "none"
    print(f"certificate {path}: re-checked, every stated field equals its recomputation ({fresh['name']}, "
          f"{fresh['dtype']}, restarts after {where}, {len(fresh['partition']) - 1} pieces): (a) max |Q| <= "
          f"{fresh['max_abs_q']['bound']}, (b) max |x_T - 1| <= {fresh['deviation']['bound']}; both proven "
          f"again at {max(restart_certificate.RECHECK_PREC, fresh['precision_bits'] + 100)} bits")
    return 0, {"certificate": path, "verdict": "re-checked", "restarts": fresh["restarts"]}


def cmd_restarts(a: argparse.Namespace) -> tuple[int, object]:
    name, steps, design_lower, _ = resolve(a.schedule)
    try:
        at = restarts.parse_positions(a.at) if a.at is not None else None
        if at is not None and a.restarts is not None and len(at) != a.restarts:
            raise restart_model.RestartError(f"argument --restarts: {a.restarts} restarts "
                                             f"but --at names {len(at)} positions")
        model = restart_model.Model(a.dtype, a.growth, a.lower or restart_model.default_lower(design_lower, a.dtype),
                                    a.accumulation, a.shift)
        total = 1 if at is not None else (math.comb(len(steps) - 1, a.restarts) if a.restarts is not None
                                          and a.restarts <= len(steps) - 1 else None)
        with progress(total=total, desc="restarts", quiet=a.json) as bar:
            chosen, tried = restarts.search(name, steps, model, a.restarts, at, progress=bar)
    except restart_model.RestartError as exc:
        raise UsageError(str(exc)) from None
    sys.stdout.write(restarts.format_table(name, model, tried, chosen))
    sys.stdout.write(restarts.summary(chosen))
    published = restarts.PUBLISHED.get(name)
    if published is not None and at is None:
        row = next((c for c in tried if c.positions == published), None)
        if row is None:
            row = restarts.evaluate(name, steps, published, model)
        where = ", ".join(map(str, published))
        verdict = (f"(a) <= {row.certificate['max_abs_q']['bound']}, (b) <= {row.certificate['deviation']['bound']}"
                   if row.certificate else f"not certified: {row.reason}")
        print(f"published choice (Zhang, Amsel, Chen, Dao 2026): restart after iteration {where}: {verdict}")
    return 0, json.dumps(chosen.certificate, indent=2) + "\n"


def cmd_validate(a: argparse.Namespace) -> tuple[int, object]:
    inverse_root = inverse_root_cli.read_document(a.schedule)
    if inverse_root is not None:
        return inverse_root_cli.cmd_validate(a, inverse_root)
    try:
        shape = parse_shape(a.shape)
        check_size(shape, a.batch * (len(validate_gram.SPECTRA) if a.gram else 1))
    except ValueError as exc:
        raise UsageError(f"argument --shape: {exc}") from None
    if a.gram:
        text, rows, bounds = validate_gram.command(a, shape, resolve)
        sys.stdout.write(text)
        return (1 if any(r.exceeds for r in rows) else 0), validate_gram.to_json(rows, bounds)
    if a.certificate or a.at is not None:
        raise UsageError(f"argument {'--certificate' if a.certificate else '--at'}: only with --gram")
    name, steps, _, _ = resolve(a.schedule)
    dtypes = DTYPES if a.dtype == "all" else (a.dtype,)
    with progress(total=len(dtypes), desc="validate", quiet=a.json) as bar:
        rows = validate(steps, dtypes, shape, float(a.lower or "1e-3"), a.batch, progress=bar)
    sys.stdout.write(format_rows(name, rows))
    print("slack = 8 eps(dtype) for rounding; 'inside' means observed within certified ± slack")
    return (0 if all(r.inside for r in rows) else 1), [r.__dict__ | {"inside": r.inside} for r in rows]


def cmd_validate_model(a: argparse.Namespace) -> tuple[int, object]:
    if len(a.schedules) > MAX_COMPARE:
        raise UsageError(f"argument schedules: at most {MAX_COMPARE} schedules, got {len(a.schedules)}")
    shapes = []
    for text in a.shape or [f"{m}x{n}" for m, n in validate_model.DEFAULT_SHAPES]:
        try:
            shape = parse_shape(text)
            check_size(shape, 2 * a.batch)
        except ValueError as exc:
            raise UsageError(f"argument --shape: {exc}") from None
        if min(shape) < validate_gram.MIN_SIDE:
            raise UsageError(f"argument --shape: both sides must be >= {validate_gram.MIN_SIDE}, got {text}")
        shapes.append(shape)
    dtypes = validate_model.MODEL_DTYPES if a.dtype == "all" else (a.dtype,)
    try:
        validate_model.check_accumulation(a.accumulation, dtypes)
    except restart_model.RestartError as exc:
        raise UsageError(str(exc)) from None
    searched = validate_model.shipped_steps()
    names = a.schedules or [*validate_model.DEFAULT_SCHEDULES, *searched]
    schedules = {x: searched[x] if x in searched else resolve(x)[1] for x in names}
    methods = validate_model.METHODS if a.method == "both" else (a.method,)
    with progress(total=len(dtypes) * len(schedules) * len(methods), desc="validate-model", quiet=a.json) as bar:
        rows, bounds = validate_model.validate_model(schedules, dtypes, methods, shapes, a.batch,
                                                     accumulation=a.accumulation, progress=bar)
    sys.stdout.write(validate_model.format_report(rows, bounds, shapes))
    return (1 if any(r.exceeds for r in rows) else 0), validate_model.to_json(rows, bounds)


def cmd_compare(a: argparse.Namespace) -> tuple[int, object]:
    _check_interval(a.lower, a.upper)
    if a.plot and (not a.plot.lower().endswith(".png") or os.path.isdir(a.plot)):
        raise UsageError(f"argument --plot: must name a .png file (it is written to exactly that path), got {a.plot!a}")
    if len(a.schedules) > MAX_COMPARE:
        raise UsageError(f"argument schedules: at most {MAX_COMPARE} schedules in one comparison, got "
                         f"{len(a.schedules)}")
    named = [(n, s) for n, s, _, _ in (resolve(x) for x in a.schedules)]
    with progress(total=len(named), desc="compare", quiet=a.json) as bar:
        rows = compare_rows(named, float(a.lower), float(a.upper), progress=bar)
    sys.stdout.write(format_compare(rows, float(a.lower), float(a.upper)))
    if a.plot:
        try:
            plot(named, a.plot, float(a.lower))
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot write --plot {a.plot!a}: {getattr(exc, 'strerror', None) or exc}") from None
        print(f"plot written to {a.plot}")
    return 0, rows


def cmd_sources(a: argparse.Namespace) -> tuple[int, object]:
    names = a.schedules or registry.names()
    unknown = [n for n in names if n not in registry.names()]
    if unknown:
        raise UsageError(f"argument schedules: unknown schedule {unknown[0]!r}; known: {', '.join(registry.names())}")
    rows = []
    for name in names:
        failures = provenance.check(registry.get(name))
        record = provenance.SOURCES.get(name)
        rows.append({"name": name, "verdict": "FAIL" if failures else "ok", "failures": failures,
                     "citation": record.source.citation if record else None,
                     "stored": record.source.transform if record else None,
                     "note": record.source.note if record else None,
                     "property": record.claim.statement if record else None})
        print(f"{name}: {rows[-1]['verdict']}")
        if record:
            print(f"  source:   {record.source.citation}")
            print(f"  stored:   {record.source.transform}")
            if record.source.note:
                print(f"  note:     {record.source.note}")
            print(f"  property: {record.claim.statement}")
        for line in failures:
            print(f"  FAIL: {line}")
    return (1 if any(r["failures"] for r in rows) else 0), rows


def main(argv: list[str] | None = None) -> int:
    """``python -m coeffsearch …``; returns the exit status (2: bad input or stdout not writable).

    A subcommand prints its report and returns its status and its JSON document; stdout gets the report, or with
    ``--json`` the document alone (``--out FILE``: the file gets it instead)."""
    prog = "coeffsearch"
    if stdout_closed(prog):  # started with >&-: print() would discard every result silently
        return 2
    try:
        args = parser().parse_args(argv)
        if args.out is not None and os.path.isdir(args.out):  # refused before the work, not after it
            raise UsageError(f"argument --out: {args.out!a} is a directory")
        handler = {"minimax": cmd_minimax, "band": cmd_band, "certify": cmd_certify,
                   "validate": cmd_validate, "compare": cmd_compare, "restarts": cmd_restarts,
                   "sources": cmd_sources, "validate-model": cmd_validate_model,
                   "inverse-root-search": inverse_root_cli.cmd_search}[args.command]
        report = io.StringIO()
        with contextlib.redirect_stdout(report):
            status, document = handler(args)
    except (UsageError, ScheduleError) as exc:
        return usage_error(prog, exc)
    if not args.json:
        return write_result(prog, report.getvalue(), status, args.out)
    # no document: the command failed and said why on stderr
    return write_result(prog, "" if document is None else json_text(document), status, args.out)


if __name__ == "__main__":
    sys.exit(main())
