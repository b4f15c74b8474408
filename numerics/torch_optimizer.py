"""Compositional Muon for PyTorch: :class:`CompositionalMuon`, a ``torch.optim.Optimizer``.

The PyTorch counterpart of the optax optimizer :func:`numerics.optimizer.compositional_muon`, with its
hyperparameters and defaults. One step, with ``g`` the gradient and ``t`` the step count after it:

- attention pairs and the other matrices: ``μ ← β μ + (1 − β) g``,
  ``m̂ = β μ/(1 − β^{t+1}) + (1 − β) g/(1 − β^t)`` (Nesterov; ``μ/(1 − β^t)`` without),
  ``W ← W − η (D(m̂) + w_d W)``. ``D`` of a query/key pair is the half-split rule
  ``D_Q = msign(m̂_Q C_K⁻¹) C_K⁻¹``, ``C_K = (W_KᵀW_K + λI)^{1/2}`` per head (the key side likewise), of an
  output/value pair the hybrid rule, both at budget ``ε = 2`` through the emitted PyTorch modules
  (:mod:`numerics.emitted`), so each half of a pair's product change has operator norm ``η``; ``D`` of another
  matrix is Muon's ``√max(1, fan_out/fan_in) msign(m̂)`` (the emitted Newton–Schulz);
- the rest (vectors, biases, ``nn.Embedding`` weights, what ``adamw_params`` selects): ``optax.adamw``'s update
  (``b1, b2, eps, eps_root``, Nesterov as above), weight decay ``adam_weight_decay``, rate ``adam_lr``
  (default ``lr``).

Pairs are declared by parameter names (:func:`QKPair`, :func:`OVPair`) or found from the module types: sibling
``nn.Linear`` ``q``/``k``/``v``/``o`` (``wq``…, Hugging Face ``q_proj``…) and ``nn.MultiheadAttention``, whose
packed ``in_proj_weight`` rows ``[0, d)``, ``[d, 2d)``, ``[2d, 3d)`` are ``W_Q``, ``W_K``, ``W_V``. Every member
is a weight stored ``(out, in)`` as ``nn.Linear`` stores it (``y = x Wᵀ``): ``W_Q (H·d_h, d)``,
``W_K (H_kv·d_h, d)``, ``W_O (d, H·d_h)``, ``W_V (H_kv·d_h, d)``. A layout is read from the module's type, never
guessed from a shape: a would-be pair whose module is not an ``nn.Linear`` is refused, naming the parameter.

A gradient with a NaN or Inf is refused (``check_finite``); a step whose update has one is not applied
(``on_nonfinite="skip"``: nothing changes, the group's ``skipped_steps`` counts it) or refused (``"raise"``),
as the optax optimizer does. Needs ``torch`` (optional for the project).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from foundation.compute.torch_exact_scaling import compute_dtype  # 16-bit weights: directions in float32
from foundation.compute.torch_head_layout import merge_heads, split_heads
from numerics.emitted import gqa_torch, halfsplit_torch, hybrid_ov_torch
from numerics.optimizer.options import (
    check_hyperparameter_values,
    check_schedule_bounded,
    flag,
    real_scalar,
    resolve_schedule,
)
from numerics.optimizer.transform import check_options

__all__ = ["CompositionalMuon", "Member", "OVPair", "QKPair", "TorchPair", "find_pairs", "parameter_roles",
           "steps_taken"]

#: sibling ``nn.Linear`` names that form one attention block: (query, key, value, output)
LINEAR_NAMES = (("q", "k", "v", "o"), ("wq", "wk", "wv", "wo"), ("q_proj", "k_proj", "v_proj", "o_proj"))
#: attributes of an attention module that give its number of query heads, then of key/value heads
HEAD_ATTRIBUTES = ("num_heads", "n_heads", "num_attention_heads", "n_head", "heads")
KV_HEAD_ATTRIBUTES = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "kv_heads")

WHERE = "CompositionalMuon"


@dataclass(frozen=True)
class Member:
    """One factor of a pair: the parameter ``name``, or its rows ``[start, stop)`` when ``rows`` is given."""

    name: str
    rows: tuple[int, int] | None = None

    def __str__(self) -> str:
        return self.name if self.rows is None else f"{self.name}[{self.rows[0]}:{self.rows[1]}]"

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """This member's block of the parameter (or of its momentum, gradient) ``x``."""
        return x if self.rows is None else x[self.rows[0]:self.rows[1]]


