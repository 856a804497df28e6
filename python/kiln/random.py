"""kiln.random: JAX's counter-based PRNG (threefry-2x32, partitionable bit layout) and JAX's
samplers, giving JAX's numbers for the same keys: the same bits, drawn through the same steps.

Keys are raw uint32[2] arrays (jax.random.PRNGKey) or typed key arrays (jax.random.key, dtype
key<fry>: kiln.Array instances and pytree leaves that kiln's transformations lower to their uint32
data and rebuild, so they pass through jit, vmap and the loops). Everything is
kiln.lax / kiln.numpy on arrays, so it runs eagerly, under jit and under vmap. This module holds
keys, bits and the samplers with a closed form; the looping samplers (gamma, poisson, binomial)
and the linear-algebra ones live in kiln/_src/random_samplers.py."""

import functools
import inspect
import math

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln._src import basearray, core, dtypes, tree_util
from kiln._src.config import config
from kiln._src.core import Array, Tracer
from kiln._src.toplevel import float0

__all__ = ["PRNGKey", "PRNGKeyArray", "ball", "bernoulli", "beta", "binomial", "bits", "categorical", "cauchy",
           "chisquare", "choice", "clone", "dirichlet", "double_sided_maxwell", "exponential", "f", "fold_in", "gamma",
           "generalized_normal", "geometric", "gumbel", "key", "key_data", "key_dtype", "key_impl", "laplace",
           "loggamma", "logistic", "lognormal", "maxwell", "multinomial", "multivariate_normal", "normal",
           "orthogonal", "pareto", "permutation", "poisson", "rademacher", "randint", "rayleigh", "split", "t",
           "triangular", "truncated_normal", "uniform", "wald", "weibull_min", "wrap_key_data"]

_U32 = np.dtype(np.uint32)
_UINT = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: _U32, 64: np.dtype(np.uint64)}
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


# ---------------------------------------------------------------------------
# Threefry-2x32

def _u32(v, like=None):
    return core.asarray(np.uint32(v & 0xFFFFFFFF)) if like is None else lax.full_like(like, np.uint32(v & 0xFFFFFFFF))


def _rotl(x, r):
    return lax.bitwise_or(lax.shift_left(x, _u32(r, x)), lax.shift_right_logical(x, _u32(32 - r, x)))


def _threefry(k0, k1, x0, x1):
    """Threefry-2x32 with 20 rounds (Salmon et al., Random123) on uint32 arrays."""
    ks = (k0, k1, lax.bitwise_xor(lax.bitwise_xor(k0, k1), _u32(0x1BD11BDA, k0)))
    x0 = lax.add(x0, lax.broadcast_in_dim(ks[0], x0.shape, ()))
    x1 = lax.add(x1, lax.broadcast_in_dim(ks[1], x1.shape, ()))
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = lax.add(x0, x1)
            x1 = lax.bitwise_xor(_rotl(x1, r), x0)
        x0 = lax.add(x0, lax.broadcast_in_dim(ks[(i + 1) % 3], x0.shape, ()))
        inj = lax.add(ks[(i + 2) % 3], _u32(i + 1, ks[0]))
        x1 = lax.add(x1, lax.broadcast_in_dim(inj, x1.shape, ()))
    return x0, x1


def _counts(shape):
    """The flat index of every element as two uint32 halves (hi, lo), arranged in `shape`."""
    n = math.prod(shape)
    if n >= 2 ** 32:
        raise NotImplementedError("kiln.random: more than 2**32 values per draw are not supported yet")
    lo = lax.broadcasted_iota(_U32, shape, 0) if len(shape) == 1 else lax.reshape(lax.iota(_U32, n), shape)
    return lax.full(shape, np.uint32(0), _U32), lo


def _bits2(key, shape):
    hi, lo = _counts(shape)
    return _threefry(key[0], key[1], hi, lo)


