"""kiln.dlpack: zero-copy exchange with NumPy, PyTorch, CuPy and any DLPack producer.

    t = torch.arange(4.0, device="cuda")
    x = kiln.dlpack.from_dlpack(t)        # no copy: x reads t's memory
    u = torch.from_dlpack(x)              # no copy back

Arrays stay on the device their data lives on. Ordering: kiln passes its stream to the producer,
which makes kiln's work wait for its own; kiln makes a consumer's stream wait for kiln's.
"""
import numpy as np

from kiln import _kiln
from kiln._src import dtypes
from kiln._src.core import Array

_CODES = {0: "i", 1: "u", 2: "f", 4: "bf", 5: "c", 6: "b"}


def _dtype_from(code, bits):
    if code == 4 and bits == 16:
        return dtypes.bfloat16
    if code == 6:
        return np.dtype(bool)
    kind = _CODES.get(code)
    if kind is None or kind == "bf":
        raise TypeError(f"from_dlpack: DLPack dtype (code {code}, {bits} bits) is not one kiln supports")
    try:
        dt = np.dtype(f"{kind}{bits // 8}")
    except TypeError:
        raise TypeError(f"from_dlpack: DLPack dtype (code {code}, {bits} bits) is not one kiln supports") from None
    if dt not in dtypes.supported_dtypes:
        raise TypeError(f"from_dlpack: DLPack dtype {dt.name} is not one kiln supports")
    return dt


def dlpack_code(dtype):
    """DLPack (type code, bits) of a kiln dtype."""
    dtype = np.dtype(dtype)
    if dtype == dtypes.bfloat16:
        return (4, 16)
    if dtype == np.bool_:
        return (6, 8)
    return ({"i": 0, "u": 1, "f": 2, "c": 5}[dtype.kind], dtype.itemsize * 8)


def from_dlpack(x, device=None, copy=None):
    """An Array sharing the memory of `x` (any object with __dlpack__, or a legacy capsule)."""
    if hasattr(x, "__dlpack__"):
        dev_type, dev_id = x.__dlpack_device__()
        if int(dev_type) == 2:  # CUDA: the producer orders its work before kiln's stream
            cap = x.__dlpack__(stream=_kiln.stream_handle())
        else:
            cap = x.__dlpack__()
    else:
        cap = x  # a capsule from an older to_dlpack()
    got = _kiln.from_dlpack(cap)
    if got is None:  # strided, misaligned or elsewhere: one copy through the host
        if hasattr(x, "__array__") or hasattr(x, "cpu"):
            host = np.asarray(x.cpu() if hasattr(x, "cpu") and not isinstance(x, np.ndarray) else x)
            from kiln._src import core
            return core.asarray(np.ascontiguousarray(host))
        raise ValueError("from_dlpack: this tensor cannot be used in place (not contiguous, misaligned or on another "
                         "GPU); make it contiguous first")
    buf, shape, (code, bits) = got
    a = Array(buf, tuple(shape), _dtype_from(code, bits))
    if device is not None:
        from kiln._src import api
        a = api.device_put(a, device)
    return a


def to_dlpack(x):
    """A legacy DLPack capsule of array x (prefer passing x itself to the consumer's from_dlpack)."""
    return x.__dlpack__()
