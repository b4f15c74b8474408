"""Every node carries its homogeneity degree, which the exact scaling of the emitted JAX code reads.

A node's ``_degree(self, scaling)`` says how its value scales with its arguments
(:mod:`derivations.printing.scaling`). A node without one stops the emission with one line naming it: a rule whose
node the scaling plan did not know was once emitted unscaled, and its Frobenius step returned zeros for gradients
of size 1e30 and a step 10⁸ times too long for 1e-30 in float32. Guarded here: every node class any printer can
print declares its degree (found, not listed); a planted node without one stops the emission and the command
line with one line; the declared degrees keep that Frobenius step right, and planting the old unscaled
emission brings the wrong values back.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from sympy import Basic
from sympy.matrices.expressions import MatrixSymbol

from derivations import Context, EmittedFunction, Inner, Problem, RuleModule, derive, identity_chain, positive_symbol
from derivations.cli import main, render
from derivations.engine import norms as N
from derivations.printing import jax_printer, split_mode
from derivations.printing.jax_printer import JaxPrinter
from derivations.printing.numpy_printer import NumpyPrinter
from derivations.printing.scaling import Homogeneity, NoDegreeRule, scaling_plan
from derivations.vocabulary.algebra import product
from derivations.vocabulary.interpret import MissingRule
from derivations.vocabulary.nodes import MatrixFunction, Msign, dimension

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

m, n = dimension("m"), dimension("n")
G, dW = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n)
eps = positive_symbol("epsilon")


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _printable(cls) -> bool:
    """The JAX or NumPy printer has a rule of its own for ``cls`` (a node method, or a ``_print_<Class>`` of this
    class or of a workbench class it derives from; SymPy's generic fallbacks, such as ``_print_Expr``, excluded)."""
    if any(getattr(cls, hook, None) is not None for hook in ("_jaxcode", "_numpycode")):
        return True
    own = [c.__name__ for c in cls.__mro__ if c.__module__.startswith("derivations.")]
    return any(hasattr(printer, f"_print_{name}") for printer in (JaxPrinter, NumpyPrinter) for name in own)


def undeclared(classes) -> list[str]:
    """The printable node classes among ``classes`` whose degree neither they nor :class:`Homogeneity` state."""
    return sorted(c.__name__ for c in classes if _printable(c) and getattr(c, "_degree", None) is None
                  and not any(hasattr(Homogeneity, f"_degree_{k.__name__}") for k in c.__mro__))


def workbench_nodes() -> list[type]:
    """Every expression class the workbench defines (the vocabulary, the lemma families' own nodes), discovered."""
    import derivations.lemmas  # noqa: F401 (loads the lemma families' nodes: SPDPower, the block nodes)
    return sorted({c for c in _subclasses(Basic) if c.__module__.startswith("derivations.")}, key=lambda c: c.__name__)


class Doubled(MatrixFunction):
    """``2A``: printed by both printers, but with no degree (the planted mistake)."""

    def _numeric(self, ev):
        return ev(self.arg) * 2

    def _numpycode(self, printer):
        return f"2 * ({printer._print(self.arg)})"

    _jaxcode = _numpycode

    def _sympystr(self, printer):
        return f"doubled({printer._print(self.arg)})"


class DoubledDeclared(Doubled):
    """``2A`` with its degree: that of ``A``."""

    def _degree(self, scaling):
        return scaling.degree(self.arg)


class Tanh(Doubled):
    """Entrywise ``tanh``: no fixed degree, and it says so."""

    def _numpycode(self, printer):
        return f"{'jnp' if printer.printmethod == '_jaxcode' else 'np'}.tanh({printer._print(self.arg)})"

    _jaxcode = _numpycode

    def _degree(self, scaling):
        return scaling.inhomogeneous("tanh(cA) is no power of c times tanh(A)")


def _toy_module(formula) -> RuleModule:
    """A rule module of one emitted function ``step(G)`` whose output is ``formula`` (a theorem with no step)."""
    der = identity_chain("toy.step", "a toy step", formula, Context(check_dims=[{m: 5, n: 3}, {m: 3, n: 4}]))
    fn = EmittedFunction("step", "a toy step", [G], [("dW", der)])
    return RuleModule(name="toy", title="toy", derivations=lambda: [der], functions=lambda: [fn],
                      scalars={eps: "eps"})


def _jax(formula):
    """The three JAX functions of a toy ``step(G)`` computing ``formula``."""
    return jax_printer.function_specs(_toy_module(formula).functions()[0], {eps: "eps"}, "newton_schulz")


def test_every_printable_node_declares_its_degree():
    nodes = workbench_nodes()
    assert {"Msign", "GramPower", "FrobeniusUnit", "SPDPower", "AspectScale"} <= {c.__name__ for c in nodes}
    assert undeclared(nodes) == []


def test_the_discovery_finds_a_planted_printable_node_without_a_degree():
    assert undeclared([Doubled, DoubledDeclared, Tanh]) == ["Doubled"]


@pytest.mark.parametrize("formula", [product(-eps, Doubled(G)), product(-eps, Doubled(Msign(G)))],
                         ids=["unscaled rule", "msign rule"])
def test_a_node_without_a_degree_stops_the_emission_naming_it(formula):
    with pytest.raises(NoDegreeRule) as info:
        _jax(formula)
    message = str(info.value)
    assert isinstance(info.value, MissingRule) and "\n" not in message
    assert message.startswith("the exact-scaling plan has no rule for Doubled: doubled(")
    assert "declares no _degree" in message


def test_the_command_line_refuses_it_in_one_line():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
        status = main(_toy_module(product(-eps, Doubled(G))), ["--emit", "jax"])
    assert status == 1 and out.getvalue() == ""
    assert err.getvalue().count("\n") == 1, err.getvalue()
    assert err.getvalue().startswith("derivations.toy: not emitted: the exact-scaling plan has no rule for Doubled")


def test_a_declared_degree_is_read_and_a_declared_inhomogeneous_node_is_not_rescaled():
    plan = scaling_plan(["G"], [product(-eps, DoubledDeclared(G))])
    assert [(g.members, g.degrees) for g in plan] == [(("G",), (1,))]
    assert scaling_plan(["G"], [product(-eps, Tanh(G))]) is None
    core, *_ = _jax(product(-eps, DoubledDeclared(G)))
    assert any("scale_group((G,)" in line for line in core.body)


@pytest.fixture(scope="module")
def frobenius_step():
    """``step(G) = −ε G/‖G‖_F``, found by ``derive`` and emitted as JAX, with the declared degrees and as it was
    emitted before (unscaled: the plan of a formula with a node it did not know)."""
    der = derive(Problem(dW, Inner(G, dW), N.FROBENIUS.norm(dW), eps),
                 Context(check_dims=[{m: 5, n: 3}, {m: 3, n: 4}]), name="toy.frobenius")
    fn = EmittedFunction("step", "Frobenius step", [G], [("dW", der)])
    module = RuleModule(name="toy", title="toy", derivations=lambda: [der], functions=lambda: [fn],
                        scalars={eps: "eps"})
    out = {}
    for label in ("declared", "unscaled"):
        with pytest.MonkeyPatch.context() as mp:
            if label == "unscaled":
                mp.setattr(split_mode, "scaling_plan", lambda *args, **kwargs: None)
            namespace: dict = {}
            exec(render(module, "jax"), namespace)  # noqa: S102 (the emitted module)
            out[label] = namespace["step"]
    return out


def _errors(step) -> dict:
    g = np.random.default_rng(0).standard_normal((6, 4))
    want = -0.3 * g / np.linalg.norm(g)
    return {scale: float(np.abs(np.asarray(step((g * scale).astype(np.float32), eps=0.3)) - want).max()
                         / np.abs(want).max()) for scale in (1e-30, 1e30)}


def test_declared_degrees_keep_the_frobenius_step_right_for_tiny_and_huge_gradients(frobenius_step):
    assert all(err < 1e-6 for err in _errors(frobenius_step["declared"]).values())


def test_planted_unscaled_emission_gives_the_wrong_step_without_an_error(frobenius_step):
    errors = _errors(frobenius_step["unscaled"])
    assert errors[1e-30] > 1e6 and errors[1e30] == pytest.approx(1.0), errors   # 10⁸ too long; all zeros

