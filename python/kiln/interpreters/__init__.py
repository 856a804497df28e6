"""jax.interpreters: the rule registries libraries add their primitives' rules to (ad, batching,
mlir), and the few helpers they call."""
from kiln.interpreters import ad, batching, mlir, partial_eval, pxla, xla  # noqa: F401
