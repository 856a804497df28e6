"""kiln.ops: jax.ops' segment reductions: data reduced over the rows that share a segment id,
through one scatter (ids outside [0, num_segments) are dropped, as JAX's FILL_OR_DROP)."""
import numpy as np

from kiln._src import core, dtypes

__all__ = ["segment_sum", "segment_prod", "segment_max", "segment_min"]


def _segment(name, data, segment_ids, num_segments, how, fill):
    from kiln import numpy as jnp
    data = jnp.asarray(data)
    ids = jnp.asarray(segment_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"ops.{name}: segment_ids must be integers, got {ids.dtype}")
    if ids.ndim != 1 or data.ndim < 1 or ids.shape[0] != data.shape[0]:
        raise ValueError(f"ops.{name}: segment_ids of shape {ids.shape} must be 1-D and as long as data's first axis "
                         f"(data shape {data.shape})")
    if num_segments is None:  # as JAX: from the ids' values (concrete only)
        ids_c = core.concrete_or_error(ids, f"ops.{name}: num_segments=None needs concrete segment_ids (pass "
                                            "num_segments under jit)")
        num_segments = int(np.max(ids_c)) + 1 if ids_c.size else 0
    num_segments = int(num_segments)
    ids = jnp.where(ids < 0, num_segments, ids)  # negative ids are dropped, not counted from the end
    out = jnp.full((num_segments,) + data.shape[1:], fill(data.dtype), data.dtype)
    return getattr(out.at[ids], how)(data, mode="drop")


def _lowest(dt):
    dt = np.dtype(dt)
    return -np.inf if dtypes.issubdtype(dt, np.inexact) else (False if dt.kind == "b" else np.iinfo(dt).min)


def _highest(dt):
    dt = np.dtype(dt)
    return np.inf if dtypes.issubdtype(dt, np.inexact) else (True if dt.kind == "b" else np.iinfo(dt).max)


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                bucket_size=None, mode=None):
    """out[s] = sum of data[i] over the i with segment_ids[i] == s (0 for an empty segment)."""
    return _segment("segment_sum", data, segment_ids, num_segments, "add", lambda dt: 0)


def segment_prod(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                 bucket_size=None, mode=None):
    """out[s] = product of data[i] over segment s (1 for an empty segment)."""
    return _segment("segment_prod", data, segment_ids, num_segments, "multiply", lambda dt: 1)


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                bucket_size=None, mode=None):
    """out[s] = max of data[i] over segment s (the dtype's lowest value, -inf, for an empty one)."""
    return _segment("segment_max", data, segment_ids, num_segments, "max", _lowest)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                bucket_size=None, mode=None):
    """out[s] = min of data[i] over segment s (the dtype's highest value, inf, for an empty one)."""
    return _segment("segment_min", data, segment_ids, num_segments, "min", _highest)
