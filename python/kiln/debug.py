"""kiln.debug: jax.debug's printing and callbacks, run each time the program runs (under jit, in
loops, once per element under vmap; never differentiated)."""
from kiln._src.callback import debug_callback as callback, debug_print as print  # noqa: F401,A004


def breakpoint(*, backend=None, filter_frames=True, num_frames=None, ordered=False, token=None, **kwargs):
    """Stops in Python's debugger (pdb) where the program runs this point, with the values named
    by keyword arguments in scope as `values` (kiln's form of jax.debug.breakpoint: no traced
    frames to walk, the arrays passed as keywords instead)."""
    del backend, filter_frames, num_frames, ordered, token

    def stop(**values):
        import pdb
        pdb.Pdb().set_trace()
        return values
    callback(stop, **kwargs)


def log(fmt, *args, level=20, logger="kiln", **kwargs):
    """Logs fmt.format(*args, **kwargs) through Python's logging each time the program runs (as
    jax.debug.log; level: a logging level, INFO by default)."""
    import logging

    def emit(*a, **k):
        logging.getLogger(logger).log(level, fmt.format(*a, **k))
    callback(emit, *args, **kwargs)


__all__ = ["callback", "print", "breakpoint", "log"]
