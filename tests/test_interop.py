"""Zero-copy interop: DLPack with NumPy (everywhere), PyTorch and CuPy (on a GPU), and the CUDA
array interface. "Zero copy" is checked by comparing data pointers."""
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp

HAS_GPU = kiln.default_backend() == "gpu"
_needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU")


def gpu(test):
    """Marks a test `gpu` (select them with `pytest -m gpu`) and skips it without a GPU."""
    return pytest.mark.gpu(_needs_gpu(test))


def _np_ptr(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.int64, np.bool_, np.float16])
def test_numpy_to_kiln_shares_memory_and_computes(dtype):
    a = (np.random.default_rng(0).standard_normal((3, 5)) * 10).astype(dtype)
    x = kiln.dlpack.from_dlpack(a)
    assert x.dtype == a.dtype and x.shape == a.shape
    assert x.device.platform == "cpu" and x._buf.ptr == _np_ptr(a)
    np.testing.assert_array_equal(np.asarray(x), a)
    if dtype != np.bool_:
        np.testing.assert_array_equal(np.asarray(kiln.jit(lambda v: v * 2)(x)), a * 2)


def test_kiln_to_numpy_shares_memory():
    x = kiln.device_put(np.arange(12.0, dtype=np.float32).reshape(3, 4), kiln.devices("cpu")[0])
    n = np.from_dlpack(x)
    assert _np_ptr(n) == x._buf.ptr
    np.testing.assert_array_equal(n, np.arange(12.0).reshape(3, 4))


def test_strided_producers_are_copied():
    a = np.arange(20, dtype=np.float32).reshape(4, 5)[:, ::2]
    x = kiln.dlpack.from_dlpack(a)
    np.testing.assert_array_equal(np.asarray(x), a)


def test_kiln_array_outlives_the_capsule_owner():
    a = np.arange(6, dtype=np.int32)
    x = kiln.dlpack.from_dlpack(a)
    del a
    import gc
    gc.collect()
    np.testing.assert_array_equal(np.asarray(x + 1), np.arange(1, 7))


def test_dlpack_device_names_the_array_device():
    x = jnp.ones(3)
    assert x.__dlpack_device__() == ((2, 0) if HAS_GPU else (1, 0))


def test_cuda_array_interface_is_absent_on_host_arrays():
    x = kiln.device_put(np.ones(3, np.float32), kiln.devices("cpu")[0])
    assert not hasattr(x, "__cuda_array_interface__")


@gpu
def test_torch_to_kiln_and_back_without_copies():
    torch = pytest.importorskip("torch")
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda") * 0.5
    x = kiln.dlpack.from_dlpack(t)  # torch's pending work is ordered before kiln's
    assert x._buf.device == 1 and x._buf.ptr == t.data_ptr()
    y = kiln.jit(lambda v: jnp.sin(v) * 2)(x)
    u = torch.from_dlpack(y)  # torch's stream waits for kiln's kernel
    assert u.data_ptr() == y._buf.ptr
    np.testing.assert_allclose(u.cpu().numpy(), np.sin(np.arange(1 << 20) * 0.5) * 2, rtol=1e-5, atol=1e-5)
    assert torch.allclose(torch.from_dlpack(x), t)


@gpu
def test_cupy_interop_both_ways_and_cuda_array_interface():
    cp = pytest.importorskip("cupy")
    c = cp.arange(1000, dtype=cp.float32)
    x = kiln.dlpack.from_dlpack(c)
    assert x._buf.ptr == c.data.ptr
    y = x * 3
    z = cp.from_dlpack(y)
    assert z.data.ptr == y._buf.ptr
    np.testing.assert_array_equal(cp.asnumpy(z), np.arange(1000, dtype=np.float32) * 3)
    w = cp.asarray(y)  # through __cuda_array_interface__
    assert w.data.ptr == y._buf.ptr
    np.testing.assert_array_equal(cp.asnumpy(w), np.arange(1000, dtype=np.float32) * 3)


@gpu
def test_jnp_asarray_of_a_gpu_tensor_shares_memory():
    torch = pytest.importorskip("torch")
    t = torch.ones((4, 4), device="cuda")
    x = jnp.asarray(t)
    assert x._buf.ptr == t.data_ptr()
    assert float(x.sum()) == 16.0
