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
- under vmap, the primitive is a custom_vmap_call equation: its inline function as the body (what
  jit, grad and code generation see) and its batching rule (batching.primitive_batchers) by handle:
  when kiln's vmap pass meets the equation with a batched operand it asks this module for the
  rule's program at the batched types (_run_batch_rule, installed as the C pass's handler), so the
  rule decides what the primitive means on a batch (equinox's unvmap_* primitives reduce over it).
  Without a batching rule, binding under vmap raises NotImplementedError (JAX's message).
jax.custom_batching.custom_vmap uses the same equation (custom_vmap below).
"""
import itertools

import numpy as np

from kiln import _kiln
from kiln._src import core
from kiln._src.thread_state import Cell

# the registries (jax.interpreters.ad / batching / mlir hold these same dicts)
primitive_jvps = {}
primitive_transposes = {}
primitive_batchers = {}        # rule(vals, dims, **params)
axis_primitive_batchers = {}   # rule(axis_size, axis_name, trace, vals, dims, **params) (older JAX's form)
fancy_primitive_batchers = {}  # rule(axis_data, vals, dims, **params)
lowerings = {}  # primitive -> the function lower_fun wrapped (or None for a rule kiln cannot run)
# primitive -> a lowering rule written against JAX's MLIR API (not lower_fun): kiln runs it on its
# own traced values when the impl cannot trace (mlir.emit_python_callback is the part it supports)
raw_lowerings = {}


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
            # NumPy and Python values are arrays here, as JAX binds them; a 0-d one (a jaxpr's literal
            # value) a literal of the trace binding it, never a constant input of its program
            args = [a if isinstance(a, core.Array) else _operand(a) for a in args]
            if any(type(v).__name__ in ("Jaxpr", "ClosedJaxpr") for v in params.values()):
                from kiln._src.jaxpr import body_param
                params = {k: body_param(v, self.name, k) for k, v in params.items()}
            outs = core.bind(self.name, args, params)
            return list(outs) if self.multiple_results else outs[0]
        return _bind_user(self, args, params)

    def bind_with_trace(self, trace, args, params):
        del trace
        return self.bind(*args, **params)


def _operand(a):
    """A NumPy or Python value as an operand of a kiln primitive: a 0-d NumPy value a literal of
    its dtype (in the trace binding it), anything else an array."""
    if isinstance(a, (np.ndarray, np.generic)) and a.ndim == 0:
        return core.scalar_constant(a.item(), a.dtype, False)
    return core.asarray(a)


_named = {}
_in_rule = Cell(frozenset())  # the primitives whose JVP rule this thread is tracing
_rule_tangents = Cell(frozenset())  # ids of the tangents of the JVP rules this thread is tracing


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
    if fn is None and prim in raw_lowerings and prim.impl is not None:
        return _impl_or_raw_rule(prim)
    if fn is None:
        fn = prim.impl
    if fn is None:
        raise NotImplementedError(f"Evaluation rule for '{prim.name}' not implemented: kiln computes a "
                                  f"library primitive with its impl (def_impl) or its lowering "
                                  f"(mlir.register_lowering(prim, mlir.lower_fun(fn)))")
    return fn


def _impl_or_raw_rule(prim):
    """prim computed under a trace by its impl, or, when the impl needs a value the trace does not
    have (equinox's noinline looks its function up by a traced index), by its MLIR lowering rule
    run on the traced values: the rule's emit_python_callback becomes a host callback."""
    from kiln.errors import ConcretizationTypeError

    def fn(*args, **params):
        try:
            return prim.impl(*args, **params)
        except ConcretizationTypeError:
            from kiln.interpreters import mlir
            return mlir._run_rule(prim, raw_lowerings[prim], args, params)
    return fn


def _bind_user(prim, args, params):
    if not _has_tracer(args):
        if prim.impl is None:
            raise NotImplementedError(f"Evaluation rule for '{prim.name}' not implemented")
        return prim.impl(*args, **params)
    from kiln._src import batching
    fn = _inline_fn(prim)
    if batching.vmap_depth[0]:
        if _batcher(prim) is None:
            raise NotImplementedError(f"Batching rule for '{prim.name}' not implemented")
        fn = _vmap_call_of(prim, fn)
    jvp_rule = primitive_jvps.get(prim)
    if jvp_rule is None or prim in _in_rule[0]:  # (a rule binding its own primitive on the primals)
        transpose = primitive_transposes.get(prim)
        # (under vmap; or for a primitive that may compute through a host callback, which kiln
        # cannot transpose: its own transpose rule does it)
        if transpose is not None and (batching.vmap_depth[0] or prim in raw_lowerings) and prim in _in_rule[0]:
            linear = [id(a) in _rule_tangents[0] for a in args]
            if any(linear):
                return _linear_call(prim, fn, transpose, params, args, linear)
        return fn(*args, **params)
    return _with_jvp(prim, fn, jvp_rule, params, args)(*args)


def _linear_call(prim, fn, transpose, params, args, linear):
    """fn(*args, **params) bound on tangents (args[i] for linear[i]) inside prim's JVP rule under
    vmap, as a custom_vjp whose bwd is prim's transpose rule: kiln transposes the rule's tangent
    program before the vmap batches it, and the transpose rule (traced now, under the vmap) keeps
    the primitive's batching rule where transposing fn alone would lose it (equinox's
    _select_if_vmap: an inactive example's cotangent passes through, it is not the body's)."""
    from kiln._src.custom import custom_vjp
    from kiln.interpreters.ad import UndefinedPrimal, Zero
    from kiln import lax
    avals = [aval_of(a) for a in args]

    def full(fixed, lin):
        fi, li = iter(fixed), iter(lin)
        return [next(li) if is_lin else next(fi) for is_lin in linear]

    def plain(fixed, lin):
        return fn(*full(fixed, lin), **params)

    f = custom_vjp(plain)

    def fwd(fixed, lin):
        return plain(fixed, lin), fixed

    def bwd(fixed, ct):
        undefined = [UndefinedPrimal(a) for a, is_lin in zip(avals, linear) if is_lin]
        cts = transpose(list(ct) if prim.multiple_results else ct, *full(fixed, undefined), **params)
        lin_cts = [c for c, is_lin in zip(cts, linear) if is_lin]
        lin_cts = [lax.full_like(x, 0) if c is None or isinstance(c, Zero) else c
                   for c, x in zip(lin_cts, [a for a, is_lin in zip(args, linear) if is_lin])]
        return [None] * len(fixed), lin_cts
    f.defvjp(fwd, bwd)
    try:
        return f([a for a, is_lin in zip(args, linear) if not is_lin], [a for a, is_lin in zip(args, linear) if is_lin])
    except Exception:  # noqa: BLE001 - a transpose rule that raises when traced (JAX calls it only if a
        # cotangent reaches it: equinox's nondifferentiable_backward): the call transposes as fn does
        return fn(*args, **params)


def _with_jvp(prim, fn, jvp_rule, params, args):
    """fn(*args, **params) as a custom_jvp whose rule is the primitive's; the rule sees a symbolic
    Zero tangent (jax.interpreters.ad.Zero) for each argument that is not perturbed (no derivative
    reaches it, integers included), as JAX's rules do (lineax's asserts on them)."""
    from kiln._src.custom import custom_jvp
    from kiln._src import tracing
    perturbed = [tracing.perturbed(a) for a in args]

    @custom_jvp
    def f(*args):
        return fn(*args, **params)

    def rule(primals, tangents):
        from kiln.interpreters.ad import Zero
        tangents = [t if p else Zero.from_primal_value(x) for x, t, p in zip(primals, tangents, perturbed)]
        active, active_t = _in_rule[0], _rule_tangents[0]
        _in_rule[0] = active | {prim}
        _rule_tangents[0] = active_t | {id(t) for t in tangents if not isinstance(t, Zero)}
        try:
            out, t_out = jvp_rule(list(primals), list(tangents), **params)
        finally:
            _in_rule[0], _rule_tangents[0] = active, active_t
        from kiln import lax

        def dense(t, o):  # a symbolic zero: zeros of the output's dtype (an integer's float0 included)
            return lax.full_like(o, 0) if isinstance(t, Zero) or t is None else t
        if prim.multiple_results:
            return list(out), [dense(t, o) for t, o in zip(t_out, out)]
        return out, dense(t_out, out)
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


# ---- user batching rules (custom_vmap_call) ----

_batch_rules = {}  # handle -> run(avals, batched, size) -> (body Builder, out batched flags)
_handles = itertools.count(1)


def _register_batch_rule(run):
    h = next(_handles)
    _batch_rules[h] = run
    return h


def _run_batch_rule(handle, avals, batched, size):
    """The vmap pass's question for a custom_vmap_call (python/ext/batch_rule.c): the program of
    its batching rule on operands of types `avals` (batched ones with the batch at axis 0)."""
    return _batch_rules[handle](avals, list(batched), size)


_kiln.set_batch_handler(_run_batch_rule)


def _bind_vmap_call(leaves, fun, run, what):
    """A custom_vmap_call of fun(*leaves) -> flat outputs, batched by run (see _register_batch_rule);
    returns the flat outputs."""
    from kiln._src.custom import _trace_sub
    leaves = [core.asarray(x) for x in leaves]
    body, consts, out_avals = _trace_sub(lambda *xs: [core.asarray(o) for o in fun(*xs)], leaves)
    operands = leaves + list(consts)
    # under differentiation, which operands carry a derivative, known here (the vmap pass asks the
    # rule later, on bare types): the rule's trace takes them as its inputs' perturbed flags, so
    # a JVP rule it binds gets symbolic zeros where JAX's would (lineax's solver state)
    from kiln._src import tracing
    pert = [tracing._is_perturbed(x) for x in operands] if core.ad_tracing() else None

    def rule(avals, batched, size):
        saved = _rule_perturbed[0]
        _rule_perturbed[0] = pert
        try:
            return run(avals, batched, size, out_avals, len(leaves), what)
        finally:
            _rule_perturbed[0] = saved
    return list(core.bind("custom_vmap_call", operands, {"body": body, "rule": _register_batch_rule(rule)}))


_rule_perturbed = Cell(None)  # the perturbed flags of the operands of the batching rule being traced


_CONSTANT_ELEMENTS_MAX = 4096  # elements of the arrays a batching rule may close over


def _with_constants(prog, consts, ins, what, known=None):
    """prog (a body over (ins, consts)) as a body over ins alone, each concrete const rebuilt in it
    from literals (the vmap pass asks a rule for a program of its operands only)."""
    from kiln import lax
    from kiln._src import ad
    from kiln._src.custom import _trace_sub
    if any(isinstance(c, core.Tracer) for c in consts) or \
            sum(int(np.prod(np.shape(c))) for c in consts) > _CONSTANT_ELEMENTS_MAX:
        raise NotImplementedError(
            f"vmap of {what}: its batching rule captures arrays from outside (constants of {len(consts)} arrays, "
            f"traced ones or more than {_CONSTANT_ELEMENTS_MAX} elements); kiln takes batching rules that compute "
            f"from their operands and small concrete arrays only: build such arrays from the operands or pass them in")

    def constant(c):
        v = np.asarray(c)
        weak = bool(getattr(c, "weak_type", False))
        if v.size and (v == v.flat[0]).all() or (v.size and np.isnan(v).all() if v.dtype.kind in "fc" else False):
            return lax._full(v.shape, v.flat[0].item(), v.dtype, weak)
        parts = [lax._full((1,), x.item(), v.dtype, weak) for x in v.reshape(-1)]
        return lax.reshape(lax.concatenate(parts, 0), v.shape) if parts else lax._full(v.shape, 0, v.dtype, weak)

    def flat(*xs):
        return ad._inline(prog, list(xs) + [constant(c) for c in consts])
    body, more, _ = _trace_sub(flat, ins, **(known or {}))
    if more:
        raise NotImplementedError(f"vmap of {what}: its batching rule's constants could not be written into its "
                                  f"program")
    return body


def _trace_rule(f, avals, out_avals, size, what):
    """f traced on operands of types avals into a body; f returns (flat outputs, their batched
    flags). Checks the outputs against out_avals (the per-example types) and the flags."""
    from kiln._src.api import ShapeDtypeStruct
    from kiln._src.custom import _trace_sub
    flags = []

    def body(*xs):
        outs, batched = f(*xs)
        flags[:] = batched
        return outs
    ins = [ShapeDtypeStruct(tuple(shape), np.dtype(dtype)) for shape, dtype in avals]
    pert = _rule_perturbed[0]
    known = {"carries": (), "perturbed_in": pert} if pert is not None and len(pert) == len(ins) else {}
    prog, consts, got = _trace_sub(body, ins, **known)
    if consts:  # concrete arrays it closes over (equinox's, lineax's scalars): written into the program
        prog = _with_constants(prog, list(consts), ins, what, known)
    if len(got) != len(out_avals):
        raise ValueError(f"vmap of {what}: the batching rule gave {len(got)} results, the function gives "
                         f"{len(out_avals)}")
    for i, ((g_shape, g_dtype, _), (shape, dtype, _), b) in enumerate(zip(got, out_avals, flags)):
        want = ((size,) + tuple(shape)) if b else tuple(shape)
        if tuple(g_shape) != want or np.dtype(g_dtype) != np.dtype(dtype):
            raise ValueError(f"vmap of {what}: the batching rule's result {i} is {np.dtype(g_dtype).name}"
                             f"{list(g_shape)}, expected {np.dtype(dtype).name}{list(want)} "
                             f"({'batched' if b else 'unbatched'}, per example {np.dtype(dtype).name}{list(shape)})")
    return prog, flags


class AxisData:
    """The batch axis a batching rule works on (JAX's batching.AxisData)."""
    __slots__ = ("name", "size", "spmd_name", "explicit_mesh_axis")

    def __init__(self, name, size, spmd_name=None, explicit_mesh_axis=None):
        self.name, self.size, self.spmd_name, self.explicit_mesh_axis = name, size, spmd_name, explicit_mesh_axis

    def __repr__(self):
        return f"AxisData(name={self.name!r}, size={self.size})"


vmap_axis_name = Cell(None)  # the axis_name of the vmap whose pass is running (batching.vmap sets it)


def _batcher(prim):
    """prim's batching rule as rule(axis_data, vals, dims, **params), from whichever registry holds it."""
    if prim in fancy_primitive_batchers:
        return fancy_primitive_batchers[prim]
    if prim in axis_primitive_batchers:
        rule = axis_primitive_batchers[prim]
        return lambda axis, vals, dims, **params: rule(axis.size, axis.name, None, vals, dims, **params)
    if prim in primitive_batchers:
        rule = primitive_batchers[prim]
        return lambda axis, vals, dims, **params: rule(vals, dims, **params)
    return None


def _vmap_call_of(prim, fn):
    """fn(*args, **params) of the library primitive prim as a custom_vmap_call under vmap, batched
    by its batching rule (_batcher): rule(axis_data, args, dims, **params) -> (out, out dims)."""
    multiple = prim.multiple_results

    def run(avals, batched, size, out_avals, nargs, what, params):
        rule = _batcher(prim)

        def f(*xs):
            dims = [0 if b else None for b in batched[:nargs]]
            out, out_dims = rule(AxisData(vmap_axis_name[0], size), list(xs[:nargs]), dims, **params)
            outs, dims_o = (list(out), list(out_dims)) if multiple else ([out], [out_dims])
            if len(dims_o) != len(outs):
                raise ValueError(f"vmap of {what}: the batching rule gave {len(outs)} results and "
                                 f"{len(dims_o)} batch dims")
            res = []
            for o, d in zip(outs, dims_o):
                o = core.asarray(o)
                if d is not None and d != 0:
                    from kiln import numpy as jnp
                    o = jnp.moveaxis(o, d, 0)
                res.append(o)
            return res, [d is not None for d in dims_o]
        return _trace_rule(f, avals, out_avals, size, what)

    def call(*args, **params):
        def flat(*xs):
            out = fn(*xs, **params)
            return list(out) if multiple else [out]
        outs = _bind_vmap_call(args, flat, lambda *a: run(*a, params), f"the primitive '{prim.name}'")
        return outs if multiple else outs[0]
    return call
