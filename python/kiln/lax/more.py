"""The rest of jax.lax's public names, written on the primitives of kiln.lax: XLA-style gather and scatter
(GatherDimensionNumbers, ScatterDimensionNumbers) as one flat take or scatter each, top_k, the bit-level ops
(population_count, clz, nextafter, reduce_precision, mulhi), cumlogsumexp, shape helpers, and the special
functions, which call kiln.scipy.special. Imports only kiln.lax's core names at import time; kiln.numpy
and kiln.scipy are imported inside the functions that need them (they import kiln.lax themselves).
"""

import builtins
import enum
import math
import operator
from typing import NamedTuple

import numpy as np

from kiln import lax as _lax
from kiln._src import core, dtypes
from kiln._src.core import Array

__all__ = ["DotAlgorithm", "DotAlgorithmPreset", "AccuracyMode", "Tolerance", "scaled_dot",
    "GatherDimensionNumbers", "ScatterDimensionNumbers", "GatherScatterMode", "gather", "scatter",
    "scatter_add", "scatter_sub", "scatter_mul", "scatter_min", "scatter_max", "scatter_apply", "index_take",
    "top_k", "approx_max_k", "approx_min_k", "dynamic_index_in_dim", "dynamic_update_index_in_dim",
    "cumlogsumexp", "nextafter", "population_count", "clz", "mulhi", "reduce_precision", "reduce_xor",
    "igamma", "igammac", "igamma_grad_a", "random_gamma_grad", "betainc", "polygamma", "zeta",
    "bessel_i0e", "bessel_i1e", "broadcast_shapes", "broadcast_to_rank", "broadcast_like", "collapse", "tile",
    "split", "stack", "unstack", "empty", "dtype", "shape_as_value", "stage", "dce_sink", "composite",
    "platform_dependent", "with_sharding_constraint", "psum", "pmean", "pmax", "pmin", "all_gather",
    "psum_scatter", "ppermute", "all_to_all", "axis_index", "axis_size", "pbroadcast", "pvary", "pcast", "pshuffle",
    "pswapaxes",
    "ragged_all_to_all", "ragged_dot", "ragged_dot_general",
    "RaggedDotDimensionNumbers", "DotDimensionNumbers", "ConvGeneralDilatedDimensionNumbers", "PrecisionLike",
    "RandomAlgorithm", "rng_uniform", "rng_bit_generator", "create_token", "after_all",
    "conv_shape_tuple", "conv_general_shape_tuple", "conv_transpose_shape_tuple", "conv_general_permutations",
    "reduce_window_shape_tuple", "conv_general_dilated_local", "custom_root", "custom_linear_solve",
]


def _array(x, opname):
    return x if isinstance(x, Array) else _lax._to_array(x, None, opname)


def _static_int(x, what):
    if isinstance(x, Array):
        x = core.concrete_or_error(x, what)
    return operator.index(x)


def _index_dtype(n):
    """int32 when n elements can be addressed with it, else int64 (which needs x64)."""
    if n < 2 ** 31:
        return np.dtype(np.int32)
    if not dtypes.canonicalize_dtype(np.int64) == np.int64:
        raise ValueError(f"an array of {n} elements needs 64-bit indices; enable jax_enable_x64")
    return np.dtype(np.int64)


# ---------------------------------------------------------------------------------------------------------
# Gather and scatter with XLA's dimension numbers. Each output (or update) element's position in the
# operand is start + window offset, per operand dimension; the positions become one flat index array,
# and the op one take (or scatter) on the flattened operand, which carries their AD and batching rules.

class GatherDimensionNumbers(NamedTuple):
    """How gather's indices and slices map to the operand and the output (XLA's Gather; the index vector
    is always the last dimension of start_indices)."""
    offset_dims: tuple
    collapsed_slice_dims: tuple
    start_index_map: tuple
    operand_batching_dims: tuple = ()
    start_indices_batching_dims: tuple = ()


class ScatterDimensionNumbers(NamedTuple):
    """How scatter's indices and update windows map to the operand (XLA's Scatter; the index vector is
    always the last dimension of scatter_indices)."""
    update_window_dims: tuple
    inserted_window_dims: tuple
    scatter_dims_to_operand_dims: tuple
    operand_batching_dims: tuple = ()
    scatter_indices_batching_dims: tuple = ()


class GatherScatterMode(enum.Enum):
    """Out-of-bounds indices: CLIP clamps each window into range; FILL_OR_DROP fills a gathered window
    that is not wholly in range (and drops such a scattered one); PROMISE_IN_BOUNDS clamps gathers and
    drops scatters, as XLA does. ONE_HOT is accepted by name only (kiln has no one-hot lowering)."""
    CLIP = enum.auto()
    FILL_OR_DROP = enum.auto()
    PROMISE_IN_BOUNDS = enum.auto()
    ONE_HOT = enum.auto()

    @staticmethod
    def from_any(s):
        if isinstance(s, GatherScatterMode):
            return s
        names = {"clip": GatherScatterMode.CLIP, None: GatherScatterMode.FILL_OR_DROP,
                 "fill": GatherScatterMode.FILL_OR_DROP, "drop": GatherScatterMode.FILL_OR_DROP,
                 "promise_in_bounds": GatherScatterMode.PROMISE_IN_BOUNDS, "one_hot": GatherScatterMode.ONE_HOT}
        if s not in names:
            raise ValueError(f'Unknown gather mode "{s}"')
        return names[s]


def _check_sorted_dims(opname, what, dims, rank):
    if list(dims) != sorted(set(dims)) or any(not 0 <= d < rank for d in dims):
        raise TypeError(f"{opname}: {what} must be sorted, distinct and in [0, {rank}), got {tuple(dims)}")


def _indices_arg(opname, indices):
    indices = _array(indices, opname)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{opname}: indices must have an integer dtype, got {indices.dtype}")
    if indices.ndim == 0:
        raise TypeError(f"{opname}: indices must have at least one dimension (the index vector is the last)")
    return indices


def _strides(shape):
    return [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]


def _flat_positions(operand_shape, index_map, indices, out_shape, index_dims, window, batching,
                    window_sizes, clip):
    """Flat operand positions of every element of an output (gather) or of the updates (scatter), and
    whether its window lies wholly in range (None when every one does or clip clamps them).

    index_map: operand dim -> component of the index vector; index_dims: the out dims the indices'
    batch dims map to, in order; window: operand dim -> out dim of its window offset; batching:
    operand dim -> indices batch dim giving its position; window_sizes: per operand dim."""
    idt = _index_dtype(builtins.max(int(np.prod(operand_shape, dtype=np.int64)), 1) + 1)
    flat, valid = None, None
    for d, (size, stride) in enumerate(zip(operand_shape, _strides(operand_shape))):
        pos = None
        if d in index_map:
            k = index_map[d]
            start = _lax.convert_element_type(_lax.index_in_dim(indices, k, indices.ndim - 1, False), idt)
            hi = _lax.full((), builtins.max(size - window_sizes[d], 0), idt)
            inside = _lax.clamp(_lax.full((), 0, idt), start, hi)
            if not clip:
                ok = _lax.eq(start, inside)
                valid = ok if valid is None else _lax.and_(valid, ok)
            pos = _lax.broadcast_in_dim(inside, out_shape, index_dims)
        elif d in batching:
            pos = _lax.broadcasted_iota(idt, out_shape, index_dims[batching[d]])
        if d in window:
            w = _lax.broadcasted_iota(idt, out_shape, window[d])
            pos = w if pos is None else _lax.add(pos, w)
        if pos is None or stride == 0:
            continue
        term = pos if stride == 1 else _lax.mul(pos, _lax.full((), stride, idt))
        flat = term if flat is None else _lax.add(flat, term)
    if flat is None:
        flat = _lax.full(out_shape, 0, idt)
    if valid is not None:
        valid = _lax.broadcast_in_dim(valid, out_shape, index_dims)
    return flat, valid


