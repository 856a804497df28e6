"""kiln.scipy: the subset of jax.scipy that kiln provides (special functions for now)."""

from kiln.scipy import special  # noqa: F401
