"""One hostile battery over every emitted function of a rule, drawn from the rule's declaration.

For a :class:`~derivations.printing.battery_subjects.Subject` (one public function of a rule's JAX or NumPy
module) and one input dtype, :func:`run` calls the function once per case, every case of one dtype on arrays of
one shape (one XLA compilation; the empty batch is the only other shape), and :func:`judge` holds each outcome to
its promise. The cases, grouped by the promise they guard (:data:`PROMISES`):

* ``scale``: every array argument alone, ``eps``, ``damping``, and all arrays together (with the damping as the
  square of their scale) multiplied by ``2**±k`` for ``k`` in :func:`ladder` (float64: 2^±100 ≈ 1e±30,
  2^±498 ≈ 1e±150, 2^±997 ≈ 1e±300; another dtype: 10 %, 50 % and 97 % of its exponent range). The reference is
  exact: an output homogeneous of degree ``p`` in what was scaled (probed on the reference at ``×2`` and ``×8``)
  is ``2**(k·p)`` times the reference on the inputs as passed, scaled back by ``2**-k`` (exactly, in float64);
  an output that is not homogeneous is compared with the formulas evaluated at 50 digits in mpmath.
* ``value``: the example call with leading batch axes, every dimension distinct, compared with the checked
  formulas in float64 (:mod:`~derivations.printing.battery_subjects`).
* ``nonfinite``: NaN, +Inf and −Inf at one entry of each argument: a ``ValueError`` naming the argument.
* ``partner``: each partner rank-deficient (undamped: the minimum-norm update, compared with the other target
  in float64) and ill-conditioned (condition number :data:`CONDITION` of the dtype; float64 against mpmath).
* ``dtype``: each argument as bool, int64 and complex128, and a boolean ``eps``: a ``TypeError`` or
  ``ValueError`` naming the argument.
* ``empty``: a batch of size 0 gives empty outputs of the right shapes; a 0-size axis of any argument is
  refused in one line.

A result agrees when every output is finite, has the reference's shape and ``max|out − want| ≤ tol ·
max|want|`` with ``tol`` = :func:`tolerance`. A refusal is clear when it is one line of ``ValueError`` or
``TypeError`` that names what the case requires (the argument), or the documented underflow/overflow error
when the reference lies within :func:`range_margin` of the dtype's limits (or a scalar outside the dtype's
normal range is refused naming it; or the outputs, or the arguments, lie further apart than the compute dtype's
digits, so that the smaller were scaled among the subnormals that XLA flushes; or, without a reference, both
targets refuse alike).
Anything else is a finding: ``wrong`` (a silent wrong, Inf/NaN or
misshapen result), ``refused`` (a refusal of a result the dtype represents, or a message that does not name the
argument), ``traceback`` (any other exception).

``python -m derivations.hostile`` prints the battery's size per rule and target, and with ``--run`` runs it over
every registered rule (``--seed``, ``--batch``, ``--rule``), one line per finding.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from derivations.printing.battery_cases import PROMISES, Case, cases, f64
from derivations.printing.battery_subjects import Subject
from foundation.compute.output_limits import underflow_bound

#: a refusal as under- or overflow is justified when the true result is within this factor of the dtype's limit
#: (16-bit outputs: ``2**(nmant − 4)``, float16 4e-3, their range being narrow)
RANGE_MARGIN = 2.0 ** 16


def range_margin(info) -> float:
    """:data:`RANGE_MARGIN`, or ``2**(nmant − 4)`` for an output dtype of fewer digits (16-bit)."""
    return min(RANGE_MARGIN, 2.0 ** (int(info.nmant) - 4))


@dataclass(frozen=True)
class Finding:
    """One case's outcome: ``status`` ``"ok"`` or what went wrong, and a one-line ``detail``."""

    subject: str
    dtype: str
    promise: str
    label: str
    status: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.subject} [{self.dtype}] {self.promise}: {self.label}: {self.status} {self.detail}".rstrip()


# ---- judging ------------------------------------------------------------------------------------------------

def compute_eps(dtype: str, target: str) -> float:
    """Unit roundoff of the dtype the function computes in (float32 for 16-bit JAX inputs, float64 in NumPy)."""
    return float(np.finfo(np.float64 if target == "numpy" or dtype == "float64" else np.float32).eps)