def gather(operand, start_indices, dimension_numbers, slice_sizes, *, unique_indices=False,
           indices_are_sorted=False, mode=None, fill_value=None):
    """XLA's Gather: for each index vector in start_indices (its last axis), the slice of `slice_sizes`
    at that start, with collapsed_slice_dims dropped; offset_dims say where the slice dims go in the
    output. mode: None and 'promise_in_bounds' and 'clip' clamp each window into range; 'fill' fills
    windows not wholly in range with fill_value (NaN, the int minimum, True by default), as JAX."""
    opname = "gather"
    operand = _array(operand, opname)
    indices = _indices_arg(opname, start_indices)
    dn = GatherDimensionNumbers(*dimension_numbers) if not isinstance(dimension_numbers, GatherDimensionNumbers) \
        else dimension_numbers
    mode = GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else GatherScatterMode.from_any(mode)
    if mode is GatherScatterMode.ONE_HOT:
        raise NotImplementedError("gather: mode ONE_HOT is not supported by kiln; use 'clip' or 'fill'")
    sizes = tuple(_static_int(s, "gather: slice_sizes") for s in slice_sizes)
    offset, collapsed, smap = tuple(dn.offset_dims), tuple(dn.collapsed_slice_dims), tuple(dn.start_index_map)
    obatch, ibatch = tuple(dn.operand_batching_dims), tuple(dn.start_indices_batching_dims)
    batch_shape = indices.shape[:-1]
    if len(sizes) != operand.ndim:
        raise TypeError(f"gather: slice_sizes {sizes} must have one entry per operand dimension {operand.shape}")
    if any(not 0 <= s <= n for s, n in zip(sizes, operand.shape)):
        raise TypeError(f"gather: slice_sizes {sizes} must lie within the operand's shape {operand.shape}")
    if indices.shape[-1] != len(smap):
        raise TypeError(f"gather: start_index_map {smap} needs index vectors of length {len(smap)}, got "
                        f"start_indices of shape {indices.shape}")
    for what, dims in (("collapsed_slice_dims", collapsed), ("operand_batching_dims", obatch)):
        _check_sorted_dims(opname, what, dims, operand.ndim)
        if any(sizes[d] != 1 for d in dims):
            raise TypeError(f"gather: {what} {dims} must have slice size 1, got slice_sizes {sizes}")
    if set(collapsed) & set(obatch) or len(set(smap)) != len(smap) or set(smap) & set(obatch):
        raise TypeError("gather: collapsed_slice_dims, operand_batching_dims and start_index_map overlap")
    if len(obatch) != len(ibatch) or any(not 0 <= b < len(batch_shape) for b in ibatch):
        raise TypeError(f"gather: start_indices_batching_dims {ibatch} must pair with operand_batching_dims "
                        f"{obatch} and name batch dims of start_indices {indices.shape}")
    window_dims = [d for d in range(operand.ndim) if d not in collapsed and d not in obatch]
    out_rank = len(batch_shape) + len(offset)
    _check_sorted_dims(opname, "offset_dims", offset, out_rank)
    if len(offset) != len(window_dims):
        raise TypeError(f"gather: offset_dims {offset} must have one entry per uncollapsed slice dimension "
                        f"({len(window_dims)})")
    index_dims = tuple(i for i in range(out_rank) if i not in offset)
    out_shape = [0] * out_rank
    for i, n in zip(index_dims, batch_shape):
        out_shape[i] = n
    for o, d in zip(offset, window_dims):
        out_shape[o] = sizes[d]
    out_shape = tuple(out_shape)
    fill = mode is GatherScatterMode.FILL_OR_DROP
    if operand.size == 0 or math.prod(out_shape) == 0:
        return _lax.full(out_shape, 0, operand.dtype)
    flat, valid = _flat_positions(operand.shape, {d: k for k, d in enumerate(smap)}, indices, out_shape,
                                  index_dims, dict(zip(window_dims, offset)),
                                  {d: ibatch[i] for i, d in enumerate(obatch)}, sizes, clip=not fill)
    out = _lax.reshape(_lax._take(_lax.reshape(operand, (operand.size,)), _lax.reshape(flat, (flat.size,)), 0),
                       out_shape)
    if valid is None:
        return out
    if fill_value is None:
        from kiln._src.numpy.shape_ops import _default_fill
        fill_value = _default_fill(operand.dtype)
    return _lax.select(valid, out, _lax.full(out_shape, fill_value, operand.dtype))


def _scatter(opname, operand, scatter_indices, updates, dimension_numbers, mode, op):
    operand = _array(operand, opname)
    indices = _indices_arg(opname, scatter_indices)
    updates = _lax._same_dtype_args("scatter", operand, updates)[1]
    dn = ScatterDimensionNumbers(*dimension_numbers) \
        if not isinstance(dimension_numbers, ScatterDimensionNumbers) else dimension_numbers
    mode = GatherScatterMode.from_any(mode)
    if mode is GatherScatterMode.ONE_HOT:
        raise NotImplementedError(f"{opname}: mode ONE_HOT is not supported by kiln; use 'clip' or 'drop'")
    uwin, inserted = tuple(dn.update_window_dims), tuple(dn.inserted_window_dims)
    smap, obatch = tuple(dn.scatter_dims_to_operand_dims), tuple(dn.operand_batching_dims)
    ibatch = tuple(dn.scatter_indices_batching_dims)
    batch_shape = indices.shape[:-1]
    if indices.shape[-1] != len(smap):
        raise TypeError(f"{opname}: scatter_dims_to_operand_dims {smap} needs index vectors of length "
                        f"{len(smap)}, got scatter_indices of shape {indices.shape}")
    _check_sorted_dims(opname, "update_window_dims", uwin, updates.ndim)
    _check_sorted_dims(opname, "inserted_window_dims", inserted, operand.ndim)
    _check_sorted_dims(opname, "operand_batching_dims", obatch, operand.ndim)
    window_dims = [d for d in range(operand.ndim) if d not in inserted and d not in obatch]
    scatter_dims = tuple(i for i in range(updates.ndim) if i not in uwin)
    if len(uwin) != len(window_dims) or tuple(updates.shape[i] for i in scatter_dims) != batch_shape:
        raise TypeError(f"{opname}: updates of shape {updates.shape} do not match scatter_indices "
                        f"{indices.shape} and update_window_dims {uwin} for an operand of shape {operand.shape}")
    if len(obatch) != len(ibatch):
        raise TypeError(f"{opname}: scatter_indices_batching_dims {ibatch} must pair with operand_batching_dims "
                        f"{obatch}")
    sizes = [1] * operand.ndim
    for d, u in zip(window_dims, uwin):
        sizes[d] = updates.shape[u]
        if sizes[d] > operand.shape[d]:
            raise TypeError(f"{opname}: an update window of size {sizes[d]} does not fit operand dimension {d} "
                            f"of size {operand.shape[d]}")
    if operand.size == 0 or updates.size == 0:
        return operand
    flat, valid = _flat_positions(operand.shape, {d: k for k, d in enumerate(smap)}, indices,
                                  updates.shape, scatter_dims, dict(zip(window_dims, uwin)),
                                  {d: ibatch[i] for i, d in enumerate(obatch)}, sizes,
                                  clip=mode is GatherScatterMode.CLIP)
    if valid is not None:  # windows not wholly in range go to one past the end: the scatter drops them
        flat = _lax.select(valid, flat, _lax.full(flat.shape, operand.size, flat.dtype))
    out = _lax._scatter(_lax.reshape(operand, (operand.size,)), _lax.reshape(flat, (flat.size,)),
                        _lax.reshape(updates, (updates.size,)), 0, op)
    return _lax.reshape(out, operand.shape)


