"""kiln.ffi: jax.ffi's names. They register and call XLA custom-call targets (C functions built
against XLA's FFI headers); kiln has no XLA, so each raises NotImplementedError. To run host code
from a program use kiln.pure_callback (or kiln.debug.callback); kiln's own C API
(include/kiln.h) builds programs from C."""


from kiln._src.toplevel import unsupported


def _no(name):
    return unsupported(f"jax.ffi.{name}", "XLA FFI custom calls need XLA, which kiln does not use; call host code "
                       "with kiln.pure_callback instead")


ffi_call = _no("ffi_call")
ffi_lowering = _no("ffi_lowering")
build_ffi_lowering_function = _no("build_ffi_lowering_function")
register_ffi_target = _no("register_ffi_target")
register_ffi_target_as_batch_partitionable = _no("register_ffi_target_as_batch_partitionable")
register_ffi_type = _no("register_ffi_type")
register_ffi_type_id = _no("register_ffi_type_id")
pycapsule = _no("pycapsule")
include_dir = _no("include_dir")

__all__ = ["build_ffi_lowering_function", "ffi_call", "ffi_lowering", "include_dir", "pycapsule", "register_ffi_target",
           "register_ffi_target_as_batch_partitionable", "register_ffi_type", "register_ffi_type_id"]
