"""kiln's GPU sort kernels (runtime/gpusort_ptx.c, driven by runtime/gpusort.c) run on a PTX
interpreter (tests/ptxsim.py) against NumPy: every code path of the driver (one block a row, the
tiled passes with keys only or with the permutation, the fix-up of -0 and NaN payloads, iota
outputs, several key words, an axis that is not the last) with the exact bits NumPy's stable sort
gives. No GPU needed; the C entry points come from the extension module (a development build
exports them; a release wheel hides them and these tests skip)."""
import ctypes

import numpy as np
import pytest

from kiln import _kiln

import ptxsim

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

_lib = ctypes.CDLL(_kiln.__file__)
if not hasattr(_lib, "kl_gpusort_run_with"):
    pytest.skip("the extension does not export kiln's C entry points (a release build)", allow_module_level=True)


class _Call(ctypes.Structure):
    _fields_ = [("nin", ctypes.c_int32), ("num_keys", ctypes.c_int32), ("outer", ctypes.c_int64),
                ("n", ctypes.c_int64), ("inner", ctypes.c_int64), ("dtype", ctypes.c_int32 * 16),
                ("iota", ctypes.c_int32 * 16), ("tile_items", ctypes.c_int32), ("scan_passes", ctypes.c_int32),
                ("random_keys", ctypes.c_int32), ("keys_unused", ctypes.c_int32)]


_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint,
                           ctypes.POINTER(ctypes.c_uint64), ctypes.c_int)
_lib.kl_gpusort_run_with.argtypes = [ctypes.POINTER(_Call), ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, _LAUNCH, ctypes.c_void_p,
                                     ctypes.c_char_p, ctypes.c_size_t]
_lib.kl_gpusort_scratch_bytes.argtypes = [ctypes.POINTER(_Call)]
_lib.kl_gpusort_scratch_bytes.restype = ctypes.c_size_t
_lib.kl_gpusort_check.argtypes = [ctypes.POINTER(_Call)]
_lib.kl_gpusort_ptx.restype = ctypes.c_char_p

_KERNELS = ptxsim.parse_module(_lib.kl_gpusort_ptx().decode())

_DT = {np.dtype(np.bool_): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3,
       np.dtype(np.int64): 4, np.dtype(np.uint8): 5, np.dtype(np.uint16): 6, np.dtype(np.uint32): 7,
       np.dtype(np.uint64): 8, np.dtype(np.float16): 9, np.dtype(np.float32): 11, np.dtype(np.float64): 12}
if ml_dtypes is not None:
    _DT[np.dtype(ml_dtypes.bfloat16)] = 10


_scan_passes = [0]  # the tiled passes by histogram and scan (the `passes` fixture sets it)


def gpu_sort(operands, num_keys=1, axis=-1, iota=(), tile_items=16, random_keys=0, keys_unused=0):
    """lax.sort(operands, dimension=axis, num_keys=num_keys) by the GPU kernels on the interpreter;
    also returns the kernels launched."""
    ins = [np.ascontiguousarray(o) for o in operands]
    shape = ins[0].shape
    axis %= len(shape)
    call = _Call(nin=len(ins), num_keys=num_keys, outer=int(np.prod(shape[:axis], dtype=np.int64)), n=shape[axis],
                 inner=int(np.prod(shape[axis + 1:], dtype=np.int64)), tile_items=tile_items,
                 scan_passes=_scan_passes[0], random_keys=random_keys, keys_unused=keys_unused)
    for k, a in enumerate(ins):
        call.dtype[k] = _DT[a.dtype]
        call.iota[k] = int(k in iota)
    assert _lib.kl_gpusort_check(ctypes.byref(call)) == 0
    outs = [np.empty_like(a) for a in ins]
    for o in outs:
        o.reshape(-1).view(np.uint8)[:] = 0x5A  # garbage, as on a GPU
    scratch = np.full(_lib.kl_gpusort_scratch_bytes(ctypes.byref(call)), 0xA5, np.uint8)  # garbage, as on a GPU
    launches = []

    def record(ctx, name, grid, block, args, nargs):
        launches.append((name.decode(), grid, block, [args[i] for i in range(nargs)]))
        return 0

    cb = _LAUNCH(record)
    pin = (ctypes.c_void_p * len(ins))(*[a.ctypes.data for a in ins])
    pout = (ctypes.c_void_p * len(outs))(*[a.ctypes.data for a in outs])
    err = ctypes.create_string_buffer(256)
    rc = _lib.kl_gpusort_run_with(ctypes.byref(call), pin, pout, scratch.ctypes.data, cb, None, err, 256)
    assert rc == 0, err.value
    mem = ptxsim.Memory()
    for a in ins + outs + [scratch]:
        if a.size:
            mem.add(a)
    for name, grid, block, args in launches:
        assert len(args) == len(_KERNELS[name].params), name
        ptxsim.run_kernel(_KERNELS[name], mem, args, grid, block)
    return outs, [l[0] for l in launches]


