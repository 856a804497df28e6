"""kiln: a traced array-program compiler with JAX's API.

    import kiln as jax
    import kiln.numpy as jnp
"""

# Under `import kiln as jax`, libraries compare jax.__version__ with JAX releases (flax, chex,
# optax pick code paths by it): it is the JAX version whose API and numbers kiln follows. kiln's
# own release is kiln_version.
__version__ = "0.10.2"
__version_info__ = (0, 10, 2)
kiln_version = "0.1.0"

from kiln._src.config import config  # noqa: F401
from kiln import errors  # noqa: F401
from kiln import tree_util  # noqa: F401
from kiln import tree  # noqa: F401
from kiln._src.basearray import Array  # noqa: F401  (abstract: arrays, tracers, key arrays)
from kiln._src.api import (jit, make_jaxpr, device_put, device_get, devices, local_devices, device_count,  # noqa: F401
                           local_device_count, default_backend, block_until_ready, eval_shape,
                           ShapeDtypeStruct, clear_caches, live_arrays, empty_cache)
from kiln.tree_util import tree_map, tree_leaves, tree_flatten, tree_unflatten, tree_structure  # noqa: F401
from kiln._src.ad import (grad, value_and_grad, jvp, vjp, linearize, jacfwd, jacrev, jacobian,  # noqa: F401
                          hessian)
from kiln._src.batching import vmap  # noqa: F401
from kiln._src.custom import custom_jvp, custom_vjp, checkpoint, remat, checkpoint_policies  # noqa: F401
from kiln import lax  # noqa: F401
from kiln import numpy  # noqa: F401
from kiln import nn  # noqa: F401
from kiln import scipy  # noqa: F401
from kiln import random  # noqa: F401
from kiln import dlpack  # noqa: F401
from kiln import ref  # noqa: F401
from kiln import lib  # noqa: F401  (jax.lib: the jaxlib version libraries compare)
from kiln import image  # noqa: F401
from kiln._src.refs import new_ref, Ref  # noqa: F401
from kiln import debug  # noqa: F401
from kiln._src.callback import pure_callback  # noqa: F401


def effects_barrier():
    """Waits until every launched computation (and so every callback it makes) has finished."""
    from kiln import _kiln
    _kiln.synchronize()

from kiln import typing  # noqa: F401
from kiln import ops  # noqa: F401
from kiln._src.api import disable_jit  # noqa: F401
from kiln._src.extras import (custom_gradient, linear_transpose, closure_convert, named_call,  # noqa: F401
                              named_scope, checking_leaks, typeof, ensure_compile_time_eval)
from kiln import sharding  # noqa: F401
from kiln import dtypes  # noqa: F401
from kiln import custom_derivatives  # noqa: F401
from kiln import ad_checkpoint  # noqa: F401
from kiln import experimental, profiler, stages  # noqa: F401
from kiln._src.api import Device  # noqa: F401
from kiln._src.refs import freeze  # noqa: F401
from kiln._src.toplevel import (enable_x64, debug_nans, debug_infs, default_matmul_precision,  # noqa: F401
                                check_tracer_leaks, enable_checks, log_compiles, explain_cache_misses,
                                threefry_partitionable, numpy_dtype_promotion, numpy_rank_promotion,
                                softmax_custom_jvp, allow_f16_reductions, debug_key_reuse, legacy_prng_key,
                                default_prng_impl, array_garbage_collection_guard, transfer_guard,
                                transfer_guard_host_to_device, transfer_guard_device_to_host,
                                transfer_guard_device_to_device, thread_guard, no_tracing, no_execution, float0,
                                process_index, process_count, process_indices, host_id, host_count, host_ids,
                                print_environment_info, pmap, shard_map, smap, make_mesh, set_mesh, reshard,
                                make_array_from_callback, make_array_from_single_device_arrays,
                                make_array_from_process_local_data, copy_to_host_async, enable_custom_prng, ds,
                                fwd_and_bwd, make_user_context, auto_pcast, remove_size_one_mesh_axis_from_type)
from kiln import ad, custom_batching, memory, distributed, monitoring, export, ffi  # noqa: F401
from kiln import core, extend, interpreters, flatten_util, test_util, api_util  # noqa: F401,E402  (jax.core, ...)
from kiln._src import xla_bridge as _xla_bridge  # noqa: F401,E402  (jax._src.xla_bridge, read as an attribute)
from kiln._src import out_sharding as _out_sharding  # noqa: E402
_out_sharding.install()  # (out_sharding= on the functions JAX gives it)
from kiln.sharding import NamedSharding, PartitionSpec as P, Shard  # noqa: F401

from kiln import version  # noqa: E402  (jax.version is a module: version.__version_info__)


def empty_ref(aval, *, memory_space=None):
    """A Ref holding zeros of aval's shape and dtype (an uninitialized Ref in JAX)."""
    from kiln import numpy as _jnp
    return new_ref(_jnp.zeros(aval.shape, aval.dtype), memory_space=memory_space)


