"""Compositional Muon for PyTorch: :class:`CompositionalMuon`, a ``torch.optim.Optimizer``.

The PyTorch counterpart of the optax optimizer :func:`numerics.optimizer.compositional_muon`: attention pairs
declared by parameter names (or found from ``nn.Linear`` ``q``/``k``/``v``/``o``, Hugging Face ``q_proj``…
and ``nn.MultiheadAttention`` modules) take the derived half-split (query/key) and hybrid (output/value) rules
through the emitted PyTorch modules (:mod:`numerics.emitted`), the other matrices Muon and the rest AdamW, with
the optax optimizer's hyperparameters and defaults. Needs ``torch`` (optional for the project).

Example (executed in the documentation)::

    model = nn.Sequential(...)            # any module holding attention blocks
    opt = CompositionalMuon(model, lr=1e-2, heads=4)
    loss.backward(); opt.step(); opt.zero_grad()
"""

from .optimizer import CompositionalMuon, parameter_roles, steps_taken
from .pairs import Member, OVPair, QKPair, TorchPair, find_pairs

__all__ = ["CompositionalMuon", "Member", "OVPair", "QKPair", "TorchPair", "find_pairs", "parameter_roles",
           "steps_taken"]
