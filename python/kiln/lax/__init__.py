"""kiln.lax: the primitives, with jax.lax's names and semantics. Operands of n-ary ops must
share a dtype, as in JAX: a Python scalar has its kind's default dtype (weakly typed), nothing is
promoted (kiln.numpy promotes)."""

import builtins
import enum
import operator
import weakref

import numpy as np

from kiln import _kiln
from kiln._src import core, dtypes, refs, thread_state
from kiln._src.core import Array, Tracer, bind, bind1
from kiln._src.dispatch import update_params

_int = builtins.int
_float = builtins.float
_bool = builtins.bool
_complex_t = builtins.complex


class Precision(enum.Enum):
    """Matmul precision as in JAX: DEFAULT may use reduced precision on accelerators;
    HIGHEST is full float32. On the CPU all three compute in full precision."""
    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    def __str__(self):
        return self.name


class RoundingMethod(enum.IntEnum):
    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


def _is_scalar(x):
    return isinstance(x, (_bool, _int, _float, _complex_t)) or (isinstance(x, np.generic) and x.shape == ())


def _to_array(x, like=None, opname="lax"):
    """x as an Array; Python scalars take `like`'s dtype (weakly typed)."""
    if isinstance(x, Array):
        return x
    if isinstance(x, (_bool, _int, _float, _complex_t)):
        if like is not None:
            if isinstance(x, _complex_t) and like.dtype.kind != "c":
                raise TypeError(f"{opname}: a complex scalar {x!r} cannot take the dtype {like.dtype.name} of "
                                "the other operand; convert the array to a complex dtype first")
            return core.literal(x, like.dtype, True, like)
        dt = dtypes.dtype_of(x)
        return core.literal(x, dt, not isinstance(x, _bool))
    if isinstance(x, (list, tuple)):  # as JAX: lax takes arrays and scalars, not sequences
        raise TypeError(f"{opname}: Error interpreting an argument as an array: got a {type(x).__name__}; "
                        "convert it with kiln.numpy.asarray first")
    if isinstance(x, (np.ndarray, np.generic)):
        return core.asarray(x)
    if hasattr(x, "__jax_array__"):
        return core.asarray(x)
    raise TypeError(f"{opname}: expected an array or a Python scalar, got {type(x).__name__}")


def _args(opname, *xs):
    """Arrays for kiln's own calls of the primitives: scalars adopt the dtype of the first array
    operand. The public n-ary functions take their operands through _same_dtype_args instead."""
    like = next((x for x in xs if isinstance(x, Array)), None)
    if like is None:
        like = next((x for x in xs if isinstance(x, (np.ndarray, np.generic))), None)
        if like is not None:
            like = core.asarray(like)
    return [_to_array(x, like, opname) for x in xs]  # rank-0 operands broadcast in the primitive


# ---------------------------------------------------------------------------
# lax's dtype rule, as JAX's: each operand of an n-ary op keeps its own dtype (a Python scalar has its
# kind's default dtype, int32/float32/complex64 or their 64-bit forms with x64, weakly typed; a NumPy
# value its canonical dtype) and the dtypes must be equal; nothing is converted (bug, issue 32: a
# scalar took the other operand's dtype, so lax.add(uint16 array, 1) computed where JAX raises). The
# public functions check it here, once; kiln's own library code makes its constants in the dtype
# wanted (_to_array(value, like), full) and passes operands it has already promoted.

# The kiln.numpy function that promotes instead, named in the error as JAX's tip does.
_JNP_EQUIVALENT = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "max": "maximum",
                   "min": "minimum", "atan2": "arctan2", "nextafter": "nextafter", "pow": "float_power",
                   "eq": "equal", "ne": "not_equal", "shift_left": "left_shift",
                   "shift_right_logical": "right_shift", "shift_right_arithmetic": "right_shift",
                   "select": "where", "concatenate": "concatenate"}


def _own_dtype(x, like, opname):
    """x as an Array of its own dtype (JAX's conversion of a lax operand); `like`, a Tracer or None,
    only says which trace a scalar's literal belongs to."""
    if isinstance(x, Array):
        return x
    if isinstance(x, (_bool, _int, _float, _complex_t)):
        dt = dtypes.dtype_of(x)
        if isinstance(x, _int) and not isinstance(x, _bool):
            info = np.iinfo(dt)
            if not info.min <= x <= info.max:
                raise OverflowError(f"{opname}: Python int {x} too large to convert to {dt.name}")
        return core.literal(x, dt, not isinstance(x, _bool), like)
    return _to_array(x, None, opname)


def _check_same_dtypes(opname, arrays):
    """TypeError unless every array has the first one's dtype (weak types do not matter)."""
    dt = arrays[0].dtype
    for a in arrays[1:]:
        if a.dtype != dt:
            tip = _JNP_EQUIVALENT.get(opname)
            raise TypeError(f"lax.{opname} requires arguments to have the same dtypes, got "
                            f"{', '.join(str(b.dtype) for b in arrays)}."
                            + (f" (Tip: jnp.{tip} is a similar function that does automatic type promotion "
                               "on inputs)." if tip else ""))


def _same_dtype_args(opname, *xs):
    """The operands of the public n-ary op `opname` as Arrays, under lax's dtype rule."""
    like = next((x for x in xs if isinstance(x, Tracer)), None)
    arrays = [_own_dtype(x, like, opname) for x in xs]
    _check_same_dtypes(opname, arrays)
    return arrays


_eager_apply = _kiln.eager_apply  # the C fast path (and eager fusion) of common elementwise ops
_EAGER_CODES = {name: i for i, name in enumerate(_kiln.eager_ops())}


def _unary(name):
    code = _EAGER_CODES.get(name)

    def op(x):
        if code is not None and type(x) is Array:
            r = _eager_apply(code, x)
            if r is not None:
                return r
        if not isinstance(x, Array):
            (x,) = _args(name, x)
        return bind1(name, [x])
    op.__name__ = name
    op.__doc__ = f"Elementwise {name}."
    return op


def _binary(name, prim=None):
    prim = prim or name
    code = _EAGER_CODES.get(prim)

    def op(x, y):
        if code is not None and type(x) is Array and type(y) is Array:
            r = _eager_apply(code, x, y)
            if r is not None:
                return r
        return bind1(prim, _same_dtype_args(prim, x, y))
    op.__name__ = name
    op.__doc__ = f"Elementwise {name}."
    return op


for _n in ("neg sign floor ceil is_finite exp exp2 log log1p expm1 tanh logistic sin cos tan asin "
           "acos atan sinh cosh asinh acosh atanh sqrt rsqrt cbrt abs erf erfc erf_inv lgamma "
           "digamma square").split():
    globals()[_n] = _unary(_n)

_stop_gradient = _unary("stop_gradient")


def stop_gradient(x):
    """x (any pytree of arrays) with a zero derivative: grad and jvp see each leaf as a constant."""
    from kiln._src import tree_util
    return tree_util.tree_map(_stop_gradient, x)

_barrier = _unary("optimization_barrier")


def optimization_barrier(operand):
    """The identity on a pytree of arrays that common-subexpression elimination and other
    simplifications do not see through (what checkpoint puts before its recomputation)."""
    from kiln._src import tree_util
    return tree_util.tree_map(_barrier, operand)


not_ = _unary("not")
bitwise_not = not_
real = _unary("real")
imag = _unary("imag")
_conj = _unary("conj")
_complex = _binary("complex")


def conj(x):
    """Elementwise complex conjugate; a real operand becomes complex (as in JAX)."""
    (x,) = _args("conj", x)
    if x.dtype.kind != "c":
        from kiln._src import dtypes
        x = convert_element_type(x, dtypes.complex_of(x.dtype))
    return _conj(x)


def complex(x, y):
    """x + i y elementwise from two float32 or two float64 operands."""
    return _complex(x, y)


class FftType(enum.IntEnum):
    """lax.fft's transform: complex forward/inverse, real-to-complex, complex-to-real."""
    FFT = 0
    IFFT = 1
    RFFT = 2
    IRFFT = 3


