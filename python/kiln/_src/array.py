"""kiln.Array, the array type, and making arrays from host data (NumPy arrays, Python scalars
and sequences, DLPack producers).

The bottom of kiln's Python core: it imports no other part of it (the trace state it needs,
whether a trace is live, comes from the C extension). Above it: tracing.py (Tracer, traces),
then dispatch.py (bind: applying primitives); core.py re-exports the three.
"""

import math

import numpy as np

from kiln import _kiln
from kiln._src import dtypes

_dtype_by_name = {d.name: d for d in dtypes.supported_dtypes}


def _np_dtype(name):
    return _dtype_by_name[name]


class Array(_kiln.ArrayBase):
    """An immutable n-dimensional array living on a kiln device.

    Its fields (_buf, shape, dtype, weak_type, _np) live in the C base class, whose operators
    + - * / run the common eager cases without entering Python (python/ext/array.c)."""
    __slots__ = ("__weakref__",)
    __array_priority__ = 100

    def __init__(self, buf, shape, dtype, weak_type=False):
        self._buf = buf
        self.shape = shape
        self.dtype = dtype
        self.weak_type = weak_type
        self._np = None

    # -- facts --
    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object (a 0-d array)")
        return self.shape[0]

    # -- host access --
    def _value(self):
        """Read-only NumPy view of the data (waits for it)."""
        v = self._np
        if v is None:
            if self.size == 0:
                v = np.zeros(self.shape, self.dtype)
            else:
                v = np.frombuffer(self._buf, dtype=self.dtype).reshape(self.shape)
            v.flags.writeable = False
            self._np = v
        return v

    def __array__(self, dtype=None, copy=None):
        v = self._value()
        if dtype is not None and np.dtype(dtype) != v.dtype:
            return v.astype(dtype)
        if copy:
            return v.copy()
        return v

    @property
    def aval(self):
        """Its abstract value (a ShapedArray), as JAX arrays' .aval."""
        from kiln._src.extras import ShapedArray
        return ShapedArray(self.shape, self.dtype, self.weak_type)

    def block_until_ready(self):
        self._buf.block_until_ready()
        return self

    def is_ready(self):
        return self._buf.is_ready()

    def item(self, *args):
        return self._value().item(*args)

    def tolist(self):
        return self._value().tolist()

    def copy(self):
        return _alias(self)

    def __copy__(self):
        return _alias(self)

    def __deepcopy__(self, memo):
        return _alias(self)

    def __bool__(self):
        if self.size != 1:
            raise ValueError(f"The truth value of an array with shape {self.shape} is ambiguous; "
                             "use a.any() or a.all()")
        return bool(self._value().reshape(()))

    def __float__(self):
        if self.size != 1:
            raise TypeError(f"only size-1 arrays can be converted to Python scalars (shape {self.shape})")
        return float(self._value().reshape(()))

    def __int__(self):
        if self.size != 1:
            raise TypeError(f"only size-1 arrays can be converted to Python scalars (shape {self.shape})")
        return int(self._value().reshape(()))

    def __complex__(self):
        if self.size != 1:
            raise TypeError(f"only size-1 arrays can be converted to Python scalars (shape {self.shape})")
        return complex(self._value().reshape(()))

    def __index__(self):
        if self.shape != () or self.dtype.kind not in "biu":
            raise TypeError(f"only integer scalar arrays can be converted to an index "
                            f"(got {self.dtype.name}{list(self.shape)})")
        return int(self._value())

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __reversed__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in reversed(range(self.shape[0])))

    def __repr__(self):
        v = self._value()
        body = np.array2string(v, separator=", ", prefix="Array(")
        extra = ", weak_type=True" if self.weak_type else ""
        shape = f", shape={self.shape}" if self.size == 0 else ""
        return f"Array({body}{shape}, dtype={self.dtype.name}{extra})"

    def __str__(self):
        return str(self._value())

    def __format__(self, spec):
        if self.shape == ():
            return format(self._value()[()], spec)
        return format(str(self), spec)

    def __hash__(self):
        raise TypeError("unhashable type: kiln Array (use a tuple or a NumPy array as a key)")

    def __setitem__(self, idx, value):
        raise TypeError("kiln arrays are immutable and do not support item assignment; "
                        "use x = x.at[idx].set(value) instead (see Array.at)")

    def __reduce__(self):
        return (_rebuild, (np.asarray(self), self.weak_type))

    # -- devices --
    def devices(self):
        return {self.device}

    @property
    def device(self):
        from kiln._src import api
        return api._device_of_buf(self._buf) if self._buf is not None else api.devices()[0]

    @property
    def committed(self):
        return self._buf is not None and self._buf.committed

    @property
    def sharding(self):
        from kiln._src import api
        return api.SingleDeviceSharding(self.device)

    @property
    def addressable_shards(self):
        from kiln.sharding import Shard
        return [Shard(self.device, tuple(slice(None) for _ in self.shape), 0, self)]

    global_shards = addressable_shards

    @property
    def is_fully_addressable(self):
        return True

    @property
    def is_fully_replicated(self):
        return True

    def delete(self):
        """Frees this array's memory now (once queued work that reads it is done); using the
        array afterwards raises RuntimeError, as in JAX."""
        _kiln.array_delete(self)

    def is_deleted(self):
        return _kiln.array_is_deleted(self)

    def unsafe_buffer_pointer(self):
        """The address of this array's data (host or GPU memory), as an int; a donated array's
        result may reuse it. The data may still be being computed: block_until_ready first to read it."""
        if self.is_deleted():
            raise RuntimeError("unsafe_buffer_pointer: the array has been deleted (donated or .delete())")
        return int(self._buf.ptr)

    # -- interop --
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule sharing this array's memory (kiln.dlpack)."""
        from kiln import dlpack
        a = self
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            from kiln._src import api
            want = api.devices("cpu")[0] if int(dl_device[0]) == 1 else api.devices("gpu")[0]
            a = api.device_put(self, want)
        elif copy:
            a = Array(_kiln.transfer(self._buf, 1 - self._buf.device), self.shape, self.dtype, self.weak_type)
            a = Array(_kiln.transfer(a._buf, self._buf.device), self.shape, self.dtype, self.weak_type)
        return _kiln.to_dlpack(a._buf, tuple(self.shape), dlpack.dlpack_code(self.dtype), stream)

    def __dlpack_device__(self):
        return (2, 0) if self._buf.device == 1 else (1, 0)

    @property
    def __cuda_array_interface__(self):
        """CUDA array interface (v3) of a GPU array; the data is ready when this returns."""
        if self._buf is None or self._buf.device != 1:
            raise AttributeError("__cuda_array_interface__: this array is in host memory, not on a GPU")
        _kiln.eager_export(self._buf)  # the consumer may write it: no pending work may read it later
        self._buf.block_until_ready()
        typestr = np.dtype(self.dtype).str if self.dtype != dtypes.bfloat16 else "<V2"
        return {"shape": tuple(self.shape), "typestr": typestr, "data": (self._buf.ptr, False),
                "version": 3, "strides": None, "stream": None}


