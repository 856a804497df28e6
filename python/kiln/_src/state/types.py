"""AbstractRef: the abstract value of a Ref (what jax.typeof gives for a Ref)."""
from kiln._src.trace_state import AbstractValue


class AbstractRef(AbstractValue):
    """The type of a Ref holding values of inner_aval."""

    def __init__(self, inner_aval, memory_space=None, kind=None):
        self.inner_aval, self.memory_space, self.kind = inner_aval, memory_space, kind

    @property
    def shape(self):
        return self.inner_aval.shape

    @property
    def dtype(self):
        return self.inner_aval.dtype

    @property
    def ndim(self):
        return len(self.inner_aval.shape)

    def __eq__(self, other):
        return isinstance(other, AbstractRef) and self.inner_aval == other.inner_aval

    def __hash__(self):
        return hash(("ref", self.inner_aval))

    def __repr__(self):
        return f"Ref{{{self.inner_aval.str_short()}}}"
