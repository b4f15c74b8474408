"""Hostile JSON files, integer options and complex gradients, grouped by the promise each case guards.

* **One JSON reader** (:func:`foundation.commandline.parse_json`): every JSON file a command reads is bounded in
  size, nesting depth and integer-literal length, and anything else is one line naming the file and what is
  wrong, with exit 2; no module parses JSON with :mod:`json` itself (checked over the source, with a planted
  ``json.loads`` caught).
* **One integer option type** (:func:`foundation.commandline.int_option`): every integer option of every command
  has a documented range; a value outside it, a bool, ``2**63`` or a 5,000-digit literal is one line and exit 2,
  never a crash in optax, NumPy or JAX; no ``type=int`` is left (a planted one is caught); a one-step training run
  works.
* **Complex gradients for real parameters** are refused wherever the parameter sits in the tree, naming its path.
* **Bools are not integers**: one shared check refuses ``True`` wherever a positive integer is expected.

The inputs that break Python's ``json`` (a 5,000-digit integer, 100,000 nested brackets) are checked to break it,
so the cases stay hostile.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

import coeffsearch.__main__ as coeffsearch_main
from foundation.commandline import (
    MAX_JSON_DEPTH,
    MAX_JSON_INT_DIGITS,
    FileRefused,
    int_option,
    json_depth,
    parse_json,
    read_json_file,
)
from numerics.emitted import gqa, hybrid_ov
from tests.project.test_layers import PACKAGES as LAYERED_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
#: every package of the layers (the ground floor too, where the one reader lives) and the examples
PACKAGES = (*LAYERED_PACKAGES, "examples")

LONG_INT = "1" * 5000
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory):
    """A schedule, a certificate, a config and a study record, each with a 5,000-digit integer, and one file
    nested 100,000 deep."""
    d = tmp_path_factory.mktemp("hostile_json")
    files = {
        "schedule-long-int": f'{{"steps": [[{LONG_INT}]]}}',
        "certificate-long-int": f'{{"kind": "certificate", "schedule": [["1.5"]], "x": {LONG_INT}}}',
        "restart-long-int": f'{{"kind": "restart-certificate", "x": {LONG_INT}}}',
        "config-long-int": f'{{"model_type": "llama", "hidden_size": {LONG_INT}}}',
        "deep": DEEP,
    }
    for name, text in files.items():
        (d / f"{name}.json").write_text(text)
    return {name: str(d / f"{name}.json") for name in files}


# ---- one JSON reader ---------------------------------------------------------------------------------------------
def test_the_hostile_inputs_break_pythons_json():
    """The planted mistake: a reader that calls ``json.loads`` alone fails on these inputs with a traceback."""
    with pytest.raises(ValueError, match="Exceeds the limit"):
        json.loads(f"[{LONG_INT}]")
    with pytest.raises(RecursionError):
        json.loads(DEEP)


@pytest.mark.parametrize(("text", "needle"), [
    (f"[{LONG_INT}]", f"JSON integer too long (5,000 digits; the limit is {MAX_JSON_INT_DIGITS})"),
    (f'{{"a": -{LONG_INT}}}', "JSON integer too long (5,000 digits"),
    (DEEP, f"JSON nested too deeply (100,000 levels of arrays and objects; the limit is {MAX_JSON_DEPTH})"),
    ("{", "not valid JSON (Expecting property name"),
    (b"\xff{}", "not UTF-8 text (byte 0)"),
])
def test_parse_json_refuses_in_one_line_naming_the_source(text, needle):
    with pytest.raises(FileRefused) as info:
        parse_json(text, "schedule file 'x.json'")
    message = str(info.value)
    assert message.startswith("schedule file 'x.json': ") and needle in message and "\n" not in message


def test_parse_json_depth_counts_brackets_outside_strings_only():
    assert json_depth('{"a": "[[[[[[", "b": [1, {"c": "]]]\\"[["}]}') == 3
    assert parse_json('{"a": "' + "[" * 1000 + '"}', "s") == {"a": "[" * 1000}
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_depth(nested) == MAX_JSON_DEPTH and parse_json(nested, "s") is not None  # the limit itself is read
    with pytest.raises(FileRefused, match="nested too deeply"):
        parse_json("[" + nested + "]", "s")
    assert parse_json("[" + "9" * MAX_JSON_INT_DIGITS + "]", "s") == [int("9" * MAX_JSON_INT_DIGITS)]


def test_read_json_file_names_the_option_and_the_path(hostile_files):
    with pytest.raises(FileRefused, match=r"^--config '.*deep\.json': JSON nested too deeply"):
        read_json_file(hostile_files["deep"], 1 << 20, "--config")


def _one_error_line(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"{prog}: error: ")
    return err


@pytest.mark.parametrize("command", ["certify", "validate", "compare", "restarts"])
@pytest.mark.parametrize("kind", ["schedule-long-int", "certificate-long-int", "restart-long-int", "deep"])
def test_coeffsearch_commands_refuse_hostile_json_files_in_one_line(command, kind, hostile_files, capsys):
    path = hostile_files[kind]
    argv = {"compare": ["compare", "muon", path], "restarts": ["restarts", path, "--dtype", "float32"]}.get(
        command, [command, path])
    assert coeffsearch_main.main(argv) == 2
    err = _one_error_line(capsys, "coeffsearch")
    assert path in err and ("JSON integer too long" in err or "JSON nested too deeply" in err), err


@pytest.mark.parametrize("kind", ["config-long-int", "deep"])
def test_the_parameter_counter_refuses_hostile_config_files_in_one_line(kind, hostile_files, capsys):
    from paramcount import count

    assert count.main(["--config", hostile_files[kind]]) == 2
    err = _one_error_line(capsys, "paramcount")
    assert f"--config {hostile_files[kind]!a}" in err and "JSON" in err


@pytest.mark.parametrize("kind", ["config-long-int", "deep"])
def test_the_study_report_refuses_hostile_records_in_one_line(kind, hostile_files, tmp_path, capsys):
    from numerics import study

    assert study.main(["--report", hostile_files[kind], "--out", str(tmp_path)]) == 2
    err = _one_error_line(capsys, "numerics.study")
    assert f"argument --report {hostile_files[kind]!a}" in err and "JSON" in err


def test_the_diagnosis_benchmark_refuses_a_hostile_corpus(hostile_files):
    from benchmarks.diagnosis import load_corpus
    from derivations.crosscheck.inputs import BadInput

    with pytest.raises(BadInput, match="JSON nested too deeply"):
        load_corpus(hostile_files["deep"])


#: modules that may call json.load/json.loads themselves, with the reason
JSON_EXCEPTIONS = {
    "foundation/commandline.py": "the one reader",
    "derivations/crosscheck/target_cache.py": "the cross-check cache: any parse failure (ValueError, RecursionError) "
                                              "means rebuild, never an error",
}


def json_parsers(source: str) -> list[int]:
    """Lines of ``source`` that parse JSON with :mod:`json` (``json.load``/``json.loads``), except
    ``json.loads(json.dumps(...))``, a round trip of the program's own values."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("load", "loads")
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"):
            arg = node.args[0] if node.args else None
            own = (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "dumps")
            if not own:
                out.append(node.lineno)
    return out


