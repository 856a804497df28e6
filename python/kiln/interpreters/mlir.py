"""jax.interpreters.mlir: how a library primitive is compiled. kiln compiles a primitive by tracing a
Python function that computes it: register_lowering(prim, lower_fun(fn, multiple_results=...))
records fn, which kiln inlines where the primitive is bound under jit. A lowering rule written
against JAX's MLIR bindings (ir, hlo) is recorded; kiln uses the primitive's impl, and where the
impl cannot trace (it needs a value), runs the rule on kiln's traced values in place of MLIR ones:
of JAX's MLIR API, emit_python_callback (a host callback) and the context's avals work there."""
from kiln._src.primitive import lowerings, raw_lowerings


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
        raw_lowerings[prim] = rule
    return rule


class _ModuleContext:
    def add_keepalive(self, keepalive):
        """Accepted: kiln's host callbacks keep what they need alive themselves."""


class LoweringRuleContext:
    """The context JAX hands a lowering rule; kiln's (for a rule it runs on traced values) has the
    operands' and results' avals and a module_context."""

    def __init__(self, avals_in=(), avals_out=(), module_context=None):
        self.avals_in, self.avals_out = list(avals_in), list(avals_out)
        self.module_context = module_context or _ModuleContext()
        self.tokens_in = self.tokens_out = None


def _run_rule(prim, rule, args, params):
    """prim's MLIR lowering rule run on kiln values (traced arrays in place of ir.Values)."""
    from kiln._src.primitive import aval_of
    if prim.abstract_eval is None:
        raise NotImplementedError(f"the primitive '{prim.name}': kiln runs its MLIR lowering rule only with "
                                  f"an abstract evaluation rule (def_abstract_eval)")
    avals_in = [aval_of(a) for a in args]
    out = prim.abstract_eval(*avals_in, **params)
    avals_out = list(out) if prim.multiple_results else [out]
    outs = rule(LoweringRuleContext(avals_in, avals_out), *args, **params)
    outs = [o[0] if isinstance(o, (list, tuple)) and len(o) == 1 else o for o in outs]
    return list(outs) if prim.multiple_results else outs[0]


def emit_python_callback(ctx, callback, token, operands, operand_avals, result_avals, *, has_side_effect=False,
                         partitioned=False, sharding=None, operand_layouts=None, result_layouts=None, **kwargs):
    """Under kiln a lowering rule runs on traced values: the callback becomes a host callback on
    them (pure_callback; io_callback with has_side_effect). Returns (results, token, keepalive)."""
    del ctx, operand_avals, partitioned, sharding, operand_layouts, result_layouts, kwargs
    from kiln._src.api import ShapeDtypeStruct
    from kiln._src.callback import io_callback, pure_callback
    specs = tuple(ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in result_avals)
    if not specs and not has_side_effect:  # nothing to compute: its results are all static
        return [], token, None

    def host(*xs):
        return tuple(callback(*xs))
    outs = io_callback(host, specs, *operands) if has_side_effect else pure_callback(host, specs, *operands)
    return list(outs), token, None


def _unsupported(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"jax.interpreters.mlir.{name}: kiln lowers through its own MLIR pipeline; "
                                  f"JAX's MLIR bindings are not available")
    fn.__name__ = name
    return fn


for _n in ("ir_constant", "ir_constants", "dtype_to_ir_type", "aval_to_ir_type", "aval_to_ir_types",
           "lower_jaxpr_to_fun", "lower_jaxpr_to_module", "jaxpr_subcomp",
           "dense_int_array", "dense_int_elements", "i32_attr", "i64_attr", "shape_tensor", "token_type",
           "make_ir_context", "module_to_string", "module_to_bytecode", "flatten_ir_values", "flatten_ir_types",
           "core_call_lowering", "register_constant_handler", "ir_attribute", "merge_mlir_modules"):
    globals()[_n] = _unsupported(_n)
del _n
ir = None
