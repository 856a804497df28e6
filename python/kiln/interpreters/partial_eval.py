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
    from kiln._src.api import ShapeDtypeStruct
    f = fun.call_wrapped if hasattr(fun, "call_wrapped") else fun
    closed = kiln.make_jaxpr(lambda *xs: f(*xs))(*[ShapeDtypeStruct(a.shape, a.dtype) for a in in_avals])
    return closed.jaxpr, closed.out_avals, closed.consts


for _n in ("trace_to_jaxpr_nounits", "dce_jaxpr", "dce_jaxpr_consts", "dce_jaxpr_call_rule",
           "dce_jaxpr_closed_call_rule"):
    globals()[_n] = _unsupported(_n)
del _n
