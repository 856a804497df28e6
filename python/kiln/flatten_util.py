"""jax.flatten_util: a pytree of arrays as one flat vector and back."""
import numpy as np

from kiln._src import dtypes as _dtypes
from kiln._src.tree_util import tree_flatten, tree_unflatten

__all__ = ["ravel_pytree"]


def ravel_pytree(pytree):
    """(flat, unravel): the leaves of `pytree` raveled and concatenated into one 1-D array of their
    promoted dtype (float32[0] when there are none), and a function taking such a vector back to a
    pytree of the same structure, shapes and dtypes. As JAX's, unravel is hashable and equal for
    equal layouts (usable as a static argument), and keeps the vector's dtype when every leaf has
    one dtype (a dtype-polymorphic unravel)."""
    leaves, treedef = tree_flatten(pytree)
    flat, unravel_list = _ravel_list(leaves)
    return flat, _Unravel(treedef, unravel_list)


class _Unravel:
    """unravel_pytree with its layout bound; compares and hashes by layout."""

    def __init__(self, treedef, unravel_list):
        self.treedef, self.unravel_list = treedef, unravel_list

    def __call__(self, flat):
        return tree_unflatten(self.treedef, self.unravel_list(flat))

    def _key(self):
        return (self.treedef, self.unravel_list)

    def __eq__(self, other):
        return isinstance(other, _Unravel) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"unravel_pytree({self.treedef})"


class _UnravelList:
    """The flat vector split into chunks of `sizes`, reshaped to `shapes`; with `from_dtypes`,
    converted back to them (the vector must then have dtype `to_dtype`)."""

    def __init__(self, sizes, shapes, from_dtypes=None, to_dtype=None):
        self.sizes, self.shapes, self.from_dtypes, self.to_dtype = sizes, shapes, from_dtypes, to_dtype

    def __call__(self, arr):
        from kiln import lax
        if self.from_dtypes is not None:
            arr_dtype = _dtypes.dtype_of(arr)
            if arr_dtype != self.to_dtype:
                raise TypeError(f"unravel function given array of dtype {arr_dtype}, "
                                f"but expected dtype {self.to_dtype}")
        if np.ndim(arr) != 1 or np.shape(arr)[0] != sum(self.sizes):
            raise ValueError(f"unravel function given array of shape {np.shape(arr)}, but expected a 1-D "
                             f"array of {sum(self.sizes)} elements (the raveled pytree's length)")
        chunks = lax.split(arr, self.sizes) if self.sizes else []
        out = [c.reshape(s) for c, s in zip(chunks, self.shapes)]
        if self.from_dtypes is not None:
            out = [_convert(c, dt) for c, dt in zip(out, self.from_dtypes)]
        return out

    def _key(self):
        return (self.sizes, self.shapes, self.from_dtypes, self.to_dtype)

    def __eq__(self, other):
        return isinstance(other, _UnravelList) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


def _convert(x, dtype):
    """x as `dtype`; complex to real keeps the real part without a warning (as JAX's unravel)."""
    from kiln import lax
    if np.issubdtype(x.dtype, np.complexfloating) and not np.issubdtype(dtype, np.complexfloating):
        x = lax.real(x)
    return lax.convert_element_type(x, dtype)


def _ravel_list(leaves):
    from kiln import lax
    import kiln.numpy as jnp
    if not leaves:
        return jnp.zeros((0,), np.float32), _UnravelList((), ())
    from_dtypes = tuple(_dtypes.dtype_of(x) for x in leaves)
    to_dtype = _dtypes.result_type(*from_dtypes)
    sizes = tuple(int(np.size(x)) for x in leaves)
    shapes = tuple(tuple(np.shape(x)) for x in leaves)
    if all(dt == to_dtype for dt in from_dtypes):
        flat = lax.concatenate([jnp.ravel(x) for x in leaves], 0)
        return flat, _UnravelList(sizes, shapes)
    flat = lax.concatenate([jnp.ravel(lax.convert_element_type(x, to_dtype)) for x in leaves], 0)
    return flat, _UnravelList(sizes, shapes, from_dtypes, to_dtype)
