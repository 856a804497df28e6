"""The rest of jax's top-level names: configuration context managers (jax.enable_x64,
jax.debug_nans, ...), single-process facts (process_index, host_count, ...), float0, version
and environment info, and the multi-device names that wait for kiln's multi-device work (they
raise NotImplementedError saying so)."""
import contextlib
import platform
import sys

import numpy as np

from kiln._src.config import config

version = None  # set by kiln/__init__.py


def _option_context(name, doc):
    @contextlib.contextmanager
    def ctx(new_value=True):
        old = getattr(config, name)
        config.update(name, new_value)
        try:
            yield
        finally:
            config.update(name, old)
    ctx.__name__ = name.removeprefix("jax_")
    ctx.__doc__ = doc
    return ctx


enable_x64 = _option_context("jax_enable_x64", "Within the block, 64-bit types are on (jax.enable_x64).")
debug_nans = _option_context("jax_debug_nans", "Within the block, jitted results holding a NaN raise.")
debug_infs = _option_context("jax_debug_infs", "Within the block, jitted results holding an inf raise.")
default_matmul_precision = _option_context("jax_default_matmul_precision",
                                           "Within the block, matmuls default to this precision.")


@contextlib.contextmanager
def _accepted(*args, **kwargs):
    """A JAX configuration context kiln accepts and has nothing to do for."""
    del args, kwargs
    yield


# configuration contexts whose subject kiln does not have (or always does): accepted as no-ops
check_tracer_leaks = enable_checks = log_compiles = explain_cache_misses = threefry_partitionable = _accepted
numpy_dtype_promotion = numpy_rank_promotion = softmax_custom_jvp = allow_f16_reductions = _accepted
debug_key_reuse = legacy_prng_key = default_prng_impl = array_garbage_collection_guard = _accepted
transfer_guard = transfer_guard_host_to_device = transfer_guard_device_to_host = _accepted
transfer_guard_device_to_device = thread_guard = no_tracing = no_execution = enable_custom_prng = _accepted

# jax.dtypes.float0: the dtype of integer inputs' tangents in JAX (kiln gives zeros of the input's dtype)
float0 = np.dtype([("float0", np.void, 0)])


def process_index():
    """This process's index among the processes of a run (0 unless kiln.distributed.initialize
    joined it to several)."""
    from kiln._src import distributed
    return distributed.global_state.process_id


def process_count():
    from kiln._src import distributed
    return distributed.global_state.num_processes


def process_indices():
    return list(range(process_count()))


host_id = process_index
host_count = process_count
host_ids = process_indices


def print_environment_info(return_string=False):
    """kiln's version, Python's, NumPy's and the devices, as jax.print_environment_info."""
    import kiln
    lines = [f"kiln:    {kiln.__version__}", f"numpy:   {np.__version__}",
             f"python:  {sys.version.split()[0]}", f"platform: {platform.platform()}",
             f"devices: {kiln.devices()}"]
    text = "\n".join(lines)
    if return_string:
        return text
    print(text)
    return None


def _multi_device(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name} is not supported yet by kiln: it needs several devices (meshes, shardings, "
                                  "collectives), kiln's next piece of work; single-device programs need no "
                                  f"{name}")
    fn.__name__ = name
    return fn


from kiln._src.spmd import (pmap, shard_map, make_array_from_callback,  # noqa: E402,F401
                            make_array_from_single_device_arrays)
smap = _multi_device("smap")
set_mesh = _multi_device("set_mesh")
reshard = _multi_device("reshard")
make_array_from_process_local_data = _multi_device("make_array_from_process_local_data")


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None):
    """A Mesh of the first prod(axis_shapes) devices (jax.make_mesh), shaped axis_shapes."""
    import math
    from kiln._src import api
    from kiln.sharding import Mesh
    axis_shapes = tuple(int(n) for n in axis_shapes)
    devs = list(devices) if devices is not None else api.devices()
    n = math.prod(axis_shapes)
    if n > len(devs):
        raise ValueError(f"make_mesh: the mesh {axis_shapes} needs {n} devices but only {len(devs)} are available; with "
                         f"simulated CPU devices set KILN_NUM_CPU_DEVICES={n} or more before importing kiln")
    return Mesh(np.array(devs[:n], dtype=object).reshape(axis_shapes), axis_names, axis_types)


def copy_to_host_async(x):
    """Starts moving x to the host (kiln's transfers happen when the value is read): returns x."""
    return x


def ds(start, size=None, stride=None):
    """A dynamic slice of a Ref (jax.ds): start:start+size; kiln takes static starts."""
    import operator
    if size is None:
        start, size = 0, start
    try:
        start = operator.index(start)
    except TypeError:
        raise NotImplementedError("ds: a traced start is not supported yet by kiln (index the Ref with "
                                  "lax.dynamic_slice on its value instead)") from None
    return slice(start, start + operator.index(size), stride)


def fwd_and_bwd(fun, argnums=0, has_aux=False, jitted=True):
    """Not supported yet by kiln: use kiln.vjp (the same forward and backward split)."""
    raise NotImplementedError("fwd_and_bwd is not supported yet by kiln; kiln.vjp gives the forward values and "
                              "the backward function")


def make_user_context(*args, **kwargs):
    raise NotImplementedError("make_user_context is not supported by kiln (JAX's user context for configuration)")
