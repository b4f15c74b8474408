"""Compositional Muon in a training script written as an optax user writes one.

A two-layer decoder with grouped-query attention (4 query heads sharing 2 key/value heads), in plain JAX,
trained on the text of a standard-library module (read from disk, no download). What it uses is what
optax documents and what the workbench's README and optimizer guide show:

* ``optax.inject_hyperparams(compositional_muon)`` with a warm-up/cosine learning-rate schedule (the
  learning rate is in the state, where the script reads it);
* bfloat16 weights with float32 gradients (the loss is computed in float32) and float32 momentum;
* ``pairs="auto"``: the attention weights are stored as flax kernels with head axes, ``query (d, H, d_h)``, ``key`` and
  ``value (d, H_kv, d_h)``, ``out (H, d_h, d)`` (flax's layout), so the pairs and their head counts are
  found from the names and shapes; ``describe_pairs`` prints what was paired;
* a NaN batch refused as one error line naming the parameter: the step is jitted with ``checked_jit``
  (``jax.jit`` with the optimizer's checks functionalized) and the batch is skipped;
* an orbax checkpoint half-way, then a resume from it that must reproduce the straight run bit for bit.

Run ``python examples/optax_user_script.py`` (``--steps N``, ``--checkpoint-dir DIR``). It prints one line
per step and ends with ``resume bit-identical: True``; it exits with status 1 when the resumed run differs.
``tests/project/test_user_script.py`` runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from numerics.optimizer import checked_jit, compositional_muon, describe_pairs

VOCAB, D, HEADS, KV_HEADS, HEAD_DIM, LAYERS, SEQ, BATCH = 128, 64, 4, 2, 16, 2, 32, 16
NAN_STEP = 3  # a corrupted batch: its loss weight is NaN
#: AdamW for the embeddings, the output layer and the norms' gains (stacked over layers they are 2-D, which
#: would otherwise go to Muon, as in optax.contrib.muon)
ADAMW = ["embed", "pos", "unembed", "*norm*"]


def init_params(seed: int = 0) -> dict:
    """bfloat16 weights, the layers stacked on a leading axis (as flax's ``nn.scan`` stores them); the attention
    kernels with head axes, as flax's ``MultiHeadDotProductAttention`` stores them."""
    keys = iter(jax.random.split(jax.random.key(seed), 10))

    def normal(*shape, fan_in):
        return (jax.random.normal(next(keys), shape) / np.sqrt(fan_in)).astype(jnp.bfloat16)

    layers = {"attn": {"query": {"kernel": normal(LAYERS, D, HEADS, HEAD_DIM, fan_in=D)},
                       "key": {"kernel": normal(LAYERS, D, KV_HEADS, HEAD_DIM, fan_in=D)},
                       "value": {"kernel": normal(LAYERS, D, KV_HEADS, HEAD_DIM, fan_in=D)},
                       "out": {"kernel": normal(LAYERS, HEADS, HEAD_DIM, D, fan_in=HEADS * HEAD_DIM)}},
              "mlp": {"w_in": normal(LAYERS, D, 4 * D, fan_in=D), "w_out": normal(LAYERS, 4 * D, D, fan_in=4 * D)},
              "norm_attn": jnp.ones((LAYERS, D), jnp.bfloat16), "norm_mlp": jnp.ones((LAYERS, D), jnp.bfloat16)}
    return {"embed": normal(VOCAB, D, fan_in=1), "pos": normal(SEQ, D, fan_in=50), "layers": layers,
            "norm": jnp.ones(D, jnp.bfloat16), "unembed": normal(D, VOCAB, fan_in=D)}


def rms_norm(h, gain):
    return h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6) * gain


def attention(p, h):
    q = jnp.einsum("btd,dhk->bthk", h, p["query"]["kernel"])
    k, v = (jnp.einsum("btd,dgk->btgk", h, p[n]["kernel"]) for n in ("key", "value"))
    k, v = (jnp.repeat(t, HEADS // KV_HEADS, axis=2) for t in (k, v))  # query head h uses kv head h // G
    s = jnp.einsum("bthk,bshk->bhts", q, k) / np.sqrt(HEAD_DIM)
    s = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((SEQ, SEQ), bool)), s, -jnp.inf), axis=-1)
    return jnp.einsum("bthk,hkd->btd", jnp.einsum("bhts,bshk->bthk", s, v), p["out"]["kernel"])