def _member(m: Any) -> Member:
    """A member from a name, ``(name, start, stop)`` or a :class:`Member`."""
    if isinstance(m, Member):
        return m
    if isinstance(m, str):
        return Member(m)
    if isinstance(m, tuple) and len(m) == 3 and isinstance(m[0], str) and all(isinstance(i, int) for i in m[1:]):
        return Member(m[0], (m[1], m[2]))
    raise TypeError(f"{WHERE}: a pair member is a parameter name or (name, first_row, stop_row), got {m!r}")


@dataclass(frozen=True)
class TorchPair:
    """An attention pair of ``(out, in)`` weights: ``kind`` ``"qk"`` (``first`` = query, ``second`` = key) or
    ``"ov"`` (``first`` = output, ``second`` = value), with ``heads`` query heads and ``kv_heads`` key/value heads."""

    kind: str
    first: Member
    second: Member
    heads: int
    kv_heads: int


def QKPair(query: Any, key: Any, heads: int, kv_heads: int | None = None) -> TorchPair:  # noqa: N802
    """A query/key pair of ``nn.Linear``-layout weights ``W_Q (heads·d_h, d)``, ``W_K (kv_heads·d_h, d)``;
    a member is a parameter name or ``(name, first_row, stop_row)`` (a block of packed rows)."""
    return _pair("qk", query, key, heads, kv_heads)


def OVPair(output: Any, value: Any, heads: int, kv_heads: int | None = None) -> TorchPair:  # noqa: N802
    """An output/value pair of ``nn.Linear``-layout weights ``W_O (d, heads·d_h)``, ``W_V (kv_heads·d_h, d)``."""
    return _pair("ov", output, value, heads, kv_heads)


