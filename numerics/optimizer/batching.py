"""Same-shape work of one step stacked into one call: one copy of a rule in the compiled step per shape, not per layer.

A model's layers have the same shapes, so the attention pairs, LoRA pairs or MLA blocks of every layer (and
the Muon matrices of one shape) can run as one batched call: the emitted rules and ``msign`` batch over
leading axes, and each matrix is scaled, whitened and orthogonalized on its own there (every reduction is
over its last two axes), so stacking does not mix the layers. The step's program then holds each rule once
instead of once per layer, which is what its compile time scales with (XLA compiles every fused op of
the program; ``optax.contrib.muon`` holds one Newton–Schulz per matrix).
What a stacked call shares: the route of :func:`~foundation.compute.jax_damped_gram.gram_eigh`, taken for the
whole batch (the SVD route as soon as one partner of the batch is ill-conditioned; the two routes agree to
rounding). And the emitted rules check their outputs per call: a NaN or Inf in one layer's result makes every
layer's result of that call NaN, as for layers stored stacked in one leaf. The step is skipped either way
(``on_nonfinite``); ``on_nonfinite="raise"`` names the first of the call's parameters and says the others
share the result (the layer that overflowed may be any of them). The stacked operands are copies, made while
the rules run (XLA may fuse them into their first use).
Measured (``python -m benchmarks.step --small --layers 12``, 2-core CPU): the first step of 12 GPT-2-shaped
layers compiled in 12.5 s stacked against 28.9 s unstacked.
Splitting the results: XLA fuses each layer's slice of a stacked result into the compiled ops that use it (the
update, the new parameter), and a static slice bakes its offset into them, so every layer would compile
ops of its own. The results are split at :class:`Positions` instead, int32 scalars ``0 … n − 1`` held in
the optimizer's state (:func:`slot_positions`): under ``jit`` they are runtime values, every layer's compiled ops
are then identical, and XLA compiles one for all. The first training step of 12 GPT-2-small layers holds
199 compiled ops instead of 323 (``optax.contrib.muon``'s compile time ×1.3–1.7 instead of ×1.9–2.0,
``python -m benchmarks.step --layers 12``); the values are the same bit for bit (a dynamic slice at ``i`` is the slice
at ``i``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import fields, replace
from typing import Any, NamedTuple, TypeVar

import jax
import jax.numpy as jnp

T = TypeVar("T")


def same_key_batches(items: Iterable[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """``items`` grouped by ``key``, in the order each key first appears (each group in the items' order)."""
    groups: dict[Hashable, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())


def array_key(*arrays: Any) -> tuple:
    """The shapes and dtypes of ``arrays``: what must agree for them to be stacked with others of the same key."""
    return tuple((tuple(x.shape), jnp.dtype(x.dtype).name) for x in arrays)


def unnamed(record: Any) -> Any:
    """A pair or group record (a dataclass) with its member paths blanked: what the records of one layout share."""
    return replace(record, **{f.name: "" for f in fields(record) if getattr(record, f.name) in record.members})


def largest_stack(arrays: Iterable[Any]) -> int:
    """An upper bound on how many of ``arrays`` one stacked call can hold: the most matrices (``ndim ≥ 2``) of
    one shape, a tall matrix counted as its transpose (the Muon path stacks it with the wide ones)."""
    shapes = Counter((*x.shape[:-2], *sorted(x.shape[-2:])) for x in arrays if jnp.ndim(x) >= 2)
    return max(shapes.values(), default=0)


def slot_positions(n: int) -> tuple[jax.Array, ...]:
    """``(0, 1, …, n − 1)`` as int32 scalars, one array each, for the optimizer's state; none when ``n ≤ 1``
    (nothing is stacked)."""
    return tuple(jnp.asarray(i, jnp.int32) for i in range(n)) if n > 1 else ()


class Positions(NamedTuple):
    """Where :func:`stacked_call` splits its results: ``slots`` (:func:`slot_positions`, from the state) and
    ``valid``, whether they still are ``0 … n − 1`` (a traced flag; results are NaN where it is False)."""

    slots: tuple = ()
    valid: Any = True


#: no slots: results split by static slices (a state made before slots existed, or nothing stacked)
STATIC = Positions()


def checked_positions(slots: Sequence[Any]) -> Positions:
    """:class:`Positions` of the state's ``slots``: concrete and not ``0 … n − 1``, ``ValueError``; traced, a
    flag that turns the stacked results into NaN (the non-finite guard then skips the step)."""
    if not slots:
        return STATIC
    values = jnp.stack([jnp.asarray(x) for x in slots])
    if not jnp.issubdtype(values.dtype, jnp.integer):
        raise TypeError(f"compositional_muon.update: the state's slots must be int32 scalars (opt.init makes them), "
                        f"got dtype {values.dtype}")
    valid = jnp.all(values == jnp.arange(len(slots), dtype=values.dtype))
    if not isinstance(valid, jax.core.Tracer) and not bool(valid):
        raise ValueError(f"compositional_muon.update: the state's slots must be 0, 1, ..., {len(slots) - 1} as "
                         f"opt.init made them, got {values.tolist()}")
    return Positions(tuple(slots), valid)


def stacked_call(fn: Callable[..., Sequence[jax.Array]], operands: Sequence[Sequence[jax.Array]],
                 at: Positions = STATIC) -> list[tuple]:
    """``[fn(*args) for args in operands]`` as one call of ``fn`` on the operands stacked along a new leading axis.

    Every ``args`` must have the same shapes and dtypes (:func:`array_key`) and ``fn`` must batch over leading
    axes, returning a tuple of arrays. A single ``args`` is passed as it is (nothing is stacked). The results
    are split at ``at.slots`` (dynamic slices; a static slice beyond the last slot).
    """
    if len(operands) == 1:
        return [tuple(fn(*operands[0]))]
    outs = fn(*(jnp.stack(column) for column in zip(*operands, strict=True)))
    if isinstance(at.valid, jax.core.Tracer):
        outs = [jnp.where(at.valid, out, jnp.nan) for out in outs]
    return [tuple(_take(out, i, at.slots) for out in outs) for i in range(len(operands))]


def _take(x: jax.Array, i: int, slots: tuple) -> jax.Array:
    """``x[i]``, at the runtime position ``slots[i]`` when there is one."""
    return jax.lax.dynamic_index_in_dim(x, slots[i], keepdims=False) if i < len(slots) else x[i]
