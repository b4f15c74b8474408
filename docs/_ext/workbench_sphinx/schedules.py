"""Newton–Schulz pages: registry schedules, their certificates and plots, the band challenge.

* ``.. schedule:: polar-express-5`` — source, coefficients, the certified image of the design
  interval (computed now by :func:`coeffsearch.certify.certify`), the image of ``(0, l]``, the
  overshoot limit, and a plot of the composed polynomial on a log axis;
* ``.. schedule-comparison::`` — one table and one plot across every registered schedule;
* ``.. band-challenge::`` — one fixed quintic into a band (``workbench_band_challenge``): the
  searches run in a background process from the start of the build and their results are cached
  under the build directory, never committed.

Plots are written under the build directory (``<outdir>/../workbench-generated``) and
copied into the site by Sphinx like any other image.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import ClassVar

from docutils.parsers.rst import directives
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

import coeffsearch
import coeffsearch.band
import coeffsearch.certify
import foundation.polynomial
from coeffsearch.compare import plot

from . import rst
from .objects import unknown
from .proofs import mark_rendered

DEFAULT_LOWER = "1e-3"  # the command line's default design interval start, for schedules without one


def certificate(steps, lower, upper="1", name: str = "") -> dict:
    """A certificate as a plain dictionary (whether ``certify`` returns a dict or a typed object)."""
    cert = coeffsearch.certify.certify(steps, lower, upper, name)
    if isinstance(cert, dict):
        return cert
    data = cert.to_json() if hasattr(cert, "to_json") else cert
    return json.loads(data) if isinstance(data, str) else dict(data)


def schedule(name: str):
    try:
        return coeffsearch.get(name)
    except KeyError:
        raise unknown("schedule", name, coeffsearch.names()) from None


def design_lower(sched) -> str:
    return repr(sched.lower) if sched.lower else DEFAULT_LOWER


#: per build: the directory for generated images and the band challenge (set when the builder starts)
_BUILD = {}


def generated_dir() -> Path:
    path = _BUILD["generated"]
    path.mkdir(parents=True, exist_ok=True)
    return path


def image_uri(directive, path: Path) -> str:
    """``path`` relative to the directory of the current document (Sphinx copies it into the site)."""
    docdir = Path(directive.env.doc2path(directive.env.docname)).parent
    return os.path.relpath(path, docdir)


def plot_schedules(named, path: Path, lower: float):
    plot(named, str(path), lower=lower)


def _interval(pair) -> str:
    return f"[{pair[0]}, {pair[1]}]"


class ScheduleDirective(SphinxDirective):
    """``.. schedule:: NAME`` — one registered schedule, certified on its design interval."""

    required_arguments = 1
    has_content = False

    def run(self):
        sched = schedule(self.arguments[0])
        mark_rendered(self.env, "schedule", sched.name)
        lower = design_lower(sched)
        cert = certificate(sched.steps, lower, "1", sched.name)
        png = generated_dir() / f"schedule-{rst.label(sched.name)}.png"
        plot_schedules([(sched.name, sched.steps)], png, float(lower))
        title = f"{sched.name}"
        lines = [f".. _schedule-{rst.label(sched.name)}:", "", rst.text(title), "-" * (len(rst.text(title)) + 4), "",
                 f"**Source.** {rst.text(sched.source)}.", "",
                 f"{len(sched.steps)} steps, {sched.matmuls} matrix products per application; "
                 f"design interval :math:`[l, u] = [{lower}, 1]`"
                 + ("" if sched.lower else " (no design interval was published; the command line's default l)")
                 + ".", "", ".. list-table:: Coefficients (as published, or computed from the published recipe)",
                 "   :header-rows: 1", "", "   * - step"]
        width = max(len(s) for s in sched.steps)
        lines += [f"     - :math:`c_{{{k}}}` (:math:`\\sigma^{{{2 * k + 1}}}`)" for k in range(width)]
        for i, step in enumerate(sched.steps, 1):
            lines += [f"   * - {i}"] + [f"     - {rst.literal(c)}" for c in step] + ["     -"] * (width - len(step))
        lines += ["", (".. list-table:: Certified image of each step (outward-rounded interval arithmetic, "
                  f"{cert.get('precision_bits', '')} bits)"), "   :header-rows: 1", "",
                  "   * - step", "     - input interval", "     - certified image"]
        for row in cert["steps"]:
            lines += [f"   * - {row['step']}", f"     - {rst.literal(_interval(row['input']))}",
                      f"     - {rst.literal(_interval(row['output']))}"]
        over = cert["overshoot"]
        u_max = over.get("u_max")
        below = cert["below_lower"]
        lines += ["", (f"* **Certified image** of :math:`[{lower}, 1]` after {len(sched.steps)} steps: "
                  f"{rst.literal(_interval(cert['band']))}; worst :math:`|1 - p(\\sigma)|` at most "
                  f"{rst.literal(cert['worst_error'])}."),
                  f"* Image of :math:`(0, l]`: {rst.literal(_interval(below['output']))}.",
                  f"* **Overshoot limit** (criterion: {rst.text(over['criterion'])}): "
                  + (f"inputs up to :math:`u = {u_max}` stay bounded." if u_max else
                     "none: even :math:`u = 1` leaves the band."), "",
                  f".. figure:: {image_uri(self, png)}", "   :width: 90%", "",
                  f"   {rst.text(f'Composed polynomial of {sched.name} on a log axis (dotted: l = {lower}).')}", ""]
        return rst.parse(self, lines)


class ScheduleComparisonDirective(SphinxDirective):
    """``.. schedule-comparison::`` — every registered schedule on one interval: table and plot."""

    has_content = False
    option_spec: ClassVar[dict] = {"lower": directives.unchanged}

    def run(self):
        lower = self.options.get("lower", DEFAULT_LOWER)
        named = [(n, coeffsearch.get(n).steps) for n in coeffsearch.names()]
        lines = [f".. list-table:: Every registered schedule certified on :math:`[{lower}, 1]`", "   :header-rows: 1",
                 "", "   * - schedule", "     - steps", "     - matmuls", "     - certified image",
                 "     - worst :math:`|1-p|`", "     - overshoot limit :math:`u_{\\max}`"]
        for name, steps in named:
            cert = certificate(steps, lower, "1", name)
            lines += [f"   * - :ref:`{name} <schedule-{rst.label(name)}>`", f"     - {len(steps)}",
                      f"     - {sum(len(s) for s in steps)}", f"     - {rst.literal(_interval(cert['band']))}",
                      f"     - {rst.literal(cert['worst_error'])}",
                      f"     - {rst.literal(cert['overshoot'].get('u_max') or 'none')}"]
        png = generated_dir() / "schedule-comparison.png"
        plot_schedules(named, png, float(lower))
        figure = image_uri(self, png)
        caption = rst.text(f"Every registered schedule: the composed polynomial on a log axis (dotted: l = {lower}).")
        lines += ["", f".. figure:: {figure}", "   :width: 100%", "", f"   {caption}", ""]
        return rst.parse(self, lines)


# ---- band challenge ------------------------------------------------------------------------


def band_result(lower: str, upper: str, steps: int, band: tuple, seed: int = 0) -> dict:
    """``max a`` for one fixed quintic into ``band`` (JSON-ready); runs in a worker process."""
    res = coeffsearch.band.max_slope(lower, upper, steps, tuple(band), seed=seed)
    muon = (3.4445, -4.7750, 2.0315)
    cert = res.certificate
    if cert is not None and not isinstance(cert, dict):
        cert = json.loads(cert.to_json()) if hasattr(cert, "to_json") else None
    return {"lower": lower, "upper": upper, "steps": steps, "band": list(band), "feasible": bool(res.feasible),
            "coefficients": [repr(float(c)) for c in res.coeffs] if res.coeffs is not None else None,
            "image": list(res.band) if res.band else None, "violation": float(res.violation),
            "feasible_from_lower": res.feasible_from_lower, "notes": list(res.notes),
            "certified_band": cert["band"] if cert else None,
            "muon_image": list(coeffsearch.band.image(muon, float(lower), float(upper), steps))}


def _sources_hash() -> str:
    h = hashlib.sha256()
    for module in (coeffsearch.band, coeffsearch.certify, foundation.polynomial):
        h.update(Path(module.__file__).read_bytes())
    return h.hexdigest()[:16]


class BandChallenge:
    """The configured band searches, started in the background, cached by inputs and source."""

    def __init__(self, app):
        self.config = dict(app.config.workbench_band_challenge)
        self.cache = Path(app.outdir).resolve().parent / "workbench-cache"
        self.cache.mkdir(parents=True, exist_ok=True)
        self.futures = {}
        self.pool = None
        digest = _sources_hash()
        for lower in self.config["lowers"]:
            path = self._path(lower, digest)
            if path.exists():
                continue
            if self.pool is None:
                self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            self.futures[lower] = (path, self.pool.submit(band_result, lower, self.config["upper"],
                                                          self.config["steps"], tuple(self.config["band"])))
        self.digest = digest

    def _path(self, lower, digest) -> Path:
        key = json.dumps([lower, self.config["upper"], self.config["steps"], list(self.config["band"]), digest])
        return self.cache / f"band-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"

    def result(self, lower: str) -> dict:
        if lower in self.futures:
            path, future = self.futures.pop(lower)
            data = future.result()
            path.write_text(json.dumps(data, indent=1))
            if not self.futures and self.pool is not None:
                self.pool.shutdown()
                self.pool = None
            return data
        return json.loads(self._path(lower, self.digest).read_text())

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None


def start_build(app):
    """Record where generated files go; start the band searches in the background."""
    _BUILD["generated"] = Path(app.outdir).resolve().parent / "workbench-generated"
    config = app.config.workbench_band_challenge
    _BUILD["band"] = BandChallenge(app) if config and app.builder.format == "html" else None


def stop_band_challenge(app, exc):
    band = _BUILD.pop("band", None)
    if band is not None:
        band.close()


def _fmt(xs, digits=6):
    return "(" + ", ".join(f"{float(x):.{digits}g}" for x in xs) + ")"


class BandChallengeDirective(SphinxDirective):
    """``.. band-challenge::`` — feasible and infeasible targets of one fixed quintic."""

    has_content = False

    def run(self):
        band = _BUILD.get("band")
        if band is None:
            raise ExtensionError("band-challenge: set workbench_band_challenge in conf.py "
                                 "(steps, band, lowers, upper)")
        cfg = band.config
        lo, hi = cfg["band"]
        lines = [(f"Target: one quintic :math:`p(x) = a x + b x^3 + c x^5`, applied {cfg['steps']} times, maps "
                 f":math:`[l, {cfg['upper']}]` into :math:`[{lo}, {hi}]`; maximize the slope :math:`a`. "
                 "Search: differential evolution on the exact float64 image, then a local polish; a feasible "
                 "answer is certified by interval arithmetic."), ""]
        for lower in cfg["lowers"]:
            r = band.result(lower)
            if r["feasible"]:
                lines += [(f"* :math:`l = {lower}`: **feasible**. :math:`(a, b, c) = {_fmt(r['coefficients'], 10)}`; "
                          f"certified image {rst.literal(_interval(r['certified_band'] or r['image']))} "
                          f":math:`\\subseteq [{lo}, {hi}]`.")]
            else:
                start = r["feasible_from_lower"]
                lines += [f"* :math:`l = {lower}`: **infeasible** — no polynomial found. Evidence: the best "
                          f"violation found by the global search is {r['violation']:.4g}, at "
                          f":math:`(a, b, c) = {_fmt(r['coefficients'], 10)}` with image "
                          f"{rst.literal(_interval([f'{x:.6f}' for x in r['image']]))}; "
                          + (f"bisection on :math:`l` finds the search feasible only from "
                             f":math:`l \\approx {start:.4g}`." if start else "no feasible :math:`l` was found.")
                          + " This is the outcome of a global search, not a proof of infeasibility."]
            m = r["muon_image"]
            lines += [(f"  Muon's quintic (3.4445, -4.7750, 2.0315) maps the same interval to "
                      f"{rst.literal(_interval([f'{x:.6f}' for x in m]))}."), ""]
        return rst.parse(self, lines)