def _pair(kind: str, first: Any, second: Any, heads: Any, kv_heads: Any) -> TorchPair:
    """A checked :class:`TorchPair`: positive head counts, ``kv_heads`` dividing ``heads``."""
    kv = heads if kv_heads is None else kv_heads
    for name, n in (("heads", heads), ("kv_heads", kv)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{WHERE}: {name} of the pair ({first!r}, {second!r}) must be a positive int, got {n!r}")
    if heads % kv:
        raise ValueError(f"{WHERE}: kv_heads = {kv} must divide heads = {heads} in the pair ({first!r}, {second!r})")
    return TorchPair(kind, _member(first), _member(second), heads, kv)


def _attribute(module: nn.Module, names: tuple[str, ...]) -> int | None:
    for n in names:
        value = getattr(module, n, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _mha_pairs(prefix: str, m: nn.MultiheadAttention) -> list[TorchPair]:
    """The two pairs of an ``nn.MultiheadAttention``: packed ``in_proj_weight`` rows or separate weights."""
    d, h = m.embed_dim, m.num_heads
    if m.in_proj_weight is not None:
        packed = f"{prefix}in_proj_weight"
        return [QKPair((packed, 0, d), (packed, d, 2 * d), h),
                OVPair(f"{prefix}out_proj.weight", (packed, 2 * d, 3 * d), h)]
    return [QKPair(f"{prefix}q_proj_weight", f"{prefix}k_proj_weight", h),
            OVPair(f"{prefix}out_proj.weight", f"{prefix}v_proj_weight", h)]


def _linear_pairs(prefix: str, module: nn.Module, heads: int | None) -> list[TorchPair]:
    """The pairs among a module's children named as :data:`LINEAR_NAMES` (``nn.Linear`` only)."""
    children = dict(module.named_children())
    for names in LINEAR_NAMES:
        present = [n for n in names if n in children]
        if len(present) < 2:
            continue
        for n in present:
            if not isinstance(children[n], nn.Linear):
                raise ValueError(f"{WHERE}: the layout of {prefix}{n}.weight is unknown (its module is "
                                 f"{type(children[n]).__name__}, not nn.Linear); declare the pairs with pairs=[...]")
        h = _attribute(module, HEAD_ATTRIBUTES) or heads
        if h is None:
            raise ValueError(f"{WHERE}: the number of heads of {prefix}{present[0]}.weight is unknown: pass heads=H "
                             f"(or give its module a num_heads attribute)")
        linears = {n: m for n, m in children.items() if isinstance(m, nn.Linear)}
        w = {role: linears[n].weight for role, n in zip("qkvo", names, strict=True) if n in linears}
        if not ({"q", "k"} <= w.keys() or {"o", "v"} <= w.keys()):
            continue
        width = int(w["q"].shape[0]) if "q" in w else int(w["o"].shape[1])  # H·d_h
        if width % h:
            raise ValueError(f"{WHERE}: heads = {h} does not divide the width {width} of {prefix}{present[0]}.weight")
        kv_width = int(w["k"].shape[0]) if "k" in w else int(w["v"].shape[0])
        kv = _attribute(module, KV_HEAD_ATTRIBUTES) or max(1, kv_width // (width // h))
        out = []
        if {"q", "k"} <= w.keys():
            out.append(QKPair(f"{prefix}{names[0]}.weight", f"{prefix}{names[1]}.weight", h, kv))
        if {"o", "v"} <= w.keys():
            out.append(OVPair(f"{prefix}{names[3]}.weight", f"{prefix}{names[2]}.weight", h, kv))
        return out
    return []


def find_pairs(model: nn.Module, heads: int | None = None) -> list[TorchPair]:
    """The attention pairs of ``model`` by module type and name: ``nn.MultiheadAttention`` and sibling
    ``nn.Linear`` ``q``/``k``/``v``/``o`` (``wq``…, ``q_proj``…) whose parent gives ``num_heads`` (or ``heads``)."""
    pairs: list[TorchPair] = []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, nn.MultiheadAttention):
            pairs += _mha_pairs(prefix, module)
        else:
            pairs += _linear_pairs(prefix, module, heads)
    return pairs


def embedding_names(model: nn.Module) -> set[str]:
    """The names of the ``nn.Embedding`` weights of ``model`` (they take AdamW)."""
    return {f"{n}.weight" if n else "weight" for n, m in model.named_modules() if isinstance(m, nn.Embedding)}


def check_pairs(pairs: Iterable[TorchPair], params: dict[str, torch.Tensor]) -> list[TorchPair]:
    """Refuse a pair naming a missing parameter, a member twice, mixed dtypes or shapes that do not fit."""
    seen: dict[str, list[tuple[int, int] | None]] = {}
    out = []
    for pair in pairs:
        if not isinstance(pair, TorchPair):
            raise TypeError(f"{WHERE}: pairs holds {pair!r}; declare pairs with QKPair(...) and OVPair(...)")
        for m in (pair.first, pair.second):
            if m.name not in params:
                raise ValueError(f"{WHERE}: the pair member {str(m)!r} is not a parameter name")
            x = params[m.name]
            if x.ndim != 2 or not x.is_floating_point() or x.is_complex():
                raise TypeError(f"{WHERE}: the pair member {str(m)!r} must be a real floating matrix, got shape "
                                f"{tuple(x.shape)} and dtype {x.dtype}")
            rows = seen.setdefault(m.name, [])
            if None in rows or (m.rows is None and rows) or m.rows in rows:
                raise ValueError(f"{WHERE}: {str(m)!r} is in two pairs")
            rows.append(m.rows)
        a, b = params[pair.first.name], params[pair.second.name]
        if a.dtype != b.dtype:
            raise TypeError(f"{WHERE}: {str(pair.first)!r} is {a.dtype} but {str(pair.second)!r} is {b.dtype}; "
                            f"store both factors of a pair in one dtype")
        _check_shapes(pair, pair.first.read(a).shape, pair.second.read(b).shape)
        out.append(pair)
    return out


def _check_shapes(pair: TorchPair, a: torch.Size, b: torch.Size) -> None:
    """The pair's two blocks fit its kind and heads: query rows ``H·d_h`` and key rows ``H_kv·d_h`` (output
    columns and value rows for ``"ov"``) with one ``d_h``."""
    width, kv_width = (a[0], b[0]) if pair.kind == "qk" else (a[1], b[0])
    d_h = width // pair.heads if width % pair.heads == 0 else 0
    if d_h == 0 or kv_width != pair.kv_heads * d_h or (pair.kind == "ov" and a[0] != b[1]):
        raise ValueError(f"{WHERE}: the {pair.kind} pair ({str(pair.first)!r} {tuple(a)}, {str(pair.second)!r} "
                         f"{tuple(b)}) does not fit heads = {pair.heads}, kv_heads = {pair.kv_heads} in nn.Linear "
                         f"layout (out, in)")


def head_dim(pair: TorchPair, first: torch.Tensor) -> int:
    """``d_h`` of a pair from its first member's block."""
    return (first.shape[0] if pair.kind == "qk" else first.shape[1]) // pair.heads


# ---- directions ----------------------------------------------------------------------------------
#: the budget of a pair's rule: each half of the product change has operator norm ``ε/2 = 1``
PAIR_BUDGET = 2.0


def rule_options(damping: float, msign: str, schedule: Any) -> dict[str, Any]:
    """Keyword arguments of an emitted rule (NaN/Inf results come back as they are: the optimizer checks them)."""
    return {"eps": PAIR_BUDGET, "damping": damping, "msign": msign, "schedule": schedule, "check_finite": False}


def qk_direction(w_q: torch.Tensor, w_k: torch.Tensor, m_q: torch.Tensor, m_k: torch.Tensor, pair: TorchPair,
                 options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(D_Q, D_K)`` of a query/key pair of ``(out, in)`` weights: the half-split rule, sign flipped."""
    d_h = head_dim(pair, w_q)
    q, k, g_q, g_k = (x.mT for x in (w_q, w_k, m_q, m_k))  # (d, H·d_h): q = x @ W_Q
    if pair.kv_heads == pair.heads:
        dq, dk = halfsplit_torch.halfsplit_qk(*(split_heads(x, d_h) for x in (q, k, g_q, g_k)), **options)
        dq, dk = merge_heads(dq), merge_heads(dk)
    else:
        dq, dk = gqa_torch.gqa_qk(q, k, g_q, g_k, head_dim=d_h, **options)
    return -dq.mT, -dk.mT


def ov_direction(w_o: torch.Tensor, w_v: torch.Tensor, m_o: torch.Tensor, m_v: torch.Tensor, pair: TorchPair,
                 options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(D_O, D_V)`` of an output/value pair of ``(out, in)`` weights: the hybrid rule, sign flipped."""
    do, dv = hybrid_ov_torch.hybrid_ov(w_o, w_v, m_o, m_v, head_dim=head_dim(pair, w_o), **options)
    return -do, -dv


def pair_direction(pair: TorchPair, w: tuple[torch.Tensor, torch.Tensor], m: tuple[torch.Tensor, torch.Tensor],
                   options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The direction of either kind of pair, computed in float32 for 16-bit weights, in their dtype otherwise."""
    ct = compute_dtype(w[0].dtype)
    rule = qk_direction if pair.kind == "qk" else ov_direction
    w_a, w_b, m_a, m_b = (x.to(ct) for x in (*w, *m))
    da, db = rule(w_a, w_b, m_a, m_b, pair, options)
    return da.to(w[0].dtype), db.to(w[1].dtype)


def muon_direction(m: torch.Tensor, msign: str, schedule: Any) -> torch.Tensor:
    """``√max(1, fan_out/fan_in) msign(m)`` of an ``(out, in)`` matrix (the emitted Newton–Schulz by default)."""
    if m.numel() == 0:
        return torch.zeros_like(m)
    ct = compute_dtype(m.dtype)
    sign = halfsplit_torch.spectral_sign(m.to(ct), msign, schedule)
    fan_out, fan_in = m.shape
    return (math.sqrt(max(1.0, fan_out / fan_in)) * sign).to(m.dtype)


# ---- the optimizer -------------------------------------------------------------------------------
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

    The arguments shared with :func:`numerics.optimizer.compositional_muon` (``ns_coeffs``, ``beta``, ``eps``,
    ``weight_decay``, ``nesterov``, ``damping``, ``msign``, the ``adam_*`` ones, ``adamw_params``,
    ``check_finite``, ``on_nonfinite``) mean what they mean there and have its defaults; ``adam_lr`` is its
    ``adam_learning_rate``. The step counts, momenta and AdamW moments are in ``state_dict()``; the group's
    ``skipped_steps`` counts the steps not applied.

    Args:
      params: the model (its pairs are then found by module type: :func:`find_pairs`) or
        ``model.named_parameters()`` (then pairs only as declared).
      lr: ``η`` of the pairs and Muon matrices (each half of a pair's product change has operator norm ``η``).
      pairs: ``"auto"`` (default for a model), ``None`` (no pairs) or a list of :func:`QKPair` and
        :func:`OVPair` declarations of ``(out, in)`` weights.
      heads: the number of heads where the attention module does not say (``num_heads``).
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
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """One step of every parameter that has a gradient (a pair moves when both members have one)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
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
        """A table: each parameter (or block of packed rows), its shape and what it takes (its pair, Muon, AdamW)."""
        params = {self.names[id(p)]: p for g in self.param_groups for p in g["params"]}
        rows = []
        for p in self.pairs:
            what = f"{p.kind} pair: heads={p.heads} kv_heads={p.kv_heads}"
            for m, place in ((p.first, "first"), (p.second, "second")):
                rows.append((str(m), str(tuple(m.read(params[m.name]).shape)),
                             f"{what}, {place} of ({str(p.first)!r}, {str(p.second)!r})"))
        rows += [(n, str(tuple(params[n].shape)), role) for n, role in self.roles.items() if role != "pair"]
        width, shape_width = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
        return "\n".join(f"{n:<{width}}  {shape:<{shape_width}}  {what}" for n, shape, what in rows)


def steps_taken(optimizer: CompositionalMuon) -> int:
    """The largest step count of any parameter (0 before the first step)."""
    return max((int(s["step"]) for s in optimizer.state.values() if "step" in s), default=0)


