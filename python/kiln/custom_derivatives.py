"""kiln.custom_derivatives: jax.custom_derivatives' public names."""
from kiln._src.custom import custom_jvp, custom_vjp  # noqa: F401
from kiln._src.extras import closure_convert, custom_gradient, linear_transpose  # noqa: F401