def test_no_module_parses_json_but_the_one_reader():
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in JSON_EXCEPTIONS or "/emitted/" in rel:
                continue
            lines = json_parsers(path.read_text(encoding="utf-8"))
            if lines:
                found[rel] = lines
    assert not found, f"parse JSON with foundation.commandline.parse_json / read_json_file instead: {found}"


def test_the_json_scan_catches_a_planted_json_loads():
    assert json_parsers("import json\ndata = json.loads(open('f').read())\n") == [2]
    assert json_parsers("import json\nwith open('f') as fh:\n    data = json.load(fh)\n") == [3]
    assert json_parsers("import json\nsame = json.loads(json.dumps({}))\n") == []


# ---- one integer option type --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "needle"), [
    ("0", "must be >= 1 and <= 100, got 0"),
    ("101", "must be >= 1 and <= 100, got 101"),
    ("-1", "must be >= 1 and <= 100, got -1"),
    (str(2**63), f"must be >= 1 and <= 100, got {2**63}"),
    (LONG_INT, "got 11111111111111111111... (5,000 digits)"),
    ("True", "must be a whole number >= 1 and <= 100, got 'True'"),
    ("2**63", "must be a whole number"),
    ("1e3", "must be a whole number"),
    ("1.5", "must be a whole number"),
    ("", "must be a whole number"),
    ("\u0663", "must be a whole number"),  # an Arabic-Indic 3: int() takes it, the option does not
])
def test_int_option_refuses_with_the_range(text, needle):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError) as info:
        int_option(1, 100)(text)
    assert needle in str(info.value)


