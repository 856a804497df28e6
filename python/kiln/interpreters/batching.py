"""jax.interpreters.batching: batching rules of library primitives. kiln's vmap calls them when it
meets the primitive with a batched operand (kiln/_src/primitive.py: a custom_vmap_call equation);
not_mapped (None) marks an unbatched operand or result."""
from kiln._src.primitive import (AxisData, axis_primitive_batchers, fancy_primitive_batchers,  # noqa: F401
                                  primitive_batchers)


class NotMapped:
    def __repr__(self):
        return "not_mapped"


not_mapped = None


def defvectorized(prim):
    """prim works elementwise on a leading batch axis: its batching rule applies it as it is."""
    def rule(args, dims, **params):
        return prim.bind(*args, **params), dims[0]
    primitive_batchers[prim] = rule


def defbroadcasting(prim):
    def rule(args, dims, **params):
        from kiln._src import core
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        moved = [bdim_at_front(a, d, size) for a, d in zip(args, dims)]
        del core
        return prim.bind(*moved, **params), 0
    primitive_batchers[prim] = rule


def defreducer(prim, ident):
    del ident
    raise NotImplementedError(f"batching.defreducer({prim}): not supported by kiln")


def bdim_at_front(x, bdim, size):
    import kiln.numpy as jnp
    if bdim is None:
        return jnp.broadcast_to(x, (size,) + tuple(x.shape))
    return jnp.moveaxis(x, bdim, 0)


def broadcast(x, sz, axis, mesh_axis=None):
    del mesh_axis
    import kiln.numpy as jnp
    return jnp.broadcast_to(jnp.expand_dims(x, axis), tuple(x.shape[:axis]) + (sz,) + tuple(x.shape[axis:]))


def register_vmappable(*args, **kwargs):
    raise NotImplementedError("batching.register_vmappable: kiln does not batch user-defined container types")


def unregister_vmappable(*args, **kwargs):
    raise NotImplementedError("batching.unregister_vmappable: kiln does not batch user-defined container types")
