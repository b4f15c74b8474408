"""One dispatch for every interpreter: a new node brings its rules in its own class (this file is the
only one touched to add it), and a missing rule fails the same way everywhere."""

import jax.numpy as jnp
import numpy as np
import pytest
from sympy import Symbol, sstr
from sympy.matrices.expressions import MatrixExpr, MatrixSymbol

from derivations.engine.latex import latex
from derivations.engine.symbolic import ExplicitModel
from derivations.printing.jax_printer import JaxPrinter
from derivations.printing.numpy_printer import NumpyPrinter
from derivations.printing.scaling import scaling_plan
from derivations.vocabulary.interpret import MissingRule
from derivations.vocabulary.nodes import MatrixFunction
from derivations.vocabulary.numeric import evaluate

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

A = MatrixSymbol("A", 4, 3)


class Tanh(MatrixFunction):
    """Entrywise ``tanh``: one class, every interpreter's rule."""

    def _numeric(self, ev):
        a = ev(self.arg)
        return a.apply(__import__("mpmath").tanh) if hasattr(a, "apply") else np.tanh(a)

    def _symbolic(self, model):
        from sympy import tanh
        return model.value(self.arg).applyfunc(tanh)

    def _numpycode(self, printer):
        return f"{'jnp' if printer.printmethod == '_jaxcode' else 'np'}.tanh({printer._print(self.arg)})"

    _jaxcode = _numpycode

    def _degree(self, scaling):
        return scaling.inhomogeneous("tanh has no fixed degree")

    def _sympystr(self, printer):
        return f"tanh({printer._print(self.arg)})"

    def _latex(self, printer):
        return rf"\tanh\left({printer._print(self.arg)}\right)"


class Untaught(MatrixExpr):
    """A node with no rules at all (not a matrix function, which the symbolic model keeps opaque)."""

    shape = property(lambda self: self.args[0].shape)


def _run(printer_cls, expr, value, module):
    lines = printer_cls({"A": "A"}, {Symbol("c"): "c"}).body([("out", expr)])
    ns = {"A": value, "np": np, "jnp": jnp, "c": 2.0}
    exec("\n".join(lines), ns)  # noqa: S102 (runs the printed code)
    return np.asarray(ns["out"], dtype=float)


def test_a_new_node_works_in_every_interpreter():
    expr = Tanh(A * A.T)  # a compound argument
    value = np.random.default_rng(0).standard_normal((4, 3))
    ref = np.tanh(value @ value.T)
    assert np.allclose(evaluate(expr, {A: value}), ref)
    assert np.allclose(_run(NumpyPrinter, expr, value, np), ref)
    assert np.allclose(_run(JaxPrinter, expr, value, jnp), ref)
    assert sstr(expr) == "tanh(A*A.T)" and r"\tanh" in latex(expr)
    model = ExplicitModel({})
    assert model.value(expr).shape == (4, 4)
    assert scaling_plan(["A"], [expr]) is None  # the exact scaling leaves it alone, as its degree rule says


@pytest.mark.parametrize("interpret", [
    lambda e: evaluate(e, {A: np.ones((4, 3))}),
    lambda e: ExplicitModel({}).value(e),
    lambda e: NumpyPrinter({"A": "A"}, {}).body([("out", e)]),
    lambda e: JaxPrinter({"A": "A"}, {}).body([("out", e)]),
    lambda e: scaling_plan(["A"], [e]),
], ids=["numeric evaluator", "symbolic model", "NumPy printer", "JAX printer", "exact-scaling plan"])
def test_a_missing_rule_fails_the_same_way_everywhere(interpret):
    with pytest.raises(MissingRule, match=r"has no rule for Untaught|no explicit model for Untaught"):
        interpret(Untaught(A))


def test_every_interpreter_is_a_sympy_printer():
    from sympy.printing.printer import Printer

    from derivations.engine.symbolic import ExplicitModel
    from derivations.vocabulary.interpret import Interpreter
    from derivations.vocabulary.numeric import NumericEvaluator

    for cls in (NumpyPrinter, JaxPrinter, NumericEvaluator, ExplicitModel):
        assert issubclass(cls, Interpreter) and issubclass(cls, Printer), cls
