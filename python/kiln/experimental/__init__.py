"""kiln.experimental: jax.experimental's commonly used names."""
from kiln._src.config import enable_x64, disable_x64  # noqa: F401
from kiln._src.callback import io_callback  # noqa: F401,E402
from kiln.experimental import checkify  # noqa: F401,E402
