"""Hostile-input corpus: bad and extreme inputs to every emitted function and both command lines.

Each group of cases against the emitted code runs in one subprocess with a time limit, so a hang (a
NaN/Inf reaching LAPACK used to spin forever in ``dgesdd``, where no signal reaches Python) fails the
test instead of stalling CI; the command-line cases, which call ``main(argv)`` and never reach LAPACK
with a NaN, run in the test's own process under a pytest-timeout limit (a fresh interpreter would
import the project and derive the half-split rule again first). A script prints
one JSON line per case; a case passes when the input is refused with one clear line naming the
argument, or when the result is the documented one. Planted mistakes (the old Newton–Schulz
normalisation, the dense Sylvester solve below its resolvable damping) show the checks can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HELPERS = '''
import json, sys
def report(name, ok, detail=""):
    print(json.dumps({"case": name, "ok": bool(ok), "detail": str(detail)[:400]}), flush=True)
def raises(name, fn, exc, text):
    try:
        fn()
    except exc as e:
        msg = str(e)
        report(name, text in msg and "\\n" not in msg, msg)
        return
    except Exception as e:
        report(name, False, "traceback: " + repr(e))
        return
    report(name, False, "no error: the input was accepted")
def holds(name, fn):
    try:
        ok, detail = fn()
    except Exception as e:
        report(name, False, "traceback: " + repr(e))
        return
    report(name, ok, detail)
'''

JAX_CASES = '''
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, sys.argv[1])
import halfsplit_jax as H, sylvester_jax as S, joint_jax as J, gqa_jax as Q, hybrid_ov_jax as O
import coeffsearch
from foundation.compute import jax_runtime as R  # the routines the emitted modules import
rng = np.random.default_rng(0)
d, dh = 12, 4
W_Q, W_K, G_Q, G_K = (jnp.asarray(rng.standard_normal((2, d, dh))) for _ in range(4))
G_M = jnp.asarray(rng.standard_normal((2, d, d)))
inf, nan = jnp.inf, jnp.nan

# 1. a NaN/Inf never reaches LAPACK: a named error outside jit, an all-NaN result inside
for m in ("svd", "newton_schulz"):
    raises(f"halfsplit_qk Inf G_Q msign={m}", lambda: H.halfsplit_qk(W_Q, W_K, G_Q.at[0, 0, 0].set(inf), G_K,
           eps=0.1, msign=m), ValueError, "G_Q contains NaN or Inf")
    raises(f"halfsplit_qk Inf W_K msign={m}", lambda: H.halfsplit_qk(W_Q, W_K.at[1, 2, 3].set(-inf), G_Q, G_K,
           eps=0.1, msign=m), ValueError, "W_K contains NaN or Inf")
    raises(f"halfsplit_v NaN W_O msign={m}", lambda: H.halfsplit_v(W_Q.at[0, 0, 0].set(nan), G_Q.mT, eps=0.1,
           msign=m), ValueError, "W_O contains NaN or Inf")
    raises(f"isotropic_qk Inf W_K msign={m}", lambda: H.isotropic_qk(W_Q, W_K.at[0, 0, 0].set(inf), G_Q, G_K,
           eps=0.1, msign=m), ValueError, "W_K contains NaN or Inf")
    raises(f"joint_qk Inf G_K msign={m}", lambda: J.joint_qk(W_Q, W_K, G_Q, G_K.at[0, 1, 1].set(inf), eps=0.1,
           msign=m), ValueError, "contains NaN or Inf")
    raises(f"gqa_qk Inf G_Q msign={m}", lambda: Q.gqa_qk(W_Q[0, :, :4].repeat(2, 1), W_K[0], G_Q[0].repeat(2, 1)
           .at[0, 0].set(inf), G_K[0], head_dim=4, eps=0.1, msign=m), ValueError, "contains NaN or Inf")
for solver in ("structured", "dense"):
    raises(f"sylvester_qk Inf W_K solver={solver}", lambda: S.sylvester_qk(W_Q, W_K.at[0, 0, 0].set(inf), G_M,
           eps=0.1, damping=1.0, msign="svd", solver=solver), ValueError, "W_K contains NaN or Inf")
jitted = jax.jit(lambda a, b, c, e: H.halfsplit_qk(a, b, c, e, eps=0.1, msign="svd"))
holds("halfsplit_qk under jit with Inf: all-NaN update, no hang",
      lambda: (bool(np.isnan(np.asarray(jitted(W_Q, W_K, G_Q.at[0, 0, 0].set(inf), G_K)[0])).all()), ""))
vm = jax.vmap(lambda a, b, c: S.sylvester_qk(a, b, c, eps=0.1, damping=1e-2, msign="svd")[0])
def vmapped():
    out = np.asarray(vm(W_Q, W_K.at[0, 0, 0].set(inf), G_M))
    return bool(np.isnan(out[0]).all() and np.isfinite(out[1]).all()), "NaN for the bad example only"
holds("sylvester_qk under vmap with Inf: that example NaN, the other finite", vmapped)
raises("shape checks run under jit", lambda: jax.jit(lambda a: H.halfsplit_qk(a, W_K, G_Q, G_K, eps=0.1))(
       W_Q[..., :3]), ValueError, "W_K has d_h = 4")

# 2. rank-deficient or zero partners at damping 0: the minimum-norm update, never 1e152
for m in ("svd", "newton_schulz"):
    holds(f"zero W_O, damping 0, msign={m}: zero update", lambda: (
        float(jnp.abs(H.halfsplit_v(jnp.zeros((d, dh)), G_Q[0].mT, eps=0.1, msign=m)).max()) == 0.0, ""))
    def zero_column():
        wk = W_K[0].at[:, 0].set(0.0)
        gq = G_M[0] @ wk  # a chain-rule gradient has no component along the partner's null space
        dq, _ = H.halfsplit_qk(W_Q[0], wk, gq, G_K[0], eps=0.1, msign=m)
        step = float(jnp.linalg.norm(dq @ wk.T, 2))
        return (abs(step / 0.05 - 1) < 0.2 and float(jnp.abs(dq[:, 0] @ jnp.eye(d)).max()) < 1.0,
                f"|dW_Q W_K^T| = {step}")
    holds(f"zero column in W_K, damping 0, msign={m}: step eps/2, finite", zero_column)

# 3. scale: gradients or weights times 1e-30 ... 1e30, float32 and float64, equal the unscaled update
for dt, tol in (("float32", 2e-3), ("float64", 1e-9)):
    args = [x.astype(dt) for x in (W_Q, W_K, G_Q, G_K)]
    ref = np.asarray(H.halfsplit_qk(*args, eps=0.1)[0], np.float64)
    for s in (1e-30, 1e-14, 1e30):
        for which in ("gradients", "weights"):
            def scaled(s=s, which=which, args=args, ref=ref, tol=tol):
                a = [x * s for x in args[:2]] + args[2:] if which == "weights" else args[:2] + [x * s for x in args[2:]]
                out = np.asarray(H.halfsplit_qk(*a, eps=0.1)[0], np.float64) * (s if which == "weights" else 1.0)
                err = float(np.abs(out - ref).max() / np.abs(ref).max())
                return err < tol, f"relative change {err:.2e}"
            holds(f"{which} x {s:g} in {dt}: same update", scaled)
def planted_old_normalisation():
    """The old ``X / (‖X‖_F + 1e-7)`` leaves gradients x 1e-14 far below the band: the check catches it."""
    x = np.asarray(G_Q[0]) * 1e-14
    x = x / (np.linalg.norm(x) + 1e-7)
    for c in coeffsearch.get("polar-express-5").as_floats():
        a = x.T @ x
        x = c[0] * x + x @ (c[1] * a + c[2] * a @ a)
    top = float(np.linalg.svd(x, compute_uv=False).max())
    return top < 0.5, f"largest singular value {top:.2e} (band is about [0.9, 1.1])"
holds("planted: the old normalisation is caught", planted_old_normalisation)

# 4. Sylvester at small damping: float32 accurate (factors' bases); dense refuses what it cannot resolve
w64 = [jnp.asarray(rng.standard_normal((48, 8))) for _ in range(2)]
gm = jnp.asarray(rng.standard_normal((48, 48)))
errors = {}
for lam in (1e-4, 1e-6, 1e-8):
    ref = np.asarray(S.sylvester_qk(*w64, gm, eps=0.1, damping=lam, msign="svd")[0])
    out = np.asarray(S.sylvester_qk(*(x.astype("float32") for x in (*w64, gm)), eps=0.1, damping=lam, msign="svd")[0])
    errors[lam] = float(np.abs(out - ref).max() / np.abs(ref).max())
holds("sylvester_qk float32 at damping 1e-4..1e-8", lambda: (max(errors.values()) < 1e-4, json.dumps(errors)))
raises("sylvester_qk dense float32 damping 1e-6 refused", lambda: S.sylvester_qk(
       *(x.astype("float32") for x in (*w64, gm)), eps=0.1, damping=1e-6, msign="svd", solver="dense"),
       ValueError, "below what solver='dense' resolves")
def planted_dense():
    ref = np.asarray(S.sylvester_qk(*w64, gm, eps=0.1, damping=1e-6, msign="svd")[0])
    d32 = -0.1 * R.msign_svd(gm.astype("float32"))
    out = np.asarray(R.sylvester_products(*(x.astype("float32") for x in w64), 1e-6, d32, "dense")[0])
    err = float(np.abs(out - ref).max() / np.abs(ref).max())
    return not err <= 1e-2, f"dense float32 error {err:.2e} at damping 1e-6"  # NaN (some LAPACK builds) fails too
holds("planted: the unguarded dense solve is caught by the accuracy check", planted_dense)
holds("sylvester_qk float64 damping 1e-300: bounded", lambda: (
    float(jnp.abs(S.sylvester_qk(*w64, gm, eps=0.1, damping=1e-300)[0]).max()) < 1.0, ""))

# 6. messages name the argument
for bad, what in ((None, "None"), (jnp.ones(3), "array"), ("0.1", "string"), (True, "bool")):
    raises(f"eps = {what}", lambda bad=bad: H.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=bad), TypeError,
           "eps must be a real number")
raises("damping = -1", lambda: H.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=0.1, damping=-1.0), ValueError, "damping")
lists = [np.asarray(x[0]).tolist() for x in (W_Q, W_K, G_Q, G_K)]
raises("lists into gqa_qk", lambda: Q.gqa_qk(*lists, head_dim=4, eps=0.1), TypeError, "W_Q must be an array")
raises("lists into joint_qk", lambda: J.joint_qk(*lists, eps=0.1), TypeError, "W_Q must be an array")
raises("lists into hybrid_ov", lambda: O.hybrid_ov(lists[0], np.asarray(lists[1]).T.tolist(), lists[2],
       np.asarray(lists[3]).T.tolist(), head_dim=4, eps=0.1), TypeError, "must be an array")
raises("gqa_key stacked rows vs group_size", lambda: Q.gqa_key(jnp.concatenate([W_Q[0]] * 3), G_K[0], eps=0.1,
       group_size=2), ValueError, "group_size = 2")
raises("complex input", lambda: H.halfsplit_qk(W_Q.astype(complex), W_K, G_Q, G_K, eps=0.1), TypeError,
       "W_Q must be real floating point")

# 5. schedules are data: a second schedule of the same shape does not recompile
def compilations():
    before = H._halfsplit_qk._cache_size()
    for name in ("muon", "cesista", "polar-express-5"):
        H.halfsplit_qk(W_Q, W_K, G_Q, G_K, eps=0.1, schedule=coeffsearch.get(name).as_floats())
    new = H._halfsplit_qk._cache_size() - before
    return new <= 1, f"{new} new compilation(s) for three 5-step schedules"
holds("three schedules of one shape: at most one compilation", compilations)
'''

X64_OFF_CASES = '''
import numpy as np, jax
sys.path.insert(0, sys.argv[1])
import halfsplit_jax as H
w = np.random.default_rng(0).standard_normal((6, 2))
raises("float64 input with x64 off", lambda: H.halfsplit_qk(w, w, w, w, eps=0.1), TypeError, "x64 mode is off")
holds("float32 input with x64 off", lambda: (str(H.halfsplit_qk(*(w.astype("float32"),) * 4, eps=0.1)[0].dtype)
      == "float32", ""))
'''

NUMPY_CASES = '''
import inspect, re
import numpy as np
sys.path.insert(0, sys.argv[1])
import halfsplit_numpy as H, sylvester_numpy as S, gqa_numpy as Q
rng = np.random.default_rng(0)
W = [rng.standard_normal((8, 3)) for _ in range(4)]
raises("numpy: G_Q with an extra row", lambda: H.halfsplit_qk(W[0], W[1], np.vstack([W[2], W[2][:1]]), W[3], eps=0.1),
       ValueError, "G_Q has d = 9")
raises("numpy: negative eps", lambda: H.halfsplit_qk(*W, eps=-0.1), ValueError, "eps must be finite and >= 0")
raises("numpy: negative damping", lambda: H.halfsplit_qk(*W, eps=0.1, damping=-1), ValueError, "damping")
raises("numpy: d < d_h", lambda: H.halfsplit_qk(*(w.T for w in W), eps=0.1), ValueError, "are the weights transposed")
raises("numpy: complex input", lambda: H.halfsplit_qk(W[0] + 1j, *W[1:], eps=0.1), TypeError, "real numeric")
raises("numpy: Inf gradient (never reaches the SVD)", lambda: H.halfsplit_qk(W[0], W[1], np.full((8, 3), np.inf), W[3],
       eps=0.1), ValueError, "G_Q contains NaN or Inf")
raises("numpy: eps None", lambda: H.halfsplit_qk(*W, eps=None), TypeError, "eps must be a real number")
raises("numpy: sylvester damping 0", lambda: S.sylvester_qk(W[0], W[1], np.eye(8), eps=0.1, damping=0.0),
       ValueError, "damping must be > 0")
raises("numpy: gqa_key stacked rows vs group_size", lambda: Q.gqa_key(np.vstack([W[0]] * 3), W[1], eps=0.1,
       group_size=2), ValueError, "group_size = 2")
holds("numpy: zero partner gives a zero update", lambda: (float(np.abs(H.halfsplit_v(np.zeros((8, 3)), W[2].T,
      eps=0.1)).max()) == 0.0, ""))
def batched_sylvester():
    wq, wk, gm = rng.standard_normal((2, 8, 3)), rng.standard_normal((2, 8, 3)), rng.standard_normal((2, 8, 8))
    dq, dk = S.sylvester_qk(wq, wk, gm, eps=0.1, damping=1e-2)
    one = S.sylvester_qk(wq[1], wk[1], gm[1], eps=0.1, damping=1e-2)[0]
    return dq.shape == (2, 8, 3) and np.allclose(dq[1], one), f"shape {dq.shape}"
holds("numpy: batched sylvester_qk", batched_sylvester)
def docstrings_match():
    bad = []
    for mod in (H, S, Q):
        for name in mod.__all__:
            fn = getattr(mod, name)
            kw = {p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY}
            text = re.search(r"Arguments after \\* : (.*?)\\. Inputs", fn.__doc__, re.S).group(1)
            documented = {t.strip().split(" (")[0] for t in text.replace("\\n", " ").split(", ")}
            pos = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
            shapes = re.search(r"Shapes: (.*?);", fn.__doc__).group(1)
            if kw != documented or [s.split(":")[0] for s in shapes.split(", ") if ":" in s] != pos:
                bad.append(f"{mod.__name__}.{name}: {sorted(kw)} vs {sorted(documented)}")
    return not bad, "; ".join(bad)
holds("numpy: docstrings list exactly the arguments each function takes", docstrings_match)
'''

CLI_CASES = '''
import contextlib, io, os
import coeffsearch.__main__ as C
from derivations import halfsplit
from derivations.cli import main as rule_main, render
tmp = sys.argv[1]
def run(kind, argv, stdout=None):
    err, out = io.StringIO(), stdout or io.StringIO()
    saved = sys.stdout
    try:
        sys.stdout = out
        with contextlib.redirect_stderr(err):
            rc = C.main(argv) if kind == "coeffsearch" else rule_main(halfsplit.rule_module(), argv)
    finally:
        sys.stdout = saved
    return rc, err.getvalue()
def exits(name, kind, argv, codes, text="", stdout=None):
    try:
        rc, err = run(kind, argv, stdout)
    except BaseException as e:
        report(name, False, "traceback: " + repr(e))
        return
    lines = [ln for ln in err.splitlines() if ln.strip() and "%|" not in ln]
    one_line = rc == 0 or len(lines) == 1
    report(name, rc in codes and one_line and text in err, f"rc={rc} stderr={err.strip()!r}")
def schedule_file(name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as fh:
        fh.write(text)
    return path
exits("--check --seed -1", "rule", ["--check", "--seed", "-1"], {2}, "--seed")
exits("band --seed -1", "coeffsearch", ["band", "--steps", "2", "--lower", "0.1", "--slope", "2", "--seed", "-1"], {2})
for bad, text in (('{"steps": [["1e400", "-1"]]}', "float64 range"), ('{"steps": [["1.5", "-0.5"]], "parameters": 3}',
                  "parameters"), ('{"steps": [[NaN, 1]]}', "finite"), ('{"steps": [["1.5", true]]}', "steps/0/1"),
                  ('{"steps": [], "name": "x"}', "steps"), ('{"kind": "certificate", "schedule": [["1.5"]], '
                  '"interval": "ab"}', "interval"), ("[1, 2]", "object"), ('{"steps": [["1.5"]], "name": 3}', "name")):
    path = schedule_file("bad.json", bad)
    exits(f"schedule file {bad}", "rule", ["--emit", "jax", "--schedule", path], {2}, text)
    exits(f"coeffsearch schedule file {bad}", "coeffsearch", ["validate", path, "--shape", "8x16"], {2})
def finite_literals():
    path = schedule_file("huge.json", '{"steps": [["1e308", "-1e308", "1e308"]]}')
    src = render(halfsplit.rule_module(), "jax", schedule_name=path)
    table = src.split("NS_SCHEDULE = (")[1].split("\\n)")[0]
    return "inf" not in table and "nan" not in table, table.strip()[:80]
holds("emitted modules contain only finite literals", finite_literals)
def full_disk():
    """stdout on a full disk; closing it afterwards fails too (the unwritten buffer), which is ours to ignore."""
    return open("/dev/full", "w")
def close_quietly(stream):
    try:
        stream.close()
    except OSError:
        pass
full = full_disk()
exits("derivations stdout on a full disk", "rule", ["--emit", "text"], {2}, "cannot write to stdout", full)
close_quietly(full)
full = full_disk()
exits("coeffsearch stdout on a full disk", "coeffsearch", ["validate", "muon", "--dtype", "float32", "--shape",
      "8x16"], {2}, "cannot write to stdout", full)
close_quietly(full)
for cushion in ("1", "2"):
    exits(f"minimax --cushion {cushion}", "coeffsearch", ["minimax", "--steps", "2", "--lower", "1e-3", "--cushion",
          cushion], {2}, "--cushion")
exits("minimax --lower 0.9999999", "coeffsearch", ["minimax", "--steps", "2", "--lower", "0.9999999"], {0})
exits("minimax --upper 1e300", "coeffsearch", ["minimax", "--steps", "2", "--lower", "1e-3", "--upper", "1e300"], {1},
      "singular")
d7 = schedule_file("d7.json", '{"steps": [["3.0", "-3.5", "1.75", "-0.25"]]}')
exits("validate a degree-7 schedule", "coeffsearch", ["validate", d7, "--dtype", "float32", "--shape", "8x16"], {0, 1})
exits("compare a degree-7 schedule", "coeffsearch", ["compare", d7], {0})
huge = schedule_file("huge.json", '{"steps": [["1e308", "-1e308", "1e308"]]}')
out_json = os.path.join(tmp, "compare.json")
exits("compare 1e308 coefficients", "coeffsearch", ["compare", huge, "--json", "--out", out_json], {0, 1})
def standard(path):
    with open(path) as fh:
        json.loads(fh.read(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    return True
holds("compare JSON is standard JSON", lambda: (standard(out_json), ""))
band_json = os.path.join(tmp, "band.json")
exits("band --slope 100", "coeffsearch", ["band", "--steps", "3", "--lower", "1e-2", "--slope", "100", "--json",
      "--out", band_json], {0, 1})
def band_infeasible():
    standard(band_json)
    with open(band_json) as fh:
        data = json.load(fh)
    return data["feasible"] is False, f"feasible = {data['feasible']}, image {data['image']}"
holds("band --slope 100: diverged image is not feasible, JSON standard", band_infeasible)
exits("compare --plot x.txt", "coeffsearch", ["compare", "muon", "--plot", os.path.join(tmp, "x.txt")], {2}, "--plot")
exits("compare --plot DIR", "coeffsearch", ["compare", "muon", "--plot", tmp], {2}, "--plot")
png = os.path.join(tmp, "exact.png")
exits("compare --plot exact.png", "coeffsearch", ["compare", d7, "--plot", png], {0})
holds("--plot writes exactly the path it reports", lambda: (os.path.isfile(png) and not os.path.exists(png + ".png"),
      str(sorted(os.listdir(tmp)))))
'''


def run_cases(script: str, arg: str, timeout: float, env: dict | None = None) -> list:
    """Run a case script in a subprocess; a hang or crash fails with the last finished case named."""
    code = HELPERS + textwrap.dedent(script)
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", **(env or {})}
    try:
        proc = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT, env=environment)
    except subprocess.TimeoutExpired as exc:
        done = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        last = done.strip().splitlines()[-1] if done.strip() else "none"
        pytest.fail(f"hang: the case script did not finish in {timeout} s; last finished case: {last}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, f"the case script crashed:\n{proc.stderr[-2000:]}"
    return rows


def run_cases_here(script: str, arg: str, capsys, monkeypatch) -> list:
    """:func:`run_cases` in this process (``sys.argv[1]`` is ``arg``): the rows the script printed."""
    monkeypatch.setattr(sys, "argv", ["cases", arg])
    capsys.readouterr()
    exec(compile(HELPERS + textwrap.dedent(script), "<cases>", "exec"), {"__name__": "cases"})  # noqa: S102
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def assert_all(rows):
    bad = [f"{r['case']}: {r['detail']}" for r in rows if not r["ok"]]
    assert rows and not bad, "\n".join(bad)


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    from derivations import gqa, halfsplit, hybrid_ov, joint, sylvester
    from derivations.cli import render
    path = tmp_path_factory.mktemp("hostile")
    for rule, targets in ((halfsplit, ("jax", "numpy")), (sylvester, ("jax", "numpy")), (gqa, ("jax", "numpy")),
                          (joint, ("jax",)), (hybrid_ov, ("jax",))):
        module = rule.rule_module()
        for target in targets:
            (path / f"{module.name}_{target}.py").write_text(render(module, target))
    return path


@pytest.mark.e2e
def test_emitted_jax_functions(emitted):
    assert_all(run_cases(JAX_CASES, str(emitted), timeout=240))


@pytest.mark.e2e
def test_emitted_jax_without_x64(emitted):
    assert_all(run_cases(X64_OFF_CASES, str(emitted), timeout=120, env={"JAX_ENABLE_X64": "0"}))


@pytest.mark.e2e
def test_emitted_numpy_references(emitted):
    assert_all(run_cases(NUMPY_CASES, str(emitted), timeout=120))


@pytest.mark.timeout(300)
def test_command_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_all(run_cases_here(CLI_CASES, str(tmp_path), capsys, monkeypatch))
