"""``python -m derivations.halfsplit`` as a user runs it."""

import subprocess
import sys

import pytest

from derivations import cli, halfsplit, registry
from derivations.cli import adapters_of, main, render
from derivations.printing.validation import ADAPTER_SIZES, MPMATH_TOLERANCE, SIZES, check_sizes, validate_source
from tests.inprocess import share_emit_gate


def run(*args):
    return subprocess.run([sys.executable, "-m", "derivations.halfsplit", *args], capture_output=True, text=True,
                          check=False)


def test_help():
    r = run("--help")
    assert r.returncode == 0 and "--emit" in r.stdout and "--schedule" in r.stdout


@pytest.mark.parametrize("argv,needle", [
    (["--emit", "text"], "Step 3. Lemma 2 (Isometries leave the operator norm)"),
    (["--emit", "latex"], r"\begin{align*}"),
    (["--emit", "numpy"], "def halfsplit_qk(W_Q, W_K, G_Q, G_K, *, eps, damping=0.0):"),
    (["--emit", "jax", "--msign", "svd", "--schedule", "muon"], "(3.4445, -4.775, 2.0315)"),
])
def test_emit_targets(capsys, argv, needle):
    assert main(halfsplit.rule_module(), argv) == 0
    assert needle in capsys.readouterr().out


def test_text_names_side_conditions_and_result(capsys):
    main(halfsplit.rule_module(), ["--emit", "text"])
    out = capsys.readouterr().out
    assert "side condition: U_K has orthonormal columns" in out
    assert "msign(G_M*P_K)" in out and "msign(P_Q*G_M)" in out
    assert "(-epsilon/(2*c_K))*msign(G_Q)" in out


def test_check_table(capsys):
    assert main(halfsplit.rule_module(), ["--check", "--trials", "1"]) == 0
    out = capsys.readouterr().out
    assert "halfsplit.product_step" in out and "steps passed" in out and "FAIL" not in out
    assert "isotropic vs exact" in out


def test_out_file(tmp_path):
    target = tmp_path / "h.py"
    assert main(halfsplit.rule_module(), ["--emit", "jax", "--out", str(target)]) == 0
    assert "def halfsplit_qk(" in target.read_text()


BAD_USAGE = [
    ([], "one of the arguments --emit --check is required"),
    (["--emit", "fortran"], "invalid choice: 'fortran'"),
    (["--emit", "jax", "--schedule", "nope"], "unknown schedule 'nope'"),
    (["--check", "--trials", "0"], "--trials: must be >= 1"),
    (["--emit", "jax", "--out", "/"], "is a directory"),
    (["--emit", "jax", "--check"], "not allowed with argument"),
    (["--emit", "latex", "--standalone"], "--standalone: only with --emit jax, numpy or torch"),
    (["--check", "--standalone"], "--standalone: only with --emit jax, numpy or torch"),
]


def one_line_exit_2(rc, out, err, needle):
    lines = err.strip().splitlines()
    return rc == 2 and out == "" and len(lines) == 1 and needle in lines[0] and "Traceback" not in err


@pytest.mark.parametrize("argv,needle", BAD_USAGE)
def test_bad_usage_is_one_line_and_exit_2(argv, needle, capsys):
    """``main(argv)`` in this process (a fresh interpreter per case re-imports the project)."""
    try:
        rc = main(halfsplit.rule_module(), argv)
    except SystemExit as e:  # what python -m would exit with
        rc = e.code
    out, err = capsys.readouterr()
    assert one_line_exit_2(rc, out, err, needle), (rc, out[:200], err)


@pytest.mark.parametrize("argv", [["--emit", "torch"], ["--emit", "torch", "--standalone"]])
def test_emit_torch_without_torch_is_one_line_and_exit_2(argv, capsys, monkeypatch):
    """PyTorch is optional: where it is not installed (here: said not to be) ``--emit torch`` refuses before any
    work, naming the extra that installs it."""
    monkeypatch.setattr(cli, "torch_installed", lambda: False)
    rc = main(halfsplit.rule_module(), argv)
    out, err = capsys.readouterr()
    assert one_line_exit_2(rc, out, err, "--emit torch: PyTorch is not installed"), (rc, err)
    assert "optimizer-workbench[torch]" in err


@pytest.mark.e2e
def test_bad_usage_in_a_real_process():
    """``python -m derivations.halfsplit`` itself: exit status 2, nothing on stdout, one line on stderr."""
    argv, needle = BAD_USAGE[0]
    r = run(*argv)
    assert one_line_exit_2(r.returncode, r.stdout, r.stderr, needle), r


RULES = registry.rule_names()  # discovered: a new rule module is tested here without being listed


# each rule's whole command line, end to end (every target, --check's table): e2e. In the suite every emitted function
# of every rule is held to its checked formulas by the hostile battery (tests/printing/test_battery.py, float64
# JAX and every NumPy dtype) and to its golden copy (tests/rules/test_golden.py)
@pytest.mark.e2e
@pytest.mark.parametrize("rule", RULES)
def test_every_rule_module_emits_and_checks(rule, capsys, tmp_path, monkeypatch):
    share_emit_gate(monkeypatch)  # each --emit below would rerun the same lemma self-checks
    module = registry.rule_module(rule)
    for target in ("text", "latex"):
        assert main(module, ["--emit", target]) == 0
    if not module.functions():  # a rule of derivations only: code targets are refused in one line
        for target in ("numpy", "jax"):
            assert main(module, ["--emit", target]) == 2
            assert "emits no functions" in capsys.readouterr().err
        assert main(module, ["--check", "--trials", "1"]) == 0
        return
    assert main(module, ["--emit", "numpy"]) == 0
    out = tmp_path / f"{rule}_jax.py"
    assert main(module, ["--emit", "jax", "--out", str(out)]) == 0
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", str(out)], capture_output=True,
                          text=True, check=False)
    assert lint.returncode == 0, lint.stdout
    capsys.readouterr()
    assert main(module, ["--check", "--trials", "1"]) == 0
    assert "FAIL" not in capsys.readouterr().out
    # what --emit and --check validated (the same call: computed once per process): every emitted function at
    # SIZES sizes in float64 and once against mpmath, every stored-layout adapter (JAX) at its sizes, all agree
    functions = [fn.name for fn in module.functions()]
    for target in ("numpy", "jax"):
        results = validate_source(render(module, target), module.functions(), module.scalars, target, rule,
                                  adapters=adapters_of(module))
        entries = [a.entry for a in adapters_of(module) if target == "jax"]
        assert {v.function for v in results} == set(functions + entries)
        assert sorted(v.function for v in results if v.reference == "float64") == sorted(
            functions * SIZES + entries * len(ADAPTER_SIZES))
        assert sorted(v.function for v in results if v.reference == "mpmath") == sorted(functions)
        assert not [v.message for v in results if not v.passed]
        for fn in module.functions():  # against mpmath once, at a size with all dimensions distinct
            row = next(v for v in results if v.reference == "mpmath" and v.function == fn.name)
            assert row.limit == MPMATH_TOLERANCE and row.dims == check_sizes(fn, 1)[0]
            assert len(set(row.dims.values())) == len(row.dims)
        assert all(v.error < 1e-12 for v in results if v.function in entries)  # adapters: layout moves only
