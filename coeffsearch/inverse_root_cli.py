"""The inverse-root commands of ``python -m coeffsearch``: ``inverse-root-search``, and ``certify FILE`` /
``validate FILE`` for a file of kind ``inverse-root`` (a schedule) or ``inverse-root-certificate``.

Each handler prints its report and returns ``(status, JSON document)`` as the other subcommands do:
0 done, 1 a certificate refused or a validation outside its bound; bad input is a one-line usage error.
"""

from __future__ import annotations

import argparse
import json

from coeffsearch import registry
from coeffsearch.certify import CertificateError
from coeffsearch.inverse_root_certify import CERT_KIND, certify, check_registered_name
from coeffsearch.inverse_root_recheck import recheck
from coeffsearch.inverse_root_search import greedy
from coeffsearch.inverse_root_validate import allowed, validate_mp, validate_runtime
from coeffsearch.inverse_roots import KIND, MAX_P, RootSchedule
from foundation.commandline import FileRefused, UsageError, int_option, parse_json, progress, read_regular_file
from foundation.polynomial import MAX_SCHEDULE_STEPS, ScheduleError, check_name

MAX_DEGREE = 4  # inverse-root-search --degree: the factor's degree (each degree above 1 costs one product per step)
RUNTIME_DTYPES = ("float64", "float32", "bfloat16")


def add_search_parser(sub, positive, output_options) -> None:
    """``inverse-root-search --p P --lower L --steps N [--degree D] [--name NAME]``."""
    s = sub.add_parser("inverse-root-search", help="greedy per-step factors of the coupled Newton–Schulz iteration "
                                                   "for X^(-1/p) of SPD X (eigenvalues normalized into [l, 1]), "
                                                   "certified")
    s.add_argument("--p", type=int_option(1, MAX_P, "a root"), required=True, help=f"the root, 1 to {MAX_P}")
    s.add_argument("--lower", type=positive, required=True, help="smallest normalized eigenvalue l (below 1)")
    s.add_argument("--steps", type=int_option(1, MAX_SCHEDULE_STEPS, "a count"), required=True,
                   help=f"number of steps, 1 to {MAX_SCHEDULE_STEPS}")
    s.add_argument("--degree", type=int_option(1, MAX_DEGREE, "a degree"), default=1,
                   help=f"degree of each factor q_k, 1 to {MAX_DEGREE} (default 1, Newton's)")
    s.add_argument("--name", default="searched", help="the schedule's name in the file (default searched)")
    output_options(s)


def cmd_search(a: argparse.Namespace) -> tuple[int, object]:
    if not float(a.lower) < 1:
        raise UsageError(f"argument --lower: must be below 1 (the normalized eigenvalues lie in [l, 1]), got {a.lower}")
    check_name(a.name, "argument --name:")
    with progress(total=a.steps, desc="inverse-root-search", quiet=a.json) as bar:
        try:
            schedule = greedy(a.p, a.lower, a.steps, a.degree, a.name, progress=bar)
        except ValueError as exc:
            print(f"inverse-root-search: no certified schedule: {exc}")
            return 1, None
    cert = certify(schedule)
    _print_certificate(schedule, cert)
    return 0, {**schedule.to_dict(), "certified": {k: cert[k] for k in ("band", "root_error", "matmuls", "u_max")}}


def read_document(spec: str) -> dict | None:
    """The parsed file ``spec`` when it is an inverse-root schedule or certificate, else None (a registered msign
    name, which a file of that name does not shadow; not a file; or another kind: the msign commands read it)."""
    if spec in registry.names():
        return None
    try:
        raw = read_regular_file(spec, registry.MAX_FILE_BYTES, "schedule file")
        data = parse_json(raw, spec)
    except (FileRefused, OSError):
        return None
    if isinstance(data, dict) and data.get("kind") in (KIND, CERT_KIND):
        return data
    return None


def _schedule_of(spec: str, data: dict) -> RootSchedule:
    if data["kind"] == CERT_KIND:
        data = {**data, "kind": KIND, "steps": data.get("schedule")}
    try:
        return RootSchedule.from_dict(data, spec)
    except ScheduleError as exc:
        raise UsageError(str(exc)) from None