def _split(key, shape=(2,)):
    """uint32[*shape, 2] keys from one raw key (JAX's fold-like split). Threefry runs over the
    [*shape, 2] layout itself (each pair of words computed twice) and a select picks the word:
    one elementwise root, so the whole split fuses into one kernel (the two words as separate
    outputs made some twenty tiny kernels)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    full = shape + (2,)
    hi, lo = _counts(shape)
    dims = tuple(range(len(shape)))
    b1, b2 = _threefry(key[0], key[1], lax.broadcast_in_dim(hi, full, dims), lax.broadcast_in_dim(lo, full, dims))
    return lax.select(lax.eq(lax.broadcasted_iota(_U32, full, len(shape)), lax.full(full, np.uint32(0), _U32)), b1, b2)


def _random_bits(key, width, shape):
    """JAX's partitionable threefry bits of `width` (8, 16, 32 or 64) per element: the xor of the
    two words (narrowed), or the two words side by side for 64 bits."""
    b1, b2 = _bits2(key, shape)
    if width == 64:
        u64 = _UINT[64]
        hi, lo = lax.convert_element_type(b1, u64), lax.convert_element_type(b2, u64)
        return lax.bitwise_or(lax.shift_left(hi, lax.full_like(hi, 32)), lo)
    x = lax.bitwise_xor(b1, b2)
    return x if width == 32 else lax.convert_element_type(x, _UINT[width])


# ---------------------------------------------------------------------------
# Keys: raw uint32[..., 2] arrays, or typed key arrays wrapping them

class KeyDtype(dtypes.ExtendedDType):
    """The dtype of typed threefry keys, printed as JAX prints it: key<fry>. An extended dtype:
    `dtypes.issubdtype(d, dtypes.prng_key)` (and `extended`, `np.generic`) is true, NumPy's
    dtypes (np.dtype(d) raises) know nothing of it."""
    type = dtypes.prng_key
    name = "key<fry>"
    _impl = "fry"
    impl = "threefry2x32"
    itemsize = 8

    def __repr__(self):
        return self.name

    __str__ = __repr__

    def __eq__(self, other):
        return isinstance(other, KeyDtype)

    def __ne__(self, other):
        return not isinstance(other, KeyDtype)

    def __hash__(self):
        return hash(self.name)

    def __reduce__(self):
        return key_dtype, ()  # unpickles to the one instance


_KEY_DTYPE = KeyDtype()


class PRNGKeyArray(basearray.Array):
    """A typed key array (jax.random.key): shape `data.shape[:-1]`, dtype key<fry>, over uint32
    data whose last axis holds the two threefry words. A kiln.Array and a pytree leaf to users;
    kiln's transformations (jit, vmap, grad, the loops) see its data in its place and rebuild
    the key on the way out (tree_util.register_boundary_node), so vmap maps the leading key axes."""
    __slots__ = ("_data",)

    def __init__(self, data):
        self._data = data  # uint32[*shape, 2] (or a tracer, or a placeholder while pytrees rebuild)

    dtype = _KEY_DTYPE
    itemsize = 8
    _is_key_array = True  # (kiln.numpy's structural functions take keys by this mark)
    shape = property(lambda self: tuple(self._data.shape[:-1]))
    ndim = property(lambda self: len(self._data.shape) - 1)
    size = property(lambda self: math.prod(self._data.shape[:-1]))
    nbytes = property(lambda self: 8 * math.prod(self._data.shape[:-1]))
    sharding = property(lambda self: self._data.sharding)
    T = property(lambda self: self.transpose())

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a scalar key array")
        return self._data.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a scalar key array")
        return (PRNGKeyArray(self._data[i]) for i in range(self._data.shape[0]))

    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        if any(i is Ellipsis for i in idx):
            idx = idx + (slice(None),)  # the key-data axis is not the user's to index
        return PRNGKeyArray(self._data[idx])

    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return PRNGKeyArray(jnp.reshape(self._data, shape + (2,), order=order))

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    flatten = ravel

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        axes = tuple(range(self.ndim))[::-1] if not axes else tuple(a % max(self.ndim, 1) for a in axes)
        return PRNGKeyArray(jnp.transpose(self._data, axes + (self.ndim,)))

    def squeeze(self, axis=None):
        if axis is None:
            axis = tuple(i for i, d in enumerate(self.shape) if d == 1)
        axis = (axis,) if isinstance(axis, int) else tuple(axis)
        return PRNGKeyArray(jnp.squeeze(self._data, tuple(a % max(self.ndim, 1) for a in axis)))

    def copy(self):
        return PRNGKeyArray(jnp.array(self._data, copy=True))

    def block_until_ready(self):
        self._data.block_until_ready()
        return self

    def devices(self):
        return self._data.devices()

    @property
    def device(self):
        return self._data.device

    def __array__(self, dtype=None, copy=None):
        raise TypeError("JAX array with PRNGKey dtype cannot be converted to a NumPy array. Use "
                        "kiln.random.key_data(arr) if you wish to extract the underlying integer array.")

    def astype(self, dtype):
        raise TypeError(f"astype: a key array (dtype key<fry>) cannot be converted to {dtype}; use "
                        "kiln.random.key_data(keys) for its uint32 data")

    def __eq__(self, other):
        if not isinstance(other, PRNGKeyArray):
            return NotImplemented
        return jnp.all(self._data == other._data, axis=-1)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else jnp.logical_not(eq)

    __hash__ = None

    def __repr__(self):
        data = self._data
        if not hasattr(data, "shape"):  # a placeholder a transformation put in a rebuilt tree
            return f"PRNGKeyArray({data!r})"
        return f"Array({self.shape}, dtype={self.dtype}) overlaying:\n{data}"


def _rebuild_key(_, children):
    """What stands at a key's place when a transformation rebuilds a tree: key data (an array or
    tracer) becomes a key again; a float0 tangent of the data the key's float0 tangent (as JAX:
    key<fry> has no tangent); anything else (axis specs, abstract values, placeholders) is kept
    under a key, so that the next flatten finds it at the data's place."""
    (data,) = children
    if isinstance(data, np.ndarray) and data.dtype == float0 and data.shape[-1:] == (2,):
        return np.zeros(data.shape[:-1], float0)
    return PRNGKeyArray(data)


tree_util.register_boundary_node(PRNGKeyArray, lambda k: ((k._data,), None), _rebuild_key)


def _key_structural(name, keys, dtype, on_data):
    """kiln.numpy's `name` (stack, concatenate, array) of typed key arrays: `on_data` of their
    uint32 data (whose last axis stays last), as a key array. Keys mix with nothing else."""
    if dtype is not None and not isinstance(dtype, KeyDtype):
        raise TypeError(f"{name}: key arrays (dtype key<fry>) cannot be converted to {dtype}; use "
                        "kiln.random.key_data(keys) for their uint32 data")
    others = [type(k).__name__ if not hasattr(k, "dtype") else str(k.dtype) for k in keys
              if not isinstance(k, PRNGKeyArray)]
    if others:
        raise TypeError(f"{name}: key arrays (dtype key<fry>) do not mix with arrays of other dtypes, got "
                        f"key<fry> and {', '.join(others)}")
    if name == "concatenate" and any(k.ndim == 0 for k in keys):
        raise ValueError("concatenate: zero-dimensional arrays cannot be concatenated")
    return PRNGKeyArray(on_data([k._data for k in keys]))


def _key_tangents(primals, tangents):
    """tangents with each float0 tangent of a typed key array (JAX's form: float0 of the key's
    shape) as a key over zeros of its data's shape, which the transformations see at the data's
    place (and drop, as any integer tangent); tangents unchanged where their structure is not
    primals'."""
    def leaf(p, t):
        if isinstance(p, PRNGKeyArray) and getattr(t, "dtype", None) == float0 and tuple(t.shape) == p.shape:
            return PRNGKeyArray(np.zeros(p.shape + (2,), _U32))  # (integer tangents are dropped)
        return t
    try:
        return tree_util.public.tree_map(leaf, tuple(primals), tuple(tangents))
    except (ValueError, TypeError):
        return tangents


def _keys_of_specs(tree):
    """tree with each abstract value of dtype key<fry> (a ShapeDtypeStruct) as a key over an
    abstract value of its data, which kiln's transformations trace as a key (eval_shape)."""
    from kiln._src.api import ShapeDtypeStruct

    def leaf(x):
        if isinstance(getattr(x, "dtype", None), KeyDtype) and not isinstance(x, PRNGKeyArray):
            return PRNGKeyArray(ShapeDtypeStruct(tuple(x.shape) + (2,), _U32))
        return x
    return tree_util.public.tree_map(leaf, tree)


def _specs_of_keys(tree):
    """tree with each key over an abstract value of its data as the key's ShapeDtypeStruct."""
    from kiln._src.api import ShapeDtypeStruct

    def leaf(x):
        if isinstance(x, PRNGKeyArray) and isinstance(x._data, ShapeDtypeStruct):
            return ShapeDtypeStruct(x.shape, _KEY_DTYPE, sharding=x._data.sharding)
        return x
    return tree_util.public.tree_map(leaf, tree)


