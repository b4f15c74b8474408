"""Hostile inputs to the cross-checker: scale-invariant comparisons (no
scaling of a true difference passes, no scaling of a true identity fails), every listed derivation
checkable, ``relative_difference`` as documented, a cache that is checked before it is trusted, and
``--chain`` refusing files that are not regular files or are too large."""

import dataclasses
import importlib
import json
import os
import pkgutil
import subprocess
import sys

import pytest
from sympy import Integer, Rational, sstr
from sympy.matrices.expressions import MatMul, MatrixSymbol

import derivations
from derivations import halfsplit
from derivations.crosscheck import checker, evaluation, inputs, mutations, rule_lookup, target_cache
from derivations.crosscheck.chain import check_chain_file
from derivations.crosscheck.checker import compare, parse_for
from derivations.crosscheck.cli import main as crosscheck_main
from derivations.crosscheck.identities import identity_target, parse_assumptions
from derivations.crosscheck.verdict import show
from derivations.parsing.targets import target_of
from derivations.vocabulary.algebra import product


def identity(lhs, rhs, *facts, diagnose=True):
    return compare(*identity_target(lhs, rhs, parse_assumptions(list(facts))), diagnose=diagnose)


@pytest.fixture(scope="module")
def query():
    return target_of(halfsplit.query_side(), halfsplit)


