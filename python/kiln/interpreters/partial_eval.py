"""jax.interpreters.partial_eval: the few names libraries import; JAX's partial evaluator itself is
not part of kiln (its programs are transformed in C)."""
from kiln._src.tracing import Tracer as DynamicJaxprTracer  # noqa: F401
from kiln._src.tracing import Tracer as JaxprTracer  # noqa: F401

custom_partial_eval_rules = {}
partial_eval_jaxpr_custom_rules = {}
dce_rules = {}


class PartialVal(tuple):
    @classmethod
    def known(cls, const):
        return cls((None, const))

    @classmethod
    def unknown(cls, aval):
        return cls((aval, None))


Val = object


def _unsupported(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"jax.interpreters.partial_eval.{name}: not available in kiln; use "
                                  f"kiln.make_jaxpr to get a program")
    fn.__name__ = name
    return fn


def trace_to_jaxpr_dynamic(fun, in_avals, *args, **kwargs):
    """(jaxpr, out_avals, consts) of a linear_util.WrappedFun traced on in_avals."""
    import kiln
    f = fun.call_wrapped if hasattr(fun, "call_wrapped") else fun
    closed = kiln.make_jaxpr(lambda *xs: f(*xs))(*[_abstract(a) for a in in_avals])
    return closed.jaxpr, closed.out_avals, closed.consts


def _placeholder(aval):
    """A value of `aval`'s type (zeros; a key array for key<fry>)."""
    import numpy as np
    import kiln
    from kiln._src import dtypes
    if isinstance(aval.dtype, dtypes.ExtendedDType):
        return kiln.random.wrap_key_data(np.zeros(tuple(aval.shape) + (2,), np.uint32))
    z = kiln.numpy.zeros(aval.shape, aval.dtype)
    return kiln.lax.convert_element_type(z, z.dtype, True) if getattr(aval, "weak_type", False) else z


def _abstract(aval):
    """What make_jaxpr traces `aval` from: a ShapeDtypeStruct (nothing allocated), a key array."""
    from kiln._src import dtypes
    from kiln._src.api import ShapeDtypeStruct
    if isinstance(aval.dtype, dtypes.ExtendedDType):
        return _placeholder(aval)
    return ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=getattr(aval, "weak_type", False))


def trace_to_jaxpr_nounits(fun, pvals, instantiate=False):
    """JAX's partial evaluation of a linear_util.WrappedFun over PartialVals: (jaxpr, out_pvals,
    consts). The outputs that depend on no unknown input come back known, with their values (flax's
    scan finds its loop-invariant broadcast variables so); the others unknown, with their avals.
    kiln stages the whole function (the jaxpr covers every output) and computes the known outputs
    by running that program, whose known part ignores the placeholders given for the unknown
    inputs; `instantiate` (a bool or one per output) makes known outputs unknown."""
    import kiln
    from kiln._src.jaxpr import Literal
    f = fun.call_wrapped if hasattr(fun, "call_wrapped") else fun
    pvals = [PartialVal(p) for p in pvals]
    unknown = [a for a, _ in pvals if a is not None]

    def staged(*xs):
        it = iter(xs)
        return f(*[next(it) if a is not None else c for a, c in pvals])
    closed = kiln.make_jaxpr(staged)(*[_abstract(a) for a in unknown])
    jaxpr = closed.jaxpr
    dependent = set(jaxpr.invars)
    for eqn in jaxpr.eqns:
        if any(not isinstance(v, Literal) and v in dependent for v in eqn.invars):
            dependent.update(eqn.outvars)
    n = len(jaxpr.outvars)
    inst = list(instantiate) if isinstance(instantiate, (list, tuple)) else [bool(instantiate)] * n
    is_unknown = [inst[i] or (not isinstance(v, Literal) and v in dependent) for i, v in enumerate(jaxpr.outvars)]
    values = None
    if not all(is_unknown):
        values = kiln.core.eval_jaxpr(jaxpr, closed.consts, *[_placeholder(a) for a in unknown])
    out_pvals = [PartialVal.unknown(v.aval) if is_unknown[i] else PartialVal.known(values[i])
                 for i, v in enumerate(jaxpr.outvars)]
    return jaxpr, out_pvals, list(closed.consts)


for _n in ("dce_jaxpr", "dce_jaxpr_consts", "dce_jaxpr_call_rule",
           "dce_jaxpr_closed_call_rule"):
    globals()[_n] = _unsupported(_n)
del _n
