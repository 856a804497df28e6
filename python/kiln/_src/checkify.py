"""jax._src.checkify (flax nnx imports it as checkify_lib): kiln.experimental.checkify's names, plus
the type variable JAX's module defines for its signatures."""
import typing

from kiln.experimental.checkify import *  # noqa: F401,F403
from kiln.experimental import checkify as _public

Out = typing.TypeVar("Out")
JaxException = getattr(_public, "JaxException", getattr(_public, "JaxRuntimeError", Exception))
Error = _public.Error
checkify = _public.checkify
user_checks = _public.user_checks
