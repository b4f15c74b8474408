"""Compositional Muon as an optax optimizer.

``compositional_muon(learning_rate, pairs=...)`` returns an :class:`optax.GradientTransformation`.
Attention factors are updated as pairs by the derived rules of :mod:`derivations` (through the
emitted modules shipped in :mod:`numerics.emitted`), the other matrices by Muon with the project's
one Newton–Schulz, vectors by AdamW:

* a query/key pair ``M_h = W_{Q,h} W_{K,h}ᵀ`` by ``qk_rule``: ``"half_split"``
  (``ΔW_Q = −(ε/2) msign(G_Q C_K⁻¹) C_K⁻¹``, the key side likewise; with ``kv_heads < heads`` the
  grouped-query rule, whose shared key side has budget ``ε/(2G)``), ``"joint"`` (one sign over
  ``[G_Q C_K⁻¹ | G_K C_Q⁻¹]``), ``"isotropic"`` (``ΔW_Q = −(ε/2) c_K⁻¹ msign(G_Q)``),
  ``"sylvester"`` (the minimum-norm step ``(H W_K, Hᵀ W_Q)`` towards the Muon step ``D = −msign(Ĝ_M)``
  on the product, ``(W_QW_Qᵀ + λI) H + H (W_KW_Kᵀ + λI) = D``; :func:`product_gradient` gives ``Ĝ_M``);
* an output/value pair ``M_h = W_{O,h} W_{V,h}`` by the hybrid OV rule (head-local V side, one
  global sign on the O side; shared value heads when ``kv_heads < heads``);
* a LoRA adapter ``W = W₀ + B A`` (:class:`~numerics.optimizer.groups.LoRAPair`, found by name:
  ``lora_A``/``lora_B``, ``lora_a``/``lora_b``) by ``lora_rule`` (``derivations.lora``: ``"half_split"``, or
  ``"joint"`` for square adapters), and a multi-head latent attention block
  (:class:`~numerics.optimizer.groups.MLAPair`: ``wq_a``, ``wq_b``, ``wkv_a``, ``wkv_b``, ``wo``) by the rules of
  ``derivations.mla`` (per head: the query, key and value up-projections and the output projection;
  shared: the two down-projections);
* every other matrix by Muon, ``ΔW = −η √max(1, fan_out/fan_in) msign(m)`` (as
  ``optax.contrib.muon``), and vectors (or what ``adamw_params`` selects) by ``optax.adamw``.

``G`` above is the momentum, not the raw gradient: ``m ← β m + (1 − β) g`` with bias correction and
Nesterov's look-ahead, exactly as ``optax.contrib.scale_by_muon`` forms it. The rules are positively
homogeneous of degree 0 in ``G`` and linear in ``ε``; the learning rate ``η`` is the budget of each
half, ``ε = 2η``: ``‖ΔW_Q W_Kᵀ‖_op = ‖W_Q ΔW_Kᵀ‖_op = η``, so at partners with orthonormal columns the
half-split step is Muon's step with the same ``η``. The Sylvester rule has no halves; it is called with
target ``D = −η msign(Ĝ_M)`` (``‖D‖_op = η``) and its first-order product change
``T(ΔW_Q, ΔW_K) = D − 2λH`` satisfies ``‖T(ΔW_Q, ΔW_K)‖_op ≤ 2η``, the bound ``η + η`` of the other rules'
two halves: ``H = ∫₀^∞ e^{−t(W_QW_Qᵀ+λI)} D e^{−t(W_KW_Kᵀ+λI)} dt`` gives ``‖2λH‖_op ≤ ‖D‖_op``.
Learning-rate schedules and decoupled weight decay work as in optax (``scale_by_learning_rate``,
``add_decayed_weights``).

Gauge (``M = W_Q W_Kᵀ`` is unchanged by ``(W_Q R, W_K R⁻ᵀ)``): ``gauge="horizontal_projection"``
projects the stored momentum of every pair onto the horizontal space each step (derived in
``derivations.gauge``: ``(m_Q + W_Q X, m_K − W_K Xᵀ)`` with ``X`` from a ``d_h × d_h`` Sylvester
equation); ``gauge="rebalance"`` moves the factors along the gauge after every step so that both
factors of each head have the same Gram matrix (:func:`numerics.optimizer.gauge_balance.balance`). A shared
key (value) head ``K_g`` of a grouped-query pair carries one gauge for its whole group,
``(W_{Q,h} R⁻ᵀ for every h in g, K_g R)``: both options act on the stacked pair
``(Q̄_g = [W_{Q,h}]_{h∈g} stacked row-wise, K_g)`` exactly as on a single head.

Reference: Compositional Muon (per-head whitened steepest descent on the attention products);
Muon: Jordan et al. 2024; optax: ``optax.contrib.muon``.

The package by concern: :mod:`~numerics.optimizer.pairs` (pair declarations, the resolved
:class:`~numerics.optimizer.pairs.Plan`, layouts), :mod:`~numerics.optimizer.groups` (LoRA and MLA
declarations), :mod:`~numerics.optimizer.options` (the typed
:class:`~numerics.optimizer.options.DirectionOptions`, schedules, scalar checks),
:mod:`~numerics.optimizer.rules` (the direction rules as ``{name: function}`` registries),
:mod:`~numerics.optimizer.transform` (the optax transformations), :mod:`~numerics.optimizer.nonfinite` (the
non-finite guard and :func:`checked_jit`),
:mod:`~numerics.optimizer.batching` (the pairs and Muon matrices of one shape, every layer's, as one stacked
call), :mod:`~numerics.optimizer.head_axes` (unpaired flax kernels with head axes as whole matrices) and
:mod:`~numerics.optimizer.alias` (:func:`compositional_muon`). Beside it, :mod:`~numerics.optimizer.whitened`
(:func:`whitened_descent`): the Shampoo family of ``derivations.shampoo`` on every matrix, with Shampoo's
accumulated preconditioners.
"""

