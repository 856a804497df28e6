"""Import hook for the ecosystem harness's kiln side: `import jax` answers kiln, unmodified.

This folder goes on PYTHONPATH only for the kiln run, so Python imports this file at start-up.
`jax` becomes the `kiln` module and every `jax.X.Y` the module `kiln.X.Y`; `jaxlib(.X)` becomes
`kiln.jaxlib(.X)`. A name kiln lacks raises ModuleNotFoundError naming the JAX module, so the
harness's causes table shows it. Nothing is patched: real JAX and jaxlib can never load here.
"""
import importlib
import importlib.abc
import importlib.machinery
import sys

# JAX's top-level module names and the kiln module each answers with
_ROOTS = {"jax": "kiln", "jaxlib": "kiln.jaxlib"}


def _kiln_name(fullname):
    """The kiln module that answers `fullname`, or None when it is no JAX module."""
    root, _, rest = fullname.partition(".")
    target = _ROOTS.get(root)
    if target is None:
        return None
    return target + "." + rest if rest else target


class _KilnAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `jax*` names first and loads each as the kiln module of the same path.

    The loader imports the kiln module and puts it in sys.modules under the JAX name; the import
    system hands back what sys.modules holds after exec_module, so the kiln module keeps its own
    __name__ and __spec__ (the throwaway module the system creates gets the JAX spec).
    """

    def find_spec(self, fullname, path=None, target=None):
        if _kiln_name(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        fullname = module.__spec__.name
        target = _kiln_name(fullname)
        try:
            kiln_module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            if e.name is not None and (e.name == target or target.startswith(e.name + ".")):
                raise ModuleNotFoundError(
                    f"No module named '{fullname}' (kiln has no '{target}')", name=fullname
                ) from None
            raise
        sys.modules[fullname] = kiln_module


def _install():
    if not any(isinstance(f, _KilnAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, _KilnAlias())
    # a JAX module imported before this hook (none should be) would bypass it
    for name in [n for n in sys.modules if _kiln_name(n) is not None]:
        del sys.modules[name]


_install()
