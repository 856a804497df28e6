"""kiln.typing: the annotations JAX libraries use (jax.typing)."""
from typing import Any, Union

import numpy as np

from kiln._src.basearray import Array

ArrayLike = Union[Array, np.ndarray, np.bool_, np.number, bool, int, float, complex]
"""What kiln.numpy functions accept as an array."""

DTypeLike = Union[str, type, np.dtype, Any]
"""What names a dtype: a string, a scalar type (kiln.numpy.float32), a numpy dtype."""

__all__ = ["ArrayLike", "DTypeLike"]
