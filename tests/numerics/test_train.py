"""The training script: every optimizer lowers the loss on a tiny model; the command line's bad input."""

import numpy as np
import optax
import pytest

from numerics import train as T
from numerics.train_model import VOCAB

CFG = T.Config(width=16, heads=2, kv_heads=2, layers=1, context=16, batch=4)


@pytest.fixture(scope="module")
def batch():
    tokens, _ = T.corpus(max_bytes=50_000)
    return next(T.batches(tokens, CFG, seed=0))


@pytest.mark.e2e
@pytest.mark.parametrize("name", T.OPTIMIZERS)
def test_each_optimizer_lowers_the_loss(name, batch):
    """Six steps on one batch lower its loss; the same compiled step with learning rate 0 does not
    (the planted mistake the check must catch)."""
    opt = T.make_optimizer(name, CFG, optax.constant_schedule(1.0))
    step = T.make_step(opt, CFG)
    x, y = batch
    for lr, lowers in ((T.SWEEPS[name][0], True), (0.0, False)):
        params = T.init_params(CFG, 0)
        state = opt.init(params)
        first = float(T.loss_fn(params, x, y, CFG))
        for _ in range(6 if lowers else 2):
            params, state, _ = step(params, state, x, y, np.float32(lr))
        assert (float(T.loss_fn(params, x, y, CFG)) < first - 0.05) == lowers


def test_corpus_is_the_standard_library():
    train, val = T.corpus(max_bytes=200_000)
    text = bytes(train[:100_000].astype(np.uint8)).decode("ascii", "replace")
    assert "def " in text and "import " in text and val.size > 0 and train.max() < VOCAB


@pytest.mark.parametrize("args, message", [
    (["--optimizer", "sgd"], "invalid choice"),
    (["--optimizer", "cm", "--steps", "0"], "--steps"),
    (["--optimizer", "cm", "--heads", "4", "--kv-heads", "3"], "--kv-heads"),
    (["--optimizer", "cm", "--lr", "nan"], "--lr"),
])
def test_cli_bad_input_is_one_line_exit_2(args, message, capsys):
    assert T.main(args) == 2  # in-process: the parser refuses before any training
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("numerics.train: error:")
