"""Dtype facts for kiln, with JAX's semantics: the supported dtypes, 32-bit
canonicalization unless jax_enable_x64, JAX's promotion lattice with weak
(Python-scalar) types, and the `jnp.float32`-style scalar type objects.

Pure Python over numpy and ml_dtypes; the only kiln import is the config
(kiln.numpy is imported lazily when a scalar type is called).
"""

import ml_dtypes
import numpy as np

from kiln._src.config import config

dtype = np.dtype

# ---------------------------------------------------------------------------
# The dtypes kiln supports.

_bool = np.dtype(np.bool_)
_i8, _i16, _i32, _i64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
_u8, _u16, _u32, _u64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
_f16, _f32, _f64 = (np.dtype(t) for t in (np.float16, np.float32, np.float64))
_bf16 = np.dtype(ml_dtypes.bfloat16)
_c64, _c128 = np.dtype(np.complex64), np.dtype(np.complex128)

supported_dtypes = (_bool, _i8, _i16, _i32, _i64, _u8, _u16, _u32, _u64,
                    _f16, _bf16, _f32, _f64, _c64, _c128)
_supported_set = frozenset(supported_dtypes)

# Dtypes whose numpy kind is not 'f' but which are floating point for kiln.
_custom_float_dtypes = frozenset([_bf16])

_to_32bit = {_i64: _i32, _u64: _u32, _f64: _f32, _c128: _c64}


def _unsupported_dtype_error(dt, original):
    names = ", ".join(d.name for d in supported_dtypes)
    shown = dt.name if dt is not None else repr(original)
    return TypeError(f"kiln does not support dtype {shown}; supported dtypes: {names}")


def _numpy_dtype(x):
    """np.dtype for any dtype-like (np.dtype, numpy/kiln scalar type, Python
    type, name string), checked to be one kiln supports. Not canonicalized."""
    if isinstance(x, np.dtype):
        dt = x
    else:
        try:
            dt = np.dtype(x)
        except TypeError as exc:
            raise TypeError(
                f"{x!r} is not a dtype; pass a dtype such as kiln.numpy.float32 "
                f"or 'int32' ({exc})") from None
    if dt not in _supported_set:
        raise _unsupported_dtype_error(dt, x)
    return dt


# Canonicalization caches, one per x64 setting, keyed on whatever was passed.
_canonical_cache = {False: {}, True: {}}


def canonicalize_dtype(dt):
    """The dtype kiln computes in for `dt`: with jax_enable_x64 off, the 64-bit
    types become their 32-bit equivalents (JAX's rule)."""
    table = _canonical_cache[config.jax_enable_x64]
    try:
        return table[dt]
    except (KeyError, TypeError):
        pass
    result = _numpy_dtype(dt)
    if not config.jax_enable_x64:
        result = _to_32bit.get(result, result)
    try:
        table[dt] = result
    except TypeError:
        pass
    return result


def default_float_dtype():
    return _f64 if config.jax_enable_x64 else _f32


def default_int_dtype():
    return _i64 if config.jax_enable_x64 else _i32


def default_complex_dtype():
    return _c128 if config.jax_enable_x64 else _c64


def default_uint_dtype():
    return _u64 if config.jax_enable_x64 else _u32


def _default_dtype_of_kind(dt):
    """The default dtype of dt's category (what a weak result becomes)."""
    if dt == _bool:
        return _bool
    if dt in _custom_float_dtypes or dt.kind == "f":
        return default_float_dtype()
    if dt.kind == "c":
        return default_complex_dtype()
    if dt.kind == "u":
        return default_uint_dtype()
    return default_int_dtype()


def to_inexact_dtype(dt):
    """`dt` if floating or complex, else the float integer/bool data is computed in, JAX's rule (mean,
    sqrt, fft, norm of ints): float32 for bool and integers of up to 32 bits, float64 for 64-bit ones
    (float32 again unless x64 is on): int32 data under x64 gives float32, not the default float64."""
    dt = canonicalize_dtype(dt)
    if dt.kind in "fc" or dt in _custom_float_dtypes:
        return dt
    return canonicalize_dtype(np.float64 if dt.itemsize > 4 else np.float32)


def is_float_dtype(dt):
    return dt.kind == "f" or dt in _custom_float_dtypes


