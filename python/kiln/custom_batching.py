"""kiln.custom_batching: jax.custom_batching. custom_vmap: a function whose vmap is the user's
rule; sequential_vmap: a function whose vmap runs it once per example."""
import functools

from kiln._src import core, tree_util


class custom_vmap:
    """A function with a user-defined batching rule (jax.custom_batching.custom_vmap).

    rule(axis_size, in_batched, *args) -> (out, out_batched): args hold the batch at axis 0 where
    in_batched (one tree of bools per positional argument) says so; out_batched is a tree of bools
    with out's structure. Outside vmap the function runs as it is; jit and grad see the function
    (grad differentiates it, the rule is for vmap only)."""

    def __init__(self, fun):
        self.fun = fun
        self.vmap_rule = None
        functools.update_wrapper(self, fun)

    def def_vmap(self, vmap_rule):
        self.vmap_rule = vmap_rule
        return vmap_rule

    def __call__(self, *args, **kwargs):
        from kiln._src import batching, primitive
        name = getattr(self.fun, "__name__", repr(self.fun))
        if self.vmap_rule is None:
            raise AttributeError(f"No batching rule defined for custom_vmap function {name} using def_vmap.")
        if kwargs:
            import inspect
            bound = inspect.signature(self.fun).bind(*args, **kwargs)
            bound.apply_defaults()
            args = bound.args
        if not batching.vmap_depth[0]:
            return self.fun(*args)
        leaves, in_tree = tree_util.tree_flatten(args)
        out_tree = {}

        def flat(*xs):
            out = self.fun(*tree_util.tree_unflatten(in_tree, list(xs)))
            out_leaves, out_tree["tree"] = tree_util.tree_flatten(out)
            return out_leaves

        def run(avals, batched, size, out_avals, nargs, what):
            def f(*xs):
                in_batched = tree_util.tree_unflatten(in_tree, batched[:nargs])
                out, out_batched = self.vmap_rule(size, list(in_batched),
                                                  *tree_util.tree_unflatten(in_tree, list(xs[:nargs])))
                out_leaves, tree = tree_util.tree_flatten(out)
                if tree != out_tree["tree"]:
                    raise ValueError(f"vmap of {what}: the rule's output structure {tree} differs from the "
                                     f"function's {out_tree['tree']}")
                try:
                    flags = tree.flatten_up_to(out_batched)
                except (ValueError, TypeError):
                    raise ValueError(f"vmap of {what}: the rule's out_batched {out_batched!r} does not match its "
                                     f"output structure {tree}") from None
                return [core.asarray(o) for o in out_leaves], [bool(b) for b in flags]
            return primitive._trace_rule(f, avals, out_avals, size, what)

        outs = primitive._bind_vmap_call(leaves, flat, run, f"the custom_vmap function {name}")
        return tree_util.tree_unflatten(out_tree["tree"], outs)


def sequential_vmap(f):
    """f whose vmap runs it once per example and stacks the results (a loop over the batch)."""
    f = custom_vmap(f)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        from kiln import lax
        from kiln import numpy as jnp
        del axis_size
        b_leaves = tree_util.tree_leaves(in_batched)
        leaves, tree = tree_util.tree_flatten(args)
        batched_at = [i for i, b in enumerate(b_leaves) if b]

        def one(xs):
            full = list(leaves)
            for i, x in zip(batched_at, xs):
                full[i] = x
            return f.fun(*tree_util.tree_unflatten(tree, full))
        out = lax.map(one, [leaves[i] for i in batched_at])
        del jnp
        return out, tree_util.tree_map(lambda _: True, out)
    return f