def _scatter_op(name, op, doc):
    def fn(operand, scatter_indices, updates, dimension_numbers, *, indices_are_sorted=False,
           unique_indices=False, mode=None):
        if op == "sub":
            u = _lax._same_dtype_args("scatter", operand, updates)[1]
            return _scatter(name, operand, scatter_indices, _lax.neg(u), dimension_numbers, mode, "add")
        return _scatter(name, operand, scatter_indices, updates, dimension_numbers, mode, op)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"XLA's Scatter {doc}: each update window goes to the operand at its index vector's start; "
                  "windows not wholly in range are dropped (mode 'clip' clamps them instead).")
    return fn


scatter = _scatter_op("scatter", "set", "that overwrites (duplicate indices: one of the updates wins)")
scatter_add = _scatter_op("scatter_add", "add", "that adds")
scatter_sub = _scatter_op("scatter_sub", "sub", "that subtracts")
scatter_mul = _scatter_op("scatter_mul", "mul", "that multiplies")
scatter_min = _scatter_op("scatter_min", "min", "that takes the minimum")
scatter_max = _scatter_op("scatter_max", "max", "that takes the maximum")


def scatter_apply(operand, scatter_indices, func, dimension_numbers, *, update_shape=(), indices_are_sorted=False,
                  unique_indices=False, mode=None):
    """func applied to the operand's elements that scatter_indices select (as scatter with update windows of
    update_shape), once per time an element is selected, as XLA applies a scatter's combiner. func must be
    elementwise: it runs on whole arrays, masked to the elements still owed an application."""
    operand = _array(operand, "scatter_apply")
    hits_dtype = np.dtype(np.int32)
    zeros = _lax.full(operand.shape, 0, hits_dtype)
    ones = _lax.full(tuple(update_shape), 1, hits_dtype)
    hits = _scatter("scatter_apply", zeros, scatter_indices, ones, dimension_numbers, mode, "add")

    def more(state):
        return _lax.reduce_or(_lax.gt(state[1], _lax.full((), 0, hits_dtype)), tuple(range(operand.ndim)))

    def once(state):
        x, left = state
        due = _lax.gt(left, _lax.full((), 0, hits_dtype))
        return _lax.select(due, func(x), x), _lax.sub(left, _lax.convert_element_type(due, hits_dtype))

    return _lax.while_loop(more, once, (operand, hits))[0]


def index_take(src, idxs, axes):
    """src gathered at one index array per axis of `axes` (wrapped into range), the other axes kept."""
    src = _array(src, "index_take")
    axes = tuple(operator.index(a) for a in axes)
    idxs = [_array(i, "index_take") for i in idxs]
    if len(idxs) != len(axes):
        raise ValueError(f"index_take: got {len(idxs)} index arrays for {len(axes)} axes")
    cols = []
    for i, ax in zip(idxs, axes):
        n = _lax.full((), src.shape[ax], i.dtype)
        wrapped = _lax.rem(_lax.add(_lax.rem(i, n), n), n)
        cols.append(_lax.expand_dims(wrapped, (1,)))
    indices = _lax.concatenate(cols, 1)
    sizes = [1 if d in axes else n for d, n in enumerate(src.shape)]
    dn = GatherDimensionNumbers(offset_dims=tuple(range(1, src.ndim - len(axes) + 1)), collapsed_slice_dims=axes,
                                start_index_map=axes)
    return gather(src, indices, dn, sizes)


# ---------------------------------------------------------------------------------------------------------
# Sorting-based selection

def top_k(operand, k, *, axis=-1):
    """The k largest entries along `axis` (the last by default) in descending order, and their indices
    (int32); ties keep the lower index first, NaN counts as the largest."""
    operand = _array(operand, "top_k")
    if operand.dtype.kind == "c":  # as JAX: complex numbers have no order to rank by
        raise ValueError(f"top_k is not compatible with complex inputs (got {operand.dtype}); rank their real "
                         "parts or their magnitudes (abs) instead")
    k = _static_int(k, "top_k: k")
    if k < 0:
        raise ValueError(f"k argument to top_k must be nonnegative, got {k}")
    if operand.ndim == 0:
        raise TypeError("top_k: the operand must have at least one dimension")
    ax = _lax._axes(operand, (axis,), "top_k")[0]
    n = operand.shape[ax]
    if k > n:
        raise TypeError(f"top_k: k={k} is larger than the size {n} of axis {ax}")
    # ascending sort on (key, -index), then reversed: descending keys, lower index first on ties
    neg_iota = _lax.neg(_lax.broadcasted_iota(np.int32, operand.shape, ax))
    _, idx, vals = _lax.sort((_total_order_key(operand), neg_iota, operand), dimension=ax, num_keys=2)
    vals = _lax.slice_in_dim(_lax.rev(vals, (ax,)), 0, k, axis=ax)
    idx = _lax.neg(_lax.slice_in_dim(_lax.rev(idx, (ax,)), 0, k, axis=ax))
    # as JAX's abstract evaluation: the indices take the operand's weak type
    return vals, _lax.convert_element_type(idx, np.int32, bool(operand.weak_type))


def _total_order_key(x):
    """A signed integer key ranking floats as XLA's TopK does, by IEEE total order: -NaN < -inf <
    ... < -0.0 < +0.0 < ... < +inf < +NaN (bug, issue 32: kiln's top_k ranked every NaN first, JAX
    a -NaN last). Its bits with the magnitude bits of negatives flipped; integers are their own key."""
    if not dtypes.is_float_dtype(x.dtype):
        return x
    ikey = np.dtype(f"int{8 * np.dtype(x.dtype).itemsize}")
    bits = _lax.bitcast_convert_type(x, ikey)
    negative = _lax.shift_right_arithmetic(bits, _lax.full((), 8 * ikey.itemsize - 1, ikey))
    return _lax.bitwise_xor(bits, _lax.shift_right_logical(negative, _lax.full((), 1, ikey)))


def _approx_k(name, largest):
    def fn(operand, k, reduction_dimension=-1, recall_target=0.95, reduction_input_size_override=-1,
           aggregate_to_topk=True):
        operand = _array(operand, name)
        if not dtypes.is_float_dtype(operand.dtype):  # as JAX
            raise ValueError(f"{name}: operand must be a floating type, got {operand.dtype}")
        if largest:
            return top_k(operand, k, axis=reduction_dimension)
        vals, idx = top_k(_lax.neg(operand), k, axis=reduction_dimension)
        return _lax.neg(vals), idx
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"The k {'largest' if largest else 'smallest'} entries along reduction_dimension and their "
                  "indices. kiln computes them exactly (recall 1), as JAX does on CPU.")
    return fn


approx_max_k = _approx_k("approx_max_k", True)
approx_min_k = _approx_k("approx_min_k", False)


def _wrap_index(index, size):
    """A scalar index with negative values counted from the end (JAX's allow_negative_indices)."""
    if not isinstance(index, Array):
        i = operator.index(index)
        return i + size if i < 0 else i
    if index.dtype.kind == "u":
        return index
    return _lax.select(_lax.lt(index, _lax.full((), 0, index.dtype)),
                       _lax.add(index, _lax.full((), size, index.dtype)), index)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True, *, allow_negative_indices=True):
    """operand[..., index, ...] along `axis` at a traced index (clamped into range; negative counts
    from the end), keeping the axis with size 1 when keepdims."""
    operand = _array(operand, "dynamic_index_in_dim")
    ax = _lax._axes(operand, (axis,), "dynamic_index_in_dim")[0]
    if allow_negative_indices:
        index = _wrap_index(index, operand.shape[ax])
    out = _lax.dynamic_slice_in_dim(operand, index, 1, ax)
    return out if keepdims else _lax.squeeze(out, (ax,))


