"""Hostile command-line input: code injection into emitted modules, tracebacks on
ordinary arguments, closed stdout, and bounds on the work every command-line number sizes.

Every case has a time limit (a hang fails the test). Most cases call the commands' ``main(argv)``:
the injection cases in the test's own process (``tests/inprocess.py``, under a pytest-timeout limit; the
derivations and the emit gate's lemma self-checks are shared, not redone per case), the cases that
bound the work in one subprocess (:func:`run_mains`: a bound that broke must not take the test process
down with it); the commands as a user starts them (``python -m ...``, stdout closed, FIFOs) run in
subprocesses of their own. A case passes when it is refused with exactly one stderr line and exit 2,
or when it succeeds and what it wrote is inert. Emitted modules are imported in a subprocess that
would create a marker file if any injected code ran, and parsed with ``ast`` (the docstring must be one
string constant, and no other top-level expression may exist).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.inprocess import call_mains

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
ONE_STEP = [["3.4445", "-4.7750", "2.0315"]]

#: injection vectors; MARK is replaced by the path of a file the payload would create
VECTORS = {
    "triple-double": 'X"""; import os; open(MARK, "w"); """',
    "triple-single": "X'''; import os; open(MARK, 'w'); '''",
    "backslash-quote": 'X\\"""; open(MARK, "w") #',
    "trailing-backslash": "X\\",
    "newline": 'X\n"""\nopen(MARK, "w")\n"""',
    "carriage-return": 'X\r"""\ropen(MARK, "w")\r"""',
    "line-separator": 'X\u2028"""\u2029open(MARK, "w")\u2028"""',
    "nul": 'X\x00"""; open(MARK, "w"); """',
    "next-line": 'X\x85"""\x85open(MARK, "w")',
}

# Runs the commands' main(argv) in one process; argv[1] is a JSON list of [kind, argv] cases, one
# JSON line out per case: exit status, stderr, stdout (start), or the exception that escaped.
RUNNER = r'''
import json, sys
from tests.inprocess import run_case
for kind, argv in json.loads(open(sys.argv[1]).read()):
    row = run_case(kind, argv, catch=BaseException)
    print(json.dumps({**row, "stdout": row["stdout"][:400000]}), flush=True)
'''


def run_mains(cases, tmp_path, timeout=240):
    """``[(kind, argv)]`` → one result dict per case (see RUNNER)."""
    spec = tmp_path / "cases.json"
    spec.write_text(json.dumps(cases))
    try:
        proc = subprocess.run([sys.executable, "-c", RUNNER, str(spec)], capture_output=True, text=True,
                              timeout=timeout, cwd=tmp_path, env=ENV, check=False)
    except subprocess.TimeoutExpired as exc:
        done = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        last = done.strip().splitlines()[-1][:300] if done.strip() else "none"
        pytest.fail(f"hang: the cases did not finish in {timeout} s; last finished: {last}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(cases), proc.stderr[-3000:]
    return rows


def err_lines(row):
    return [ln for ln in row["stderr"].splitlines() if ln.strip() and "%|" not in ln and "it/s]" not in ln]


def refused(row, needle=""):
    """Exit 2 with exactly one stderr line (containing ``needle``) and no traceback."""
    lines = err_lines(row)
    return (row["rc"] == 2 and not row["escaped"] and len(lines) == 1 and needle in lines[0]
            and "Traceback" not in row["stderr"])


def describe(row):
    return f"{row['argv']!r}: rc={row['rc']} escaped={row['escaped']!r} stderr={row['stderr'][-500:]!r}"


#: ``sh -c CLOSED python ARGS…`` runs python with file descriptor 1 closed, as ``python ARGS >&-`` does
CLOSED = 'exec "$0" "$@" >&-'


def run_cmd(args, timeout=120, close_stdout=False, cwd=None):
    """``python -m …`` as a user runs it; ``close_stdout`` starts it with stdout closed (``>&-``)."""
    if close_stdout:
        return subprocess.run(["sh", "-c", CLOSED, sys.executable, *args], capture_output=True, text=True,
                              timeout=timeout, env=ENV, cwd=cwd, check=False)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=ENV, cwd=cwd,
                          check=False)


