"""kiln's tracer errors, with the class hierarchy of `jax.errors`.

Pure Python; imports nothing from kiln. Each class takes a finished message.
The `for_tracer` classmethods build the standard message from the offending
tracer (anything with `.shape`/`.dtype`), naming the usual fix.
"""

__all__ = [
    "ConcretizationTypeError",
    "TracerBoolConversionError",
    "TracerIntegerConversionError",
    "TracerArrayConversionError",
    "UnexpectedTracerError",
    "NonConcreteBooleanIndexError",
    "CopyError",
    "JaxRuntimeError",
]


def _describe(tracer):
    """'float32[3,4]' (plus ' weak' when weakly typed) for a tracer-like object."""
    dtype = getattr(tracer, "dtype", None)
    shape = getattr(tracer, "shape", None)
    if dtype is None or shape is None:
        return f"traced value of type {type(tracer).__name__}"
    name = getattr(dtype, "name", str(dtype))
    text = f"{name}[{','.join(str(d) for d in shape)}]"
    if getattr(tracer, "weak_type", False):
        text += " (weakly typed)"
    return f"traced array {text}"


def _with_context(context):
    return f" {context.strip()}" if context else ""


class ConcretizationTypeError(TypeError):
    """A concrete (Python-level) value was needed but a traced array was given."""

    def __init__(self, message):
        super().__init__(message)

    @classmethod
    def for_tracer(cls, tracer, context=""):
        """`context` says what needed the value, e.g. 'the `shape` argument of
        jnp.zeros'."""
        return cls(
            f"A concrete value was required but a {_describe(tracer)} was found."
            f"{_with_context(context)}\n"
            "Inside jit/vmap/grad-under-jit, array values are unknown until the "
            "program runs, so they cannot be used as shapes, sizes, axes or "
            "other Python-level values. If the argument is a configuration "
            "value, mark it static with `static_argnums=` or `static_argnames=` "
            "on `kiln.jit`; if it depends on data, restructure the code so the "
            "shape does not depend on array values.")


class TracerBoolConversionError(ConcretizationTypeError):
    """`bool()` (an `if`, `while`, `and`/`or`, `assert`) of a traced array."""

    @classmethod
    def for_tracer(cls, tracer, context=""):
        return cls(
            f"Attempted to convert a {_describe(tracer)} to a Python bool."
            f"{_with_context(context)}\n"
            "Python control flow (`if`, `while`, `and`, `or`, `not`, `assert`) "
            "cannot branch on a value that is only known when the compiled "
            "program runs. Use `kiln.lax.cond` or `kiln.numpy.where` for an "
            "if/else on data, `kiln.lax.while_loop` or `kiln.lax.fori_loop` "
            "for a data-dependent loop, or mark the argument static with "
            "`static_argnums=` / `static_argnames=` if it is configuration.")


class TracerIntegerConversionError(TypeError):
    """`int()`, `operator.index` (e.g. `range(x)`, list indexing) of a tracer."""

    def __init__(self, message):
        super().__init__(message)

    @classmethod
    def for_tracer(cls, tracer, context=""):
        return cls(
            f"Attempted to convert a {_describe(tracer)} to a Python integer "
            f"(via int(), __index__, range(), or indexing a Python sequence)."
            f"{_with_context(context)}\n"
            "Its value is unknown while tracing. If the integer is "
            "configuration (a size, a count), pass it with `static_argnums=` / "
            "`static_argnames=`; to index an array with it use array indexing "
            "(`x[i]`, `lax.dynamic_slice`); for a loop count use "
            "`kiln.lax.fori_loop`.")


class TracerArrayConversionError(TypeError):
    """`np.asarray` / `__array__` of a traced array."""

    def __init__(self, message):
        super().__init__(message)

    @classmethod
    def for_tracer(cls, tracer, context=""):
        return cls(
            f"Attempted to convert a {_describe(tracer)} to a NumPy array."
            f"{_with_context(context)}\n"
            "NumPy functions cannot run on traced values: use the "
            "`kiln.numpy` equivalent (e.g. `jnp.sum` rather than `np.sum`) "
            "so the operation becomes part of the traced program, or compute "
            "the value outside the transformed function.")


class UnexpectedTracerError(Exception):
    """A tracer escaped the transformation that created it and was used later."""

    def __init__(self, message):
        super().__init__(message)

    @classmethod
    def for_tracer(cls, tracer, context=""):
        return cls(
            f"Encountered a {_describe(tracer)} whose trace has already "
            f"finished.{_with_context(context)}\n"
            "A value created inside jit/vmap/grad leaked out of it, typically "
            "by being stored in a global, a Python container or an object "
            "attribute during tracing. Return such values from the "
            "transformed function instead of stashing them.")


class NonConcreteBooleanIndexError(IndexError):
    """Boolean-mask indexing whose result shape would depend on traced data."""

    def __init__(self, message):
        super().__init__(message)

    @classmethod
    def for_tracer(cls, tracer, context=""):
        return cls(
            f"Boolean indexing with a {_describe(tracer)} mask is not allowed "
            f"under a transformation.{_with_context(context)}\n"
            "The number of selected elements (hence the result shape) depends "
            "on the mask's values, which are unknown while tracing. Use "
            "`kiln.numpy.where(mask, x, fill)` to keep the shape fixed, or "
            "`x.at[...]` updates, or a reduction such as "
            "`jnp.sum(x, where=mask)`.")


class CopyError(RuntimeError):
    """A functional update (x.at[i].set(v), lax.dynamic_update_slice, lax.scatter) would copy its
    operand while `kiln.config.update("kiln_forbid_copies", True)` is on. The message names the
    operation, its operand's type, the source line and why it could not run in place."""


class JaxRuntimeError(RuntimeError):
    """A computation failed to compile or to run (jax.errors.JaxRuntimeError): a host callback
    raised, a loop stopped at Ctrl-C, the device failed."""
