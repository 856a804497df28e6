"""Applying primitives: `bind` records an equation into the innermost trace among its operands
(one C call, python/ext/tracer.c) or, on concrete arrays, runs a cached one-equation executable
(eager mode: the same code generator as jit). Also the executables of python/ext/array.c's eager
fast path and of its fused chains.

Imports array.py and tracing.py; core.py re-exports it.
"""

from kiln import _kiln
from kiln._src.array import Array, _dtype_by_name, _np_dtype, _scalar_cache, scalar_array
from kiln._src.config import config
from kiln._src.tracing import Tracer
from kiln.errors import UnexpectedTracerError

_trace_bind = _kiln.trace_bind


def _params_key(params):
    if not params:
        return ()
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items())


_eager_cache = {}


def _compile_eager(prim, args, params):
    b = _kiln.Builder()
    vids = [b.add_input(a.shape, a.dtype.name, a.weak_type) for a in args]
    outs = b.add_eqn(prim, vids, params)
    b.set_outputs([o[0] for o in outs])
    exe = b.compile()
    avals = tuple((o[1], _np_dtype(o[2]), o[3]) for o in outs)
    return exe, avals


def _eager_exe(prim, *xs, compiled=True):
    """The eager executable of `prim` on arrays xs and its result's aval, for the C fast path of
    ArrayBase (which caches what this returns). compiled=False gives the aval only (exe None):
    fused operations run inside their chain's executable, never in one of their own."""
    key = (prim, (), *[(x.shape, x.dtype, x.weak_type) for x in xs])
    hit = _eager_cache.get(key)
    if hit is None:
        if not compiled:
            b = _kiln.Builder()
            (_, shape, dt, weak), = b.add_eqn(prim, [b.add_input(x.shape, x.dtype.name, x.weak_type) for x in xs], None)
            return None, shape, _np_dtype(dt), weak
        hit = _compile_eager(prim, xs, None)
        _eager_cache[key] = hit
    exe, ((shape, dtype, weak),) = hit
    return exe, shape, dtype, weak


_FUSED_PRIMS = _kiln.eager_ops()  # the operation codes of python/ext/array.c


def _fused_exe(key):
    """The executable of a chain of pending eager operations (python/ext/array.c), described by
    key = (n, (shape, dtype, weak) of each of the n inputs..., (op, ref1, ref2) per operation...)
    where a ref is an input index i >= 0 or -(operation index + 1) (ref2 is None for a unary
    operation); the last operation is the result."""
    n = key[0]
    b = _kiln.Builder()
    vids = [b.add_input(key[1 + 3 * i], key[2 + 3 * i].name, bool(key[3 + 3 * i])) for i in range(n)]
    nodes = []
    for j in range(1 + 3 * n, len(key), 3):
        op, r1, r2 = key[j:j + 3]
        args = [vids[r] if r >= 0 else nodes[-r - 1] for r in ((r1,) if r2 is None else (r1, r2))]
        nodes.append(b.add_eqn(_FUSED_PRIMS[op], args, None)[0][0])
    b.set_outputs([nodes[-1]])
    return b.compile()


def bind(prim, args, params=None):
    """Applies primitive `prim` to arrays `args`; returns a tuple of results."""
    for a in args:
        if type(a) is not Array:
            break
    else:  # eager: every operand is concrete
        key = (prim, _params_key(params), *[(a.shape, a.dtype, a.weak_type) for a in args])
        hit = _eager_cache.get(key)
        if hit is None:
            hit = _compile_eager(prim, args, params)
            _eager_cache[key] = hit
        exe, avals = hit
        try:
            bufs = exe(*[a._buf for a in args])
        except MemoryError as e:
            shapes = ", ".join(f"{s}" for s, _, _ in avals)
            raise MemoryError(f"{prim}: cannot allocate the result (shape {shapes}): {e}") from None
        return tuple([Array(b, s, d, w) for b, (s, d, w) in zip(bufs, avals)])
    return _trace_bind(prim, args, params)  # recorded into the innermost trace (python/ext/tracer.c)


def bind1(prim, args, params=None):
    return bind(prim, args, params)[0]


config_generation = [0]  # bumped on every configuration change: part of every compile cache key


def _on_config_change(name, value):
    config_generation[0] += 1
    _eager_cache.clear()
    _kiln.config_changed()
    if name == "jax_enable_x64":
        _scalar_cache.clear()


config._on_change(_on_config_change)


# The trace binding computes the values of a concrete trace through the eager road of bind.
_kiln.tracer_setup(Tracer, bind, scalar_array, UnexpectedTracerError, _dtype_by_name)
