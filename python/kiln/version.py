"""jax.version: the JAX release whose API and numbers kiln follows (libraries pick code paths by
`jax.version.__version_info__`, flax's scan among them), and kiln's own release."""
__version__ = _version = "0.10.2"
__version_info__ = (0, 10, 2)
_minimum_jaxlib_version = "0.10.2"
_minimum_jaxlib_version_info = (0, 10, 2)
kiln_version = "0.1.0"


def _version_as_tuple(version_str):
    return tuple(int(i) for i in version_str.split(".") if i.isdigit())
