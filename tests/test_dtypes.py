"""kiln._src.dtypes: JAX's dtype promotion (weak types included),
canonicalization under jax_enable_x64, issubdtype/iinfo/finfo and the
`jnp.float32`-style scalar types. Expected tables were taken from JAX's
behaviour and are written out literally here (the test never imports jax)."""

import itertools

import ml_dtypes
import numpy as np
import pytest

from kiln._src import dtypes
from kiln._src.config import config


@pytest.fixture(params=[False, True], ids=["x32", "x64"])
def x64(request):
    old = config.jax_enable_x64
    config.update("jax_enable_x64", request.param)
    yield request.param
    config.update("jax_enable_x64", old)


def _set_x64(value):
    old = config.jax_enable_x64
    config.update("jax_enable_x64", value)
    return old


CODES = {
    "b1": np.dtype(bool), "i1": np.dtype(np.int8), "i2": np.dtype(np.int16),
    "i4": np.dtype(np.int32), "i8": np.dtype(np.int64), "u1": np.dtype(np.uint8),
    "u2": np.dtype(np.uint16), "u4": np.dtype(np.uint32), "u8": np.dtype(np.uint64),
    "f2": np.dtype(np.float16), "bf": np.dtype(ml_dtypes.bfloat16),
    "f4": np.dtype(np.float32), "f8": np.dtype(np.float64),
}
ALL = list(CODES.values())

# jnp.promote_types(row, column), copied from JAX. Note u8 with any signed int
# gives float64, bf16 with f16 gives f32, and bool is below everything.
PROMOTE_X64 = """
      b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 bf f4 f8
  b1  b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 bf f4 f8
  i1  i1 i1 i2 i4 i8 i2 i4 i8 f8 f2 bf f4 f8
  i2  i2 i2 i2 i4 i8 i2 i4 i8 f8 f2 bf f4 f8
  i4  i4 i4 i4 i4 i8 i4 i4 i8 f8 f2 bf f4 f8
  i8  i8 i8 i8 i8 i8 i8 i8 i8 f8 f2 bf f4 f8
  u1  u1 i2 i2 i4 i8 u1 u2 u4 u8 f2 bf f4 f8
  u2  u2 i4 i4 i4 i8 u2 u2 u4 u8 f2 bf f4 f8
  u4  u4 i8 i8 i8 i8 u4 u4 u4 u8 f2 bf f4 f8
  u8  u8 f8 f8 f8 f8 u8 u8 u8 u8 f2 bf f4 f8
  f2  f2 f2 f2 f2 f2 f2 f2 f2 f2 f2 f4 f4 f8
  bf  bf bf bf bf bf bf bf bf bf f4 bf f4 f8
  f4  f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f8
  f8  f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8
"""
# Without x64 JAX avoids forming int64 from 32-bit inputs: u4 x i* -> i4.
PROMOTE_X32 = """
      b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 bf f4 f8
  b1  b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 bf f4 f8
  i1  i1 i1 i2 i4 i8 i2 i4 i4 f8 f2 bf f4 f8
  i2  i2 i2 i2 i4 i8 i2 i4 i4 f8 f2 bf f4 f8
  i4  i4 i4 i4 i4 i8 i4 i4 i4 f8 f2 bf f4 f8
  i8  i8 i8 i8 i8 i8 i8 i8 i8 f8 f2 bf f4 f8
  u1  u1 i2 i2 i4 i8 u1 u2 u4 u8 f2 bf f4 f8
  u2  u2 i4 i4 i4 i8 u2 u2 u4 u8 f2 bf f4 f8
  u4  u4 i4 i4 i4 i8 u4 u4 u4 u8 f2 bf f4 f8
  u8  u8 f8 f8 f8 f8 u8 u8 u8 u8 f2 bf f4 f8
  f2  f2 f2 f2 f2 f2 f2 f2 f2 f2 f2 f4 f4 f8
  bf  bf bf bf bf bf bf bf bf bf f4 bf f4 f8
  f4  f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f8
  f8  f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8
"""
# jnp.result_type(dtype, python_scalar) for each column dtype. (Lists of
# pairs, not dicts: 1 == 1.0 would merge the keys.)
WEAK_ROWS = {
    True: [(1, "i8 i1 i2 i4 i8 u1 u2 u4 u8 f2 bf f4 f8"),
           (1.0, "f8 f8 f8 f8 f8 f8 f8 f8 f8 f2 bf f4 f8")],
    False: [(1, "i4 i1 i2 i4 i4 u1 u2 u4 u4 f2 bf f4 f4"),
            (1.0, "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 bf f4 f4")],
}
WEAK_COLUMNS = "b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 bf f4 f8".split()


