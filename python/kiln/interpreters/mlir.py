"""jax.interpreters.mlir: how a library primitive is compiled. kiln compiles a primitive by tracing a
Python function that computes it: register_lowering(prim, lower_fun(fn, multiple_results=...))
records fn, which kiln inlines where the primitive is bound under jit. A lowering rule written
against JAX's MLIR bindings (ir, hlo) cannot run in kiln: such a rule is recorded and the
primitive's impl is used instead."""
from kiln._src.primitive import lowerings


class _LoweredFun:
    """What lower_fun returns: the function to inline."""

    def __init__(self, fun, multiple_results):
        self.fun, self.multiple_results = fun, multiple_results

    def __call__(self, ctx, *args, **params):
        raise NotImplementedError("a lower_fun rule is inlined by kiln, not called with an MLIR context")


def lower_fun(fun, multiple_results=True):
    return _LoweredFun(fun, multiple_results)


def register_lowering(prim, rule, platform=None, inline=True, cacheable=True):
    """Records prim's lowering: a lower_fun(fn) is what kiln computes prim with under a trace."""
    del platform, inline, cacheable
    if isinstance(rule, _LoweredFun):
        fn = rule.fun
        if not rule.multiple_results and prim.multiple_results:
            lowerings[prim] = lambda *a, **k: [fn(*a, **k)]
        elif rule.multiple_results and not prim.multiple_results:
            lowerings[prim] = lambda *a, **k: fn(*a, **k)[0]
        else:
            lowerings[prim] = fn
    else:
        lowerings.setdefault(prim, None)
    return rule


class LoweringRuleContext:
    """The context JAX hands a lowering rule (kiln calls none)."""


def _unsupported(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"jax.interpreters.mlir.{name}: kiln lowers through its own MLIR pipeline; "
                                  f"JAX's MLIR bindings are not available")
    fn.__name__ = name
    return fn


for _n in ("ir_constant", "ir_constants", "dtype_to_ir_type", "aval_to_ir_type", "aval_to_ir_types",
           "emit_python_callback", "lower_jaxpr_to_fun", "lower_jaxpr_to_module", "jaxpr_subcomp",
           "dense_int_array", "dense_int_elements", "i32_attr", "i64_attr", "shape_tensor", "token_type",
           "make_ir_context", "module_to_string", "module_to_bytecode", "flatten_ir_values", "flatten_ir_types",
           "core_call_lowering", "register_constant_handler", "ir_attribute", "merge_mlir_modules"):
    globals()[_n] = _unsupported(_n)
del _n
ir = None
