"""Only what was checked is printed.

Every printer takes a derivation through :meth:`Derivation.verified`: its steps follow one another from the
start, each exactly as it passed its check in this process, and its state is the last step's result. A replaced
``state``, a step appended or edited by hand after the checks, stop ``--emit`` (every target), ``render()``,
``regenerate``, ``--check`` and the docs build with one line naming the derivation and the step; nothing is
written.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import cloudpickle
import pytest

from derivations import regenerate, sylvester
from derivations.cli import main, render
from derivations.engine.derivation import UncheckedDerivation
from derivations.engine.states import Solution, Step

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "_ext"))

from workbench_sphinx.objects import FailedDerivation, _check_recorded  # noqa: E402 (the sys.path entry above)

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

RULE = sylvester.rule_module()


@pytest.fixture
def der():
    """The first derivation of the sylvester rule (cached by its module: every change is undone by monkeypatch)."""
    return RULE.derivations()[0]


def _doubled(state):
    parts = state.parts()
    return state.with_parts(2 * parts[0], *parts[1:])


@pytest.fixture(params=["replaced state", "forged step", "edited step"])
def sabotage(request, der, monkeypatch):
    """Three ways to change what a derivation says after its steps were checked, each through public attributes."""
    if request.param == "replaced state":
        monkeypatch.setattr(der, "state", _doubled(der.state))
        return "the state is not the result of step"
    if request.param == "forged step":
        last = der.steps[-1]
        forged = Step(len(der.steps) + 1, "rewrite", last.lemma, der.state, _doubled(der.state), [],
                      check=last.check)  # it even carries a passed check
        monkeypatch.setattr(der, "steps", [*der.steps, forged])
        monkeypatch.setattr(der, "state", forged.after)
        return f"step {forged.index} (rewrite, lemma {last.lemma.number}) is not the step that passed its check"
    steps = list(der.steps)
    edited = dataclasses.replace(steps[-1], after=_doubled(steps[-1].after))
    monkeypatch.setattr(der, "steps", [*steps[:-1], edited])
    monkeypatch.setattr(der, "state", edited.after)
    return f"step {edited.index} ({edited.kind}, lemma {edited.lemma.number}) is not the step that passed its check"


def test_every_shipped_derivation_is_what_its_checked_steps_give(der):
    assert der.integrity() == []
    assert der.verified() is der


@pytest.mark.parametrize("target", ["jax", "numpy", "latex", "text"])
def test_emit_refuses_a_derivation_changed_after_its_checks(sabotage, der, target, capsys, tmp_path):
    out = tmp_path / "out"
    assert main(RULE, ["--emit", target, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"derivations.sylvester: not emitted: {der.name}: not checked: ") and sabotage in err[0]
    assert not out.exists()
    with pytest.raises(UncheckedDerivation, match=sabotage.replace("(", r"\(").replace(")", r"\)")):
        render(RULE, target)


def test_check_fails_on_a_replaced_state(der, monkeypatch, capsys):
    """``--check`` re-checks the steps, which still pass: the state itself is compared with the last step's."""
    monkeypatch.setattr(der, "state", _doubled(der.state))
    assert main(RULE, ["--check"]) == 1
    captured = capsys.readouterr()
    assert f"check failed: {der.name}: not checked: the state is not the result of step" in captured.err
    assert "NOT CHECKED:" in captured.out


def test_regenerate_refuses_a_replaced_state(der, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(regenerate, "SHIPPED_DIR", tmp_path)
    monkeypatch.setattr(der, "state", _doubled(der.state))
    assert regenerate.main(["--regenerate", "--rule", "sylvester"]) != 0
    assert "not checked" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_docs_build_refuses_a_replaced_state(der, monkeypatch):
    monkeypatch.setattr(der, "state", Solution(der.state.variable, 2 * der.state.argmin, der.state.value)
                        if isinstance(der.state, Solution) else _doubled(der.state))
    with pytest.raises(FailedDerivation, match="not checked: the state is not the result"):
        _check_recorded(der, "derivations.sylvester")


def test_a_step_that_failed_its_recheck_is_not_printed(der, monkeypatch):
    """``check(strict=False)`` records a failure and drops the step from the record: nothing prints it until a
    check passes again (on a copy: the rule's cached derivation stays as it is)."""
    copy = cloudpickle.loads(cloudpickle.dumps(der))
    monkeypatch.setattr(type(copy), "_instance_errors", lambda self, *a: ({"planted": 1.0}, {}))
    copy.check(trials=1, mp=False, strict=False)
    with pytest.raises(UncheckedDerivation, match="step 1 .* is not the step that passed its check"):
        copy.verified()


def test_the_record_survives_pickling_and_forks_are_independent(der):
    """The docs build checks derivations in worker processes and unpickles them; the search forks them."""
    copy = cloudpickle.loads(cloudpickle.dumps(der))
    assert copy.integrity() == []
    fork = der.fork()
    fork._checked[len(fork.steps)] = "forged"
    assert der.integrity() == [] and fork.integrity() != []
