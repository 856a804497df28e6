"""The PTX kiln writes by hand around cuSOLVER (runtime/cusolver_ptx.c) run on the PTX interpreter
(tests/ptxsim.py) against NumPy: the NaN and triangle fix-up every factorization ends with, for
real and complex elements of 4, 8 and 16 bytes, several matrices, some failed. No GPU needed; the
PTX comes from the extension module (a development build exports it; a release wheel hides it and
these tests skip)."""
import ctypes

import numpy as np
import pytest

from kiln import _kiln

import ptxsim

_lib = ctypes.CDLL(_kiln.__file__)
if not hasattr(_lib, "kl_cusolver_ptx"):
    pytest.skip("the extension does not export kiln's C entry points (a release build)", allow_module_level=True)
_lib.kl_cusolver_ptx.restype = ctypes.c_char_p
_KERNELS = ptxsim.parse_module(_lib.kl_cusolver_ptx().decode())


def run_fix(data, info, cols, tri, grid, block):
    """kl_sol_fix over data (batch, rows, cols) in place, as runtime/cusolver.c launches it."""
    batch, rows = data.shape[0], data.shape[1]
    nc = 2 if data.dtype.kind == "c" else 1
    dbl = data.dtype in (np.float64, np.complex128)
    mem = ptxsim.Memory()
    mem.add(data)
    if info is not None:
        mem.add(info)
    params = [data.ctypes.data, 0 if info is None else info.ctypes.data, batch * rows, rows, cols, nc, tri, int(dbl)]
    ptxsim.run_kernel(_KERNELS["kl_sol_fix"], mem, params, grid, block)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("tri", [0, 1, 2])
@pytest.mark.parametrize("shape", [(3, 5, 5), (2, 7, 4), (1, 3, 9)])
def test_fix(dtype, tri, shape):
    rng = np.random.default_rng(hash((np.dtype(dtype).name, tri, shape)) % 2**32)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dtype)
    info = np.array([0, 3, 0][:shape[0]], np.int32)
    want = x.copy()
    r, c = np.indices(shape[1:])
    if tri == 1:
        want[:, c > r] = 0
    elif tri == 2:
        want[:, c < r] = 0
    want[info != 0] = np.nan + (1j * np.nan if np.dtype(dtype).kind == "c" else 0)
    got = x.copy()
    run_fix(got, info, shape[2], tri, grid=2, block=4)  # fewer blocks than rows, threads than columns
    np.testing.assert_array_equal(got, want)
    got = x.copy()
    run_fix(got, None, shape[2], tri, grid=64, block=64)  # more of both; no info: nothing is NaN
    want_ok = x.copy()
    if tri == 1:
        want_ok[:, c > r] = 0
    elif tri == 2:
        want_ok[:, c < r] = 0
    np.testing.assert_array_equal(got, want_ok)
