"""kiln.sharding: how an array's data lies over devices (jax.sharding): Mesh (a named grid of
devices), PartitionSpec / P (per array axis, the mesh axes it is split over), NamedSharding,
SingleDeviceSharding, and Shard (one device's piece of an Array, as Array.addressable_shards gives).

Sharded arrays are made by device_put(x, NamedSharding(...)), make_array_from_callback,
make_array_from_single_device_arrays and shard_map/pmap (kiln/_src/spmd.py)."""
import collections
import enum
import math

import numpy as np


class Sharding:
    """How an array's data lies over devices."""

    @property
    def device_set(self):
        raise NotImplementedError

    @property
    def is_fully_replicated(self):
        return True

    @property
    def is_fully_addressable(self):
        return True

    def devices_indices_map(self, global_shape):
        """{device: the index (a tuple of slices) of its piece of an array of global_shape}."""
        raise NotImplementedError

    def addressable_devices_indices_map(self, global_shape):
        return self.devices_indices_map(global_shape)

    def shard_shape(self, global_shape):
        raise NotImplementedError


from kiln._src.api import SingleDeviceSharding  # noqa: E402  (what Array.sharding gives)


class _Unconstrained:
    """PartitionSpec.UNCONSTRAINED: an axis whose split the compiler may choose (kiln keeps such an
    axis as it is, which is what an unsplit axis is)."""

    def __repr__(self):
        return "UNCONSTRAINED"

    def __reduce__(self):
        return "UNCONSTRAINED"


UNCONSTRAINED = _Unconstrained()


class PartitionSpec(tuple):
    """Per array axis, the mesh axis (or tuple of axes, or None: not split) it is split over
    (jax.sharding.PartitionSpec); axes beyond its length are not split."""

    def __new__(cls, *parts):
        for p in parts:
            if not (p is None or p is UNCONSTRAINED or isinstance(p, str) or
                    (isinstance(p, tuple) and all(isinstance(q, str) for q in p))):
                raise TypeError(f"PartitionSpec entries are mesh axis names, tuples of them or None; got {p!r}")
        return super().__new__(cls, parts)

    def __repr__(self):
        return f"PartitionSpec{tuple.__repr__(self)}"

    def __reduce__(self):
        return (PartitionSpec, tuple(self))


P = PartitionSpec
PartitionSpec.UNCONSTRAINED = UNCONSTRAINED