def _ref_key(a):
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype == _bf16() else a


def _bf16():
    return np.dtype(ml_dtypes.bfloat16) if ml_dtypes is not None else None


def np_sort(operands, num_keys=1, axis=-1):
    """The expected results: NumPy's stable lexicographic sort (NaN last, -0 == +0)."""
    keys = [_ref_key(o) for o in operands[:num_keys]]
    perm = np.lexsort(keys[::-1], axis=axis) if num_keys > 1 else np.argsort(keys[0], axis=axis, kind="stable")
    return [np.take_along_axis(o, perm, axis=axis) for o in operands]


def assert_same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.view(np.uint8), want.view(np.uint8)
    if not np.array_equal(g, w):
        bad = np.nonzero((got.reshape(-1).view(np.uint8).reshape(got.size, -1) !=
                          want.reshape(-1).view(np.uint8).reshape(want.size, -1)).any(axis=1))[0]
        raise AssertionError(f"{len(bad)} elements differ, first at flat {bad[:5]}: got {got.reshape(-1)[bad[:5]]}, "
                             f"want {want.reshape(-1)[bad[:5]]}")


def floats(rng, n, dtype):
    """Random floats with duplicates, NaNs (one negative, one with a payload), infinities and both zeros."""
    x = rng.standard_normal(n).astype(np.float64)
    x[rng.integers(0, n, n // 4)] = np.round(x[rng.integers(0, n, n // 4)])  # duplicates
    specials = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, -0.0, 0.0]
    x[rng.integers(0, n, min(n, 16))] = rng.choice(specials, min(n, 16))
    x = x.astype(dtype)
    if n > 40 and dtype in (np.float32, np.float64):  # a NaN with a payload
        bits = x.view(np.uint32 if dtype == np.float32 else np.uint64)
        bits[3] = 0x7FC00123 if dtype == np.float32 else 0x7FF8000000000123
    return x


def ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True) // (1 if rng.random() < .5 else 97)


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_one_float_row_sorts_in_one_block_with_exact_bits(n):
    rng = np.random.default_rng(n)
    x = floats(rng, n, np.float32)
    (got,), ks = gpu_sort([x])
    assert ks == ["ks_small_%d" % (1 if n <= 256 else 4)]
    assert_same_bits(got, np_sort([x])[0])


def test_long_float_row_sorts_codes_only_and_fixes_zeros_and_nans():
    rng = np.random.default_rng(1)
    x = floats(rng, 4096 + 900, np.float32)
    (got,), ks = gpu_sort([x])
    assert "ks_fixup" in ks and "ks_encode" not in ks and "ks_decode" not in ks and "ks_gather" not in ks
    assert ks.count("ks_scatter_k_16") == 4
    assert_same_bits(got, np_sort([x])[0])


@pytest.fixture(params=["onesweep", "scan"])
def passes(request):
    """Both ways of a tiled pass: onesweep (look-back) and per-pass histogram + scan (the call's
    scan_passes, gpu_sort's default while the fixture is in use)."""
    _scan_passes[0] = int(request.param == "scan")
    yield request.param
    _scan_passes[0] = 0