def _parse(table):
    lines = table.strip().splitlines()
    cols = lines[0].split()
    out = {}
    for line in lines[1:]:
        row, *cells = line.split()
        for col, cell in zip(cols, cells):
            out[CODES[row], CODES[col]] = CODES[cell]
    return out


class Weak:
    """A stand-in for an Array: a dtype plus a weak_type flag."""

    def __init__(self, dtype, weak_type):
        self.dtype = np.dtype(dtype)
        self.weak_type = weak_type


def test_promote_types_matches_jax_table(x64):
    table = _parse(PROMOTE_X64 if x64 else PROMOTE_X32)
    assert len(table) == 13 * 13
    for (a, b), expected in table.items():
        got = dtypes.promote_types(a, b)
        assert got == expected, (a, b, got, expected)


def test_promote_types_lattice_properties(x64):
    for a, b in itertools.product(ALL, repeat=2):
        ab = dtypes.promote_types(a, b)
        assert ab == dtypes.promote_types(b, a), (a, b)
        # The join is an upper bound: promoting again changes nothing.
        assert dtypes.promote_types(ab, a) == ab and dtypes.promote_types(ab, b) == ab
    # Associative, except that promote_types materializes the weak float*
    # join of uint64 with a signed int as float64 (as JAX does), after which
    # a later float16 can no longer win.
    via_weak_float = lambda x, y: (dtypes.promote_types(x, y) == np.float64
                                   and np.float64 not in (x, y))
    checked = 0
    for a, b, c in itertools.product(ALL, repeat=3):
        if via_weak_float(a, b) or via_weak_float(b, c):
            continue
        left = dtypes.promote_types(dtypes.promote_types(a, b), c)
        right = dtypes.promote_types(a, dtypes.promote_types(b, c))
        assert left == right, (a, b, c)
        checked += 1
    assert checked > 1500
    # The n-ary result_type joins on the lattice itself, so it has no such
    # exception: int8, uint64, float16 -> float16.
    assert dtypes.result_type(np.int8, np.uint64, np.float16) == np.float16
    for a in ALL:
        assert dtypes.promote_types(a, a) == a
        assert dtypes.promote_types(bool, a) == a
        assert dtypes.promote_types(a, np.float64) == np.float64


def test_promote_types_python_types_are_weak():
    assert dtypes.promote_types("uint8", int) == np.uint8
    assert dtypes.promote_types("float16", float) == np.float16
    assert dtypes.promote_types(np.int8, float) == np.float64
    assert dtypes.promote_types(int, int) == np.int64  # uncanonicalized, as JAX
    assert dtypes.promote_types(dtypes.bfloat16, dtypes.float16) == np.float32
    assert dtypes.promote_types("int32", "float32") == np.float32


def test_result_type_with_python_scalars_matches_jax(x64):
    for scalar, row in WEAK_ROWS[x64]:
        for col, expected in zip(WEAK_COLUMNS, row.split()):
            dt = CODES[col]
            for args in ((dt, scalar), (scalar, dt)):
                got, weak = dtypes.result_type(*args, return_weak_type_flag=True)
                assert got == CODES[expected], (args, got)
                # The result is weak exactly when the scalar's kind wins: over
                # bool, and a float scalar over any integer.
                scalar_wins = col == "b1" or (type(scalar) is float and col[0] in "iu")
                assert weak == scalar_wins, (args, weak)


