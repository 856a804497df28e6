"""kiln's Python core: the Array type, tracing (Trace/Tracer) and `bind`, which applies a
primitive either by recording an equation into the current trace or, on concrete arrays,
by running a cached one-equation executable (eager mode: same code generator as jit).

The C extension kiln._kiln owns programs, compilation and buffers; this module owns only
Python objects.
"""

import operator

import numpy as np

from kiln import _kiln
from kiln._src import dtypes
from kiln._src.config import config
from kiln.errors import (ConcretizationTypeError, TracerArrayConversionError,
                         TracerBoolConversionError, TracerIntegerConversionError,
                         UnexpectedTracerError)

_dtype_by_name = {d.name: d for d in dtypes.supported_dtypes}


# ---------------------------------------------------------------------------
# Tracing state

class Trace:
    """One trace: a Builder receiving equations. Concrete arrays met while tracing become extra
    program inputs (`consts`). A concrete trace (grad/jvp/vjp outside jit) also computes every
    value as its equation is recorded, so Python control flow on values works, as in JAX."""
    __slots__ = ("builder", "alive", "const_vids", "consts", "literal_vids", "level", "concrete")

    def __init__(self, level, concrete=False):
        self.builder = _kiln.Builder()
        self.concrete = concrete
        self.alive = True
        self.const_vids = {}     # id(Array) -> vid
        self.consts = []         # Arrays passed as hidden inputs, in input order
        self.literal_vids = {}   # (value, dtype, weak) -> vid
        self.level = level

    def new_input(self, shape, dtype, weak, value=None):
        vid = self.builder.add_input(shape, dtype.name, weak)
        return Tracer(self, vid, shape, dtype, weak, value if self.concrete else None)

    def literal_tracer(self, value, dtype, weak):
        vid = self.literal(value, dtype, weak)
        return Tracer(self, vid, (), dtype, weak, scalar_array(value, dtype, weak) if self.concrete else None)

    def vid_of(self, x):
        """The value id standing for x (Tracer of this trace, concrete Array, scalar)."""
        if isinstance(x, Tracer):
            if x._trace is self:
                return x._vid
            if not x._trace.alive:
                raise UnexpectedTracerError.for_tracer(x)
            # A value of an enclosing trace (a closure in a nested transformation) enters
            # this program as an extra input, like a constant.
        if isinstance(x, Array):
            vid = self.const_vids.get(id(x))
            if vid is None:
                vid = self.builder.add_input(x.shape, x.dtype.name, x.weak_type)
                self.const_vids[id(x)] = vid
                self.consts.append(x)
            return vid
        raise TypeError(f"internal: cannot trace {type(x).__name__}")

    def literal(self, value, dtype, weak):
        key = (value, dtype, weak, type(value))
        vid = self.literal_vids.get(key)
        if vid is None:
            params = {"dtype": dtype.name, "weak_type": int(weak)}
            if dtype.kind in "biu":
                params["int_value"] = int(value)
            else:
                params["value"] = float(value)
            vid = self.builder.add_eqn("literal", (), params)[0][0]
            self.literal_vids[key] = vid
        return vid


_trace_stack = []
_ad_depth = [0]  # > 0 while a function is being traced for differentiation


def ad_tracing():
    return _ad_depth[0] > 0


def current_trace():
    return _trace_stack[-1] if _trace_stack else None


def push_trace(concrete=False):
    t = Trace(len(_trace_stack), concrete)
    _trace_stack.append(t)
    return t


def pop_trace(t):
    assert _trace_stack and _trace_stack[-1] is t
    _trace_stack.pop()
    t.alive = False


# ---------------------------------------------------------------------------
# Arrays

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
        return self

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

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
        return complex(float(self))

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
        return api._device_of_kind(self._buf.device) if self._buf is not None else api.devices()[0]

    @property
    def sharding(self):
        from kiln._src import api
        return api.SingleDeviceSharding(self.device)

    def delete(self):
        self._buf = None

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


def _rebuild(value, weak):
    a = asarray(value)
    if weak:
        a = Array(a._buf, a.shape, a.dtype, True)
    return a