def dynamic_update_index_in_dim(operand, update, index, axis, *, allow_negative_indices=True):
    """operand with its slice `index` along `axis` replaced by update (which may lack that axis)."""
    operand = _array(operand, "dynamic_update_index_in_dim")
    update = _lax._to_array(update, operand, "dynamic_update_index_in_dim")
    ax = _lax._axes(operand, (axis,), "dynamic_update_index_in_dim")[0]
    if update.ndim == operand.ndim - 1:
        update = _lax.expand_dims(update, (ax,))
    if update.ndim != operand.ndim:
        raise TypeError(f"dynamic_update_index_in_dim: update of shape {update.shape} does not fit an operand "
                        f"of shape {operand.shape}")
    if allow_negative_indices:
        index = _wrap_index(index, operand.shape[ax])
    return _lax.dynamic_update_slice_in_dim(operand, update, index, ax)


def cumlogsumexp(operand, axis=0, reverse=False):
    """log(cumsum(exp(operand))) along `axis`, computed stably (shifted by the axis maximum)."""
    operand = _array(operand, "cumlogsumexp")
    if not dtypes.issubdtype(operand.dtype, np.inexact):
        raise TypeError(f"cumlogsumexp: operand must be floating point, got {operand.dtype}")
    ax = _lax._axes(operand, (axis,), "cumlogsumexp")[0]
    # jnp.logaddexp as the combine, as JAX's: its derivative is the softmax weights exactly (a
    # derivative taken through max + log1p(exp(-|a - b|)) gives a tie, such as -0.0 and 0.0, to one
    # side only; fuzzer seed 104542)
    from kiln._src.numpy.ufuncs import logaddexp
    return _lax.associative_scan(logaddexp, operand, reverse=reverse, axis=ax)


# ---------------------------------------------------------------------------------------------------------
# Bit-level ops

def _same_float(opname, x, y):
    x, y = _lax._same_dtype_args(opname, x, y)
    if not dtypes.is_float_dtype(x.dtype):
        raise TypeError(f"{opname}: operands must share a floating dtype, got {x.dtype} and {y.dtype}")
    return x, y


def _uint_of(dt):
    return np.dtype(f"uint{np.dtype(dt).itemsize * 8}")


def _uconst(value, ut):
    """A scalar of unsigned dtype ut (Python ints of 2**63 and up do not pass through int64)."""
    return core.asarray(np.array(value, dtype=ut))


def nextafter(x1, x2):
    """The next representable value after x1 towards x2 (x2 itself where they are equal; NaN if
    either is NaN)."""
    x1, x2 = _same_float("nextafter", x1, x2)
    ut = _uint_of(x1.dtype)
    bits = _lax.bitcast_convert_type(x1, ut)
    one = _lax.full((), 1, ut)
    away = _lax.eq(_lax.gt(x2, x1), _lax.gt(x1, _lax.full((), 0, x1.dtype)))  # |x1| grows
    stepped = _lax.select(away, _lax.add(bits, one), _lax.sub(bits, one))
    sign = _lax.and_(_lax.bitcast_convert_type(x2, ut), _uconst(1 << (ut.itemsize * 8 - 1), ut))
    from_zero = _lax.or_(sign, one)  # the smallest subnormal with x2's sign
    zero = _lax.eq(x1, _lax.full((), 0, x1.dtype))
    out = _lax.bitcast_convert_type(_lax.select(zero, from_zero, stepped), x1.dtype)
    nan = _lax.or_(_lax.ne(x1, x1), _lax.ne(x2, x2))
    out = _lax.select(_lax.eq(x1, x2), x2, out)
    out = _lax.select(nan, _lax.full((), np.nan, x1.dtype), out)  # the quiet NaN NumPy gives, on either backend
    # weak when both operands are, as JAX's nextafter primitive (the bit-level steps above are strong)
    return _lax.convert_element_type(out, out.dtype, weak_type=x1.weak_type and x2.weak_type)


def _int_operand(opname, x):
    x = _array(x, opname)
    if x.dtype.kind not in "iu":
        raise TypeError(f"{opname}: operand must have an integer dtype, got {x.dtype}")
    return x


def _popcount_bits(v):
    """Number of set bits of each element of an unsigned array (SWAR: pairs, nibbles, bytes, then a sum)."""
    ut = v.dtype
    w = ut.itemsize * 8

    def c(value):
        return _uconst(value, ut)

    def rep(byte):
        return int(byte * ut.itemsize, 16)

    shr = _lax.shift_right_logical
    v = _lax.sub(v, _lax.and_(shr(v, c(1)), c(rep("55"))))
    v = _lax.add(_lax.and_(v, c(rep("33"))), _lax.and_(shr(v, c(2)), c(rep("33"))))
    v = _lax.and_(_lax.add(v, shr(v, c(4))), c(rep("0f")))
    if w > 8:
        v = shr(_lax.mul(v, c(rep("01"))), c(w - 8))
    return v


def _keep_weak(x, out):
    """out with x's weak type, as JAX's unary bit-counting primitives keep it."""
    return _lax.convert_element_type(out, out.dtype, True) if x.weak_type and not out.weak_type else out


def population_count(x):
    """The number of set bits of each element (of its two's-complement bits), in x's dtype."""
    x = _int_operand("population_count", x)
    ut = _uint_of(x.dtype)
    return _keep_weak(x, _lax.bitcast_convert_type(_popcount_bits(_lax.bitcast_convert_type(x, ut)), x.dtype)
                      if x.dtype != ut else _popcount_bits(x))


def clz(x):
    """The number of leading zero bits of each element, in x's dtype."""
    x = _int_operand("clz", x)
    ut = _uint_of(x.dtype)
    v = _lax.bitcast_convert_type(x, ut) if x.dtype != ut else x
    shift = 1
    while shift < ut.itemsize * 8:  # smear the highest set bit into every lower one
        v = _lax.or_(v, _lax.shift_right_logical(v, _lax.full((), shift, ut)))
        shift *= 2
    n = _lax.sub(_lax.full((), ut.itemsize * 8, ut), _popcount_bits(v))
    return _keep_weak(x, _lax.bitcast_convert_type(n, x.dtype) if x.dtype != ut else n)


def mulhi(x, y, /):
    """The high half of the double-width product x * y (signed or unsigned as the dtype)."""
    x, y = _lax._same_dtype_args("mulhi", x, y)
    if x.dtype.kind not in "iu":
        raise TypeError(f"mulhi: operands must share an integer dtype, got {x.dtype} and {y.dtype}")
    ut = _uint_of(x.dtype)
    h = ut.itemsize * 4
    a = _lax.bitcast_convert_type(x, ut) if x.dtype != ut else x
    b = _lax.bitcast_convert_type(y, ut) if y.dtype != ut else y
    mask, sh = _lax.full((), (1 << h) - 1, ut), _lax.full((), h, ut)
    shr = _lax.shift_right_logical
    a_lo, a_hi, b_lo, b_hi = _lax.and_(a, mask), shr(a, sh), _lax.and_(b, mask), shr(b, sh)
    lo_lo = _lax.mul(a_lo, b_lo)
    mid = _lax.add(_lax.mul(a_hi, b_lo), shr(lo_lo, sh))
    mid2 = _lax.add(_lax.mul(a_lo, b_hi), _lax.and_(mid, mask))
    hi = _lax.add(_lax.add(_lax.mul(a_hi, b_hi), shr(mid, sh)), shr(mid2, sh))
    if x.dtype == ut:
        return hi
    # signed: the unsigned product of the two's-complement bits, less b where a < 0 and a where b < 0
    zero = _lax.full(hi.shape, 0, ut)
    hi = _lax.sub(hi, _lax.select(_lax.lt(_bc(x, hi), _lax.full((), 0, x.dtype)), _bc(b, hi), zero))
    hi = _lax.sub(hi, _lax.select(_lax.lt(_bc(y, hi), _lax.full((), 0, y.dtype)), _bc(a, hi), zero))
    return _lax.bitcast_convert_type(hi, x.dtype)