def inert(paths, mark: Path, tmp_path):
    """Import every emitted module in a fresh subprocess: no injected code may run (``mark`` must not appear);
    each module's docstring is one string constant and no other top-level expression exists."""
    problems = []
    for path in paths:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        first = tree.body[0]
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            problems.append(f"{path}: the module docstring is not one string constant")
        others = [type(n.value).__name__ for n in tree.body[1:] if isinstance(n, ast.Expr)]
        if others:
            problems.append(f"{path}: top-level expressions besides the docstring: {others}")
        for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
            body = fn.body
            if ast.get_docstring(fn) is not None and any(isinstance(n, ast.Expr) and not isinstance(n.value, ast.Call)
                                                         for n in body[1:]):
                problems.append(f"{path}: {fn.name} has a stray expression after its docstring")
    code = textwrap.dedent("""
        import importlib.util, sys
        for i, path in enumerate(sys.argv[1:]):
            spec = importlib.util.spec_from_file_location(f"emitted_{i}", path)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
    """)
    proc = subprocess.run([sys.executable, "-c", code, *map(str, paths)], capture_output=True, text=True,
                          timeout=240, env=ENV, cwd=tmp_path, check=False)
    if proc.returncode != 0:
        problems.append(f"importing failed: {proc.stderr[-1500:]}")
    if mark.exists():
        problems.append(f"injected code ran: {mark} was created")
    return problems


def _vector(name, mark):
    return VECTORS[name].replace("MARK", repr(str(mark)))


# ---- 1. injection ----------------------------------------------------------------------------------------

def _schedule_files(tmp_path, mark):
    """``(label, path, refused_expected)``: every field of a schedule and a certificate file holding a vector."""
    from coeffsearch.certify import certify
    cert = json.loads(certify(ONE_STEP, "1e-2", "1", "muon1").to_json())
    files = []
    for vname in VECTORS:
        v = _vector(vname, mark)
        variants = {
            "name": ({"name": v, "steps": ONE_STEP}, True),
            "kind": ({"kind": v, "steps": ONE_STEP}, True),
            "parameters/lower": ({"parameters": {"lower": v}, "steps": ONE_STEP}, True),
            "parameters/note": ({"parameters": {"note": v}, "steps": ONE_STEP}, False),
            "steps/0/0": ({"steps": [[v, "-4.7750", "2.0315"]]}, True),
            "report/0": ({"steps": ONE_STEP, "report": [{"note": v}]}, False),
            "provenance+notes+recipe": ({"steps": ONE_STEP, "provenance": v, "notes": [v], "recipe": {v: v}}, False),
            "certificate name": ({**cert, "name": v}, True),
            "certificate method": ({**cert, "method": v}, False),
            "certificate overshoot": ({**cert, "overshoot": {"criterion": v, "u_max": None}}, False),
            "certificate interval": ({**cert, "interval": [v, "1"]}, True),
        }
        for field, (data, refuse) in variants.items():
            path = tmp_path / f"{vname}-{field.replace('/', '_').replace(' ', '_').replace('+', '_')}.json"
            path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            files.append((f"{vname} in {field}", str(path), refuse))
    return files


