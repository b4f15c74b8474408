"""optax's own Muon test cases, restated for Compositional Muon's optax parity preset.

Source: ``optax/contrib/_muon_test.py`` of optax 0.2.8 (``MuonTest``, 32 parameterized cases), read and
rewritten here in the project's words; nothing is copied. The preset ``compositional_muon(η, **OPTAX_PARITY)``
(``ns_coeffs="standard"``, ``roles="optax"``) claims ``optax.contrib.muon(η)``'s step for every parameter
outside declared pairs: the same parameters take Muon (exactly the 2-D ones without dimension numbers, or those
whose dimension numbers, a full or a prefix tree or a function giving one, are not ``None``) and the others AdamW.

:data:`LEDGER` names every optax case (its parameterized test method) with what it is here:

* ``PASS``: adapted; the case's own checks hold at optax's tolerance (``1e-8`` between two forms of one update,
  ``1e-5`` for the permuted 4-D one, ``1e-3`` for orthogonality), and every update it takes is also compared with
  ``optax.contrib.muon``'s at :data:`PARITY` (two float32 Newton–Schulz implementations, rounded apart);
* ``REFUSED``: a documented choice, asserted refused with its message: ``preconditioning`` other than
  ``"frobenius"`` (the project's Newton–Schulz starts from ``X/‖X‖_F`` only) and complex matrices (Muon and the
  attention rules are derived for real ones; the message names the parameter, ``<root>`` for a single array);
* ``NOT_APPLICABLE``: the case calls optax's own helpers (its reshape and its Newton–Schulz), which the preset
  does not expose; skipped with the reason.

Each fix the preset needed is planted back at the end and shown caught: the 2-D-only rule, prefix dimension
numbers, a static ``ns_steps`` under ``optax.inject_hyperparams`` and ``jax.jit``, and the root's name.
"""

from __future__ import annotations

import collections
import inspect
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optax.contrib import MuonDimensionNumbers as Dims

from numerics import optimizer
from numerics.optimizer import OPTAX_PARITY, CompositionalMuonState, compositional_muon
from numerics.optimizer import alias as alias_module
from numerics.optimizer import nonfinite as nonfinite_module
from numerics.optimizer import options as options_module
from numerics.optimizer import transform as transform_module

OPTAX_VERSION = "0.2.8"
LR = 1e-3  # optax's cases: learning rate 1e-3, loss ½ Σ params², so the gradient is the params
UNSPECIFIED = object()
#: ours against optax.contrib.muon's, per leaf: ``rtol``, and ``atol`` times the leaf's largest entry. Two float32
#: Newton–Schulz implementations (ours scales by a power of two and folds ‖X‖_F into the first step; optax divides
#: by ‖X‖_F + 1e-8) round apart: at most 2.2e-6 of the largest entry over these cases
PARITY = {"rtol": 2e-4, "atol": 1e-5}

PASS, REFUSED, NOT_APPLICABLE = "pass", "refused", "not applicable"
PRECONDITIONING = "preconditioning other than 'frobenius': the project's Newton–Schulz starts from X/‖X‖_F only"
COMPLEX = "a complex matrix: Muon and the attention rules are derived for real matrices"
HELPER = "calls optax's own helper {}, which the parity preset does not expose"
ORTHO_SHAPES = {"square": (100, 100), "tall": (100, 50), "wide": (50, 100)}


def _ledger() -> dict[str, tuple[str, str]]:
    """``{optax test method: (status, what is checked or why not)}`` for optax 0.2.8's 32 Muon cases."""
    out: dict[str, tuple[str, str]] = {}
    for start in ("frobenius", "aol", "schatten"):
        ok = start == "frobenius"
        for case in ("callable_weight_dim_nums", "reshape_update_for_square_parameter_matches_muon_without_dim_nums",
                     "reshape_and_update_single_param", "dim_nums_combinations", "orthogonality"):
            out[f"test_{case}_{start}"] = (PASS, case) if ok else (REFUSED, PRECONDITIONING)
    for start, shape in itertools.product(("standard", "aol"), ORTHO_SHAPES):
        out[f"test_muon_orthogonalization_modes_{start}_{shape}"] = ((PASS, shape) if start == "standard"
                                                                     else (REFUSED, PRECONDITIONING))
    out["test_aol_numerical_difference"] = (REFUSED, PRECONDITIONING)
    for i in range(4):  # parameterized.product over adaptive (True, False), then nesterov (True, False)
        out[f"test_complex_mixed_target{i}"] = (REFUSED, COMPLEX)
    for case in ("2d_tuple_axes", "3d_batch_axis", "3d_negative_axes_indices", "4d_multiple_batch_axes",
                 "4d_multiple_output_axes"):
        out[f"test_reshape_inverse_{case}"] = (NOT_APPLICABLE, HELPER.format("_compute_muon_reshape"))
    out["test_newton_schulz"] = (NOT_APPLICABLE, HELPER.format("orthogonalize_via_newton_schulz"))
    return out


