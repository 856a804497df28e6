"""kiln.random: JAX's counter-based PRNG (threefry-2x32, partitionable bit layout), giving JAX's
numbers for the same keys. Keys are uint32[2] arrays (raw keys, as jax.random.PRNGKey).

Implemented with kiln.lax on uint32 arrays, so it runs eagerly, under jit and under vmap. Draws
take JAX's default float width (float64 under jax_enable_x64). Only what reproduces JAX bit for
bit is provided; other samplers and widths raise NotImplementedError."""

import numpy as np

from kiln import lax
from kiln._src import core, dtypes
from kiln._src.config import config
from kiln._src.core import Array, Tracer

_U32 = np.dtype(np.uint32)
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


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


def _check_key(key, name):
    key = key if isinstance(key, Array) else core.asarray(key)
    if key.shape != (2,) or key.dtype != _U32:
        raise TypeError(f"random.{name}: expected a key (uint32[2] from kiln.random.PRNGKey), got "
                        f"{key.dtype.name}{list(key.shape)}")
    return key


def _shape(shape, name):
    try:
        return tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"random.{name}: shape must be a tuple of integers, got {shape!r}") from None


def _counts(shape):
    """The flat index of every element as two uint32 halves (hi, lo), arranged in `shape`."""
    n = int(np.prod(shape)) if shape else 1
    if n >= 2 ** 32:
        raise NotImplementedError("kiln.random: more than 2**32 values per draw are not supported yet")
    lo = lax.broadcasted_iota(_U32, shape, 0) if len(shape) == 1 else lax.reshape(lax.iota(_U32, n), shape)
    return lax.full(shape, np.uint32(0), _U32), lo


def _bits2(key, shape):
    k0, k1 = key[0], key[1]
    hi, lo = _counts(shape)
    return _threefry(k0, k1, hi, lo)


def PRNGKey(seed):
    """A raw key from an integer seed (as jax.random.PRNGKey)."""
    if isinstance(seed, Tracer) and seed._cval is None:
        s = core.asarray(seed)
        if s.dtype.kind not in "iu" or s.shape != ():
            raise TypeError(f"random.PRNGKey: the seed must be an integer scalar, got {s.dtype.name}{list(s.shape)}")
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
        raise OverflowError(f"random.PRNGKey: seed {s} does not fit in 32 bits (enable jax_enable_x64 for 64-bit seeds)")
    return core.asarray(np.array([0, s & 0xFFFFFFFF], np.uint32))


key = PRNGKey


def key_data(keys):
    return keys


def wrap_key_data(key_bits_array, impl=None):
    return core.asarray(key_bits_array, _U32)


def split(key, num=2):
    """`num` new keys (shape (num, 2)) from one."""
    key = _check_key(key, "split")
    num = int(num) if not isinstance(num, tuple) else num
    shape = (num,) if isinstance(num, int) else tuple(num)
    b1, b2 = _bits2(key, shape)
    return lax.concatenate([lax.expand_dims(b1, (len(shape),)), lax.expand_dims(b2, (len(shape),))], len(shape))


def fold_in(key, data):
    """A new key from `key` and an integer."""
    key = _check_key(key, "fold_in")
    d = PRNGKey(data)
    y0, y1 = _threefry(key[0], key[1], lax.reshape(d[0], (1,)), lax.reshape(d[1], (1,)))
    return lax.concatenate([y0, y1], 0)


_UINT = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: _U32, 64: np.dtype(np.uint64)}


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


def bits(key, shape=(), dtype=None):
    """Uniformly random unsigned integer bits (uint32 unless dtype says)."""
    key = _check_key(key, "bits")
    dtype = _U32 if dtype is None else dtypes.canonicalize_dtype(np.dtype(dtype))
    width = dtype.itemsize * 8
    if dtype.kind != "u" or width not in _UINT:
        raise TypeError(f"random.bits: dtype must be an unsigned integer type, got {dtype.name}")
    return _random_bits(key, width, _shape(shape, "bits"))


_MANTISSA = {np.dtype(np.float16): 10, np.dtype(np.float32): 23, np.dtype(np.float64): 52}


def _float_dtype(dtype, name):
    dtype = dtypes.canonicalize_dtype(np.dtype(dtypes.default_float_dtype() if dtype is None else dtype))
    if dtype.itemsize == 2 and (dtype in _MANTISSA or dtype == dtypes.bfloat16):
        raise NotImplementedError(f"random.{name}: {dtype.name} draws are not supported yet by kiln (JAX draws "
                                  "16-bit floats from 16-bit fields); draw float32 and convert")
    if dtype not in _MANTISSA:
        raise TypeError(f"random.{name}: dtype must be a float type, got {dtype.name}")
    return dtype


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0):
    """Uniform floats in [minval, maxval): random mantissa bits under the exponent of 1.0, minus
    one, as JAX draws them (for each float width)."""
    dtype = _float_dtype(dtype, "uniform")
    shape = _shape(shape, "uniform")
    key = _check_key(key, "uniform")
    width = dtype.itemsize * 8
    nmant = _MANTISSA[dtype]
    b = _random_bits(key, width, shape)
    one = np.array(1.0, dtype).view(_UINT[width])
    mant = lax.bitwise_or(lax.shift_right_logical(b, lax.full_like(b, width - nmant)), lax.full_like(b, one))
    f = lax.sub(lax.bitcast_convert_type(mant, dtype), lax.full(shape, 1.0, dtype))
    lo = lax.convert_element_type(core.asarray(minval), dtype)
    hi = lax.convert_element_type(core.asarray(maxval), dtype)
    lo_b = lax.broadcast_in_dim(lo, shape, ()) if lo.shape == () else lo
    hi_b = lax.broadcast_in_dim(hi, shape, ()) if hi.shape == () else hi
    return lax.max(lo_b, lax.add(lax.mul(f, lax.sub(hi_b, lo_b)), lo_b))


def normal(key, shape=(), dtype=None):
    """Standard normal floats (inverse error function of a uniform draw, as JAX)."""
    dtype = _float_dtype(dtype, "normal")
    shape = _shape(shape, "normal")
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = uniform(key, shape, dtype, lo, 1.0)
    return lax.mul(lax.full(shape, np.sqrt(2.0), dtype), lax.erf_inv(u))


def bernoulli(key, p=0.5, shape=None):
    """True with probability p."""
    p = core.asarray(p, np.float32) if not isinstance(p, Array) else p
    shape = p.shape if shape is None else _shape(shape, "bernoulli")
    u = uniform(key, shape, np.float32)
    pb = lax.broadcast_in_dim(p, shape, ()) if p.shape == () and shape != () else p
    return lax.lt(u, lax.convert_element_type(pb, np.float32))


def gumbel(key, shape=(), dtype=None):
    """Standard Gumbel samples."""
    dtype = _float_dtype(dtype, "gumbel")
    shape = _shape(shape, "gumbel")
    u = uniform(key, shape, dtype, dtypes.finfo(dtype).tiny, 1.0)
    return lax.neg(lax.log(lax.neg(lax.log(u))))


def _not_yet(name):
    def f(*args, **kwargs):
        raise NotImplementedError(f"random.{name} is not supported yet by kiln (only samplers that reproduce "
                                  "JAX's numbers exactly are provided: uniform, normal, bernoulli, gumbel, bits)")
    f.__name__ = name
    return f


for _n in ("randint", "choice", "permutation", "categorical", "truncated_normal", "gamma", "beta", "exponential",
           "poisson", "multivariate_normal", "dirichlet", "laplace", "logistic", "cauchy", "rademacher", "shuffle"):
    globals()[_n] = _not_yet(_n)
