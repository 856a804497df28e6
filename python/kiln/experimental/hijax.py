"""jax.experimental.hijax: JAX's experimental "high-level types" (user types with their own
abstract values and primitives). kiln does not have them: the names exist so that libraries which
define such types at import (flax nnx's hijax Variables, off by default) import; binding a
HiPrimitive raises NotImplementedError."""
from kiln._src.extras import ShapedArray  # noqa: F401
from kiln._src.state.types import AbstractRef  # noqa: F401
from kiln._src.trace_state import AbstractValue  # noqa: F401
from kiln.interpreters.ad import Zero, instantiate_zeros, is_undefined_primal  # noqa: F401

_hitypes = {}


class _EffectTypes(set):
    def add_type(self, t):
        self.add(t)


control_flow_allowed_effects = _EffectTypes()


class HiType(AbstractValue):
    """The abstract value of a high-level type."""


class MutableHiType(HiType):
    """The abstract value of a mutable high-level type."""


class AvalQDD:
    def __init__(self, aval, qdd):
        self.aval, self.qdd = aval, qdd


class AvalMutableQDD(AvalQDD):
    pass


class HiPspec:
    pass


class TransformedRef:
    def __init__(self, ref, transforms=()):
        self.ref, self.transforms = ref, tuple(transforms)


class HiPrimitive:
    """A primitive over high-level types: not supported by kiln."""
    multiple_results = False

    def __init__(self, name=None, **params):
        self.name, self.params = name or type(self).__name__, params

    def bind(self, *args, **params):
        raise NotImplementedError(f"jax.experimental.hijax ({self.name}): kiln has no high-level types; "
                                  f"(flax: leave flax_hijax_variable off)")


class VJPHiPrimitive(HiPrimitive):
    pass


def register_hitype(cls, to_aval):
    """Records cls's abstract value function (kiln does not trace high-level types)."""
    _hitypes[cls] = to_aval


class aval_method:
    """A method of a high-level type's abstract value (recorded; kiln calls it as a plain method)."""

    def __init__(self, fn):
        self.fn = fn

    def __get__(self, obj, objtype=None):
        return self.fn.__get__(obj, objtype) if obj is not None else self.fn


class aval_property(property):
    """A property of a high-level type's abstract value."""