LEDGER = _ledger()


def _names(status: str) -> list[str]:
    return sorted(name for name, (s, _) in LEDGER.items() if s == status)


# ---- the preset and optax, side by side -------------------------------------------------------
def parity_muon(learning_rate=LR, dims=UNSPECIFIED, **kwargs):
    given = {} if dims is UNSPECIFIED else {"muon_weight_dimension_numbers": dims}
    return compositional_muon(learning_rate, **{**OPTAX_PARITY, **given, **kwargs})


def optax_muon(learning_rate=LR, dims=UNSPECIFIED, **kwargs):
    given = {} if dims is UNSPECIFIED else {"muon_weight_dimension_numbers": dims}
    return optax.contrib.muon(learning_rate, **given, **kwargs)


def first_update(opt, params):
    state = opt.init(params)
    return opt.update(params, state, params)  # the gradient of ½ Σ params² is the params


def assert_close(a, b, rtol, atol):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def assert_like_optax(ours, theirs):
    """Leaf by leaf within :data:`PARITY` (its ``atol`` relative to the leaf's largest entry)."""
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        scale = float(np.abs(np.asarray(y)).max(initial=0.0))
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=PARITY["rtol"], atol=PARITY["atol"] * scale)


def both(params, dims=UNSPECIFIED, learning_rate=LR, **kwargs):
    """The preset's first update and state, checked against ``optax.contrib.muon``'s update at :data:`PARITY`."""
    ours, state = first_update(parity_muon(learning_rate, dims, **kwargs), params)
    theirs, _ = first_update(optax_muon(learning_rate, dims, **kwargs), params)
    assert_like_optax(ours, theirs)
    return ours, state


def muon_momentum(state):
    """The Muon part's momentum tree (``optax.MaskedNode`` where AdamW takes the parameter), as optax's cases read
    theirs."""
    found = [s for s in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, CompositionalMuonState))
             if isinstance(s, CompositionalMuonState)]
    assert len(found) == 1
    return found[0].mu


def masked(x) -> bool:
    return isinstance(x, optax.MaskedNode)


def normal(shape, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)  # optax's cases run in float32


def ones(shape):
    return jnp.ones(shape, jnp.float32)


# ---- the adapted cases --------------------------------------------------------------------------
def check_callable_weight_dim_nums():
    """Dimension numbers from a function of the params: for every 2-D parameter, or ``None`` for ``w2``."""
    params = {"w1": ones((10, 10)), "w2": ones((2, 10))}

    def every_matrix(p):
        return jax.tree.map(lambda x: Dims(0, 1) if x.ndim == 2 else None, p)

    def w2_for_adamw(p):
        return {"w1": Dims(), "w2": None}

    for dims, roles in ((every_matrix, {"w1": "cm", "w2": "cm"}), (w2_for_adamw, {"w1": "cm", "w2": "adam"})):
        both(params, dims)
        assert optimizer.parameter_roles(params, muon_weight_dimension_numbers=dims, roles="optax") == roles


def check_reshape_update_for_square_parameter_matches_muon_without_dim_nums():
    """A square matrix with the trivial dimension numbers takes the update it takes without them."""
    params = {"w": normal((10, 10))}
    plain, _ = both(params)
    trivial, _ = both(params, {"w": Dims(reduction_axis=0, output_axis=1)})
    assert_close(plain, trivial, rtol=1e-8, atol=1e-8)


def check_reshape_and_update_single_param():
    """A (10, 12) matrix stored as 4-D arrays whose dimension numbers recover it: the same update, rearranged."""
    w = normal((10, 12))
    plain, _ = both({"w": w})
    trivial, _ = both({"w": w}, {"w": Dims(reduction_axis=0, output_axis=1)})
    assert_close(plain, trivial, rtol=1e-8, atol=1e-8)
    for rearrange, dims, tol in (
            (lambda x: x.reshape(10, 3, 1, 4).transpose(3, 2, 0, 1), Dims(reduction_axis=(2,), output_axis=(0, 3)),
             1e-8),  # (4, 1, 10, 3): rows on axis 2, columns on axes 0 and 3
            (lambda x: x.reshape(2, 1, 5, 12).transpose(2, 3, 1, 0), Dims(reduction_axis=(0, 3), output_axis=(1,)),
             1e-5)):  # (5, 12, 1, 2): rows on axes 0 and 3 (a permutation of them: optax's looser tolerance)
        stored, _ = both({"w": rearrange(w)}, {"w": dims})
        assert_close(jax.tree.map(rearrange, plain), stored, rtol=tol, atol=tol)