@pytest.mark.e2e  # imports every emitted module in a fresh Python process (inert)
@pytest.mark.timeout(240)
def test_injection_in_every_schedule_file_field(tmp_path, monkeypatch):
    """A vector in any field either is refused with one line (exit 2) or leaves the emitted module inert."""
    mark = tmp_path / "INJECTED"
    files = _schedule_files(tmp_path, mark)
    cases = []
    for _label, path, _ in files:
        out = path[:-5] + "_mod.py"
        cases += [["halfsplit", ["--emit", "jax", "--schedule", path, "--out", out]],
                  ["halfsplit", ["--emit", "numpy", "--schedule", path, "--out", out[:-3] + "_np.py"]],
                  ["coeffsearch", ["certify", path]]]
    rows = call_mains(cases, tmp_path, monkeypatch)
    bad, emitted = [], []
    for (label, _path, refuse), (jax_row, np_row, cert_row) in zip(files, zip(*[iter(rows)] * 3, strict=False),
                                                                    strict=False):
        for row in (jax_row, np_row):
            out = row["argv"][-1]
            if refuse and not refused(row):
                bad.append(f"{label}: expected a one-line refusal: {describe(row)}")
            elif not refuse and row["rc"] != 0:
                bad.append(f"{label}: a field nothing reads was not ignored: {describe(row)}")
            elif row["rc"] == 0:
                emitted.append(out)
        cert_ok = refused(cert_row) or (cert_row["rc"] in (0, 1) and not err_lines(cert_row)
                                        and len(cert_row["stdout"].splitlines()) <= 6)
        if not cert_ok or cert_row["escaped"] or "Traceback" in cert_row["stderr"]:
            bad.append(f"{label}: coeffsearch certify: {describe(cert_row)} stdout={cert_row['stdout'][:300]!r}")
    assert not bad, "\n".join(bad)
    assert emitted, "no case emitted a module: the inert-module check did not run"
    assert not (problems := inert(emitted, mark, tmp_path)), "\n".join(problems)


@pytest.mark.e2e  # imports every emitted module in a fresh Python process (inert)
@pytest.mark.timeout(240)
def test_injection_in_string_arguments(tmp_path, monkeypatch):
    """Vectors as --schedule (a name, and the path of an existing file), --out, and coeffsearch's string
    arguments: a one-line refusal (exit 2), or success that wrote a normal, inert module."""
    mark = tmp_path / "INJECTED"
    sched = json.dumps({"steps": ONE_STEP})
    cases = [["halfsplit", ["--emit", "jax", "--schedule", "muon"]]]  # the normal emission, for comparison
    for vname in VECTORS:
        v = _vector(vname, mark)
        fname = v.replace("/", "_")  # a file name can hold everything else but NUL
        cases += [["halfsplit", ["--emit", "jax", "--schedule", v]],
                  ["coeffsearch", ["certify", v]],
                  ["coeffsearch", ["validate", "muon", "--shape", v]],
                  ["coeffsearch", ["minimax", "--steps", "2", "--lower", v]],
                  ["coeffsearch", ["minimax", "--steps", "2", "--lower", "1e-2" + v[1:2]]],
                  ["coeffsearch", ["certify", "muon", "--steps", "1", "--lower", "1e-2", "--upper", v]]]
        if "\x00" not in v:
            path = tmp_path / (fname + ".json")
            path.write_text(sched)
            cases += [["halfsplit", ["--emit", "jax", "--schedule", str(path)]],
                      ["coeffsearch", ["certify", str(path)]]]
        cases += [["halfsplit", ["--emit", "jax", "--schedule", "muon", "--out", str(tmp_path / (fname + "_out.py"))]],
                  ["coeffsearch", ["certify", "muon", "--steps", "1", "--lower", "1e-2", "--json", "--out",
                                   str(tmp_path / (fname + ".cert.json"))]]]
    normal, *rows = call_mains(cases, tmp_path, monkeypatch)
    assert normal["rc"] == 0 and "def halfsplit_qk(" in normal["stdout"]
    bad, emitted = [], []
    for row in rows:
        argv = row["argv"]
        if "--json" in argv and row["rc"] == 0:
            json.loads(Path(argv[-1]).read_text(encoding="utf-8"))
        elif "--out" in argv and row["rc"] == 0:  # a hostile path of the output file: the module itself is normal
            if Path(argv[-1]).read_text(encoding="utf-8") != normal["stdout"]:
                bad.append(f"--out {argv[-1]!r}: the module differs from the normal emission")
            emitted.append(argv[-1])
        elif not refused(row):
            bad.append(f"expected a one-line refusal: {describe(row)}")
        if row["escaped"]:
            bad.append(f"exception escaped: {describe(row)}")
    assert not bad, "\n".join(bad)
    assert not (problems := inert(emitted, mark, tmp_path)), "\n".join(problems)


