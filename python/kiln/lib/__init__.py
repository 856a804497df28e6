"""jax.lib: the version of the jaxlib release kiln follows (libraries and tests compare
`jax.lib.__version__`). kiln has no XLA extension: jax.lib.xla_extension and xla_client are not
provided."""
from kiln.version import _minimum_jaxlib_version as __version__  # noqa: F401
