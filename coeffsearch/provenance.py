"""Provenance of the shipped Newton–Schulz schedules: each registered schedule's published digits, checked.

A certificate certifies whatever coefficients it is given, so a wrong digit in a published schedule would
pass every schedule and certificate test. Each schedule of :mod:`coeffsearch.registry` therefore has a
:class:`Provenance` record here, checked two ways by :func:`check`:

(a) **the digits.** The record holds the coefficients exactly as its source prints them (a decimal, or
    ``p/q`` where the source prints a fraction), where they are printed, and how the registry stores
    them (:attr:`Source.transform`). Printed and shipped values are compared as exact rationals
    (:class:`fractions.Fraction`), never as floats with a tolerance: one changed digit fails. A schedule
    shipped as a *recipe* (computed on first use) is compared through its published arguments instead
    (``lower``, ``steps``, ``cushion`` …), exactly, and its computed coefficients are compared with the
    digits its source prints in (b).
(b) **a property the source states** (:class:`Claim`): its error plateau, a fixed point, its design
    constraints, or the digits a recipe must reproduce, recomputed here with mpmath and the outward-rounded
    interval arithmetic of :func:`coeffsearch.certify.certify`, and compared with the stated figure.

Where a source could not be found for some part of a record, the record says so (:attr:`Source.note`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import mpmath

from coeffsearch import registry, restarts
from coeffsearch.certify import certify
from coeffsearch.restart_model import DEFAULT_GROWTH, Model
from foundation.minimax import greedy_schedule
from foundation.schedule import Schedule, Steps

#: the design interval's lower end on which stated errors and bands are recomputed: [1e-3, 1]
CHECK_LOWER = "1e-3"


def exact(text: str) -> Fraction:
    """A printed number as an exact rational: a decimal (``"-4.7750"``, ``"1e-3"``) or ``"p/q"``."""
    return Fraction(str(text).strip())


@dataclass(frozen=True)
class Source:
    """Where a schedule's numbers are printed, the numbers as printed, and how the registry stores them.

    ``printed`` is one tuple per printed step, each number as the source prints it; ``repeat`` says how
    many times the registry applies a source that prints one step (Muon's quintic, 5 steps). For a recipe
    schedule, ``arguments`` are the published arguments of the computation (compared exactly with the
    recipe's), and ``printed`` the coefficients the source prints for it (compared in the claim).
    """

    citation: str
    printed: tuple[tuple[str, ...], ...]
    transform: str
    repeat: int = 1
    arguments: Mapping[str, Any] | None = None
    lower: str | None = None
    note: str = ""
    #: a safety factor ``s`` the registry divides in as its source's code does: ``c_j / s^(2j+1)`` in float64
    safety: str = ""
    #: a work credited for the numbers whose text could not be reached: it is named, never cited, and the
    #: registry's description must say so ("not reached")
    unreached: str = ""

    def expected(self) -> list[list[Fraction]]:
        """The printed steps as exact rationals, repeated as the registry applies them (with :attr:`safety`: the
        float64 values of ``c_j / s^(2j+1)`` as their shortest decimals)."""
        if self.safety:
            s = float(self.safety)
            return [[Fraction(repr(float(c) / s ** (2 * j + 1))) for j, c in enumerate(step)]
                    for step in self.printed] * self.repeat
        return [[exact(c) for c in step] for step in self.printed] * self.repeat


@dataclass(frozen=True)
class Claim:
    """A property the source states, and the function that recomputes it.

    ``check(steps, source)`` returns ``None`` when the recomputed figure agrees with the stated one,
    else one line with both figures.
    """

    statement: str
    check: Callable[[Steps, Source], str | None] = field(repr=False)


@dataclass(frozen=True)
class Provenance:
    """One shipped schedule's source and the property of it that is recomputed."""

    name: str
    source: Source
    claim: Claim


def _worst(steps, lower: str = CHECK_LOWER) -> mpmath.mpf:
    """``max |1 − p_T(σ)|`` over ``σ ∈ [lower, 1]``, an outward-rounded upper bound (interval arithmetic).

    The image of an interval under each step is an interval, so the step-by-step enclosure of
    :func:`~coeffsearch.certify.certify` is tight up to rounding (200 bits): it is the figure itself."""
    return mpmath.mpf(certify(steps, lower, digits=12).worst_error)


def _images(steps, lower: str = CHECK_LOWER) -> list[tuple[mpmath.mpf, mpmath.mpf]]:
    """The outward-rounded image of ``[lower, 1]`` after each step."""
    return [tuple(mpmath.mpf(v) for v in row["output"]) for row in certify(steps, lower, digits=15).steps]


def _fixed_points(step) -> list[mpmath.mpf]:
    """The positive fixed points of ``p(x) = x``: ``√y`` for the positive roots ``y`` of ``Σ c_j y^j − 1``."""
    with mpmath.workdps(40):
        coeffs = [mpmath.mpf(c) for c in step]
        coeffs[0] -= 1
        roots = mpmath.polyroots(list(reversed(coeffs)), maxsteps=200, extraprec=100)
        return sorted(mpmath.sqrt(mpmath.re(y)) for y in roots if abs(mpmath.im(y)) < 1e-30 and mpmath.re(y) > 0)


def _derivatives_at_one(step, order: int) -> list[Fraction]:
    """``p(1) − 1, p'(1), …, p^{(order)}(1)`` in exact rationals (``p(x) = Σ_j c_j x^{2j+1}``)."""
    powers = [(exact(c), 2 * j + 1) for j, c in enumerate(step)]
    out = []
    for k in range(order + 1):
        total = Fraction(0)
        for c, n in powers:
            falling = 1
            for i in range(k):
                falling *= n - i
            total += c * falling
        out.append(total - (1 if k == 0 else 0))
    return out


def _fixes_one(order: int, words: str) -> Callable[[Steps, Source], str | None]:
    def check(steps: Steps, source: Source) -> str | None:
        values = _derivatives_at_one(steps[0], order)
        if any(values):
            shown = ", ".join(f"{'p(1) - 1' if k == 0 else 'p' + chr(39) * k + '(1)'} = {v}"
                              for k, v in enumerate(values))
            return f"{words}, but here {shown}"
        return None
    return check


def _plateau(steps: Steps, source: Source) -> str | None:
    """Jordan's quintic: the error plateaus at ≈ 0.3 (printed to one decimal: [0.25, 0.35))."""
    err = _worst(steps[:1] * 10)
    if not mpmath.mpf("0.25") <= err < mpmath.mpf("0.35"):
        return f"stated plateau error ≈ 0.3, recomputed max |1 - p^10(σ)| on [{CHECK_LOWER}, 1] = {mpmath.nstr(err, 6)}"
    return None


def _better_than_jordan(steps: Steps, source: Source) -> str | None:
    """You's six steps are more accurate than Jordan's quintic applied six times (on [1e-3, 1])."""
    mine = _worst(steps)
    jordan = _worst([tuple(SOURCES["muon"].source.printed[0])] * len(steps))
    if not mine < jordan:
        return (f"stated: more accurate than Jordan's quintic; recomputed max |1 - p(σ)| on [{CHECK_LOWER}, 1] "
                f"after {len(steps)} steps: {mpmath.nstr(mine, 6)} against Jordan's {mpmath.nstr(jordan, 6)}")
    return None


def _cesista_constraints(steps: Steps, source: Source) -> str | None:
    """Cesista's stated design constraints: each step's right fixed point lies above the previous image's
    peak, no step crosses the x-axis, the attractor basins ``[1 − l_t, 1 + r_t]`` shrink, four decimals."""
    images = _images(steps)
    peak = mpmath.mpf(1)
    basins = []
    for t, (step, (low, high)) in enumerate(zip(steps, images, strict=True), start=1):
        fixed = _fixed_points(step)
        if len(fixed) != 2:
            return f"step {t}: p(x) = x has {len(fixed)} positive fixed points, the design has two (1 - l, 1 + r)"
        if not peak < fixed[1]:
            return (f"step {t}: stated 'the peak of the previous iteration must be less than the right fixed point', "
                    f"but the peak {mpmath.nstr(peak, 8)} >= the right fixed point {mpmath.nstr(fixed[1], 8)}")
        if not low > 0:
            return f"step {t}: stated 'must not cross the x-axis', but the image of [{CHECK_LOWER}, 1] reaches {low}"
        basins.append((1 - fixed[0], fixed[1] - 1))
        peak = high
    for t in range(1, len(basins)):
        if not (basins[t][0] <= basins[t - 1][0] and basins[t][1] <= basins[t - 1][1]):
            before, after = (tuple(mpmath.nstr(v, 6) for v in basins[k]) for k in (t - 1, t))
            return (f"step {t + 1}: stated 'the attractor basins grow smaller at each step', but (l, r) goes from "
                    f"{before} to {after}")
    for step in source.printed:
        for c in step:
            if len(c.split(".")[1]) != 4:
                return f"stated: coefficients with four decimals (the tool's DEFAULT_PRECISION = 4), printed {c}"
    return None


def _digits_agree(rel: Mapping[int, str], default: str) -> Callable[[Steps, Source], str | None]:
    """The computed steps agree with the printed ones to relative ``rel[step]`` (``default`` otherwise).

    The printed digits are float64 values computed by the sources' own float64 programs, so agreement is
    to about 16 digits, not exactly; the recipe's *arguments* are what is compared exactly."""
    def check(steps: Steps, source: Source) -> str | None:
        if len(steps) != len(source.printed):
            return f"computes {len(steps)} steps, its source prints {len(source.printed)}"
        for t, (mine, printed) in enumerate(zip(steps, source.printed, strict=True), start=1):
            bound = mpmath.mpf(rel.get(t, default))
            for j, (c, p) in enumerate(zip(mine, printed, strict=True)):
                diff = abs(mpmath.mpf(c) - mpmath.mpf(p)) / abs(mpmath.mpf(p))
                if diff > bound:
                    return (f"step {t} coefficient c_{j}: computed {mpmath.nstr(mpmath.mpf(c), 17)}, its source prints "
                            f"{p} (relative difference {mpmath.nstr(diff, 3)} > {mpmath.nstr(bound, 1)})")
        return None
    return check


def _rounds_to(decimals: int) -> Callable[[Steps, Source], str | None]:
    """Every computed coefficient, rounded half-even to ``decimals`` places, equals the printed digits."""
    def check(steps: Steps, source: Source) -> str | None:
        if len(steps) != len(source.printed):
            return f"computes {len(steps)} steps, its source prints {len(source.printed)}"
        for t, (mine, printed) in enumerate(zip(steps, source.printed, strict=True), start=1):
            for j, (c, p) in enumerate(zip(mine, printed, strict=True)):
                if round(exact(c), decimals) != exact(p):
                    rounded = float(round(exact(c), decimals))
                    return f"step {t} coefficient c_{j}: computed {c[:14]} rounds to {rounded}, its source prints {p}"
        return None
    return check


def _recomputed(arguments: Mapping[str, Any], rel: str) -> Callable[[Steps, Source], str | None]:
    """The shipped literal steps are what the stated greedy minimax computes, to relative ``rel``."""
    def check(steps: Steps, source: Source) -> str | None:
        doc = greedy_schedule(**arguments)
        return _digits_agree({}, rel)(tuple(tuple(s) for s in doc.steps), source)
    return check


_JORDAN = ("Jordan et al. 2024, public code github.com/KellerJordan/Muon, muon.py, zeropower_via_newtonschulz5: "
           "'a, b, c = (3.4445, -4.7750, 2.0315)', applied ns_steps = 5 times (muon_update's default)")
_AMSEL = "Amsel, Persson, Musco, Gower 2025, The Polar Express, arXiv:2505.16932 (v3)"
_PE_PRINTED = (
    ("8.28721201814563", "-23.595886519098837", "17.300387312530933"),
    ("4.107059111542203", "-2.9478499167379106", "0.5448431082926601"),
    ("3.9486908534822946", "-2.908902115962949", "0.5518191394370137"),
    ("3.3184196573706015", "-2.488488024314874", "0.51004894012372"),
    ("2.300652019954817", "-1.6689039845747493", "0.4188073119525673"),
    ("1.891301407787398", "-1.2679958271945868", "0.37680408948524835"),
    ("1.8750014808534479", "-1.2500016453999487", "0.3750001645474248"),
    ("1.875", "-1.25", "0.375"),
)

def _gram_restart_holds(steps: Steps, source: Source) -> str | None:
    """The stated stability of one restart after iteration 2 in float16, as this project's restart model
    certifies it (:mod:`coeffsearch.restarts`)."""
    found = restarts.evaluate("gram-polar-express", steps, registry.GRAM_PE_RESTARTS,
                              Model("float16", DEFAULT_GROWTH, CHECK_LOWER))
    if found.certificate is None:
        return f"the restart after iteration 2 is not certified in float16: {found.reason}"
    return None


SOURCES: dict[str, Provenance] = {p.name: p for p in (
    Provenance("gram-polar-express", Source(
        "Zhang, Amsel, Chen, Dao 2026, Gram Newton-Schulz: github.com/Dao-AILab/gram-newton-schulz, README and "
        "gram_newton_schulz/gram_newton_schulz.py (default restart [2], input cast to float16); the coefficients "
        "as printed in github.com/NoahAmsel/gram-newton-schulz, gram_newton_schulz/coefficients.py "
        "(_unmodified_polar_express_coefficients, safety_factor = 1.05)", _PE_PRINTED[:5],
        "each tuple (a, b, c) stored as the float64 values a/1.05, b/1.05**3, c/1.05**5", safety="1.05",
        lower="1e-3", note="the five tuples are Polar Express Algorithm 1's first five; the safety factor is "
                           "divided in as the source's code does, in float64"), Claim(
        "README: 'For 5 steps of Newton-Schulz, we recommend num-restarts = 1 ... while maintaining numerical "
        "stability', the default being a restart after iteration 2 in float16: certified here in float16 under "
        "this project's restart model", _gram_restart_holds)),
    Provenance("muon", Source(_JORDAN, (("3.4445", "-4.7750", "2.0315"),), "as printed", repeat=5), Claim(
        f"{_AMSEL}, §1.2: Jordan's iteration 'does not converge to polar(M). Instead, it plateaus at an error "
        f"of ≈ 0.3'", _plateau)),
    Provenance("cubic", Source(
        f"{_AMSEL}, §1.2, eq. (2): Newton–Schulz applies p(x) = 3/2 x - 1/2 x^3 to each singular value "
        "(the classical iteration; Higham, Functions of Matrices, 2008, ch. 8)", (("3/2", "-1/2"),),
        "p/q as an exact decimal", repeat=12,
        note="the step count (12) is this project's choice, not a published one"), Claim(
        f"{_AMSEL}, §1.2: the scalar iteration converges to sign(x0) for |x0| <= 1, super-exponentially near "
        "1: p(1) = 1 and p'(1) = 0", _fixes_one(1, "stated p(1) = 1, p'(1) = 0"))),
    Provenance("quintic", Source(
        f"{_AMSEL}, §1.2: 'the degree-5 polynomial p(x) = (15x - 10x^3 + 3x^5)/8 converges even faster'; also "
        "the last tuple of Algorithm 1, (1.875, -1.25, 0.375)", (("15/8", "-10/8", "3/8"),),
        "p/q as an exact decimal", repeat=8,
        note="the step count (8) is this project's choice, not a published one"), Claim(
        f"{_AMSEL}, §1.2: converges faster than the cubic: p(1) = 1 and p'(1) = p''(1) = 0",
        _fixes_one(2, "stated p(1) = 1, p'(1) = p''(1) = 0"))),
    Provenance("polar-express-5", Source(
        "modded-nanogpt (github.com/KellerJordan/modded-nanogpt), train_gpt.py, polar_express_coeffs, commented "
        "'Computed for num_iters=5, safety_factor=2e-2, cushion=2', after Amsel et al. 2025", (
            ("8.156554524902461", "-22.48329292557795", "15.878769915207462"),
            ("4.042929935166739", "-2.808917465908714", "0.5000178451051316"),
            ("3.8916678022926607", "-2.772484153217685", "0.5060648178503393"),
            ("3.285753657755655", "-2.3681294933425376", "0.46449024233003106"),
            ("2.3465413258596377", "-1.7097828382687081", "0.42323551169305323")),
        "as printed (the safety factor is already divided into every step but the last)", lower="1e-3",
        note="'cushion=2' is read as 2 %: greedy_schedule(l=1e-3, cushion=0.02, safety=0.02) reproduces the digits"),
        Claim("computed by the greedy Polar Express minimax for l = 1e-3, 5 steps, cushion 2 %, safety factor "
              "1 + 2e-2: recomputed here, the digits agree to relative 1e-13",
              _recomputed({"lower": "1e-3", "steps": 5, "cushion": "0.02", "safety": "0.02"}, "1e-13"))),
    Provenance("polar-express", Source(
        f"{_AMSEL}, Appendix code optimal_composition(l, num_iters, cushion=0.02407327424182761) with l = 1e-3 "
        "(u = 1), and Algorithm 1, coeffs_list: all 8 tuples printed in full (float64 digits; 'subsequent coeffs "
        "equal this numerically' after the 8th)", _PE_PRINTED,
        "recipe: greedy_schedule(lower=1e-3, steps=8, cushion=0.02407327424182761), no safety factor (Algorithm 1 "
        "divides coefficient j of every tuple but the last by 1.01^(2j+1) at run time; the registry stores the "
        "undivided tuples)", arguments={"lower": "1e-3", "steps": 8, "cushion": "0.02407327424182761"},
        lower="1e-3"), Claim(
        "the recipe reproduces Algorithm 1's 8 printed tuples (float64 digits): to relative 1e-14, and 1e-10 for "
        "tuple 7, which the paper's float64 Remez computed on an interval of relative width about 1e-6",
        _digits_agree({7: "1e-10"}, "1e-14"))),
    Provenance("cans", Source(
        "code, not a paper: NVIDIA-NeMo/Emerging-Optimizers, emerging_optimizers/orthogonalized_optimizers/"
        "muon_utils.py, _COEFFICIENT_SETS['cans']: the 5 tuples to 4 decimals, credited there to the CANS paper "
        "and github.com/GrishKate/accelerating_orthogonalization, polynomials.py", (
            ("8.4703", "-25.1081", "18.6293"), ("4.1828", "-3.1087", "0.5806"), ("3.9619", "-2.9541", "0.5630"),
            ("3.2866", "-2.4647", "0.5074"), ("2.2737", "-1.6447", "0.4162")),
        "recipe: greedy_schedule(lower=1e-3, steps=5), no cushion or safety factor",
        arguments={"lower": "1e-3", "steps": 5}, lower="1e-3",
        note="the digits are taken from NeMo's code; the CANS paper's own table was not reached, so it is not "
             "cited for them, and l = 1e-3 with no cushion or safety factor is this project's reading under which "
             "NeMo's 4-decimal tuples are reproduced, not a setting read from the paper",
        unreached="Grishina, Smirnov, Rakhuba 2025, CANS (the paper's coefficient table)"), Claim(
        "each computed coefficient, rounded to 4 decimals, is the printed one", _rounds_to(4))),
    Provenance("you", Source(
        "You Jiacheng 2025, x.com/YouJiacheng/status/1893704552689303901 and gist YouJiacheng/"
        "393c90cbdc23b09d5688815ba382288b, as shipped by modula (github.com/modula-systems/modula, "
        "orthogonalize: abc_list, 'six step Newton-Schulz by @YouJiacheng')", (
            ("3955/1024", "-8306/1024", "5008/1024"), ("3735/1024", "-6681/1024", "3463/1024"),
            ("3799/1024", "-6499/1024", "3211/1024"), ("4019/1024", "-6385/1024", "2906/1024"),
            ("2677/1024", "-3029/1024", "1162/1024"), ("2172/1024", "-1833/1024", "682/1024")),
        "p/1024 as an exact decimal"), Claim(
        f"{_AMSEL}, §1.2: You's six polynomial updates achieve 'better accuracy than Jordan's but still fail to "
        "converge': recomputed here on [1e-3, 1] against Jordan's quintic applied six times", _better_than_jordan)),
    Provenance("cesista", Source(
        "Cesista 2025, 'Squeezing 1-2% Efficiency Gains Out of Muon by Optimizing the Newton-Schulz Coefficients' "
        "(leloykun.github.io/ponder/muon-opt-coeffs); digits from his modded-nanogpt GPT-2-medium record, "
        "records/track_2_medium/2025-02-14_GPT2MediumOptCoeffs/1baa66b2-bff7-4850-aced-d63885ffb4b6.txt, "
        "zeropower_via_newtonschulz5", (
            ("4.0848", "-6.8946", "2.9270"), ("3.9505", "-6.3029", "2.6377"), ("3.7418", "-5.5913", "2.3037"),
            ("2.8769", "-3.1427", "1.2046"), ("2.8366", "-3.0525", "1.2012")), "as printed",
        note="the same digits are optax.contrib.muon's 'dion' preset, and Dao-AILab/gram-newton-schulz credits them "
             "to x.com/YouJiacheng/status/1905861218138804534"), Claim(
        "Cesista 2025 (the blog, and its tool KellerJordan/Muon optimize_coeffs.py): 'the peak of the previous "
        "iteration must be less than the right fixed point of the current iteration', 'the through of the current "
        "iteration must not cross the x-axis', 'the attractor basins grow smaller at each step', coefficients with "
        "4 decimals", _cesista_constraints)),
)}


def _description_mismatches(schedule: Schedule, src: Source) -> list[str]:
    """The registry's description against the record: a recipe that reproduces a printed table says it
    reproduces all of it ("all N"), and a credited work that was not reached is said to be not reached
    rather than cited."""
    out, text = [], " ".join(schedule.source.split())
    where = f"schedule {schedule.name!r}"
    if src.arguments is not None and src.printed and f"all {len(src.printed)}" not in text:
        out.append(f"{where}: its description must say that it reproduces all {len(src.printed)} printed tuples "
                   f"of its source (got {text[:100]!r} …)")
    if src.unreached and "not reached" not in text:
        out.append(f"{where}: its description must say that {src.unreached} was not reached (the digits come from "
                   f"{src.citation[:60]} …), not cite it")
    return out


def mismatches(schedule: Schedule) -> list[str]:
    """(a): the shipped numbers against the printed ones, exactly; one line per difference, each naming the
    schedule and the coefficient (or recipe argument). A schedule with no record is one line."""
    record = SOURCES.get(schedule.name)
    if record is None:
        return [f"schedule {schedule.name!r} has no provenance record (coeffsearch.provenance.SOURCES): "
                f"add its source, the digits as printed and a property the source states"]
    src, out = record.source, []
    where = f"schedule {schedule.name!r}"
    out += _description_mismatches(schedule, src)
    if src.lower is not None and (schedule.lower is None or exact(str(schedule.lower)) != exact(src.lower)):
        out.append(f"{where}: design lower bound {schedule.lower} differs from its source's {src.lower}")
    if src.arguments is not None:
        if schedule.recipe is None or schedule.recipe.function is not greedy_schedule:
            return [*out, f"{where}: its source publishes a greedy-minimax recipe, the registry ships "
                          f"{'literal steps' if schedule.recipe is None else schedule.recipe.description}"]
        args = dict(schedule.recipe.arguments)
        for key in sorted(set(args) | set(src.arguments)):
            mine, printed = args.get(key), src.arguments.get(key)
            if mine is None or printed is None or exact(str(mine)) != exact(str(printed)):
                out.append(f"{where}: recipe argument {key} = {mine} differs from its source's {printed} "
                           f"({src.citation[:80]} …)")
        return out
    if schedule.published is None:
        return [*out, f"{where}: its source prints literal steps, the registry ships a recipe"]
    expected, shipped = src.expected(), schedule.published
    if len(shipped) != len(expected):
        out.append(f"{where}: {len(shipped)} steps shipped, its source gives {len(expected)}")
    for t, (mine, printed) in enumerate(zip(shipped, expected, strict=False), start=1):
        if len(mine) != len(printed):
            out.append(f"{where}: step {t} has {len(mine)} coefficients, its source prints {len(printed)}")
        for j, (c, p) in enumerate(zip(mine, printed, strict=False)):
            if exact(c) != p:
                shown = src.printed[(t - 1) % len(src.printed)][j]
                out.append(f"{where}: step {t} coefficient c_{j} = {c} differs from its source's {shown} "
                           f"({src.transform}; {src.citation[:80]} …)")
    return out


def claim_failure(schedule: Schedule) -> str | None:
    """(b): the stated property recomputed from the shipped (or computed) steps; ``None`` if it holds."""
    record = SOURCES[schedule.name]
    reason = record.claim.check(schedule.steps, record.source)
    return None if reason is None else f"schedule {schedule.name!r}: {reason}"


def check(schedule: Schedule) -> list[str]:
    """Every provenance failure of ``schedule``: the exact digit and argument comparison, then the claim.

    Examples:
      >>> from coeffsearch import Schedule, get
      >>> from coeffsearch.provenance import check
      >>> check(get("muon"))
      []
      >>> check(Schedule("muon", [["3.4445", "-4.7751", "2.0315"]] * 5, "a typo"))[0][:72]
      "schedule 'muon': step 1 coefficient c_1 = -4.7751 differs from its sourc"
    """
    out = mismatches(schedule)
    if out or schedule.name not in SOURCES:
        return out
    reason = claim_failure(schedule)
    return [] if reason is None else [reason]


def check_registry() -> list[str]:
    """:func:`check` for every registered schedule (the recipes are computed, about a second in all)."""
    return [line for name in registry.names() for line in check(registry.get(name))]