def is_complex_dtype(dt):
    return np.dtype(dt).kind == "c"


def complex_of(dt):
    """The complex dtype whose parts are `dt` (float64 -> complex128, else complex64)."""
    return _c128 if np.dtype(dt) in (_f64, _c128) else _c64


def real_of(dt):
    """The dtype of a complex dtype's parts (complex128 -> float64); other dtypes unchanged."""
    dt = np.dtype(dt)
    return _f64 if dt == _c128 else _f32 if dt == _c64 else dt


def bit_width(dt):
    dt = _numpy_dtype(dt)
    return 1 if dt == _bool else 8 * dt.itemsize


# ---------------------------------------------------------------------------
# The promotion lattice (JAX's, restricted to kiln's dtypes). 'int*' and
# 'float*' are the weak types of Python ints and floats: they sit below every
# strongly typed integer / floating dtype, so `x_f16 + 1.0` stays float16.

_WEAK_INT = "int*"
_WEAK_FLOAT = "float*"
_WEAK_COMPLEX = "complex*"

_lattice_edges = {
    _bool: [_WEAK_INT],
    _WEAK_INT: [_u8, _i8],
    _u8: [_i16, _u16],
    _u16: [_i32, _u32],
    _u32: [_i64, _u64],
    _u64: [_WEAK_FLOAT],
    _i8: [_i16],
    _i16: [_i32],
    _i32: [_i64],
    _i64: [_WEAK_FLOAT],
    _WEAK_FLOAT: [_bf16, _f16, _WEAK_COMPLEX],
    _bf16: [_f32],
    _f16: [_f32],
    _f32: [_f64, _c64],
    _f64: [_c128],
    _WEAK_COMPLEX: [_c64],
    _c64: [_c128],
    _c128: [],
}


# Without x64, JAX avoids the one join that forms a 64-bit type from 32-bit
# inputs (uint32 with a signed int gives int32, not int64).
_lattice_edges_x32 = dict(_lattice_edges)
_lattice_edges_x32[_u32] = [_i32, _u64]


def _build_join_table(edges):
    upper = {}

    def up(node):
        if node not in upper:
            found = {node}
            for succ in edges[node]:
                found |= up(succ)
            upper[node] = frozenset(found)
        return upper[node]

    table = {}
    for a in edges:
        for b in edges:
            common = up(a) & up(b)
            joins = [c for c in common if up(c) == common]
            assert len(joins) == 1, (a, b, joins)  # the graph must be a lattice
            table[a, b] = joins[0]
    return table


# x64 flag -> {(node, node): join}
_join_tables = {True: _build_join_table(_lattice_edges),
                False: _build_join_table(_lattice_edges_x32)}


def _weak_node(dt):
    """Lattice node of a weakly typed value of dtype dt."""
    if dt == _bool:
        return _bool
    if dt.kind == "f" or dt in _custom_float_dtypes:
        return _WEAK_FLOAT
    if dt.kind == "c":
        return _WEAK_COMPLEX
    return _WEAK_INT


def _node_of_type_arg(x):
    """Lattice node for promote_types' argument: Python int/float types are
    weak, everything else is a concrete dtype (not canonicalized)."""
    if x is int:
        return _WEAK_INT
    if x is float:
        return _WEAK_FLOAT
    if x is complex:
        return _WEAK_COMPLEX
    return _numpy_dtype(x)


def promote_types(a, b):
    """The dtype both `a` and `b` promote to under JAX's lattice. Like
    `jnp.promote_types`, the result is not canonicalized, and the Python
    types `int`/`float` act as weak types."""
    table = _join_tables[config.jax_enable_x64]
    joined = table[_node_of_type_arg(a), _node_of_type_arg(b)]
    if joined is _WEAK_INT:
        return _i64
    if joined is _WEAK_FLOAT:
        return _f64
    if joined is _WEAK_COMPLEX:
        return _c128
    return joined


# ---------------------------------------------------------------------------
# Values: their dtype and weak type.

_python_weak_types = (int, float, complex)


def is_weakly_typed(x):
    """True for Python int/float scalars (not bool, as in JAX) and for arrays
    that carry `weak_type=True`."""
    if type(x) in _python_weak_types:
        return True
    return bool(getattr(x, "weak_type", False))


