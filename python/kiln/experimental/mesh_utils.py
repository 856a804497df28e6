"""kiln.experimental.mesh_utils: device arrays for Meshes (jax.experimental.mesh_utils).

kiln knows no physical topology (interconnect rings, ICI/DCN), so a mesh's devices are taken in
`devices()` order, which lists each process's devices together: create_device_mesh reshapes them,
and create_hybrid_device_mesh puts each process's (a granule's) devices in one block of the
per-process shape and tiles the blocks over dcn_mesh_shape."""
import math

import numpy as np


def _devices(devices):
    from kiln._src import api
    return list(devices) if devices is not None else api.devices()


def create_device_mesh(mesh_shape, devices=None, *, contiguous_submeshes=False, allow_split_physical_axes=False):
    """An ndarray of mesh_shape holding the first prod(mesh_shape) devices in order."""
    del contiguous_submeshes, allow_split_physical_axes
    mesh_shape = tuple(int(n) for n in mesh_shape)
    devs = _devices(devices)
    n = math.prod(mesh_shape)
    if n != len(devs):
        raise ValueError(f"create_device_mesh: the mesh shape {mesh_shape} holds {n} devices, but {len(devs)} were "
                         f"given (jax requires them to match: pass devices=jax.devices()[:{n}])")
    return np.array(devs, dtype=object).reshape(mesh_shape)


def create_hybrid_device_mesh(mesh_shape, dcn_mesh_shape, devices=None, *, process_is_granule=False,
                              should_sort_granules_by_key=True, allow_split_physical_axes=False):
    """A mesh of shape mesh_shape * dcn_mesh_shape (elementwise): each process's devices form one
    block of mesh_shape, the blocks laid out over dcn_mesh_shape."""
    del process_is_granule, should_sort_granules_by_key, allow_split_physical_axes
    mesh_shape, dcn_mesh_shape = tuple(int(n) for n in mesh_shape), tuple(int(n) for n in dcn_mesh_shape)
    if len(mesh_shape) != len(dcn_mesh_shape):
        raise ValueError(f"create_hybrid_device_mesh: mesh_shape {mesh_shape} and dcn_mesh_shape {dcn_mesh_shape} "
                         "must have the same number of axes")
    devs = _devices(devices)
    granules = {}
    for d in devs:
        granules.setdefault(getattr(d, "process_index", 0), []).append(d)
    per, ngran = math.prod(mesh_shape), math.prod(dcn_mesh_shape)
    if len(granules) != ngran or any(len(g) != per for g in granules.values()):
        raise ValueError(f"create_hybrid_device_mesh: {ngran} granules (processes) of {per} devices are needed for "
                         f"mesh_shape {mesh_shape} x dcn_mesh_shape {dcn_mesh_shape}; the devices given come from "
                         f"{len(granules)} process(es) with {sorted(len(g) for g in granules.values())} devices")
    blocks = np.empty(dcn_mesh_shape, dtype=object)
    for i, key in enumerate(sorted(granules)):
        blocks.flat[i] = np.array(granules[key], dtype=object).reshape(mesh_shape)
    out = np.empty(tuple(a * b for a, b in zip(mesh_shape, dcn_mesh_shape)), dtype=object)
    for idx in np.ndindex(*dcn_mesh_shape):
        sl = tuple(slice(i * m, (i + 1) * m) for i, m in zip(idx, mesh_shape))
        out[sl] = blocks[idx]
    return out


__all__ = ["create_device_mesh", "create_hybrid_device_mesh"]
