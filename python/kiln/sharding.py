"""kiln.sharding: the single-device sharding classes (jax.sharding). Meshes and named shardings
over several devices are kiln's next piece of work: constructing them raises NotImplementedError."""
import collections


class Sharding:
    """How an array's data lies over devices (kiln: on one device)."""

    @property
    def device_set(self):
        raise NotImplementedError

    def is_fully_replicated(self):
        return True

    @property
    def is_fully_addressable(self):
        return True


from kiln._src.api import SingleDeviceSharding  # noqa: E402  (what Array.sharding gives)


class PartitionSpec(tuple):
    """Per array axis, the mesh axis (or axes, or None) it is split over (jax.sharding.PartitionSpec)."""

    def __new__(cls, *parts):
        return super().__new__(cls, parts)

    def __repr__(self):
        return f"PartitionSpec{tuple.__repr__(self)}"


P = PartitionSpec
UNCONSTRAINED = object()


class Mesh:
    """A named grid of devices: not supported yet (needs several devices)."""

    def __init__(self, devices, axis_names, *args, **kwargs):
        raise NotImplementedError("sharding.Mesh is not supported yet by kiln: meshes and sharded arrays over several "
                                  "devices are kiln's next piece of work")


class NamedSharding(Sharding):
    """An array split over a Mesh: not supported yet (needs several devices)."""

    def __init__(self, mesh, spec, *args, **kwargs):
        raise NotImplementedError("sharding.NamedSharding is not supported yet by kiln: meshes and sharded arrays over "
                                  "several devices are kiln's next piece of work")


AbstractMesh = Mesh
AxisType = collections.namedtuple("AxisType", [])  # placeholder type for annotations

def make_single_device_sharding(device):
    """The sharding that puts a whole array on `device`."""
    return SingleDeviceSharding(device)


__all__ = ["make_single_device_sharding", "Sharding", "SingleDeviceSharding", "PartitionSpec", "P", "Mesh", "NamedSharding", "AbstractMesh",
           "UNCONSTRAINED"]