def _print_certificate(schedule: RootSchedule, cert: dict) -> None:
    print(f"{schedule.name}: inverse p-th root, p = {schedule.p}, {len(schedule.steps)} steps, {cert['matmuls']} "
          f"matrix products, on [{schedule.interval[0]}, {schedule.interval[1]}] ({cert['precision_bits']}-bit"
          f" interval arithmetic)")
    for r in cert["steps"]:
        print(f"  step {r['step']}: [{r['input'][0]}, {r['input'][1]}] -> [{r['output'][0]}, {r['output'][1]}]  "
              f"factor in [{r['factor'][0]}, {r['factor'][1]}]")
    print(f"  certified band of M: [{cert['band'][0]}, {cert['band'][1]}]; every x_k and q_k(x_k) positive")
    print(f"  certified root error: |y x^(1/p) - 1| <= {cert['root_error']} for every x in "
          f"[{schedule.interval[0]}, {schedule.interval[1]}]")
    print(f"  factors stay positive and the image inside (0, 1.5] for eigenvalues up to u_max = {cert['u_max']}")


def cmd_certify(a: argparse.Namespace, data: dict) -> tuple[int, object]:
    """``certify FILE`` for an inverse-root schedule (certify it) or certificate (re-check it)."""
    if a.lower or a.upper or a.steps:
        raise UsageError("arguments --lower, --upper, --steps: an inverse-root file states its own interval and steps")
    schedule = _schedule_of(a.schedule, data)
    try:
        if data["kind"] == CERT_KIND:
            fresh = recheck(data, a.schedule)
            print(f"certificate {a.schedule}: re-checked, every stated field equals its recomputation and every "
                  f"printed bound contains its independent enclosure; root error <= {fresh['root_error']}, band "
                  f"{fresh['band']}")
            return 0, {"certificate": a.schedule, "verdict": "re-checked", "band": fresh["band"],
                       "root_error": fresh["root_error"]}
        if a.recheck:
            raise UsageError(f"argument --recheck: {a.schedule} is an inverse-root schedule, not a certificate")
        check_registered_name(schedule)
        cert = certify(schedule)
    except ScheduleError as exc:
        raise UsageError(str(exc)) from None
    except CertificateError as exc:
        print(f"{a.schedule}: FAILED: {exc}")
        return 1, {"schedule": a.schedule, "verdict": "FAILED", "reason": str(exc)}
    _print_certificate(schedule, cert)
    return 0, json.dumps(cert, indent=2) + "\n"


def cmd_validate(a: argparse.Namespace, data: dict) -> tuple[int, object]:
    """``validate FILE`` for an inverse-root file: mpmath runs, then the JAX routine per dtype."""
    if a.gram or a.certificate or a.at is not None or a.lower:
        raise UsageError("arguments --gram, --certificate, --at, --lower: not for an inverse-root schedule")
    schedule = _schedule_of(a.schedule, data)
    try:
        check_registered_name(schedule)
        cert = certify(schedule)
    except CertificateError as exc:
        print(f"{a.schedule}: FAILED: {exc}")
        return 1, {"schedule": a.schedule, "verdict": "FAILED", "reason": str(exc)}
    dtypes = RUNTIME_DTYPES if a.dtype == "all" else (a.dtype,)
    if not set(dtypes) <= set(RUNTIME_DTYPES):
        raise UsageError(f"argument --dtype: an inverse-root schedule runs in {', '.join(RUNTIME_DTYPES)}")
    with progress(total=1 + len(dtypes), desc="validate", quiet=a.json) as bar:
        mp_rows = validate_mp(schedule, batch=a.batch)
        bar.update(1)
        runtime_rows = []
        for dtype in dtypes:
            runtime_rows.append(validate_runtime(schedule, dtype, batch=a.batch))
            bar.update(1)
    delta = cert["root_error"]
    print(f"{schedule.name} (inverse p-th root, p = {schedule.p}, {len(schedule.steps)} steps): certified root error "
          f"{delta}")
    ok = True
    for r in mp_rows:
        inside = r["root_error"] <= float(delta) * (1 + 1e-12)
        ok &= inside
        print(f"  mpmath 40 digits, 6x6, matrix {r['matrix']}: |X^(1/p) Y - I| = {r['root_error']:.4e}, relative "
              f"error {r['relative_error']:.4e}  {'inside' if inside else 'OUTSIDE'}")
    for r in runtime_rows:
        inside = r["relative_error"] <= allowed(delta, r)
        ok &= inside
        print(f"  runtime {r['dtype']:<8} 32x32: relative error {r['relative_error']:.4e} (allowed "
              f"{allowed(delta, r):.4e}), |X^(1/p) Y - I| = {r['root_error']:.4e}  {'inside' if inside else 'OUTSIDE'}")
    return (0 if ok else 1), {"schedule": a.schedule, "root_error": delta, "mpmath": mp_rows, "runtime": runtime_rows}

