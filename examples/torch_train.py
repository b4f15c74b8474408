"""Compositional Muon in a PyTorch training loop: a tiny decoder trained for a few steps on the CPU.

Three pre-norm decoder layers, each with ``nn.MultiheadAttention`` (4 heads of width 8, its packed
``in_proj_weight`` split into the query, key and value rows) and an MLP of two ``nn.Linear``, trained to predict
the next byte of a standard-library module's source (read from disk, no download). ``CompositionalMuon(model,
lr=...)`` finds the attention pairs from the module types: each layer's query/key pair takes the half-split rule,
its output/value pair the hybrid rule, the MLP matrices Muon, and the embedding, the norms' gains and the biases
AdamW. A ``torch.optim.lr_scheduler`` changes the learning rate as for any PyTorch optimizer.

Run ``python examples/torch_train.py`` (``--steps N``); it prints what each parameter takes, one line per step,
and ends with ``loss went down: True`` (exit status 1 if it did not). ``tests/numerics/test_torch_optimizer.py``
runs it.
"""

from __future__ import annotations

import argparse
import inspect
import sys

import torch
from torch import nn

from foundation.commandline import int_option
from numerics.torch_optimizer import CompositionalMuon

VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 256, 32, 4, 3, 32, 16


class Block(nn.Module):
    """A pre-norm decoder layer: causal self-attention and an MLP, each added to the residual stream."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    """Byte embeddings, :data:`LAYERS` blocks, a final norm and the embedding matrix as the output layer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.position = nn.Embedding(SEQ, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        for table in (self.embed, self.position):
            nn.init.normal_(table.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        mask = torch.triu(torch.full((tokens.shape[1],) * 2, float("-inf")), diagonal=1)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x) @ self.embed.weight.T


def batches(steps: int, seed: int = 0) -> list[torch.Tensor]:
    """``steps`` batches of ``SEQ + 1`` bytes of :mod:`argparse`'s source, at random offsets."""
    data = torch.tensor(list(inspect.getsource(argparse).encode("utf-8")), dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(data) - SEQ - 1, (steps, BATCH), generator=g)
    return [torch.stack([data[s:s + SEQ + 1] for s in row.tolist()]) for row in starts]


def train(steps: int) -> list[float]:
    """Train for ``steps`` steps; the loss of each (printed as it goes)."""
    torch.manual_seed(0)
    model = Decoder()
    opt = CompositionalMuon(model, lr=0.02, weight_decay=0.01, adam_lr=3e-3)
    print(opt.describe())
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: min(1.0, (t + 1) / 3))  # a 3-step warm-up
    losses = []
    for step, batch in enumerate(batches(steps)):
        logits = model(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        losses.append(loss.item())
        print(f"step {step:3d}  loss {losses[-1]:.4f}")
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int_option(2, 10_000), default=12, help="training steps (default 12)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and spinning threads slow a shared CPU down
    losses = train(args.steps)
    went_down = max(losses[-3:]) < losses[0]
    print(f"loss went down: {went_down}")
    return 0 if went_down else 1


if __name__ == "__main__":
    sys.exit(main())