@pytest.fixture(scope="module")
def halfsplit_rule():
    from derivations import halfsplit
    return halfsplit.rule_module()


def _unchecked_schedule(name, source):
    """A Schedule whose name skipped the check where schedules are made (as if that check were gone): what
    reaches the printers must still be escaped."""
    from foundation.schedule import Schedule
    schedule = Schedule("placeholder", (("1.5", "-0.5"),), source)
    object.__setattr__(schedule, "name", name)  # frozen: bypass __post_init__'s check_name on purpose
    return schedule


@pytest.mark.e2e  # imports every emitted module in a fresh Python process (inert)
def test_printers_escape_what_bypasses_validation(tmp_path, halfsplit_rule):
    """Defence in depth: emit_jax/emit_numpy called directly with hostile title, command, schedule name and
    source (no entry validation) write inert modules whose docstring holds the text exactly."""
    from derivations.printing.jax_printer import emit_jax
    from derivations.printing.numpy_printer import emit_numpy
    mark = tmp_path / "INJECTED"
    functions = halfsplit_rule.functions()
    paths, expected = [], []
    for i, vname in enumerate(VECTORS):
        v = _vector(vname, mark)
        jax_src = emit_jax(v, f"cmd {v}", functions, _unchecked_schedule(v, f"file {v}"), "newton_schulz",
                           halfsplit_rule.scalars)
        np_src = emit_numpy(v, f"cmd {v}", functions, halfsplit_rule.scalars)
        for kind, src in (("jax", jax_src), ("numpy", np_src)):
            path = tmp_path / f"direct_{i}_{kind}.py"
            path.write_text(src, encoding="utf-8")
            paths.append(path)
            expected.append(v)
    for path, v in zip(paths, expected, strict=False):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        assert doc.startswith(v), (path, doc[:200])  # the title, exactly as given
        assert f"cmd {v}" in doc
    assert not (problems := inert(paths, mark, tmp_path)), "\n".join(problems)


def test_docstring_guard_refuses_a_breakout(monkeypatch, halfsplit_rule):
    """Planted: without the escaping, the header check still refuses the module (it would run code)."""
    import derivations.printing.jax_printer as J
    from derivations.printing.codegen import UnsafeText, check_identifier, docstring_fragment
    monkeypatch.setattr(J, "docstring_fragment", str)
    with pytest.raises(UnsafeText, match="one string literal|does not parse"):
        J.emit_jax("T", "c", halfsplit_rule.functions(), _unchecked_schedule('X"""; import os; """', "s"),
                   "newton_schulz", halfsplit_rule.scalars)
    for name in ("x; import os", "def", "a b", "é", ""):
        with pytest.raises(UnsafeText):
            check_identifier(name, "name")
    for text in VECTORS.values():
        assert eval('"""' + docstring_fragment(text) + '\n"""') == text + "\n"  # the literal evaluates back to the text


def test_normal_emission_is_unchanged_by_the_escaping(monkeypatch, tmp_path, halfsplit_rule):
    """The escaping and the checks are the identity on normal input: byte-identical modules without them."""
    import derivations.cli as C
    import derivations.printing.jax_printer as J
    import derivations.printing.numpy_printer as N
    path = tmp_path / "pe-file.json"
    path.write_text(json.dumps({"name": "my-schedule_2", "steps": ONE_STEP}))
    specs = [("jax", "polar-express-5"), ("jax", "muon"), ("jax", str(path)), ("numpy", "polar-express-5")]
    before = [C.render(halfsplit_rule, t, schedule_name=s) for t, s in specs]
    def ident(text, *args):
        return text
    for module in (J, N):
        monkeypatch.setattr(module, "docstring_fragment", str)
        monkeypatch.setattr(module, "check_docstring", ident)
        monkeypatch.setattr(module, "check_identifier", ident)
    monkeypatch.setattr(J.shlex, "quote", str)
    after = [C.render(halfsplit_rule, t, schedule_name=s) for t, s in specs]
    assert before == after


