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


class DebugEffect:
    """jax.debug's effect type of an unordered callback (kiln's programs carry no effect types:
    its callbacks are ordered as their launches are)."""


class OrderedDebugEffect(DebugEffect):
    """jax.debug's effect type of an ordered callback."""


def visualize_array_sharding(arr, *, use_color=True, scale=1.0, min_width=9, max_width=80, color_map=None):
    """Prints which devices hold which block of a 1-D or 2-D array, one cell per block (jax.debug's
    table, drawn in plain text: kiln has no rich console)."""
    del use_color, scale, color_map
    from kiln._src import core
    if isinstance(arr, core.Tracer):
        raise TypeError("visualize_array_sharding: needs a concrete array, not a traced value (use "
                        "jax.debug.inspect_array_sharding's callback form outside jit)")
    import builtins
    builtins.print(_sharding_table(tuple(arr.shape), arr.sharding, min_width, max_width))


def visualize_sharding(shape, sharding, *, use_color=True, scale=1.0, min_width=9, max_width=80, color_map=None):
    """Prints which devices hold which block of an array of `shape` placed by `sharding`."""
    del use_color, scale, color_map
    import builtins
    builtins.print(_sharding_table(tuple(shape), sharding, min_width, max_width))


def _sharding_table(shape, sharding, min_width=9, max_width=80):
    if len(shape) not in (1, 2):
        raise ValueError(f"visualize_array_sharding: only 1-D and 2-D arrays can be drawn, got shape {shape}")
    idx = sharding.devices_indices_map(shape)
    two = shape if len(shape) == 2 else (1,) + shape
    blocks = {}
    for dev, ix in idx.items():
        ix = ((slice(None),) + tuple(ix)) if len(shape) == 1 else tuple(ix)
        key = tuple((s.start or 0, s.stop if s.stop is not None else n) for s, n in zip(ix, two))
        blocks.setdefault(key, []).append(dev)
    rows = sorted({k[0] for k in blocks})
    cols = sorted({k[1] for k in blocks})

    def label(devs):
        ids = sorted(d.id for d in devs)
        kind = devs[0].platform.upper()
        return f"{kind} {ids[0]}" if len(ids) == 1 else f"{kind} {','.join(map(str, ids))}"
    cells = {k: label(v) for k, v in blocks.items()}
    width = max(min_width, min(max_width // max(1, len(cols)), max(len(c) for c in cells.values()) + 2))
    line = "+" + "+".join("-" * width for _ in cols) + "+"
    out = [line]
    for r in rows:
        out.append("|" + "|".join(cells.get((r, c), "").center(width) for c in cols) + "|")
        out.append(line)
    return "\n".join(out)


def inspect_array_sharding(value, *, callback):
    """Calls callback(sharding) with value's sharding (concrete arrays; under jit kiln calls it with
    the sharding the value will have, which for a traced value kiln does not know: it raises)."""
    from kiln._src import core
    if isinstance(value, core.Tracer):
        raise NotImplementedError("inspect_array_sharding inside a traced function is not supported yet by kiln: "
                                  "call it on the jitted function's concrete results")
    callback(value.sharding)


__all__ = ["callback", "print", "breakpoint", "log", "visualize_array_sharding", "visualize_sharding",
           "inspect_array_sharding", "DebugEffect", "OrderedDebugEffect"]
