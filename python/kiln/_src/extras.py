"""Transformation extras of JAX's top level: custom_gradient, linear_transpose, closure_convert,
named_call/named_scope, typeof, checking_leaks, ensure_compile_time_eval; built on kiln's
custom_vjp, vjp and tracing."""
import contextlib
import functools

import numpy as np

from kiln import _kiln
from kiln._src import core, tree_util
from kiln._src.ad import _run, vjp
from kiln._src.api import ShapeDtypeStruct
from kiln._src.custom import custom_vjp


def custom_gradient(fun):
    """fun(*args) returns (y, vjp) with vjp(ct) the cotangents of args (a tuple, or one value for
    one argument): y with that gradient, as jax.custom_gradient. The backward pass calls fun again
    on the saved arguments to get its vjp (kiln keeps no Python closure across the two passes)."""

    @custom_vjp
    def f(*args):
        return fun(*args)[0]

    def fwd(*args):
        return fun(*args)[0], args

    def bwd(args, ct):
        cts = fun(*args)[1](ct)
        return tuple(cts) if isinstance(cts, (tuple, list)) else (cts,)

    f.defvjp(fwd, bwd)
    return functools.wraps(fun)(f)


def _zeros_like_spec(x):
    from kiln import numpy as jnp
    if isinstance(x, (core.Array, np.ndarray)) or hasattr(x, "shape") and hasattr(x, "dtype"):
        return jnp.zeros(tuple(x.shape), x.dtype)
    return jnp.zeros_like(core.asarray(x))


def linear_transpose(fun, *primals, reduce_axes=()):
    """The transpose of the linear function fun at arguments shaped like primals (arrays or
    ShapeDtypeStructs): f_t(out_cotangent) returns a tuple of cotangents, one per primal."""
    del reduce_axes
    zeros = tree_util.tree_map(_zeros_like_spec, primals)
    out, f_vjp = vjp(fun, *zeros)
    out_tree = tree_util.tree_structure(out)

    def transposed(*cts):
        ct = cts[0] if len(cts) == 1 else cts
        if tree_util.tree_structure(ct) != out_tree:
            raise TypeError(f"linear_transpose: the cotangent's structure {tree_util.tree_structure(ct)} does not "
                            f"match the output's {out_tree}")
        res = f_vjp(ct)
        return res if isinstance(res, tuple) else (res,)
    return transposed


def closure_convert(fun, *example_args):
    """(converted, consts): converted(*args, *consts) computes fun(*args) with the arrays fun
    closes over passed explicitly (for custom_vjp/custom_jvp functions that close over tracers)."""
    from kiln._src import api
    leaves, tree = tree_util.tree_flatten((example_args, {}))
    arrs = [core.asarray(x) for x in leaves]
    traced = api._trace(fun, None, None, arrs, tree)
    consts = list(traced.consts)

    def converted(*args):
        if len(args) != len(example_args) + len(consts):
            raise TypeError(f"closure_convert: expected {len(example_args)} arguments and {len(consts)} constants, "
                            f"got {len(args)} values")
        flat, t = tree_util.tree_flatten((args[:len(example_args)], {}))
        if t != tree:
            raise TypeError(f"closure_convert: arguments of structure {t}, traced with {tree}")
        outs = _run(traced.builder, [x if isinstance(x, (core.Array, core.Tracer)) else core.asarray(x)
                                     for x in flat + list(args[len(example_args):])])
        return tree_util.tree_unflatten(traced.out_tree, outs)
    return converted, consts


def named_call(fun, *, name=None):
    """fun itself: kiln does not keep call names in its programs yet (they are inlined)."""
    del name
    return fun


@contextlib.contextmanager
def named_scope(name):
    """A span named `name` in kiln.profiler's traces, over the host time spent inside the scope
    (under jit: the tracing of that part of the function; outside: the eager operations it runs).
    kiln's compiled programs carry no scope names (their kernels are not renamed)."""
    if not isinstance(name, str):
        raise TypeError(f"named_scope: the name must be a string, got {type(name).__name__}")
    t0 = _kiln.trace_begin()  # (0 unless a profile records)
    try:
        yield
    finally:
        if t0:
            _kiln.trace_add("named_scope", name, t0)


