"""``--emit`` and ``regenerate --regenerate`` refuse code from a derivation whose cited lemmas fail their
self-checks: a planted failing self-check gives exit 1 and one line naming the lemma."""

import pytest

from derivations import regenerate, sylvester
from derivations.cli import emit_gate, main
from derivations.lemmas.base import Lemma, SelfCheck

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


@pytest.fixture
def broken_lemma(monkeypatch):
    """The first lemma sylvester's derivations cite, with a self-check that reports a large error."""
    lemma = next(lem for der in sylvester.rule_module().derivations() for lem in der.lemmas_used())
    original = Lemma.self_check

    def self_check(self, rng, trials=3):
        if self is not lemma:
            return original(self, rng, trials)
        return SelfCheck(self.number, {"statement": 0.5},
                         [f"lemma {self.number} ({self.title}) self-check, sub-check 'statement': "
                          "error 5.000e-01 > 1e-08"])

    monkeypatch.setattr(Lemma, "self_check", self_check)
    return lemma


def test_every_cited_lemma_passes_for_the_shipped_rule():
    assert emit_gate(sylvester.rule_module()) == []


@pytest.mark.parametrize("target", ["jax", "numpy", "latex", "text"])
def test_emit_refuses_when_a_cited_lemma_fails(broken_lemma, target, capsys, tmp_path):
    out = tmp_path / "out.py"
    assert main(sylvester.rule_module(), ["--emit", target, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("derivations.sylvester: not emitted: lemma ")
    assert f"lemma {broken_lemma.number} ({broken_lemma.title})" in err[0]
    assert not out.exists()


def test_regenerate_refuses_when_a_cited_lemma_fails(broken_lemma, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(regenerate, "SHIPPED_DIR", tmp_path)
    assert regenerate.main(["--regenerate", "--rule", "sylvester"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"lemma {broken_lemma.number}" in err[0] and "sylvester" in err[0]
    assert not list(tmp_path.iterdir())
