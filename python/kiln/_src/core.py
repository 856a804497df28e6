"""kiln's Python core, by job in three modules, each importing only those before it:

- array.py: the Array type and making arrays from host data;
- tracing.py: Tracer and the trace handles over the C trace state (tracer/, python/ext/tracer.c);
- dispatch.py: `bind`, which applies a primitive by recording an equation into the current
  trace or, on concrete arrays, by running a cached one-equation executable (eager mode).

This module re-exports their names for the rest of the package (`from kiln._src import core`).
The C extension kiln._kiln owns programs, traces, compilation and buffers.
"""

from kiln._src.array import (Array, _check_host_array, _contains_tracer, _dtype_by_name, _np_dtype,  # noqa: F401
                             _rebuild, _scalar_cache, asarray, from_numpy, scalar_array)
from kiln._src.tracing import (Trace, Tracer, _ad_depth, ad_tracing, concrete_or_error, current_trace,  # noqa: F401
                               is_tracer, literal, pop_trace, push_trace, scalar_constant, tracing)
from kiln._src.dispatch import (_eager_entry, _fused_exe, _on_config_change, bind, bind1,  # noqa: F401
                                config_state)


def trace_state_clean():
    """True when no trace is live on this thread (jax._src.core.trace_state_clean: numpyro asks
    whether it runs under a transformation)."""
    return not tracing()


def __getattr__(name):
    """jax._src.core's public names that libraries reach for (flax: core.ShapedArray) are
    jax.core's (kiln.core)."""
    if name.startswith("__"):
        raise AttributeError(name)
    import kiln.core as public
    try:
        return getattr(public, name)
    except AttributeError:
        raise AttributeError(f"module 'kiln._src.core' has no attribute {name!r}") from None
