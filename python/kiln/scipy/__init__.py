"""kiln.scipy: the subset of jax.scipy that kiln provides (special functions, linalg, stats)."""

from kiln.scipy import linalg, signal, special, stats  # noqa: F401