def _dtype_and_weak(x):
    """(canonical dtype, weak flag) of one result_type argument."""
    t = type(x)
    if t is int:
        return default_int_dtype(), True
    if t is float:
        return default_float_dtype(), True
    if t is bool:
        return _bool, False
    if t is complex:
        return default_complex_dtype(), True
    if x is None:
        return default_float_dtype(), False
    if x is int:
        return default_int_dtype(), True
    if x is float:
        return default_float_dtype(), True
    if x is complex:
        return default_complex_dtype(), True
    if isinstance(x, (list, tuple)):
        raise TypeError(
            f"cannot determine the dtype of a Python {t.__name__}; convert it "
            "with kiln.numpy.asarray first")
    if isinstance(x, (np.dtype, str, type)):
        return canonicalize_dtype(x), False
    dt = getattr(x, "dtype", None)
    if dt is None:
        raise TypeError(
            f"cannot determine the dtype of {t.__name__} object {x!r}; expected "
            "an array, a Python/NumPy scalar or a dtype")
    return canonicalize_dtype(dt), bool(getattr(x, "weak_type", False))


def _join_values(pairs):
    """JAX's weak-type rules over canonical (dtype, weak) pairs -> (dtype, weak)."""
    if len(pairs) == 1:
        out_dtype, weak = pairs[0]
    else:
        table = _join_tables[config.jax_enable_x64]
        first = pairs[0][0]
        all_weak = all(w for _, w in pairs)
        if not all_weak and all(d == first for d, _ in pairs):
            out_dtype, weak = first, False
        else:
            # All weak: join the dtypes themselves and keep the result weak.
            # Otherwise weak operands enter the lattice as int*/float*, and the
            # result is weak only if the join is one of those.
            node = None
            for d, w in pairs:
                n = _weak_node(d) if (w and not all_weak) else d
                node = n if node is None else table[node, n]
            if node is _WEAK_INT:
                out_dtype, weak = default_int_dtype(), True
            elif node is _WEAK_FLOAT:
                out_dtype, weak = default_float_dtype(), True
            elif node is _WEAK_COMPLEX:
                out_dtype, weak = default_complex_dtype(), True
            else:
                out_dtype, weak = node, all_weak
    weak = weak and out_dtype != _bool
    if weak:
        out_dtype = _default_dtype_of_kind(out_dtype)
    else:
        out_dtype = canonicalize_dtype(out_dtype)
    return out_dtype, weak


# x64 flag -> {((dtype, weak), ...): (dtype, weak)}; eager ops hit this per call.
_result_cache = {False: {}, True: {}}


def result_type(*args, return_weak_type_flag=False):
    """The canonical dtype of an operation over `args` (arrays, scalars,
    dtypes), by JAX's rules: Python scalars are weak and take the dtype of a
    strongly typed operand of their kind or above (float32 array + 2.0 ->
    float32; int32 array + 2.5 -> weak float32); an all-weak result is weak
    and has the default dtype of its kind. Inputs are canonicalized first."""
    if not args:
        raise ValueError("result_type: at least one array or dtype is required")
    ext = [a if isinstance(a, ExtendedDType) else getattr(a, "dtype", None) for a in args]
    if any(isinstance(d, ExtendedDType) for d in ext):
        # an extended dtype (typed keys' key<fry>) is its own result, as JAX's (flax's scan
        # builds the ShapedArray of key carries from it); it mixes with nothing else
        if any(d != ext[0] for d in ext):
            raise TypeError("result_type: an extended dtype (a typed key's key<fry>) does not mix with other "
                            f"dtypes, got {', '.join(str(d) if d is not None else type(a).__name__ for d, a in zip(ext, args))}")
        return (ext[0], False) if return_weak_type_flag else ext[0]
    pairs = tuple([_dtype_and_weak(a) for a in args])
    cache = _result_cache[config.jax_enable_x64]
    try:
        dt, weak = cache[pairs]
    except KeyError:
        dt, weak = cache[pairs] = _join_values(pairs)
    if config.jax_numpy_dtype_promotion == "strict" and len(pairs) > 1:
        _check_strict(args, pairs, dt)
    return (dt, weak) if return_weak_type_flag else dt


class TypePromotionError(ValueError):
    """Dtypes that have no implicit promotion (under jax_numpy_dtype_promotion='strict')."""


