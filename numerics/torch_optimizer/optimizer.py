"""``CompositionalMuon``: the optimizer of :func:`numerics.optimizer.compositional_muon` as a ``torch.optim.Optimizer``.

One step, with ``g`` the gradient and ``t`` the step count after it:

- pairs and Muon matrices: ``μ ← β μ + (1 − β) g``, ``m̂ = β μ/(1 − β^{t+1}) + (1 − β) g/(1 − β^t)``
  (Nesterov; ``μ/(1 − β^t)`` without), ``W ← W − η (D(m̂) + w_d W)``, with ``D`` the pair's derived rule
  (:mod:`.directions`) or Muon's ``√max(1, fan_out/fan_in) msign(m̂)``;
- the other parameters (vectors, biases, ``nn.Embedding`` weights, what ``adamw_params`` selects): AdamW,
  ``optax.adamw``'s update with the same ``b1, b2, eps, eps_root``, Nesterov as above, weight decay
  ``adam_weight_decay`` and learning rate ``adam_lr`` (default ``lr``).

A gradient with a NaN or Inf is refused (``check_finite``); a step whose update has one is not applied
(``on_nonfinite="skip"``: nothing changes, the group's ``skipped_steps`` counts it) or refused
(``"raise"``), as the optax optimizer does.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from numerics.optimizer.options import (
    check_hyperparameter_values,
    check_schedule_bounded,
    flag,
    real_scalar,
    resolve_schedule,
)
from numerics.optimizer.transform import check_options

from .directions import muon_direction, pair_direction, rule_options
from .pairs import WHERE, TorchPair, check_pairs, embedding_names, find_pairs

NONFINITE_POLICIES = ("skip", "raise")


def _named(params: Any) -> tuple[dict[str, torch.Tensor], nn.Module | None]:
    """``({name: parameter}, model or None)`` from a model or its ``named_parameters()``."""
    if isinstance(params, nn.Module):
        return dict(params.named_parameters()), params
    named = list(params)
    for item in named:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], torch.Tensor)):
            raise TypeError(f"{WHERE}: give the model or model.named_parameters() (pairs are declared by name), "
                            f"got an item {type(item).__name__}")
    return dict(named), None


def _adamw_selector(adamw_params: Any) -> Callable[[str, torch.Tensor], bool]:
    """``(name, tensor) -> bool`` from a function, an ``fnmatch`` pattern or a list of patterns (or ``None``)."""
    if adamw_params is None:
        return lambda name, x: False
    if callable(adamw_params):
        return adamw_params
    patterns = [adamw_params] if isinstance(adamw_params, str) else list(adamw_params)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{WHERE}: adamw_params must be a function (name, tensor) -> bool or name patterns, "
                        f"got {adamw_params!r}")
    return lambda name, x: any(fnmatch.fnmatchcase(name, p) for p in patterns)


def parameter_roles(params: dict[str, torch.Tensor], pairs: list[TorchPair], adamw: set[str]) -> dict[str, str]:
    """``{name: "pair" | "muon" | "adamw"}``: pair members, other 2-D matrices (not a bias, not selected for AdamW),
    everything else."""
    members = {m.name for p in pairs for m in (p.first, p.second)}
    return {name: "pair" if name in members else
            "muon" if x.ndim == 2 and name not in adamw and not name.rsplit(".", 1)[-1].endswith("bias")
            else "adamw" for name, x in params.items()}


def _check_rows_covered(pairs: list[TorchPair], params: dict[str, torch.Tensor]) -> None:
    """A parameter in pairs by blocks of rows must have every row in some pair (else those rows would not move)."""
    blocks: dict[str, list[tuple[int, int]]] = {}
    for m in (m for p in pairs for m in (p.first, p.second) if m.rows is not None):
        blocks.setdefault(m.name, []).append(m.rows)  # type: ignore[arg-type]
    for name, rows in blocks.items():
        covered = sorted(rows)
        if covered[0][0] != 0 or covered[-1][1] != params[name].shape[0] or any(
                a[1] != b[0] for a, b in zip(covered, covered[1:], strict=False)):
            raise ValueError(f"{WHERE}: the row blocks {covered} of {name!r} do not cover its "
                             f"{params[name].shape[0]} rows exactly once")


class CompositionalMuon(torch.optim.Optimizer):
    """Compositional Muon for PyTorch: derived per-head rules on attention pairs, Muon and AdamW elsewhere.

    Args:
      params: the model (its pairs are then found by module type: :func:`.pairs.find_pairs`) or
        ``model.named_parameters()`` (then pairs only as declared).
      lr: ``η`` of the pairs and Muon matrices (each half of a pair's product change has operator norm ``η``).
      pairs: ``"auto"`` (default for a model), ``None`` (no pairs) or a list of :func:`.pairs.QKPair` and
        :func:`.pairs.OVPair` declarations of ``(out, in)`` weights.
      heads: the number of heads where the attention module does not say (``num_heads``).
      The others mean what they mean in :func:`numerics.optimizer.compositional_muon` and have its defaults.
    """

    def __init__(self, params: Any, lr: float, ns_coeffs: Any = "polar-express-5", ns_steps: int | None = None,
                 beta: float = 0.95, eps: float = 1e-8, weight_decay: float = 0.0, *,
                 pairs: Iterable[TorchPair] | str | None = "auto", heads: int | None = None, nesterov: bool = True,
                 damping: float = 1e-2, msign: str = "newton_schulz", adam_b1: float = 0.9, adam_b2: float = 0.999,
                 adam_eps_root: float = 0.0, adam_weight_decay: float = 0.0, adam_lr: float | None = None,
                 adamw_params: Any = None, check_finite: bool = True, on_nonfinite: str = "skip") -> None:
        check_hyperparameter_values({"beta": beta, "adam_b1": adam_b1, "adam_b2": adam_b2},
                                    {"eps": eps, "adam_eps_root": adam_eps_root, "weight_decay": weight_decay,
                                     "adam_weight_decay": adam_weight_decay},
                                    {"lr": lr, "adam_lr": adam_lr})
        for name, value in (("lr", lr), ("adam_lr", adam_lr)):
            if callable(value):
                raise TypeError(f"{WHERE}: {name} must be a number (use a torch.optim.lr_scheduler for schedules)")
        check_options("half_split", "hybrid", "none", "eigh", msign, "half_split")
        if on_nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"{WHERE}: on_nonfinite must be one of {NONFINITE_POLICIES}, got {on_nonfinite!r}")
        named, model = _named(params)
        if pairs == "auto":
            if model is None:
                raise ValueError(f"{WHERE}: pairs='auto' reads the layouts from the module types: pass the model "
                                 f"itself, or declare pairs=[QKPair(...), OVPair(...)]")
            pairs = find_pairs(model, heads)
        elif isinstance(pairs, str):
            raise ValueError(f"{WHERE}: pairs must be 'auto', None or a list of QKPair/OVPair, got {pairs!r}")
        self.pairs = check_pairs(pairs or [], named)
        _check_rows_covered(self.pairs, named)
        select = _adamw_selector(adamw_params)
        adamw = {n for n, x in named.items() if select(n, x)} | (embedding_names(model) if model else set())
        self.roles = parameter_roles(named, self.pairs, adamw)
        self.names = {id(x): n for n, x in named.items()}
        self._settings = {"schedule": check_schedule_bounded(resolve_schedule(ns_coeffs, ns_steps)),
                          "nesterov": flag("nesterov", nesterov), "check_finite": flag("check_finite", check_finite),
                          "on_nonfinite": on_nonfinite, "msign": msign,
                          "damping": real_scalar("damping", damping)}
        defaults = {"lr": lr, "beta": beta, "eps": eps, "weight_decay": weight_decay, "adam_b1": adam_b1,
                    "adam_b2": adam_b2, "adam_eps_root": adam_eps_root, "adam_weight_decay": adam_weight_decay,
                    "adam_lr": adam_lr, "skipped_steps": 0}
        super().__init__(list(named.values()), defaults)

    # ---- one step ---------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """One step of every parameter that has a gradient (a pair moves when both members have one)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._group_step(group)
        return loss

    def _group_step(self, group: dict[str, Any]) -> None:
        params = {self.names[id(p)]: p for p in group["params"] if p.grad is not None}
        grads = {n: p.grad for n, p in params.items()}
        if self._settings["check_finite"]:
            self._check_finite(grads, "the gradient of {} contains NaN or Inf")
        new_state = {n: self._moments(self.state[p], g, self.roles[n], group) for n, (p, g) in
                     ((n, (params[n], grads[n])) for n in params)}
        updates = self._directions(params, new_state, group)
        for n, u in updates.items():
            decay = group["weight_decay"] if self.roles[n] != "adamw" else group["adam_weight_decay"]
            rate = group["lr"] if self.roles[n] != "adamw" or group["adam_lr"] is None else group["adam_lr"]
            updates[n] = -rate * (u + decay * params[n]) if decay else -rate * u
        if not all(bool(torch.isfinite(u).all()) for u in updates.values()):
            group["skipped_steps"] += 1
            if self._settings["on_nonfinite"] == "raise":
                self._check_finite(updates, "the update of {} contains NaN or Inf (the step was skipped); the "
                                            "gradients are finite, so the update overflowed in its dtype: use a "
                                            "wider dtype, damping > 0 or another ns_coeffs")
            return
        for n, u in updates.items():
            params[n].add_(u)
            self.state[params[n]].update(new_state[n])

    @staticmethod
    def _check_finite(tensors: dict[str, torch.Tensor], message: str) -> None:
        bad = [n for n, x in tensors.items() if not bool(torch.isfinite(x).all())]
        if bad:
            more = f" (also {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise ValueError(f"{WHERE}.step: " + message.format(repr(bad[0])) + more)

    def _moments(self, state: dict[str, Any], g: torch.Tensor, role: str, group: dict[str, Any]) -> dict[str, Any]:
        """The parameter's state after this step (not yet stored) and its moment estimate ``"m_hat"``."""
        t = int(state["step"]) + 1 if state else 1
        b1 = group["beta"] if role != "adamw" else group["adam_b1"]
        mu = state.get("momentum_buffer", torch.zeros_like(g))
        mu = (1 - b1) * g + b1 * mu
        if self._settings["nesterov"]:
            m_hat = b1 * (mu / (1 - b1 ** (t + 1))) + (1 - b1) * (g / (1 - b1 ** t))
        else:
            m_hat = mu / (1 - b1 ** t)
        out = {"step": torch.tensor(t, dtype=torch.int64), "momentum_buffer": mu, "m_hat": m_hat}
        if role == "adamw":
            b2 = group["adam_b2"]
            nu = (1 - b2) * g * g + b2 * state.get("exp_avg_sq", torch.zeros_like(g))
            out["exp_avg_sq"] = nu
            out["m_hat"] = m_hat / (torch.sqrt(nu / (1 - b2 ** t) + group["adam_eps_root"]) + group["eps"])
        return out

    def _directions(self, params: dict[str, torch.Tensor], state: dict[str, dict[str, Any]],
                    group: dict[str, Any]) -> dict[str, torch.Tensor]:
        """``{name: direction}``: pairs' derived rules, Muon's ``msign`` and AdamW's normalized moment."""
        s = self._settings
        options = rule_options(s["damping"], s["msign"], s["schedule"])
        m_hat = {n: st.pop("m_hat") for n, st in state.items()}
        out = {n: torch.zeros_like(params[n]) for n in params if self.roles[n] == "pair"}
        for pair in self.pairs:
            a, b = pair.first, pair.second
            if a.name not in params or b.name not in params:
                continue  # a member without a gradient: the pair does not move this step
            da, db = pair_direction(pair, (a.read(params[a.name]), b.read(params[b.name])),
                                    (a.read(m_hat[a.name]), b.read(m_hat[b.name])), options)
            a.read(out[a.name]).copy_(da)
            b.read(out[b.name]).copy_(db)
        for n in params:
            if self.roles[n] == "muon":
                out[n] = muon_direction(m_hat[n], s["msign"], s["schedule"])
            elif self.roles[n] == "adamw":
                out[n] = m_hat[n]
        return out

    def describe(self) -> str:
        """One line per parameter: its name, shape and what it takes (its pair, Muon or AdamW)."""
        where = {}
        for p in self.pairs:
            what = f"{p.kind} pair: heads={p.heads} kv_heads={p.kv_heads}"
            where[str(p.first)], where[str(p.second)] = (f"{what}, first of ({str(p.first)!r}, {str(p.second)!r})",
                                                         f"{what}, second of ({str(p.first)!r}, {str(p.second)!r})")
        lines = [f"{str(m)}  {what}" for m, what in where.items()]
        lines += [f"{n}  {tuple(self.param_groups[0]['params'][i].shape)}  {role}"
                  for i, (n, role) in enumerate(self.roles.items()) if role != "pair"]
        return "\n".join(lines)


def steps_taken(optimizer: CompositionalMuon) -> int:
    """The largest step count of any parameter (0 before the first step)."""
    return max((int(s["step"]) for s in optimizer.state.values() if "step" in s), default=0)


__all__ = ["CompositionalMuon", "parameter_roles", "steps_taken"]

