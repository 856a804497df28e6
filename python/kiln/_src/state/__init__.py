"""jax._src.state's names libraries import (flax nnx: AbstractRef)."""