def test_argsort_of_a_long_row_writes_the_iota_from_the_last_pass(passes):
    rng = np.random.default_rng(2)
    x = floats(rng, 2 * 4096 + 17, np.float32)
    idx = np.arange(x.size, dtype=np.int32)
    (sx, si), ks = gpu_sort([x, idx], iota=(1,))
    assert "ks_iota" not in ks and "ks_gather" not in ks and "ks_fixup" in ks and ks.count("ks_scatter_kv_16") == 4
    want = np_sort([x, idx])
    assert_same_bits(sx, want[0])
    assert_same_bits(si, want[1])


def test_batched_rows_longer_than_a_tile_sort_each_row():
    rng = np.random.default_rng(3)
    x = rng.integers(-50, 50, (3, 4100)).astype(np.int32)
    v = rng.standard_normal((3, 4100)).astype(np.float32)
    (sx, sv), ks = gpu_sort([x, v])
    assert "ks_gather" not in ks  # the 4-byte values ride along in place of the permutation
    want = np_sort([x, v])
    assert_same_bits(sx, want[0])
    assert_same_bits(sv, want[1])


@pytest.mark.parametrize("kdt,vdt,carried", [(np.int8, np.int32, True), (np.bool_, np.float32, True),
                                             (np.float32, np.uint32, True), (np.float32, np.int16, False),
                                             (np.float64, np.int32, False), (np.uint32, np.float64, False)])
def test_sort_key_val_carries_a_four_byte_value_through_the_passes(kdt, vdt, carried):
    rng = np.random.default_rng(11)
    n = 4096 + 300
    x = (floats(rng, 2 * n, np.float32 if kdt != np.float64 else np.float64).astype(kdt) if np.dtype(kdt).kind == "f"
         else rng.integers(0, 2, 2 * n).astype(np.bool_) if kdt == np.bool_ else ints(rng, 2 * n, kdt)).reshape(2, n)
    v = (rng.standard_normal(2 * n).astype(vdt) if np.dtype(vdt).kind == "f" else ints(rng, 2 * n, vdt)).reshape(2, n)
    (sx, sv), ks = gpu_sort([x, v])
    assert ("ks_gather" not in ks) == carried, ks
    want = np_sort([x, v])
    assert_same_bits(sx, want[0])
    assert_same_bits(sv, want[1])


def test_batched_short_rows_and_an_inner_axis():
    rng = np.random.default_rng(4)
    x = floats(rng, 5 * 300 * 3, np.float16).reshape(5, 300, 3)
    y = ints(rng, (5, 300, 3), np.uint8)
    (sx, sy), ks = gpu_sort([x, y], axis=1)
    assert ks == ["ks_small_2", "ks_gather"]
    want = np_sort([x, y], axis=1)
    assert_same_bits(sx, want[0])
    assert_same_bits(sy, want[1])


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int16, np.int64, np.uint16, np.uint32, np.uint64,
                                   np.float64, "bfloat16"])
def test_every_key_dtype_in_a_small_row(dtype):
    if dtype == "bfloat16":
        if ml_dtypes is None:
            pytest.skip("needs ml_dtypes")
        dtype = ml_dtypes.bfloat16
    rng = np.random.default_rng(5)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        x = rng.integers(0, 2, 513).astype(np.bool_)
    elif dt.kind in "iu":
        x = ints(rng, 513, dt)
    else:
        x = floats(rng, 513, np.float32 if dt != np.float64 else np.float64).astype(dt)
    (got,), _ = gpu_sort([x])
    assert_same_bits(got, np_sort([x])[0])


