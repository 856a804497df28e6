"""Multi-process start-up (jax.distributed): initialize, shutdown, is_initialized, and the
coordination service's client (key-value store and barriers). See kiln/_src/distributed.py."""

from kiln._src.distributed import (initialize, shutdown, is_initialized, client,  # noqa: F401
                                   global_state, expand_hostlist)
from kiln._src.coordination import CoordinationError  # noqa: F401
