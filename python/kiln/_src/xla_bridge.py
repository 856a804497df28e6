"""jax._src.xla_bridge's names libraries reach for (chex.set_n_cpu_devices reads _backends to see
whether devices were made yet). kiln makes its simulated CPU devices when first asked for them,
so more can be requested (XLA_FLAGS' --xla_force_host_platform_device_count, jax_num_cpu_devices)
until then; _backends stays empty."""
_backends = {}


def devices(backend=None):
    from kiln._src import api
    return api.devices(backend)


def local_devices(process_index=None, backend=None, host_id=None):
    from kiln._src import api
    return api.local_devices(process_index, backend, host_id)


def device_count(backend=None):
    return len(devices(backend))


def default_backend():
    from kiln._src import api
    return api.default_backend()


def process_index(backend=None):
    del backend
    from kiln._src.toplevel import process_index as index
    return index()


def get_backend(platform=None):
    from kiln.extend.backend import get_backend as backend
    return backend(platform)
