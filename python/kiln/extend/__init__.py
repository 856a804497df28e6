"""jax.extend: the layer libraries build on (primitives, programs, traces), bound to kiln's own
classes. Submodules: core, linear_util, source_info_util, mlir, random, backend, sharding."""
from kiln.extend import backend, core, linear_util, mlir, random, sharding, source_info_util  # noqa: F401