class Mesh:
    """A named grid of devices (jax.sharding.Mesh): `devices` an array of devices whose axes are
    named by `axis_names`. Usable as a context manager (shard_map then needs no mesh=)."""

    def __init__(self, devices, axis_names, axis_types=None):
        from kiln._src.api import Device
        devs = np.array(devices, dtype=object)
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        axis_names = tuple(axis_names)
        if devs.ndim != len(axis_names):
            raise ValueError(f"Mesh: the devices array has {devs.ndim} axes but axis_names {axis_names} names "
                             f"{len(axis_names)}; give one name per axis of the devices array")
        if len(set(axis_names)) != len(axis_names):
            raise ValueError(f"Mesh: axis_names {axis_names} repeat a name")
        flat = list(devs.flat)
        if not all(isinstance(d, Device) for d in flat):
            raise TypeError("Mesh: devices must be kiln devices (kiln.devices())")
        if len({(d.platform, d.id) for d in flat}) != len(flat):
            raise ValueError("Mesh: a device appears more than once in the mesh")
        self.devices = devs
        self.axis_names = axis_names
        if axis_types is None:
            axis_types = (AxisType.Auto,) * len(axis_names)
        elif isinstance(axis_types, AxisType):
            axis_types = (axis_types,) * len(axis_names)
        axis_types = tuple(axis_types)
        if len(axis_types) != len(axis_names):
            raise ValueError(f"Mesh: {len(axis_types)} axis_types {axis_types} for {len(axis_names)} axis names "
                             f"{axis_names}; give one type per axis")
        self.axis_types = axis_types
        self.shape = collections.OrderedDict(zip(axis_names, devs.shape))
        self.axis_sizes = tuple(devs.shape)
        self.size = devs.size
        self.device_ids = np.vectorize(lambda d: d.id, otypes=[int])(devs) if devs.size else np.zeros(devs.shape, int)
        self._stack_token = None
        # every device this process's (a device of another process stays one: its Device has no ordinal)
        self._all_local = all(d._ordinal is not None for d in flat)
        self._span = None  # spmd._mesh_span's answer, once asked

    @property
    def is_multi_process(self):
        """Whether the mesh holds devices of other processes (kiln.distributed)."""
        return not self._all_local

    @property
    def shape_tuple(self):
        return tuple(self.shape.items())

    @property
    def local_devices(self):
        """The mesh's devices that belong to this process."""
        from kiln._src import api
        return [d for d in self.devices.flat if api._is_local(d)]

    @property
    def local_mesh(self):
        """This process's devices of the mesh as a mesh with the same axis names: the mesh itself
        when it does not span processes, else the block of the mesh they form."""
        if self._all_local:
            return self
        coords = np.argwhere(np.vectorize(lambda d: d._ordinal is not None, otypes=[bool])(self.devices))
        if not len(coords):
            raise ValueError("Mesh.local_mesh: no device of the mesh belongs to this process")
        lo, hi = coords.min(0), coords.max(0) + 1
        if int(np.prod(hi - lo)) != len(coords):
            raise ValueError("Mesh.local_mesh: this process's devices do not form a block of the mesh")
        return Mesh(self.devices[tuple(slice(a, b) for a, b in zip(lo, hi))], self.axis_names)

    @property
    def empty(self):
        return self.size == 0

    # The axis types are recorded and reported (flax and others read them); kiln places arrays the
    # same way whatever the type.
    @property
    def _name_to_type(self):
        return dict(zip(self.axis_names, self.axis_types))

    def _axes_of(self, kind):
        return tuple(n for n, t in zip(self.axis_names, self.axis_types) if t == kind)

    explicit_axes = property(lambda self: self._axes_of(AxisType.Explicit))
    auto_axes = property(lambda self: self._axes_of(AxisType.Auto))
    manual_axes = property(lambda self: self._axes_of(AxisType.Manual))
    are_all_axes_explicit = property(lambda self: all(t == AxisType.Explicit for t in self.axis_types))
    are_all_axes_auto = property(lambda self: all(t == AxisType.Auto for t in self.axis_types))
    are_all_axes_manual = property(lambda self: all(t == AxisType.Manual for t in self.axis_types))
    _any_axis_explicit = property(lambda self: AxisType.Explicit in self.axis_types)
    _any_axis_auto = property(lambda self: AxisType.Auto in self.axis_types)
    _any_axis_manual = property(lambda self: AxisType.Manual in self.axis_types)
    is_scalar = property(lambda self: self.size == 1)

    @property
    def abstract_mesh(self):
        return self

    def update(self, devices=None, axis_names=None, axis_types=None):
        """A copy with the given fields replaced."""
        return Mesh(self.devices if devices is None else devices,
                    self.axis_names if axis_names is None else axis_names,
                    self.axis_types if axis_types is None else axis_types)

    def _key(self):
        return (tuple(d.id for d in self.devices.flat), self.axis_sizes, self.axis_names, self.axis_types)

    def __eq__(self, other):
        return isinstance(other, Mesh) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        shape = ", ".join(f"'{k}': {v}" for k, v in self.shape.items())
        return f"Mesh(device_ids={self.device_ids.tolist()!r}, axis_names={self.axis_names!r}) # {{{shape}}}"

    def __enter__(self):
        from kiln._src import spmd
        spmd._context_meshes.append(self)
        return self

    def __exit__(self, *exc):
        from kiln._src import spmd
        spmd._context_meshes.pop()
        return False


AbstractMesh = Mesh


class AxisType(enum.Enum):
    """Mesh axis kinds (jax.sharding.AxisType). kiln records them; it places arrays alike for each."""
    Auto = enum.auto()
    Explicit = enum.auto()
    Manual = enum.auto()

    def __repr__(self):
        return self.name


def _spec_axes(spec, ndim, mesh, what="NamedSharding"):
    """Per array axis, the tuple of mesh axis names it is split over; checks them."""
    if len(spec) > ndim:
        raise ValueError(f"{what}: the PartitionSpec {spec!r} has {len(spec)} entries but the array has only {ndim} "
                         f"axes; give at most one entry per axis")
    out, seen = [], set()
    for p in tuple(spec) + (None,) * (ndim - len(spec)):
        names = () if p is None or p is UNCONSTRAINED else (p,) if isinstance(p, str) else tuple(p)
        for n in names:
            if n not in mesh.shape:
                raise ValueError(f"{what}: the PartitionSpec {spec!r} names the axis {n!r}, which the mesh does not "
                                 f"have (its axes: {mesh.axis_names})")
            if n in seen:
                raise ValueError(f"{what}: the PartitionSpec {spec!r} uses the mesh axis {n!r} twice")
            seen.add(n)
        out.append(names)
    return out