from __future__ import annotations

from .alias import OPTAX_PARITY, ROLES, compositional_muon, default_muon, describe_pairs, is_bias, parameter_roles
from .groups import LORA_NAMES, LoRAPair, LoRAPlan, MLAPair, MLAPlan, auto_lora_pairs
from .nonfinite import SkipNonFiniteState, check_finite_gradients, checked_jit, skip_nonfinite_updates
from .options import (
    GAUGES,
    GRAM_ROOTS,
    MSIGN_METHODS,
    NONFINITE_POLICIES,
    OPTAX_PRESETS,
    SCHEDULE_BOUND,
    DirectionOptions,
    check_damping_range,
    check_gradients_match,
    check_schedule_bounded,
    damping_ok,
    flag,
    momentum_dtype,
    real_scalar,
    resolve_schedule,
    schedule_for,
)
from .options import schedule_for as _schedule_for
from .pairs import (
    AUTO_NAMES,
    AutoPairs,
    OVPair,
    PairPlan,
    Pairs,
    Plan,
    QKPair,
    adamw_selector,
    auto_pairs,
    group_stack,
    group_unstack,
    named_leaves,
    pair_declaration,
    pair_from_data,
    path_name,
    plan_pairs,
)
from .rules import (
    GROUPED_QK_DIRECTIONS,
    LORA_DIRECTIONS,
    LORA_RULES,
    OV_DIRECTIONS,
    OV_RULES,
    QK_DIRECTIONS,
    QK_RULES,
    mla_partners,
    product_gradient,
)
from .transform import (
    CompositionalMuonState,
    _project_pair,
    check_matrix_dtypes,
    check_options,
    dimension_numbers_by_path,
    direction_dtype,
    rebalance_pairs,
    scale_by_compositional_muon,
)
from .whitened import WhitenedState, scale_by_whitened_descent, whitened_descent

__all__ = [
    "WhitenedState",
    "scale_by_whitened_descent",
    "whitened_descent",
    "AUTO_NAMES",
    "LORA_DIRECTIONS",
    "LORA_NAMES",
    "LORA_RULES",
    "LoRAPair",
    "LoRAPlan",
    "MLAPair",
    "MLAPlan",
    "auto_lora_pairs",
    "mla_partners",
    "AutoPairs",
    "OPTAX_PARITY",
    "OPTAX_PRESETS",
    "ROLES",
    "adamw_selector",
    "auto_pairs",
    "damping_ok",
    "describe_pairs",
    "dimension_numbers_by_path",
    "direction_dtype",
    "pair_from_data",
    "parameter_roles",
    "GAUGES",
    "GRAM_ROOTS",
    "GROUPED_QK_DIRECTIONS",
    "MSIGN_METHODS",
    "NONFINITE_POLICIES",
    "OV_DIRECTIONS",
    "OV_RULES",
    "QK_DIRECTIONS",
    "QK_RULES",
    "SCHEDULE_BOUND",
    "CompositionalMuonState",
    "DirectionOptions",
    "OVPair",
    "PairPlan",
    "Pairs",
    "Plan",
    "QKPair",
    "SkipNonFiniteState",
    "_project_pair",
    "_schedule_for",
    "check_damping_range",
    "check_finite_gradients",
    "check_gradients_match",
    "check_matrix_dtypes",
    "check_options",
    "checked_jit",
    "check_schedule_bounded",
    "compositional_muon",
    "default_muon",
    "flag",
    "is_bias",
    "momentum_dtype",
    "group_stack",
    "group_unstack",
    "named_leaves",
    "pair_declaration",
    "path_name",
    "plan_pairs",
    "product_gradient",
    "real_scalar",
    "rebalance_pairs",
    "resolve_schedule",
    "scale_by_compositional_muon",
    "schedule_for",
    "skip_nonfinite_updates",
]
