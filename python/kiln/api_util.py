"""jax.api_util: helpers libraries use to wrap functions (numpyro's provenance tracing)."""
from kiln._src.tree_util import tree_flatten, tree_unflatten
from kiln._src.util import safe_map, safe_zip, unzip2  # noqa: F401 (jax.api_util re-exports them)
from kiln.extend.core import DebugInfo
from kiln.extend.linear_util import Store, WrappedFun


def debug_info(traced_for, fun, args, kwargs, *, static_argnums=(), static_argnames=(), result_paths_thunk=None,
               sourceinfo=None, signature=None):
    del args, kwargs, static_argnums, static_argnames, result_paths_thunk, sourceinfo, signature
    return DebugInfo(traced_for, getattr(fun, "__name__", repr(fun)))


def flatten_fun(f, in_tree):
    """f (a WrappedFun of (args, kwargs)) as a function of the flat leaves of in_tree; the second
    result gives the output's tree once it has run."""
    store = Store()

    def flat(*leaves):
        args, kwargs = tree_unflatten(in_tree, list(leaves))
        out = f.call_wrapped(*args, **kwargs)
        out_leaves, out_tree = tree_flatten(out)
        store.store(out_tree)
        return out_leaves
    return WrappedFun(flat, debug_info=getattr(f, "debug_info", None)), (lambda: store.val)


def flatten_fun_nokwargs(f, in_tree):
    store = Store()

    def flat(*leaves):
        out = f.call_wrapped(*tree_unflatten(in_tree, list(leaves)))
        out_leaves, out_tree = tree_flatten(out)
        store.store(out_tree)
        return out_leaves
    return WrappedFun(flat, debug_info=getattr(f, "debug_info", None)), (lambda: store.val)


def shaped_abstractify(x):
    from kiln._src.primitive import aval_of
    return aval_of(x)