def _alias(a):
    """A copy of a (jnp.copy, x.copy()): a new Array on the same immutable memory, so deleting or
    donating one of them leaves the other whole (a donation reuses memory only an Array holds alone);
    a tracer, or a sharded array, is its own copy."""
    if type(a) is not Array:
        return a
    return Array(a._buf, a.shape, a.dtype, a.weak_type)


def _rebuild(value, weak):
    a = asarray(value)
    if weak:
        a = Array(a._buf, a.shape, a.dtype, True)
    return a


# ---------------------------------------------------------------------------
# Making arrays from host data

_scalar_cache = {}
# ids of the cached arrays: one object serves every request for its value (jnp.zeros(()) twice is
# the same Array), so a call donating it must not delete it (jit's donation skips these)
_shared_scalars = set()


def clear_scalar_cache():
    _scalar_cache.clear()
    _shared_scalars.clear()


def _check_host_array(a, original):
    if a.dtype == object:
        raise ValueError(
            "kiln cannot make an array from this input: it is ragged (sequences of different "
            "lengths) or holds non-numeric objects") if isinstance(original, (list, tuple)) else TypeError(
            f"kiln cannot make an array from an object of type {type(original).__name__}")
    if a.dtype.kind in "USV" and a.dtype not in _dtype_by_name.values():  # (bfloat16 reports kind 'V')
        raise TypeError(f"kiln arrays cannot hold strings or bytes (got dtype {a.dtype}); "
                        "convert the data to numbers first")
    if a.dtype.kind == "M" or a.dtype.kind == "m":
        raise TypeError(f"kiln does not support {a.dtype} (datetime) arrays")