def _check_strict(args, pairs, dt):
    """jax_numpy_dtype_promotion='strict': the strongly typed operands share one dtype, which is the
    result (weakly typed values join it only where they do not change it: 2 joins float32, 2.5 does
    not join int32)."""
    strong = {d for d, w in pairs if not w}
    if strong and (len(strong) > 1 or dt not in strong):
        names = ", ".join(repr(str(type(a))) if type(a) in (int, float, complex) else repr(str(d))
                          for a, (d, _) in zip(args, pairs))
        raise TypePromotionError(
            f"Input dtypes ({names}) have no available implicit dtype promotion path when "
            f"jax_numpy_dtype_promotion=strict. Try explicitly casting inputs to the desired output "
            f"type, or set jax_numpy_dtype_promotion=standard.")


def _leaves_of_nested(x, out):
    for item in x:
        if isinstance(item, (list, tuple)):
            _leaves_of_nested(item, out)
        else:
            out.append(item)
    return out


def dtype_of(x):
    """The canonical dtype `kiln.numpy.asarray(x)` would have: Python
    bool/int/float -> bool / default int / default float, NumPy values and
    arrays -> their dtype canonicalized, nested lists -> the promotion of the
    elements (as JAX; an empty list is the default float)."""
    t = type(x)
    if t is bool:
        return _bool
    if t is int:
        return default_int_dtype()
    if t is float:
        return default_float_dtype()
    if t is complex:
        return default_complex_dtype()
    if isinstance(x, (list, tuple)):
        leaves = _leaves_of_nested(x, [])
        if not leaves:
            return default_float_dtype()
        return result_type(*leaves)
    dt = getattr(x, "dtype", None)
    if isinstance(dt, np.dtype):
        return canonicalize_dtype(dt)
    if isinstance(x, (np.dtype, type)):
        raise TypeError(f"dtype_of expects a value, got the dtype {x!r}; "
                        "use canonicalize_dtype for dtypes")
    raise TypeError(
        f"cannot determine the dtype of {t.__name__} object {x!r}; expected an "
        "array, a Python/NumPy scalar or a (nested) list of them")


# ---------------------------------------------------------------------------
# issubdtype, iinfo, finfo.

_abstract_numpy_types = frozenset([
    np.generic, np.number, np.integer, np.signedinteger, np.unsignedinteger,
    np.inexact, np.floating, np.complexfloating, np.flexible, np.character,
])
# What bfloat16 (not a numpy floating subclass) is a subtype of.
_custom_float_supertypes = frozenset([np.floating, np.inexact, np.number, np.generic])


def _as_issubdtype_arg(x):
    if isinstance(x, _ScalarMeta):
        return x.dtype
    if isinstance(x, ExtendedDType) or (isinstance(x, type) and issubclass(x, extended)):
        return x  # an extended dtype (key<fry>), or its abstract type
    if isinstance(x, type) and x in _abstract_numpy_types:
        return x
    if isinstance(x, np.dtype):
        return x
    dt = getattr(x, "dtype", None)
    if isinstance(dt, np.dtype) and not isinstance(x, type):
        return dt  # an array or scalar value
    return np.dtype(x)


def issubdtype(arg1, arg2):
    """Like np.issubdtype, also for kiln's scalar types and bfloat16 (which is
    a floating type for kiln although numpy does not know it)."""
    a = _as_issubdtype_arg(arg1)
    b = _as_issubdtype_arg(arg2)
    if isinstance(a, ExtendedDType) or isinstance(b, ExtendedDType):
        # As JAX: an extended dtype is a subtype of itself and of its abstract types (prng_key,
        # extended, np.generic), of nothing else; nothing NumPy's is a subtype of one.
        if isinstance(b, ExtendedDType) or isinstance(b, np.dtype):
            return a == b
        return isinstance(a, ExtendedDType) and issubclass(a.type, b)
    if isinstance(b, np.dtype):
        if isinstance(a, np.dtype):
            return a == b
        return False  # an abstract type is never a subtype of a concrete one
    if isinstance(a, np.dtype) and a in _custom_float_dtypes:
        return b in _custom_float_supertypes
    return bool(np.issubdtype(a, b))


