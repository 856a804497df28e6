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


__all__ = ["callback", "print", "breakpoint"]