class NamedSharding(Sharding):
    """An array split over a Mesh by a PartitionSpec (jax.sharding.NamedSharding): axis i of the
    array is cut into equal pieces over the mesh axes spec[i] names; over the mesh axes the spec
    does not name, the pieces are replicated."""

    def __init__(self, mesh, spec=PartitionSpec(), *, memory_kind=None):
        if not isinstance(mesh, (Mesh, _EmptyMesh)):  # (the empty abstract mesh: unsharded avals' update)
            raise TypeError(f"NamedSharding: expected a Mesh, got {type(mesh).__name__}")
        if spec is None:
            spec = PartitionSpec()
        if not isinstance(spec, PartitionSpec):
            spec = PartitionSpec(*spec)
        _spec_axes(spec, len(spec), mesh)
        self.mesh = mesh
        self.spec = spec
        self.memory_kind = memory_kind

    def update(self, **kwargs):
        """A copy with mesh=, spec= or memory_kind= replaced (JAX's NamedSharding.update)."""
        unknown = set(kwargs) - {"mesh", "spec", "memory_kind"}
        if unknown:
            raise ValueError(f"NamedSharding.update: unknown fields {sorted(unknown)}; it takes mesh, spec, memory_kind")
        return NamedSharding(kwargs.get("mesh", self.mesh), kwargs.get("spec", self.spec),
                             memory_kind=kwargs.get("memory_kind", self.memory_kind))

    @property
    def device_set(self):
        return set(self.mesh.devices.flat)

    @property
    def num_devices(self):
        return self.mesh.size

    @property
    def is_fully_replicated(self):
        return all(p is None or p == () for p in self.spec)

    @property
    def is_fully_addressable(self):
        """Whether every device of the mesh is this process's (else an array of this sharding holds
        only this process's pieces)."""
        return self.mesh._all_local

    @property
    def addressable_devices(self):
        return {d for d in self.mesh.devices.flat if d._ordinal is not None}

    def addressable_devices_indices_map(self, global_shape):
        return {d: i for d, i in self.devices_indices_map(global_shape).items() if d._ordinal is not None}

    def _parts(self, ndim):
        """Per array axis, the number of pieces it is cut into."""
        return [math.prod(self.mesh.shape[n] for n in names) for names in _spec_axes(self.spec, ndim, self.mesh)]

    def shard_shape(self, global_shape):
        parts = self._parts(len(global_shape))
        for i, (d, k) in enumerate(zip(global_shape, parts)):
            if d % k:
                raise ValueError(f"NamedSharding: axis {i} of an array of shape {tuple(global_shape)} (size {d}) is "
                                 f"split over mesh axes of {k} devices in all ({self.spec!r}), which do not divide it "
                                 f"evenly; use a size that is a multiple of {k}, or another PartitionSpec")
        return tuple(d // k for d, k in zip(global_shape, parts))

    def devices_indices_map(self, global_shape):
        shard = self.shard_shape(global_shape)
        axes = _spec_axes(self.spec, len(global_shape), self.mesh)
        names = self.mesh.axis_names
        out = {}
        for coord in np.ndindex(*self.mesh.axis_sizes):
            dev = self.mesh.devices[coord]
            c = dict(zip(names, coord))
            idx = []
            for d, (s, ax) in enumerate(zip(shard, axes)):
                k = 0
                for n in ax:  # the first named axis is the major one
                    k = k * self.mesh.shape[n] + c[n]
                idx.append(slice(k * s, (k + 1) * s) if ax else slice(None))
            out[dev] = tuple(idx)
        return out

    def _replica_ids(self, ndim):
        """{device: replica id}: 0 for the devices whose coordinates on the mesh axes the spec does
        not name are all 0 (the copy kiln reads), counting up over the others."""
        used = {n for names in _spec_axes(self.spec, ndim, self.mesh) for n in names}
        free = [i for i, n in enumerate(self.mesh.axis_names) if n not in used]
        out = {}
        for coord in np.ndindex(*self.mesh.axis_sizes):
            r = 0
            for i in free:
                r = r * self.mesh.axis_sizes[i] + coord[i]
            out[self.mesh.devices[coord]] = r
        return out

    def __eq__(self, other):
        return isinstance(other, NamedSharding) and self.mesh == other.mesh and tuple(self.spec) == tuple(other.spec)

    def __hash__(self):
        return hash((self.mesh, tuple(self.spec)))

    def __repr__(self):
        return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"


class PositionalSharding(Sharding):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("PositionalSharding is not supported by kiln (JAX removed it): use NamedSharding")


class Shard:
    """One device's piece of an Array (Array.addressable_shards): its device, its index into the
    global array (a tuple of slices), its replica id and its data (a single-device Array)."""

    def __init__(self, device, index, replica_id, data):
        self.device = device
        self.index = index
        self.replica_id = replica_id
        self.data = data

    def __repr__(self):
        return f"Shard(device={self.device!r}, index={self.index}, replica_id={self.replica_id}, data={self.data})"


def make_single_device_sharding(device):
    """The sharding that puts a whole array on `device`."""
    return SingleDeviceSharding(device)


def get_abstract_mesh():
    """The mesh set by jax.set_mesh or `with mesh:` (kiln's abstract mesh is the mesh itself), or
    an empty mesh when none is."""
    from kiln._src import spmd
    if spmd._context_meshes:
        return spmd._context_meshes[-1]
    return _EMPTY_MESH


class _EmptyMesh:
    """The mesh of no axes (jax's empty AbstractMesh): what get_abstract_mesh gives with none set."""
    axis_names = ()
    axis_sizes = ()
    shape = collections.OrderedDict()
    size = 0
    empty = True
    devices = np.empty((0,), dtype=object)

    def __repr__(self):
        return "AbstractMesh((), axis_names=())"


_EMPTY_MESH = _EmptyMesh()


def _unsharded(ndim):
    """The sharding of an abstract value outside any mesh (jax.typeof(x).sharding): a NamedSharding
    over the empty mesh, every axis unsplit."""
    sh = NamedSharding.__new__(NamedSharding)
    sh.mesh, sh.spec, sh.memory_kind = _EMPTY_MESH, PartitionSpec(*(None,) * ndim), None
    return sh


def get_mesh():
    """The mesh set by jax.set_mesh or `with mesh:`, or the empty mesh."""
    return get_abstract_mesh()


def set_mesh(mesh):
    """jax.sharding.set_mesh: jax.set_mesh."""
    from kiln._src.toplevel import set_mesh as _set
    return _set(mesh)


def use_abstract_mesh(mesh):
    """jax.sharding.use_abstract_mesh: kiln's abstract mesh is the mesh; as jax.set_mesh."""
    return use_mesh(mesh)


class AbstractDevice:
    """A device described by its kind (jax.sharding.AbstractDevice)."""

    def __init__(self, device_kind, num_cores=None):
        self.device_kind, self.num_cores = device_kind, num_cores

    def __repr__(self):
        return f"AbstractDevice(device_kind={self.device_kind!r}, num_cores={self.num_cores})"

    def __eq__(self, other):
        return isinstance(other, AbstractDevice) and (self.device_kind, self.num_cores) == (other.device_kind,
                                                                                             other.num_cores)

    def __hash__(self):
        return hash((self.device_kind, self.num_cores))


class ManualAxisType:
    """How a value is typed along a manual (shard_map) mesh axis (jax.sharding.ManualAxisType): kiln's
    check_vma typing knows varying and invariant."""
    Varying = "varying"
    Invariant = "invariant"


def auto_axes(f=None, /, *, axes=None, out_sharding=None):
    """jax.sharding.auto_axes: f with the mesh axes in Auto mode. kiln's axes are always decided by
    its partitioner, so f runs as it is; out_sharding, if given, places the results (reshard)."""
    def wrap(fun):
        def run(*args, **kwargs):
            out = fun(*args, **kwargs)
            return out if out_sharding is None else reshard(out, out_sharding)
        return run
    return wrap if f is None else wrap(f)


def explicit_axes(f=None, /, *, axes=None, in_sharding=None):
    """jax.sharding.explicit_axes: f with the mesh axes in Explicit mode; in kiln the arguments are
    placed by in_sharding (reshard) and f runs as it is."""
    def wrap(fun):
        def run(*args, **kwargs):
            if in_sharding is not None:
                args = reshard(args, in_sharding) if not isinstance(in_sharding, (tuple, list)) else \
                    tuple(reshard(a, s) for a, s in zip(args, in_sharding))
            return fun(*args, **kwargs)
        return run
    return wrap if f is None else wrap(f)


def use_mesh(mesh):
    """jax.sharding.use_mesh (older name of jax.set_mesh): a context manager setting the mesh."""
    from kiln._src.toplevel import set_mesh
    return set_mesh(mesh)


from kiln._src.toplevel import reshard  # noqa: E402


__all__ = ["make_single_device_sharding", "Sharding", "SingleDeviceSharding", "PartitionSpec", "P", "Mesh",
           "NamedSharding", "AbstractMesh", "AxisType", "Shard", "PositionalSharding", "UNCONSTRAINED",
           "get_abstract_mesh", "get_mesh", "set_mesh", "use_mesh", "reshard", "use_abstract_mesh", "AbstractDevice",
           "ManualAxisType", "auto_axes", "explicit_axes"]