class Tracer(Array):
    """A value inside a trace: its shape and dtype are known, its data is not."""
    __slots__ = ("_trace", "_vid", "_cval")

    def __init__(self, trace, vid, shape, dtype, weak_type, cval=None):
        self._buf = None
        self._np = None
        self._trace = trace
        self._vid = vid
        self.shape = shape
        self.dtype = dtype
        self.weak_type = weak_type
        self._cval = cval  # the concrete value (concrete traces only)

    def _value(self):
        if self._cval is not None:
            return self._cval._value()
        raise TracerArrayConversionError.for_tracer(self)

    def __array__(self, dtype=None, copy=None):
        if self._cval is not None:
            return self._cval.__array__(dtype, copy)
        raise TracerArrayConversionError.for_tracer(self)

    def __bool__(self):
        if self._cval is not None:
            return bool(self._cval)
        raise TracerBoolConversionError.for_tracer(self)

    def __float__(self):
        if self._cval is not None:
            return float(self._cval)
        raise ConcretizationTypeError.for_tracer(self, "float() was called on it.")

    def __int__(self):
        if self._cval is not None:
            return int(self._cval)
        raise TracerIntegerConversionError.for_tracer(self)

    def __index__(self):
        if self._cval is not None:
            return self._cval.__index__()
        raise TracerIntegerConversionError.for_tracer(self)

    def item(self, *args):
        if self._cval is not None:
            return self._cval.item(*args)
        raise ConcretizationTypeError.for_tracer(self, ".item() was called on it.")

    def tolist(self):
        if self._cval is not None:
            return self._cval.tolist()
        raise ConcretizationTypeError.for_tracer(self, ".tolist() was called on it.")

    def block_until_ready(self):
        return self

    def is_ready(self):
        return False

    def __repr__(self):
        if self._cval is not None:
            return f"Traced<ConcreteArray({self._cval._value()!r}, dtype={self.dtype.name})>"
        w = " weak_type=True" if self.weak_type else ""
        return f"Traced<{self.dtype.name}[{','.join(map(str, self.shape))}]{w}>"

    def __str__(self):
        return str(self._cval) if self._cval is not None else repr(self)

    def __format__(self, spec):
        return format(self._cval, spec) if self._cval is not None else repr(self)

    def __reduce__(self):
        raise ConcretizationTypeError.for_tracer(self, "It cannot be pickled.")


def is_tracer(x):
    return isinstance(x, Tracer)


def concrete_or_error(x, what="the value"):
    """NumPy value of a concrete array or scalar; ConcretizationTypeError for a tracer."""
    if isinstance(x, Tracer):
        if x._cval is not None:
            return x._cval._value()
        raise ConcretizationTypeError.for_tracer(x, f"It was used as {what}.")
    if isinstance(x, Array):
        return x._value()
    return x


# ---------------------------------------------------------------------------
# Making arrays from host data

_scalar_cache = {}


def _check_host_array(a, original):
    if a.dtype == object:
        raise ValueError(
            "kiln cannot make an array from this input: it is ragged (sequences of different "
            "lengths) or holds non-numeric objects") if isinstance(original, (list, tuple)) else TypeError(
            f"kiln cannot make an array from an object of type {type(original).__name__}")
    if a.dtype.kind in "USV" and a.dtype not in _dtype_by_name.values():  # (bfloat16 reports kind 'V')
        raise TypeError(f"kiln arrays cannot hold strings or bytes (got dtype {a.dtype}); "
                        "convert the data to numbers first")
    if a.dtype.kind == "c":
        raise TypeError("kiln does not support complex dtypes yet")
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
    if isinstance(x, Tracer):
        return True
    if isinstance(x, (list, tuple)):
        return any(_contains_tracer(y) for y in x)
    return False


def scalar_array(value, dtype, weak):
    """A cached 0-d array holding a Python scalar (used by eager ops with scalars)."""
    key = (type(value), value, dtype, weak)
    try:
        a = _scalar_cache.get(key)
    except TypeError:
        a = None
    if a is None:
        a = from_numpy(np.array(value, dtype=dtype), weak)
        if len(_scalar_cache) < 4096:
            _scalar_cache[key] = a
    return a


def scalar_constant(value, dtype, weak):
    """A 0-d constant: a literal of the innermost trace when tracing, else a cached array."""
    if _trace_stack:
        return _trace_stack[-1].literal_tracer(value, dtype, weak)
    return scalar_array(value, dtype, weak)


def asarray(x, dtype=None):
    """Array from a Python scalar, nested sequence, NumPy array or Array."""
    if dtype is not None:
        dtype = dtypes.canonicalize_dtype(dtype)
    if isinstance(x, Array):
        if dtype is None or dtype == x.dtype:
            return x
        from kiln import lax
        return lax.convert_element_type(x, dtype)
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        weak = dtype is None and not isinstance(x, bool)
        dt = dtype if dtype is not None else dtypes.dtype_of(x)
        if isinstance(x, int) and dt.kind in "iu":
            info = np.iinfo(dt)
            if not info.min <= x <= info.max:
                raise OverflowError(f"Python int {x} is too large to convert to {dt.name}")
        if _trace_stack:  # under a trace, scalars become literals of the program
            return _trace_stack[-1].literal_tracer(x, dt, weak)
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


# ---------------------------------------------------------------------------
# Applying primitives

def _param_key(v):
    if isinstance(v, list):
        return tuple(v)
    if isinstance(v, _kiln.Builder):  # a body: equal structure, equal key (bodies never change)
        return ("body", v.hash(), v.counts())
    return v


def _params_key(params):
    if not params:
        return ()
    return tuple((k, _param_key(v)) for k, v in params.items())


_eager_cache = {}


