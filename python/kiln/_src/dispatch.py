"""Applying primitives: `bind` (one C call, python/ext/tracer.c) records an equation into the
innermost trace among its operands or, on concrete arrays, runs a cached one-equation executable
(eager mode: the same code generator as jit, the same executable cache as the C fast path of
python/ext/array.c). This module compiles what that cache misses: one-equation executables and
those of the fast path's fused chains.

Imports array.py and tracing.py; core.py re-exports it.
"""

import os
import sys

import kiln
from kiln import _kiln
from kiln._src.array import _dtype_by_name, _np_dtype, clear_scalar_cache, scalar_array
from kiln._src.config import config
from kiln._src.tracing import Tracer
from kiln.errors import UnexpectedTracerError


def _eager_entry(prim, params, xs, compiled):
    """The eager executable cache's entry for `prim` on arrays xs: (exe, avals), avals holding
    (shape, dtype, weak) of each result. compiled=False gives (None, avals): fused operations of
    the fast path run inside their chain's executable, never in one of their own. The cache
    itself, shared by bind and the fast path, lives in python/ext/array.c."""
    b = _kiln.Builder()
    outs = b.add_eqn(prim, [b.add_input(x.shape, x.dtype.name, x.weak_type) for x in xs], params)
    avals = tuple((o[1], _np_dtype(o[2]), o[3]) for o in outs)
    if not compiled:
        return None, avals
    b.set_outputs([o[0] for o in outs])
    return b.compile(-1, (), prim if isinstance(prim, str) else None), avals


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
    return b.compile(-1, (), "fused(" + ",".join(_FUSED_PRIMS[key[j]] for j in range(1 + 3 * n, len(key), 3)) + ")")


# bind(prim, args, params=None) -> tuple of results: on concrete arrays the primitive runs at once
# (one executable per primitive, params and operand avals, cached in C with the fast path's),
# otherwise one equation is recorded into the innermost trace among the operands (tracer/).
bind = _kiln.bind


def bind1(prim, args, params=None):
    return bind(prim, args, params)[0]


def config_state():
    """This thread's configuration state id (config.state_id): part of every compile cache key."""
    return config.state_id()


def _copies_mode():
    return (1 if config.kiln_log_copies else 0) | (2 if config.kiln_forbid_copies else 0)


_KILN_DIR = os.path.dirname(os.path.abspath(kiln.__file__)) + os.sep
_locs = {}  # (file, line) -> interned id


def update_params(params=None):
    """The params of an update primitive (dynamic_update_slice, scatter): while the copy log or
    forbid-copies is on, with `loc`, the source line of the user's code that asked for it (the
    first frame outside kiln), for the message naming an update that copies."""
    if not (config.kiln_log_copies or config.kiln_forbid_copies):
        return params
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_KILN_DIR):
        f = f.f_back
    if f is None:
        return params
    key = (f.f_code.co_filename, f.f_lineno)
    loc = _locs.get(key)
    if loc is None:
        loc = _locs[key] = _kiln.loc_intern(f"{key[0]}:{key[1]}")
    return {**(params or {}), "loc": loc}


def _thread_state():
    """Tells C this thread's state: on entering or leaving a context, and when C asks again after a
    process-wide change while the thread is in one (its state is the new values under its overrides)."""
    _kiln.thread_config(config.state_id() if config.in_context() else None)


def _on_config_change(name, value, thread_only):
    # The state names the configuration values, not the change: restoring an option (a context
    # manager inside a traced function, as diffrax's) brings back the earlier state, so the
    # compile caches keyed by it hit again instead of retracing every call. C keeps the eager
    # executables per state: the process-wide one, and this thread's while it is in a context.
    if thread_only:
        _thread_state()
    else:
        _kiln.config_changed(config._global_state[0])
    if name in ("kiln_log_copies", "kiln_forbid_copies") and not thread_only:
        _kiln.copies_mode(_copies_mode())
    if name == "jax_enable_x64":
        clear_scalar_cache()


config._on_change(_on_config_change)
_kiln.config_setup(_thread_state)
_kiln.copies_mode(_copies_mode())


_kiln.tracer_setup(Tracer, scalar_array, UnexpectedTracerError, _dtype_by_name)
