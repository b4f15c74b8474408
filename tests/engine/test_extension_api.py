"""The public extension API: a norm family added by a call, a user lemma the trusted kernel matches, and a scalar
named once in the rule that every emitted function takes.

Each check has its planted mistake beside it: a family left unregistered, a clashing key or solve number, a wrong
user statement, a rule whose scalars are not passed to its functions.
"""

import importlib.util

import numpy as np
import pytest
from sympy.matrices.expressions import MatrixSymbol

from derivations import (
    Clause,
    Context,
    EmittedFunction,
    Inner,
    InstanceSampler,
    Lemma,
    MatrixScalar,
    Msign,
    NormFamily,
    NotApplicable,
    OpNorm,
    Problem,
    RuleModule,
    SearchFailed,
    Statement,
    derive,
    dimension,
    evaluate_on,
    families,
    identity_chain,
    positive_symbol,
    product,
    register_family,
    unregister_family,
)
from derivations.cli import render
from derivations.engine import norms as N
from derivations.engine import rule as R
from derivations.printing.codegen import UnresolvedName
from derivations.vocabulary.norm_nodes import EntrywiseL1Norm, Sign, _entries

pytestmark = pytest.mark.fast

m, n = dimension("m"), dimension("n")
eps, tau = positive_symbol("epsilon"), positive_symbol("tau")
G, dW, A = MatrixSymbol("G", m, n), MatrixSymbol("dW", m, n), MatrixSymbol("A", m, n)
CTX = Context(check_dims=[{m: 5, n: 3}, {m: 3, n: 4}], mpmath_dims={m: 3, n: 2})


class _MaxAbsCopy(MatrixScalar):
    """``max |A_ij|`` as a node of its own: the norm of a family the engine does not know until it is registered."""

    is_nonnegative = True

    def _numeric(self, ev):
        return max(abs(x) for x in _entries(ev(self.args[0])))

    def _sympystr(self, printer):
        return f"||{printer._print(self.args[0])}||_maxcopy"


def _family(key="max_abs_copy", number="1z"):
    return NormFamily(key, "max-abs norm (a copy)", _MaxAbsCopy, EntrywiseL1Norm, Sign,
                      r"\operatorname*{argmin}_{\|Z\|_{\max} \le \beta} \langle A, Z\rangle = -\beta\,\mathrm{sign}(A)",
                      solve_number=number)


@pytest.fixture
def added():
    """Families registered in a test are taken out again after it."""
    before = list(N._ADDED)
    yield
    N._ADDED[:] = before


def _problem():
    return Problem(dW, Inner(G, dW), _MaxAbsCopy(dW), eps)


def test_a_registered_family_is_solved_in(added):
    with pytest.raises(SearchFailed, match="register_family"):  # planted: the family is not registered
        derive(_problem(), CTX, name="copy.unregistered")
    family = register_family(_family())
    assert family in families() and register_family(family) is family and families().count(family) == 1
    der = derive(_problem(), CTX, name="copy.step")
    g = np.random.default_rng(0).standard_normal((5, 3))
    assert np.allclose(evaluate_on(der.formula, {"G": g, "epsilon": 0.5}), -0.5 * np.sign(g))
    assert der.steps[-1].lemma.number == "1z"
    unregister_family(family)
    assert family not in families()


def test_a_clashing_family_is_refused_in_one_line(added):
    register_family(_family())
    with pytest.raises(ValueError, match="key 'max_abs_copy' is in use"):
        register_family(_family(number="1y"))
    with pytest.raises(ValueError, match="1m"):  # the max-abs family's solve number
        register_family(_family(key="other", number="1m"))
    with pytest.raises(ValueError, match="workbench's own"):
        unregister_family(N.OPERATOR)
    with pytest.raises(TypeError, match="takes a NormFamily"):
        register_family("max_abs")


def _negated(node):
    return isinstance(node, Msign) and node.arg.as_coeff_mmul()[0].is_negative


def _flip(node):
    coeff, rest = node.arg.as_coeff_mmul()
    return product(-1, Msign(product(-coeff, rest)))


def _msign_odd(expr, **_):
    new = expr.replace(_negated, _flip)
    if new == expr:
        raise NotApplicable("no msign of a matrix with a negative coefficient")
    return new, []


def _odd_lemma(rhs):
    statement = Statement((Clause(Msign(product(-1, A)), rhs),), sizes=({m: 4, n: 3}, {m: 17, n: 16}))
    return Lemma(key="msign_odd_user", number="5u", title="msign is odd", statement=statement, rewrite=_msign_odd,
                 identities=lambda: ([(Msign(product(-1, A)), product(-1, Msign(A)))], InstanceSampler({m: 6, n: 3})))


def test_a_user_lemma_with_a_statement_has_its_steps_proven_for_all_sizes():
    lemma = _odd_lemma(product(-1, Msign(A)))
    assert lemma.self_check(np.random.default_rng(0)).passed
    W = MatrixSymbol("W", n, n)
    der = identity_chain("user.odd", "msign of a negated product", Msign(product(-1, G, W)),
                         Context(check_dims=[{m: 5, n: 3}]))
    der.apply(lemma)
    assert der.steps[0].instance.startswith("instance")  # proven for all sizes, not only at instances
    wrong = _odd_lemma(Msign(A))  # planted: the statement drops the sign
    assert not wrong.self_check(np.random.default_rng(0)).passed


def _temperature_rule(functions_of=None):
    der = derive(Problem(dW, Inner(G, dW), OpNorm(dW), eps * tau), CTX, name="temperature.step")
    return RuleModule(name="temperature", title="Muon with a temperature", derivations=lambda: [der],
                      functions=lambda: [EmittedFunction("temperature_step", "a step of size ε·τ", [G],
                                                         [("dW", der)])],
                      scalars={eps: "eps", tau: "tau"}), der


@pytest.mark.parametrize("target", ["jax", "numpy", "torch"])
def test_a_scalar_named_in_the_rule_is_a_keyword_of_every_emitted_function(target):
    if target == "torch" and importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed")
    rule, der = _temperature_rule()
    namespace: dict = {}
    exec(compile(render(rule, target), f"temperature_{target}.py", "exec"), namespace)
    step = namespace["temperature_step"]
    g = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    arg = __import__("torch").from_numpy(g) if target == "torch" else g
    options = {} if target == "numpy" else {"msign": "svd"}
    got = np.asarray(step(arg, eps=0.1, tau=2.0, **options), dtype=np.float64)
    want = evaluate_on(der.formula, {"G": g.astype(np.float64), "epsilon": 0.1, "tau": 2.0})
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="'tau'"):
        step(arg, eps=0.1)
    with pytest.raises(ValueError, match="tau must be > 0"):
        step(arg, eps=0.1, tau=-1.0)


def test_a_rule_scalar_left_out_of_the_functions_is_caught(monkeypatch):
    """Planted: without the rule's scalars passed on, the emitted module would read a name it never defines, and
    the emission is refused."""
    monkeypatch.setattr(R, "with_rule_scalars", lambda fn, scalars: fn)
    rule, _ = _temperature_rule()
    with pytest.raises(UnresolvedName, match="reads tau"):
        render(rule, "numpy")
