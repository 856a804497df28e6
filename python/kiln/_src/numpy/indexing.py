# NumPy/JAX indexing on kiln arrays: x[idx] (getitem) and x.at[idx].op(v) (update).
# Built only from kiln.lax (slice/rev/reshape/dynamic_slice for static and scalar
# indices, lax._take/lax._scatter for integer arrays), core and dtypes.
# Semantics follow JAX: gathers clamp out-of-bounds indices, scatters drop them,
# negative indices wrap; a static Python int out of range raises IndexError.
import builtins
import operator

import numpy as np

from kiln import errors, lax
from kiln._src import core, dtypes
from kiln._src.numpy import shape_ops as _s

__all__ = []

_VALID_KINDS = ("integers, slices (`:`), ellipsis (`...`), None (`numpy.newaxis`) "
                "and integer or boolean arrays")


class _Entry:
    """One parsed index component.

    kind: 'slice' (value: slice), 'int' (value: static int), 'dyn' (value: 0-d
    integer Array), 'array' (value: integer Array), 'none' (a new axis).
    dim: the input dimension it consumes (None for 'none').
    static: an 'array' entry's values as a NumPy array when they are known at trace time, else None."""
    __slots__ = ("kind", "value", "dim", "static")

    def __init__(self, kind, value=None, dim=None, static=None):
        self.kind, self.value, self.dim, self.static = kind, value, dim, static