def test_result_type_weak_rules():
    old = _set_x64(False)
    try:
        f32, i32, u32 = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32)
        rt = lambda *a: dtypes.result_type(*a, return_weak_type_flag=True)
        assert rt(np.zeros(3, np.float32), 2.0) == (f32, False)
        assert rt(np.zeros(3, np.int32), 2.5) == (f32, True)
        assert rt(np.zeros(3, np.float16), 2.0) == (np.dtype(np.float16), False)
        assert rt(np.zeros(3, np.uint8), 7) == (np.dtype(np.uint8), False)
        assert rt(1, 2) == (i32, True)
        assert rt(1, 2.0) == (f32, True)
        assert rt(True, 2) == (i32, True)
        assert rt(True) == (np.dtype(bool), False)
        assert rt(2.0) == (f32, True)
        assert rt(np.float64(2.0)) == (f32, False)  # numpy scalars are strong
        assert rt(np.int64(2), np.int8(1)) == (i32, False)
        assert rt(None) == (f32, False)
        assert rt(int, np.int8) == (np.dtype(np.int8), False)
        assert rt(np.uint32, np.int32) == (i32, False)
        assert rt(np.uint64, np.int64) == (i32, False)  # canonicalized first
        assert rt("bfloat16", np.float16) == (f32, False)
        # Weak arrays: a weak operand only sets the kind.
        assert rt(Weak(np.float32, True), Weak(np.float16, False)) == (np.dtype(np.float16), False)
        assert rt(Weak(np.int32, True), np.zeros(2, np.uint8)) == (np.dtype(np.uint8), False)
        assert rt(Weak(np.int32, True), Weak(np.int32, True)) == (i32, True)
        assert rt(Weak(np.int32, True), Weak(np.int32, False)) == (i32, False)
        assert rt(Weak(np.uint16, True)) == (u32, True)  # default uint
        assert rt(Weak(np.uint8, True), Weak(np.uint16, True)) == (u32, True)
        assert rt(Weak(np.int8, True), Weak(np.uint32, True)) == (i32, True)
        assert rt(Weak(bool, True)) == (np.dtype(bool), False)  # never weak bool
        assert rt(Weak(ml_dtypes.bfloat16, True), 1) == (f32, True)
        assert dtypes.result_type(np.zeros(2, np.float64), 1) == f32
    finally:
        config.update("jax_enable_x64", old)


def test_result_type_weak_rules_x64():
    old = _set_x64(True)
    try:
        rt = lambda *a: dtypes.result_type(*a, return_weak_type_flag=True)
        f64, i64 = np.dtype(np.float64), np.dtype(np.int64)
        assert rt(1, 2) == (i64, True)
        assert rt(1.5) == (f64, True)
        assert rt(np.zeros(3, np.int32), 2.5) == (f64, True)
        assert rt(np.zeros(3, np.float32), 2.5) == (np.dtype(np.float32), False)
        assert rt(np.uint64, np.int64) == (f64, True)  # joins at float*: weak
        assert rt(np.uint32, np.int32) == (i64, False)
        assert rt(Weak(np.uint64, True), 1) == (f64, True)
        assert rt(Weak(np.uint8, True), Weak(np.uint64, True)) == (np.dtype(np.uint64), True)
        assert rt(Weak(np.int8, True), Weak(np.uint64, True)) == (f64, True)
        assert rt(np.float64(1.0), np.float32(1.0)) == (f64, False)
    finally:
        config.update("jax_enable_x64", old)


def test_result_type_is_commutative_and_associative(x64):
    items = ALL + [1, 2.0, True] + [Weak(d, True) for d in ALL]
    rt = lambda *a: dtypes.result_type(*a, return_weak_type_flag=True)
    for a, b in itertools.product(items, repeat=2):
        assert rt(a, b) == rt(b, a)
    # Associativity holds for strongly typed operands and Python scalars (the
    # weak-array special case for all-weak inputs is not associative in JAX).
    strong = ALL + [1, 2.0, True]
    for a, b, c in itertools.product(strong, repeat=3):
        abc = rt(a, b, c)
        assert abc == rt(c, b, a) == rt(b, c, a)
        assert abc == rt(Weak(*rt(a, b)), c) == rt(a, Weak(*rt(b, c))), (a, b, c)


