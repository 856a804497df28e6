"""Host callbacks: jax.debug.callback / debug.print and jax.pure_callback on the `callback`
primitive. Each call site under a trace registers its Python function here under an id (the
primitive's param); compiled programs call back through `run`, on the runtime's threads, with the
operands' bytes. Outside a trace the function is called at once on NumPy values.

Effect callbacks (debug.*) run for their effect: the compiler keeps them (DCE) and never merges
two (CSE); under vmap they run once per batch element, in order; their derivative is zero. Pure
callbacks return values of the declared types; they are not differentiable (as in JAX) and vmap
as their vmap_method says.
"""
import atexit
import itertools
import threading

import numpy as np

from kiln import _kiln
from kiln._src import core, dtypes, tree_util

_VMAP_METHODS = {"sequential": 0, "sequential_unrolled": 0, "expand_dims": 1, "broadcast_all": 2,
                 "legacy_vectorized": 1}

_registry = {}
_ids = itertools.count(1)
_lock = threading.Lock()


class _Site:
    """One registered call: the function, the pytree of its arguments, which leaves are complex,
    and (pure callbacks) the tree and types of its results."""

    def __init__(self, fn, in_tree, in_complex, extra, out_tree=None, out_specs=None):
        self.fn, self.in_tree, self.in_complex, self.extra = fn, in_tree, in_complex, extra
        self.out_tree, self.out_specs = out_tree, out_specs


def _register(site):
    with _lock:
        i = next(_ids)
        _registry[i] = site
        if not _registry_used:
            _registry_used.append(True)
            atexit.register(_wait_at_exit)
    return i


_registry_used = []


def _wait_at_exit():
    """At interpreter exit, the launched computations that may still call back (a loop printing
    with debug.print on the executor thread) finish first, so no callback's output is lost (JAX
    waits for its effects at exit too)."""
    try:
        _kiln.synchronize()
    except Exception:  # (a failed computation was reported, or not, where it was read)
        pass


def _as_numpy(shape, dtype, mv, is_complex):
    """A NumPy copy of a host buffer; complex data arrives packed as real [..., 2]."""
    dt = dtypes.canonicalize_dtype(dtype) if dtype != "bfloat16" else dtypes.bfloat16
    a = np.frombuffer(mv, dtype=np.dtype(dt)).reshape(shape).copy()
    if is_complex:
        a = a.view(np.complex64 if a.dtype == np.float32 else np.complex128).reshape(shape[:-1])
    return a


def run(site_id, ins, outs):
    """What compiled programs call: site_id's function on the operands; results written into outs."""
    site = _registry[site_id]
    vals = [_as_numpy(s, d, mv, c) for (s, d, mv), c in zip(ins[site.extra:], site.in_complex)]
    args, kwargs = tree_util.tree_unflatten(site.in_tree, vals)
    res = site.fn(*args, **kwargs)
    if site.out_tree is None:
        return None
    leaves, tree = tree_util.tree_flatten(res)
    if tree != site.out_tree:
        raise TypeError(f"pure_callback: the callback returned a pytree of structure {tree}, but "
                        f"result_shape_dtypes declared {site.out_tree}")
    for k, (leaf, (shape, dtype, mv), (want_shape, want_dt)) in enumerate(zip(leaves, outs, site.out_specs)):
        a = np.asarray(leaf)
        logical = tuple(shape[:-1]) if want_dt.kind == "c" else tuple(shape)
        if a.shape != logical or a.dtype != want_dt:
            raise TypeError(f"pure_callback: result {k} of the callback has type {a.dtype}{list(a.shape)}, but "
                            f"{want_dt}{list(logical)} was declared (result_shape_dtypes)")
        mv[:] = np.ascontiguousarray(a).reshape(-1).view(np.uint8).tobytes()
    return None


_kiln.set_callback_handler(run)


def _leaves(name, args, kwargs):
    leaves, tree = tree_util.tree_flatten((args, kwargs))
    arrs = [x if isinstance(x, core.Array) else core.asarray(x) for x in leaves]
    return arrs, tree


def _tracing(arrs):
    return _kiln.current_trace() is not None


def _concrete_values(arrs):
    """The values of arrs when every tracer among them carries one (grad's concrete tracing), else None."""
    vals = []
    for a in arrs:
        if isinstance(a, _kiln.TracerBase):
            c = getattr(a, "_cval", None)
            if c is None:
                return None
            a = c
        vals.append(a)
    return vals


def _numpy_args(arrs, tree):
    vals = [np.asarray(a) for a in arrs]
    return tree_util.tree_unflatten(tree, vals)


def _operands(arrs):
    """The operands of the callback equation, after a literal of the current (innermost) trace:
    the call is staged there (inside the cond branch or loop body being traced, even when every
    value comes from outside), never run now by an abstract trace."""
    return [core.scalar_constant(0, np.dtype(np.int32), False)] + list(arrs), 1


def debug_callback(callback, *args, ordered=False, partitioned=False, **kwargs):
    """Calls callback(*args, **kwargs) on the values, for its effect, each time the program runs
    (once per element under vmap; never differentiated); returns None."""
    del ordered, partitioned  # kiln runs a device's launches in order: every callback is ordered
    if not callable(callback):
        raise TypeError(f"debug.callback: expects a callable, got {type(callback).__name__}")
    arrs, tree = _leaves("debug.callback", args, kwargs)
    ops, extra = _operands(arrs) if _tracing(arrs) else (arrs, 0)
    concrete = _concrete_values(ops)
    if concrete is not None:  # eager, or grad's concrete tracing: now, once (the program would rerun it)
        a, k = _numpy_args(concrete[extra:], tree)
        callback(*a, **k)
        return None
    site = _Site(callback, tree, [a.dtype.kind == "c" for a in arrs], extra)
    params = {"id": _register(site), "effect": 1, "vmap_method": 0}
    core.bind("callback", ops, params)
    return None


