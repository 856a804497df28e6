"""kiln.stages: the types of jit(f).lower(...) and .compile()."""
from kiln._src.api import Compiled, Lowered  # noqa: F401