def test_result_type_errors():
    with pytest.raises(ValueError, match="at least one"):
        dtypes.result_type()
    with pytest.raises(TypeError):
        dtypes.result_type([1, 2])


def test_complex_promotion_matches_jax():
    # JAX's lattice: float* -> complex* -> complex64 -> complex128; float32 -> complex64; float64 -> complex128
    pt = dtypes.promote_types
    c64, c128 = np.dtype(np.complex64), np.dtype(np.complex128)
    for a, want in ((np.float32, c64), (np.float16, c64), (dtypes.bfloat16, c64), (np.int32, c64),
                    (np.uint8, c64), (np.bool_, c64), (np.float64, c128), (np.int64, c64), (np.complex128, c128)):
        assert pt(a, np.complex64) == want, a
        assert pt(np.complex64, a) == want, a
    assert pt(np.float64, complex) == c128 and pt(np.float32, complex) == c64
    assert dtypes.result_type(1j) == c64 and dtypes.result_type(1j, return_weak_type_flag=True)[1]
    assert dtypes.result_type(np.float32, 1j) == c64
    assert dtypes.result_type(np.int32, 1j, return_weak_type_flag=True) == (c64, True)
    assert dtypes.result_type(np.complex64) == c64


def test_canonicalize_dtype(x64):
    expected32 = {"i8": "i4", "u8": "u4", "f8": "f4"}
    for code, dt in CODES.items():
        want = dt if x64 else CODES[expected32.get(code, code)]
        assert dtypes.canonicalize_dtype(dt) == want
        assert dtypes.canonicalize_dtype(dt.name) == want
    assert dtypes.canonicalize_dtype(int) == (np.int64 if x64 else np.int32)
    assert dtypes.canonicalize_dtype(float) == (np.float64 if x64 else np.float32)
    assert dtypes.canonicalize_dtype(bool) == np.bool_
    assert dtypes.canonicalize_dtype(dtypes.float64) == (np.float64 if x64 else np.float32)
    assert dtypes.canonicalize_dtype(dtypes.bfloat16) == CODES["bf"]
    assert isinstance(dtypes.canonicalize_dtype(np.float32), np.dtype)


def test_canonicalize_follows_config_changes():
    old = _set_x64(True)
    try:
        assert dtypes.canonicalize_dtype(np.float64) == np.float64
        assert dtypes.default_float_dtype() == np.float64
        assert dtypes.default_int_dtype() == np.int64
        assert dtypes.default_uint_dtype() == np.uint64
        config.update("jax_enable_x64", False)
        assert dtypes.canonicalize_dtype(np.float64) == np.float32
        assert dtypes.default_float_dtype() == np.float32
        assert dtypes.default_int_dtype() == np.int32
        assert dtypes.default_uint_dtype() == np.uint32
    finally:
        config.update("jax_enable_x64", old)


def test_unsupported_dtypes_raise():
    assert dtypes.canonicalize_dtype(np.complex128) in (np.complex64, np.complex128)
    assert dtypes.canonicalize_dtype(complex) in (np.complex64, np.complex128)
    with pytest.raises(TypeError, match="does not support dtype"):
        dtypes.canonicalize_dtype(np.dtype("U3"))
    with pytest.raises(TypeError, match="does not support dtype"):
        dtypes.canonicalize_dtype(object)
    with pytest.raises(TypeError, match="not a dtype"):
        dtypes.canonicalize_dtype("not_a_dtype")
    assert dtypes.dtype_of(1 + 2j) in (np.complex64, np.complex128)