def debug_print(fmt, *args, ordered=False, **kwargs):
    """Prints fmt.format(*args, **kwargs) with the values, each time the program runs (as
    jax.debug.print)."""
    if not isinstance(fmt, str):
        raise TypeError(f"debug.print: the format must be a string, got {type(fmt).__name__}")

    def show(*a, **k):  # one write: the lines of devices printing at once do not mix
        print(fmt.format(*a, **k) + "\n", end="", flush=True)
    debug_callback(show, *args, ordered=ordered, **kwargs)


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None, vectorized=None,
                  **kwargs):
    """callback(*args, **kwargs) computed on the host, returning arrays of the declared types
    (result_shape_dtypes: a pytree of objects with .shape and .dtype). Not differentiable (wrap it
    in custom_jvp); under vmap as vmap_method says ('sequential', 'expand_dims', 'broadcast_all')."""
    del sharding
    if vectorized is not None and vmap_method is None:
        vmap_method = "legacy_vectorized" if vectorized else "sequential"
    if vmap_method is not None and vmap_method not in _VMAP_METHODS:
        raise ValueError(f"pure_callback: vmap_method must be one of {sorted(_VMAP_METHODS)}, got {vmap_method!r}")
    return _value_callback("pure_callback", 0, _VMAP_METHODS.get(vmap_method, -1), callback,
                           result_shape_dtypes, args, kwargs)


def io_callback(callback, result_shape_dtypes, *args, sharding=None, ordered=False, **kwargs):
    """callback(*args, **kwargs) run on the host for its effect, returning arrays of the declared
    types (result_shape_dtypes; None for no results), as jax.experimental.io_callback: each call
    runs (never removed or merged, in program order), under vmap once per element in order
    (ordered=True refuses vmap, as in JAX); not differentiable."""
    del sharding
    specs = tree_util.tree_leaves(result_shape_dtypes)
    if not specs:  # nothing back: an effect callback, whose (None) result is the declared one
        debug_callback(lambda *a, **k: callback(*a, **k), *args, **kwargs)
        return result_shape_dtypes
    return _value_callback("io_callback", 2, -2 if ordered else _VMAP_METHODS["sequential"], callback,
                           result_shape_dtypes, args, kwargs)


def _value_callback(name, effect, vmap_method, callback, result_shape_dtypes, args, kwargs):
    """A callback with results (pure_callback: effect 0; io_callback: effect 2)."""
    if not callable(callback):
        raise TypeError(f"{name}: expects a callable, got {type(callback).__name__}")
    specs, out_tree = tree_util.tree_flatten(result_shape_dtypes)
    if not specs:
        raise ValueError(f"{name}: result_shape_dtypes has no arrays; use debug.callback for effects")
    out_specs = []
    for s in specs:
        if not (hasattr(s, "shape") and hasattr(s, "dtype")):
            raise TypeError(f"{name}: result_shape_dtypes leaves need .shape and .dtype, got {s!r}")
        out_specs.append((tuple(int(d) for d in s.shape), dtypes.canonicalize_dtype(s.dtype)))
    arrs, tree = _leaves(name, args, kwargs)
    run_now = not _tracing(arrs)
    if not run_now and effect == 2 and core.current_trace().concrete:
        # grad's concrete tracing (outside jit): an io_callback on values no derivative reaches runs
        # now, once, its results constants of the trace (recorded, the program would run it
        # again); one on a differentiated value is recorded, for AD to refuse as JAX does
        from kiln._src import tracing
        concrete = _concrete_values(arrs)
        if concrete is not None and not any(tracing._is_perturbed(a) for a in arrs):
            arrs, run_now = concrete, True
    if run_now:
        a, k = _numpy_args(arrs, tree)
        res = callback(*a, **k)
        leaves, t = tree_util.tree_flatten(res)
        if t != out_tree:
            raise TypeError(f"{name}: the callback returned a pytree of structure {t}, but "
                            f"result_shape_dtypes declared {out_tree}")
        outs = []
        for k_, (leaf, (shape, dt)) in enumerate(zip(leaves, out_specs)):
            a_ = np.asarray(leaf)
            if a_.shape != shape or a_.dtype != dt:
                raise TypeError(f"{name}: result {k_} of the callback has type {a_.dtype}{list(a_.shape)}, "
                                f"but {dt}{list(shape)} was declared (result_shape_dtypes)")
            outs.append(core.asarray(a_))
        return tree_util.tree_unflatten(out_tree, outs)
    ops, extra = _operands(arrs)
    site = _Site(callback, tree, [a.dtype.kind == "c" for a in arrs], extra, out_tree, out_specs)
    params = {"id": _register(site), "effect": effect, "vmap_method": vmap_method,
              "out_dtypes": tuple(dtypes.supported_dtypes.index(dt) for _, dt in out_specs),
              "out_ranks": tuple(len(s) for s, _ in out_specs),
              "out_dims": tuple(d for s, _ in out_specs for d in s)}
    outs = core.bind("callback", ops, params)
    return tree_util.tree_unflatten(out_tree, list(outs))