def _bc(v, like):
    return v if v.shape == like.shape else _lax.broadcast_in_dim(v, like.shape, tuple(range(like.ndim - v.ndim,
                                                                                           like.ndim)))


def reduce_precision(operand, exponent_bits, mantissa_bits):
    """operand rounded (to nearest, ties to even) to a float of exponent_bits and mantissa_bits, kept in
    its dtype: values past the smaller range become +-inf, values under its normal range +-0 (as XLA)."""
    operand = _array(operand, "reduce_precision")
    eb = _static_int(exponent_bits, "reduce_precision: exponent_bits")
    mb = _static_int(mantissa_bits, "reduce_precision: mantissa_bits")
    if not dtypes.is_float_dtype(operand.dtype):
        raise TypeError(f"reduce_precision: operand must be floating point, got {operand.dtype}")
    if eb < 1 or mb < 0:
        raise ValueError(f"reduce_precision: needs exponent_bits >= 1 and mantissa_bits >= 0, got {eb}, {mb}")
    global _reduce_precision
    if _reduce_precision is None:
        from kiln._src.custom import custom_jvp
        _reduce_precision = custom_jvp(_reduce_precision_value, nondiff_argnums=(1, 2))
        _reduce_precision.defjvp(_reduce_precision_jvp)
    out = _reduce_precision(operand, eb, mb)
    if operand.weak_type and not out.weak_type:  # (keeps the operand's weak type, as JAX's)
        from kiln import lax
        out = lax.convert_element_type(out, out.dtype, True)
    return out


def _reduce_precision_jvp(eb, mb, primals, tangents):
    """JAX's rule: reduce_precision is linear, the tangent (and so the cotangent) is rounded the same way
    (bug, issue 32: the bit-level rounding gave a zero gradient). The rounding must stay transposable, so
    it is a round trip through the float format of (eb, mb) when there is one (float16, bfloat16,
    float32); formats of no dtype pass the tangent unrounded, and so do values under the format's normal
    range (the round trip keeps its subnormals, reduce_precision flushes them)."""
    (x,), (t,) = primals, tangents
    info = dtypes.finfo(x.dtype)
    if eb < int(info.nexp) or mb < int(info.nmant):
        for narrow in (np.float16, dtypes.bfloat16, np.float32):
            ni = dtypes.finfo(narrow)
            if (int(ni.nexp), int(ni.nmant)) == (eb, mb):
                t = _lax.convert_element_type(_lax.convert_element_type(t, narrow), x.dtype)
                break
    return _reduce_precision(x, eb, mb), t


_reduce_precision = None  # made on first use (custom_jvp lives in kiln._src.custom, imported lazily)


def _reduce_precision_value(operand, eb, mb):
    info = dtypes.finfo(operand.dtype)
    nmant, nexp = int(info.nmant), int(info.nexp)
    ut = _uint_of(operand.dtype)

    def c(v):
        return _uconst(v, ut)

    bits = _lax.bitcast_convert_type(operand, ut)
    if mb < nmant:
        drop = nmant - mb
        last = _lax.and_(_lax.shift_right_logical(bits, c(drop)), c(1))
        bits = _lax.add(bits, _lax.add(last, c((1 << (drop - 1)) - 1)))
        bits = _lax.and_(bits, c(((1 << (ut.itemsize * 8)) - 1) ^ ((1 << drop) - 1)))
    if eb < nexp:
        sign_mask = 1 << (ut.itemsize * 8 - 1)
        exp_mask = ((1 << nexp) - 1) << nmant
        bias = (1 << (nexp - 1)) - 1
        new_max = (1 << (eb - 1)) - 1
        exponent = _lax.and_(bits, c(exp_mask))
        sign = _lax.and_(bits, c(sign_mask))
        over = _lax.gt(exponent, c((bias + new_max) << nmant))
        under = _lax.le(exponent, c((bias - new_max) << nmant))
        bits = _lax.select(over, _lax.or_(sign, c(exp_mask)), bits)
        bits = _lax.select(under, sign, bits)
    out = _lax.bitcast_convert_type(bits, operand.dtype)
    return _lax.select(_lax.ne(operand, operand), operand, out) if mb < nmant or eb < nexp else out


def reduce_xor(operand, axes):
    """Bitwise xor of operand over `axes` (logical xor for bool)."""
    operand = _array(operand, "reduce_xor")
    if operand.dtype.kind not in "biu":
        raise TypeError(f"reduce_xor: operand must be bool or integer, got {operand.dtype}")
    return _lax.reduce(operand, _lax.full((), 0, operand.dtype), _lax.xor, tuple(axes))


# ---------------------------------------------------------------------------------------------------------
# Special functions: jax.lax's names for kiln.scipy.special's functions (same dtype rules as lax: the
# operands share one floating dtype).

def _special(name, scipy_name):
    from kiln.scipy import special
    fn = getattr(special, scipy_name, None)
    if fn is None:
        raise NotImplementedError(f"lax.{name}: needs kiln.scipy.special.{scipy_name}, which this kiln lacks")
    return fn


def _float_args(opname, *xs):
    """Operands of a special function: one floating dtype, lax's rule (JAX names betainc's
    primitive regularized_incomplete_beta)."""
    xs = _lax._same_dtype_args("regularized_incomplete_beta" if opname == "betainc" else opname, *xs)
    if not dtypes.is_float_dtype(xs[0].dtype):
        raise TypeError(f"{opname}: operands must share a floating dtype, got {[str(x.dtype) for x in xs]}")
    return xs


def igamma(a, x):
    """The regularized lower incomplete gamma function P(a, x)."""
    return _special("igamma", "gammainc")(*_float_args("igamma", a, x))


