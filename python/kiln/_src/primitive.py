"""Primitives as Python objects (jax.extend.core.Primitive): kiln's own, named by the equations of
its programs, and primitives a library defines with Python rules.

A library primitive's rules live in the registries JAX keeps them in (jax.interpreters.ad's
primitive_jvps and primitive_transposes, batching's primitive_batchers, mlir's lowerings); kiln
reads them when the primitive is bound:

- on concrete values, its impl (def_impl) runs;
- under a trace (jit, grad, vmap, make_jaxpr), the function that computes it (the lowering's
  function, mlir.lower_fun(fn); else the impl) is traced inline, so kiln compiles and transforms
  its operations; a JVP rule, when registered, is the derivative (the inline function becomes a
  custom_jvp with that rule, so grad and jvp use it and transpose what it computes).
- A user batching rule is not yet called by kiln's vmap: binding a library primitive under vmap
  raises NotImplementedError (JAX's message when it has no rule) rather than batching the inline
  function, whose meaning under vmap may be another (equinox's unvmap_* primitives reduce over
  the batch).
"""
import numpy as np

from kiln._src import core
from kiln._src.thread_state import Cell

# the registries (jax.interpreters.ad / batching / mlir hold these same dicts)
primitive_jvps = {}
primitive_transposes = {}
primitive_batchers = {}
lowerings = {}  # primitive -> the function lower_fun wrapped (or None for a rule kiln cannot run)


class Primitive:
    """A named operation (jax.extend.core.Primitive). bind(*args, **params) applies it."""
    multiple_results = False
    call_primitive = False
    map_primitive = False
    ref_primitive = False
    skip_canonicalization = False
    is_effectful = None

    def __init__(self, name):
        self.name = name
        self.impl = None
        self.abstract_eval = None
        self._kiln = False  # a primitive of kiln's programs (bound with kiln's params)

    def __repr__(self):
        return self.name

    def def_impl(self, impl):
        self.impl = impl
        return impl

    def def_abstract_eval(self, abstract_eval):
        self.abstract_eval = abstract_eval
        return abstract_eval

    def def_effectful_abstract_eval(self, effectful_abstract_eval):
        self.abstract_eval = lambda *a, **k: effectful_abstract_eval(*a, **k)[0]
        return effectful_abstract_eval

    def def_bind_with_trace(self, bind_with_trace):
        raise NotImplementedError(f"Primitive.def_bind_with_trace ({self.name}): kiln binds a library "
                                  f"primitive through its impl, lowering and rules; a custom bind is not supported")

    def get_bind_params(self, params):
        return [], params

    def bind(self, *args, **params):
        if self._kiln:
            outs = core.bind(self.name, list(args), params)
            return list(outs) if self.multiple_results else outs[0]
        return _bind_user(self, args, params)

    def bind_with_trace(self, trace, args, params):
        del trace
        return self.bind(*args, **params)


_named = {}
_in_rule = Cell(frozenset())  # the primitives whose JVP rule this thread is tracing


def primitive_named(name):
    """The Primitive object of kiln's primitive `name` (one per name)."""
    p = _named.get(name)
    if p is None:
        p = _named[name] = Primitive(name)
        p._kiln = True
        p.multiple_results = name in _MULTIPLE
    return p


_MULTIPLE = {"cond", "while", "scan", "callback", "sort", "custom_jvp_call", "custom_vjp_call", "pjit", "jit",
             "closed_call", "remat", "checkpoint", "shard_map", "qr", "svd", "eigh", "eig", "lu", "top_k"}


def _has_tracer(args):
    from kiln._src.tree_util import tree_leaves
    return any(isinstance(x, core.Tracer) for x in tree_leaves(args))


def _inline_fn(prim):
    fn = lowerings.get(prim)
    if fn is None:
        fn = prim.impl
    if fn is None:
        raise NotImplementedError(f"Evaluation rule for '{prim.name}' not implemented: kiln computes a "
                                  f"library primitive with its impl (def_impl) or its lowering "
                                  f"(mlir.register_lowering(prim, mlir.lower_fun(fn)))")
    return fn


def _bind_user(prim, args, params):
    if not _has_tracer(args):
        if prim.impl is None:
            raise NotImplementedError(f"Evaluation rule for '{prim.name}' not implemented")
        return prim.impl(*args, **params)
    from kiln._src import batching
    if batching.vmap_depth[0]:
        if prim not in primitive_batchers:
            raise NotImplementedError(f"Batching rule for '{prim.name}' not implemented")
        raise NotImplementedError(f"vmap of the library primitive '{prim.name}': kiln does not yet call "
                                  f"user batching rules (batching.primitive_batchers); batching the "
                                  f"primitive's impl instead could mean something else")
    fn = _inline_fn(prim)
    jvp_rule = primitive_jvps.get(prim)
    if jvp_rule is None or prim in _in_rule[0]:  # (a rule binding its own primitive on the primals)
        return fn(*args, **params)
    return _with_jvp(prim, fn, jvp_rule, params)(*args)


def _with_jvp(prim, fn, jvp_rule, params):
    """fn(*args, **params) as a custom_jvp whose rule is the primitive's."""
    from kiln._src.custom import custom_jvp

    @custom_jvp
    def f(*args):
        return fn(*args, **params)

    def rule(primals, tangents):
        active = _in_rule[0]
        _in_rule[0] = active | {prim}
        try:
            out, t_out = jvp_rule(list(primals), list(tangents), **params)
        finally:
            _in_rule[0] = active
        from kiln.interpreters.ad import instantiate_zeros
        if prim.multiple_results:
            return list(out), [instantiate_zeros(t) for t in t_out]
        return out, instantiate_zeros(t_out)
    f.defjvp(rule)
    return f


def aval_of(x):
    """The ShapedArray of x (jax.core.get_aval)."""
    from kiln._src.extras import ShapedArray, typeof
    if isinstance(x, ShapedArray):
        return x
    if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (core.Array, np.ndarray, np.generic)):
        return ShapedArray(x.shape, x.dtype, bool(getattr(x, "weak_type", False)))
    return typeof(x)
