"""The optax user's script: ``examples/optax_user_script.py`` runs unchanged.

One subprocess runs the script as a user would (``python examples/optax_user_script.py``): a small GQA
decoder in bfloat16 with float32 gradients, ``optax.inject_hyperparams(compositional_muon)`` with a
schedule, ``pairs="auto"`` on flax kernels with head axes, a NaN batch refused by ``checked_jit``, an orbax
checkpoint half-way and a resume from it. The test reads what it printed: the pairs found, the loss
falling, the NaN batch named and skipped, and the resumed run bit-identical to the straight one.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "optax_user_script.py"


@pytest.mark.e2e
def test_the_script_runs_unchanged(tmp_path):
    """One run (about 20 s), three checks: the pairs, the loss and the NaN batch, the resume."""
    pytest.importorskip("orbax.checkpoint")  # the script checkpoints with orbax (the frameworks extra)
    run = subprocess.run([sys.executable, str(SCRIPT), "--checkpoint-dir", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    check_pairs(run.stdout)
    check_loss_and_nan_batch(run.stdout)
    check_resume(run.stdout, tmp_path)


def check_pairs(out):
    assert re.search(r"layers/attn/query/kernel +\(2, 64, 4, 16\) +qk pair: heads=4 kv_heads=2 d_h=16 \(head axes\)",
                     out), out[:3000]
    assert "2 pairs, 2 Muon matrices, 6 AdamW parameters" in out


def check_loss_and_nan_batch(out):
    steps = re.findall(r"^step +(\d+) +loss (\d+\.\d+)", out, flags=re.M)
    straight = [float(loss) for _, loss in steps[:15]]
    assert len(steps) == 15 + 8  # 16 steps less the skipped one, then the 8 resumed ones
    assert max(straight[-4:]) < 0.7 * straight[0], straight
    assert "step   4  skipped: compositional_muon.update: the gradient of 'embed' contains NaN or Inf" in out
    assert "non-finite updates skipped: 0" in out  # the NaN gradient was refused, never applied


def check_resume(out, directory):
    assert (directory / "step_8").is_dir()
    straight = re.findall(r"^(step +(?:9|1\d) +loss .*)$", out.split("resumed from step 8")[0], flags=re.M)
    resumed = re.findall(r"^(step +(?:9|1\d) +loss .*)$", out.split("resumed from step 8")[1], flags=re.M)
    assert len(resumed) == 8 and resumed == straight
    assert out.rstrip().endswith("parameter dtypes: ['bfloat16']; non-finite updates skipped: 0; resume "
                                 "bit-identical: True")
