"""jax.extend.backend: the runtime's devices and caches."""
from kiln._src.api import clear_caches, default_backend  # noqa: F401


def get_backend(platform=None):
    """kiln's backend object: its platform and devices."""
    import kiln

    class _Backend:
        def __init__(self):
            self.platform = kiln.default_backend() if platform is None else platform
            self.platform_version = "kiln"

        def devices(self):
            return kiln.devices()

        def local_devices(self):
            return kiln.local_devices()

        def device_count(self):
            return kiln.device_count()

        def local_device_count(self):
            return kiln.local_device_count()

        def process_index(self):
            return 0
    return _Backend()


def backends():
    return {kiln_backend: get_backend(kiln_backend) for kiln_backend in (default_backend(),)}


def ifrt_proxy(*args, **kwargs):
    raise NotImplementedError("jax.extend.backend.ifrt_proxy: kiln has no IFRT proxy")