def _is_int_scalar(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _static_slice_part(v, what):
    if v is None:
        return None
    if isinstance(v, core.Array):
        if core.is_tracer(v):
            raise IndexError(f"array slice {what} must be static (Python ints or None), got a "
                             "traced value; use lax.dynamic_slice or "
                             "lax.dynamic_slice_in_dim for slices with traced bounds")
        v = core.concrete_or_error(v, f"slice {what}")
    try:
        return operator.index(v)
    except TypeError:
        raise IndexError(f"slice {what} must be an integer or None, got {v!r}") from None


def _mask_entries(mask, opname):
    """Integer index arrays (one per mask dimension) of the True entries of a static mask."""
    if mask.ndim == 0:
        raise IndexError(f"{opname}: scalar boolean indices (x[True], x[False]) are not "
                         "supported; use x[None] or kiln.numpy.where")
    return [(_Entry("array", core.asarray(i.astype(np.int32 if mask.size < 2**31 else np.int64)), static=i),
             mask.shape[k]) for k, i in enumerate(np.nonzero(mask))]


def _convert_item(item, opname):
    """Parsed entries for one element of the index tuple (a list), or Ellipsis."""
    if item is None:
        return [_Entry("none")]
    if item is Ellipsis:
        return Ellipsis
    if isinstance(item, slice):
        return [_Entry("slice", slice(_static_slice_part(item.start, "start"),
                                      _static_slice_part(item.stop, "stop"),
                                      _static_slice_part(item.step, "step")))]
    if isinstance(item, (bool, np.bool_)):
        return _mask_entries(np.asarray(item), opname)
    if _is_int_scalar(item):
        return [_Entry("int", int(item))]
    if isinstance(item, core.Array):
        dt = np.dtype(item.dtype)
        if dt == np.bool_:
            if core.is_tracer(item):
                raise errors.NonConcreteBooleanIndexError(
                    f"{opname}: array boolean indices must be concrete; got a traced boolean "
                    f"array of shape {item.shape}. The result's shape would depend on its "
                    "values, which jit/vmap/grad cannot allow. Use kiln.numpy.where(mask, x, "
                    "0) to keep the shape, or nonzero(mask, size=...) with a static size")
            return _mask_entries(np.asarray(core.concrete_or_error(item, "boolean index")), opname)
        if not np.issubdtype(dt, np.integer):
            raise IndexError(f"{opname}: index arrays must have integer or boolean dtype, got "
                             f"{dt}; only {_VALID_KINDS} are valid indices")
        return [_Entry("dyn" if item.ndim == 0 else "array", item)]
    if isinstance(item, (list, tuple)) and any(isinstance(e, core.Array) for e in item):
        return _convert_item(_s.stack([core.asarray(e) for e in item]), opname)
    if isinstance(item, (list, tuple, np.ndarray)):
        arr = np.asarray(item)
        if arr.size == 0 and arr.dtype == np.float64 and not isinstance(item, np.ndarray):
            arr = arr.astype(np.int32)
        if arr.dtype == np.bool_:
            return _mask_entries(arr, opname)
        if not np.issubdtype(arr.dtype, np.integer):
            raise IndexError(f"{opname}: index arrays must have integer or boolean dtype, got "
                             f"{arr.dtype}; only {_VALID_KINDS} are valid indices")
        if arr.ndim == 0:
            return [_Entry("int", int(arr))]
        if arr.dtype.itemsize == 8 and np.all((arr >= -2**31) & (arr < 2**31)):
            arr = arr.astype(np.int32)
        return [_Entry("array", core.asarray(arr), static=arr)]
    raise IndexError(f"{opname}: only {_VALID_KINDS} are valid indices; got "
                     f"{type(item).__name__} {item!r}")


def _parse(shape, idx, opname, check_ints):
    """The index as a list of _Entry with dims assigned, one slice entry per unindexed dim.

    check_ints: a static int out of range is clamped into range (getitem, as JAX: x[11] of 10
    elements is x[9], x[-12] is x[0]); otherwise it becomes a 'dyn' entry so the caller's
    clip/fill/drop rule applies."""
    if isinstance(idx, list):  # as JAX (NumPy's old reading of x[[0, 1]] as x[0, 1] made it ambiguous)
        raise TypeError(f"{opname}: Using a non-tuple sequence for multidimensional indexing is not allowed; use "
                        "`arr[array(seq)]` instead of `arr[seq]` (or `arr[tuple(seq)]`)")
    items = list(idx) if isinstance(idx, tuple) else [idx]
    parsed, mask_sizes, n_ellipsis = [], {}, 0
    for item in items:
        conv = _convert_item(item, opname)
        if conv is Ellipsis:
            n_ellipsis += 1
            if n_ellipsis > 1:
                raise IndexError(f"{opname}: an index can only have a single ellipsis ('...')")
            parsed.append(Ellipsis)
            continue
        for e in conv:
            if isinstance(e, tuple):  # (entry, mask dimension size) from a boolean mask
                mask_sizes[id(e[0])] = e[1]
                e = e[0]
            parsed.append(e)
    consumed = builtins.sum(1 for e in parsed if e is not Ellipsis and e.kind != "none")
    ndim = len(shape)
    if consumed > ndim:
        raise IndexError(f"{opname}: too many indices for array: array is {ndim}-dimensional, "
                         f"but {consumed} were indexed")
    fill = [_Entry("slice", slice(None)) for _ in range(ndim - consumed)]
    if Ellipsis in parsed:
        k = parsed.index(Ellipsis)
        parsed[k:k + 1] = fill
    else:
        parsed += fill
    dim = 0
    for e in parsed:
        if e.kind == "none":
            continue
        e.dim, n = dim, shape[dim]
        if id(e) in mask_sizes and mask_sizes[id(e)] != n:
            raise IndexError(f"{opname}: boolean index did not match indexed array along axis "
                             f"{dim}; size of axis is {n} but size of corresponding boolean "
                             f"index is {mask_sizes[id(e)]}")
        if e.kind == "int" and not -n <= e.value < n and n > 0 and check_ints:
            e.value = builtins.max(builtins.min(e.value, n - 1), -n) % n
        elif e.kind == "int" and not -n <= e.value < n:
            if check_ints:
                raise IndexError(f"{opname}: index {e.value} is out of bounds for axis {dim} "
                                 f"with size {n}")
            e.kind, e.value = "dyn", core.asarray(np.int32(builtins.max(builtins.min(e.value, n), -n - 1)))
        elif e.kind == "int":
            e.value %= n
        dim += 1
    return parsed


# kiln.experimental.checkify's index checks: when set, hook(shape, dim, index) sees each traced index
# into axis `dim` of an array of `shape` before it is wrapped and clamped (None, the usual case: no cost)
index_hook = [None]


def _note_index(shape, dim, i):
    if index_hook[0] is not None:
        index_hook[0](tuple(shape), dim, i)


def _index_int(x):
    """An index Array as int32 (int64 kept where x64 allows it)."""
    dt = np.dtype(x.dtype)
    if dt == np.int32 or (dt == np.int64 and _s._default_int() == np.int64):
        return x
    return lax.convert_element_type(x, np.int32)


def _gather(arr, entries, mode, fill_value):
    """arr indexed by parsed entries. mode 'clip': out-of-bounds indices clamp;
    'fill': positions selected by an out-of-bounds index become fill_value; 'promise' (JAX's
    promise_in_bounds, getitem's default): an out-of-bounds array index reads the clamped position,
    as 'clip', but passes no gradient back (JAX's gather transposes to a scatter that drops it)."""
    shape = arr.shape
    nd = arr.ndim
    # 1. Static slices and ints: one rev and one strided slice.
    starts, limits, strides, revdims = [0] * nd, list(shape), [1] * nd, []
    for e in entries:
        if e.kind == "slice":
            n = shape[e.dim]
            start, stop, step = e.value.indices(n)
            length = len(range(start, stop, step))
            if step < 0:
                revdims.append(e.dim)
                start, step = n - 1 - start, -step
            starts[e.dim] = start
            limits[e.dim] = start + (length - 1) * step + 1 if length else start
            strides[e.dim] = step
        elif e.kind == "int":
            starts[e.dim], limits[e.dim] = e.value, e.value + 1
    x = arr
    if revdims:
        x = lax.rev(x, tuple(revdims))
    if starts != [0] * nd or limits != list(shape) or strides != [1] * nd:
        x = lax.slice(x, starts, limits, strides)
    valid = None
    # bug (issue 32, fuzzer): 'promise' read the clamped element and sent its gradient there too
    # (grad of x[i] with i out of range was 1 where JAX's is 0). Its in-bounds mask gates the gradient.
    grad_valid = None
    differentiable = dtypes.issubdtype(arr.dtype, np.inexact)
    # Negative indices wrap, then clamp; 'fill' also yields the in-bounds mask.
    norm_mode = "fill" if mode == "fill" else "promise_in_bounds"

    def both(a, b):
        return b if a is None else lax.and_(a, b)

    # 2. Traced scalar ints: one dynamic_slice.
    dyn = [e for e in entries if e.kind == "dyn"]
    if dyn:
        dstarts = [np.int32(0)] * nd  # jax.lax wants one index dtype
        sizes = list(x.shape)
        for e in dyn:
            n = shape[e.dim]
            if n == 0:
                raise IndexError(f"index is out of bounds for axis {e.dim} with size 0")
            _note_index(shape, e.dim, e.value)
            i, ok = _s._normalize_index(_index_int(e.value), n, norm_mode, "indexing")
            dstarts[e.dim] = lax.convert_element_type(i, np.int32)
            sizes[e.dim] = 1
            valid = both(valid, ok) if mode == "fill" else valid
        x = lax.dynamic_slice(x, dstarts, sizes)
    # 3. Integer arrays: one gather on a view with the indexed dims merged.
    adv = [e for e in entries if e.kind == "array"]
    tokens = list(range(nd))
    bshape = ()
    if adv:
        bshape = _s._broadcast_shapes("indexing", *(e.value.shape for e in adv))
        adims = [e.dim for e in adv]
        others = [d for d in range(nd) if d not in adims]
        asizes = [x.shape[d] for d in adims]
        total = int(np.prod(asizes, dtype=np.int64))
        if total == 0 and int(np.prod(bshape, dtype=np.int64)) > 0:
            if mode != "fill":
                raise IndexError(f"indexing: index is out of bounds for axis {adims} with size 0")
            out_shape = bshape + tuple(x.shape[d] for d in others)
            x = lax.full(out_shape, 0, x.dtype)
            valid = lax.full(bshape, False, np.bool_)
        else:
            ldt = _s._index_dtype(total)
            lin = None
            stride = 1
            for e in adv:
                _note_index(shape, e.dim, e.value)
            for e, n in reversed(list(zip(adv, asizes))):
                gate = mode == "promise" and differentiable and not (
                    e.static is not None and bool(np.all((e.static >= -n) & (e.static < n))))
                i, ok = _s._normalize_index(_index_int(_s.broadcast_to(e.value, bshape)), n,
                                            "fill" if gate else norm_mode, "indexing")
                if gate:
                    grad_valid = both(grad_valid, ok)
                i = _s._convert(i, ldt)
                if stride != 1:
                    i = lax.mul(i, lax.full((), stride, ldt))
                lin = i if lin is None else lax.add(lin, i)
                stride *= n
                if mode == "fill":
                    if valid is not None and valid.ndim == 0:
                        valid = lax.broadcast_in_dim(valid, bshape, ())
                    valid = both(valid, ok)
            if adims != list(range(len(adims))):
                x = lax.transpose(x, tuple(adims + others))
            x = lax.reshape(x, (total,) + tuple(x.shape[len(adims):]))
            x = lax._take(x, lin, 0)
        tokens = ["B"] * len(bshape) + others
    # 4. Drop the int dims, move the advanced block to NumPy's place, add new axes.
    kinds = {e.dim: e.kind for e in entries if e.kind != "none"}
    keep = [k for k, t in enumerate(tokens) if t == "B" or kinds[t] in ("slice", "array")]
    if len(keep) != len(tokens):
        x = lax.reshape(x, tuple(x.shape[k] for k in keep))
        tokens = [tokens[k] for k in keep]
    adv_pos = [k for k, e in enumerate(entries) if e.kind == "array" or (adv and e.kind in ("int", "dyn"))]
    adjacent = bool(adv_pos) and adv_pos[-1] - adv_pos[0] + 1 == len(adv_pos)
    final = ["B"] if (adv and not adjacent) else []
    for e in entries:
        if e.kind == "slice":
            final.append(e.dim)
        elif e.kind == "none":
            final.append("N")
        elif e.kind == "array" and adjacent and "B" not in final:
            final.append("B")
    src_pos = {t: k for k, t in enumerate(tokens) if t != "B"}
    bstart = tokens.index("B") if "B" in tokens else None
    perm, out_shape, bpos = [], [], None
    for t in final:
        if t == "N":
            out_shape.append(1)
        elif t == "B":
            bpos = len(out_shape)
            perm += list(range(bstart, bstart + len(bshape)))
            out_shape += list(bshape)
        else:
            perm.append(src_pos[t])
            out_shape.append(x.shape[src_pos[t]])
    if perm != list(range(len(perm))):
        x = lax.transpose(x, tuple(perm))
    if tuple(out_shape) != x.shape:
        x = lax.reshape(x, tuple(out_shape))
    # 5. Out-of-bounds positions take the fill value ('promise': pass no gradient).
    if grad_valid is not None:
        mask = lax.broadcast_in_dim(grad_valid, tuple(out_shape), tuple(range(bpos, bpos + len(bshape))))
        x = lax.select(mask, x, lax.stop_gradient(x))
    if valid is not None:
        dims = () if valid.ndim == 0 else tuple(range(bpos, bpos + len(bshape)))
        mask = lax.broadcast_in_dim(valid, tuple(out_shape), dims)
        fv = _s._default_fill(x.dtype) if fill_value is None else fill_value
        x = lax.select(mask, x, lax.full(tuple(out_shape), fv, x.dtype))
    return x


_GET_MODES = {None: "promise", "clip": "clip", "promise_in_bounds": "promise", "fill": "fill",
              "drop": "fill"}


def getitem(arr, idx, mode=None, fill_value=None):
    """arr[idx] with NumPy's rules; out-of-bounds array indices clamp (mode='fill' fills)."""
    arr = core.asarray(arr)
    if mode not in _GET_MODES:
        raise ValueError(f"indexing: invalid mode {mode!r}; expected one of 'clip', 'fill', "
                         "'drop', 'promise_in_bounds'")
    entries = _parse(arr.shape, idx, "indexing", check_ints=mode is None)
    return _gather(arr, entries, _GET_MODES[mode], fill_value)


# ----------------------------------------------------------------------------
# Updates: x.at[idx].set/add/... -> new array.

def _combine(op, old, vals):
    if op == "set":
        return vals
    if op == "apply":
        return core.asarray(vals(old))
    if np.dtype(old.dtype) == np.bool_ and op == "mul":  # as the scatter combines bools: and
        return lax.and_(old, vals)
    fn = {"add": lax.add, "mul": lax.mul, "min": lax.min, "max": lax.max}[op]
    return fn(old, vals)


def _fit_values(values, shape, dtype, opname):
    v = core.asarray(values)
    if np.dtype(v.dtype) != np.dtype(dtype):
        v = lax.convert_element_type(v, dtype)
    while v.ndim > len(shape) and v.shape[0] == 1:
        v = lax.reshape(v, v.shape[1:])
    try:
        return _s.broadcast_to(v, tuple(shape))
    except ValueError:
        raise ValueError(f"{opname}: values of shape {core.asarray(values).shape} cannot be "
                         f"broadcast to the indexed shape {tuple(shape)}") from None


def update(arr, idx, values, op, mode=None, indices_are_sorted=False, unique_indices=False):
    """x.at[idx].<op>(values): op in set, add, mul, min, max, divide, power, apply
    (values is then the function). Out-of-bounds updates are dropped (mode 'clip' clamps).
    Like JAX, divide of an integer array returns the default float dtype."""
    arr = core.asarray(arr)
    opname = f"at[...].{op}"
    if mode not in (None, "drop", "fill", "clip", "promise_in_bounds"):
        raise ValueError(f"{opname}: invalid mode {mode!r}; expected 'drop', 'fill', 'clip' "
                         "or 'promise_in_bounds'")
    clip = mode in ("clip", "promise_in_bounds")
    if op in ("add", "mul", "divide", "power") and np.dtype(arr.dtype) == np.bool_ and \
            np.dtype(dtypes.dtype_of(values)) == np.bool_:
        # as JAX: the update combines in the operands' promoted dtype, and bools do not add or
        # multiply; but an update of nothing (an empty index) returns the array before that check
        if 0 in tuple(arr[idx].shape):
            return arr
        raise TypeError(f"{opname}: bool arrays do not take bool updates (add and multiply need numbers); "
                        "use .set, .min (and) or .max (or), or convert the array to an integer dtype")
    if op in ("set", "add", "mul", "min", "max"):
        # As JAX: the array and the values are promoted together, the scatter runs in that dtype and
        # its result is converted back, so int x.at[i].add(1.7) at a duplicated i adds 3.4, not 1 + 1
        # (and, as in JAX, an int32 array round-trips through float32 for float values)
        pdt = np.dtype(dtypes.result_type(arr, values))
        if pdt != np.dtype(arr.dtype):
            out = update(lax.convert_element_type(arr, pdt, arr.weak_type), idx, values, op, mode,
                         indices_are_sorted, unique_indices)
            return lax.convert_element_type(out, arr.dtype, arr.weak_type)
    if op in ("divide", "power"):
        # As JAX: duplicates multiply their values first, then one elementwise op.
        factor = update(lax.full(arr.shape, 1, arr.dtype), idx, values, "mul", mode)
        if op == "power":  # jnp.power's rules: integer and bool bases too (lax.pow takes floats only)
            from kiln._src.numpy.ufuncs import power
            return power(arr, factor)
        if not dtypes.issubdtype(arr.dtype, np.inexact):
            fdt = dtypes.default_float_dtype()
            arr, factor = _s._convert(arr, fdt), _s._convert(factor, fdt)
        return lax.div(arr, factor)
    masked = _traced_mask_update(arr, idx, values, op)
    if masked is not None:
        return masked
    entries = _parse(arr.shape, idx, "indexing", check_ints=False)
    if arr.size == 0:  # nothing to update: index arrays drop every update, an int index raises (as JAX)
        for e in entries:
            if e.kind in ("int", "dyn") and arr.shape[e.dim] == 0:
                raise IndexError(f"{opname}: index is out of bounds for axis {e.dim} with size 0")
        return arr
    if all(e.kind in ("int", "none") or (e.kind == "slice" and e.value.indices(arr.shape[e.dim])[2] in (1, -1))
           for e in entries):
        return _update_box(arr, entries, values, op, opname)
    if any(e.kind == "dyn" for e in entries) and all(
            e.kind in ("int", "dyn") or (e.kind == "slice" and e.value.indices(arr.shape[e.dim])[2] == 1)
            for e in entries) and 0 not in arr.shape:
        return _update_dynamic_box(arr, entries, values, op, opname, clip)
    size = arr.size
    ldt = _s._index_dtype(size + 1)
    positions = lax.reshape(lax.iota(ldt, size), arr.shape)
    where = _gather(positions, entries, "clip" if clip else "fill", size)
    if op == "apply":
        vals = None
    else:
        vals = _fit_values(values, where.shape, arr.dtype, opname)
    flat = _s.ravel(arr)
    if op == "apply":
        # As JAX: func is applied once per occurrence of a position (twice for an index given
        # twice): a loop of count rounds, each applying it where a position has rounds left
        idx = _s.ravel(where)
        counts = lax._scatter(lax.full((size,), 0, np.int32), idx, lax.full(idx.shape, 1, np.int32), 0, "add")
        rounds = _s._reduce("max", counts, (0,)) if size else lax.full((), 0, np.int32)

        def more(state):
            return lax.lt(state[0], rounds)

        def once(state):
            j, x = state
            applied = _s._convert(values(x), arr.dtype)
            return lax.add(j, lax.full((), 1, np.int32)), lax.select(lax.gt(counts, j), applied, x)
        return lax.reshape(lax.while_loop(more, once, (lax.full((), 0, np.int32), flat))[1], arr.shape)
    vals = _s.ravel(vals)
    out = lax._scatter(flat, _s.ravel(where), vals, 0, op)
    return lax.reshape(out, arr.shape)


def _traced_mask_update(arr, idx, values, op):
    """x.at[mask].op(scalar) with a traced boolean mask over x's leading dims: the
    result's shape does not depend on the mask, so (beyond JAX) it is a select."""
    mask = idx[0] if isinstance(idx, tuple) and len(idx) == 1 else idx
    if not (isinstance(mask, core.Array) and core.is_tracer(mask)
            and np.dtype(mask.dtype) == np.bool_ and mask.ndim <= arr.ndim
            and tuple(mask.shape) == tuple(arr.shape[:mask.ndim])):
        return None
    if op == "apply":
        new = _s._convert(values(arr), arr.dtype)
    else:
        v = core.asarray(values)
        if v.ndim != 0:
            return None
        new = _combine(op, arr, _s._bcast_dims(_s._convert(v, arr.dtype), arr.shape, ()))
    return lax.select(_s._bcast_dims(mask, arr.shape, range(mask.ndim)), new, arr)


def _update_box(arr, entries, values, op, opname):
    """Update of a static box (unit-step slices and in-range ints) via dynamic_update_slice."""
    starts, box, revdims, out_shape = [0] * arr.ndim, list(arr.shape), [], []
    for e in entries:
        if e.kind == "none":
            out_shape.append(1)
            continue
        n = arr.shape[e.dim]
        if e.kind == "int":
            starts[e.dim], box[e.dim] = e.value, 1
            continue
        start, stop, step = e.value.indices(n)
        length = len(range(start, stop, step))
        box[e.dim] = length
        starts[e.dim] = start if step > 0 else start - length + 1
        if step < 0:
            revdims.append(e.dim)
        out_shape.append(length)
    if 0 in box:
        return arr
    old = None if op == "set" else lax.slice(arr, starts, [s + b for s, b in zip(starts, box)])
    if op == "apply":
        new = _combine(op, old, values)
    else:
        vals = _fit_values(values, out_shape, arr.dtype, opname)
        vals = lax.reshape(vals, tuple(box))
        if revdims:
            vals = lax.rev(vals, tuple(revdims))
        new = _combine(op, old, vals)
    new = _s._convert(new, arr.dtype)
    return _updated(arr, new, [int(s) for s in starts])


def _update_dynamic_box(arr, entries, values, op, opname, clip):
    """Update of a box at traced scalar indices (x.at[i].set(v), x.at[i, 2:5].add(v)), no work
    proportional to x (so a loop carrying x can update it in place): one scatter of one slice
    when a single traced index leaves whole extents elsewhere, else one dynamic_update_slice of
    the box. An out-of-range index drops the update (scatter drops it; the box gets its old values
    back), unless mode clips."""
    dyn = [e for e in entries if e.kind == "dyn"]
    if len(dyn) == 1 and op != "apply" and all(
            e.kind == "dyn" or (e.kind == "slice" and e.value.indices(arr.shape[e.dim]) == (0, arr.shape[e.dim], 1))
            for e in entries):
        # one traced index, whole extents elsewhere (z.at[i].set(v), m.at[i].add(row)): one scatter
        # of one slice along that axis, which drops an out-of-range index by itself
        d, n = dyn[0].dim, arr.shape[dyn[0].dim]
        i = _index_int(dyn[0].value)
        _note_index(arr.shape, d, i)
        if clip:
            i, _ = _s._normalize_index(i, n, "promise_in_bounds", opname)
        else:  # negative indices count from the end; others out of range stay so (dropped)
            i = lax.select(lax.lt(i, lax._to_array(0, i)), lax.add(i, lax._to_array(n, i)), i)
        rest = tuple(arr.shape[:d]) + tuple(arr.shape[d + 1:])
        vals = lax.reshape(_s._convert(_fit_values(values, list(rest), arr.dtype, opname), arr.dtype),
                           tuple(arr.shape[:d]) + (1,) + tuple(arr.shape[d + 1:]))
        return lax._scatter(arr, lax.reshape(lax.convert_element_type(i, np.int32), (1,)), vals, d, op)
    starts, box, out_shape, valid = [np.int32(0)] * arr.ndim, list(arr.shape), [], None
    for e in entries:
        n = arr.shape[e.dim]
        if e.kind == "int":
            starts[e.dim], box[e.dim] = np.int32(e.value if e.value >= 0 else e.value + n), 1
        elif e.kind == "dyn":
            _note_index(arr.shape, e.dim, e.value)
            i, ok = _s._normalize_index(_index_int(e.value), n, "promise_in_bounds" if clip else "drop", opname)
            starts[e.dim], box[e.dim] = lax.convert_element_type(i, np.int32), 1
            valid = ok if valid is None else lax.and_(valid, ok)
        else:
            start, stop, _ = e.value.indices(n)
            starts[e.dim], box[e.dim] = np.int32(start), len(range(start, stop))
            out_shape.append(box[e.dim])
    if 0 in box:
        return arr
    old = lax.dynamic_slice(arr, starts, box)
    if op == "apply":
        new = _combine(op, old, values)
    else:
        vals = lax.reshape(_fit_values(values, out_shape, arr.dtype, opname), tuple(box))
        if valid is not None and op == "mul":
            # a dropped factor becomes 1 before the product (not the product undone after it), so its
            # derivative is 0 even where the old value is inf or NaN, as JAX's scatter-mul
            # (bug, issue 32: grad of x.at[i].multiply(v, mode='drop') at a dropped i was 0 * nan)
            vals = lax.select(_s._bcast_dims(valid, tuple(box), ()), vals, lax.full_like(vals, 1))
            valid = None
        new = vals if op == "set" else _combine(op, old, vals)
    new = _s._convert(new, arr.dtype)
    if valid is not None:
        new = lax.select(_s._bcast_dims(valid, tuple(box), ()), new, old)
    return _updated(arr, new, starts)


def _updated(arr, new, starts):
    """arr with the box `new` at `starts`, weak as arr (JAX's .at[] keeps the operand's weak type;
    its dynamic_update_slice is strong)."""
    out = lax.dynamic_update_slice(arr, new, starts)
    return lax.convert_element_type(out, out.dtype, True) if arr.weak_type else out


class _IndexUpdateRef:
    """x.at[idx]: the pending indexed update; each method returns a new array."""
    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array, self.index = array, index

    def __repr__(self):
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(self, *, indices_are_sorted=False, unique_indices=False, mode=None,
            fill_value=None, out_sharding=None):
        return getitem(self.array, self.index, mode=mode, fill_value=fill_value)

    def _do(self, values, op, mode):
        return update(self.array, self.index, values, op, mode=mode)

    def set(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._do(values, "set", mode)

    def add(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._do(values, "add", mode)

    def subtract(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        # negated in the promoted dtype (as JAX's scatter_sub there): int x.at[i].subtract(1.7) takes 1.7
        v = _s._convert(values, dtypes.result_type(self.array, values))
        return self._do(lax.neg(v), "add", mode)

    def multiply(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._do(values, "mul", mode)

    mul = multiply

    def divide(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._do(values, "divide", mode)

    def power(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._do(values, "power", mode)

    def min(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._do(values, "min", mode)

    def max(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._do(values, "max", mode)

    def apply(self, func, *, indices_are_sorted=False, unique_indices=False, mode=None):
        if not callable(func):
            raise TypeError(f"at[...].apply: func must be callable, got {func!r}")
        return self._do(func, "apply", mode)


class _AtIndexer:
    """The object behind x.at: x.at[idx] gives an _IndexUpdateRef."""
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):
        return _IndexUpdateRef(self.array, index)
