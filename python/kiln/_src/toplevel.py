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
    def ctx(new_value=True):
        return config._context(name, new_value)  # this thread's value, as JAX's contexts
    ctx.__name__ = name.removeprefix("jax_")
    ctx.__doc__ = doc
    return ctx


enable_x64 = _option_context("jax_enable_x64", "Within the block, 64-bit types are on (jax.enable_x64).")
debug_nans = _option_context("jax_debug_nans", "Within the block, jitted results holding a NaN raise.")
debug_infs = _option_context("jax_debug_infs", "Within the block, jitted results holding an inf raise.")
default_matmul_precision = _option_context("jax_default_matmul_precision",
                                           "Within the block, matmuls default to this precision.")


def _recorded_context(name):
    return _option_context(name, f"Within the block, config.{name} is the value given (recorded: kiln "
                                 f"reads it where it has the behaviour).")


# configuration contexts of options kiln records (jax.config.values); where kiln has the behaviour
# the modules concerned read the option
check_tracer_leaks = _recorded_context("jax_check_tracer_leaks")
enable_checks = _recorded_context("jax_enable_checks")
log_compiles = _recorded_context("jax_log_compiles")
explain_cache_misses = _recorded_context("jax_explain_cache_misses")
threefry_partitionable = _recorded_context("jax_threefry_partitionable")
numpy_dtype_promotion = _recorded_context("jax_numpy_dtype_promotion")
numpy_rank_promotion = _recorded_context("jax_numpy_rank_promotion")
softmax_custom_jvp = _recorded_context("jax_softmax_custom_jvp")
allow_f16_reductions = _recorded_context("jax_allow_f16_reductions")
debug_key_reuse = _recorded_context("jax_debug_key_reuse")
legacy_prng_key = _recorded_context("jax_legacy_prng_key")
default_prng_impl = _recorded_context("jax_default_prng_impl")
array_garbage_collection_guard = _recorded_context("jax_array_garbage_collection_guard")
transfer_guard_host_to_device = _recorded_context("jax_transfer_guard_host_to_device")
transfer_guard_device_to_host = _recorded_context("jax_transfer_guard_device_to_host")
transfer_guard_device_to_device = _recorded_context("jax_transfer_guard_device_to_device")
thread_guard = _recorded_context("jax_thread_guard")
no_tracing = _recorded_context("jax_no_tracing")
no_execution = _recorded_context("jax_no_execution")
enable_custom_prng = _recorded_context("jax_enable_custom_prng")
# mesh-typing options of JAX's explicit-sharding mode: kiln's check_vma typing inserts pvary where
# needed (auto_pcast on) and keeps size-1 mesh axes (their collectives are copies)
auto_pcast = _recorded_context("jax_auto_pcast")
remove_size_one_mesh_axis_from_type = _recorded_context("jax_remove_size_one_mesh_axis_from_type")


@contextlib.contextmanager
def transfer_guard(new_value):
    """Within the block, the three transfer guards are new_value (as jax.transfer_guard)."""
    names = ("jax_transfer_guard_host_to_device", "jax_transfer_guard_device_to_host",
             "jax_transfer_guard_device_to_device")
    with config._context(names[0], new_value), config._context(names[1], new_value), \
            config._context(names[2], new_value):
        yield


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
    lines = [f"kiln:    {kiln.kiln_version} (JAX {kiln.__version__}'s API)", f"numpy:   {np.__version__}",
             f"python:  {sys.version.split()[0]}", f"platform: {platform.platform()}",
             f"devices: {kiln.devices()}"]
    text = "\n".join(lines)
    if return_string:
        return text
    print(text)
    return None


def unsupported(qualname, reason):
    """A function named after qualname's last part that raises NotImplementedError saying
    "<qualname> is not supported by kiln: <reason>" (the names kiln keeps without their feature)."""
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{qualname} is not supported by kiln: {reason}")
    fn.__name__ = qualname.rsplit(".", 1)[-1]
    return fn


from kiln._src.spmd import (pmap, shard_map, smap, make_array_from_callback,  # noqa: E402,F401
                            make_array_from_single_device_arrays)


class set_mesh:
    """jax.set_mesh(mesh): mesh becomes the one shard_map (and P-only shardings) use when none is
    given; usable as a context manager, which restores the previous one on exit."""

    def __init__(self, mesh):
        from kiln._src import spmd
        from kiln.sharding import Mesh
        if mesh is not None and not isinstance(mesh, Mesh):
            raise TypeError(f"set_mesh: expected a Mesh, got {type(mesh).__name__}")
        self._prev = list(spmd._context_meshes)
        spmd._context_meshes[:] = [] if mesh is None else [mesh]
        self.mesh = mesh

    def __enter__(self):
        return self.mesh

    def __exit__(self, *exc):
        from kiln._src import spmd
        spmd._context_meshes[:] = self._prev
        return False


def _current_mesh(what):
    from kiln._src import spmd
    if not spmd._context_meshes:
        raise ValueError(f"{what}: a PartitionSpec needs a mesh: pass a NamedSharding, or set one with "
                         "jax.set_mesh(mesh) or `with mesh:`")
    return spmd._context_meshes[-1]


def reshard(xs, out_shardings):
    """xs placed by out_shardings (NamedShardings, or PartitionSpecs over the current mesh); inside
    a traced function the values as they are (kiln's jit decides layouts itself)."""
    from kiln._src import api, core
    from kiln.sharding import NamedSharding, PartitionSpec

    def one(x, s):
        if isinstance(x, core.Tracer):
            return x
        if isinstance(s, NamedSharding) and getattr(s.mesh, "empty", False):
            return x  # over the empty mesh (jax.typeof(x).sharding outside a mesh): nowhere to place it, as JAX
        if isinstance(s, PartitionSpec):
            s = NamedSharding(_current_mesh("reshard"), s)
        return api.device_put(x, s)
    if isinstance(out_shardings, (PartitionSpec, NamedSharding)) or not isinstance(out_shardings, (tuple, list, dict)):
        from kiln._src import tree_util
        return tree_util.tree_map(lambda x: one(x, out_shardings), xs)
    from kiln._src import tree_util
    return tree_util.tree_map(one, xs, out_shardings, is_leaf=lambda v: isinstance(v, (PartitionSpec, NamedSharding)))


def make_array_from_process_local_data(sharding, local_data, global_shape=None):
    """A global Array from this process's piece of the data (jax.make_array_from_process_local_data).
    With one process the local data are the whole array."""
    from kiln._src import api
    from kiln._src.distributed import global_state
    local = np.asarray(local_data)
    if global_shape is not None and tuple(global_shape) != local.shape and global_state.num_processes == 1:
        raise ValueError(f"make_array_from_process_local_data: with one process the local data (shape "
                         f"{local.shape}) are the whole array, but global_shape is {tuple(global_shape)}")
    if global_state.num_processes > 1:
        raise NotImplementedError("make_array_from_process_local_data across processes is not supported yet by "
                                  "kiln: use jax.make_array_from_callback with the global index")
    return api.device_put(local, sharding)


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
    if axis_types is None:  # JAX 0.10's default
        from kiln.sharding import AxisType
        axis_types = (AxisType.Explicit,) * len(axis_shapes)
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