def loss_fn(params, x, y, weight):
    h = params["embed"][x] + params["pos"]
    for i in range(LAYERS):
        layer = jax.tree.map(lambda w, i=i: w[i], params["layers"])
        h = h + attention(layer["attn"], rms_norm(h, layer["norm_attn"]))
        h = h + jax.nn.gelu(rms_norm(h, layer["norm_mlp"]) @ layer["mlp"]["w_in"]) @ layer["mlp"]["w_out"]
    logits = rms_norm(h, params["norm"]) @ params["unembed"]
    return weight * optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def batch(text: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The batch of a step, a function of the step alone, so that a resumed run reads the same data."""
    start = np.random.default_rng(step).integers(0, text.size - SEQ - 1, BATCH)
    window = text[start[:, None] + np.arange(SEQ + 1)]
    return window[:, :-1], window[:, 1:]


def make_optimizer(steps: int) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(0.0, 0.03, warmup_steps=3, decay_steps=steps, end_value=0.003)
    # As for optax.adamw: hyperparam_dtype, because inject_hyperparams stores the hyperparameters in the params'
    # dtype by default, and in bfloat16 adam_b2 = 0.999 rounds to 1 (every AdamW step NaN, so every step skipped);
    # mu_dtype=jnp.float32 as for optax: inject_hyperparams takes the (callable) scalar type for a schedule and hands
    # over jnp.float32(count), whose dtype compositional_muon reads (optax.adamw itself would fail there).
    # ns_steps (the length of the Newton–Schulz iteration) is part of the program: static.
    return optax.inject_hyperparams(compositional_muon, static_args=("ns_steps",), hyperparam_dtype=jnp.float32)(
        learning_rate=schedule, pairs="auto", adamw_params=ADAMW, mu_dtype=jnp.float32, weight_decay=0.01)


def make_train_step(opt: optax.GradientTransformation):
    @checked_jit  # jax.jit, with a NaN/Inf gradient reported as one ValueError naming the parameter
    def train_step(params, opt_state, x, y, weight):
        as_float32 = jax.tree.map(lambda w: w.astype(jnp.float32), params)
        loss, grads = jax.value_and_grad(loss_fn)(as_float32, x, y, weight)  # float32 gradients, bf16 weights
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def train(train_step, text, params, opt_state, start, stop, on_step=None):
    for step in range(start, stop):
        x, y = batch(text, step)
        weight = jnp.float32(np.nan if step == NAN_STEP else 1.0)
        try:
            params, opt_state, loss = train_step(params, opt_state, x, y, weight)
        except ValueError as error:  # the step's outputs are not returned: params and state stay as they were
            print(f"step {step + 1:3d}  skipped: {error}", flush=True)
            continue
        lr = float(opt_state.hyperparams["learning_rate"])
        print(f"step {step + 1:3d}  loss {float(loss):.4f}  lr {lr:.4f}", flush=True)
        if on_step is not None:
            on_step(step + 1, params, opt_state)
    return params, opt_state


def bits(tree) -> list[bytes]:
    return [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(tree)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="training steps (even; default 16)")
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="where orbax writes (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.steps % 2:
        parser.error(f"--steps must be an even number >= 2, got {args.steps}")
    text = np.frombuffer(Path(json.decoder.__file__).read_bytes(), np.uint8) % VOCAB  # the stdlib's own source
    params = init_params()
    print(describe_pairs(params, "auto", adamw_params=ADAMW), flush=True)
    opt = make_optimizer(args.steps)
    train_step = make_train_step(opt)
    half = args.steps // 2
    directory = args.checkpoint_dir or Path(tempfile.mkdtemp(prefix="optax_user_script_"))
    checkpointer = ocp.StandardCheckpointer()

    def save_half_way(step, params, opt_state):
        if step == half:
            checkpointer.save((directory / f"step_{step}").absolute(), {"params": params, "opt_state": opt_state})
            checkpointer.wait_until_finished()
            print(f"saved a checkpoint at step {step} in {directory}", flush=True)

    params, opt_state = jax.device_put((params, opt.init(params)), jax.devices()[0])  # as orbax restores them
    straight = train(train_step, text, params, opt_state, 0, args.steps, on_step=save_half_way)
    # resume: restore the checkpoint into the structure, dtypes and shardings of a fresh state
    fresh = {"params": params, "opt_state": opt.init(params)}
    restored = checkpointer.restore((directory / f"step_{half}").absolute(),
                                    jax.tree.map(ocp.utils.to_shape_dtype_struct, fresh))
    print(f"resumed from step {half}", flush=True)
    resumed = train(train_step, text, restored["params"], restored["opt_state"], half, args.steps)
    same = bits(resumed) == bits(straight)
    dtypes = sorted({str(leaf.dtype) for leaf in jax.tree.leaves(straight[0])})
    skipped = int(straight[1].inner_state[-1].total_notfinite)  # steps whose update was NaN/Inf (none here)
    print(f"parameter dtypes: {dtypes}; non-finite updates skipped: {skipped}; resume bit-identical: {same}",
          flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