# ---- 2. tracebacks on ordinary arguments --------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--steps", "8", "--lower", "1e-2"], ["--steps", "6", "--lower", "0.1"],
                                  ["--steps", "4", "--lower", "0.99999999"],
                                  ["--steps", "12", "--lower", "1e-2", "--degree", "3"],
                                  ["--steps", "10", "--lower", "1e-2", "--degree", "7"]])
@pytest.mark.timeout(240)
def test_minimax_converged_interval_is_a_result(argv, tmp_path, monkeypatch):
    out = tmp_path / "s.json"
    r, = call_mains([["coeffsearch", ["minimax", *argv, "--json", "--out", str(out)]]], tmp_path, monkeypatch)
    assert r["rc"] == 0 and not r["escaped"] and "Traceback" not in r["stderr"], describe(r)
    doc = json.loads(out.read_text())
    steps = int(argv[1])
    assert len(doc["steps"]) == steps and any(row["interval_collapsed"] for row in doc["report"])
    first = next(i for i, row in enumerate(doc["report"]) if row["interval_collapsed"])
    assert all(row["interval_collapsed"] for row in doc["report"][first:])
    r, = call_mains([["coeffsearch", ["certify", str(out), "--lower", argv[3]]]], tmp_path, monkeypatch)
    assert r["rc"] == 0, describe(r)  # a converged schedule certifies like any other


def test_minimax_report_says_where_the_interval_converged(tmp_path, monkeypatch):
    r, = call_mains([["coeffsearch", ["minimax", "--steps", "6", "--lower", "0.1"]]], tmp_path, monkeypatch)
    assert r["rc"] == 0 and "converged" in r["stdout"] and "limit polynomial" in r["stdout"], describe(r)


@pytest.mark.e2e
def test_validate_rank_one_and_oversized_shapes(tmp_path):
    rows = run_mains([["coeffsearch", ["validate", "muon", "--shape", "1x1", "--dtype", "float64"]],
                      ["coeffsearch", ["validate", "muon", "--shape", "1x7", "--dtype", "float32"]],
                      ["coeffsearch", ["validate", "muon", "--shape", "100000x100000"]],
                      ["coeffsearch", ["validate", "muon", "--shape", "1x17179869184"]],
                      ["coeffsearch", ["validate", "muon", "--shape", "99999999999999999999999x1"]]], tmp_path)
    for row in rows[:2]:
        assert row["rc"] == 0 and not row["escaped"] and "yes" in row["stdout"], describe(row)
    assert refused(rows[2], "multiply-adds"), describe(rows[2])
    assert refused(rows[3], "memory"), describe(rows[3])
    assert refused(rows[4], "--shape"), describe(rows[4])


def test_memory_estimate_is_compared_with_what_is_available():
    from coeffsearch.validate import available_bytes, check_size, estimated_bytes
    assert available_bytes() is None or available_bytes() > 0
    check_size((256, 512), 3, available=estimated_bytes((256, 512), 3))
    with pytest.raises(ValueError, match="GiB of memory"):
        check_size((256, 512), 3, available=estimated_bytes((256, 512), 3) - 1)


# ---- 3. closed stdout -------------------------------------------------------------------------------------

CLOSED_STDOUT = [
    ["-m", "derivations.halfsplit", "--emit", "text"],
    ["-m", "derivations.halfsplit", "--help"],
    ["-m", "coeffsearch", "minimax", "--steps", "2", "--lower", "1e-2"],
    ["-m", "coeffsearch", "certify", "muon"],
    ["-m", "coeffsearch", "--help"],
    ["-m", "derivations.crosscheck", "--list"],
    ["-m", "derivations.crosscheck", "--help"],
    ["-m", "paramcount", "--hidden", "64", "--layers", "2", "--vocab", "100", "--ffn", "256",
     "--heads", "4", "--kv-heads", "4"],
    ["-m", "derivations.classics"],
    ["-m", "derivations.regenerate", "--check"],
    ["-m", "benchmarks.coeffsearch", "--repeats", "1"],
    ["-m", "benchmarks.sylvester"],
    ["-m", "numerics.train", "--help"],
]