def free_ref(ref):
    """Accepted: a Ref's memory goes when nothing refers to it."""
    del ref


def default_device(device):
    """Within the block, computations go to `device` (as jax.default_device): kiln accepts its default
    device (a GPU when there is one) and raises NotImplementedError for another (move arrays with
    device_put instead)."""
    import contextlib
    if device is not None and device not in devices():
        raise ValueError(f"default_device: {device!r} is not one of kiln's devices {devices()}")
    if device is not None and device != devices()[0]:
        raise NotImplementedError(f"default_device({device!r}): kiln computes on its default device "
                                  f"{devices()[0]!r}; move arrays with device_put instead")
    return contextlib.nullcontext()


def _stop_on_ctrl_c():
    """Ctrl-C stops kiln's running programs wherever it lands. A wait (block_until_ready, reading
    an array) handles it itself; one that lands while Python runs on, a jitted loop still running
    behind it, would leave the loop running. kiln takes SIGINT where Python's default handler has
    it: the handler asks the running loops to stop, lets their work settle (their results raise
    "interrupted"), then raises KeyboardInterrupt as the default does. A handler someone else
    installed is left as it is."""
    import signal
    import threading
    from kiln import _kiln
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return

    def on_sigint(signum, frame):
        _kiln.stop_running()
        signal.default_int_handler(signum, frame)

    on_sigint.__qualname__ = "kiln_sigint_handler"
    signal.signal(signal.SIGINT, on_sigint)


_stop_on_ctrl_c()
del _stop_on_ctrl_c


def _find_blas():
    """Tells the runtime where NumPy's bundled OpenBLAS is (a fallback when the system has none)."""
    import glob
    import os
    import numpy as np
    from kiln import _kiln
    base = os.path.dirname(np.__file__)
    for pattern in (base + ".libs/*openblas*.so*", base + "/../numpy.libs/*openblas*.so*",
                    base + "/.dylibs/*openblas*"):
        for path in sorted(glob.glob(pattern)):
            _kiln.blas_search_path(path)


_find_blas()
del _find_blas


def _find_cublas():
    """Tells the runtime where a pip-installed cuBLAS (the nvidia-cublas wheel), cuDNN (nvidia-cudnn),
    cuSOLVER, NCCL (nvidia-nccl) and CUPTI (nvidia-cuda-cupti) are."""
    import glob
    import os
    import sys
    from kiln import _kiln
    for base in sys.path:
        for path in sorted(glob.glob(os.path.join(base or ".", "nvidia", "cu*", "lib", "libcublas.so.*")) +
                           sorted(glob.glob(os.path.join(base or ".", "nvidia", "cublas", "lib", "libcublas.so.*")))):
            if not path.endswith(("Lt.so", ".alt")) and "Lt" not in os.path.basename(path):
                _kiln.cublas_search_path(path)
        for path in sorted(glob.glob(os.path.join(base or ".", "nvidia", "cudnn", "lib", "libcudnn.so.9"))):
            _kiln.cublas_search_path(path)  # (the runtime hands a cuDNN path to cuDNN)
        for path in sorted(glob.glob(os.path.join(base or ".", "nvidia", "nccl", "lib", "libnccl.so.2"))):
            _kiln.cublas_search_path(path)  # (and a libnccl to NCCL: the newest of it and the system's is used)
        # cuSOLVER (runtime/cusolver.c): the nvidia-cusolver wheel, or the one CUDA 13 wheel folder
        for path in sorted(glob.glob(os.path.join(base or ".", "nvidia", "cusolver", "lib", "libcusolver.so.*")) +
                           sorted(glob.glob(os.path.join(base or ".", "nvidia", "cu*", "lib", "libcusolver.so.*")))):
            if "Mg" not in os.path.basename(path):
                _kiln.cublas_search_path(path)
        # CUPTI (runtime/cupti.c, kiln.profiler's GPU rows): the nvidia-cuda-cupti wheel
        for path in sorted(glob.glob(os.path.join(base or ".", "nvidia", "cuda_cupti", "lib", "libcupti.so.*")) +
                           sorted(glob.glob(os.path.join(base or ".", "nvidia", "cu*", "lib", "libcupti.so.*")))):
            _kiln.cublas_search_path(path)


_find_cublas()
del _find_cublas


def _find_libdevice():
    """Points KILN_LIBDEVICE at a pip-installed libdevice (the nvidia-cuda-nvcc wheel, as JAX's GPU
    install brings) when the runtime's own places ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda) have none."""
    import glob
    import os
    import sys
    if os.environ.get("KILN_LIBDEVICE"):
        return
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "nvvm", "libdevice", "libdevice.10.bc")):
            return
    for base in sys.path:
        for path in sorted(glob.glob(os.path.join(base or ".", "nvidia", "cu*", "nvvm", "libdevice", "libdevice.10.bc"))):
            os.environ["KILN_LIBDEVICE"] = path
            return


_find_libdevice()
del _find_libdevice