# ---- 1. scale-invariant comparisons ----------------------------------------------------------------
@pytest.mark.parametrize("lhs, rhs, scale", [
    ("10^-35*msign(A)", "-10^-35*msign(A)", "-1"),  # tiny opposite multiples: once EQUAL with exit 0
    ("10^-40 A", "2*10^-40 A", "2"),
    ("10^-300 A", "0 A", "0"),  # one side exactly zero, the other not: never equal
    ("A", "10^-40 A", "1.0e-40"),  # a tiny multiple is named as such, not rounded to "0"
])
def test_tiny_true_differences_are_different(lhs, rhs, scale, capsys):
    v = identity(lhs, rhs)
    assert v.verdict == "different" and v.scale == scale, (v.scale, v.diagnosis)
    assert crosscheck_main(["identity", lhs, rhs]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


def test_no_scaling_of_a_true_difference_passes():
    """A relative difference of 1e-20 (above the 1e-30 tolerance) at every scale from 10^-320 to 10^320."""
    for k in range(-320, 321, 20):
        s = f"10^({k})"
        v = identity(f"{s} msign(A)", f"{s} (1 + 10^-20) msign(A)", diagnose=False)
        assert v.verdict == "different", k
        v = identity(f"{s} msign(A)", f"-{s} msign(A)", diagnose=False)
        assert v.verdict == "different", k


def test_a_true_identity_holds_at_every_scale():
    """``msign(A) (s A)ᵀ = s (A Aᵀ)^{1/2}`` for s from 10^-320 to 10^320, and two exactly zero sides."""
    for k in range(-320, 321, 40):
        s = f"10^({k})"
        v = identity(f"msign(A) ({s} A)^T", f"{s} (A A^T)^{{1/2}}", diagnose=False)
        assert v.verdict == "equal", k
    assert identity("0 A", "A - A").verdict == "equal"


def test_rounding_of_a_side_that_cancels_is_not_a_difference(monkeypatch):
    """``msign(A) Aᵀ − (A Aᵀ)^{1/2}`` is zero up to rounding (≈1e-50): equal to an exact zero thanks to the
    re-evaluation at 100 digits, while a true difference of 1e-45 or 1e-60 next to the same rounding is
    different (below about 1e-75 of the cancelling terms a difference is invisible at these precisions)."""
    assert identity("msign(A) A^T - (A A^T)^{1/2}", "0 A A^T").verdict == "equal"
    for k in (45, 60):
        v = identity("msign(A) A^T - (A A^T)^{1/2}", f"10^-{k} A A^T", diagnose=False)
        assert v.verdict == "different", k
    # planted: without the re-evaluation the exact zero and the rounding would be called different
    monkeypatch.setattr(checker, "_agree_rechecked", lambda *args: False)
    assert identity("msign(A) A^T - (A A^T)^{1/2}", "0 A A^T", diagnose=False).verdict == "different"


def test_derivation_mode_compares_relative_to_both_sides(query):
    """A derivation whose result is tiny (the half-split query update scaled by 10^-40): its sign flipped
    and twice it are different, the result itself is equal."""
    tiny = Rational(1, 10 ** 40)
    target = dataclasses.replace(query, expr=product(tiny, query.expr))
    for factor, verdict in ((-1, "different"), (2, "different"), (1, "equal")):
        cand = product(tiny * Integer(factor), query.expr)
        assert compare(target, cand, diagnose=False).verdict == verdict, factor
    flipped = compare(target, parse_for(target, "-10^-40 (-eps/2) msign(G_Q C_K^-1) C_K^-1"))
    assert flipped.verdict == "different" and flipped.scale == "-1"


def test_near_variant_diagnosis_at_any_scale():
    """A near variant of the derived result times 10^-200 (float64 screen) or 10^-400 (below float64: the
    screen runs at 50 digits) is still named, with its factor."""
    lhs = "msign(G (W^T W)^{-1/2}) (W^T W)^{-1/2}"
    for k in (200, 400):
        v = identity(lhs, f"10^-{k} msign(G) (W^T W)^{{-1/2}}", "W: full column rank")
        assert v.verdict == "different"
        assert any(f"1.0e-{k} × the derived result with the whitening" in d for d in v.diagnosis), v.diagnosis


@pytest.mark.parametrize("body, ok", [
    (r"10^{-35} \operatorname{msign}(A) = -10^{-35} \operatorname{msign}(A)", False),
    (r"10^{-40} A = 2 \cdot 10^{-40} A", False),
    (r"10^{-35} \operatorname{msign}(A) A^\top = 10^{-35} (A A^\top)^{1/2} = (10^{-35} A) \operatorname{msign}(A)^\top",
     True),
])
def test_chain_file_compares_relative_to_both_sides(tmp_path, body, ok):
    path = tmp_path / "tiny.md"
    path.write_text(f"$${body}$$\n")
    report = check_chain_file(str(path))
    assert report.ok is ok
    assert crosscheck_main(["--chain", str(path)]) == (0 if ok else 1)


def test_counterexample_values_keep_their_scale(capsys):
    """Values of 1e-40 print as such (not as 0.), values beyond float64 as strings (not inf): valid JSON."""
    assert crosscheck_main(["identity", "10^-40 A", "2*10^-40 A"]) == 1
    text = capsys.readouterr().out
    assert "e-40" in text and "e-41" in text and " 0. " not in text and "[-0. " not in text
    assert crosscheck_main(["identity", "10^400 A", "-10^400 A", "--json"]) == 1
    out = capsys.readouterr().out
    assert "Infinity" not in out and "NaN" not in out
    ce = json.loads(out)["counterexample"]
    assert all(isinstance(x, str) and ("e+399" in x or "e+400" in x) for row in ce["derived"] for x in row)
    assert ce["relative_difference"] == pytest.approx(2.0)
    assert identity("A", "10^400 A").scale == "1.0e+400"


def test_tolerance_fits_the_working_precision():
    assert evaluation.DPS - 30 >= 15 and evaluation.EQUAL_TOL == 10.0 ** (20 - evaluation.DPS)
    assert evaluation.RECHECK_DPS > evaluation.DPS


# ---- a differing candidate whose left side has no scalar factor: no traceback ----------------------
def test_identity_with_two_whitening_factors_is_diagnosed(capsys):
    argv = ["identity", "msign(G (W^T W)^{-1/2}) (W^T W)^{-1/2}", "msign(G) (W^T W)^{-1/2}",
            "--assume", "W: full column rank"]
    assert crosscheck_main(argv) == 1
    assert "whitening C_W^-1 missing" in capsys.readouterr().out
    assert crosscheck_main([*argv, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "different" and any("missing" in d for d in out["diagnosis"])
    ref = identity_target(*argv[1:3], parse_assumptions(["W: full column rank"]))[0].expr
    variants = dict(mutations.mutations(ref, {}))
    assert sstr(variants["every whitening factor missing"]) == "msign(G)"


# ---- 2. every derivation the package builds is checkable -------------------------------------------
def test_every_module_with_derivations_is_a_rule_module():
    found = set()
    for info in pkgutil.iter_modules(derivations.__path__):
        if info.ispkg or info.name.startswith("_") or info.name == "crosscheck":
            continue
        module = importlib.import_module(f"derivations.{info.name}")
        fn = getattr(module, "derivations", None)
        if callable(fn) and getattr(fn, "__module__", None) == module.__name__:
            found.add(info.name)
    assert {"balance", "damped", "halfsplit", "classics"} <= found
    assert found == set(rule_lookup.RULE_MODULES)


def test_every_listed_name_is_accepted(tmp_path, monkeypatch):
    """Builds every derivation once (about 35 s): each name --list prints is found and its target is equal
    to itself."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    names = rule_lookup.derivation_names(use_cache=False)
    assert {"balance.product", "damped.query", "projection.normal_operator"} <= set(names)
    for name in sorted(names):
        der, module = rule_lookup.find_derivation(name)
        assert der.name == name
        target = target_of(der, module)
        assert compare(target, target.expr, diagnose=False).verdict == "equal", name


@pytest.mark.parametrize("name, formula", [
    ("balance.product", "W_Q W_K^T"),
    ("damped.query", "-eps/2 msign(G_Q (W_K^T W_K + lambda I)^{-1/2}) (W_K^T W_K + lambda I)^{-1/2}"),
    ("projection.normal_operator", "W_Q^T W_Q X + X W_K^T W_K"),
])
def test_balance_damped_and_projection_from_the_command_line(name, formula, capsys):
    assert crosscheck_main([name, formula]) == 0, capsys.readouterr().err
    assert crosscheck_main([name, f"2 ({formula})"]) == 1


# ---- 3. relative_difference ------------------------------------------------------------------------
@pytest.mark.parametrize("factor, expected", [("", 1.0), ("/4", 0.5), ("*0", 1.0)])
def test_relative_difference_is_frobenius_relative_to_the_derived_value(factor, expected, capsys):
    """-ε (2×), -ε/4 (½×) and 0 against the derived -ε/2 msign(G_Q C_K⁻¹) C_K⁻¹ (the README's example)."""
    formula = rf"-\varepsilon{factor}\operatorname{{msign}}(G_Q C_K^{{-1}}) C_K^{{-1}}"
    assert crosscheck_main(["halfsplit.query", formula, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["counterexample"]["relative_difference"] == pytest.approx(expected, rel=1e-12)


def test_relative_difference_edge_cases():
    import mpmath
    a = mpmath.matrix([[1, 2], [3, 4]])
    assert evaluation.relative_difference(2 * a, a) == pytest.approx(1.0)
    assert evaluation.relative_difference(-a, a) == pytest.approx(2.0)
    assert evaluation.relative_difference(a * mpmath.mpf("1e-300"), a * mpmath.mpf("2e-300")) == pytest.approx(0.5)
    zero = mpmath.zeros(2, 2)
    assert evaluation.relative_difference(zero, zero) == 0.0
    assert evaluation.relative_difference(a, zero) is None


# ---- 4. the cache is checked before it is trusted --------------------------------------------------
@pytest.fixture
def cache(tmp_path, monkeypatch, query):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target_cache.store_target(query)
    path = target_cache._cache_path()
    assert target_cache.load_target("halfsplit.query") is not None
    return path


def _edit(path, fn):
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    fn(data)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh)


def _doubled(data):
    """The cached result replaced by twice itself, the digest left as it was."""
    value = data["halfsplit.query"]["value"]
    value["expr"] = {"node": "MatMul", "args": [{"num": "2"}, value["expr"]]}


@pytest.mark.parametrize("tamper", [
    lambda data: data["halfsplit.query"].update(source="0123456789abcdef"),  # written by other sources
    _doubled,  # edited contents
    lambda data: data["halfsplit.query"]["value"].update(name="halfsplit.key"),  # another target's name
    lambda data: data.update({"halfsplit.query": dict(data["halfsplit.query"], key="halfsplit.key")}),
    lambda data: data.update({"halfsplit.query": data["halfsplit.query"]["value"]}),  # an old, bare entry
    lambda data: data.update({"halfsplit.query": [1, 2, 3]}),
], ids=["wrong-hash", "altered-target", "wrong-name", "wrong-key", "no-envelope", "not-an-object"])
def test_tampered_entry_is_rejected_and_rebuilt(cache, tamper):
    _edit(cache, tamper)
    assert target_cache.load_target("halfsplit.query") is None
    # the derivation is rebuilt: the right formula is equal (a doubled cached result would say 1/2 ×)
    v = checker.check_derivation("halfsplit.query", "(-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1")
    assert v.verdict == "equal"
    assert target_cache.load_target("halfsplit.query") is not None  # and stored again, valid


def test_planted_trusting_cache_would_use_the_altered_target(cache, monkeypatch):
    """The check above fails without the digest: a cache read that skips it hands back the doubled target."""
    _edit(cache, _doubled)
    monkeypatch.setattr(target_cache, "_valid_entry", lambda key, entry: (True, entry["value"]))
    v = checker.check_derivation("halfsplit.query", "(-epsilon/2)*msign(G_Q*C_K^-1)*C_K^-1")
    assert v.verdict == "different" and v.scale == "1/2"


@pytest.mark.parametrize("content", [b"", b"{\"halfsplit.query\": {\"key\": \"half", b"\xff\xfe", b"[]", b"[" * 100000])
def test_truncated_or_corrupted_cache_file_is_rebuilt(cache, content):
    with open(cache, "wb") as fh:
        fh.write(content)
    assert target_cache.load_target("halfsplit.query") is None
    assert checker.check_derivation("halfsplit.query", "-eps msign(G_Q C_K^-1) C_K^-1").scale == "2"
    assert target_cache.load_target("halfsplit.query") is not None


def test_cached_names_are_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target_cache._cache_write(rule_lookup.NAMES_KEY, {"halfsplit.query": "os"})  # not a rule module
    assert target_cache._cache_read(rule_lookup.NAMES_KEY) == {"halfsplit.query": "os"}
    monkeypatch.setattr(rule_lookup, "RULE_MODULES", ("classics",))
    names = rule_lookup.derivation_names()
    assert "classics.shampoo" in names and "halfsplit.query" not in names


def test_cache_path_that_is_a_fifo_is_ignored(tmp_path):
    """The cache file replaced by a FIFO: the cross-check neither hangs nor fails."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    code = "from derivations.crosscheck import target_cache; print(target_cache._cache_path())"
    path = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()
    os.makedirs(os.path.dirname(path))
    os.mkfifo(path)
    run = subprocess.run([sys.executable, "-m", "derivations.crosscheck", "classics.shampoo", "U V^T"], env=env,
                         capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stderr


# ---- 5. --chain refuses what is not a regular file of bounded size ---------------------------------
def test_chain_on_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "notes.md"
    os.mkfifo(fifo)
    run = subprocess.run([sys.executable, "-m", "derivations.crosscheck", "--chain", str(fifo)],
                         capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 2
    line = f"derivations.crosscheck: error: --chain {str(fifo)!a} is a FIFO (named pipe): give a regular file"
    assert run.stderr.splitlines() == [line]


@pytest.mark.parametrize("make, words", [
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: "/dev/zero", "is a device"),
    (lambda p: _sparse(p, 10 ** 10), "over the limit"),
    (lambda p: _sparse(p, inputs.CHAIN_MAX_BYTES + 1), "over the limit of 1,000,000"),
    (lambda p: None, "No such file"),
])
def test_chain_on_non_regular_or_huge_files(tmp_path, make, words, capsys):
    path = tmp_path / "notes.md"
    where = make(path) or path
    assert crosscheck_main(["--chain", str(where)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def _sparse(path, size):
    with open(path, "wb") as fh:
        fh.truncate(size)


def test_printing_a_long_product_is_linear_in_its_factors(monkeypatch):
    """The verdict prints a product of n factors with no SymPy simplification per factor: SymPy's own printer
    finds a product's precedence by negating (and simplifying) the whole product once per factor, so a
    1,000-factor formula took minutes; here the count of ``MatMul.doit`` calls is the same for 30 and 300
    factors (one precedence, found once)."""
    calls = []
    real = MatMul.doit
    monkeypatch.setattr(MatMul, "doit", lambda self, **kw: calls.append(1) or real(self, **kw))
    counts = []
    for n in (30, 300):
        calls.clear()
        text = show(MatMul(*[MatrixSymbol(f"A_{i % 3}", 4, 4) for i in range(n)]))
        assert text.count("*") == n - 1
        counts.append(len(calls))
    assert counts[0] == counts[1] <= 2, counts
    assert show(-MatMul(*[MatrixSymbol(f"A_{i}", 4, 4) for i in range(3)])) == "-A_0*A_1*A_2"