def _dtype_for_info(x, fn):
    if isinstance(x, _ScalarMeta):
        return x.dtype
    dt = getattr(x, "dtype", None)
    if isinstance(dt, np.dtype) and not isinstance(x, type):
        return dt
    try:
        return np.dtype(x)
    except TypeError:
        raise TypeError(f"{fn}: {x!r} is not a dtype or an array") from None


def iinfo(int_type):
    """Machine limits of an integer dtype (np.iinfo)."""
    dt = _dtype_for_info(int_type, "iinfo")
    if dt.kind not in "iu":
        raise ValueError(f"iinfo: {dt.name} is not an integer dtype; use finfo "
                         "for floating dtypes")
    return np.iinfo(dt)


def finfo(float_type):
    """Machine limits of a floating dtype, bfloat16 included (ml_dtypes.finfo)."""
    dt = _dtype_for_info(float_type, "finfo")
    if dt.kind == "c":
        dt = real_of(dt)  # as numpy: the limits of the parts
    if not (dt.kind == "f" or dt in _custom_float_dtypes):
        raise ValueError(f"finfo: {dt.name} is not a floating dtype; use iinfo "
                         "for integer dtypes")
    return ml_dtypes.finfo(dt)


# ---------------------------------------------------------------------------
# Scalar type objects: kiln.numpy.float32 and friends. Each is a class whose
# metaclass makes it callable as a constructor of kiln arrays and lets
# np.dtype() read its `dtype` attribute; it compares equal to NumPy's type.

class _ScalarMeta(type):
    dtype: np.dtype

    def __call__(cls, x):
        from kiln import numpy as knp  # lazy: kiln.numpy imports this module
        return knp.asarray(x, dtype=cls.dtype)

    def __eq__(cls, other):
        return cls is other or cls.dtype.type == other

    def __ne__(cls, other):
        return not _ScalarMeta.__eq__(cls, other)

    def __hash__(cls):
        return hash(cls.dtype.type)

    def __instancecheck__(cls, instance):
        return isinstance(instance, cls.dtype.type)

    def __repr__(cls):
        return f"<class 'kiln.numpy.{cls.__name__}'>"


def _make_scalar_type(name, dt):
    return _ScalarMeta(name, (object,), {
        "dtype": dt,
        "__module__": "kiln.numpy",
        "__doc__": f"kiln's {dt.name} scalar type: calling it makes a {dt.name} array.",
    })


bool_ = _make_scalar_type("bool", _bool)
int8 = _make_scalar_type("int8", _i8)
int16 = _make_scalar_type("int16", _i16)
int32 = _make_scalar_type("int32", _i32)
int64 = _make_scalar_type("int64", _i64)
uint8 = _make_scalar_type("uint8", _u8)
uint16 = _make_scalar_type("uint16", _u16)
uint32 = _make_scalar_type("uint32", _u32)
uint64 = _make_scalar_type("uint64", _u64)
float16 = _make_scalar_type("float16", _f16)
bfloat16 = _make_scalar_type("bfloat16", _bf16)
float32 = _make_scalar_type("float32", _f32)
float64 = _make_scalar_type("float64", _f64)
complex64 = _make_scalar_type("complex64", _c64)
complex128 = _make_scalar_type("complex128", _c128)
complex_ = complex128
# As in JAX: int_/uint name the 64-bit types; canonicalization narrows them.
int_ = int64
uint = uint64

scalar_types = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
                float16, bfloat16, float32, float64, complex64, complex128)

# The abstract hierarchy is NumPy's own (as in JAX), so isinstance checks on
# NumPy scalars and np.issubdtype keep working.
generic = np.generic
number = np.number
inexact = np.inexact
floating = np.floating
complexfloating = np.complexfloating
integer = np.integer
signedinteger = np.signedinteger
unsignedinteger = np.unsignedinteger



class extended(np.generic):
    """The abstract type of JAX's extended dtypes (typed PRNG keys are kiln's only such values);
    under np.generic, as JAX's."""


class prng_key(extended):
    """The abstract type of typed PRNG key dtypes."""


DType = np.dtype


class ExtendedDType:
    """The base of extended (non-NumPy) dtypes a library defines (flax's fp8 meta dtype): it names
    its abstract type (`type`) and rules; kiln computes with no extended dtype but typed PRNG keys,
    so arrays of a library's extended dtype are not supported."""
    type = extended

    @property
    def name(self):
        return type(self).__name__