def _key_data_of(key, name):
    """(raw uint32[..., 2] data, was it a typed key) of any key, checked."""
    if isinstance(key, PRNGKeyArray):
        return key._data, True
    data = key if isinstance(key, Array) else core.asarray(key)
    if data.dtype != _U32 or data.ndim < 1 or data.shape[-1] != 2:
        raise TypeError(f"random.{name}: expected a key (kiln.random.key or a uint32[2] PRNGKey), got "
                        f"{data.dtype.name}{list(data.shape)}")
    return data, False


def _check_key(key, name):
    """The raw uint32[2] data of a single key (typed or raw); batched keys are refused, as in JAX."""
    data, _ = _key_data_of(key, name)
    if data.shape != (2,):
        raise ValueError(f"random.{name} accepts a single key, but was given a key array of shape "
                         f"{tuple(data.shape[:-1])} != (). Use kiln.vmap for batching.")
    return data


def _seed_data(seed, name):
    if isinstance(seed, PRNGKeyArray):
        raise TypeError(f"random.{name} accepts a scalar seed, but was given a PRNG key.")
    if np.ndim(seed):
        raise TypeError(f"random.{name} accepts a scalar seed, but was given an array of shape {np.shape(seed)} "
                        "!= (). Use kiln.vmap for batching")
    if isinstance(seed, Tracer) and seed._cval is None:
        s = core.asarray(seed)
        if s.dtype.kind not in "iu":
            raise TypeError(f"random.{name}: the seed must be an integer, got {s.dtype.name}")
        if s.dtype.itemsize > 4:  # (x64) the high word is the seed's upper 32 bits
            hi = lax.convert_element_type(lax.shift_right_logical(s, lax._to_array(32, s)), _U32)
            lo = lax.convert_element_type(lax.bitwise_and(s, lax._to_array(0xFFFFFFFF, s)), _U32)
        else:  # a 32-bit seed: high word 0, low word its bits (as JAX)
            s32 = lax.convert_element_type(s, np.int32) if s.dtype != np.int32 else s
            hi = lax.full((), np.uint32(0), _U32)
            lo = lax.bitcast_convert_type(s32, _U32)
        return lax.concatenate([lax.reshape(hi, (1,)), lax.reshape(lo, (1,))], 0)
    s = int(core.concrete_or_error(seed, "a PRNG seed"))
    if config.jax_enable_x64:
        s &= 0xFFFFFFFFFFFFFFFF
        return core.asarray(np.array([s >> 32, s & 0xFFFFFFFF], np.uint32))
    if not -2 ** 31 <= s < 2 ** 32:
        raise OverflowError(f"random.{name}: seed {s} does not fit in 32 bits (enable jax_enable_x64 for 64-bit "
                            "seeds)")
    return core.asarray(np.array([0, s & 0xFFFFFFFF], np.uint32))


def _impl_check(impl, name):
    if impl is not None and str(impl) not in ("threefry2x32", "key<fry>", "fry"):
        raise ValueError(f'random.{name}: unrecognized PRNG implementation "{impl}"; kiln has "threefry2x32"')


def PRNGKey(seed, *, impl=None):
    """A raw key, uint32[2], from an integer seed (as jax.random.PRNGKey)."""
    _impl_check(impl, "PRNGKey")
    return _seed_data(seed, "PRNGKey")


def key(seed, *, impl=None, dtype=None):
    """A typed key (shape (), dtype key<fry>) from an integer seed (as jax.random.key)."""
    _impl_check(impl if dtype is None else dtype, "key")
    return PRNGKeyArray(_seed_data(seed, "key"))


def key_data(keys):
    """The uint32[..., 2] data under a key array (a raw key is its own data)."""
    return _key_data_of(keys, "key_data")[0]


def wrap_key_data(key_bits_array, *, impl=None, dtype=None):
    """A typed key array over uint32[..., 2] key data."""
    _impl_check(impl if dtype is None else dtype, "wrap_key_data")
    data = key_bits_array if isinstance(key_bits_array, Array) else core.asarray(key_bits_array)
    if data.dtype != _U32 or data.ndim < 1 or data.shape[-1] != 2:
        raise TypeError(f"random.wrap_key_data: expected uint32[..., 2] key data, got {data.dtype.name}"
                        f"{list(data.shape)}")
    return PRNGKeyArray(data)


def key_impl(keys):
    _key_data_of(keys, "key_impl")
    return "threefry2x32"


def key_dtype(impl=None):
    _impl_check(impl, "key_dtype")
    return _KEY_DTYPE


def clone(key):
    """The same key, for reuse (an identity outside key-reuse checking, as in JAX)."""
    return key


def _as_key_like(typed, data):
    return PRNGKeyArray(data) if typed else data


def split(key, num=2):
    """`num` new keys (shape (num,), or the shape `num` if a tuple) from one, of the kind given."""
    data, typed = _key_data_of(key, "split")
    if data.shape != (2,):
        raise TypeError(f"random.split accepts a single key, but was given a key array of shape "
                        f"{tuple(data.shape[:-1])} != (). Use kiln.vmap for batching.")
    shape = tuple(int(n) for n in num) if isinstance(num, (tuple, list)) else (int(num),)
    return _as_key_like(typed, _split(data, shape))


def fold_in(key, data):
    """A new key from `key` and a 32-bit integer (its uint32 bits, as JAX)."""
    kdata, typed = _key_data_of(key, "fold_in")
    if kdata.shape != (2,):
        raise ValueError("random.fold_in accepts a single key. Use kiln.vmap for batching.")
    if np.ndim(data):
        raise TypeError(f"random.fold_in accepts a scalar, but was given an array of shape {np.shape(data)} != (). "
                        "Use kiln.vmap for batching.")
    if isinstance(data, int) and not 0 <= data < 2 ** 32:
        raise OverflowError(f"random.fold_in: Python integer {data} out of bounds for uint32")
    d = data if isinstance(data, Array) else core.asarray(np.uint32(data) if isinstance(data, int) else data)
    d = d if d.dtype == _U32 else lax.convert_element_type(d, _U32)
    y0, y1 = _threefry(kdata[0], kdata[1], lax.full((1,), np.uint32(0), _U32), lax.reshape(d, (1,)))
    return _as_key_like(typed, lax.concatenate([y0, y1], 0))


# ---------------------------------------------------------------------------
# Bits and uniform floats

def _shape(shape, name):
    try:
        return tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"random.{name}: shape must be a tuple of integers, got {shape!r}") from None