@contextlib.contextmanager
def checking_leaks():
    """kiln always checks for leaked tracers: using one after its trace ended raises
    UnexpectedTracerError. Kept for JAX programs that enable the check."""
    yield


class ShapedArray(ShapeDtypeStruct):
    """The abstract value of an array (what typeof returns): a ShapeDtypeStruct that prints as
    JAX's ShapedArray and compares its weak type too."""
    __slots__ = ()

    def __init__(self, shape, dtype, weak_type=False, *, sharding=None, vma=frozenset(), memory_space=None):
        del sharding, vma, memory_space  # (JAX 0.10's keywords; kiln's abstract values carry none)
        super().__init__(shape, dtype, bool(weak_type))


    @property
    def sharding(self):
        """A NamedSharding over the empty mesh, every axis unsplit (jax.typeof(x).sharding outside
        a mesh)."""
        from kiln.sharding import _unsharded
        return _unsharded(len(self.shape))

    @sharding.setter
    def sharding(self, value):
        del value  # (ShapeDtypeStruct's constructor sets it; an abstract value's is the one above)

    def str_short(self):
        from kiln._src.toplevel import float0
        name = "float0" if np.dtype(self.dtype) == float0 else self.dtype.name
        return f"{name}[{','.join(str(d) for d in self.shape)}]"

    def __str__(self):
        return self.str_short()

    def __repr__(self):
        return f"ShapedArray({self.str_short()}{', weak_type=True' if self.weak_type else ''})"

    def to_tangent_aval(self):
        """The abstract value of a tangent of this value: float0 for integers and booleans (as
        JAX's), else this one."""
        if np.dtype(self.dtype).kind in "biu":
            from kiln._src.toplevel import float0
            return ShapedArray(self.shape, float0, self.weak_type)
        return ShapedArray(self.shape, self.dtype, self.weak_type)

    at_least_vspace = to_tangent_aval  # (its older name)

    def strip_weak_type(self):
        return ShapedArray(self.shape, self.dtype, False)

    def update(self, shape=None, dtype=None, weak_type=None, **kwargs):
        del kwargs  # (sharding, vma: kiln's abstract values carry none)
        return ShapedArray(self.shape if shape is None else shape, self.dtype if dtype is None else dtype,
                           self.weak_type if weak_type is None else weak_type)

    def __eq__(self, other):
        return isinstance(other, ShapedArray) and (self.shape, self.dtype, self.weak_type) == \
            (other.shape, other.dtype, other.weak_type)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.weak_type))


def typeof(x):
    """The abstract value (ShapedArray) of an array, tracer or Python scalar."""
    from kiln._src.refs import Ref
    if isinstance(x, Ref):
        from kiln._src.state.types import AbstractRef
        return AbstractRef(ShapedArray(x.shape, x.dtype, False))
    if getattr(x, "_is_key_array", False):  # a typed key array: key<fry>[shape]
        return ShapedArray(x.shape, x.dtype, False)
    a = x if isinstance(x, (core.Array, core.Tracer)) else core.asarray(x)
    return ShapedArray(a.shape, a.dtype, bool(getattr(a, "weak_type", False)))


@contextlib.contextmanager
def ensure_compile_time_eval():
    """Within the block, operations on concrete values compute now, even inside jit (constants
    and iota stay concrete arrays instead of becoming part of the traced program), as
    jax.ensure_compile_time_eval: values computed from the traced arguments still trace."""
    from kiln import _kiln
    from kiln._src import tracing
    old = tracing.compile_time_eval[0]
    tracing.compile_time_eval[0] = True
    old_c = _kiln.set_compile_time_eval(True)
    try:
        yield
    finally:
        tracing.compile_time_eval[0] = old
        _kiln.set_compile_time_eval(old_c)
