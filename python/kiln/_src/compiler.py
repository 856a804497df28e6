"""jax._src.compiler: kiln compiles with its own pipeline (codegen/), not through a PJRT backend.
The names exist for libraries that wrap them at import (chex.restrict_backends); kiln's compiles do
not pass through them, so such wrappers do not see kiln's compiles."""


def backend_compile(backend, module, executable_devices, options, host_callbacks=()):
    raise NotImplementedError("jax._src.compiler.backend_compile: kiln compiles through its own pipeline, "
                              "not a PJRT backend")


def backend_compile_and_load(backend, module, executable_devices, options, host_callbacks=()):
    raise NotImplementedError("jax._src.compiler.backend_compile_and_load: kiln compiles through its own "
                              "pipeline, not a PJRT backend")
