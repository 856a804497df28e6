"""jax.interpreters.pxla: kiln's multi-device layer is kiln.sharding and shard_map."""
from kiln.sharding import Mesh  # noqa: F401