def test_dtype_of(x64):
    f, i = (np.float64, np.int64) if x64 else (np.float32, np.int32)
    assert dtypes.dtype_of(True) == np.bool_
    assert dtypes.dtype_of(3) == i
    assert dtypes.dtype_of(3.0) == f
    assert dtypes.dtype_of(np.float64(3.0)) == f
    assert dtypes.dtype_of(np.int8(3)) == np.int8
    assert dtypes.dtype_of(np.zeros(2, np.uint64)) == (np.uint64 if x64 else np.uint32)
    assert dtypes.dtype_of(np.zeros(2, ml_dtypes.bfloat16)) == CODES["bf"]
    assert dtypes.dtype_of(Weak(np.float16, True)) == np.float16
    assert dtypes.dtype_of([1, 2.0]) == f
    assert dtypes.dtype_of([[1, 2], [3, 4]]) == i
    assert dtypes.dtype_of([np.float16(1), 2.0]) == np.float16
    assert dtypes.dtype_of([True, False]) == np.bool_
    assert dtypes.dtype_of([]) == f
    with pytest.raises(TypeError, match="str"):
        dtypes.dtype_of("abc")


def test_is_weakly_typed():
    assert dtypes.is_weakly_typed(1)
    assert dtypes.is_weakly_typed(1.0)
    assert not dtypes.is_weakly_typed(True)  # bool is not weak in JAX
    assert not dtypes.is_weakly_typed(np.float32(1))
    assert not dtypes.is_weakly_typed(np.zeros(3))
    assert dtypes.is_weakly_typed(Weak(np.float32, True))
    assert not dtypes.is_weakly_typed(Weak(np.float32, False))


def test_issubdtype():
    d = dtypes
    yes = [
        (d.float32, d.floating), (d.float32, d.inexact), (d.float32, d.number),
        (d.bfloat16, d.floating), (d.bfloat16, d.inexact), (d.bfloat16, d.number),
        (d.bfloat16, d.generic), (d.float16, d.floating), (d.int8, d.signedinteger),
        (d.int64, d.integer), (d.uint16, d.unsignedinteger), (d.uint16, d.integer),
        (d.bool_, d.bool_), (d.bool_, d.generic), (d.float32, np.float32),
        (np.float32, d.float32), ("int32", d.integer), (int, d.integer),
        (float, d.floating), (d.floating, d.inexact), (d.integer, d.number),
        (np.dtype("float32"), d.float32), (d.bfloat16, "bfloat16"),
    ]
    no = [
        (d.int32, d.floating), (d.bfloat16, d.integer), (d.uint8, d.signedinteger),
        (d.int8, d.unsignedinteger), (d.bool_, d.number), (d.bool_, d.integer),
        (d.float32, d.float64), (d.float16, d.bfloat16), (bool, d.integer),
        (d.floating, d.integer), (d.floating, d.float32), (d.int32, d.bool_),
    ]
    for a, b in yes:
        assert d.issubdtype(a, b) is True, (a, b)
    for a, b in no:
        assert d.issubdtype(a, b) is False, (a, b)


def test_iinfo_finfo():
    assert dtypes.iinfo(dtypes.int8).min == -128
    assert dtypes.iinfo(np.uint16).max == 65535
    assert dtypes.iinfo(np.zeros(2, np.int32)).max == 2**31 - 1
    assert dtypes.finfo(dtypes.bfloat16).eps == 2.0**-7
    assert float(dtypes.finfo(dtypes.bfloat16).max) == pytest.approx(3.3895313892515355e38)
    assert dtypes.finfo(np.float32).eps == np.finfo(np.float32).eps
    assert dtypes.finfo(dtypes.float16).max == np.finfo(np.float16).max
    assert dtypes.finfo("float64").tiny == np.finfo(np.float64).tiny
    with pytest.raises(ValueError, match="iinfo"):
        dtypes.finfo(np.int32)
    with pytest.raises(ValueError, match="finfo"):
        dtypes.iinfo(np.float32)


