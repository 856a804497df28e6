"""jax.extend.sharding."""
from kiln.sharding import *  # noqa: F401,F403
