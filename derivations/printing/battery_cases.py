"""The cases of the hostile battery for one subject and one dtype, each with what it must give.

Every case is derived from the subject's declaration (:mod:`derivations.printing.battery_subjects`): its
arguments and their roles, its dimensions, its example draw and its reference. The promises they guard and how
each is judged: :mod:`derivations.printing.battery`.

The reference of a scaled case is exact. Scaling by ``2**k`` is exact in float64, so the inputs as passed
(rounded to the dtype, perhaps into its subnormals) scaled back by ``2**-k`` are the inputs of an unscaled call
bit for bit; an output homogeneous of degree ``p`` in what was scaled (:func:`degrees`, probed on the reference
at ``×2`` and ``×8``) is then ``2**(k·p)`` times the reference there, kept as ``(base, shift)`` so that no power
of two is ever formed. An output that is not homogeneous is compared with the formulas at 50 digits (mpmath's
exponent range is unbounded); where the formulas do not cover the call (a damping the rule does not name), with
the other target in float64 (the JAX function), or only held to be finite or clearly refused (the NumPy one).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import jax
import numpy as np

from derivations.printing.battery_subjects import Subject

#: the promises the cases guard, in the order they run
PROMISES = ("value", "scale", "nonfinite", "partner", "dtype", "empty")
#: the input dtypes each target takes (the NumPy reference computes in float64 whatever it is given)
DTYPES = {"jax": ("float64", "float32", "bfloat16", "float16"), "numpy": ("float64", "float32", "float16"),
          "torch": ("float64", "float32", "bfloat16", "float16")}
#: condition number of the ill-conditioned partner per dtype (16-bit: the msign argument is rounded to the dtype)
CONDITION = {"float64": 1e6, "float32": 1e3, "bfloat16": 10.0, "float16": 10.0}
#: the damping of the damping cases where the example has none
BASE_DAMPING = 0.05
#: the values planted in the non-finite cases
NONFINITE = (np.nan, np.inf, -np.inf)


@dataclass
class Case:
    """A call and what it must give: ``expect()`` → ``(want, shift)`` (output ``k`` is ``want[k] ·
    2**shift[k]``; ``None``: only finite), or a refusal naming one of ``names``, or outputs of the shapes
    ``shapes()``; ``kappa``: the partners' condition number (for the tolerance)."""

    promise: str
    label: str
    args: list
    kwargs: dict
    expect: Callable | None = None
    names: tuple = ()
    kappa: float = 10.0
    shapes: Callable | None = None
    other_refusal: Callable | None = None  # the other target's refusal of the same call (or None)


def ladder(dtype: str) -> tuple[int, ...]:
    """The exponents ``k`` of the scale ladder ``2**±k`` in ``dtype``: float64 2^100 ≈ 1.3e30, 2^498 ≈ 8e149,
    2^997 ≈ 1.3e300; another dtype 10 %, 50 % and 97 % of its largest exponent."""
    if dtype == "float64":
        return (100, 498, 997)
    top = int(jax.numpy.finfo(dtype).maxexp)
    return tuple(max(1, int(f * top)) for f in (0.1, 0.5, 0.97))


