"""The named lemmas of Compositional Muon (Lemmas 1–6 and their companions) as rewrite rules.

Each :class:`Lemma` is a small rule object: a LaTeX statement, its side conditions, a rewrite that
finds the lemma's left-hand side in an expression and replaces it (checking the facts the side
conditions need, and refusing otherwise with the reason), and a self-check that exercises both the
statement and the rewrite code on random instances. Rewrites that act node by node run on one
traversal driver (:func:`derivations.lemmas.base.rewrite_nodes`). The lemmas live in one module per
family; :data:`ALL_LEMMAS` is collected from those modules (no hand-kept list). Lemmas never contain
a rule's final formula: they are generic identities.
"""

from derivations.lemmas import (
    adjoint,
    blocks,
    chain_rule,
    counting,
    descent,
    gram,
    homogeneity,
    invertible_change,
    isometry,
    msign,
    range_restriction,
    ring,
    spd_powers,
    spectral,
    whitening,
)
from derivations.lemmas.adjoint import (  # noqa: F401
    ADJOINT_MOVE,
    INNER_LINEARITY,
    _adjoint_ids,
    _adjoint_rewrite,
    _linearity_ids,
    _linearity_rewrite,
)
from derivations.lemmas.base import (
    _NP,
    _SMALL,
    SELF_CHECK_TOL,
    Applies,
    Case,
    Lemma,
    NotApplicable,
    Offer,
    SearchView,
    SelfCheck,
    _contexts,
    _fresh,
    _full_rank_known,
    _invertibility,
    _isometry_condition,
    _k,
    _m,
    _n,
    _orthonormal_cols,
    _orthonormal_rows,
    _tall,
    everywhere,
)
from derivations.lemmas.blocks import (  # noqa: F401
    BLOCK_DIAGONAL_ROOT,
    BLOCK_STACKING,
    CONCATENATION,
    BlockMaxOpNorm,
    ColumnBlock,
    HeadLayout,
    Reduction,
    Restriction,
)
from derivations.lemmas.chain_rule import (
    CHAIN_RULE,
    _chain_ids,
    _chain_instance,
    _chain_rule_rewrite,
    _jax_gradient_fn,
    _jax_loss_gradients,
    _loss_gradient,
    chain_rule_products,
)
from derivations.lemmas.descent import (
    LINEAR_STEEPEST_DESCENT,
    _lsd_check,
    _lsd_rewrite,
    _lsd_solution,
    operator_ball_certificate,
    singular_values,
)
from derivations.lemmas.homogeneity import HOMOGENEITY
from derivations.lemmas.invertible_change import WHITENING_CHANGE, inverse_of
from derivations.lemmas.isometry import (
    ORTHONORMAL_INVARIANCE,
    RMS_ISOMETRY,
    TRANSPOSITION,
    _ortho_norm_ids,
    _ortho_norm_rewrite,
    _transpose_ids,
    _transpose_rewrite,
)
from derivations.lemmas.msign import (
    BLOCK_PRODUCT,
    MSIGN_ISOMETRY,
    MSIGN_ORTHOGONAL,
    MSIGN_POLAR_FORM,
    MSIGN_SCALE,
    MSIGN_TRANSPOSE,
    ORTHOGONAL_BLOCKS,
    _block_product_ids,
    _block_product_rewrite,
    _msign_absorb_ids,
    _msign_absorb_rewrite,
    _msign_extract_ids,
    _msign_extract_rewrite,
    _msign_scale_ids,
    _msign_scale_rewrite,
    _msign_transpose_ids,
    _msign_transpose_rewrite,
    _orthogonal_gram_rewrite,
    _orthogonal_ids,
    _polar_form_ids,
    _polar_form_rewrite,
)
from derivations.lemmas.range_restriction import RANGE_RESTRICTION, right_inverse_of
from derivations.lemmas.ring import (
    RING,
    SYLVESTER_EQUATION,
    _collect_ids,
    _collect_rewrite,
    _distribute,
    _split_coeff,
    _sylvester_ids,
    _sylvester_rewrite,
)
from derivations.lemmas.whitening import (
    CHANGE_OF_VARIABLES,
    GAUGE_POLAR,
    ISOTROPIC_PARTNER,
    POLAR_INVERSE,
    POLAR_SUBSTITUTION,
    PROJECTOR,
    _cov_ids,
    _cov_rewrite,
    _gauge_ids,
    _gauge_polar_rewrite,
    _isotropic_ids,
    _isotropic_rewrite,
    _polar_ids,
    _polar_inverse_ids,
    _polar_inverse_rewrite,
    _polar_pairs,
    _polar_sub_rewrite,
    _projector_ids,
    _projector_rewrite,
)
from derivations.vocabulary.nodes import GramInvSqrt, NuclearNorm  # noqa: F401 (names the single-module lemmas re-exported)

#: the family modules, in reading order
FAMILY_MODULES = (descent, isometry, adjoint, whitening, msign, chain_rule, ring, blocks, spectral, counting, gram,
                  spd_powers, invertible_change, homogeneity, range_restriction)


def collect(modules=FAMILY_MODULES) -> tuple:
    """Every :class:`Lemma` defined in ``modules``, in definition order (the registry)."""
    return tuple(obj for module in modules for obj in vars(module).values() if isinstance(obj, Lemma))


ALL_LEMMAS = collect()


def registered() -> list:
    """The lemma families' lemmas, one per key: :data:`ALL_LEMMAS`, then any other lemma this package exposes
    (looked up when called: a lemma replaced here, as the tests plant mistakes, is the one returned)."""
    found: dict = {}
    for lemma in (*ALL_LEMMAS, *(v for v in globals().values() if isinstance(v, Lemma))):
        found.setdefault(lemma.key, lemma)
    return list(found.values())


def duplicate_numbers(lemmas) -> list[str]:
    """One line for each lemma that shares its number, or its key, with an earlier different one of ``lemmas``,
    naming both: every page cites a step's lemma by its number (``Lemma 1m``), the search and the docs by its key.
    The same lemma reached twice is not a duplicate."""
    out, numbers, keys = [], {}, {}
    for lemma in lemmas:
        for what, seen, value in (("number", numbers, lemma.number), ("key", keys, lemma.key)):
            first = seen.setdefault(value, lemma)
            if first is not lemma and first != lemma:
                out.append(f"lemma {what} {value!r} is declared twice: Lemma {first.number} ({first.key}: "
                           f"{first.title}) and Lemma {lemma.number} ({lemma.key}: {lemma.title})")
    return out
