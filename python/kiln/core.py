"""jax.core: the public names of JAX's core, bound to kiln's own classes (a kiln tracer is a
jax.core.Tracer; make_jaxpr's result is a ClosedJaxpr whose .jaxpr eval_jaxpr runs)."""
from kiln._src.extras import ShapedArray, ensure_compile_time_eval  # noqa: F401
from kiln._src.jaxpr import ClosedJaxpr, DropVar, Jaxpr, JaxprEqn, Literal, Var, eval_jaxpr, jaxpr_as_fun  # noqa: F401
from kiln._src.jaxpr import jaxprs_in_params, subjaxprs  # noqa: F401
from kiln._src.primitive import Primitive  # noqa: F401
from kiln._src.primitive import aval_of as get_aval  # noqa: F401
from kiln._src.tracing import Tracer, concrete_or_error  # noqa: F401
from kiln._src.trace_state import (AbstractValue, Atom, ParamDict, Trace, Value, eval_context,  # noqa: F401
                                   find_top_trace, get_opaque_trace_state, max_dim, min_dim, mapped_aval,
                                   unmapped_aval, valid_jaxtype, raise_to_shaped)

__all__ = ["AbstractValue", "Atom", "ParamDict", "ShapedArray", "Trace", "Tracer", "Value",
           "ensure_compile_time_eval", "eval_context", "eval_jaxpr", "max_dim", "min_dim"]

from kiln.interpreters.xla import pytype_aval_mappings  # noqa: F401,E402  (a library's types, recorded)
