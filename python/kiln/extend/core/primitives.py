"""jax.extend.core.primitives: the Primitive objects of kiln's primitives under JAX's `<name>_p`
names (compare them with eqn.primitive; bind them with kiln's params)."""
from kiln._src.primitive import primitive_named as _named

_KILN_OF_JAX = {"jit": "pjit", "pjit": "pjit", "closed_call": "closed_call", "call": "call",
                "xla_pmap": "xla_pmap", "while": "while", "cond": "cond", "scan": "scan",
                "custom_jvp_call": "custom_jvp_call", "custom_vjp_call": "custom_vjp_call",
                "dot_general": "dot_general", "reduce_sum": "reduce_sum", "add": "add", "sub": "sub",
                "mul": "mul", "div": "div", "neg": "neg", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos",
                "tanh": "tanh", "logistic": "logistic", "sqrt": "sqrt", "rsqrt": "rsqrt", "max": "max", "min": "min",
                "abs": "abs", "sign": "sign", "pow": "pow", "integer_pow": "integer_pow", "select_n": "select_n",
                "convert_element_type": "convert_element_type", "broadcast_in_dim": "broadcast_in_dim",
                "reshape": "reshape", "transpose": "transpose", "squeeze": "squeeze", "concatenate": "concatenate",
                "gather": "gather", "scatter": "scatter", "scatter_add": "scatter_add", "dynamic_slice": "dynamic_slice",
                "dynamic_update_slice": "dynamic_update_slice", "slice": "slice", "iota": "iota",
                "reduce_max": "reduce_max", "reduce_min": "reduce_min", "argmax": "argmax", "argmin": "argmin",
                "cumsum": "cumsum", "sort": "sort", "stop_gradient": "stop_gradient", "eq": "eq", "ne": "ne",
                "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "and": "and", "or": "or", "not": "not",
                "erf": "erf", "log1p": "log1p", "expm1": "expm1", "random_bits": "random_bits",
                "random_seed": "random_seed", "random_wrap": "random_wrap", "random_unwrap": "random_unwrap",
                "remat": "remat", "checkpoint": "checkpoint", "psum": "psum", "all_gather": "all_gather",
                "copy": "copy", "copy_p": "copy"}

for _jax, _kiln in _KILN_OF_JAX.items():
    globals()[(_jax if _jax.endswith("_p") else _jax + "_p")] = _named(_kiln)
# JAX's spelling of a few
jit_p = pjit_p
and_p = globals()["and_p"]
del _jax, _kiln