def check_dim_nums_combinations():
    """Which parameters the Muon part holds momentum for, by dimension numbers: all, none given (only the 2-D
    ones), a ``None`` leaf, ``None`` above a subtree, and a prefix tree (one entry for a whole subtree)."""
    dims = Dims(reduction_axis=(1,), output_axis=(2,))
    _, state = both({"w1": ones((1, 2, 3)), "w2": ones((2, 3, 4))}, {"w1": dims, "w2": dims})
    assert not masked(muon_momentum(state)["w1"]) and not masked(muon_momentum(state)["w2"])
    _, state = both({"w1": ones((1, 2, 3)), "w2": ones((3, 4))})  # no dimension numbers: 2-D only
    assert masked(muon_momentum(state)["w1"]) and not masked(muon_momentum(state)["w2"])
    _, state = both({"w1": ones((1, 2, 3)), "w2": ones((2, 3, 4))}, {"w1": None, "w2": dims})
    assert masked(muon_momentum(state)["w1"])
    nested = {w: {"a": ones((2, 3)), "b": ones((2, 3))} for w in ("w1", "w2")}
    for given, muon in (({"w1": None, "w2": {"a": Dims(), "b": None}}, {"w2/a"}),
                        ({"w1": Dims(), "w2": None}, {"w1/a", "w1/b"})):  # the second: a prefix tree
        _, state = both(nested, given)
        mu = muon_momentum(state)
        assert jax.tree.structure(mu, is_leaf=masked) == jax.tree.structure(nested)
        got = {f"{k}/{j}" for k, sub in mu.items() for j, x in sub.items() if not masked(x)}
        assert got == muon, (given, got)


def check_orthogonalization(shape_name):
    """Learning rate 1, no weight decay: the update keeps its shape; a square one has singular values in
    ``(0.1, 2)``."""
    shape = ORTHO_SHAPES[shape_name]
    params = {"w": normal(shape, seed=42)}
    updates, _ = both(params, learning_rate=1.0, weight_decay=0.0)
    assert updates["w"].shape == shape
    if shape[0] == shape[1]:
        s = np.linalg.svd(np.asarray(updates["w"]), compute_uv=False)
        assert s.max() < 2.0 and s.min() > 0.1, (s.min(), s.max())


def check_orthogonality():
    """``2I`` (8 × 8): the update's Gram matrix, divided by its largest entry, is ``I`` to ``1e-3``."""
    updates, _ = both({"w": jnp.eye(8, dtype=jnp.float32) * 2.0}, learning_rate=0.1)
    u = np.asarray(updates["w"], np.float64)
    assert np.isfinite(u).all()
    gram = u.T @ u
    assert np.linalg.norm(gram / gram.max() - np.eye(8)) < 1e-3


ADAPTED = {
    "test_callable_weight_dim_nums_frobenius": check_callable_weight_dim_nums,
    "test_reshape_update_for_square_parameter_matches_muon_without_dim_nums_frobenius":
        check_reshape_update_for_square_parameter_matches_muon_without_dim_nums,
    "test_reshape_and_update_single_param_frobenius": check_reshape_and_update_single_param,
    "test_dim_nums_combinations_frobenius": check_dim_nums_combinations,
    "test_orthogonality_frobenius": check_orthogonality,
    **{f"test_muon_orthogonalization_modes_standard_{s}": (lambda s=s: check_orthogonalization(s))
       for s in ORTHO_SHAPES},
}


@pytest.mark.parametrize("case", _names(PASS))
def test_adapted_case_passes(case):
    ADAPTED[case]()


def _refused_starts(case: str) -> tuple[str, ...]:
    """The preconditionings an optax case runs: both for the one comparing them, else the one in its name."""
    if case == "test_aol_numerical_difference":
        return ("aol", "schatten")
    return tuple(start for start in ("aol", "schatten") if f"_{start}" in case)


