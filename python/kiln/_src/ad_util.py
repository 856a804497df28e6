"""jax._src.ad_util's names libraries import (lineax: stop_gradient_p)."""
from kiln._src.primitive import primitive_named as _named
from kiln.interpreters.ad import Zero, add_jaxvals, zeros_like_aval  # noqa: F401
from kiln.custom_derivatives import SymbolicZero  # noqa: F401

stop_gradient_p = _named("stop_gradient")