@pytest.mark.e2e
def test_closed_stdout_is_one_line_and_exit_2(tmp_path):
    procs = []
    for i in range(0, len(CLOSED_STDOUT), 2):  # two at a time (two cores)
        batch = [subprocess.Popen(["sh", "-c", CLOSED, sys.executable, *args], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, env=ENV, cwd=tmp_path)
                 for args in CLOSED_STDOUT[i:i + 2]]
        for args, p in zip(CLOSED_STDOUT[i:i + 2], batch, strict=False):
            try:
                _, err = p.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                p.kill()
                pytest.fail(f"hang with stdout closed: {args}")
            procs.append((args, p.returncode, err))
    bad = [f"{' '.join(a)}: rc={rc} stderr={err[-400:]!r}" for a, rc, err in procs
           if not (rc == 2 and len(err.strip().splitlines()) == 1 and "stdout is closed" in err)]
    assert not bad, "\n".join(bad)


@pytest.mark.e2e
def test_closed_stdout_with_out_file_still_works(tmp_path):
    out = tmp_path / "m.py"
    r = run_cmd(["-m", "derivations.halfsplit", "--emit", "numpy", "--out", str(out)], close_stdout=True)
    assert r.returncode == 0 and r.stderr == "" and "def halfsplit_qk" in out.read_text()


@pytest.mark.e2e
def test_output_to_a_fifo_nobody_reads_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    for args in (["-m", "derivations.halfsplit", "--emit", "text", "--out", str(fifo)],
                 ["-m", "coeffsearch", "band", "--steps", "2", "--lower", "0.1", "--slope", "2", "--json", "--out",
                  str(fifo)]):
        try:
            r = run_cmd(args, timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"waits forever on a FIFO nobody reads: {args}")
        err = r.stderr.strip().splitlines()  # a progress bar may come first
        assert r.returncode == 2 and "Traceback" not in r.stderr, r
        assert "FIFO (named pipe) that no process is reading" in err[-1], r


@pytest.mark.e2e
def test_output_to_a_fifo_being_read_is_written(tmp_path):
    from foundation.commandline import write_text_file
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received = tmp_path / "received"
    with received.open("w") as sink:  # not a pipe back to this process: that would fill while the writer blocks
        reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
    for _ in range(200):  # the reader must have opened the FIFO first, or the write is refused (no reader yet)
        try:
            write_text_file(str(fifo), "x" * 200_000 + "\n", "--out")  # larger than a pipe buffer: blocking writes
            break
        except ValueError as exc:
            assert "no process is reading" in str(exc)
            reader.poll()
            time.sleep(0.05)
    reader.wait(timeout=30)
    assert received.read_text() == "x" * 200_000 + "\n"


def test_input_files_must_be_regular(tmp_path):
    from foundation.commandline import FileRefused, read_regular_file
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (tmp_path, "a directory"), ("/dev/zero", "a device")):
        with pytest.raises(FileRefused, match=kind):
            read_regular_file(str(path), 1000, "--chain")
    (tmp_path / "big").write_bytes(b"x" * 1001)
    with pytest.raises(FileRefused, match="over the limit of 1,000"):
        read_regular_file(str(tmp_path / "big"), 1000, "--chain")


# ---- 4. bounds on the work ---------------------------------------------------------------------------------

