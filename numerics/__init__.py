"""Numerics: the kernels everything computes with (:mod:`numerics.kernels`, layer 1) and the
products built on the derivations (layer 6): the emitted JAX modules (:mod:`numerics.emitted`,
generated), the optax optimizer (:mod:`numerics.optimizer`), training (:mod:`numerics.train`),
sharding (:mod:`numerics.sharding`) and gauge rebalancing (:mod:`numerics.gauge_balance`)."""