def test_lexicographic_keys_over_several_words_in_tiles(passes):
    rng = np.random.default_rng(6)
    n = 4096 + 300
    a = rng.integers(-3, 3, n).astype(np.int16)
    b = floats(rng, n, np.float64)
    b[: n // 5] = b[n // 5: 2 * (n // 5)]  # ties on both keys
    i = np.arange(n, dtype=np.int32)
    outs, ks = gpu_sort([a, b, i], num_keys=2, iota=(2,))
    assert ks.count("ks_encode") == 2  # three words (i16, then f64 low, high): the first read by its first pass
    want = np_sort([a, b, i], num_keys=2)
    for g, w in zip(outs, want):
        assert_same_bits(g, w)


def test_lexicographic_keys_in_one_block_a_row_with_an_inner_axis():
    rng = np.random.default_rng(7)
    a = ints(rng, (4, 50, 3), np.int64) % 4
    b = floats(rng, 600, np.float32).reshape(4, 50, 3)
    c = rng.standard_normal((4, 50, 3))
    outs, ks = gpu_sort([a, b, c], num_keys=2, axis=1)
    assert ks == ["ks_small_1"] * 3 + ["ks_gather"] * 2
    want = np_sort([a, b, c], num_keys=2, axis=1)
    for g, w in zip(outs, want):
        assert_same_bits(g, w)


def test_tiled_rows_along_an_inner_axis_encode_and_decode_in_kernels_of_their_own():
    # inner > 1: the codes cannot be read off contiguous rows, so ks_encode and ks_decode run
    rng = np.random.default_rng(8)
    x = floats(rng, 2 * 4200 * 3, np.float32).reshape(2, 4200, 3)
    (got,), ks = gpu_sort([x], axis=1)
    assert ks.count("ks_encode") == 1 and "ks_decode" in ks and "ks_fixup" in ks
    assert_same_bits(got, np_sort([x], axis=1)[0])
    i = np.broadcast_to(np.arange(4200, dtype=np.int16)[None, :, None], x.shape).copy()
    (sx, si), ks = gpu_sort([x, i], axis=1, iota=(1,))
    want = np_sort([x, i], axis=1)
    assert_same_bits(sx, want[0])
    assert_same_bits(si, want[1])


@pytest.mark.parametrize("dtype", [np.int8, np.bool_])
def test_one_pass_keys_encode_and_decode_in_the_same_scatter(dtype, passes):
    rng = np.random.default_rng(9)
    x = ints(rng, 6000, np.int8) if dtype == np.int8 else rng.integers(0, 2, 6000).astype(np.bool_)
    (got,), ks = gpu_sort([x])
    if passes == "scan":
        assert ks == ["ks_hist_16", "ks_scan_up", "ks_scan_mid", "ks_scan_down", "ks_scatter_k_16"]
    else:
        assert ks == ["ks_zero", "ks_digits_16", "ks_scatter_k_16"]
    assert_same_bits(got, np_sort([x])[0])


def test_tiles_of_eight_items_a_thread():
    rng = np.random.default_rng(10)
    x = floats(rng, 3 * 2048 + 5, np.float32)
    i = np.arange(x.size, dtype=np.int32)
    (sx, si), ks = gpu_sort([x, i], iota=(1,), tile_items=8)
    assert "ks_scatter_kv_8" in ks
    want = np_sort([x, i])
    assert_same_bits(sx, want[0])
    assert_same_bits(si, want[1])
    (sx,), ks = gpu_sort([x], tile_items=8)
    assert "ks_scatter_k_8" in ks
    assert_same_bits(sx, want[0])


def test_the_counts_scan_over_several_blocks():
    # ks_scan_up/mid/down by themselves: an exclusive scan of 3 chunks and a bit, in place
    rng = np.random.default_rng(11)
    counts = rng.integers(0, 300, 3 * 4096 + 77).astype(np.uint32)
    want = np.concatenate([[0], np.cumsum(counts, dtype=np.uint64)[:-1]]).astype(np.uint32)
    partials = np.zeros(4, np.uint32)
    mem = ptxsim.Memory()
    mem.add(counts)
    mem.add(partials)
    c, p = counts.ctypes.data, partials.ctypes.data
    ptxsim.run_kernel(_KERNELS["ks_scan_up"], mem, [c, p, counts.size], 4, 256)
    ptxsim.run_kernel(_KERNELS["ks_scan_mid"], mem, [p, 4], 1, 256)
    ptxsim.run_kernel(_KERNELS["ks_scan_down"], mem, [c, p, counts.size], 4, 256)
    np.testing.assert_array_equal(counts, want)


def test_many_rows_of_two_tiles_scan_counts_over_several_blocks(passes):
    rng = np.random.default_rng(12)
    x = ints(rng, (12, 4200), np.int16)
    (got,), ks = gpu_sort([x])
    assert ks.count("ks_scatter_k_16") == 2
    assert_same_bits(got, np_sort([x])[0])


def test_onesweep_sorts_a_long_row_in_one_histogram_and_four_scatters():
    rng = np.random.default_rng(13)
    x = rng.integers(0, 2**32, 5 * 4096 + 3, dtype=np.uint64).astype(np.uint32)
    v = rng.standard_normal(x.size).astype(np.float32)
    (sx, sv), ks = gpu_sort([x, v])
    assert ks == ["ks_zero", "ks_digits_16"] + ["ks_scatter_kv_16"] * 4
    want = np_sort([x, v])
    assert_same_bits(sx, want[0])
    assert_same_bits(sv, want[1])


def test_look_back_adds_earlier_tiles_counts_until_an_inclusive_one():
    """The interpreter runs blocks in order, so a whole sort only ever meets inclusive counts. Here
    the tiles before the block's are published by hand (tile 0 inclusive, tile 1 its own count
    only), the counter says tile 2 is next, and one block's scatter must place tile 2's keys where
    the whole pass places them and publish tile 2's inclusive counts."""
    rng = np.random.default_rng(14)
    T, n = 3, 3 * 4096
    keys = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    digit = keys & 255
    per_tile = np.stack([np.bincount(digit[t * 4096:(t + 1) * 4096], minlength=256) for t in range(T)]).astype(np.uint32)
    g = np.zeros(64 + 4 * 256, np.uint32)  # the passes' counters (256 bytes), then gcounts [pass][digit]
    gcounts = g[64:].reshape(4, 256)
    gcounts[0] = per_tile.sum(0)
    order = np.argsort(digit, kind="stable")
    want = keys[order]
    g[0] = 2  # pass 0's counter: tile 2 is next
    status = np.zeros(T * 256, np.uint32)  # [tile][digit]
    st = status.reshape(T, 256)
    st[0] = (2 << 30) | per_tile[0]
    st[1] = (1 << 30) | per_tile[1]
    kout = np.full(n, 0xDEADBEEF, np.uint32)
    mem = ptxsim.Memory()
    for a in (keys, kout, g, status):
        mem.add(a)
    args = [keys.ctypes.data, 0, kout.ctypes.data, 0, 0, n, T, 0, 8, 0, 4, 0, 1 << 31, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0,
            status.ctypes.data, gcounts.ctypes.data]
    ptxsim.run_kernel(_KERNELS["ks_scatter_k_16"], mem, args, 1, 256)
    mine = np.zeros(n, bool)
    mine[np.nonzero(order >= 2 * 4096)[0]] = True  # the places tile 2's keys go
    np.testing.assert_array_equal(kout[mine], want[mine])
    assert (kout[~mine] == 0xDEADBEEF).all()
    np.testing.assert_array_equal(st[2], (2 << 30) | per_tile.sum(0))
    assert g[0] == 3


@pytest.mark.parametrize("low", [0, 1])
def test_digit_counts_of_every_pass_with_blocks_taking_tiles_of_several_rows(low):
    """ks_digits with fewer blocks than tiles: each block takes every fourth tile, across rows
    (flushing its counts at each change of row); gcounts must hold each row's digits of each pass,
    and every tile's status words of every pass must be zeroed."""
    rng = np.random.default_rng(15)
    rows, n = 5, 2 * 4096 + 100  # 3 tiles a row
    keys = rng.integers(0, 2**32, rows * n, dtype=np.uint64).astype(np.uint32)
    keys[:n] &= 0x00FF00FF  # a row with empty digits
    gcounts = np.zeros((rows, 4, 256), np.uint32)
    status = np.full((4, rows * 3, 256), 7, np.uint32)  # garbage, as on a GPU: zeroed by the kernel
    mem = ptxsim.Memory()
    for a in (keys, gcounts, status):
        mem.add(a)
    args = [keys.ctypes.data, gcounts.ctypes.data, n, 3, 32, 0, 4, 0, 1 << 31, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0, 0,
            rows * 3, status.ctypes.data, low]
    ptxsim.run_kernel(_KERNELS["ks_digits_16"], mem, args, 4, 256)
    k = keys.reshape(rows, n)
    for p in range(4):
        want = np.stack([np.bincount((r >> np.uint32(8 * p)) & 255, minlength=256) for r in k])
        np.testing.assert_array_equal(gcounts[:, p], want if p >= low else 0)
    assert not status.any()


def runs_keys(rng, rows, n, highs):
    """uint32 keys whose high 24 bits take `highs` values (runs of equal ones about n / highs long)
    and whose low byte has few values (equal keys, to check stability)."""
    hi = rng.integers(0, highs, (rows, n), dtype=np.uint64) * np.uint64(0x9E3779)
    return ((hi & np.uint64(0xFFFFFF)) << np.uint64(8) | rng.integers(0, 6, (rows, n), dtype=np.uint64)).astype(np.uint32)


@pytest.mark.parametrize("highs", [2**24, 3000, 400])
def test_random_keys_sort_by_their_high_bits_and_finish_inside_runs(highs):
    """With the random-keys hint, a uint32 key carrying a 4-byte value is sorted by its high 24 bits
    in three onesweep passes, then ks_runs orders each run of equal high bits by the low byte."""
    rng = np.random.default_rng(16)
    x = runs_keys(rng, 2, 3 * 4096 + 77, highs)
    x[1, :40] = x[0, -40:]  # a run across the rows' boundary must stay two runs
    v = rng.integers(-2**31, 2**31, x.shape, dtype=np.int64).astype(np.int32)
    (sx, sv), ks = gpu_sort([x, v], random_keys=1)
    assert ks == ["ks_zero", "ks_digits_16"] + ["ks_scatter_kv_16"] * 3 + ["ks_runs"]
    want = np_sort([x, v])
    assert_same_bits(sx, want[0])
    assert_same_bits(sv, want[1])


def test_random_keys_hint_with_long_runs_and_an_iota_value():
    """Runs longer than ks_runs' per-element limit (256) go through the serial counting sort of
    their first element; an iota value rides as the positions. Keys that are not random still
    sort right. Sorted keys nobody reads are not written."""
    rng = np.random.default_rng(17)
    n = 2 * 4096 + 5
    x = runs_keys(rng, 1, n, 2**24)[0]
    x[100:400] = (x[100:400] & np.uint32(0xFF)) | np.uint32(0xABCDEF00)  # a run of 300
    x[1000:1500] = (x[1000:1500] & np.uint32(0xFF)) | np.uint32(0x80000000)  # one of 500 across the tiles' boundary
    v = np.arange(n, dtype=np.int32)
    (sx, sv), ks = gpu_sort([x, v], iota=(1,), random_keys=1)
    assert ks[-1] == "ks_runs"
    want = np_sort([x, v])
    assert_same_bits(sx, want[0])
    assert_same_bits(sv, want[1])
    (sx, sv), ks = gpu_sort([x, v], iota=(1,), random_keys=1, keys_unused=1)
    assert (sx.view(np.uint8) == 0x5A).all()
    assert_same_bits(sv, want[1])


@pytest.mark.parametrize("kdt,vdt", [(np.int32, np.int32), (np.uint32, np.float64), (np.float32, np.uint32)])
def test_random_keys_hint_is_ignored_where_it_does_not_apply(kdt, vdt):
    rng = np.random.default_rng(18)
    x = ints(rng, 4096 + 9, kdt) if np.dtype(kdt).kind in "iu" else floats(rng, 4096 + 9, kdt)
    v = ints(rng, x.size, vdt) if np.dtype(vdt).kind in "iu" else rng.standard_normal(x.size).astype(vdt)
    (sx, sv), ks = gpu_sort([x, v], random_keys=1)
    assert "ks_runs" not in ks
    want = np_sort([x, v])
    assert_same_bits(sx, want[0])
    assert_same_bits(sv, want[1])
