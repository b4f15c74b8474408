"""Numerics, the products built on the derivations (layer 6): the emitted JAX modules (:mod:`numerics.emitted`,
generated), the optax optimizer (:mod:`numerics.optimizer`, with gauge rebalancing), training
(:mod:`numerics.train`), the training study (:mod:`numerics.study`) and sharding (:mod:`numerics.sharding`,
:mod:`numerics.distributed`). What they compute with is on the ground floor, :mod:`foundation.compute`."""