def fft(x, fft_type, fft_lengths):
    """The FFT of x over its trailing len(fft_lengths) axes (1 to 3): FFT and IFFT (scaled by
    1/prod(fft_lengths)) map complex to complex; RFFT a real signal to its half spectrum (last axis
    n // 2 + 1); IRFFT the half spectrum to the real signal of the lengths given."""
    if isinstance(fft_type, str):
        try:
            fft_type = FftType[fft_type.upper()]
        except KeyError:
            raise ValueError(f"fft: unknown fft_type {fft_type!r}; use 'fft', 'ifft', 'rfft' or 'irfft'") from None
    fft_type = FftType(_int(fft_type))
    (x,) = _args("fft", x)
    lengths = tuple(operator.index(n) for n in fft_lengths)
    k, real_in, real_out = len(lengths), fft_type == FftType.RFFT, fft_type == FftType.IRFFT
    if (0 in lengths or 0 in x.shape) and 0 < k <= x.ndim and all(n >= 0 for n in lengths) \
            and (np.dtype(x.dtype).kind == "f") == real_in and not (real_in and lengths[-1] == 0) \
            and tuple(x.shape[x.ndim - k:x.ndim - real_out]) == lengths[:k - real_out]:
        # a transform over a zero-length axis, or of an empty array, is empty (JAX's result; JAX cannot
        # lower an rfft of length 0 either); no library plans a zero-length transform, so it is made here
        wide = np.dtype(x.dtype) in (np.float64, np.complex128)
        if real_out:
            return full(x.shape[:x.ndim - k] + lengths, 0, np.float64 if wide else np.float32)
        if real_in:
            return full(x.shape[:-1] + (lengths[-1] // 2 + 1,), 0, np.complex128 if wide else np.complex64)
        return full(x.shape, 0, x.dtype)
    return bind1("fft", [x], {"fft_type": _int(fft_type), "fft_lengths": lengths})


for _n in ("add sub mul div rem pow max min atan2 shift_left shift_right_logical "
           "shift_right_arithmetic eq ne lt le gt ge").split():
    globals()[_n] = _binary(_n)
_pow_same = _binary("pow")


def _is_inexact(dt):
    return dtypes.is_float_dtype(dt) or dtypes.is_complex_dtype(dt)


def pow(x, y):
    """x ** y elementwise: x float or complex, y of x's dtype or any integer dtype (JAX's rule). An
    integer exponent is computed in x's dtype, with JAX's derivative for it, 0 where y == 0."""
    like = x if isinstance(x, Tracer) else y if isinstance(y, Tracer) else None
    x, y = _own_dtype(x, like, "pow"), _own_dtype(y, like, "pow")
    x_inexact = _is_inexact(x.dtype)
    if x_inexact and y.dtype.kind in "iu":
        y0 = eq(y, full((), 0, y.dtype))
        # x ** 1 where y == 0, so its derivative (1) is finite where the select discards it
        out = _pow_same(x, convert_element_type(select(y0, full(y.shape, 1, y.dtype), y), x.dtype))
        if y0.shape != out.shape:
            y0 = broadcast_in_dim(y0, out.shape, ())
        out = select(y0, full(out.shape, 1, out.dtype), out)
        return convert_element_type(out, out.dtype, True) if x.weak_type and y.weak_type else out
    if not (x_inexact and x.dtype == y.dtype):
        raise TypeError("the first argument to pow must have an inexact dtype (float or complex), and the second "
                        "argument must have an inexact or integer dtype, and two inexact dtypes must match, but "
                        f"got {x.dtype} and {y.dtype} respectively.")
    return _pow_same(x, y)


and_ = _binary("and_", "and")
or_ = _binary("or_", "or")
xor = _binary("xor")
bitwise_and, bitwise_or, bitwise_xor = and_, or_, xor


def round(x, rounding_method=RoundingMethod.AWAY_FROM_ZERO):
    (x,) = _args("round", x)
    return bind1("round", [x], {"rounding_method": _int(rounding_method)})


def integer_pow(x, y):
    (x,) = _args("integer_pow", x)
    return bind1("integer_pow", [x], {"y": operator.index(y)})


def exp2(x):
    (x,) = _args("exp2", x)
    return bind1("exp2", [x])


def reciprocal(x):
    return div(1, x) if not isinstance(x, Array) else div(_to_array(1, x), x)


def convert_element_type(operand, new_dtype, weak_type=False):
    """operand in new_dtype. As JAX's, a complex array becomes real through its real part, bool
    included (0+1j is False; Array.astype(bool) and kiln.numpy.astype test both parts instead); a
    host value is converted by NumPy's rule first (np.complex64(1j) is True)."""
    new_dtype = dtypes.canonicalize_dtype(new_dtype)
    if not isinstance(operand, Array):
        if isinstance(operand, (_bool, _int, _float)):
            return core.literal(operand, new_dtype, weak_type)
        if new_dtype == np.bool_ and isinstance(operand, (_complex_t, np.ndarray, np.generic)) \
                and np.iscomplexobj(operand):
            operand = np.asarray(operand) != 0
        operand = core.asarray(operand)
    if new_dtype == np.bool_ and operand.dtype.kind == "c":
        operand = real(operand)
    if operand.dtype == new_dtype and operand.weak_type == _bool(weak_type):
        return operand
    return bind1("convert_element_type", [operand], {"new_dtype": new_dtype.name, "weak_type": _int(_bool(weak_type))})


def bitcast_convert_type(operand, new_dtype):
    """Reinterprets the bits of each element as new_dtype. As in JAX, a narrower new_dtype adds a
    trailing axis of the width ratio (float32 -> uint8: [..., 4], the low byte first) and a wider one
    takes that axis away (uint8[..., 4] -> float32). The primitive reinterprets same-width types; the
    width changes are unsigned shifts around it."""
    (operand,) = _args("bitcast_convert_type", operand)
    new_dtype = dtypes.canonicalize_dtype(new_dtype)
    old_dtype = np.dtype(operand.dtype)
    if old_dtype == new_dtype:
        return operand
    wide, narrow = old_dtype.itemsize, new_dtype.itemsize
    if narrow > wide and (operand.ndim == 0 or operand.shape[-1] != narrow // wide):
        n = narrow // wide
        raise ValueError(f"Attempting to convert array of shape {tuple(operand.shape)} from {old_dtype} of size "
                         f"{8 * wide} bits to {new_dtype} of size {8 * narrow} bits, but the last axis must "
                         f"have {n} elements ({n} * {8 * wide} = {8 * narrow})")
    if any(d == np.bool_ or d.kind == "c" for d in (old_dtype, new_dtype)):
        raise TypeError("lax.bitcast_convert_type does not support bool or complex values unless the operand "
                        f"and destination types match (got {old_dtype} to {new_dtype})")
    if wide == narrow:
        return bind1("bitcast_convert_type", [operand], {"new_dtype": new_dtype.name})
    u_old, u_new = np.dtype(f"uint{8 * wide}"), np.dtype(f"uint{8 * narrow}")
    bits = bind1("bitcast_convert_type", [operand], {"new_dtype": u_old.name}) if old_dtype != u_old else operand
    if wide > narrow:
        n = wide // narrow
        parts = [convert_element_type(shift_right_logical(bits, _to_array(8 * narrow * k, bits)), u_new)
                 for k in builtins.range(n)]
        out = concatenate([expand_dims(p, (p.ndim,)) for p in parts], operand.ndim)
    else:
        n = narrow // wide
        out = None
        for k in builtins.range(n):
            part = convert_element_type(index_in_dim(bits, k, operand.ndim - 1, keepdims=False), u_new)
            part = shift_left(part, _to_array(8 * wide * k, part)) if k else part
            out = part if out is None else or_(out, part)
    return out if new_dtype == out.dtype else bind1("bitcast_convert_type", [out], {"new_dtype": new_dtype.name})


def _convert_weak(operand, new_dtype, weak_type):
    return convert_element_type(operand, new_dtype, weak_type)


def select_n(which, *cases):
    """cases[which] elementwise; which is bool (two cases) or any integer dtype, the cases share a dtype."""
    if not cases:
        raise ValueError("select_n: needs at least one case")
    arrs = _same_dtype_args("select", *cases)
    (which,) = _args("select_n", which)
    if len(arrs) == 1:
        return arrs[0]
    if which.dtype != np.bool_ and which.dtype.kind not in "iu":
        raise TypeError(f"select `which` must be boolean or integer type, got {which.dtype}.")
    if len(arrs) == 2:
        if which.dtype != np.bool_ and which.dtype != np.int32:
            which = ne(which, _to_array(0, which))
        return bind1("select_n", [which, arrs[0], arrs[1]])
    out = arrs[-1]
    for i in builtins.range(len(arrs) - 2, -1, -1):
        out = bind1("select_n", [lt(which, _to_array(i + 1, which)), out, arrs[i]])
    return out


def select(pred, on_true, on_false):
    return select_n(pred, on_false, on_true)


def clamp(min, x, max):
    """min <= x <= max elementwise; min and max are scalars or of x's shape, all three of one dtype."""
    lo, x, hi = _same_dtype_args("clamp", min, x, max)
    for what, a in (("min", lo), ("max", hi)):
        if a.shape != x.shape and a.shape != ():
            raise TypeError(f"clamp requires {what}.shape == operand.shape or {what}.shape == (), got "
                            f"{what}.shape={a.shape}, operand.shape={x.shape}.")
    lo = broadcast_in_dim(lo, x.shape, ()) if lo.shape != x.shape else lo
    hi = broadcast_in_dim(hi, x.shape, ()) if hi.shape != x.shape else hi
    return bind1("min", [bind1("max", [x, lo]), hi])


# ---------------------------------------------------------------------------
# Shapes

def _shape(shape, what="shape"):
    try:
        return tuple(operator.index(d) for d in shape)
    except TypeError:
        for d in shape:
            if isinstance(d, Tracer):
                core.concrete_or_error(d, f"a dimension of {what}")
        raise TypeError(f"{what} must be a sequence of integers, got {shape!r}") from None


def broadcast_in_dim(operand, shape, broadcast_dimensions):
    (operand,) = _args("broadcast_in_dim", operand)
    shape = _shape(shape)
    dims = tuple(operator.index(d) for d in broadcast_dimensions)
    if operand.shape == shape and dims == tuple(builtins.range(len(shape))):
        return operand
    return bind1("broadcast_in_dim", [operand], {"shape": shape, "broadcast_dimensions": dims})


def broadcast(operand, sizes):
    (operand,) = _args("broadcast", operand)
    sizes = _shape(sizes)
    n = len(sizes)
    return broadcast_in_dim(operand, sizes + operand.shape, tuple(builtins.range(n, n + operand.ndim)))


def reshape(operand, new_sizes, dimensions=None):
    (operand,) = _args("reshape", operand)
    new_sizes = _shape(new_sizes, "new_sizes")
    if dimensions is not None and tuple(dimensions) != tuple(builtins.range(operand.ndim)):
        operand = transpose(operand, dimensions)
    if new_sizes == operand.shape:
        return operand
    return bind1("reshape", [operand], {"new_sizes": new_sizes})


def transpose(operand, permutation):
    (operand,) = _args("transpose", operand)
    perm = tuple(operator.index(p) for p in permutation)
    if perm == tuple(builtins.range(operand.ndim)):
        return operand
    return bind1("transpose", [operand], {"permutation": perm})


def squeeze(array, dimensions):
    (array,) = _args("squeeze", array)
    dims = sorted({operator.index(d) % array.ndim if array.ndim else operator.index(d) for d in dimensions})
    for d in dims:
        if d >= array.ndim or array.shape[d] != 1:
            raise ValueError(f"squeeze: cannot squeeze dimension {d} of an array of shape {array.shape} "
                             "(only size-1 dimensions can be squeezed)")
    return reshape(array, tuple(s for i, s in enumerate(array.shape) if i not in dims))


def expand_dims(array, dimensions):
    (array,) = _args("expand_dims", array)
    n = array.ndim + len(dimensions)
    dims = sorted(operator.index(d) % n for d in dimensions)
    shape = list(array.shape)
    for d in dims:
        shape.insert(d, 1)
    return reshape(array, tuple(shape))


def rev(operand, dimensions):
    (operand,) = _args("rev", operand)
    dims = tuple(operator.index(d) for d in dimensions)
    if not dims:
        return operand
    return bind1("rev", [operand], {"dimensions": dims})


def slice(operand, start_indices, limit_indices, strides=None):
    (operand,) = _args("slice", operand)
    start = _shape(start_indices, "start_indices")
    limit = _shape(limit_indices, "limit_indices")
    st = _shape(strides, "strides") if strides is not None else (1,) * operand.ndim
    if start == (0,) * operand.ndim and limit == operand.shape and st == (1,) * operand.ndim:
        return operand
    return bind1("slice", [operand], {"start_indices": start, "limit_indices": limit, "strides": st})


def slice_in_dim(operand, start_index, limit_index, stride=1, axis=0):
    (operand,) = _args("slice_in_dim", operand)
    axis = operator.index(axis) % operand.ndim
    n = operand.shape[axis]
    start = 0 if start_index is None else operator.index(start_index)
    limit = n if limit_index is None else operator.index(limit_index)
    start = start + n if start < 0 else start
    limit = limit + n if limit < 0 else limit
    starts = [0] * operand.ndim
    limits = list(operand.shape)
    strides = [1] * operand.ndim
    starts[axis], limits[axis], strides[axis] = start, limit, stride
    return slice(operand, starts, limits, strides)


def index_in_dim(operand, index, axis=0, keepdims=True):
    (operand,) = _args("index_in_dim", operand)
    axis = operator.index(axis) % operand.ndim
    index = operator.index(index)
    if index < 0:
        index += operand.shape[axis]
    out = slice_in_dim(operand, index, index + 1, 1, axis)
    return out if keepdims else squeeze(out, (axis,))


def _index_scalars(opname, idx, dims=None):
    """Scalar integer start indices, all of one dtype (JAX's rule; a Python int has the default int
    dtype); with dims, a negative one counts from the end (as JAX's dynamic_slice /
    dynamic_update_slice; the primitive then clamps into range)."""
    out = [_own_dtype(i, None, opname) for i in idx]
    for a in out:
        if a.shape != ():
            raise TypeError(f"{opname}: start indices must be scalars, got shape {a.shape}")
    if out and (out[0].dtype.kind not in "iu" or any(a.dtype != out[0].dtype for a in out)):
        raise TypeError(f"index arguments to {opname} must be integers of the same type, got"
                        f"{':' if opname == 'dynamic_slice' else ''} {', '.join(str(a.dtype) for a in out)}")
    for k, a in enumerate(out):
        if dims is not None and isinstance(idx[k], (_int, np.integer)) and idx[k] < 0:
            a = _to_array(_int(idx[k]) + dims[k], None, opname)
        if a.dtype != np.int32 and a.dtype != np.int64:
            a = convert_element_type(a, np.int32)
        if dims is not None and not isinstance(idx[k], (_int, np.integer)) and a.dtype.kind == "i":
            a = select(lt(a, _to_array(0, a)), add(a, _to_array(dims[k], a)), a)
        out[k] = a
    return out


def dynamic_slice(operand, start_indices, slice_sizes):
    (operand,) = _args("dynamic_slice", operand)
    if len(start_indices) != operand.ndim:
        raise ValueError(f"dynamic_slice: got {len(start_indices)} start indices for an operand of rank {operand.ndim}")
    idx = _index_scalars("dynamic_slice", start_indices, operand.shape)
    return bind1("dynamic_slice", [operand] + idx, {"slice_sizes": _shape(slice_sizes, "slice_sizes")})


def _starts_in_dim(ndim, start_index, axis):
    """Start indices all 0 but start_index at axis, the zeros of start_index's dtype (JAX's, so an
    int8 index passes the same-dtype rule)."""
    zero = start_index.dtype.type(0) if isinstance(start_index, np.generic) else \
        _to_array(0, start_index) if isinstance(start_index, Array) else 0
    starts = [zero] * ndim
    starts[axis] = start_index
    return starts


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0):
    (operand,) = _args("dynamic_slice_in_dim", operand)
    axis = operator.index(axis) % operand.ndim
    sizes = list(operand.shape)
    sizes[axis] = slice_size
    return dynamic_slice(operand, _starts_in_dim(operand.ndim, start_index, axis), sizes)


def dynamic_update_slice(operand, update, start_indices):
    operand, update = _same_dtype_args("dynamic_update_slice", operand, update)
    if update.ndim != operand.ndim:
        raise TypeError(f"dynamic_update_slice update must have the same rank as operand, got update shape "
                        f"{update.shape} for operand shape {operand.shape}.")
    if any(u > o for u, o in zip(update.shape, operand.shape)):
        raise TypeError(f"dynamic_update_slice update shape must be smaller than operand shape, got update "
                        f"shape {update.shape} for operand shape {operand.shape}.")
    if len(start_indices) != operand.ndim:
        raise ValueError(f"dynamic_update_slice: got {len(start_indices)} start indices for an operand of rank {operand.ndim}")
    idx = _index_scalars("dynamic_update_slice", start_indices, operand.shape)
    return bind1("dynamic_update_slice", [operand, update] + idx, update_params())


def dynamic_update_slice_in_dim(operand, update, start_index, axis):
    (operand,) = _args("dynamic_update_slice_in_dim", operand)
    axis = operator.index(axis) % operand.ndim
    return dynamic_update_slice(operand, update, _starts_in_dim(operand.ndim, start_index, axis))


def concatenate(operands, dimension):
    ops = _same_dtype_args("concatenate", *operands) if len(operands) > 1 else _args("concatenate", *operands)
    if not ops:
        raise ValueError("concatenate: needs at least one operand")
    if len(ops) == 1:
        return ops[0]
    return bind1("concatenate", ops, {"dimension": operator.index(dimension)})


def pad(operand, padding_value, padding_config):
    (operand,) = _args("pad", operand)
    pv = _own_dtype(padding_value, operand if isinstance(operand, Tracer) else None, "pad")
    if pv.dtype != operand.dtype:
        raise TypeError(f"pad operand and padding_value must be same dtype: got {operand.dtype} and {pv.dtype}.")
    cfg = [tuple(operator.index(v) for v in c) for c in padding_config]
    if len(cfg) != operand.ndim or any(len(c) != 3 for c in cfg):
        raise ValueError(f"pad: padding_config needs one (low, high, interior) triple per dimension of {operand.shape}")
    return bind1("pad", [operand, pv], {"low": [c[0] for c in cfg], "high": [c[1] for c in cfg],
                                        "interior": [c[2] for c in cfg]})


def iota(dtype, size):
    return broadcasted_iota(dtype, (size,), 0)


def broadcasted_iota(dtype, shape, dimension):
    dtype = dtypes.canonicalize_dtype(dtype)
    return bind1("iota", [], {"dtype": dtype.name, "shape": _shape(shape), "dimension": operator.index(dimension)})


def full(shape, fill_value, dtype=None):
    return _full(shape, fill_value, dtype, False)


def _full(shape, fill_value, dtype, weak_type):
    """full(); weak_type (with a dtype): the result is weakly typed, as full_like's of a weak x."""
    shape = _shape(shape)
    if dtype is not None and type(fill_value) is int:
        # a Python int goes straight to dtype, wrapping as JAX's conversion does (full((2,), 2**32 - 1,
        # uint32) never passes through the default int)
        dtype = dtypes.canonicalize_dtype(dtype)
        v = core.scalar_constant(np.array(fill_value).astype(dtype)[()], dtype, weak_type)
        return broadcast_in_dim(v, shape, ())
    v = fill_value if isinstance(fill_value, Array) else core.asarray(fill_value)
    if not isinstance(fill_value, Array) and not isinstance(v, Tracer) and v.shape == ():
        # inside a trace the fill is a literal, so the broadcast is an equation the kernels
        # compute (as JAX stages it), never a constant array of the whole shape in memory, and a
        # 0-d fill is no constant input of the compiled program (threefry's 36 were, each copied
        # in at every launch)
        v = core.scalar_constant(v._value()[()], v.dtype, v.weak_type)
    if dtype is not None:
        v = convert_element_type(v, dtype, weak_type)
    if v.shape != ():
        raise TypeError(f"full: fill_value must be a scalar, got shape {v.shape}")
    return broadcast_in_dim(v, shape, ())


def full_like(x, fill_value, dtype=None, shape=None):
    """As JAX's: without a dtype the result keeps x's dtype and weak type (bug, issue 32: constants
    made this way inside composite ops turned a weak operand's result strong: int8 array // 2.0)."""
    return _full(x.shape if shape is None else shape, fill_value, dtype or x.dtype,
                 dtype is None and bool(getattr(x, "weak_type", False)))


def zeros_like_array(x):
    return full_like(x, 0)


# ---------------------------------------------------------------------------
# Reductions

def _axes(operand, axes, opname):
    out = []
    for a in axes:
        a = operator.index(a)
        if not -operand.ndim <= a < operand.ndim and operand.ndim:
            raise ValueError(f"{opname}: axis {a} is out of bounds for an array of rank {operand.ndim}")
        out.append(a % operand.ndim if operand.ndim else a)
    return tuple(out)


def _reducer(name):
    def op(operand, axes):
        (operand,) = _args(name, operand)
        return bind1(name, [operand], {"axes": _axes(operand, axes, name)})
    op.__name__ = name
    return op


reduce_sum = _reducer("reduce_sum")
reduce_prod = _reducer("reduce_prod")
reduce_max = _reducer("reduce_max")
reduce_min = _reducer("reduce_min")
reduce_and = _reducer("reduce_and")
reduce_or = _reducer("reduce_or")


def reduce(operands, init_values, computation, dimensions):
    """computation folded over `dimensions` of operands (a pytree of arrays, init_values the same
    tree of scalars), as XLA's Reduce: lax.add/mul/max/min (and bitwise and/or on bools) with
    their identity as init become the reduction primitives; any other (associative) computation,
    also over several operands at once (value and index pairs), is applied in halving rounds:
    log2(n) elementwise steps per dimension."""
    from kiln._src import tree_util
    leaves, tree = tree_util.tree_flatten(operands)
    inits, itree = tree_util.tree_flatten(init_values)
    if tree != itree or not leaves:
        raise TypeError(f"reduce: operands {tree} and init_values {itree} must be the same tree of arrays")
    leaves = [core.asarray(x) for x in leaves]
    inits = [_to_array(v, x, "reduce") for v, x in zip(inits, leaves)]
    dims = _axes(leaves[0], dimensions, "reduce")
    if any(x.shape != leaves[0].shape for x in leaves):
        raise TypeError(f"reduce: operands must have one shape, got {[x.shape for x in leaves]}")
    if len(leaves) == 1:
        x, init = leaves[0], inits[0]
        prim = {add: "sum", mul: "prod", max: "max", min: "min"}.get(computation)
        if x.dtype == np.bool_ and computation in (bitwise_and, bitwise_or):
            prim = "and" if computation is bitwise_and else "or"
        if prim is not None:
            r = {"sum": reduce_sum, "prod": reduce_prod, "max": reduce_max, "min": reduce_min, "and": reduce_and,
                 "or": reduce_or}[prim](x, dims)
            ident = {"sum": 0, "prod": 1, "and": True, "or": False}.get(prim)
            if ident is not None and _has_value(init) and np.all(np.asarray(init) == ident):
                return tree_util.tree_unflatten(tree, [r])
            if prim in ("max", "min") and _has_value(init) and _extreme_identity(init, prim):
                return tree_util.tree_unflatten(tree, [r])
            return tree_util.tree_unflatten(tree, [computation(r, init)])
    xs = leaves
    for d in sorted(dims, reverse=True):
        while xs[0].shape[d] > 1:
            n = xs[0].shape[d]
            if n % 2:  # an odd length: pad with the init values (the computation's identity)
                xs = [pad(x, i, [(0, 1 if a == d else 0, 0) for a in range(x.ndim)]) for x, i in zip(xs, inits)]
                n += 1
            lo = [slice_in_dim(x, 0, n // 2, axis=d) for x in xs]
            hi = [slice_in_dim(x, n // 2, n, axis=d) for x in xs]
            out = computation(tree_util.tree_unflatten(tree, lo), tree_util.tree_unflatten(tree, hi))
            xs = [core.asarray(o) for o in tree_util.tree_leaves(out)]
        if xs[0].shape[d] == 0:
            xs = [broadcast_in_dim(i, x.shape[:d] + x.shape[d + 1:], ()) for x, i in zip(xs, inits)]
            continue
        xs = [squeeze(x, (d,)) for x in xs]
    init_tree = tree_util.tree_unflatten(tree, [broadcast_in_dim(i, x.shape, ()) for x, i in zip(xs, inits)])
    out = computation(tree_util.tree_unflatten(tree, xs), init_tree)  # the init value joins once, as in XLA
    return out


def _extreme_identity(init, prim):
    v = np.asarray(init)
    if v.dtype.kind == "f":
        return bool(np.all(v == (-np.inf if prim == "max" else np.inf)))
    info = np.iinfo(v.dtype) if v.dtype.kind in "iu" else None
    return info is not None and bool(np.all(v == (info.min if prim == "max" else info.max)))


def _arg_reducer(name):
    def op(operand, axis, index_dtype):
        """The index of the extreme along axis, in index_dtype: any integer type, as JAX's (the
        primitive makes int32/int64; a narrower type is a conversion of that, wrapping as JAX's)."""
        (operand,) = _args(name, operand)
        idt = dtypes.canonicalize_dtype(index_dtype)
        if idt.kind not in "iu":
            raise TypeError(f"index_dtype must be an integer type, but got {idt}")
        made = idt if idt in (np.int32, np.int64) else np.dtype(np.int32)
        out = bind1(name, [operand], {"axes": _axes(operand, (axis,), name), "index_dtype": made.name})
        return out if made == idt else convert_element_type(out, idt)
    op.__name__ = name
    return op


argmax = _arg_reducer("argmax")
argmin = _arg_reducer("argmin")


def _cumulative(name):
    def op(operand, axis=0, reverse=False):
        (operand,) = _args(name, operand)
        return bind1(name, [operand], {"axis": _axes(operand, (axis,), name)[0], "reverse": _int(_bool(reverse))})
    op.__name__ = name
    return op


cumsum = _cumulative("cumsum")
cumprod = _cumulative("cumprod")
cummax = _cumulative("cummax")
cummin = _cumulative("cummin")


def _sort(operands, dimension, num_keys, **hints):
    ops = _args("sort", *operands)
    dim = _axes(ops[0], (dimension,), "sort")[0]
    return bind("sort", ops, {"dimension": dim, "num_keys": operator.index(num_keys), **hints})


def sort(operand, dimension=-1, is_stable=True, num_keys=1):
    single = not isinstance(operand, (tuple, list))
    outs = _sort([operand] if single else operand, dimension, num_keys)
    return outs[0] if single else tuple(outs)


def sort_key_val(keys, values, dimension=-1, is_stable=True):
    return sort((keys, values), dimension, is_stable, 1)


def _sort_key_val_random(keys, values, dimension):
    """sort_key_val where keys are fresh uniform random bits (random.permutation's): the same
    result, with a hint the GPU sort uses (it may finish the last digit inside runs of equal
    higher digits, short for such keys); never printed."""
    return tuple(_sort((keys, values), dimension, 1, random_keys=1))


# ---------------------------------------------------------------------------
# Contractions

_CONFIG_PRECISION = {None: 0, "default": 0, "fastest": 0, "bfloat16": 0, "tensorfloat32": 1, "high": 1,
                     "bfloat16_3x": 1, "highest": 2, "float32": 2}


def _precision_code(precision):
    if precision is None:
        from kiln._src.config import config
        return _CONFIG_PRECISION[config.jax_default_matmul_precision]
    if isinstance(precision, (tuple, list)):
        precision = builtins.max((p for p in precision if p is not None), key=lambda p: Precision(p).value if not isinstance(p, str) else Precision[p.upper()].value, default=None)
        if precision is None:
            return 0
    if isinstance(precision, str):
        return Precision[precision.upper()].value
    return Precision(precision).value


def _dot_type_rank(dt):
    """XLA's HigherPrecisionType order (JAX's dot_general dtype rule): complex, then exponent range,
    mantissa, bit width, signed over unsigned."""
    dt = np.dtype(dt)
    c = np.dtype(dtypes.finfo(dt).dtype) if dt.kind == "c" else dt
    fl = dtypes.is_float_dtype(c)
    return (dt.kind == "c", int(dtypes.finfo(c).maxexp) if fl else -1, int(dtypes.finfo(c).nmant) if fl else -1,
            1 if c == np.bool_ else c.itemsize * 8, c.kind != "u")


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    lhs, rhs = _args("dot_general", lhs, rhs)
    if lhs.dtype != rhs.dtype:
        # bug (issue 32, fuzzer): operands of two dtypes were refused; JAX computes in the higher of
        # the two by XLA's order (int8 x uint32 -> uint32, uint8 x int8 -> int8, float32 x int16 ->
        # float32), the other operand converted to it, or, given a preferred_element_type, with both
        # converted to that (XLA's operand upcasting: float32 [-1.7] x uint32 [3] as int32 is -3)
        lr, rr = _dot_type_rank(lhs.dtype), _dot_type_rank(rhs.dtype)
        if lr == rr:
            raise TypeError(f"lax.dot_general argument type error: {lhs.dtype}, {rhs.dtype}")
        to = lhs.dtype if lr > rr else rhs.dtype
        if preferred_element_type is not None:
            pet = np.dtype(dtypes.canonicalize_dtype(preferred_element_type))
            def bits(dt):  # JAX's _bit_width: bool is 1 bit, a complex type its part's width
                return 1 if dt == np.bool_ else 8 * dt.itemsize // (2 if dt.kind == "c" else 1)
            if not dtypes.is_float_dtype(to) and bits(pet) < bits(np.dtype(to)):
                raise TypeError("`preferred_element_type` must not be narrower than the original type, got "
                                f"preferred_element_type of {pet} for result type of {np.dtype(to)}.")
            to = pet
        lhs, rhs = convert_element_type(lhs, to), convert_element_type(rhs, to)
    (lc, rc), (lb, rb) = dimension_numbers
    params = {"lhs_contracting": tuple(lc), "rhs_contracting": tuple(rc), "lhs_batch": tuple(lb),
              "rhs_batch": tuple(rb), "precision": _precision_code(precision)}
    if preferred_element_type is not None:
        params["preferred_element_type"] = dtypes.canonicalize_dtype(preferred_element_type).name
    return bind1("dot_general", [lhs, rhs], params)


def dot(lhs, rhs, precision=None, preferred_element_type=None):
    lhs, rhs = _args("dot", lhs, rhs)
    if lhs.ndim not in (1, 2) or rhs.ndim not in (1, 2):
        raise TypeError(f"dot: expects vectors or matrices, got shapes {lhs.shape} and {rhs.shape}")
    return dot_general(lhs, rhs, (((lhs.ndim - 1,), (0,)), ((), ())), precision, preferred_element_type)


def batch_matmul(lhs, rhs, precision=None):
    lhs, rhs = _args("batch_matmul", lhs, rhs)
    b = tuple(builtins.range(lhs.ndim - 2))
    return dot_general(lhs, rhs, (((lhs.ndim - 1,), (rhs.ndim - 2,)), (b, b)), precision)


# ---------------------------------------------------------------------------
# kiln-specific gather/scatter along one axis (the building blocks of jnp indexing)

def _take(operand, indices, axis):
    operand, = _args("take", operand)
    indices = core.asarray(indices) if not isinstance(indices, Array) else indices
    if indices.dtype.kind not in "iu":
        raise TypeError(f"take: indices must be integers, got {indices.dtype}")
    return bind1("take", [operand, indices], {"axis": _axes(operand, (axis,), "take")[0]})


_SCATTER_OPS = {"set": 0, "add": 1, "mul": 2, "min": 3, "max": 4}


def _scatter(operand, indices, updates, axis, op):
    operand, = _args("scatter", operand)
    indices = core.asarray(indices) if not isinstance(indices, Array) else indices
    updates = _to_array(updates, operand, "scatter")
    if op not in _SCATTER_OPS:
        raise ValueError(f"scatter: unknown op {op!r}; expected one of {sorted(_SCATTER_OPS)}")
    return bind1("scatter", [operand, indices, updates],
                 update_params({"axis": _axes(operand, (axis,), "scatter")[0], "op": _SCATTER_OPS[op]}))


# ---------------------------------------------------------------------------
# Control flow. On concrete values (eagerly, or under grad outside jit) loops run as Python and
# cond/switch call the taken branch. Under a trace, while_loop, scan and fori_loop become while
# and scan equations whose bodies are sub-programs (compiled once, whatever the trip count;
# transforms/rules/control.c differentiates and batches them); cond/switch become cond
# equations, which run only the branch their predicate names.


def _has_value(x):
    """True for a concrete value (also a tracer of a concrete trace, i.e. grad outside jit)."""
    return not isinstance(x, Tracer) or x._cval is not None


def _branch0_types(fun, operands):
    """Branch 0's output types under a trace (where _untaken_output gives none): fun traced in a
    sub-trace of this one; None where it cannot be (the results then keep the taken branch's)."""
    try:
        leaves, tree = _operand_leaves(operands)
        return _branch(fun, leaves, tree)[2]
    except Exception:
        return None


def _weak_as_branch0(out, first):
    """out (the taken branch's result) with the weak types of branch 0's (`first`, its output
    types or None): JAX's cond and switch results have branch 0's types (cond's false branch)."""
    from kiln._src import tree_util
    if first is None:
        return out
    o_leaves, o_tree = tree_util.tree_flatten(out)
    f_leaves = tree_util.tree_leaves(first)
    if len(o_leaves) != len(f_leaves):
        return out
    return tree_util.tree_unflatten(o_tree, [
        convert_element_type(o, o.dtype, weak_type=bool(f.weak_type))
        if isinstance(o, Array) and bool(getattr(o, "weak_type", False)) != bool(getattr(f, "weak_type", False))
        and o.dtype == getattr(f, "dtype", None) else o for o, f in zip(o_leaves, f_leaves)])


def _results_as_arrays(tree):
    """A control-flow result with Python scalars and NumPy values as arrays (JAX's cond returns
    arrays, weakly typed for Python scalars, also when its predicate is concrete)."""
    from kiln._src import tree_util

    def leaf(x):
        if isinstance(x, (_bool, _int, _float, _complex_t, np.ndarray, np.generic)) and not isinstance(x, Array):
            return core.asarray(x)
        return x
    return tree_util.tree_map(leaf, tree)


def _as_arrays(tree):
    """tree with its leaves as arrays, as JAX's control flow hands them to its functions, also when
    kiln runs those eagerly: NumPy values always, Python scalars (weakly typed) outside a trace. Under
    one, a Python scalar stays one, so a loop counter keeps deciding a concrete predicate (how kiln
    differentiates a while_loop nested in a scan)."""
    from kiln._src import tree_util
    tracing = core.tracing()

    def leaf(x):
        if isinstance(x, Array) or (tracing and isinstance(x, (_bool, _int, _float, _complex_t))):
            return x
        return core.asarray(x)
    return tree_util.tree_map(leaf, tree)


def _check_pred(name, pred):
    """pred, after JAX's checks: a scalar (TypeError otherwise) of bool or number type. Returned as
    given (a Python bool stays one: under a trace an array made of it would be a tracer)."""
    if isinstance(pred, (str, bytes)) or pred is None:
        raise TypeError(f"{name}: Pred must be a scalar, got {pred!r} of type {type(pred)}")
    t = pred if isinstance(pred, Array) else np.asarray(pred)
    if t.shape != ():
        raise TypeError(f"{name}: Pred must be a scalar, got shape {tuple(t.shape)}")
    if np.dtype(t.dtype).kind == "c" or np.dtype(t.dtype).kind not in "biuf" and np.dtype(t.dtype) != dtypes.bfloat16:
        raise TypeError(f"{name}: Pred type must be either boolean or number, got {t.dtype}")
    return pred


def _check_index(index):
    """switch's index, after JAX's checks: an integer scalar (TypeError otherwise); returned as given."""
    t = index if isinstance(index, Array) else np.asarray(index)
    if t.shape != ():
        raise TypeError(f"switch: Branch index must be scalar, got shape {tuple(t.shape)}")
    if np.dtype(t.dtype).kind not in "iu":
        raise TypeError(f"switch: Index type must be an integer, got {t.dtype}")
    return index


def _as_bool_scalar(name, pred):
    pred = _check_pred(name, pred)
    pred = core.asarray(pred) if not isinstance(pred, Array) else pred
    return pred if pred.dtype == np.bool_ else ne(pred, _to_array(0, pred))


_untaken_types = weakref.WeakKeyDictionary()  # branch function -> {operand types: its output types}


def _untaken_output(fun, operands):
    """The output types of a branch a concrete predicate does not take (JAX checks every branch),
    traced on stand-ins of the operands, once per function and operand types (a trace costs
    ~70 us, eager cond ~5); None under a transformation, where its closures may hold another
    trace's values."""
    if core.tracing():
        return None
    from kiln._src import api, tree_util
    leaves, tree = tree_util.tree_flatten(operands)
    types = tuple((tuple(a.shape), a.dtype, bool(getattr(a, "weak_type", False))) for a in
                  (x if hasattr(x, "dtype") and hasattr(x, "shape") else core.asarray(x) for x in leaves))
    try:
        known = _untaken_types.setdefault(fun, {})
    except TypeError:  # not weakly referable: no cache
        known = {}
    if (tree, types) not in known:
        specs = [api.ShapeDtypeStruct(*t) for t in types]
        known[(tree, types)] = api._eval_shape(lambda *xs: fun(*tree_util.tree_unflatten(tree, list(xs))), *specs)
    return known[(tree, types)]


class _Type:
    """A branch output's type, kept after its trace ended (for the checks of cond/switch)."""
    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, x):
        self.shape, self.dtype, self.weak_type = tuple(x.shape), x.dtype, bool(getattr(x, "weak_type", False))


def _with_refs(fun, rs):
    """fun(*args) as g(*args, vals) -> (fun's result, the values of Refs rs after it), rs holding
    vals inside: a cond branch's or loop body's outer Refs as operands and results (refs.py)."""
    def g(*args):
        with refs.bound(rs, args[-1]) as b:
            out = fun(*args[:-1])
            return out, b.values()
    return g


def _branch(fun, leaves, tree, touched=None):
    """fun traced on the operands' types into a branch body: (body, consts, output types tree)."""
    from kiln._src import tree_util
    from kiln._src.custom import _trace_sub
    info = {}

    def flat(*xs):
        out = fun(*tree_util.tree_unflatten(tree, list(xs)))
        o_leaves, o_tree = tree_util.tree_flatten(out)
        o_leaves = [core.asarray(x) for x in o_leaves]
        info["out"] = tree_util.tree_unflatten(o_tree, [_Type(x) for x in o_leaves])
        return o_leaves

    body, consts, _ = _trace_sub(flat, leaves, touched=touched, carries=())
    return body, list(consts), info["out"]


def _bind_cond(pred, false_branch, true_branch, leaves):
    """A cond equation: true_branch (body, consts) if pred else false_branch, on leaves."""
    (fb, fc), (tb, tc) = false_branch[:2], true_branch[:2]
    return core.bind("cond", [pred] + fc + tc + list(leaves),
                     {"counts": (len(fc), len(tc), len(leaves)), "false_branch": fb, "true_branch": tb})


def _operand_leaves(operands):
    from kiln._src import tree_util
    leaves, tree = tree_util.tree_flatten(operands)
    return [core.asarray(x) for x in leaves], tree


_NO_OPERAND = object()


@thread_state.control_flow_body
def cond(pred, true_fun, false_fun, *operands, operand=_NO_OPERAND):
    """true_fun(*operands) if pred else false_fun(*operands). A concrete predicate calls the taken
    branch (and checks the other's types); a traced one makes a cond equation, which runs only the
    branch its predicate names (under vmap with a batched predicate, both, selected per example).
    JAX's older forms are accepted: operand= (one operand), and cond(pred, true_operand, true_fun,
    false_operand, false_fun)."""
    from kiln._src import control_checks, tree_util
    if operand is not _NO_OPERAND:
        if operands:
            raise TypeError("cond: pass the operands positionally or as operand=, not both")
        operands = (operand,)
    if not callable(true_fun) and len(operands) == 2 and callable(false_fun) and callable(operands[1]):
        # the old five-argument form: cond(pred, true_operand, true_fun, false_operand, false_fun)
        t_op, t_fun, f_op, f_fun = true_fun, false_fun, operands[0], operands[1]
        return cond(pred, lambda ops: t_fun(ops[0]), lambda ops: f_fun(ops[1]), (t_op, f_op))
    if _has_value(pred):
        taken = _bool(_check_pred("cond", pred))
        operands = _as_arrays(operands)  # the branches see arrays, as JAX's do
        out = true_fun(*operands) if taken else false_fun(*operands)
        other = _untaken_output(false_fun if taken else true_fun, operands)
        if other is not None:
            t_out, f_out = (out, other) if taken else (other, out)
            control_checks.check_branches("cond", "true_fun", true_fun, t_out, "false_fun", false_fun, f_out)
        out = _results_as_arrays(out)
        return _weak_as_branch0(out, other if other is not None else _branch0_types(false_fun, operands)) \
            if taken else out
    p = _as_bool_scalar("cond", pred)
    leaves, tree = _operand_leaves(operands)
    touched = []
    t, f = _branch(true_fun, leaves, tree, touched), _branch(false_fun, leaves, tree, touched)
    if touched:  # outer Refs: their values in as an operand, out as a result of both branches
        out, vals = cond(p, _with_refs(true_fun, touched), _with_refs(false_fun, touched), *operands,
                         refs.values(touched))
        refs.store(touched, vals)
        return out
    control_checks.check_branches("cond", "true_fun", true_fun, t[2], "false_fun", false_fun, f[2])
    return tree_util.tree_unflatten(tree_util.tree_structure(t[2]), list(_bind_cond(p, f, t, leaves)))


@thread_state.control_flow_body
def switch(index, branches, *operands):
    """branches[clamp(index, 0, len(branches) - 1)](*operands). A traced index makes cond
    equations, nested: branch k if index <= k, else the rest."""
    from kiln._src import control_checks, tree_util
    from kiln._src.custom import _trace_sub
    branches = list(branches)
    if not branches:
        raise ValueError("switch: needs at least one branch")
    if _has_value(index):
        i = builtins.min(builtins.max(_int(_check_index(index)), 0), len(branches) - 1)
        operands = _as_arrays(operands)  # the branches see arrays, as JAX's do
        out = branches[i](*operands)
        outs = [out if j == i else _untaken_output(b, operands) for j, b in enumerate(branches)]
        for j in builtins.range(1, len(branches)):
            if outs[0] is not None and outs[j] is not None:
                control_checks.check_branches("switch", "branch 0", branches[0], outs[0], f"branch{j}", branches[j],
                                              outs[j])
        out = _results_as_arrays(out)
        return _weak_as_branch0(out, outs[0] if outs[0] is not None else _branch0_types(branches[0], operands)) \
            if i else out
    idx = _check_index(index)
    idx = core.asarray(idx) if not isinstance(idx, Array) else idx
    if len(branches) == 1:
        return branches[0](*operands)
    leaves, tree = _operand_leaves(operands)
    touched = []
    traced = [_branch(b, leaves, tree, touched) for b in branches]
    if touched:  # outer Refs, as in cond
        out, vals = switch(idx, [_with_refs(b, touched) for b in branches], *operands, refs.values(touched))
        refs.store(touched, vals)
        return out
    for i in builtins.range(1, len(branches)):
        control_checks.check_branches("switch", "branch 0", branches[0], traced[0][2], f"branch{i}", branches[i],
                                      traced[i][2])
    out_tree = tree_util.tree_structure(traced[0][2])

    def rest(k):  # (body, consts) of branches k.. chosen by idx
        if k == len(branches) - 1:
            return traced[k]

        def flat(*xs):
            return list(_bind_cond(gt(idx, _to_array(k, idx)), traced[k], rest(k + 1), xs))
        body, consts, _ = _trace_sub(flat, leaves)
        return body, list(consts)

    # branch k is the false branch of its cond: the results have branch 0's types, as JAX's
    return tree_util.tree_unflatten(out_tree, list(_bind_cond(gt(idx, _to_array(0, idx)), traced[0], rest(1), leaves)))


def _fori_equation(lower, upper, body_fun, init_val):
    """fori_loop as a while equation over (i, upper, val), as JAX makes it for traced bounds."""
    lo, hi = core.asarray(lower), core.asarray(upper)
    if lo.dtype.kind not in "iu" or hi.dtype.kind not in "iu" or lo.shape != () or hi.shape != ():
        raise TypeError(f"fori_loop: lower and upper must be integer scalars, got {lo.dtype.name}{list(lo.shape)} "
                        f"and {hi.dtype.name}{list(hi.shape)}")
    if lo.dtype != hi.dtype:
        lo, hi = (convert_element_type(lo, hi.dtype), hi) if lo.weak_type else (lo, convert_element_type(hi, lo.dtype))

    def cond(loop_carry):
        return lt(loop_carry[0], loop_carry[1])

    def body(loop_carry):
        i, n, x = loop_carry
        return add(i, _to_array(1, i)), n, body_fun(i, x)

    return _while_equation(cond, body, (lo, hi, init_val))[2]


@thread_state.control_flow_body
def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
    from kiln._src import control_checks
    if not _has_value(lower) or not _has_value(upper):  # traced bounds: a real loop
        return _fori_equation(lower, upper, body_fun, init_val)
    lo, hi = _int(lower), _int(upper)
    if core.tracing() and hi > lo and not (unroll is True or (unroll is not None and _int(unroll) >= hi - lo)):
        # static bounds under a trace: a scan over (i, val), as JAX makes it, i a weakly typed int
        # (JAX's int(lower)): an int8 carry plus i stays int8
        i0 = core.asarray(lo)

        def step(loop_carry, _):  # the name JAX's messages give the carry
            i, x = loop_carry
            return (add(i, _to_array(1, i)), body_fun(i, x)), None

        return scan(step, (i0, init_val), None, length=hi - lo, unroll=1 if unroll in (None, False) else unroll)[0][1]
    if hi - lo > _EAGER_TRIPS_MAX and not (unroll is True or (unroll is not None and _int(unroll) >= hi - lo)):
        return _compiled(lambda body: lambda v: fori_loop(lo, hi, body, v, unroll=unroll), (body_fun,),
                         ("fori_loop", lo, hi, unroll), init_val)  # (a scan)
    # the body sees arrays, as JAX's; its index stays a Python int (JAX's is a weakly typed int32 array:
    # the same arithmetic, without a device scalar made at every step)
    val = _as_arrays(init_val)
    for i in builtins.range(lo, hi):
        before = control_checks.snapshot(val) if i == lo else None  # (the body may mutate its carry's nodes)
        out = body_fun(i, val)
        # checked as JAX checks the scan it makes of a loop with static bounds, carry (i, val)
        if i == lo and control_checks.check_carry("scan body", "loop_carry", (i, before), (i, out)):
            val = control_checks.promote_weak(before, out)  # a weak-typed init takes the body's dtype
            out = body_fun(i, val)
        val = out
    return val


def _while_equation(cond_fun, body_fun, init_val):
    """A while equation: cond_fun and body_fun traced once into sub-programs over the carries'
    types, run as a loop by the executable (any trip count, one compilation)."""
    from kiln._src import control_checks, tree_util
    from kiln._src.custom import _trace_sub
    leaves, tree = tree_util.tree_flatten(init_val)
    leaves = [core.asarray(x) for x in leaves]
    carry = control_checks.carry_name(body_fun)
    state = {"promote": False}

    def cond_flat(*xs):
        c = cond_fun(tree_util.tree_unflatten(tree, list(xs)))
        c = core.asarray(c) if not isinstance(c, Array) else c
        if c.shape != () or c.dtype != np.bool_:
            raise TypeError("cond_fun must return a boolean scalar, but got output type(s) "
                            f"[ShapedArray({c.dtype.name}[{','.join(str(d) for d in c.shape)}])].")
        return [c]

    def body_flat(*xs):
        init = tree_util.tree_unflatten(tree, list(xs))
        out = body_fun(init)  # (checked against a fresh copy: the body may mutate its carry's nodes)
        if control_checks.check_carry("while_loop body", carry, tree_util.tree_unflatten(tree, list(xs)), out):
            state["promote"] = True
        return [core.asarray(o) for o in tree_util.tree_leaves(out)]

    touched = []
    loop = [(i, i) for i in builtins.range(len(leaves))]  # (custom_vjp's perturbed flags)
    body_id, body_consts, out_avals = _trace_sub(body_flat, leaves, touched=touched, carries=loop)
    if state["promote"]:  # a weak-typed initial carry takes the body's dtype, as in JAX
        leaves = [convert_element_type(x, d) if x.dtype != d else x for x, (_, d, _) in zip(leaves, out_avals)]
        body_id, body_consts, _ = _trace_sub(body_flat, leaves, touched=touched, carries=loop)
    cond_id, cond_consts, _ = _trace_sub(cond_flat, leaves, touched=touched, carries=())
    if touched:  # outer Refs: carried along
        def cond2(c):
            with refs.bound(touched, c[1]):
                return cond_fun(c[0])

        def body2(c):
            with refs.bound(touched, c[1]) as b:
                out = body_fun(c[0])
                return out, b.values()
        out, vals = _while_equation(cond2, body2, (tree_util.tree_unflatten(tree, leaves), refs.values(touched)))
        refs.store(touched, vals)
        return out
    outs = core.bind("while", list(cond_consts) + list(body_consts) + leaves,
                     {"counts": (len(cond_consts), len(body_consts), len(leaves)), "cond": cond_id, "body": body_id})
    return tree_util.tree_unflatten(tree, list(outs))


_WHILE_UNROLL_MAX = 64
# Concrete loops of more trips than this compile (the bodies traced once, as JAX's always are:
# a body's side effects happen once, as flax nnx's tests count them, and Python control flow on
# the carry raises as in JAX); 0: every loop of at least one trip does. Fully unrolled loops
# (unroll=True) call the body per trip, as JAX's unrolled trace does.
_EAGER_TRIPS_MAX = 0


# body function -> {(loop kind, static params, the other functions): a jitted loop}: a concrete
# loop called again with the same functions reuses its trace (JAX caches a loop body's trace by
# the function and the carry's types: its body runs once over repeated calls, as flax nnx's tests
# count). The jitted loops reach the functions through weak references (no cycle keeps them).
_loop_jits = weakref.WeakKeyDictionary()


def _compiled(make, fns, static, *args):
    """make(*fns)(*args) run as one jitted program; the jit is cached by fns and `static`."""
    from kiln._src import api
    try:
        per = _loop_jits.setdefault(fns[0], {})
        key = (static,) + tuple(weakref.ref(f) for f in fns[1:])
        hash(key)
    except TypeError:  # a function that cannot be weakly referenced or hashed: traced every call
        return api.jit(make(*fns))(*args)
    jitted = per.get(key)
    if jitted is None:
        refs_ = [weakref.ref(f) for f in fns]
        jitted = per[key] = api.jit(lambda *a: make(*[r() for r in refs_])(*a))
    return jitted(*args)


@thread_state.control_flow_body
def while_loop(cond_fun, body_fun, init_val):
    """body_fun applied to the carry while cond_fun(carry) is true. Eagerly a Python loop; under
    a transformation a while equation, as in JAX (a real loop, compiled once), also when the
    condition is concrete at first (a Python counter, as `(0, x)`) — but under differentiation,
    where such a loop's first _WHILE_UNROLL_MAX trips run as Python (reverse mode through a while
    nested in a scan is not supported) and the rest is a while equation."""
    from kiln._src import control_checks
    val, checked, trips = _as_arrays(init_val), False, 0  # the functions see arrays, as JAX's
    while True:
        c = cond_fun(val) if not core.tracing() or core.ad_tracing() else None
        if c is not None:  # as JAX (and _while_equation): a boolean scalar, not a number
            t = c if isinstance(c, Array) else np.asarray(c)  # (a Python bool stays one)
            if t.shape != () or t.dtype != np.bool_:
                t_dtype = np.dtype(dtypes.canonicalize_dtype(t.dtype))
                raise TypeError("cond_fun must return a boolean scalar, but got output type(s) "
                                f"[ShapedArray({t_dtype.name}[{','.join(str(d) for d in t.shape)}])].")
        if c is None or not _has_value(c) or (trips >= _WHILE_UNROLL_MAX and core.tracing()):
            return _while_equation(cond_fun, body_fun, val)
        if trips >= _EAGER_TRIPS_MAX and not core.tracing() and _bool(c):  # a long loop: the rest compiled
            return _compiled(lambda body, cond: lambda v: _while_equation(cond, body, v), (body_fun, cond_fun),
                             ("while_loop",), val)
        trips += 1
        if not _bool(c):
            return val
        before = control_checks.snapshot(val) if not checked else None
        out = body_fun(val)
        if not checked:
            checked = True
            if control_checks.check_carry("while_loop body", control_checks.carry_name(body_fun), before, out):
                val = control_checks.promote_weak(before, out)  # a weak-typed init takes the body's dtype
                out = body_fun(val)
        val = out


@thread_state.control_flow_body
def scan(f, init, xs=None, length=None, reverse=False, unroll=1, _split_transpose=False):
    """JAX's scan: carry, ys = f(carry, x) over the leading axis of xs; returns (carry, stacked ys).
    (_split_transpose, a JAX scheduling hint for the transposed scan, is accepted: kiln's reverse
    mode is the same either way.)"""
    del _split_transpose
    from kiln._src import tree_util
    from kiln import numpy as jnp
    x_leaves, x_tree = tree_util.tree_flatten(xs)
    x_leaves = [core.asarray(x) for x in x_leaves]
    lengths = {x.shape[0] for x in x_leaves if x.ndim > 0}
    if any(x.ndim == 0 for x in x_leaves):
        raise ValueError("scan: every xs leaf needs a leading axis to scan over")
    if length is not None:
        lengths.add(_int(length))
    if len(lengths) != 1:
        raise ValueError(f"scan: inconsistent lengths {sorted(lengths)} (xs leading axes and length=)")
    n = lengths.pop()
    full = unroll is True or (not isinstance(unroll, bool) and _int(unroll) >= n)
    if not isinstance(unroll, bool) and _int(unroll) < 1:
        raise ValueError(f"scan: unroll must be a positive integer or a bool, got {unroll}")
    if core.tracing() and n > 0 and not full:
        k = 1 if unroll is False else _int(unroll)
        if k > 1:
            return _scan_unrolled(f, init, x_leaves, x_tree, n, reverse, k)
        return _scan_equation(f, init, x_leaves, x_tree, n, reverse)
    if n > _EAGER_TRIPS_MAX and not full:  # a long loop compiles, as JAX's always does
        return _compiled(lambda body: lambda c, x: scan(body, c, x, length=n, reverse=reverse, unroll=unroll), (f,),
                         ("scan", n, reverse, unroll), init, xs)
    carry, ys = _as_arrays(init), []  # the body sees arrays, as JAX's
    order = builtins.range(n - 1, -1, -1) if reverse else builtins.range(n)
    from kiln._src import control_checks
    for step, i in enumerate(order):
        x = tree_util.tree_unflatten(x_tree, [leaf[i] for leaf in x_leaves])
        before = control_checks.snapshot(carry) if step == 0 else None  # (the body may mutate its carry's nodes)
        out = f(carry, x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError(f"scan body output must be a pair (carry, y), got {type(out).__name__}"
                            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
        if step == 0 and control_checks.check_carry("scan body", control_checks.carry_name(f), before, out[0]):
            carry = control_checks.promote_weak(before, out[0])  # a weak-typed init takes the body's dtype
            out = f(carry, x)
        carry, y = out
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:  # length 0: the carry as given, ys empty of the types f would give them
        from kiln._src import api
        specs = [api.ShapeDtypeStruct(x.shape[1:], x.dtype, bool(getattr(x, "weak_type", False)))
                 for x in x_leaves]
        carry_specs = [api.ShapeDtypeStruct(core.asarray(c).shape, core.asarray(c).dtype,
                                            bool(getattr(core.asarray(c), "weak_type", False)))
                       for c in tree_util.tree_leaves(init)]
        c_tree = tree_util.tree_structure(init)

        def one(cs, xs_):
            x = tree_util.tree_unflatten(x_tree, list(xs_))
            return f(tree_util.tree_unflatten(c_tree, list(cs)), x)[1]
        y_shapes = api._eval_shape(one, carry_specs, specs)
        y_leaves, y_tree = tree_util.tree_flatten(y_shapes)
        empty = [jnp.zeros((0,) + tuple(y.shape), y.dtype) for y in y_leaves]
        return tree_util.tree_map(core.asarray, init), tree_util.tree_unflatten(y_tree, empty)
    y_leaves0, y_tree = tree_util.tree_flatten(ys[0])
    stacked = [jnp.stack([tree_util.tree_leaves(y)[k] for y in ys]) for k in builtins.range(len(y_leaves0))]
    return carry, tree_util.tree_unflatten(y_tree, stacked)


def _scan_unrolled(f, init, x_leaves, x_tree, n, reverse, k):
    """scan(..., unroll=k): a scan equation of n // k iterations whose body applies f to k slices
    in a row (fewer trips of the compiled loop, more fusion inside one), then the n % k left over
    (the last slices, or the first ones when reverse) unrolled; the same values as unroll=1."""
    from kiln._src import control_checks, tree_util
    from kiln import numpy as jnp
    m, r = divmod(n, k)
    cut = n - r if not reverse else r
    main = [x[:cut] if not reverse else x[cut:] for x in x_leaves]
    rest = [x[cut:] if not reverse else x[:cut] for x in x_leaves]
    grouped = [reshape(x, (m, k) + tuple(x.shape[1:])) for x in main]
    name = control_checks.carry_name(f)
    state = {"y_tree": None}

    def body(carry, xg):
        ys = []
        for j in (builtins.range(k - 1, -1, -1) if reverse else builtins.range(k)):
            x = tree_util.tree_unflatten(x_tree, [g[j] for g in xg])
            first = j == (k - 1 if reverse else 0)
            before = control_checks.snapshot(carry) if first else None
            new, y = f(carry, x)
            if first:
                control_checks.check_carry("scan body", name, before, new)
            carry = new
            ys.append(y)
        if reverse:
            ys.reverse()
        y_leaves, state["y_tree"] = tree_util.tree_flatten(ys[0])
        return carry, [jnp.stack([tree_util.tree_leaves(y)[i] for y in ys]) for i in builtins.range(len(y_leaves))]

    g_tree = tree_util.tree_structure(list(grouped))
    carry, ys = _scan_equation(body, init, grouped, g_tree, m, reverse) if grouped else \
        _scan_equation(lambda c, _: body(c, []), init, [], g_tree, m, reverse)
    ys = [reshape(y, (m * k,) + tuple(y.shape[2:])) for y in ys]
    if r:
        rest_xs = tree_util.tree_unflatten(x_tree, rest)
        carry, rys = scan(f, carry, rest_xs, length=r, reverse=reverse, unroll=True)
        r_leaves = tree_util.tree_leaves(rys)
        ys = [concatenate([a, b] if not reverse else [b, a], 0) for a, b in zip(ys, r_leaves)]
    return carry, tree_util.tree_unflatten(state["y_tree"], ys)


class _Slice:
    """The type of one slice of a scanned array (its leading axis dropped)."""
    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, x):
        self.shape, self.dtype, self.weak_type = tuple(x.shape[1:]), x.dtype, bool(getattr(x, "weak_type", False))


def _scan_equation(f, init, x_leaves, x_tree, n, reverse):
    """A scan equation: f traced once into a body over (consts, carries, x slices) -> (carries,
    y slices), run n times by the executable (one compilation, any length)."""
    from kiln._src import control_checks, tree_util
    from kiln._src.custom import _trace_sub
    c_leaves, c_tree = tree_util.tree_flatten(init)
    c_leaves = [core.asarray(c) for c in c_leaves]
    nc, carry_name = len(c_leaves), control_checks.carry_name(f)
    state = {"promote": False, "y_tree": None}

    def body_flat(*args):
        carry = tree_util.tree_unflatten(c_tree, list(args[:nc]))
        x = tree_util.tree_unflatten(x_tree, list(args[nc:]))
        out = f(carry, x)
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError(f"scan body output must be a pair (carry, y), got {type(out).__name__}"
                            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
        # checked against a fresh copy of the input: the body may mutate its carry's nodes (flax nnx's deques)
        if control_checks.check_carry("scan body", carry_name, tree_util.tree_unflatten(c_tree, list(args[:nc])),
                                      out[0]):
            state["promote"] = True
        y_leaves, state["y_tree"] = tree_util.tree_flatten(out[1])
        return [core.asarray(o) for o in tree_util.tree_leaves(out[0])] + [core.asarray(y) for y in y_leaves]

    slices = [_Slice(x) for x in x_leaves]
    touched = []
    loop = [(i, i) for i in builtins.range(nc)]  # (custom_vjp's perturbed flags: carries, then x slices)
    p_in = list(c_leaves) + list(x_leaves) if core.ad_tracing() else None  # (resolved lazily)
    body, consts, out_avals = _trace_sub(body_flat, c_leaves + slices, consts_first=True, touched=touched,
                                         carries=loop, perturbed_in=p_in)
    if state["promote"]:  # a weak-typed initial carry takes the body's dtype, as in JAX
        c_leaves = [convert_element_type(x, d) if x.dtype != d else x for x, (_, d, _) in zip(c_leaves, out_avals)]
        body, consts, out_avals = _trace_sub(body_flat, c_leaves + slices, consts_first=True, touched=touched,
                                             carries=loop, perturbed_in=p_in)
    if touched:  # outer Refs: carried along
        def g(c, x):
            with refs.bound(touched, c[1]) as b:
                c2, y = f(c[0], x)
                return (c2, b.values()), y
        (out, vals), ys = _scan_equation(g, (tree_util.tree_unflatten(c_tree, c_leaves), refs.values(touched)),
                                         x_leaves, x_tree, n, reverse)
        refs.store(touched, vals)
        return out, ys
    outs = core.bind("scan", list(consts) + c_leaves + list(x_leaves),
                     {"counts": (len(consts), nc, len(x_leaves)), "length": n, "reverse": int(bool(reverse)),
                      "body": body})
    return tree_util.tree_unflatten(c_tree, list(outs[:nc])), tree_util.tree_unflatten(state["y_tree"], list(outs[nc:]))


@thread_state.control_flow_body
def map(f, xs, *, batch_size=None):
    """f applied to each slice of xs along its leading axis, results stacked (a scan without
    carry). batch_size: slices go through vmap(f) batch_size at a time, the remainder last."""
    if batch_size is None:
        _, ys = scan(lambda c, x: (c, f(x)), None, xs)
        return ys
    from kiln._src import tree_util
    from kiln._src.batching import vmap
    from kiln import numpy as jnp
    bs = operator.index(batch_size)
    if bs <= 0:
        raise ValueError(f"lax.map: batch_size must be positive, got {bs}")
    leaves, tree = tree_util.tree_flatten(xs)
    leaves = [core.asarray(x) for x in leaves]
    if not leaves:
        raise ValueError("lax.map: xs has no arrays to map over")
    n = leaves[0].shape[0]
    full, rest = divmod(n, bs)
    parts = []
    if full:
        head = [x[:full * bs].reshape((full, bs) + x.shape[1:]) for x in leaves]
        _, ys = scan(lambda c, x: (c, vmap(f)(x)), None, tree_util.tree_unflatten(tree, head))
        parts.append(tree_util.tree_map(lambda y: y.reshape((full * bs,) + y.shape[2:]), ys))
    if rest:
        parts.append(vmap(f)(tree_util.tree_unflatten(tree, [x[full * bs:] for x in leaves])))
    if len(parts) == 1:
        return parts[0]
    return tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), parts[0], parts[1])


def associative_scan(fn, elems, reverse=False, axis=0):
    """Inclusive scan of elems along axis with an associative fn(a, b) applied elementwise over
    that axis: [e0, fn(e0, e1), fn(fn(e0, e1), e2), ...] (reverse: the same from the end),
    computed in O(log n) rounds of vectorized calls. Each round combines neighbouring pairs,
    scans the half as long sequence of pair results (the prefixes at odd positions), and fills
    the even positions by combining each odd prefix with the element after it."""
    from kiln._src import tree_util
    if not callable(fn):
        raise TypeError("lax.associative_scan: fn argument should be callable.")
    leaves, tree = tree_util.tree_flatten(elems)
    leaves = [core.asarray(x) for x in leaves]
    if not leaves:
        return elems
    nd = leaves[0].ndim
    if not -nd <= axis < nd:
        raise ValueError(f"lax.associative_scan: axis {axis} is out of range for arrays of rank {nd}")
    ax = axis % nd
    n = leaves[0].shape[ax]
    if any(x.ndim <= ax or x.shape[ax] != n for x in leaves):
        raise ValueError("Array inputs to associative_scan must have the same first dimension. (saw: "
                         f"{[x.shape for x in leaves]})")
    if reverse:
        leaves = [rev(x, (ax,)) for x in leaves]

    def combine(a, b):
        out = fn(tree_util.tree_unflatten(tree, a), tree_util.tree_unflatten(tree, b))
        return [core.asarray(c) for c in tree_util.tree_leaves(out)]

    def part(x, start, stop, step=1):
        return slice_in_dim(x, start, stop, step, ax)

    def weave(even, odd, k):  # even[0], odd[0], even[1], odd[1], ... along ax, k elements
        m = even.shape[ax]
        if odd.shape[ax] < m:  # one even element more: pad odd, weave, drop the pad
            cfg = [(0, 0, 0)] * odd.ndim
            cfg[ax] = (0, 1, 0)
            odd = pad(odd, _to_array(0, odd), cfg)
        both = concatenate([expand_dims(even, (ax + 1,)), expand_dims(odd, (ax + 1,))], ax + 1)
        out = reshape(both, even.shape[:ax] + (2 * m,) + even.shape[ax + 1:])
        return out if 2 * m == k else part(out, 0, k)

    def run(xs):
        k = xs[0].shape[ax]
        if k < 2:
            return xs
        odd = run(combine([part(x, 0, k - 1, 2) for x in xs], [part(x, 1, k, 2) for x in xs]))
        nxt = [part(x, 2, k, 2) for x in xs]
        even = combine([part(o, 0, o.shape[ax] - 1) for o in odd] if k % 2 == 0 else odd, nxt)
        even = [concatenate([part(x, 0, 1), e], ax) for x, e in zip(xs, even)]
        return [weave(e, o, k) for e, o in zip(even, odd)]

    out = run(leaves)
    if reverse:
        out = [rev(x, (ax,)) for x in out]
    return tree_util.tree_unflatten(tree, out)


from kiln.lax import linalg  # noqa: E402
from kiln.lax.conv import (ConvDimensionNumbers, conv, conv_dimension_numbers, conv_general_dilated,  # noqa: E402,F401
                           conv_general_dilated_patches, conv_transpose, conv_with_general_padding, padtype_to_pads,
                           reduce_window)
from kiln.lax.more import *  # noqa: E402,F401,F403


def __getattr__(name):
    """JAX's primitive objects (lax.add_p, lax.stop_gradient_p, ...): the Primitive of kiln's
    primitive of that name, for comparisons with a jaxpr's eqn.primitive and for binding."""
    if name.endswith("_p") and not name.startswith("_"):
        from kiln._src.primitive import primitive_named
        return primitive_named(name[:-2])
    raise AttributeError(f"module 'kiln.lax' has no attribute {name!r}")