def from_numpy(a, weak=False):
    """Copies a NumPy array (already of a kiln dtype) to the device."""
    a = np.asarray(a, order="C")  # (np.ascontiguousarray would turn 0-d into 1-d)
    if a.size == 0:
        buf = _kiln.from_buffer(b"")
    else:
        buf = _kiln.from_buffer(a.reshape(-1).view(np.uint8) if a.dtype == dtypes.bfloat16 else a)
    return Array(buf, a.shape, a.dtype, weak)


def _contains_tracer(x):
    if isinstance(x, _kiln.TracerBase):
        return True
    if isinstance(x, (list, tuple)):
        return any(_contains_tracer(y) for y in x)
    return False


def _has_signed_zero(value):
    if isinstance(value, float):
        return value == 0.0 and math.copysign(1.0, value) < 0
    if isinstance(value, complex):
        return _has_signed_zero(value.real) or _has_signed_zero(value.imag)
    return False


def scalar_array(value, dtype, weak):
    """A cached 0-d array holding a Python scalar (used by eager ops with scalars)."""
    # -0.0 == 0.0 and hashes alike: signed zeros stay out of the cache
    key = None if _has_signed_zero(value) else (type(value), value, dtype, weak)
    try:
        a = _scalar_cache.get(key)
    except TypeError:
        key = a = None
    if a is None:
        a = from_numpy(np.array(value, dtype=dtype), weak)
        if key is not None and len(_scalar_cache) < 4096:
            _scalar_cache[key] = a
            _shared_scalars.add(id(a))
    return a


def asarray(x, dtype=None):
    """Array from a Python scalar, nested sequence, NumPy array or Array."""
    if dtype is not None:
        dtype = dtypes.canonicalize_dtype(dtype)
    if isinstance(x, Array):
        if dtype is None or dtype == x.dtype:
            return x
        from kiln import lax
        return lax.convert_element_type(x, dtype)
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        weak = dtype is None and not isinstance(x, bool)
        dt = dtype if dtype is not None else dtypes.dtype_of(x)
        if isinstance(x, int) and dt.kind in "iu":
            info = np.iinfo(dt)
            if not info.min <= x <= info.max:
                raise OverflowError(f"Python int {x} is too large to convert to {dt.name}")
        from kiln._src import tracing
        trace = None if tracing.compile_time_eval[0] else _kiln.current_trace()
        if trace is not None:  # under a trace, scalars become literals of the program
            return trace.literal_tracer(x, dt, weak)
        return scalar_array(x, dt, weak)
    if isinstance(x, (list, tuple)) and _contains_tracer(x):
        from kiln import numpy as jnp
        return jnp.stack([asarray(y, dtype) for y in x]) if x else asarray(np.zeros((0,)), dtype)
    if isinstance(x, (list, tuple)) and x and any(isinstance(y, Array) for y in x):
        x = [np.asarray(y) if isinstance(y, Array) else y for y in x]
    if hasattr(x, "__jax_array__"):
        return asarray(x.__jax_array__(), dtype)
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        try:
            on_gpu = int(x.__dlpack_device__()[0]) == 2
        except Exception:  # noqa: BLE001 - not a usable producer; treat as an ordinary sequence
            on_gpu = False
        if on_gpu:  # a GPU tensor (PyTorch, CuPy): share its memory
            from kiln import dlpack
            return asarray(dlpack.from_dlpack(x), dtype)
    try:
        a = np.asarray(x)
    except ValueError as e:
        raise ValueError(f"kiln cannot make an array from this input: {e}") from None
    _check_host_array(a, x)
    dt = dtype if dtype is not None else dtypes.canonicalize_dtype(
        dtypes.dtype_of(x) if isinstance(x, (list, tuple)) else a.dtype)
    if a.dtype != dt:
        a = a.astype(dt)
    return from_numpy(a)
