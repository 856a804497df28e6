"""kiln.export: jax.export's names. JAX serializes a jitted function as StableHLO for XLA to load
elsewhere; kiln compiles through its own IR to native code and PTX and has no StableHLO to write,
so exporting raises NotImplementedError (kiln's compiled programs are cached on disk by
KILN_CACHE_DIR instead)."""

from kiln._src.toplevel import unsupported

maximum_supported_calling_convention_version = 10
minimum_supported_calling_convention_version = 9


def _no(name):
    return unsupported(f"jax.export.{name}", "it serializes StableHLO for XLA, and kiln compiles to native code and "
                       "PTX without XLA (kiln caches compiled programs on disk instead: KILN_CACHE_DIR)")


export = _no("export")
deserialize = _no("deserialize")
symbolic_shape = _no("symbolic_shape")
symbolic_args_specs = _no("symbolic_args_specs")
register_pytree_node_serialization = _no("register_pytree_node_serialization")
register_namedtuple_serialization = _no("register_namedtuple_serialization")


class Exported:
    """jax.export.Exported (kiln makes none: export raises)."""

    def __init__(self, *args, **kwargs):
        _no("Exported")()


class SymbolicScope:
    def __init__(self, *args, **kwargs):
        _no("SymbolicScope")()


class DisabledSafetyCheck:
    """jax.export.DisabledSafetyCheck (nothing to disable: kiln exports nothing)."""

    @classmethod
    def platform(cls):
        return cls()

    @classmethod
    def custom_call(cls, target_name):
        return cls()


def is_symbolic_dim(p):
    """kiln's shapes are always concrete integers."""
    return False


def default_export_platform():
    from kiln._src import api
    return "cuda" if api.default_backend() == "gpu" else "cpu"


__all__ = ["DisabledSafetyCheck", "Exported", "SymbolicScope", "default_export_platform", "deserialize", "export",
           "is_symbolic_dim", "maximum_supported_calling_convention_version",
           "minimum_supported_calling_convention_version", "register_namedtuple_serialization",
           "register_pytree_node_serialization", "symbolic_args_specs", "symbolic_shape"]