def _broadcast_shape(name, shape, *params):
    """The draw's shape: `shape` (checked: the parameters must broadcast to it), or the
    parameters' broadcast shape when shape is None."""
    pshapes = [np.shape(p) for p in params]
    if shape is None:
        return tuple(np.broadcast_shapes(*pshapes)) if pshapes else ()
    shape = _shape(shape, name)
    try:
        ok = tuple(np.broadcast_shapes(shape, *pshapes)) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"random.{name}: parameter shapes {pshapes} must broadcast to the shape argument {shape}")
    return shape


def _opt_shape(shape, name):
    return None if shape is None else _shape(shape, name)


def bits(key, shape=(), dtype=None):
    """Uniformly random unsigned integer bits (uint32, or uint64 under jax_enable_x64)."""
    key = _check_key(key, "bits")
    dtype = dtypes.default_uint_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
    width = dtype.itemsize * 8
    if dtype.kind != "u" or width not in _UINT:
        raise ValueError(f"random.bits: dtype must be an unsigned integer type, got {dtype.name}")
    return _random_bits(key, width, _shape(shape, "bits"))


def _float_dtype(dtype, name, complex_ok=False):
    dtype = dtypes.default_float_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
    if not (dtypes.is_float_dtype(dtype) or (complex_ok and dtype.kind == "c")):
        raise ValueError(f"random.{name}: dtype must be a float dtype, got {dtype.name}")
    return dtype


def _int_dtype(dtype, name):
    dtype = dtypes.default_int_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
    if dtype.kind not in "iu":
        raise TypeError(f"random.{name}: dtype must be an integer dtype, got {dtype.name}")
    return dtype


def _in(x, dtype):
    """x (array or Python scalar) converted to dtype."""
    return lax.convert_element_type(x, dtype) if isinstance(x, Array) else core.asarray(x, dtype)


_F32 = np.dtype(np.float32)


def _from_bits(b, dtype):
    """Floats of `dtype` with the bit patterns b (unsigned, dtype's width). kiln bitcasts only to
    32/64-bit floats, so 16-bit patterns go through float32: bfloat16 is its upper half, float16
    is rebiased (15 -> 127), its subnormals scaled from their integer mantissa."""
    if dtype.itemsize >= 4:
        return lax.bitcast_convert_type(b, dtype)
    b = lax.convert_element_type(b, _U32)
    if dtype == dtypes.bfloat16:
        out = lax.bitcast_convert_type(b << np.uint32(16), _F32)
    else:
        sign = (b >> np.uint32(15)) << np.uint32(31)
        e, m = (b >> np.uint32(10)) & np.uint32(0x1F), b & np.uint32(0x3FF)
        normal = lax.bitcast_convert_type(sign | ((e + np.uint32(112)) << np.uint32(23)) | (m << np.uint32(13)), _F32)
        special = lax.bitcast_convert_type(sign | np.uint32(0x7F800000) | (m << np.uint32(13)), _F32)
        sub = lax.convert_element_type(m, _F32) * np.float32(2.0 ** -24)
        sub = jnp.where(sign != 0, -sub, sub)
        out = jnp.where(e == 0, sub, jnp.where(e == 31, special, normal))
    return lax.convert_element_type(out, dtype)


def _to_bits(x):
    """The bit patterns of floats x (unsigned, x's width); the inverse of _from_bits."""
    if x.dtype.itemsize >= 4:
        return lax.bitcast_convert_type(x, _UINT[x.dtype.itemsize * 8])
    u = lax.bitcast_convert_type(lax.convert_element_type(x, _F32), _U32)
    if x.dtype == dtypes.bfloat16:
        return lax.convert_element_type(u >> np.uint32(16), _UINT[16])
    sign = (u >> np.uint32(31)) << np.uint32(15)
    e, m = (u >> np.uint32(23)) & np.uint32(0xFF), u & np.uint32(0x7FFFFF)
    normal = sign | ((e - np.uint32(112)) << np.uint32(10)) | (m >> np.uint32(13))
    sub = sign | lax.convert_element_type(lax.abs(lax.convert_element_type(x, _F32)) * np.float32(2.0 ** 24), _U32)
    special = sign | np.uint32(0x7C00) | (m >> np.uint32(13))
    bits = jnp.where(e == 255, special, jnp.where(e < 113, sub, normal))
    return lax.convert_element_type(bits, _UINT[16])


def _two_sum(a, b):
    """s + e == a + b exactly, s = fl(a + b) (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _two_prod(a, b):
    """p + e == a * b exactly, p = fl(a * b) (Dekker, with Veltkamp's split)."""
    c = np.array(4097.0 if a.dtype.itemsize == 4 else 134217729.0, a.dtype)  # 2**ceil(p/2) + 1
    ca, cb = a * c, b * c
    ah, bh = ca - (ca - a), cb - (cb - b)
    al, bl = a - ah, b - bh
    p = a * b
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _fma(a, b, c):
    """fl(a * b + c) rounded once, for float32/float64 without an FMA instruction: XLA on the CPU
    contracts JAX's `floats * span + minval` into one, so uniform draws in a range round as it.
    The exact a*b = uh + ul plus c is summed with the low parts rounded to odd, which makes the
    final rounding correct (Boldo and Melquiond, IEEE TC 57(4), 2008)."""
    uh, ul = _two_prod(a, b)
    th, tl = _two_sum(c, uh)
    s, e = _two_sum(tl, ul)
    udt = _UINT[s.dtype.itemsize * 8]
    bits = lax.bitcast_convert_type(s, udt)
    stepped = lax.bitcast_convert_type(jnp.where((e > 0) == (s > 0), bits + np.array(1, udt), bits - np.array(1, udt)),
                                       s.dtype)
    odd = jnp.where((e != 0) & ((bits & np.array(1, udt)) == 0), stepped, s)  # s + e rounded to odd
    return th + odd


def _static_span_is_pow2(minval, maxval, dtype):
    """Whether maxval - minval (Python/NumPy values) is a power of two in dtype, or zero."""
    with np.errstate(over="ignore", invalid="ignore"):
        span = np.asarray(maxval, dtype) - np.asarray(minval, dtype)
    return bool(np.all(np.isin(np.frexp(np.asarray(span, np.float64))[0], (0.5, -0.5, 0.0))))


def _uniform(key, shape, dtype, minval, maxval):
    """JAX's construction: random mantissa bits under the exponent of 1.0, minus one, scaled. Types
    with fewer than 8 mantissa bits (bfloat16) take 8-bit fields."""
    info = dtypes.finfo(dtype)
    nbits, nmant = info.bits, info.nmant
    rng_bits = 8 if nmant < 8 else nbits
    uint = _UINT[nbits]
    b = _random_bits(key, rng_bits, shape)
    if rng_bits != nbits:
        b = lax.convert_element_type(b, uint)
    one = np.array(1.0, dtype).view(uint)
    mant = lax.bitwise_or(lax.shift_right_logical(b, lax.full_like(b, rng_bits - nmant)), lax.full_like(b, one))
    floats = lax.sub(_from_bits(mant, dtype), lax.full(shape, 1.0, dtype))
    lo, hi = _in(minval, dtype), _in(maxval, dtype)
    span = hi - lo
    plain = floats * span + lo  # as XLA rounds 16-bit types (each op), or any power-of-2 span (exact)
    if dtype.itemsize < 4 or (not isinstance(minval, Array) and not isinstance(maxval, Array)
                              and _static_span_is_pow2(minval, maxval, dtype)):
        return jnp.maximum(lo, plain)
    fused = _fma(floats, jnp.broadcast_to(span, shape), jnp.broadcast_to(lo, shape))
    return jnp.maximum(lo, jnp.where(jnp.isfinite(fused), fused, plain))  # (Dekker's split overflows past max/4097)


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0):
    """Uniform floats in [minval, maxval)."""
    key = _check_key(key, "uniform")
    return _uniform(key, _shape(shape, "uniform"), _float_dtype(dtype, "uniform"), minval, maxval)


