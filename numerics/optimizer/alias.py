"""The optax alias: ``compositional_muon(η, pairs=...)`` = the guarded chain of the whole optimizer.

``skip_nonfinite_updates(check_finite_gradients(), partition({"cm": chain(direction, add_decayed_weights,
scale_by_learning_rate(η)[, rebalance_pairs]), "adam": adamw}))``: declared pairs and the other matrices
take the Compositional Muon direction of :mod:`numerics.optimizer.transform` (step ``−η ·`` direction,
so each half of a pair's product change has operator norm ``η``), vectors (or what ``adamw_params``
selects) take AdamW, and a step whose update has a NaN or Inf is skipped (or refused).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import jax
import optax

from foundation.compute.jax_spectral_sign import msign_choice

from .groups import LoRAPlan
from .head_axes import head_axes_dimension_numbers
from .nonfinite import check_finite_gradients, skip_nonfinite_updates
from .options import (
    check_hyperparameter_precision,
    check_hyperparameter_values,
    check_preconditioning,
    flag,
    momentum_dtype,
    resolve_schedule,
)
from .pairs import Pairs, adamw_selector, named_leaves, pair_declaration, plan_pairs
from .transform import (
    check_options,
    dimension_numbers_by_path,
    rebalance_pairs,
    scale_by_compositional_muon,
)


def is_bias(path: str) -> bool:
    """Whether the parameter at ``path`` is a bias by its name: its last key is ``bias`` or ends in ``_bias``.

    flax, equinox and PyTorch name every bias ``bias``; flax's attention biases are 2-D ``(heads, d_h)`` and a
    bias of stacked layers (``nn.scan``) is ``(layers, d)``, neither a weight matrix.
    """
    last = path.rsplit("/", 1)[-1]
    return last == "bias" or last.endswith("_bias")


#: which parameters outside the pairs take Muon when no dimension numbers are given (``roles``)
ROLES = ("project", "optax")

#: ``compositional_muon(η, **OPTAX_PARITY)`` takes ``optax.contrib.muon(η)``'s step on every parameter outside
#: declared pairs: its Newton–Schulz steps and its choice of Muon or AdamW (``preconditioning`` other than
#: ``"frobenius"`` and complex matrices stay refused)
OPTAX_PARITY: dict[str, Any] = {"ns_coeffs": "standard", "roles": "optax"}


def check_roles(roles: Any) -> None:
    """Refuse a ``roles`` other than ``"project"`` or ``"optax"``."""
    if not isinstance(roles, str) or roles not in ROLES:
        raise ValueError(f"compositional_muon: roles must be one of {ROLES}, got {roles!r}")


def default_muon(name: str, x: Any, roles: str) -> bool:
    """Whether the parameter ``x`` at ``name`` takes Muon when no dimension numbers are given.

    ``roles="project"``: every array with at least 2 axes that is not a bias (:func:`is_bias`), one with more
    than 2 being a batch of matrices over its leading axes (stacked layers ``(L, d_in, d_out)``); ``"optax"``:
    ``optax.contrib.muon``'s rule, exactly the 2-D arrays (2-D biases included; ``(L, d, d)`` and convolution
    weights ``(3, 3, c_in, c_out)`` take AdamW).
    """
    ndim = getattr(x, "ndim", 0)
    return ndim == 2 if roles == "optax" else ndim >= 2 and not is_bias(name)


def parameter_roles(params: Any, pairs: Any = None, adamw_params: Any = None,
                    muon_weight_dimension_numbers: Any = None, roles: str = "project") -> dict[str, str]:
    """``{path: "cm" | "adam"}`` for every leaf, in the order of the params' leaves.

    ``"cm"``: a member of a declared pair, or a matrix for Muon; ``"adam"``: one that ``adamw_params``
    selects, one whose dimension number is ``None`` (given ``muon_weight_dimension_numbers``, they alone
    decide outside the pairs, as in optax; a subtree's entry holds for each of its leaves), or, without
    them, one that :func:`default_muon` gives AdamW by ``roles``: with ``"project"`` a parameter with fewer
    than 2 axes or a bias (also a 2-D one, which ``optax.contrib.muon`` takes for Muon), with ``"optax"``
    every parameter that does not have exactly 2 axes.
    """
    check_roles(roles)
    plan = plan_pairs(pair_declaration(pairs), params)
    to_adamw = adamw_selector(adamw_params)
    dims = dimension_numbers_by_path(muon_weight_dimension_numbers, params) if muon_weight_dimension_numbers \
        is not None else None
    out = {}
    for name, x in named_leaves(params).items():
        if name in plan.members:
            out[name] = "cm"
        elif dims is not None:
            out[name] = "cm" if dims.get(name) is not None else "adam"
        elif not default_muon(name, x, roles) or (to_adamw is not None and to_adamw(name, x)):
            out[name] = "adam"
        else:
            out[name] = "cm"
    return out


def _layout(pair: Any) -> str:
    """How a pair's matrices are applied, as :func:`describe_pairs` prints it: ``x @ W`` (stored in × out: ``W_Q``
    ``(d, H·d_h)``, ``W_O (H·d_h, d)``), ``x @ Wᵀ`` (out × in) or with head axes (flax ``DenseGeneral``)."""
    return "head axes" if pair.head_axes else "x @ W" if pair.kernels == (pair.kind == "ov") else "x @ Wᵀ"


def describe_pairs(params: Any, pairs: Any = "auto", adamw_params: Any = None,
                   muon_weight_dimension_numbers: Any = None, *, msign: str | None = None,
                   ns_coeffs: Any = "polar-express-5", ns_steps: int | None = None, roles: str = "project") -> str:
    """A table of what :func:`compositional_muon` does with every parameter: its pair and rule, Muon or AdamW.

    ``pairs``, ``adamw_params``, ``muon_weight_dimension_numbers`` and ``roles`` as given to the optimizer
    (``pairs="auto"`` by default, to see what automatic pairing finds). Each pair shows the layout it is read in:
    ``(x @ W)`` (the matrices stored in × out, as ``q = x @ W_Q`` and ``y = o @ W_O`` use them), ``(x @ Wᵀ)``
    (out × in: PyTorch, equinox) or ``(head axes)`` (flax ``DenseGeneral`` kernels). With ``msign`` (and the
    optimizer's ``ns_coeffs``, ``ns_steps``), each Muon matrix's line also says which iteration its ``msign``
    runs and why (:func:`foundation.compute.jax_spectral_sign.msign_choice`: ``"auto"`` runs Gram Newton–Schulz
    only with restart positions certified for the matrix's dtype, else the standard iteration).

    Examples:
      >>> import jax.numpy as jnp
      >>> from numerics.optimizer import AutoPairs, describe_pairs
      >>> params = {"attn": {n: jnp.eye(8) for n in ("wq", "wk", "wv", "wo")},
      ...           "mlp": jnp.ones((8, 16)), "bias": jnp.zeros(16)}
      >>> print(describe_pairs(params, pairs=AutoPairs(heads=2, layout="kernel")))
      path     shape               role
      attn/wk  (8, 8)              qk pair: heads=2 kv_heads=2 d_h=4 (x @ W), second of ('attn/wq', 'attn/wk')
      attn/wo  (8, 8)              ov pair: heads=2 kv_heads=2 d_h=4 (x @ W), first of ('attn/wo', 'attn/wv')
      attn/wq  (8, 8)              qk pair: heads=2 kv_heads=2 d_h=4 (x @ W), first of ('attn/wq', 'attn/wk')
      attn/wv  (8, 8)              ov pair: heads=2 kv_heads=2 d_h=4 (x @ W), second of ('attn/wo', 'attn/wv')
      bias     (16,)               adamw
      mlp      (8, 16)             muon
      2 pairs, 1 Muon matrices, 1 AdamW parameters
    """
    plan = plan_pairs(pair_declaration(pairs), params)
    kinds = parameter_roles(params, pairs, adamw_params, muon_weight_dimension_numbers, roles)
    where = {}
    for pair in plan.pairs:
        what = f"{pair.kind} pair: heads={pair.heads} kv_heads={pair.kv_heads} d_h={pair.head_dim} ({_layout(pair)})"
        where[pair.first] = f"{what}, first of ({pair.first!r}, {pair.second!r})"
        where[pair.second] = f"{what}, second of ({pair.first!r}, {pair.second!r})"
    for group in plan.groups:
        layout = " (kernels)" if group.kernels else ""  # stored as flax kernels
        if isinstance(group, LoRAPlan):
            own = "" if group.damping is None else f" damping={group.damping:g}"
            what = f"LoRA pair: r={group.rank} d_out={group.d_out} d_in={group.d_in}{own}{layout}"
            where.update({group.b: f"{what}, B of {group.members}", group.a: f"{what}, A of {group.members}"})
            continue
        query = "" if group.compressed else " (no query compression)"
        what = (f"MLA block: heads={group.heads} d_h={group.d_h} d_R={group.d_rope} d_v={group.d_v}{query}{layout}, "
                f"with {group.members[0]!r}")
        where.update({m: f"{what}, {role}" for m, role in zip(group.members, group.roles, strict=True)})
    leaves = named_leaves(params)
    merged = head_axes_dimension_numbers(params) if muon_weight_dimension_numbers is None else {}
    width = max((len(n) for n in leaves), default=4)
    lines = [f"{'path':<{width}}  {'shape':<18}  role"]
    schedule = resolve_schedule(ns_coeffs, ns_steps) if msign is not None else None
    for name, x in leaves.items():
        muon = "muon (head axes merged: one matrix)" if name in merged else "muon"
        if schedule is not None and kinds[name] == "cm" and name not in where and getattr(x, "ndim", 0) >= 2:
            muon += f", msign {_msign_text(x, msign, schedule)}"
        bias = roles == "project" and getattr(x, "ndim", 0) >= 2 and is_bias(name)
        role = where.get(name) or (muon if kinds[name] == "cm" else "adamw (a bias)" if bias else "adamw")
        lines.append(f"{name:<{width}}  {str(tuple(getattr(x, 'shape', ()))):<18}  {role}")
    lora = sum(isinstance(g, LoRAPlan) for g in plan.groups)
    lines.append(f"{len(plan.pairs)} pairs, "
                 + (f"{lora} LoRA pairs, {len(plan.groups) - lora} MLA blocks, " if plan.groups else "")
                 + f"{sum(r == 'cm' for r in kinds.values()) - len(plan.members)} Muon "
                 f"matrices, {sum(r == 'adam' for r in kinds.values())} AdamW parameters")
    return "\n".join(lines)


def _msign_text(x: Any, msign: str, schedule: Any) -> str:
    """What ``msign`` runs on the matrix ``x`` (its last two axes, its dtype), in words."""
    try:
        chosen, restarts, why = msign_choice(x.shape, x.dtype, msign, schedule)
    except ValueError as exc:
        return f"{msign!r} refused: {exc}"
    where = "" if chosen != "gram_newton_schulz" else f" (restarts after {', '.join(map(str, restarts)) or 'none'})"
    return f"{msign!r} -> {chosen}{where}: {why}"


def compositional_muon(
    learning_rate: optax.ScalarOrSchedule,
    ns_coeffs: Any = "polar-express-5",
    ns_steps: int | None = None,
    beta: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    weight_decay_mask: Any = None,
    mu_dtype: Any = None,
    *,
    pairs: Pairs | None = None,
    nesterov: bool = True,
    qk_rule: Literal["half_split", "joint", "isotropic", "sylvester"] = "half_split",
    ov_rule: Literal["hybrid"] = "hybrid",
    lora_rule: Literal["half_split", "joint"] = "half_split",
    damping: float = 1e-2,
    gauge: Literal["none", "horizontal_projection", "rebalance"] = "none",
    msign: Literal["newton_schulz", "svd", "gram_newton_schulz", "auto"] = "newton_schulz",
    gram_roots: Literal["eigh"] = "eigh",
    adam_b1: float = 0.9,
    adam_b2: float = 0.999,
    adam_eps_root: float = 0.0,
    adam_weight_decay: float = 0.0,
    adam_learning_rate: optax.ScalarOrSchedule | None = None,
    adamw_params: Callable[[str, Any], bool] | str | list | tuple | None = None,
    check_finite: bool = True,
    on_nonfinite: Literal["skip", "raise"] = "skip",
    adaptive: bool = False,
    consistent_rms: float | None = None,
    muon_weight_dimension_numbers: Any = None,
    preconditioning: Literal["frobenius"] = "frobenius",
    roles: Literal["project", "optax"] = "project",
) -> optax.GradientTransformation:
    r"""Compositional Muon: derived per-head rules on attention pairs, Muon and AdamW elsewhere.

    Arguments shared with ``optax.contrib.muon`` mean the same: ``learning_rate`` (float or
    schedule), ``ns_coeffs`` (here also a :mod:`coeffsearch` registry name, default
    ``"polar-express-5"``) and ``ns_steps`` (default ``None``: one step ``(a, b, c)`` runs 5 times, as in optax;
    not a number, so that ``optax.inject_hyperparams`` keeps it static like the names and ``jax.jit`` never traces
    the length of the iteration), ``beta`` and ``nesterov`` (momentum), ``eps`` (AdamW),
    ``weight_decay`` and ``weight_decay_mask`` (decoupled, on the matrices), ``mu_dtype``, and the
    ``adam_*`` arguments of the AdamW part (``adam_learning_rate`` defaults to ``learning_rate``).

    Args:
      pairs: ``params -> [QKPair | OVPair | LoRAPair | MLAPair, ...]`` (or that list itself): which
        parameters form attention pairs (with their heads and kv heads), LoRA adapters and MLA blocks;
        ``"auto"``/``AutoPairs(heads=H)`` finds them by name (a square block of plain matrices also needs
        ``AutoPairs(layout="kernel" | "weight" | "paper")``: its layout is never guessed); paths are
        ``"/"``-joined pytree keys (``"params/Block_0/q/kernel"`` for flax; two leaves whose paths join
        to one name are refused). Checked at ``init`` and ``update``; bad names, shapes or dtypes raise
        an error naming the parameter.
      qk_rule: ``"half_split"`` (GQA when ``kv_heads < heads``), ``"joint"``, ``"isotropic"``,
        ``"sylvester"`` (per head, ``O(d³)`` per head for the sign of the ``d × d`` product gradient;
        no grouped-query form).
      ov_rule: ``"hybrid"`` (head-local V, global O; shared value heads with GQA).
      lora_rule: for :class:`~numerics.optimizer.groups.LoRAPair` declarations (``W = W₀ + B A``):
        ``"half_split"`` (``ΔB = −η msign(m̂_B C_A⁻¹) C_A⁻¹``, ``ΔA = −η C_B⁻¹ msign(C_B⁻¹ m̂_A)``) or ``"joint"``
        (square adapters only). An :class:`~numerics.optimizer.groups.MLAPair` takes the six rules of
        ``derivations.mla``; every group's members share the pair's budget (``η`` per half, ``2η`` per circuit).
      damping: ``λ`` in every Gram root ``(WᵀW + λI)^{1/2}`` (default ``1e-2``): any real scalar
        (Python, NumPy or JAX) that is finite and ``>= 0``, and 0 or a normal number of the dtype
        the roots are computed in (float32 for 16-bit weights; refused at ``init`` otherwise). For
        ``qk_rule="sylvester"`` it is also the derivation's ``λ``: the step minimizes
        ``‖T(ΔW_Q, ΔW_K) − D‖_F² + 2λ‖(ΔW_Q, ΔW_K)‖_F²``, so ``(W_QW_Qᵀ + λI) H + H (W_KW_Kᵀ + λI) = D``;
        it must be ``> 0`` there (the achieved change is ``D − 2λH``).
      gauge: ``"none"``, ``"horizontal_projection"`` (project the momentum of every pair onto the
        horizontal space), ``"rebalance"`` (equal Grams of both factors after every step, the gauge
        derived in :mod:`derivations.balance`). A shared kv head is projected and balanced with its
        group's query (output) heads stacked row-wise. Both act on Q/K and O/V pairs only: LoRA pairs
        (whose ``B = 0`` start no ``GL(r)`` gauge balances) and MLA blocks are not gauged.
      msign: ``"newton_schulz"``, ``"svd"``, ``"gram_newton_schulz"`` (the same schedule on the Gram
        matrix, with the restart positions certified for the schedule in the matrix's dtype; refused where
        none are) or ``"auto"`` (Gram where the flop model is lower and restarts are certified for the dtype,
        else the standard iteration; :func:`describe_pairs` with ``msign=`` shows the choice). A Newton–Schulz
        ``ns_coeffs`` whose scalar iteration
        leaves ``[−100, 100]`` on ``[0, 1]`` (it diverges) is refused here.
      gram_roots: ``"eigh"`` (the emitted code's Gram roots).
      adamw_params: ``(path, array) -> bool`` selecting matrices for AdamW (embeddings, heads), or as
        data a path pattern or a list of them (``fnmatch`` on the whole path: ``["embed", "*/head"]``);
        AdamW also takes every parameter with fewer than 2 axes and every bias, whatever its shape
        (:func:`is_bias`: flax attention's ``(heads, d_h)`` biases, stacked layers' ``(layers, d)`` ones;
        ``optax.contrib.muon``'s default would give a 2-D bias Muon).
      adaptive, consistent_rms, muon_weight_dimension_numbers: as in ``optax.contrib.muon``
        (:func:`~numerics.optimizer.transform.scale_by_compositional_muon`); a ``None`` leaf of
        ``muon_weight_dimension_numbers`` sends that parameter to AdamW (a declared pair's members
        stay with their rule); a prefix tree's entry holds for every leaf below it, as in optax.
      roles: which parameters outside the pairs take Muon when ``muon_weight_dimension_numbers`` is not given.
        ``"project"`` (default): every array with 2 or more axes that is not a bias, more than 2 being a batch of
        matrices over the leading axes, because stacked layers ``(L, d_in, d_out)`` are ``L`` matrices here;
        ``"optax"``: ``optax.contrib.muon``'s rule, exactly the 2-D arrays (2-D biases too), so a ``(1, 2, 3)``
        tensor or ``(3, 3, c_in, c_out)`` convolution weights take AdamW (:data:`OPTAX_PARITY` sets it).
      preconditioning: ``"frobenius"`` only, ``optax.contrib.muon``'s default: Newton–Schulz starts from
        ``X/‖X‖_F``; its other starts (``"spectral"``, ``"aol"``, ``"schatten"``) are refused, naming them.
      check_finite: raise (naming the parameter) when a gradient has a NaN or Inf.
      on_nonfinite: what happens to a step whose update has a NaN or Inf although the gradients
        are finite (an overflow: float16 weights near 0 with ``damping=0``, a schedule that
        diverges). Default ``"skip"``: the step is not applied (every update is zero, momentum and
        counts stay as they were, as ``optax.apply_if_finite`` does) and it is counted in the
        state's last element, a :class:`SkipNonFiniteState` (``notfinite_count``, ``last_finite``,
        ``total_notfinite``); under ``jit`` too. ``"raise"``: skipped as well, and a ``ValueError``
        names the first parameter whose update is NaN/Inf (under ``jit`` from a host callback that
        runs only on failure). Either way no NaN/Inf reaches the parameters.

    The update of a pair is ``−η·`` the derived rule at ``ε = 2``: each half of the product change
    has operator norm ``η``, e.g. for half-split

    .. math:: \Delta W_Q = -\eta\,\mathrm{msign}(\hat m_Q C_K^{-1}) C_K^{-1},\quad
              C_K = (W_K^\top W_K + \lambda I)^{1/2},

    with :math:`\hat m` the (Nesterov) momentum, computed in the parameter's dtype (float64 gradients of
    float32 weights are cast to float32). Matrices of more than two axes are batched over the
    leading axes (stacked layers), and the pairs, groups (Muon matrices) of one shape in separate
    leaves, every layer's, run as one stacked call (:mod:`~numerics.optimizer.batching`: the step
    compiles each rule once).
    The state is a tuple: the gradient check's, the partition's (the
    ``"cm"`` and ``"adam"`` parts) and the :class:`SkipNonFiniteState`.

    Examples:
      One attention layer with two heads: a query/key pair, an output/value pair, an MLP matrix
      (Muon) and a bias (AdamW):

      >>> import jax.numpy as jnp
      >>> from numerics.optimizer import OVPair, QKPair, compositional_muon
      >>> params = {"attn": {n: jnp.eye(8) for n in ("wq", "wk", "wv", "wo")},
      ...           "mlp": jnp.ones((8, 16)), "bias": jnp.zeros(16)}
      >>> pairs = [QKPair("attn/wq", "attn/wk", heads=2), OVPair("attn/wo", "attn/wv", heads=2)]
      >>> opt = compositional_muon(1e-2, pairs=pairs)
      >>> state = opt.init(params)

      Then ``updates, state = opt.update(grads, state, params)`` as with any optax optimizer;
      :func:`describe_pairs` shows what each parameter gets.
    """
    check_options(qk_rule, ov_rule, gauge, gram_roots, msign, lora_rule)
    check_hyperparameter_precision(beta=beta, eps=eps, adam_b1=adam_b1, adam_b2=adam_b2)
    check_hyperparameter_values({"beta": beta, "adam_b1": adam_b1, "adam_b2": adam_b2},
                                {"eps": eps, "adam_eps_root": adam_eps_root, "weight_decay": weight_decay,
                                 "adam_weight_decay": adam_weight_decay},
                                {"learning_rate": learning_rate, "adam_learning_rate": adam_learning_rate})
    check_preconditioning(preconditioning)
    check_roles(roles)
    check_finite, nesterov = flag("check_finite", check_finite), flag("nesterov", nesterov)
    mu_dtype = momentum_dtype(mu_dtype)  # also jnp.bfloat16 injected as a "schedule" by inject_hyperparams
    pairs = pair_declaration(pairs)
    to_adamw = adamw_selector(adamw_params)
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate

    def labels(params):
        kinds = parameter_roles(params, pairs, to_adamw, muon_weight_dimension_numbers, roles)  # checks keys first
        return jax.tree_util.tree_unflatten(jax.tree.structure(params), list(kinds.values()))

    core = [scale_by_compositional_muon(pairs, ns_coeffs, ns_steps, beta, mu_dtype, nesterov=nesterov,
                                        qk_rule=qk_rule, ov_rule=ov_rule, lora_rule=lora_rule, damping=damping,
                                        gauge=gauge,
                                        msign=msign, gram_roots=gram_roots, adaptive=adaptive,
                                        consistent_rms=consistent_rms, preconditioning=preconditioning,
                                        weight_dimension_numbers=muon_weight_dimension_numbers),
            optax.add_decayed_weights(weight_decay, weight_decay_mask),
            optax.scale_by_learning_rate(learning_rate)]
    if gauge == "rebalance":
        core.append(rebalance_pairs(pairs))
    parts = optax.partition(
        {"cm": optax.chain(*core),
         "adam": optax.adamw(adam_learning_rate, b1=adam_b1, b2=adam_b2, eps=eps, eps_root=adam_eps_root,
                             weight_decay=adam_weight_decay, mu_dtype=mu_dtype, nesterov=nesterov)},
        labels)
    hint = ("; the gradients are finite, so the update overflowed in its dtype: use a wider dtype, damping > 0 "
            "or another ns_coeffs" if check_finite else
            "; a gradient was NaN/Inf (check_finite=False) or the update overflowed in its dtype")
    return skip_nonfinite_updates(check_finite_gradients() if check_finite else optax.identity(), parts,
                                  on_nonfinite=on_nonfinite, hint=hint)
