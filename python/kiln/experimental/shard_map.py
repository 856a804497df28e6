"""kiln.experimental.shard_map: jax.experimental.shard_map's name for kiln.shard_map (check_rep is
the old name of check_vma)."""
from kiln._src.spmd import shard_map  # noqa: F401