@pytest.mark.e2e
def test_every_work_size_is_bounded(tmp_path):
    from foundation.polynomial import MAX_SCHEDULE_STEPS
    long_steps = [ONE_STEP[0]] * 100_000
    files = {"long.json": {"steps": long_steps}, "just-over.json": {"steps": [ONE_STEP[0]] * (MAX_SCHEDULE_STEPS + 1)},
             "wide.json": {"steps": [["1.5"] + ["0"] * 1000]},
             "long-cert.json": {"kind": "certificate", "name": "x", "schedule": long_steps, "interval": ["1e-3", "1"]}}
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    (tmp_path / "huge.json").write_text('{"steps": [["1.5", "-0.5"]], "pad": "' + "x" * (5 * 2**20) + '"}')
    os.mkfifo(tmp_path / "fifo.json")
    cases = [
        (["halfsplit", ["--check", "--trials", "1e20"]], "--trials"),
        (["halfsplit", ["--check", "--trials", "100000000000000000000"]], "<= 1000"),
        (["coeffsearch", ["minimax", "--steps", "8", "--lower", "1e-2", "--degree", "101"]], "<= 15"),
        (["coeffsearch", ["minimax", "--steps", "8", "--lower", "1e-2", "--dps", "1000000"]], "<= 200"),
        (["coeffsearch", ["minimax", "--steps", "101", "--lower", "1e-2"]], "<= 100"),
        (["coeffsearch", ["band", "--steps", "101", "--lower", "0.1", "--slope", "2"]], "<= 100"),
        (["coeffsearch", ["certify", "muon", "--steps", "101"]], "<= 100"),
        (["coeffsearch", ["validate", "muon", "--batch", "65"]], "<= 64"),
        (["coeffsearch", ["compare", *["muon"] * 17]], "at most 16"),
        (["bench-coeffsearch", ["--repeats", "0"]], "--repeats"),
        (["bench-coeffsearch", ["--repeats", "101"]], "--repeats"),
    ]
    for name in ("long.json", "just-over.json", "long-cert.json"):
        path = str(tmp_path / name)
        cases += [(["coeffsearch", ["validate", path]], "at most 100"),
                  (["coeffsearch", ["certify", path]], "at most 100"),
                  (["halfsplit", ["--emit", "jax", "--schedule", path]], "at most 100")]
    for name, needle in (("wide.json", "at most 32"), ("huge.json", "over the limit of"), ("fifo.json", "not a file")):
        cases += [(["coeffsearch", ["certify", str(tmp_path / name)]], needle),
                  (["halfsplit", ["--emit", "jax", "--schedule", str(tmp_path / name)]], needle)]
    helps = [["coeffsearch", ["minimax", "--help"]], ["coeffsearch", ["validate", "--help"]], ["halfsplit", ["--help"]]]
    rows = run_mains([c for c, _ in cases] + helps, tmp_path)  # one subprocess for both
    rows, help_rows = rows[:len(cases)], rows[len(cases):]
    bad = [describe(row) for row, (_, needle) in zip(rows, cases, strict=True) if not refused(row, needle)]
    assert not bad, "\n".join(bad)
    assert "1 to 15" in help_rows[0]["stdout"] and "1 to 200" in help_rows[0]["stdout"]
    assert "1 to 100" in help_rows[0]["stdout"] and "2**36" in help_rows[1]["stdout"]
    assert "1 to 1000" in help_rows[2]["stdout"]


def test_one_schedule_length_bound():
    """The schedule files' bound is MAX_SCHEDULE_STEPS = 100, the number the JAX routines refuse above."""
    from foundation.polynomial import MAX_SCHEDULE_STEPS, ScheduleError, validate_steps
    assert MAX_SCHEDULE_STEPS == 100
    jax_msign = pytest.importorskip("foundation.compute.jax_msign")
    if hasattr(jax_msign, "MAX_SCHEDULE_STEPS"):
        assert jax_msign.MAX_SCHEDULE_STEPS == MAX_SCHEDULE_STEPS
    validate_steps([ONE_STEP[0]] * MAX_SCHEDULE_STEPS)
    with pytest.raises(ScheduleError, match="at most 100"):
        validate_steps([ONE_STEP[0]] * (MAX_SCHEDULE_STEPS + 1))
