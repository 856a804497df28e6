"""jax._src.flatten_util (blackjax imports ravel_pytree from here)."""
from kiln.flatten_util import ravel_pytree  # noqa: F401
