"""kiln.scipy: the subset of jax.scipy that kiln provides (special functions, linalg)."""

from kiln.scipy import linalg, special  # noqa: F401