def test_scalar_types_are_dtype_like():
    for t, name in [(dtypes.float32, "float32"), (dtypes.bfloat16, "bfloat16"),
                    (dtypes.int8, "int8"), (dtypes.uint64, "uint64"),
                    (dtypes.bool_, "bool"), (dtypes.float16, "float16")]:
        assert t.dtype == np.dtype(name)
        assert np.dtype(t) == np.dtype(name)
        assert np.zeros(2, dtype=t).dtype == np.dtype(name)
        assert t.__name__ == name
        assert name in repr(t)
    assert dtypes.float32 == np.float32 and hash(dtypes.float32) == hash(np.float32)
    assert dtypes.float32 != dtypes.float64 and dtypes.float32 != np.float64
    assert isinstance(np.float32(1.0), dtypes.float32)
    assert not isinstance(np.float64(1.0), dtypes.float32)
    assert dtypes.dtype is np.dtype
    assert dtypes.floating is np.floating


def test_scalar_types_construct_arrays():
    knp = pytest.importorskip("kiln.numpy")
    x = dtypes.float32(3.0)
    assert x.dtype == np.float32 and x.shape == ()
    assert not getattr(x, "weak_type", False)
    assert float(np.asarray(x)) == 3.0
    y = dtypes.int32([1, 2])
    assert y.dtype == np.int32 and y.shape == (2,)
    np.testing.assert_array_equal(np.asarray(y), [1, 2])
    z = dtypes.bfloat16(1.5)
    assert z.dtype == CODES["bf"] and float(np.asarray(z).astype(np.float32)) == 1.5
    # The public names are these objects.
    assert knp.float32(2).dtype == np.float32


# ---- issue 32: dtypes and weak types of kiln.numpy results (pinned from JAX 0.10.2) ----

def test_reductions_return_strong_types_and_like_functions_keep_weak_ones():
    # guards issue 32: sum/max/cumsum... of a weakly typed array stayed weak (JAX converts to a strong
    # result dtype), so sum(int8 * 1.5) + float16 gave float16 where JAX gives float32; zeros_like(w) and
    # full_like(w, v) lost w's weak type
    import kiln.numpy as jnp
    w = jnp.array([1, 2, 3], np.int8) + 1.5
    assert w.dtype == np.float32 and w.weak_type
    for f in (jnp.sum, jnp.prod, jnp.max, jnp.min, jnp.amax, jnp.ptp, jnp.cumsum, jnp.cumprod, jnp.mean,
              jnp.cumulative_sum, jnp.nansum):
        assert not f(w).weak_type, f.__name__
    assert not jnp.sum(1.5).weak_type
    assert (jnp.sum(w) + jnp.float16(1)).dtype == np.float32
    for r in (jnp.zeros_like(w), jnp.ones_like(w), jnp.empty_like(w), jnp.full_like(w, 2.0), jnp.zeros_like(1.5),
              jnp.zeros_like(w, shape=(2,)), jnp.abs(w), w.reshape(3, 1)):
        assert r.dtype == np.float32 and r.weak_type
    assert not jnp.full_like(w, 2, dtype=np.float32).weak_type


def test_structural_functions_promote_with_weak_types():
    # guards issue 32: concatenate/stack/dot/outer/append... promoted through a helper that dropped
    # JAX's weak flag (jnp.append(int8 array, 1.5) is a weak float32 in JAX)
    import kiln.numpy as jnp
    a = jnp.array([1, 2, 3], np.int8)
    w = a + 1.5
    for r in (jnp.append(a, 1.5), jnp.dot(a, 1.5), jnp.dot(w, 1.5), jnp.outer(a, 1.5), jnp.concatenate([w, a]),
              jnp.stack([w, a]), jnp.hstack([a, 1.5]), jnp.kron(a, 1.5), jnp.select([a > 1], [a], 1.5)):
        assert r.dtype == np.float32 and r.weak_type
    assert (jnp.append(a, 1.5) + jnp.ones(4, np.float16)).dtype == np.float16
    assert not jnp.concatenate([a, jnp.array([1.5])]).weak_type
    # an array made of a sequence is strong whatever its elements (and cross builds one)
    for r in (jnp.array([w, w]), jnp.asarray([w[0], 1.5]), jnp.cross(w, w)):
        assert r.dtype == np.float32 and not r.weak_type


