"""jax.extend.mlir: kiln compiles through its own MLIR pipeline; JAX's MLIR bindings are not
provided (lower a primitive with jax.interpreters.mlir.register_lowering(prim, lower_fun(fn)))."""
from kiln.interpreters.mlir import register_lowering, lower_fun  # noqa: F401