def _normal_real(key, shape, dtype):
    lo = (np.array(-1.0, dtype).view(_UINT[dtype.itemsize * 8]) - 1).view(dtype)  # nextafter(-1, 0)
    u = _uniform(key, shape, dtype, lo, 1.0)
    return lax.mul(lax.full(shape, np.sqrt(2.0), dtype), lax.erf_inv(u))


def normal(key, shape=(), dtype=None):
    """Standard normal floats: sqrt(2) erf_inv of a uniform draw in (-1, 1); complex dtypes draw
    the real and imaginary parts from two split keys and scale by 1/sqrt(2)."""
    key = _check_key(key, "normal")
    dtype = _float_dtype(dtype, "normal", complex_ok=True)
    shape = _shape(shape, "normal")
    if dtype.kind != "c":
        return _normal_real(key, shape, dtype)
    k_re, k_im = _split(key)
    real = dtypes.real_of(dtype)
    re = lax.convert_element_type(_normal_real(k_re, shape, real), dtype)
    im = lax.convert_element_type(_normal_real(k_im, shape, real), dtype)
    return (re + 1j * im) / np.array(np.sqrt(2), dtype)


def _param(p):
    """A parameter as an array; Python floats take the default float type, as jax.lax.dtype says."""
    return p if isinstance(p, Array) else core.asarray(p)


def bernoulli(key, p=0.5, shape=None, mode="low"):
    """True with probability p (compared in p's float type). mode="high" adds a second draw below
    the first's resolution, for tiny p."""
    key = _check_key(key, "bernoulli")
    if mode not in ("high", "low"):
        raise ValueError(f"random.bernoulli: got mode={mode!r}, expected 'high' or 'low'")
    p = _param(p)
    if not dtypes.is_float_dtype(p.dtype):
        raise TypeError(f"random.bernoulli: the probability p must have a floating dtype, got {p.dtype.name}")
    shape = p.shape if shape is None else _shape(shape, "bernoulli")
    if mode == "high":
        u = _uniform(key, (2, *shape), p.dtype, 0.0, 1.0)
        u2 = u[1] * (2.0 ** -dtypes.finfo(p.dtype).nmant)
        return u2 < p - u[0]
    return _uniform(key, shape, p.dtype, 0.0, 1.0) < p


def _clz32(x):
    """Leading zeros of uint32 values (0..32), by halving."""
    n = lax.full_like(x, 0)
    for s in (16, 8, 4, 2, 1):
        top_clear = lax.le(x, lax.full_like(x, 0xFFFFFFFF >> s))
        n = lax.select(top_clear, n + np.uint32(s), n)
        x = lax.select(top_clear, lax.shift_left(x, lax.full_like(x, s)), x)
    return n + lax.convert_element_type(lax.eq(x, lax.full_like(x, 0)), _U32)


def _shift(x, s, left):
    """x shifted by s with XLA's rule that shifts of 32 or more give 0."""
    y = lax.shift_left(x, jnp.minimum(s, np.uint32(31))) if left else \
        lax.shift_right_logical(x, jnp.minimum(s, np.uint32(31)))
    return jnp.where(s >= np.uint32(32), np.uint32(0), y)


def _safe_int_to_float(hi, lo):
    """A 64-bit fixed-point fraction (hi:lo) to float32 in (0, 1), keeping 24 significant bits."""
    hiclz, loclz = _clz32(hi), _clz32(lo)
    mantissa = _shift(hi, hiclz, True) | jnp.where(hiclz == 32, _shift(lo, loclz, True),
                                                   _shift(lo, np.uint32(32) - hiclz, False))
    mantissa = lax.shift_right_logical(mantissa, lax.full_like(mantissa, 8)) & np.uint32((1 << 23) - 1)
    exp = lax.shift_left(np.uint32(126) - jnp.where(hiclz == 32, np.uint32(32) + loclz, hiclz),
                         lax.full_like(mantissa, 23))
    exp = exp & np.uint32((1 << 30) - (1 << 22))
    return lax.bitcast_convert_type(exp | mantissa, np.float32)


def _gumbel(key, shape, dtype, mode):
    info = dtypes.finfo(dtype)
    if dtype == np.float32 and mode == "highest":
        b = _random_bits(key, 32, (2,) + shape)
        neg = lax.bitwise_not(b)
        carry = lax.convert_element_type(neg[1] == np.uint32(0xFFFFFFFF), _U32)
        neg_hi, neg_lo = neg[0] + carry, neg[1] + np.uint32(1)  # 1 - bits, as a 64-bit fixed-point fraction
        flip = b[0] < np.uint32(1 << 31)
        x = _safe_int_to_float(jnp.where(flip, b[0], neg_hi), jnp.where(flip, b[1], neg_lo))
        return jnp.where(flip, -jnp.log(-jnp.log1p(-x)), -jnp.log(-jnp.log(x)))
    if mode in ("high", "highest"):
        u = _uniform(key, (2,) + shape, dtype, 0.0, 1.0)
        high, low = u[0], u[1]
        x = jnp.where(high >= 0.5, high, high + 2.0 ** -info.nmant * low + float(info.tiny))
        return -jnp.log(-jnp.log1p(-x))
    return -jnp.log(-jnp.log(_uniform(key, shape, dtype, info.tiny, 1.0)))


