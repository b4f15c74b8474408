"""The printers build a typed function spec (signature, checks, body) and render it apart
(derivations.printing.function_spec); emit_jax takes the validated Schedule type, not loose coefficients."""

import pytest

import coeffsearch
from derivations import gauge, sylvester
from derivations.cli import render
from derivations.printing import jax_printer, numpy_printer
from derivations.printing.function_spec import FunctionSpec, Parameter, render_function, render_functions

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)


@pytest.fixture(scope="module")
def sylvester_rule():
    return sylvester.rule_module()


@pytest.fixture(scope="module")
def gauge_rule():
    return gauge.rule_module()


def test_a_spec_renders_to_the_function_it_describes():
    spec = FunctionSpec("scaled", (Parameter("x"),), (Parameter("by"), Parameter("offset", "0.0")),
                        decorators=("staticmethod",), docstring='    """Scaled."""',
                        checks=("if by <= 0:", "    raise ValueError('by')"), body=("return by * x + offset",))
    text = render_function(spec)
    assert text == ("@staticmethod\ndef scaled(x, *, by, offset=0.0):\n    \"\"\"Scaled.\"\"\"\n"
                    "    if by <= 0:\n        raise ValueError('by')\n    return by * x + offset")
    assert spec.signature() == "scaled(x, *, by, offset=0.0)"
    assert [p.name for p in spec.parameters] == ["x", "by", "offset"]
    namespace = {}
    exec(render_function(FunctionSpec("f", spec.positional, spec.keyword_only, checks=spec.checks, body=spec.body)),
         namespace)
    assert namespace["f"](2.0, by=3.0) == 6.0 and namespace["f"](2.0, by=3.0, offset=1.0) == 7.0
    with pytest.raises(ValueError, match="by"):
        namespace["f"](2.0, by=-1.0)
    assert render_functions([spec, spec]) == "\n" + text + "\n\n\n" + text + "\n"


def test_jax_specs_say_what_the_functions_take_and_check(sylvester_rule):
    (fn,) = sylvester_rule.functions()
    core, public, checked = jax_printer.function_specs(fn, sylvester_rule.scalars, "svd")
    assert core.name == "_sylvester_qk" and core.keyword_only == () and core.checks == ()
    assert [p.name for p in core.positional][-6:] == ["damping", "msign", "schedule", "restarts", "gram_aspect",
                                                      "solver"]
    assert core.decorators == ('functools.partial(jax.jit, static_argnames=("msign", "gram_aspect", "solver",))',)
    assert core.body[-1] == "return nan_unless(status == 0, (dW_Q, dW_K)), status"
    keywords = {p.name: p.default for p in public.keyword_only}
    assert keywords == {"eps": None, "damping": None, "msign": "'svd'", "schedule": "NS_SCHEDULE",
                        "restarts": "None", "gram_aspect": "None", "solver": "'structured'", "check_finite": "True"}
    assert public.checks == () and public.body == (
        "return _checked_sylvester_qk(W_Q, W_K, G_M, eps=eps, damping=damping, msign=msign, schedule=schedule, "
        "restarts=restarts, gram_aspect=gram_aspect, solver=solver, check_finite=check_finite, caller=None)",)
    assert checked.name == "_checked_sylvester_qk" and checked.positional == public.positional
    assert checked.keyword_only == (*public.keyword_only, Parameter("caller"))  # required: no default to forget
    assert checked.checks[0].startswith("validate_inputs('sylvester_qk' if caller is None else caller[0]")
    assert "if solver not in ('structured', 'dense'):" in checked.checks
    assert any(c.startswith("if not isinstance(damping, jax.core.Tracer):") for c in checked.checks)  # λ > 0
    assert checked.body[0].startswith("outputs, status = _sylvester_qk(")


def test_a_rule_without_msign_has_no_schedule_parameter(gauge_rule):
    (fn,) = gauge_rule.functions()
    core, public, checked = jax_printer.function_specs(fn, gauge_rule.scalars, "newton_schulz")
    keywords = [p.render() for p in public.keyword_only]
    assert keywords == ["damping=0.0", "check_finite=True"]  # no eps, msign or schedule
    assert [p.render() for p in checked.keyword_only] == [*keywords, "caller"]
    # the core keeps the one signature of every rule; the public function passes 'svd' and no schedule
    assert core.decorators == ('functools.partial(jax.jit, static_argnames=("msign", "gram_aspect",))',)


def test_the_emitted_modules_are_their_rendered_specs(sylvester_rule, gauge_rule):
    for rule in (sylvester_rule, gauge_rule):
        jax_text, numpy_text = render(rule, "jax", msign="svd"), render(rule, "numpy")
        for fn in rule.functions():
            assert render_functions(list(jax_printer.function_specs(fn, rule.scalars, "svd"))) in jax_text
            assert render_functions([numpy_printer.function_spec(fn, rule.scalars)]) in numpy_text


def test_emit_jax_takes_the_validated_schedule(sylvester_rule):
    cans = coeffsearch.get("cans")  # a recipe: its coefficients are computed and validated by the Schedule
    text = jax_printer.emit_jax("T", "c", sylvester_rule.functions(), cans, "newton_schulz", sylvester_rule.scalars)
    assert "NS_SCHEDULE = (\n" + "".join(f"    {step!r},\n" for step in cans.as_floats()) + ")\n" in text
    assert f"Newton–Schulz schedule: cans ({cans.source})." in text
    with pytest.raises(TypeError, match="schedule must be a foundation.schedule.Schedule .* got tuple"):
        jax_printer.emit_jax("T", "c", sylvester_rule.functions(), ((1.5, -0.5),), "newton_schulz",
                             sylvester_rule.scalars)
