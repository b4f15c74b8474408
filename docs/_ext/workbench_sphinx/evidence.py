"""Every step's evidence at full precision, written next to the site as ``evidence/<rule>.json``.

The proof pages round their numbers for display; each rule page links this file, which holds the
same numbers as the engine recorded them (the float64 residual and its sub-checks, the mpmath
residual at 50 digits computed while the docs were built, the symbolic verdict).
"""

from __future__ import annotations

import json
from pathlib import Path

from derivations.engine import derivation as engine

from .objects import catalogue
from .proofs import EVIDENCE_DIR


def step_record(step) -> dict:
    check = step.check
    return {"step": step.index, "kind": step.kind, "lemma": step.lemma.key, "lemma_number": str(step.lemma.number),
            "conditions": list(step.conditions), "float64_error": float(check.float64_error),
            "float64_instances": int(check.trials),
            "subchecks": {k: float(v) for k, v in (check.subchecks or {}).items()},
            "mpmath_error": None if check.mpmath_error is None else float(check.mpmath_error),
            "symbolic": check.symbolic}


def rule_record(entry) -> dict:
    return {"rule": entry.name, "mpmath_digits": getattr(engine, "MPMATH_DPS", 50),
            "derivations": [{"name": der.name, "title": der.title, "fingerprint": der.fingerprint(),
                             "steps": [step_record(s) for s in der.steps]} for der in entry.derivations]}


def write_evidence(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / EVIDENCE_DIR
    target.mkdir(parents=True, exist_ok=True)
    for entry in catalogue(app.config).rules.values():
        (target / f"{entry.name}.json").write_text(json.dumps(rule_record(entry), indent=1) + "\n")