def _compile_eager(prim, args, params):
    b = _kiln.Builder()
    vids = [b.add_input(a.shape, a.dtype.name, a.weak_type) for a in args]
    outs = b.add_eqn(prim, vids, params)
    b.set_outputs([o[0] for o in outs])
    exe = b.compile()
    avals = tuple((o[1], _np_dtype(o[2]), o[3]) for o in outs)
    return exe, avals


def _eager_exe(prim, *xs, compiled=True):
    """The eager executable of `prim` on arrays xs and its result's aval, for the C fast path of
    ArrayBase (which caches what this returns). compiled=False gives the aval only (exe None):
    fused operations run inside their chain's executable, never in one of their own."""
    key = (prim, (), *[(x.shape, x.dtype, x.weak_type) for x in xs])
    hit = _eager_cache.get(key)
    if hit is None:
        if not compiled:
            b = _kiln.Builder()
            (_, shape, dt, weak), = b.add_eqn(prim, [b.add_input(x.shape, x.dtype.name, x.weak_type) for x in xs], None)
            return None, shape, _np_dtype(dt), weak
        hit = _compile_eager(prim, xs, None)
        _eager_cache[key] = hit
    exe, ((shape, dtype, weak),) = hit
    return exe, shape, dtype, weak


_FUSED_PRIMS = _kiln.eager_ops()  # the operation codes of python/ext/array.c


def _fused_exe(key):
    """The executable of a chain of pending eager operations (python/ext/array.c), described by
    key = (n, (shape, dtype, weak) of each of the n inputs..., (op, ref1, ref2) per operation...)
    where a ref is an input index i >= 0 or -(operation index + 1) (ref2 is None for a unary
    operation); the last operation is the result."""
    n = key[0]
    b = _kiln.Builder()
    vids = [b.add_input(key[1 + 3 * i], key[2 + 3 * i].name, bool(key[3 + 3 * i])) for i in range(n)]
    nodes = []
    for j in range(1 + 3 * n, len(key), 3):
        op, r1, r2 = key[j:j + 3]
        args = [vids[r] if r >= 0 else nodes[-r - 1] for r in ((r1,) if r2 is None else (r1, r2))]
        nodes.append(b.add_eqn(_FUSED_PRIMS[op], args, None)[0][0])
    b.set_outputs([nodes[-1]])
    return b.compile()


def bind(prim, args, params=None):
    """Applies primitive `prim` to arrays `args`; returns a tuple of results."""
    for a in args:
        if type(a) is not Array:
            break
    else:  # eager: every operand is concrete
        key = (prim, _params_key(params), *[(a.shape, a.dtype, a.weak_type) for a in args])
        hit = _eager_cache.get(key)
        if hit is None:
            hit = _compile_eager(prim, args, params)
            _eager_cache[key] = hit
        exe, avals = hit
        try:
            bufs = exe(*[a._buf for a in args])
        except MemoryError as e:
            shapes = ", ".join(f"{s}" for s, _, _ in avals)
            raise MemoryError(f"{prim}: cannot allocate the result (shape {shapes}): {e}") from None
        return tuple([Array(b, s, d, w) for b, (s, d, w) in zip(bufs, avals)])
    trace = None
    for a in args:
        if isinstance(a, Tracer):
            t = a._trace
            if not t.alive:
                raise UnexpectedTracerError.for_tracer(a, f"It was passed to {prim}.")
            if trace is None or t.level > trace.level:
                trace = t
    if trace is None:
        raise TypeError(f"{prim}: operands must be kiln arrays")
    vids = [trace.vid_of(a) for a in args]
    outs = trace.builder.add_eqn(prim, vids, params)
    cvals = _concrete_results(trace, prim, args, params) if trace.concrete else None
    if cvals is None:
        return tuple([Tracer(trace, vid, shape, _np_dtype(dt), weak) for vid, shape, dt, weak in outs])
    return tuple([Tracer(trace, vid, shape, _np_dtype(dt), weak, cv)
                  for (vid, shape, dt, weak), cv in zip(outs, cvals)])


def _concrete_results(trace, prim, args, params):
    """The values of an equation recorded in a concrete trace (computed eagerly), or None when an
    operand has no value (a tracer of an abstract enclosing trace)."""
    vals = []
    for a in args:
        if isinstance(a, Tracer):
            if a._cval is None:
                return None
            vals.append(a._cval)
        else:
            vals.append(a)
    return bind(prim, vals, params)


def bind1(prim, args, params=None):
    return bind(prim, args, params)[0]


def literal(value, dtype, weak, like=None):
    """A scalar constant: a literal equation in the trace of `like` (a Tracer), a cached
    array otherwise."""
    t = like._trace if isinstance(like, Tracer) else None
    if t is not None:
        return t.literal_tracer(value, dtype, weak)
    return scalar_array(value, dtype, weak)


config_generation = [0]  # bumped on every configuration change: part of every compile cache key


def _on_config_change(name, value):
    config_generation[0] += 1
    _eager_cache.clear()
    _kiln.config_changed()
    if name == "jax_enable_x64":
        _scalar_cache.clear()


config._on_change(_on_config_change)