def igammac(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    return _special("igammac", "gammaincc")(*_float_args("igammac", a, x))


def igamma_grad_a(a, x):
    """d/da of the regularized lower incomplete gamma function P(a, x)."""
    from kiln._src.ad import jvp
    a, x = _float_args("igamma_grad_a", a, x)
    fn = _special("igamma_grad_a", "gammainc")
    return jvp(lambda s: fn(s, x), (a,), (_lax.full_like(a, 1),))[1]


def random_gamma_grad(a, x, *, dtype=None):
    """d x / d a of a Gamma(a, 1) sample x held at a fixed uniform quantile: -(dP/da) / (dP/dx)."""
    a, x = _float_args("random_gamma_grad", a, x)
    log_density = _lax.sub(_lax.sub(_lax.mul(_lax.sub(a, _lax.full_like(a, 1)), _lax.log(x)), x), _lax.lgamma(a))
    return _lax.neg(_lax.div(igamma_grad_a(a, x), _lax.exp(log_density)))


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    return _special("betainc", "betainc")(*_float_args("betainc", a, b, x))


def polygamma(m, x):
    """The m-th derivative of digamma at x (m a non-negative integer, given as an array of x's dtype)."""
    m, x = _float_args("polygamma", m, x)
    order = np.asarray(core.concrete_or_error(m, "lax.polygamma: the order m (kiln needs it known)"))
    if order.ndim and not np.all(order == order.flat[0]):
        raise NotImplementedError("lax.polygamma: orders that differ per element are not supported by kiln; "
                                  "call it once per order")
    return _special("polygamma", "polygamma")(int(order.flat[0]), x)


def zeta(x, q):
    """The Hurwitz zeta function sum_k (k + q) ** -x."""
    return _special("zeta", "zeta")(*_float_args("zeta", x, q))


def bessel_i0e(x):
    """The exponentially scaled modified Bessel function of order 0: exp(-|x|) I0(x)."""
    return _special("bessel_i0e", "i0e")(*_float_args("bessel_i0e", x))


def bessel_i1e(x):
    """The exponentially scaled modified Bessel function of order 1: exp(-|x|) I1(x)."""
    return _special("bessel_i1e", "i1e")(*_float_args("bessel_i1e", x))


# ---------------------------------------------------------------------------------------------------------
# Shapes and structure

def broadcast_shapes(*shapes):
    """The NumPy broadcast of several shapes (ValueError when they do not broadcast)."""
    from kiln._src.numpy.util import broadcast_shapes as _bs
    return _bs(*(tuple(operator.index(d) for d in s) for s in shapes), opname="broadcast_shapes")


def broadcast_to_rank(x, rank):
    """x with leading size-1 axes added up to `rank`."""
    x = _array(x, "broadcast_to_rank")
    return x if x.ndim == rank else _lax.broadcast(x, (1,) * (rank - x.ndim))


def broadcast_like(arr, like_arr):
    """arr broadcast (NumPy rules) to the shape of like_arr."""
    from kiln._src.numpy.util import broadcast_to_shape
    return broadcast_to_shape(_array(arr, "broadcast_like"), np.shape(like_arr), "broadcast_like")


def collapse(operand, start_dimension, stop_dimension=None):
    """operand with dimensions [start_dimension, stop_dimension) merged into one."""
    operand = _array(operand, "collapse")
    lo, hi, _ = builtins.slice(start_dimension, stop_dimension).indices(operand.ndim)
    if hi < lo:
        raise ValueError(f"Invalid dimension range passed to collapse: {operand.shape}[{start_dimension}:"
                         f"{stop_dimension}]")
    shape = operand.shape[:lo] + (math.prod(operand.shape[lo:hi]),) + operand.shape[hi:]
    return _lax.reshape(operand, shape)


def tile(operand, reps):
    """operand repeated reps[i] times along each dimension i (len(reps) == operand.ndim)."""
    operand = _array(operand, "tile")
    reps = tuple(operator.index(r) for r in reps)
    if len(reps) != operand.ndim:
        raise ValueError(f"tile: reps {reps} must have one entry per dimension of {operand.shape}")
    shape = tuple(x for pair in zip(reps, operand.shape) for x in pair)
    b = _lax.broadcast_in_dim(operand, shape, tuple(range(1, 2 * operand.ndim, 2)))
    return _lax.reshape(b, tuple(r * n for r, n in zip(reps, operand.shape)))


def split(operand, sizes, axis=0):
    """operand cut along `axis` into consecutive pieces of `sizes` (which must add up to its length)."""
    operand = _array(operand, "split")
    ax = _lax._axes(operand, (axis,), "split")[0]
    sizes = tuple(operator.index(s) for s in sizes)
    if any(s < 0 for s in sizes) or sum(sizes) != operand.shape[ax]:
        raise ValueError(f"split: sizes {sizes} must be non-negative and add up to {operand.shape[ax]}, the "
                         f"size of axis {ax}")
    starts = np.cumsum((0,) + sizes)
    return [_lax.slice_in_dim(operand, int(s), int(s) + n, axis=ax) for s, n in zip(starts, sizes)]


def stack(operands, axis=0):
    """The operands (one shape and dtype) stacked along a new axis."""
    ops = _lax._same_dtype_args("stack", *operands) if len(operands) > 1 else _lax._args("stack", *operands)
    if not ops:
        raise ValueError("stack: needs at least one operand")
    ax = operator.index(axis) % (ops[0].ndim + 1)
    return _lax.concatenate([_lax.expand_dims(x, (ax,)) for x in ops], ax)


def unstack(x, axis=0):
    """The slices of x along `axis`, as a tuple."""
    x = _array(x, "unstack")
    ax = _lax._axes(x, (axis,), "unstack")[0]
    return tuple(_lax.index_in_dim(x, i, ax, keepdims=False) for i in range(x.shape[ax]))


def empty(shape, dtype, *, out_sharding=None):
    """An array of shape and dtype whose contents are unspecified (kiln gives zeros)."""
    return _lax.full(shape, 0, dtype)


def dtype(x, *, canonicalize=False):
    """The dtype of a value, array or dtype-like; all but kiln arrays canonicalized (float64 is float32
    unless x64 is on), as jax.lax.dtype."""
    if isinstance(x, Array):
        return x.dtype
    if isinstance(x, (builtins.bool, builtins.int, builtins.float, builtins.complex)) and \
            not isinstance(x, np.generic):
        return np.dtype(dtypes.dtype_of(x))
    dt = x.dtype if isinstance(x, (np.ndarray, np.generic)) else x
    try:
        dt = np.dtype(dt)
    except TypeError:
        dt = np.dtype(dt.dtype)  # kiln's scalar types
    return np.dtype(dtypes.canonicalize_dtype(dt))


def shape_as_value(shape):
    """A shape as a 1-D integer NumPy array."""
    return np.asarray(tuple(shape), dtype=np.int32 if all(d < 2 ** 31 for d in shape) else np.int64)


def stage(x, /):
    """The identity that lifts x (a NumPy value or Python scalar) into the current trace as an array."""
    return core.asarray(x) if not isinstance(x, Array) else x


def dce_sink(val, *, prevent_mlir_dce=False):
    """Nothing: kiln keeps what a program returns and drops the rest (no value to sink)."""
    return None


def composite(decomposition, name, version=0):
    """A function that calls decomposition (kiln has no composite ops: the decomposition is the op)."""
    import functools

    @functools.wraps(decomposition)
    def call(*args, **kwargs):
        return decomposition(*args, **kwargs)
    return call


def platform_dependent(*args, default=None, **per_platform):
    """The branch for the platform the default backend runs on ('cpu', 'cuda'/'gpu'), else default."""
    from kiln._src.api import default_backend
    platform = default_backend()
    names = {"gpu": ("cuda", "rocm", "gpu"), "cuda": ("cuda", "gpu")}.get(platform, (platform,))
    for n in names:
        if n in per_platform:
            return per_platform[n](*args)
    if default is None:
        raise NotImplementedError(f"platform_dependent: no branch for platform {platform!r} and no default")
    return default(*args)


def with_sharding_constraint(x, shardings):
    """On concrete arrays, x placed by shardings (device_put). Inside traced code x is unchanged
    (kiln propagates no shardings through a program yet), and a jit-compiled function's outputs
    that are constrained values come back placed as the constraint says."""
    from kiln._src import core
    if core.tracing():
        from kiln._src import tracing as tracing_state, tree_util
        from kiln._src.api import leaf_placements
        if tracing_state.sharding_constraints:
            top = tracing_state.sharding_constraints[-1]
            for v, s in zip(tree_util.tree_leaves(x), leaf_placements(x, shardings, "with_sharding_constraint")):
                if isinstance(v, core.Tracer) and s is not None:
                    top[id(v)] = (v, s)
        return x
    from kiln._src.api import device_put
    return device_put(x, shardings)


from kiln._src.spmd import (psum, pmean, pmax, pmin, all_gather, psum_scatter, ppermute,  # noqa: E402,F401
                            all_to_all, axis_index, axis_size, pbroadcast, pvary, pcast, pshuffle, pswapaxes)


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *, axis_name,
                      axis_index_groups=None):
    raise NotImplementedError("ragged_all_to_all is not supported yet by kiln: pad the chunks to one size and use "
                              "lax.all_to_all")


# ---------------------------------------------------------------------------------------------------------
# Types, tokens and RNG that kiln has no use for, kept for the API

DotDimensionNumbers = tuple  # ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))
PrecisionLike = object  # None, a Precision, a string or a pair of them
ConvGeneralDilatedDimensionNumbers = object  # None, a ConvDimensionNumbers or a triple of layout strings


class RandomAlgorithm(enum.IntEnum):
    """rng_bit_generator's algorithm."""
    RNG_DEFAULT = 0
    RNG_THREE_FRY = 1
    RNG_PHILOX = 2

    def __str__(self):
        return self.name


