"""kiln.scipy: the subset of jax.scipy that kiln provides (special functions, linalg, optimize, signal, stats)."""

from kiln.scipy import linalg, optimize, signal, special, stats  # noqa: F401