def check_complex_refused(adaptive: bool, nesterov: bool):
    """optax's complex target (a single (2, 2) complex64 array): refused at ``init``, naming it ``<root>``."""
    opt = parity_muon(1e-2, adaptive=adaptive, nesterov=nesterov)
    with pytest.raises(TypeError, match=r"^compositional_muon: the matrix parameter <root> \(the params are one "
                                        r"array\) has dtype complex64; Muon and the attention rules take real"):
        opt.init(jnp.zeros((2, 2), jnp.complex64))


@pytest.mark.parametrize("case", _names(REFUSED))
def test_refused_case_is_refused_with_its_reason(case):
    if LEDGER[case][1] == COMPLEX:
        i = int(case[-1])
        check_complex_refused(adaptive=i < 2, nesterov=i % 2 == 0)
        return
    extra = {"ns_coeffs": "dion"} if case == "test_aol_numerical_difference" else {}
    starts = _refused_starts(case)
    assert starts
    for start in starts:
        with pytest.raises(ValueError, match=rf"^compositional_muon: preconditioning must be 'frobenius', got "
                                             rf"'{start}'.*'aol' and 'schatten' starts are not implemented"):
            parity_muon(preconditioning=start, **extra)


@pytest.mark.parametrize("case", _names(NOT_APPLICABLE))
def test_helper_case_is_not_applicable(case):
    pytest.skip(f"{case}: {LEDGER[case][1]}")


def test_ledger_names_every_optax_case():
    """8 cases adapted, 18 refused by documented choice, 6 on optax's own helpers; and, where the installed
    optax ships its tests, the ledger names exactly its cases."""
    assert collections.Counter(s for s, _ in LEDGER.values()) == {PASS: 8, REFUSED: 18, NOT_APPLICABLE: 6}
    assert set(ADAPTED) == set(_names(PASS))
    if optax.__version__ != OPTAX_VERSION:
        pytest.skip(f"the ledger follows optax {OPTAX_VERSION}'s cases; optax {optax.__version__} is installed")
    cases = pytest.importorskip("optax.contrib._muon_test", reason="optax ships without its tests")
    assert set(LEDGER) == {n for n in dir(cases.MuonTest) if n.startswith("test")}


def test_complex_target_through_adamw_as_the_refusal_suggests():
    """The route the refusal names: the same complex target selected for AdamW reaches it, as optax's Muon does."""
    target = jnp.asarray([[1.0 + 2.0j, 0.0], [-1.0 + 1.0j, 1.0 - 3.0j]], jnp.complex64)
    opt = parity_muon(1e-2, adamw_params=lambda path, x: True)

    def step(carry, _):
        params, state = carry
        grad = jax.tree.map(jnp.conj, jax.grad(lambda p: jnp.sum(jnp.abs(p - target) ** 2))(params))
        updates, state = opt.update(grad, state, params)
        return (optax.apply_updates(params, updates), state), None

    params = jnp.zeros((2, 2), jnp.complex64)
    (params, _), _ = jax.jit(lambda c: jax.lax.scan(step, c, length=1000))((params, opt.init(params)))
    np.testing.assert_allclose(np.asarray(params), np.asarray(target), rtol=3e-2, atol=3e-2)


# ---- beyond optax's cases: what the preset gives every parameter --------------------------------
def mixed_params():
    """A 2-D bias (Muon in optax), a (1, 2, 3) tensor and (3, 3, 8, 16) convolution weights (AdamW in optax,
    having more than two axes and no dimension numbers), a matrix and a vector."""
    shapes = {"bias": (4, 8), "odd": (1, 2, 3), "conv": (3, 3, 8, 16), "w": (8, 12), "scale": (12,)}
    return {name: normal(shape, seed) for seed, (name, shape) in enumerate(shapes.items())}


def check_roles_match_optax():
    params = mixed_params()
    assert optimizer.parameter_roles(params, roles="optax") == {
        "bias": "cm", "conv": "adam", "odd": "adam", "scale": "adam", "w": "cm"}
    both(params)  # every update, the AdamW ones included
    ours, theirs = parity_muon(), optax_muon()
    sa, sb = ours.init(params), theirs.init(params)
    for seed in (1, 2):  # two steps, jitted
        g = jax.tree.map(lambda x, seed=seed: normal(x.shape, seed), params)
        a, sa = jax.jit(ours.update)(g, sa, params)
        b, sb = jax.jit(theirs.update)(g, sb, params)
        assert_like_optax(a, b)