def as_dtype(x, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype`` (bfloat16: JAX's), overflowing to ±Inf."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        return np.asarray(jax.numpy.asarray(x, dtype=dtype)) if dtype == "bfloat16" else x.astype(dtype)


def f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def scaled(subject: Subject, args: list, kwargs: dict, group: str, power: int) -> tuple[list, dict]:
    """``args, kwargs`` with ``group`` (an argument, ``eps``, ``damping`` or ``*arrays``) times ``2**power``,
    exactly in float64 (with ``*arrays`` a nonzero damping times ``4**power``: it is a square of their scale)."""
    members = subject.arguments if group == "*arrays" else [group]
    out = [np.ldexp(f64(a), power) if n in members else f64(a) for n, a in zip(subject.arguments, args, strict=True)]
    kwargs = dict(kwargs)
    if group in kwargs:
        kwargs[group] = float(np.ldexp(kwargs[group], power))
    if group == "*arrays" and float(kwargs.get("damping", 0.0)):
        with np.errstate(over="ignore"):
            kwargs["damping"] = float(np.ldexp(kwargs["damping"], 2 * power))
    return out, kwargs


def degrees(subject: Subject, args: list, kwargs: dict, group: str, reference: Callable) -> list | None:
    """Each output's homogeneity degree in ``group`` (a multiple of 1/4), probed on ``reference`` at ``×2`` and
    ``×8``; ``None`` when an output is not homogeneous there (or zero, or the reference does not cover it)."""
    base = reference(args, kwargs)
    probes = [reference(*scaled(subject, args, kwargs, group, power)) for power in (1, 3)]
    if base is None or any(p is None for p in probes):
        return None
    out = []
    for k, b in enumerate(base):
        top = float(np.max(np.abs(b), initial=0.0))
        if not top or not np.isfinite(top):
            return None
        found = set()
        for power, probe in zip((1, 3), probes, strict=True):
            ratio = float(np.max(np.abs(probe[k]))) / top
            p = round(4 * np.log2(ratio) / power) / 4 if ratio > 0 and np.isfinite(ratio) else None
            if p is None or np.max(np.abs(probe[k] - b * 2.0 ** (p * power))) > 1e-9 * top * 2.0 ** (p * power):
                return None
            found.add(p)
        if len(found) != 1:
            return None
        out.append(found.pop())
    return out


def float64_call(subject: Subject | None, refusal: bool = False) -> Callable | None:
    """``subject``'s function in float64 on drawn arguments (msign by SVD), ``None`` on a refusal (``refusal``:
    the refusal's message, ``None`` on a result)."""
    if subject is None:
        return None
    extra = {"msign": "svd"} if "msign" in subject.accepts else {}

    def value(args, kwargs):
        try:
            with np.errstate(all="ignore"):
                got = subject.call(*subject.to_target([f64(a) for a in args]), **{**kwargs, **extra})
        except ValueError as exc:
            return str(exc) if refusal else None
        return None if refusal else [f64(g) for g in (got if isinstance(got, tuple) else (got,))]
    return value


def _first(args: list, batch: tuple) -> list:
    return [a[(0,) * len(batch)] for a in args]


class _Builder:
    """The cases of one subject in one dtype (see :func:`cases`)."""

    def __init__(self, subject: Subject, dtype: str, seed: int, batch: tuple, pair: Subject | None, exact: bool):
        self.s, self.dtype, self.batch, self.exact = subject, dtype, batch, exact
        self.rng = np.random.default_rng([seed, zlib.crc32(f"{subject.rule}.{subject.name}.{dtype}".encode())])
        drawn, self.kwargs = subject.draw(self.rng, batch)
        self.base = [as_dtype(a, dtype) for a in drawn]
        other = float64_call(pair) or (float64_call(subject) if subject.target == "numpy" else None)
        self.other = other  # the cross-target float64 value (JAX: the NumPy function; NumPy: the JAX one)
        self.other_refusal = float64_call(pair, refusal=True)
        self.own64 = float64_call(subject)

    def reference(self, args, kwargs):
        """The formulas in float64, else the emitted function itself in float64 (the NumPy one where it exists)."""
        got = self.s.reference(args, kwargs)
        if got is not None:
            return got
        return (self.other if self.s.target == "jax" and self.other else self.own64)(args, kwargs)

    def value(self) -> Iterator[Case]:
        base, kw = self.base, self.kwargs
        yield Case("value", f"example, batch {self.batch}", base, kw,
                   lambda: _unshifted(self.s.reference([f64(a) for a in base], kw)))

    def scale(self) -> Iterator[Case]:
        groups = list(self.s.arguments) + [g for g in ("eps", "damping") if g in self.s.accepts] + ["*arrays"]
        for group in groups:
            kw = dict(self.kwargs)
            if group == "damping":
                kw["damping"] = float(kw.get("damping") or BASE_DAMPING)
            probe: dict = {}
            for k in ladder(self.dtype):
                for power in (k, -k):
                    yield self._scaled_case(group, power, kw, probe)

    def _scaled_case(self, group: str, power: int, kw: dict, probe: dict) -> Case:
        passed, kw_s = scaled(self.s, self.base, kw, group, power)
        actual = [as_dtype(a, self.dtype) for a in passed]
        label = f"{group} x 2^{power}"
        lost = [n for n, a in zip(self.s.arguments, actual, strict=True) if not np.all(np.isfinite(a))]
        if not np.isfinite(kw_s.get("damping", 0.0)):  # the damping beyond float64: refused naming it
            return Case("scale", label + " (damping Inf)", actual, kw_s, names=("damping",))
        if lost:  # beyond the dtype's range: a non-finite argument
            return Case("scale", label + " (Inf in the dtype)", actual, kw_s, names=tuple(f"{n} contains NaN or Inf"
                                                                                          for n in lost))

        def expect():
            if "degrees" not in probe:
                probe["degrees"] = degrees(self.s, _first([f64(a) for a in self.base], self.batch), kw, group,
                                           self.reference)
            p = probe["degrees"]
            if p is not None:
                back, kw_b = scaled(self.s, actual, kw_s, group, -power)
                want = self.reference(back, kw_b)
                return None if want is None else (want, tuple(q * power for q in p))
            want = None
            if self.exact:
                try:
                    want = self.s.reference([f64(a) for a in actual], kw_s, digits=True)
                except (ArithmeticError, ValueError):  # singular at 50 digits: the other target instead
                    want = None
            if want is None and self.other:
                want = self.other(actual, kw_s)
            return _unshifted(want)
        other = (lambda: self.other_refusal(actual, kw_s)) if self.other_refusal else None
        return Case("scale", label, actual, kw_s, expect, other_refusal=other)

    def nonfinite(self) -> Iterator[Case]:
        for i, name in enumerate(self.s.arguments):
            for value in NONFINITE:
                bad = [a.copy() for a in self.base]
                bad[i][tuple(self.rng.integers(0, n) for n in bad[i].shape)] = value
                yield Case("nonfinite", f"{name} = {value}", bad, self.kwargs, names=(f"{name} contains NaN or Inf",))

    def partner(self) -> Iterator[Case]:
        kappa = CONDITION[self.dtype]
        for name in self.s.partners:
            i = self.s.arguments.index(name)
            for label, change, k in (("rank-deficient", _rank_deficient, 10.0),
                                     (f"condition number {kappa:.0e}", _conditioned(self.rng, kappa), kappa)):
                args = list(self.base)
                args[i] = as_dtype(self._per_matrix(name, f64(args[i]), change), self.dtype)
                yield Case("partner", f"{name} {label}", args, self.kwargs,
                           self._partner_expect(args, label == "rank-deficient"), kappa=k)

    def _cross(self, args: list) -> Callable:
        return lambda: _unshifted(self.s.reference([f64(a) for a in args], self.kwargs))

    def _partner_expect(self, args: list, deficient: bool) -> Callable:
        def expect():
            if deficient:  # the minimum-norm update: the other target's (the formulas assume full rank)
                return _unshifted(self.other(args, self.kwargs)) if self.other else None
            # at 50 digits: the formulas in float64 go through Gram matrices (error u κ²)
            want = self.s.reference([f64(a) for a in args], self.kwargs, digits=True)
            return _unshifted(want if want is not None else self.other(args, self.kwargs) if self.other else None)
        return expect

    def _per_matrix(self, name: str, x: np.ndarray, change: Callable) -> np.ndarray:
        """``change`` applied to each matrix of partner ``name`` (a block, a stored head, or the matrix)."""
        if name not in self.s.heads:
            return change(x)
        axis, width = self.s.heads[name]
        if axis == "rows":
            return np.swapaxes(self._per_matrix_columns(np.swapaxes(x, -1, -2), width, change), -1, -2)
        return self._per_matrix_columns(x, width, change)

    @staticmethod
    def _per_matrix_columns(x: np.ndarray, width: int, change: Callable) -> np.ndarray:
        heads = np.moveaxis(x.reshape(*x.shape[:-1], x.shape[-1] // width, width), -2, -3)
        return np.moveaxis(change(heads), -3, -2).reshape(x.shape)

    def dtype_cases(self) -> Iterator[Case]:
        for i, name in enumerate(self.s.arguments):
            for kind, convert in (("bool", lambda a: f64(a) > 0), ("int64", lambda a: np.round(4 * f64(a)).astype(
                    np.int64)), ("complex128", lambda a: f64(a) + 0.5j * f64(a))):
                args = list(self.base)
                args[i] = convert(args[i])
                expect = self._cross(args) if kind == "int64" else None  # whole numbers may be taken as reals
                yield Case("dtype", f"{name} as {kind}", args, self.kwargs, expect, names=(name,))
        for key in ("eps", "damping"):
            if key in self.s.accepts:
                yield Case("dtype", f"{key} = np.True_", self.base, {**self.kwargs, key: np.bool_(True)}, names=(key,))

    def empty(self) -> Iterator[Case]:
        empty = [np.zeros((0, *np.shape(a)[len(self.batch):]), dtype=a.dtype) for a in self.base]

        def shapes():
            want = self.reference([f64(a) for a in _first(self.base, self.batch)], self.kwargs)
            return None if want is None else [(0, *np.shape(w)) for w in want]
        yield Case("empty", "batch of size 0", empty, self.kwargs, shapes=shapes)
        for i, name in enumerate(self.s.arguments):
            for axis in (-1, -2):
                shape = list(np.shape(self.base[i]))
                shape[axis] = 0
                args = list(self.base)
                args[i] = np.zeros(shape, dtype=self.base[i].dtype)
                yield Case("empty", f"{name} with a 0-size axis {axis}", args, self.kwargs,
                           names=("= 0", "empty matrix"))


def _unshifted(want):
    return None if want is None else (want, (0,) * len(want))


def _rank_deficient(x: np.ndarray) -> np.ndarray:
    """Each matrix with its last column twice its first (its last row, for a wide one): rank one less, exactly
    (a doubling is exact in every dtype); a single column or row is zeroed."""
    x = x.copy()
    if x.shape[-2] >= x.shape[-1]:
        x[..., -1] = 2 * x[..., 0] if x.shape[-1] > 1 else 0.0
    else:
        x[..., -1, :] = 2 * x[..., 0, :] if x.shape[-2] > 1 else 0.0
    return x


def _conditioned(rng: np.random.Generator, kappa: float) -> Callable:
    """Each matrix with its singular values replaced by ones log-spaced from its largest to ``largest/κ``."""
    def change(x: np.ndarray) -> np.ndarray:
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        spread = np.geomspace(1.0, 1.0 / kappa, s.shape[-1])
        return (u * (s[..., :1] * spread)[..., None, :]) @ vt
    return change


def cases(subject: Subject, dtype: str, seed: int = 0, batch: tuple = (2,), pair: Subject | None = None,
          promises: tuple = PROMISES, exact: bool = True) -> Iterator[Case]:
    """Every case of ``subject`` in ``dtype`` guarding ``promises``, drawn with ``seed`` with leading axes
    ``batch``; ``pair``: the same function in the other target (the cross-target reference); ``exact``: a
    scaled output that is not homogeneous against mpmath (else against ``pair`` in float64, much cheaper)."""
    builder = _Builder(subject, dtype, seed, batch, pair, exact)
    makers = {"value": builder.value, "scale": builder.scale, "nonfinite": builder.nonfinite,
              "partner": builder.partner, "dtype": builder.dtype_cases, "empty": builder.empty}
    for promise in promises:
        yield from makers[promise]()