def test_searchsorted_and_digitize_return_int32_under_x64(x64):
    # guards issue 32: searchsorted counted in the default int (int64 under x64); JAX gives int32
    import kiln.numpy as jnp
    a = jnp.array([1.0, 2.0, 3.0])
    assert jnp.searchsorted(a, jnp.array([0.5, 2.5])).dtype == np.int32
    assert np.asarray(jnp.searchsorted(a, jnp.array([0.5, 2.5]))).tolist() == [0, 2]
    assert jnp.digitize(jnp.array([0.5, 2.5]), a).dtype == np.int32


def test_cumulative_sum_widens_like_sum(x64):
    # guards issue 32: cumulative_sum(int8) stayed int8; JAX promotes like sum (cumsum does not)
    import kiln.numpy as jnp
    want = np.int64 if x64 else np.int32
    for dt in (np.int8, np.int16, np.bool_):
        assert jnp.cumulative_sum(jnp.array([1, 0, 1], dt)).dtype == want
    assert jnp.cumulative_sum(jnp.array([1, 2], np.uint8)).dtype == (np.uint64 if x64 else np.uint32)
    assert jnp.cumsum(jnp.array([1, 2], np.int8)).dtype == np.int8


def test_integer_data_computes_in_float32_under_x64_where_jax_does(x64):
    # guards issue 32: to_inexact_dtype gave the default float (float64 under x64) for int32 data, so
    # linalg.norm and fft of int32 were float64/complex128 where JAX gives float32/complex64; rint and
    # angle follow their own JAX rule (the default float) and were float32 under x64
    import kiln.numpy as jnp
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64 if x64 else np.float32)
    i32 = jnp.array([1, 0, 2], np.int32)
    assert dtypes.to_inexact_dtype(np.int32) == f32 and dtypes.to_inexact_dtype(np.bool_) == f32
    assert jnp.linalg.norm(i32).dtype == f32 and jnp.linalg.norm(jnp.array([1, 2], np.int8)).dtype == f32
    assert jnp.fft.fft(i32).dtype == np.complex64 and jnp.fft.rfft(i32).dtype == np.complex64
    assert jnp.sqrt(i32).dtype == f32
    assert jnp.rint(i32).dtype == f64 and jnp.rint(jnp.array([True])).dtype == f64
    assert jnp.angle(i32).dtype == f64 and jnp.angle(jnp.float16(2)).dtype == f64
    assert jnp.angle(jnp.array([1.0, 2.0], np.float16)).dtype == np.float16
    if x64:
        assert jnp.fft.fft(jnp.array([1, 2], np.int64)).dtype == np.complex128


def test_comparisons_and_full_like_keep_weak_type():
    import kiln
    import kiln.numpy
    # bug (issue 32, fuzzer): a comparison's bool was never weak, and lax.full_like dropped x's weak
    # type; JAX's rule: weak when all (promoted) operands are weak (weak types pinned from JAX 0.10.2)
    from kiln import lax
    i8 = kiln.numpy.asarray(np.array([[4, -1]], np.int8))
    f32 = kiln.numpy.asarray(np.array([[4.0, -1.0]], np.float32))
    w = i8 + 0.5  # weak float32
    assert w.weak_type
    for r, weak in [(i8 >= -1.5, True), (0.5 <= i8, True), (i8 < 2.0, True), (i8 == 2, False),
                    (f32 >= 1.5, False), (lax.is_finite(w), True), (lax.ge(w, w), True),
                    (lax.ge(w, f32), False), (lax.full_like(w, 1), True), (lax.full_like(w, 1, shape=()), True),
                    (lax.full_like(w, 1, dtype=np.float32), False), (lax.full_like(f32, 1), False)]:
        assert r.weak_type == weak, r
    assert kiln.jit(lambda x: x >= -1.5)(np.array([6, 3], np.uint32)).weak_type
    assert np.asarray(i8 >= -1.5).tolist() == [[True, True]]