def test_parameters_optax_gives_adamw_get_adamw():
    """The preset's roles are optax's; the project's default keeps stacked layers and convolution weights as
    batches of matrices (Muon on each trailing 2-D slice) and biases of any shape for AdamW."""
    check_roles_match_optax()
    assert optimizer.parameter_roles(mixed_params()) == {
        "bias": "adam", "conv": "cm", "odd": "cm", "scale": "adam", "w": "cm"}
    table = optimizer.describe_pairs(mixed_params(), pairs=None, roles="optax")
    assert re.search(r"^conv +\(3, 3, 8, 16\) +adamw$", table, re.M), table
    assert re.search(r"^bias +\(4, 8\) +muon$", table, re.M), table
    with pytest.raises(ValueError, match=r"^compositional_muon: roles must be one of \('project', 'optax'\), got "
                                         r"'Optax'$"):
        compositional_muon(0.1, roles="Optax")


def check_preset_name_under_inject_and_jit(factory=compositional_muon):
    """``optax.inject_hyperparams(compositional_muon)(ns_coeffs="standard")`` under ``jax.jit`` takes optax's
    step: ``"standard"`` stays static (a string) and so does ``ns_steps`` (its default is ``None``, not a number
    for ``inject_hyperparams`` to inject and ``jit`` to trace)."""
    params = {"w": normal((24, 40)), "v": normal((40,), 1)}
    g = jax.tree.map(lambda x: normal(x.shape, 2), params)
    ours = optax.inject_hyperparams(factory)(learning_rate=0.1, **OPTAX_PARITY)
    theirs = optax.inject_hyperparams(optax.contrib.muon)(learning_rate=0.1, ns_coeffs="standard")
    state = ours.init(params)
    a, _ = jax.jit(ours.update)(g, state, params)
    b, _ = jax.jit(theirs.update)(g, theirs.init(params), params)
    assert_like_optax(a, b)
    assert "ns_steps" not in state.hyperparams and "learning_rate" in state.hyperparams


def test_preset_name_under_inject_hyperparams_and_jit():
    check_preset_name_under_inject_and_jit()
    assert optimizer.resolve_schedule("standard", None) == ((3.4445, -4.775, 2.0315),) * 5  # optax's 5 steps
    assert len(optimizer.resolve_schedule("polar-express-5", None)) == 5


def test_root_array_is_named_in_refusals():
    """A params pytree that is one array has the empty path; refusals call it ``<root>``."""
    check_complex_refused(adaptive=False, nesterov=True)
    real = ones((3, 4))
    opt = parity_muon()
    with pytest.raises(TypeError, match=r"^compositional_muon.update: the gradient of <root> \(the params are one "
                                        r"array\) is complex64 but the parameter is float32"):
        opt.update(real.astype(jnp.complex64), opt.init(real), real)


# ---- each fix, planted back --------------------------------------------------------------------
def test_planted_matrix_rule_for_every_shape_is_caught(monkeypatch):
    """The project's rule in the preset: (1, 2, 3) and (3, 3, 8, 16) arrays take Muon, a 2-D bias AdamW."""
    project_rule = alias_module.default_muon
    monkeypatch.setattr(alias_module, "default_muon", lambda name, x, roles: project_rule(name, x, "project"))
    with pytest.raises(AssertionError):
        check_dim_nums_combinations()
    with pytest.raises(AssertionError):
        check_roles_match_optax()


def test_planted_exact_dimension_number_paths_are_caught(monkeypatch):
    """Dimension numbers looked up by a parameter's own path only: a prefix tree's entry reaches no leaf."""
    monkeypatch.setattr(transform_module, "given_for", lambda given, name: given.get(name))
    with pytest.raises(AssertionError):  # w1/a and w1/b take AdamW: their updates are not optax's
        check_dim_nums_combinations()


def test_planted_numeric_ns_steps_default_is_caught():
    """``ns_steps=5`` as the default again: inject_hyperparams injects it, jit traces it, and the preset's
    single step ``"standard"`` cannot be repeated a traced number of times."""
    signature = inspect.signature(compositional_muon)
    numeric = signature.replace(parameters=[p.replace(default=5) if p.name == "ns_steps" else p
                                            for p in signature.parameters.values()])

    def planted(*args, **kwargs):
        return compositional_muon(*args, **kwargs)

    planted.__signature__ = numeric  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"ns_steps is a traced value"):
        check_preset_name_under_inject_and_jit(planted)


def test_planted_empty_root_name_is_caught(monkeypatch):
    for module in (transform_module, options_module, nonfinite_module):
        monkeypatch.setattr(module, "shown_path", repr)
    with pytest.raises(AssertionError, match="Regex pattern did not match"):
        check_complex_refused(adaptive=True, nesterov=True)
