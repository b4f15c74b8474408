"""A NaN or Inf in any input of any emitted function makes the whole result NaN, and is named.

The emitted updates check only their outputs (scanning every input cost a pass over all of them
on the hot path). That is safe only if a non-finite input always reaches the outputs. Here NaN,
+Inf and -Inf are planted in every array argument of every public function of every shipped
module, at a random entry, with both msign methods (Newton–Schulz undamped, SVD damped; the adapters
with Newton–Schulz): called directly the function must raise one
line naming the argument; under ``jax.jit`` every output must be entirely NaN. A stored-layout
adapter (``gqa_qk``, ``hybrid_ov``, ``joint_qk``) calls one function per side, so there each
output is entirely NaN or entirely finite (a side that does not read the argument keeps its
correct update), and at least one is NaN. The planted
mistake is a routine that zeroes non-finite entries (as a "safe" normalisation might): the same
check reports the silent finite update.

The same compiled program (eps and damping traced) holds a negative eps or damping: under an outer jit
nothing can be refused, so every output must be NaN; called directly it is refused naming the scalar.
Planted: a function that takes the absolute value of its scalars.
"""

import importlib
import inspect
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from derivations import registry
from derivations.regenerate import shipped
from tests.emitted_inputs import example_call

RULES = shipped()

FUNCTIONS = sorted({name: (rule, name) for rule in reversed(RULES)  # a name in two modules: one copy
                    for name in importlib.import_module(f"numerics.emitted.{rule}").__all__}.values())
BAD = (np.nan, np.inf, -np.inf)


def _outputs(result):
    return result if isinstance(result, tuple) else (result,)


TRACED = ("eps", "damping")


def scalars_traced(fn, kwargs):
    """``fn`` under ``jax.jit`` with ``eps`` and ``damping`` traced (one compilation for every value of them) and
    the other keyword arguments of ``kwargs`` fixed."""
    fixed = {k: v for k, v in kwargs.items() if k not in TRACED}
    return jax.jit(lambda *a, **s: fn(*a, **fixed, **s))


def traced_scalars(kwargs):
    return {k: v for k, v in kwargs.items() if k in TRACED}


def bad_scalar_failures(fn, jitted, args, kwargs):
    """Under an outer jit nothing can be refused: a negative damping (or eps) must make every output NaN; called
    directly the function must refuse it naming it. Every scalar for which that fails."""
    failures = []
    for key in TRACED:
        if key not in kwargs:
            continue
        outs = _outputs(jitted(*args, **{**traced_scalars(kwargs), key: -0.1}))
        if not all(bool(jnp.all(jnp.isnan(o))) for o in outs):
            failures.append(f"{key} = -0.1: under jit an output is not all NaN")
        try:
            fn(*args, **{**kwargs, key: -0.1})
            failures.append(f"{key} = -0.1: no error")
        except ValueError as e:
            if key not in str(e):
                failures.append(f"{key} = -0.1: the error does not name it: {e}")
    return failures


def propagation_failures(fn, args, kwargs, seed, jitted=None):
    """Every (argument, value) for which ``fn`` stays finite or silent; empty when all propagate."""
    rng = np.random.default_rng(seed)
    names = list(inspect.signature(fn).parameters)
    adapter = "_layout(" in inspect.getsource(fn)  # raises from the per-side function it calls
    jitted = jitted or scalars_traced(fn, kwargs)
    failures = []
    for i, arg in enumerate(args):
        for value in BAD:
            bad = np.array(arg, dtype=np.float64)
            bad[tuple(rng.integers(0, n) for n in bad.shape)] = value
            call = [bad if j == i else a for j, a in enumerate(args)]
            case = f"{names[i]} = {value}"
            try:
                fn(*call, **kwargs)
                failures.append(f"{case}: no error")
            except ValueError as e:
                msg = str(e)
                if "contains NaN or Inf" not in msg or (not adapter and f"{names[i]} contains" not in msg):
                    failures.append(f"{case}: wrong message {msg!r}")
            outs = _outputs(jitted(*call, **traced_scalars(kwargs)))
            nan = [bool(jnp.all(jnp.isnan(out))) for out in outs]
            finite = [bool(jnp.all(jnp.isfinite(out))) for out in outs]
            for k, out in enumerate(outs):
                if not (nan[k] or (adapter and finite[k])):
                    failures.append(f"{case}: under jit output {k} has {int(jnp.sum(~jnp.isnan(out)))} non-NaN entries")
            if not any(nan):
                failures.append(f"{case}: under jit no output is NaN")
    return failures


@pytest.mark.parametrize("rule,name", FUNCTIONS)
def test_a_nonfinite_input_or_a_negative_scalar_makes_the_whole_result_nan(rule, name):
    """Each function once under jit with its scalars traced: NaN/Inf in every argument, then eps and damping
    negative (the same compiled program: a bad scalar cannot be refused under an outer jit, it must give NaN)."""
    fn = getattr(importlib.import_module(f"numerics.emitted.{rule}"), name)
    args, kwargs = example_call(np.random.default_rng(0), name, rule=rule)
    positive = any(f.positive_damping for f in registry.rule_module(rule).functions() if f.name == name)
    cases = [(None, 0.0)]
    if "msign" in inspect.signature(fn).parameters:  # an adapter's SVD path is its per-side functions'
        cases = [("newton_schulz", 0.0)] + ([] if "_layout(" in inspect.getsource(fn) else [("svd", 0.1)])
    for method, damping in cases:
        if positive:
            damping = 0.1  # the rule declares it needs damping > 0 (the Sylvester rule)
        kw = {**kwargs, "damping": damping, **({"msign": method} if method else {})}
        jitted = scalars_traced(fn, kw)
        assert propagation_failures(fn, args, kw, zlib.crc32(name.encode()), jitted) == [], (name, kw)
        if method in (None, "newton_schulz"):  # the same compiled program: eps or damping negative
            assert bad_scalar_failures(fn, jitted, args, kw) == [], (name, kw)

def test_planted_masking_routine_is_caught():
    """A halfsplit whose routine zeroes non-finite entries returns a finite (wrong) update: caught."""
    from numerics.emitted import halfsplit

    def masked(*arrays, **kwargs):
        return halfsplit.halfsplit_qk(*(jnp.nan_to_num(jnp.asarray(a), posinf=0.0, neginf=0.0) for a in arrays),
                                      **kwargs)
    masked.__signature__ = inspect.signature(halfsplit.halfsplit_qk)
    args, kwargs = example_call(np.random.default_rng(0), "halfsplit_qk")
    failures = propagation_failures(masked, args, kwargs, seed=0)
    assert len(failures) == 4 * len(BAD) * 4  # no error, two finite outputs, none NaN: every argument and value


def test_planted_scalar_that_is_made_valid_is_caught():
    """A halfsplit that takes |eps| and |damping| returns a finite update for negative ones, and no error."""
    from numerics.emitted import halfsplit

    def absolute(*arrays, **kwargs):
        return halfsplit.halfsplit_qk(*arrays, **{k: abs(v) if k in TRACED else v for k, v in kwargs.items()})
    absolute.__signature__ = inspect.signature(halfsplit.halfsplit_qk)
    args, kwargs = example_call(np.random.default_rng(0), "halfsplit_qk")
    kwargs = {**kwargs, "damping": 0.0}
    failures = bad_scalar_failures(absolute, scalars_traced(absolute, kwargs), args, kwargs)
    assert len(failures) == 4 and all("not all NaN" in f or "no error" in f for f in failures), failures