def test_int_option_takes_its_range_and_digit_groups():
    parse = int_option(0, 2**32 - 1)
    assert [parse(t) for t in ("0", "4294967295", "1,024", "1_024", " 7 ", "+3", "007")] == [0, 2**32 - 1, 1024,
                                                                                             1024, 7, 3, 7]


def int_typed_options(source: str) -> list[int]:
    """Lines of ``source`` whose ``add_argument`` takes ``type=int`` (the unchecked integer)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
            and any(k.arg == "type" and isinstance(k.value, ast.Name) and k.value.id == "int" for k in node.keywords)]


#: command lines that keep plain argparse: user-facing examples of the public optax API only
INT_EXCEPTIONS = {"examples/optax_user_script.py": "an example of user code; checks its --steps after parsing"}


def test_no_command_line_takes_an_unchecked_integer():
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            lines = [] if rel in INT_EXCEPTIONS else int_typed_options(path.read_text(encoding="utf-8"))
            if lines:
                found[rel] = lines
    assert not found, f"use foundation.commandline.int_option(low, high) instead of type=int: {found}"


def test_the_option_scan_catches_a_planted_type_int():
    assert int_typed_options("p.add_argument('--steps', type=int, default=3)\n") == [1]
    assert int_typed_options("p.add_argument('--steps', type=int_option(1, 9))\n") == []


@pytest.mark.parametrize(("argv", "needle"), [
    (["--optimizer", "adamw", "--steps", str(2**63)], f"argument --steps: must be >= 1 and <= 1000000, got {2**63}"),
    (["--optimizer", "adamw", "--steps", "0"], "argument --steps: must be >= 1"),
    (["--optimizer", "adamw", "--seed", "-1"], "argument --seed: must be >= 0 and <= 4294967295, got -1"),
    (["--optimizer", "adamw", "--width", "True"], "argument --width: must be a whole number"),
    (["--optimizer", "adamw", "--layers", LONG_INT], "argument --layers: must be >= 1 and <= 1024"),
])
def test_train_refuses_numbers_it_cannot_run(argv, needle, capsys):
    from numerics import train

    assert train.main(argv) == 2
    err = _one_error_line(capsys, "numerics.train")
    assert needle in err, err


@pytest.mark.parametrize(("argv", "needle"), [
    (["--steps", str(10**20)], f"argument --steps: must be >= 2 and <= 1000000, got {10**20}"),
    (["--scale", "1000"], "argument --scale: must be >= 1 and <= 64"),
    (["--lora-steps", "-1"], "argument --lora-steps: must be >= 0"),
    (["--steps", "2"], "the default (steps/2) is 1 with --steps 2"),
])
def test_study_refuses_numbers_it_cannot_run(argv, needle, tmp_path, capsys):
    from numerics import study

    assert study.main([*argv, "--out", str(tmp_path)]) == 2
    err = _one_error_line(capsys, "numerics.study")
    assert needle in err, err


def test_a_one_step_schedule_takes_the_peak():
    """``--steps 1``: the warm-up is cut so that the cosine keeps a step. The planted mistake (optax's schedule
    with the uncut warm-up, what ``numerics.train`` built before) raises inside optax."""
    import optax

    from numerics.train import lr_schedule

    with pytest.raises(ValueError, match="decay_steps"):
        optax.warmup_cosine_decay_schedule(0.0, 1.0, 1, 1, 0.1)
    assert float(lr_schedule(1, 1)(0)) == 1.0
    for steps in (2, 10, 300):  # runs of two steps or more keep their schedule
        mine, theirs = lr_schedule(steps, max(1, steps // 10)), optax.warmup_cosine_decay_schedule(
            0.0, 1.0, max(1, steps // 10), steps, 0.1)
        assert [float(mine(i)) for i in range(steps + 1)] == [float(theirs(i)) for i in range(steps + 1)]


@pytest.mark.e2e  # a whole training run
def test_a_one_step_training_run_works(capsys):
    from numerics import train

    assert train.main(["--optimizer", "adamw", "--steps", "1", "--width", "8", "--heads", "2", "--layers", "1"]) == 0
    out = capsys.readouterr().out
    assert "after 1 steps" in out and "nan" not in out.lower()


# ---- warnings and multi-line errors turned into one line -----------------------------------------------------------
def test_restarts_that_overflow_report_one_line_and_no_warning(capsys):
    """``restarts polar-express --dtype float16 --restarts 4``: the float model overflows (a failing instance,
    reported as bound (a)); NumPy's RuntimeWarnings stay out of stderr. The planted mistake: the estimate alone
    warns."""
    import warnings

    from coeffsearch import registry
    from coeffsearch.restart_arithmetic import make_step
    from coeffsearch.restart_bounds import estimate
    from coeffsearch.restart_model import Model

    steps = [make_step(tuple(str(c) for c in s)) for s in registry.resolve("polar-express").steps]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        estimate(steps, (1, 2, 3, 4), Model("float16", 1, 1e-3))
    assert any(issubclass(w.category, RuntimeWarning) for w in seen)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        status = coeffsearch_main.main(["restarts", "polar-express", "--dtype", "float16", "--restarts", "4"])
    assert status == 2 and not [w for w in seen if issubclass(w.category, RuntimeWarning)]
    err = _one_error_line(capsys, "coeffsearch")
    assert "bound (a) fails" in err


def test_a_malformed_certificate_is_one_line(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"kind": "certificate", "name": "x", "schedule": [["1.5", "-0.5"]], "band": ["x", 1],
                                "precision_bits": "many", "worst_error": 3}))
    assert coeffsearch_main.main(["certify", str(path)]) == 2
    err = _one_error_line(capsys, "coeffsearch")
    assert "more bad field(s)" in err


# ---- complex gradients for real parameters -------------------------------------------------------------------------
def _cm_model():
    import jax.numpy as jnp
    import numpy as np

    from numerics.optimizer import OVPair, QKPair, compositional_muon

    d, h, dh = 8, 2, 2
    rng = np.random.default_rng(0)
    arr = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    params = {"attn": {"wq": arr(d, h * dh), "wk": arr(d, h * dh), "wo": arr(d, h * dh), "wv": arr(h * dh, d)},
              "blocks": [{"mlp": arr(d, 2 * d), "bias": arr(d)}], "emb": arr(5, d)}
    opt = compositional_muon(0.01, pairs=lambda p: [QKPair("attn/wq", "attn/wk", h), OVPair("attn/wo", "attn/wv", h)],
                             adamw_params=lambda path, x: path == "emb")
    grads = {"attn": {k: arr(*v.shape) for k, v in params["attn"].items()},
             "blocks": [{"mlp": arr(d, 2 * d), "bias": arr(d)}], "emb": arr(5, d)}
    return opt, params, grads


def _with_complex(grads, path):
    import jax

    def swap(p, g):
        return g * (1 + 1j) if jax.tree_util.keystr(p) == path else g
    return jax.tree_util.tree_map_with_path(swap, grads)


@pytest.fixture(scope="module")
def cm_model():
    return _cm_model()


LEAVES = {"['attn']['wq']": "attn/wq", "['blocks'][0]['mlp']": "blocks/0/mlp",
          "['blocks'][0]['bias']": "blocks/0/bias", "['emb']": "emb"}


@pytest.mark.parametrize("how", ["eager", "jit", "checked_jit"])
@pytest.mark.parametrize("leaf", list(LEAVES))
def test_a_complex_gradient_for_a_real_parameter_is_refused_naming_it(cm_model, leaf, how):
    """A pair member, a Muon matrix inside a list, a bias and an AdamW leaf: one TypeError naming the path,
    eagerly and while tracing (jax.jit, checked_jit)."""
    import jax

    from numerics.optimizer import checked_jit

    opt, params, grads = cm_model
    update = {"eager": opt.update, "jit": jax.jit(opt.update), "checked_jit": checked_jit(opt.update)}[how]
    with pytest.raises(TypeError, match=rf"the gradient of '{LEAVES[leaf]}' is complex64 but the parameter is "
                                        r"float32: a real parameter takes a real gradient"):
        update(_with_complex(grads, leaf), opt.init(params), params)


def test_without_the_check_a_complex_gradient_is_cast_silently(cm_model, monkeypatch):
    """The planted mistake: with the check switched off, a complex Muon gradient and a complex AdamW gradient
    are taken with no error, and the parameters stay real (the imaginary part dropped or mixed in)."""
    import jax
    import jax.numpy as jnp
    import optax

    from numerics.optimizer import options

    opt, params, grads = cm_model
    monkeypatch.setattr(options, "check_real_gradients", lambda gradients, params: None)
    g = _with_complex(_with_complex(grads, "['blocks'][0]['mlp']"), "['emb']")
    with pytest.warns(DeprecationWarning, match="Casting from complex to real"):
        updates, _ = opt.update(g, opt.init(params), params)
    new = optax.apply_updates(params, updates)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(new))


def test_a_complex_parameter_for_adamw_still_takes_a_complex_gradient():
    import jax.numpy as jnp

    from numerics.optimizer.options import check_real_gradients

    z = jnp.ones((2, 2), jnp.complex64)
    check_real_gradients({"z": z}, {"z": z})  # no error
    with pytest.raises(TypeError, match="'w'"):
        check_real_gradients({"w": z}, {"w": jnp.ones((2, 2), jnp.float32)})


# ---- bools are not integers -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [True, False, 2.0, "2"])
def test_check_whole_refuses_bools_and_non_integers(value):
    import numpy as np

    from foundation.compute.argcheck import check_whole

    with pytest.raises(TypeError, match="f: heads must be a whole number >= 1"):
        check_whole("f", "heads", value)
    with pytest.raises(TypeError, match="the boolean"):
        check_whole("f", "heads", np.bool_(True))
    assert check_whole("f", "heads", np.int32(3)) == 3


def test_the_planted_integer_check_takes_true_as_one():
    """The planted mistake: the old check (``isinstance(heads, int) and heads >= 1``) takes ``True`` as 1."""
    heads = True
    assert isinstance(heads, int) and heads >= 1


@pytest.mark.parametrize("field", ["heads", "kv_heads"])
@pytest.mark.parametrize("kind", ["qk", "ov"])
def test_a_pair_with_bool_heads_is_refused(cm_model, field, kind):
    from numerics.optimizer import OVPair, QKPair, compositional_muon

    _, params, _ = cm_model
    h = {"heads": 2, "kv_heads": 2, field: True}
    pair = (QKPair("attn/wq", "attn/wk", h["heads"], h["kv_heads"]) if kind == "qk"
            else OVPair("attn/wo", "attn/wv", h["heads"], h["kv_heads"]))
    with pytest.raises(TypeError, match=rf"{field} must be a whole number >= 1, got the boolean True"):
        compositional_muon(0.01, pairs=lambda p: [pair]).init(params)


def test_ns_steps_true_is_refused():
    from numerics.optimizer import compositional_muon

    with pytest.raises(TypeError, match="compositional_muon: ns_steps must be a whole number >= 1, got the boolean"):
        compositional_muon(0.01, ns_coeffs=(3.4445, -4.7750, 2.0315), ns_steps=True)


@pytest.mark.parametrize("function", ["gqa_qk", "hybrid_ov"])
def test_the_emitted_layout_functions_refuse_a_bool_head_dim(function):
    """``head_dim=True`` was taken as a width of 1 by the shipped emitted modules (``isinstance(True, int)``)."""
    rng = np.random.default_rng(0)
    w, g = rng.standard_normal((8, 4)), rng.standard_normal((8, 4))
    module, args = (gqa, (w, w, g, g)) if function == "gqa_qk" else (hybrid_ov, (w, w.T, g, g.T))
    with pytest.raises(ValueError, match="head_dim must be a positive int, got True"):
        getattr(module, function)(*args, head_dim=True, eps=0.1)
    getattr(module, function)(*args, head_dim=2, eps=0.1)  # an honest width runs