def rng_uniform(a, b, shape):
    raise NotImplementedError("lax.rng_uniform: kiln has no stateful random number generator; use "
                              "kiln.random.uniform with an explicit key")


def rng_bit_generator(key, shape, dtype=np.uint32, algorithm=RandomAlgorithm.RNG_DEFAULT, *, out_sharding=None):
    """(new key, random bits of shape and dtype) from a uint32 key, by kiln.random's threefry: the
    bits are algorithm-defined, as in XLA (not those XLA would give)."""
    from kiln import random
    key = _array(key, "rng_bit_generator")
    dt = np.dtype(dtype)
    if dt not in (np.uint8, np.uint16, np.uint32, np.uint64):
        raise TypeError(f"rng_bit_generator: unsupported dtype {dt}")
    if key.dtype != np.uint32 or key.ndim != 1 or key.shape[0] < 2:
        raise TypeError(f"rng_bit_generator: key must be a uint32 vector of length >= 2, got {key.dtype}"
                        f"{list(key.shape)}")
    k_next, k_bits = random.split(random.wrap_key_data(_lax.slice_in_dim(key, 0, 2)))
    bits = random.bits(k_bits, tuple(shape), dt)
    new_key = _lax.concatenate([random.key_data(k_next), _lax.slice_in_dim(key, 2, key.shape[0])], 0)
    return new_key, bits


class _Token:
    """The value of create_token/after_all: kiln orders effects itself, so tokens carry nothing."""
    __slots__ = ()

    def __repr__(self):
        return "Token()"


def create_token(_=None):
    return _Token()


def after_all(*operands):
    return _Token()


# ---------------------------------------------------------------------------------------------------------
# Convolution and window shape helpers

def _conv_dims(lhs_shape, rhs_shape, dimension_numbers):
    from kiln.lax.conv import conv_dimension_numbers
    return conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)


def conv_general_permutations(dimension_numbers):
    """(lhs, rhs, out) permutations taking layouts such as ('NHWC', 'HWIO', 'NHWC') to (N, C, spatial...),
    (O, I, spatial...), (N, C, spatial...), spatial dims in the rhs spec's order."""
    specs = tuple(dimension_numbers)
    pairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for i, (spec, (c0, c1)) in enumerate(zip(specs, pairs)):
        if spec.count(c0) != 1 or spec.count(c1) != 1 or len(set(spec)) != len(spec):
            raise TypeError(f"convolution dimension_numbers[{i}] must contain the characters '{c0}' and '{c1}' "
                            f"exactly once and no duplicates, got {spec}.")
    if not set(specs[0]) - {"N", "C"} == set(specs[1]) - {"O", "I"} == set(specs[2]) - {"N", "C"}:
        raise TypeError(f"convolution dimension_numbers elements must each have the same set of spatial "
                        f"characters, got {specs}.")
    rhs_spec = specs[1]

    def perm(spec, pair):
        spatial = sorted((i for i, ch in enumerate(spec) if ch not in pair), key=lambda i: rhs_spec.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1])) + tuple(spatial)

    return tuple(perm(spec, pair) for spec, pair in zip(specs, pairs))


def _stride_dim(d, window, stride):
    return 0 if d < window else (d - window) // stride + 1