def tolerance(dtype: str, target: str, kappa: float = 10.0) -> float:
    """Largest accepted ``max|out − want| / max|want|``: ``c · u_c · κ`` in the compute dtype ``u_c`` plus ``2 eps
    · κ`` of the output dtype (``κ``: the partners' condition number, 10 for the example draws, whose partners
    measure about 3). ``c = 256`` where the routines compute in float32 (measured up to about 160); ``c = 4096``
    in float64, where the eigendecompositions and the structured Sylvester solve of a whole rule reach more units of
    roundoff (measured: NumPy ``sylvester_qk`` with ``W_Q`` scaled by 2^64, 3,400 u at κ ≈ 3); either stays far
    inside translation validation's 1e-8. A 16-bit JAX input is computed in float32 but its msign argument is
    formed in the input dtype, so its rounding is amplified by up to ``κ`` (float16 at κ = 10: 2.0e-2; bfloat16:
    0.16; float32: 3.1e-4; float64: 9.1e-12)."""
    out_eps = float(np.finfo(np.float64).eps) if target == "numpy" else float(jax.numpy.finfo(dtype).eps)
    compute = compute_eps(dtype, target)
    c = 4096 if compute == float(np.finfo(np.float64).eps) else 256
    return c * compute * kappa + 2 * out_eps * kappa


def magnitudes(want: list, shift: tuple) -> list[float]:
    """``log2`` of each output's largest entry (``-inf`` for a zero output)."""
    return [float(np.log2(np.max(np.abs(w), initial=0.0))) + s if np.any(w) else -np.inf
            for w, s in zip(want, shift, strict=True)]


def input_magnitudes(case: Case) -> list[float]:
    """``log2`` of each nonzero array argument's largest entry."""
    tops = [float(np.max(np.abs(f64(a)), initial=0.0)) for a in case.args]
    return [float(np.log2(t)) for t in tops if t > 0 and np.isfinite(t)]


def range_justified(sizes: list, dtype: str, target: str, message: str, spread_only: bool = False) -> bool:
    """Whether an under/overflow refusal is the documented one for a result (``log2`` sizes of its outputs,
    :func:`magnitudes`) near or beyond the limits of ``dtype`` (within :func:`range_margin` of them), or whose
    outputs, or arguments (``spread_only``), lie further apart than the compute dtype's digits (one scaling
    group: :func:`foundation.compute.jax_output_checks.group_underflow`)."""
    out = np.finfo(np.float64) if target == "numpy" else jax.numpy.finfo(dtype)
    compute = np.finfo(np.float64 if target == "numpy" or dtype == "float64" else np.float32)
    margin = range_margin(out)
    low, high = np.log2(underflow_bound(out, compute) * margin), np.log2(float(out.max) / margin)
    finite = [m for m in sizes if m > -np.inf]
    if spread_only:  # arguments further apart than group_underflow admits (the smaller below the limit)
        return "underflows" in message and bool(finite) and \
            max(finite) - min(finite) > -np.log2(underflow_bound(out, compute)) - 1
    if "underflows" in message and finite and max(finite) - min(finite) > compute.nmant + 4:
        return True  # outputs of one scaling group further apart than the compute dtype's digits
    if "underflows" in message:
        return any(-np.inf < m < low for m in sizes)
    if "overflowed" in message:
        return any(m > high for m in sizes)
    return False


def _refusal(case: Case, exc: BaseException, dtype: str, target: str) -> tuple[str, str]:
    message = str(exc)
    if not isinstance(exc, (ValueError, TypeError)) or "\n" in message.strip():
        return "traceback", f"{type(exc).__name__}: {(message.splitlines() or [''])[0][:300]}"
    if case.names:
        return ("ok", "") if any(n in message for n in case.names) else ("refused", f"not naming "
                                                                          f"{case.names[0]!r}: {message[:300]}")
    if any(message.startswith(f"{prefix}{scalar}") for scalar in scaled_scalars(case.label)
           for prefix in ("", f"{message.split(':')[0]}: ")):
        return "ok", ""  # a scalar the case scaled beyond the dtype's normal range (or to 0), refused naming it
    expected = expected_value(case)
    sizes = magnitudes(*expected) if expected else []
    if range_justified(sizes, dtype, target, message) or range_justified(input_magnitudes(case), dtype, target,
                                                                          message, spread_only=True):
        return "ok", ""
    if not sizes and case.other_refusal is not None and _kind(case.other_refusal()) == _kind(message) != "":
        return "ok", "refused by both targets"
    shown = ", ".join(f"2^{m:.0f}" for m in sizes) or "no reference"
    return "refused", f"(result {shown}) {message[:300]}"