def gumbel(key, shape=(), dtype=None, mode=None):
    """Standard Gumbel samples, -log(-log(u)). mode "high" (two draws per value) and "highest"
    (a 64-bit fraction, float32) reach further into the tail."""
    key = _check_key(key, "gumbel")
    dtype = _float_dtype(dtype, "gumbel")
    mode = "low" if mode is None else mode
    if mode not in ("highest", "high", "low"):
        raise ValueError(f"random.gumbel: mode must be 'low', 'high' or 'highest', got {mode!r}")
    return _gumbel(key, _shape(shape, "gumbel"), dtype, mode)


# ---------------------------------------------------------------------------
# Integers, permutations and choices

def _clip_to(val, dtype):
    """val (an integer array) converted to dtype, clipped to its range instead of wrapped."""
    lo = max(int(dtypes.iinfo(dtype).min), int(dtypes.iinfo(val.dtype).min))
    hi = min(int(dtypes.iinfo(dtype).max), int(dtypes.iinfo(val.dtype).max))
    return jnp.clip(val, np.array(lo, val.dtype), np.array(hi, val.dtype)).astype(dtype)


def _randint(key, shape, minval, maxval, dtype):
    """JAX's draw: two words of bits per value, reduced modulo the span (as 2**n * hi + lo)."""
    minval, maxval = jnp.asarray(minval), jnp.asarray(maxval)
    if minval.dtype.kind not in "iu":
        minval = minval.astype(dtypes.default_int_dtype())
    if maxval.dtype.kind not in "iu":
        maxval = maxval.astype(dtypes.default_int_dtype())
    top = _clip_to(core.asarray(np.array(dtypes.iinfo(dtype).max, dtype)), maxval.dtype)
    maxval_out_of_range = maxval > top
    minval, maxval = _clip_to(minval, dtype), _clip_to(maxval, dtype)
    nbits = dtypes.iinfo(dtype).bits
    k = _split(key)
    higher, lower = _random_bits(k[0], nbits, shape), _random_bits(k[1], nbits, shape)
    udt = _UINT[nbits]
    span = lax.convert_element_type(maxval - minval, udt)
    span = jnp.where(maxval <= minval, np.array(1, udt), span)  # maxval <= minval gives minval
    span = jnp.where(maxval_out_of_range & (maxval > minval), span + np.array(1, udt), span)
    # the multiplier from the span before either is broadcast: two remainders per draw fewer
    multiplier = lax.rem(np.array(2 ** (nbits // 2), udt), span)
    multiplier = lax.rem(multiplier * multiplier, span)
    span, multiplier = jnp.broadcast_to(span, shape), jnp.broadcast_to(multiplier, shape)
    offset = lax.rem(lax.rem(higher, span) * multiplier + lax.rem(lower, span), span)
    return minval + lax.convert_element_type(offset, dtype)


def randint(key, shape, minval, maxval, dtype=None):
    """Integers in [minval, maxval) (JAX's slightly biased modulo draw; 8- and 16-bit types are
    drawn as int32 and converted)."""
    key = _check_key(key, "randint")
    dtype = _int_dtype(dtype, "randint")
    shape = _broadcast_shape("randint", shape, minval, maxval)
    info = dtypes.iinfo(dtype)
    if info.bits < 32:
        minval = jnp.asarray(minval).astype(np.int32).clip(int(info.min), int(info.max))
        maxval = jnp.asarray(maxval).astype(np.int32).clip(int(info.min), int(info.max) + 1)
        return _randint(key, shape, minval, maxval, np.dtype(np.int32)).astype(dtype)
    return _randint(key, shape, minval, maxval, dtype)


def _shuffle(key, x, axis):
    """Sorts by fresh 32-bit random keys, as many rounds as JAX takes (3 log n / log 2**32)."""
    rounds = int(np.ceil(3 * np.log(max(1, x.size)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        k = _split(key)
        key, subkey = k[0], k[1]
        _, x = lax._sort_key_val_random(_random_bits(subkey, 32, x.shape), x, axis)
    return x


def _axis(axis, ndim, name):
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"random.{name}: axis {axis} is out of bounds for an array of dimension {ndim}")
    return axis % ndim


def permutation(key, x, axis=0, independent=False):
    """A shuffled arange(x) (x an integer) or x shuffled along `axis` (all vectors along the axis
    alike, or each on its own with independent=True)."""
    key = _check_key(key, "permutation")
    if not np.ndim(x):
        xa = core.asarray(x) if not isinstance(x, Array) else x
        if xa.dtype.kind not in "iu":
            raise TypeError("random.permutation: x must be an integer or at least 1-dimensional")
        n = int(core.concrete_or_error(x, "argument x of random.permutation()"))
        return _shuffle(key, jnp.arange(n), 0)
    x = jnp.asarray(x)
    axis = _axis(axis, x.ndim, "permutation")
    if independent or x.ndim == 1:
        return _shuffle(key, x, axis)
    ind = _shuffle(key, jnp.arange(x.shape[axis]), 0)
    return jnp.take(x, ind, axis)


def _top_k_indices(x, k):
    """Indices of the k largest values along the last axis, largest first, ties by index (as
    lax.top_k), from a stable sort of -x."""
    iota = lax.broadcasted_iota(np.int32, x.shape, x.ndim - 1)
    idx = lax.sort((lax.neg(x), iota), dimension=x.ndim - 1, is_stable=True, num_keys=1)[1]
    return idx[..., :k]


def choice(key, a, shape=(), replace=True, p=None, axis=0, mode=None):
    """Samples of a (or of arange(a)), with or without replacement, optionally weighted by p."""
    key = _check_key(key, "choice")
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"random.choice: shape must be a sequence, got {shape}")
    shape = _shape(shape, "choice")
    arr = jnp.asarray(a)
    if arr.ndim == 0:
        n_inputs = int(core.concrete_or_error(a, "random.choice()"))
    else:
        axis = _axis(axis, arr.ndim, "choice")
        n_inputs = arr.shape[axis]
    n_draws = math.prod(shape)
    if n_draws == 0:
        return jnp.zeros(shape, arr.dtype)
    if n_inputs <= 0:
        raise ValueError("random.choice: a must be greater than 0 unless no samples are taken")
    if not replace and n_draws > n_inputs:
        raise ValueError(f"random.choice: cannot take a larger sample (size {n_draws}) than population (size "
                         f"{n_inputs}) when replace=False")
    if p is None:
        if replace:
            ind = randint(key, shape, 0, n_inputs)
            result = ind if arr.ndim == 0 else jnp.take(arr, ind, axis)
        else:
            slices = (slice(None),) * axis + (slice(n_draws),)
            result = permutation(key, n_inputs if arr.ndim == 0 else arr, axis)[slices]
    else:
        p_arr = jnp.asarray(p)
        if not dtypes.is_float_dtype(p_arr.dtype):
            p_arr = p_arr.astype(dtypes.to_inexact_dtype(p_arr.dtype))
        if p_arr.shape != (n_inputs,):
            raise ValueError(f"random.choice: p must be None or a 1D vector with the same size as a.shape[axis]; "
                             f"p has shape {p_arr.shape} and a.shape[axis] is {n_inputs}.")
        if replace:
            p_cuml = jnp.cumsum(p_arr)
            r = p_cuml[-1] * (1 - _uniform(key, shape, p_cuml.dtype, 0.0, 1.0))
            ind = jnp.searchsorted(p_cuml, r).astype(dtypes.default_int_dtype())
        else:  # the Gumbel top-k trick
            g = gumbel(key, (n_inputs,), p_arr.dtype, mode=mode) + jnp.log(p_arr)
            ind = _top_k_indices(g, n_draws).astype(dtypes.default_int_dtype())
        result = ind if arr.ndim == 0 else jnp.take(arr, ind, axis)
    return result.reshape(shape if arr.ndim == 0 else arr.shape[:axis] + tuple(shape) + arr.shape[axis + 1:])


def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None):
    """Indices drawn from softmax(logits) along `axis` (the Gumbel-max trick; without replacement
    the Gumbel top-k trick, the draws along a new leading axis)."""
    key = _check_key(key, "categorical")
    logits = jnp.asarray(logits)
    axis = int(axis)
    batch_shape = tuple(np.delete(logits.shape, axis))
    shape = batch_shape if shape is None else _broadcast_shape("categorical", shape, np.empty(batch_shape))
    prefix = shape[:len(shape) - len(batch_shape)]
    if replace:
        ax = axis - logits.ndim if axis >= 0 else axis
        logits_shape = list(shape[len(shape) - len(batch_shape):])
        logits_shape.insert(ax % logits.ndim, logits.shape[ax])
        g = gumbel(key, (*prefix, *logits_shape), logits.dtype, mode=mode)
        return jnp.argmax(g + lax.expand_dims(logits, tuple(range(len(prefix)))), axis=ax)
    logits = logits + gumbel(key, logits.shape, logits.dtype, mode=mode)
    k = math.prod(prefix)
    if k > logits.shape[axis]:
        raise ValueError(f"random.categorical: number of samples without replacement ({k}) cannot exceed number "
                         f"of categories ({logits.shape[axis]}).")
    idx = _top_k_indices(jnp.moveaxis(logits, axis, -1), k)  # batch_shape + (k,)
    return lax.reshape(jnp.moveaxis(idx, -1, 0), shape)


# ---------------------------------------------------------------------------
# Samplers with a closed form over uniform / normal draws



def exponential(key, shape=(), dtype=None):
    """Standard exponential samples, -log1p(-u)."""
    key = _check_key(key, "exponential")
    dtype = _float_dtype(dtype, "exponential")
    u = _uniform(key, _shape(shape, "exponential"), dtype, 0.0, 1.0)
    return lax.neg(lax.log1p(lax.neg(u)))


def laplace(key, shape=(), dtype=None):
    key = _check_key(key, "laplace")
    dtype = _float_dtype(dtype, "laplace")
    u = _uniform(key, _shape(shape, "laplace"), dtype, -1.0 + float(dtypes.finfo(dtype).epsneg), 1.0)
    return lax.mul(lax.sign(u), lax.log1p(lax.neg(lax.abs(u))))


def logistic(key, shape=(), dtype=None):
    key = _check_key(key, "logistic")
    dtype = _float_dtype(dtype, "logistic")
    x = _uniform(key, _shape(shape, "logistic"), dtype, dtypes.finfo(dtype).tiny, 1.0)
    return lax.sub(lax.log(x), lax.log1p(lax.neg(x)))


def cauchy(key, shape=(), dtype=None):
    key = _check_key(key, "cauchy")
    dtype = _float_dtype(dtype, "cauchy")
    u = _uniform(key, _shape(shape, "cauchy"), dtype, dtypes.finfo(dtype).eps, 1.0)
    return lax.tan(lax.mul(lax.full_like(u, np.pi), lax.sub(u, lax.full_like(u, 0.5))))


def pareto(key, b, shape=None, dtype=None):
    key = _check_key(key, "pareto")
    dtype = _float_dtype(dtype, "pareto")
    shape = _broadcast_shape("pareto", shape, b)
    e = exponential(key, shape, dtype)
    return lax.exp(e / _in(b, dtype))


def rayleigh(key, scale, shape=None, dtype=None):
    key = _check_key(key, "rayleigh")
    dtype = _float_dtype(dtype, "rayleigh")
    shape = _broadcast_shape("rayleigh", shape, scale)
    u = _uniform(key, shape, dtype, 0.0, 1.0)
    scale = jnp.broadcast_to(_in(scale, dtype), shape)
    return lax.mul(scale, lax.sqrt(lax.mul(lax.log(u), lax.full_like(u, -2))))


def weibull_min(key, scale, concentration, shape=(), dtype=None):
    key = _check_key(key, "weibull_min")
    dtype = _float_dtype(dtype, "weibull_min")
    u = _uniform(key, _shape(shape, "weibull_min"), dtype, 0.0, 1.0)
    return jnp.power(-jnp.log1p(-u), 1.0 / concentration) * scale


def maxwell(key, shape=(), dtype=None):
    """Norms of 3-d standard normal vectors."""
    key = _check_key(key, "maxwell")
    dtype = _float_dtype(dtype, "maxwell")
    n = _normal_real(key, _shape(shape, "maxwell") + (3,), dtype)
    return jnp.linalg.norm(n, axis=-1)


def rademacher(key, shape=(), dtype=None):
    """-1 or +1 with equal probability (in an integer dtype unless dtype says)."""
    key = _check_key(key, "rademacher")
    dtype = dtypes.default_int_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
    b = bernoulli(key, 0.5, _shape(shape, "rademacher")).astype(dtype)
    return (2 * b - 1).astype(dtype)


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    key = _check_key(key, "double_sided_maxwell")
    dtype = _float_dtype(dtype, "double_sided_maxwell")
    params = tuple(np.broadcast_shapes(np.shape(loc), np.shape(scale)))
    shape = _shape(shape, "double_sided_maxwell") or params
    shape = shape + params
    k = _split(key)
    rvs = maxwell(k[0], shape, dtype)
    sign = rademacher(k[1], shape, dtype)
    return sign * rvs * scale + loc


def lognormal(key, sigma=np.float32(1), shape=None, dtype=None):
    key = _check_key(key, "lognormal")
    dtype = _float_dtype(dtype, "lognormal")
    shape = _broadcast_shape("lognormal", shape, sigma)
    return lax.exp(_normal_real(key, shape, dtype) * _in(sigma, dtype))


def triangular(key, left, mode, right, shape=None, dtype=None):
    key = _check_key(key, "triangular")
    dtype = _float_dtype(dtype, "triangular")
    shape = _broadcast_shape("triangular", shape, left, mode, right)
    left, right, mode = (jnp.broadcast_to(_in(v, dtype), shape) for v in (left, right, mode))
    fc = (mode - left) / (right - left)
    u = _uniform(key, shape, dtype, 0.0, 1.0)
    out1 = left + lax.sqrt(u * (right - left) * (mode - left))
    out2 = right - lax.sqrt((1 - u) * (right - left) * (right - mode))
    return lax.select(u < fc, out1, out2)


def _nextafter(x, toward_inf):
    """The next float after x toward +inf (or -inf), by stepping x's bits (x not NaN)."""
    udt = _UINT[x.dtype.itemsize * 8]
    b = _to_bits(x)
    away = (x > 0) if toward_inf else (x < 0)  # moving away from zero: the magnitude grows
    stepped = _from_bits(jnp.where(away, b + np.array(1, udt), b - np.array(1, udt)), x.dtype)
    tiny = _from_bits(np.array(1 if toward_inf else (1 << (x.dtype.itemsize * 8 - 1)) | 1, udt), x.dtype)
    inf = np.array(np.inf if toward_inf else -np.inf, x.dtype)
    return jnp.where(x == inf, x, jnp.where(x == 0, tiny, stepped))


def truncated_normal(key, lower, upper, shape=None, dtype=None):
    """Standard normal values in (lower, upper), by inverting erf over [erf(lower), erf(upper))."""
    key = _check_key(key, "truncated_normal")
    dtype = _float_dtype(dtype, "truncated_normal")
    shape = _broadcast_shape("truncated_normal", shape, lower, upper)
    sqrt2 = np.array(np.sqrt(2), dtype)
    lower, upper = _in(lower, dtype), _in(upper, dtype)
    a = lax.erf(lower / sqrt2)
    b = lax.erf(upper / sqrt2)
    u = _uniform(key, shape, dtype, a, b)
    out = sqrt2 * lax.erf_inv(u)
    return jnp.clip(out, _nextafter(lower, True), _nextafter(upper, False))


def geometric(key, p, shape=None, dtype=None):
    """Trials until the first success: floor(log u / log1p(-p)) + 1."""
    key = _check_key(key, "geometric")
    dtype = _int_dtype(dtype, "geometric")
    shape = _broadcast_shape("geometric", shape, p)
    p = _param(p)
    if not dtypes.is_float_dtype(p.dtype):
        p = p.astype(dtypes.to_inexact_dtype(p.dtype))
    u = _uniform(key, shape, p.dtype, 0.0, 1.0)
    u = jnp.where(u == 0, 1, u)
    g = lax.floor(lax.div(lax.log(u), jnp.broadcast_to(lax.log1p(-p), shape))) + 1
    return g.astype(dtype)


def wald(key, mean, shape=None, dtype=None):
    """Inverse Gaussian samples (Michael, Schucany and Haas)."""
    key = _check_key(key, "wald")
    dtype = _float_dtype(dtype, "wald")
    shape = _broadcast_shape("wald", shape, mean)
    k = _split(key)
    mean = jnp.broadcast_to(_in(mean, dtype), shape)
    v = _normal_real(k[0], shape, dtype)
    z = _uniform(k[1], shape, dtype, 0.0, 1.0)
    y = lax.integer_pow(v, 2)
    y_sq = lax.integer_pow(y, 2)
    mean_sq = lax.integer_pow(mean, 2)
    sqrt_term = lax.sqrt(4 * mean * y + mean_sq * y_sq)
    x = mean + mean_sq * y / 2 - mean / 2 * sqrt_term
    return lax.select(lax.le(z, mean / (mean + x)), x, mean_sq / x)


from kiln._src.random_samplers import (ball, beta, binomial, chisquare, dirichlet, f, gamma,  # noqa: E402,F401
                                       generalized_normal, loggamma, multinomial, multivariate_normal,
                                       orthogonal, poisson, t)


# ---------------------------------------------------------------------------
# out_sharding: JAX's samplers place their result by a NamedSharding or a PartitionSpec over the
# current mesh (flax's layers pass out_sharding=None). Added once to each, here.

_SHARDED_SAMPLERS = ("ball", "bernoulli", "beta", "bits", "categorical", "cauchy", "chisquare", "dirichlet",
                     "exponential", "f", "gamma", "generalized_normal", "geometric", "gumbel", "laplace",
                     "loggamma", "logistic", "lognormal", "maxwell", "multivariate_normal", "normal", "orthogonal",
                     "pareto", "permutation", "poisson", "rademacher", "randint", "rayleigh", "t", "triangular",
                     "truncated_normal", "uniform", "wald")


def _with_out_sharding(fn):
    name = fn.__name__

    @functools.wraps(fn)
    def sampler(*args, out_sharding=None, **kwargs):
        out = fn(*args, **kwargs)
        if out_sharding is None:
            return out
        from kiln.sharding import NamedSharding, PartitionSpec
        if not isinstance(out_sharding, (NamedSharding, PartitionSpec)):
            raise TypeError(f"`out_sharding` argument of {name} only supports instances of `NamedSharding` or "
                            f"`PartitionSpec`. Got {out_sharding!r} of type: {type(out_sharding)}")
        from kiln._src.toplevel import reshard
        return reshard(out, out_sharding)
    params = list(inspect.signature(fn).parameters.values())
    params.append(inspect.Parameter("out_sharding", inspect.Parameter.KEYWORD_ONLY, default=None))
    sampler.__signature__ = inspect.signature(fn).replace(parameters=params)
    return sampler


for _name in _SHARDED_SAMPLERS:
    globals()[_name] = _with_out_sharding(globals()[_name])
del _name