def conv_shape_tuple(lhs_shape, rhs_shape, strides, pads, batch_group_count=1):
    """The output shape of a convolution of lhs (N, C, spatial...) with rhs (O, I, spatial...); pads a
    list of (low, high) pairs or 'SAME'/'VALID'/'SAME_LOWER'."""
    from kiln.lax.conv import padtype_to_pads
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"Wrong number of explicit pads for convolution: expected {len(lhs_shape) - 2}, got "
                        f"{len(pads)}.")
    padded = [n + lo + hi for n, (lo, hi) in zip(lhs_shape[2:], pads)]
    if any(p < 0 for p in padded):
        raise ValueError(f"Negative padding is larger than the size of the corresponding dimension: got "
                         f"padding={pads} for lhs_shape[2:]={tuple(lhs_shape[2:])}")
    spatial = tuple(_stride_dim(p, k, s) for p, k, s in zip(padded, rhs_shape[2:], strides))
    return (lhs_shape[0] // batch_group_count, rhs_shape[0]) + spatial


def _in_layout(shape, perm):
    return tuple(shape[i] for i in perm)


def _out_layout(shape_t, perm):
    return tuple(int(shape_t[i]) for i in np.argsort(perm))


def conv_general_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """The output shape of conv_general_dilated (no dilation) with layouts given as strings."""
    lp, rp, op = conv_general_permutations(dimension_numbers)
    out = conv_shape_tuple(_in_layout(lhs_shape, lp), _in_layout(rhs_shape, rp), window_strides, padding)
    return _out_layout(out, op)


def _conv_transpose_padding(k, s, padding):
    if padding == "SAME":
        total, low = k + s - 2, (k - 1 if s > k - 1 else -(-(k + s - 2) // 2))
    elif padding == "VALID":
        total, low = k + s - 2 + builtins.max(k - s, 0), k - 1
    elif isinstance(padding, tuple):
        pads = tuple(k - p - 1 for p in padding)
        total, low = sum(pads), pads[0]
    else:
        raise ValueError(f"Invalid padding mode: {padding}")
    return low, total - low


def conv_transpose_shape_tuple(lhs_shape, rhs_shape, window_strides, padding, dimension_numbers):
    """The output shape of conv_transpose with layouts given as strings."""
    lp, rp, op = conv_general_permutations(dimension_numbers)
    lhs_t, rhs_t = _in_layout(lhs_shape, lp), _in_layout(rhs_shape, rp)
    if isinstance(padding, str):
        padding = [_conv_transpose_padding(k, s, padding) for k, s in zip(rhs_t[2:], window_strides)]
    spatial = tuple((n - 1) * s - k + 2 + sum(p) for n, k, s, p in zip(lhs_t[2:], rhs_t[2:], window_strides, padding))
    return _out_layout((lhs_t[0], rhs_t[0]) + spatial, op)


def reduce_window_shape_tuple(operand_shape, window_dimensions, window_strides, padding, base_dilation=None,
                              window_dilation=None):
    """The output shape of reduce_window with these windows, strides, (low, high) pads and dilations."""
    def dilate(shape, dil):
        return [0 if d == 0 else 1 + r * (d - 1) for d, r in zip(shape, dil)]
    shape = dilate(operand_shape, base_dilation) if base_dilation is not None else list(operand_shape)
    window = dilate(window_dimensions, window_dilation) if window_dilation is not None else list(window_dimensions)
    return tuple(_stride_dim(d + lo + hi, w, s) for d, (lo, hi), w, s in zip(shape, padding, window, window_strides))


def conv_general_dilated_local(lhs, rhs, window_strides, padding, filter_shape, lhs_dilation=None,
                               rhs_dilation=None, dimension_numbers=None, precision=None):
    """A locally connected convolution: like conv_general_dilated, but with a separate filter at every
    output position; rhs holds them in its layout, its input-feature axis the (input feature x window)
    patch and its spatial axes the output positions."""
    from kiln.lax.conv import conv_general_dilated_patches
    lhs = _array(lhs, "conv_general_dilated_local")
    rhs = _array(rhs, "conv_general_dilated_local")
    c_precision = precision[0] if isinstance(precision, (tuple, list)) else precision
    patches = conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation, rhs_dilation,
                                           dimension_numbers, precision=c_precision)
    dn = _conv_dims(lhs.shape, rhs.shape, dimension_numbers)
    lhs_spec, rhs_spec, out_spec = dn
    # patches are in the output layout: move batch, features, spatial to the front
    p = _lax.transpose(patches, (out_spec[0], out_spec[1]) + tuple(out_spec[2:]))
    r = _lax.transpose(rhs, (rhs_spec[0], rhs_spec[1]) + tuple(rhs_spec[2:]))
    s = p.ndim - 2
    # out[n, o, x...] = sum_i p[n, i, x...] * r[o, i, x...]
    out = _lax.dot_general(p, r, (((1,), (1,)), (tuple(range(2, 2 + s)), tuple(range(2, 2 + s)))),
                           precision=c_precision)
    out = _lax.transpose(out, tuple(range(s, s + 2)) + tuple(range(s)))  # (x..., n, o) -> (n, o, x...)
    inv = np.argsort((out_spec[0], out_spec[1]) + tuple(out_spec[2:]))
    return _lax.transpose(out, tuple(int(i) for i in inv))


# ---------------------------------------------------------------------------------------------------------
# Ragged dot

class RaggedDotDimensionNumbers(NamedTuple):
    """ragged_dot_general's dimensions: dot_general's numbers, the lhs ragged dims, the rhs group dims."""
    dot_dimension_numbers: tuple
    lhs_ragged_dimensions: tuple
    rhs_group_dimensions: tuple


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None, group_offset=None,
               out_sharding=None):
    """lhs [m, k] times the group matrices rhs [g, k, n]: rows of lhs in consecutive groups of
    group_sizes [g] use their group's matrix; rows past sum(group_sizes) give zeros."""
    if group_offset is not None:
        raise NotImplementedError("ragged_dot: group_offset is not supported by kiln")
    lhs, rhs = _lax._args("ragged_dot", lhs, rhs)
    gs = _array(group_sizes, "ragged_dot")
    if lhs.ndim != 2 or rhs.ndim != 3 or gs.ndim != 1 or lhs.shape[1] != rhs.shape[1] or \
            gs.shape[0] != rhs.shape[0]:
        raise TypeError(f"ragged_dot: needs lhs [m, k], rhs [g, k, n], group_sizes [g], got {lhs.shape}, "
                        f"{rhs.shape}, {gs.shape}")
    m, g = lhs.shape[0], rhs.shape[0]
    ends = _lax.cumsum(gs, 0)
    row = _lax.broadcasted_iota(gs.dtype, (g, m), 1)
    starts = _lax.sub(ends, gs)
    member = _lax.and_(_lax.ge(row, _lax.broadcast_in_dim(starts, (g, m), (0,))),
                       _lax.lt(row, _lax.broadcast_in_dim(ends, (g, m), (0,))))  # [g, m]
    per_group = _lax.dot_general(lhs, rhs, (((1,), (1,)), ((), ())), precision,
                                 preferred_element_type)  # [m, g, n]
    mask = _lax.convert_element_type(_lax.transpose(member, (1, 0)), per_group.dtype)
    return _lax.reduce_sum(_lax.mul(per_group, _lax.broadcast_in_dim(mask, per_group.shape, (0, 1))), (1,))


def ragged_dot_general(lhs, rhs, group_sizes, ragged_dot_dimension_numbers, precision=None,
                       preferred_element_type=None, group_offset=None, out_sharding=None):
    """ragged_dot with general dimension numbers; kiln supports the numbers of ragged_dot itself
    (lhs [m, k] ragged along m, rhs [g, k, n] grouped along g)."""
    rd = ragged_dot_dimension_numbers
    basic = (tuple(map(tuple, rd.dot_dimension_numbers[0])), tuple(map(tuple, rd.dot_dimension_numbers[1])),
             tuple(rd.lhs_ragged_dimensions), tuple(rd.rhs_group_dimensions))
    if basic != (((1,), (1,)), ((), ()), (0,), (0,)):
        raise NotImplementedError(f"ragged_dot_general: kiln supports only ragged_dot's dimension numbers, got {rd}")
    return ragged_dot(lhs, rhs, group_sizes, precision, preferred_element_type, group_offset)


# ---------------------------------------------------------------------------------------------------------
# Implicitly differentiated solvers

def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
    """solve(f, initial_guess), a root x of f, differentiated implicitly: dx = tangent_solve(g, -df), g
    the linear map v -> f'(x) v and df the change of f through what it closes over (the initial guess
    gets no gradient; aux outputs none). Reverse mode transposes tangent_solve, which must be linear."""
    from kiln._src import tree_util
    from kiln._src.ad import jvp
    from kiln._src.custom import custom_jvp
    from kiln._src.extras import closure_convert

    f_conv, consts = closure_convert(f, initial_guess)

    def run(consts_, x0):
        return solve(lambda x: f_conv(x, *consts_), x0)

    solved = custom_jvp(run)

    @solved.defjvp
    def _(primals, tangents):
        consts_, x0 = primals
        out = run(consts_, x0)
        root = out[0] if has_aux else out
        _, df = jvp(lambda c: f_conv(root, *c), (tuple(consts_),), (tuple(tangents[0]),))
        dx = tangent_solve(lambda v: jvp(lambda x: f_conv(x, *consts_), (root,), (v,))[1],
                           tree_util.tree_map(lambda t: -t, df))
        return out, ((dx, tree_util.tree_map(lambda a: a * 0, out[1])) if has_aux else dx)

    return solved(tuple(consts), initial_guess)


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False, has_aux=False):
    """solve(matvec, b), the x with matvec(x) = b, differentiated implicitly (through b and what matvec
    closes over): dx = solve(matvec, db - dmatvec(x)). Reverse mode transposes solve itself, which must
    then be linear and transposable (transpose_solve and symmetric are not used)."""
    from kiln._src import tree_util
    from kiln._src.ad import jvp
    from kiln._src.custom import custom_jvp
    from kiln._src.extras import closure_convert

    mv_conv, consts = closure_convert(matvec, b)

    def run(consts_, b_):
        return solve(lambda x: mv_conv(x, *consts_), b_)

    solved = custom_jvp(run)

    @solved.defjvp
    def _(primals, tangents):
        consts_, b_ = primals
        dconsts, db = tangents
        out = run(consts_, b_)
        x = out[0] if has_aux else out
        _, dmv = jvp(lambda c: mv_conv(x, *c), (tuple(consts_),), (tuple(dconsts),))
        rhs = tree_util.tree_map(lambda u, v: u - v, db, dmv)
        dx = run(consts_, rhs)
        dx = dx[0] if has_aux else dx
        dout = (dx, tree_util.tree_map(lambda a: a * 0, out[1])) if has_aux else dx
        return out, dout

    return solved(tuple(consts), b)


# ---- dot algorithms (JAX's names for precision control beyond Precision) --------------------------

class DotAlgorithm:
    """A dot product's operand/accumulation types (jax.lax.DotAlgorithm): kiln's dot_general takes
    `precision` only, so passing one raises NotImplementedError there; the type exists for code
    that names it."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class DotAlgorithmPreset:
    """Named DotAlgorithms (jax.lax.DotAlgorithmPreset): see DotAlgorithm."""
    DEFAULT = "DEFAULT"
    ANY_F8_ANY_F8_F32 = "ANY_F8_ANY_F8_F32"
    F16_F16_F32 = "F16_F16_F32"
    BF16_BF16_F32 = "BF16_BF16_F32"
    TF32_TF32_F32 = "TF32_TF32_F32"
    F32_F32_F32 = "F32_F32_F32"
    F64_F64_F64 = "F64_F64_F64"


class AccuracyMode:
    """The accuracy of transcendental functions (jax.lax.AccuracyMode): kiln computes them one way."""
    DEFAULT = "DEFAULT"
    HIGHEST = "HIGHEST"


class Tolerance:
    """An accuracy tolerance (jax.lax.Tolerance): accepted for code that names it."""

    def __init__(self, atol=0.0, rtol=0.0, ulps=0):
        self.atol, self.rtol, self.ulps = atol, rtol, ulps


def scaled_dot(*args, **kwargs):
    """A block-scaled (float8/float4) dot: kiln has no such dtypes."""
    raise NotImplementedError("lax.scaled_dot is not supported by kiln: it needs float8/float4 dtypes")