def scaled_scalars(label: str) -> tuple[str, ...]:
    """The scalars a scale case changed: ``eps`` or ``damping`` alone, or the damping with every array."""
    group = label.split(" ")[0]
    return (group,) if group in ("eps", "damping") else ("damping",) if group == "*arrays" else ()


def _kind(message: str | None) -> str:
    return next((k for k in ("underflows", "overflowed") if message and k in message), "")


def expected_value(case: Case):
    """``case.expect()``, or ``None`` where the reference itself cannot be evaluated (a system singular at 50
    digits: the case then only holds the result to be finite, or refused by both targets)."""
    try:
        return case.expect() if case.expect else None
    except (ArithmeticError, ValueError):
        return None


def judge(case: Case, result, dtype: str, target: str) -> tuple[str, str]:
    """``(status, detail)`` of ``result`` (the outputs, or the exception raised) for ``case``: ``"ok"``,
    ``"wrong"``, ``"refused"`` or ``"traceback"`` (the module's docstring)."""
    if isinstance(result, BaseException):
        return _refusal(case, result, dtype, target)
    if case.names and case.expect is None:
        return "wrong", f"returned instead of refusing ({case.names[0]!r})"
    outs = result if isinstance(result, tuple) else (result,)
    if case.shapes is not None:
        got, want = [tuple(np.shape(o)) for o in outs], case.shapes()
        return ("ok", "") if want is None or got == want else ("wrong", f"shapes {got}, want {want}")
    expected = expected_value(case)
    if not all(np.all(np.isfinite(f64(o))) for o in outs):
        return "wrong", "a NaN/Inf result without an error"
    if expected is None:
        return "ok", "unchecked"
    want, shift = expected
    if len(outs) != len(want):
        return "wrong", f"{len(outs)} outputs, want {len(want)}"
    worst = 0.0
    for o, w, s in zip(outs, want, shift, strict=True):
        o = f64(o) * 2.0 ** -s if not float(s).is_integer() else np.ldexp(f64(o), -int(s))
        if o.shape != np.shape(w):
            return "wrong", f"shape {o.shape}, want {np.shape(w)}"
        top, err = float(np.max(np.abs(w), initial=0.0)), float(np.max(np.abs(o - w), initial=0.0))
        worst = max(worst, err / top if top else (0.0 if not err else np.inf))
    tol = tolerance(dtype, target, case.kappa)
    return ("ok", f"{worst:.1e}") if worst <= tol else ("wrong", f"relative error {worst:.2e} > {tol:.1e}")


def call(subject: Subject, case: Case, extra: dict):
    """The outputs of ``subject`` on ``case``, or the exception it raised."""
    try:
        with np.errstate(all="ignore"):
            return subject.call(*subject.to_target(case.args), **{**case.kwargs, **extra})
    except Exception as exc:  # noqa: BLE001 (every exception is judged: a traceback is a finding)
        return exc


def run(subject: Subject, dtype: str, seed: int = 0, batch: tuple = (2,), pair: Subject | None = None,
        promises: tuple = PROMISES, exact: bool = True) -> list[Finding]:
    """Every case of the battery for ``subject`` in ``dtype``: one :class:`Finding` per case (every case of one
    dtype on arrays of one shape: one compilation, and one more for the empty batch); ``exact``: see
    :func:`~derivations.printing.battery_cases.cases`."""
    extra = {"msign": "svd"} if "msign" in subject.accepts else {}
    out = []
    for case in cases(subject, dtype, seed, batch, pair, promises, exact):
        try:
            status, detail = judge(case, call(subject, case, extra), dtype, subject.target)
        except Exception as exc:  # noqa: BLE001 (a reference that fails is reported, not raised)
            status, detail = "no reference", f"{type(exc).__name__}: {str(exc)[:200]}"
        out.append(Finding(subject.case_id, dtype, case.promise, case.label, status, detail))
    return out


def size(subject: Subject, dtype: str, batch: tuple = (2,), promises: tuple = PROMISES) -> int:
    """How many cases :func:`run` makes for ``subject`` in ``dtype`` (nothing is called)."""
    return sum(1 for _ in cases(subject, dtype, 0, batch, None, promises))


def pair_of(subject: Subject, subjects: list) -> Subject | None:
    """The same function in the other target (the cross-target reference), if there is one: JAX and NumPy pair with
    each other, PyTorch with NumPy (no JAX compilation for a PyTorch battery; an adapter has no NumPy pair)."""
    other = "jax" if subject.target == "numpy" else "numpy"
    return next((s for s in subjects if s.name == subject.name and s.target == other), None)
