"""custom_jvp, custom_vjp and checkpoint.

Evaluating a custom_jvp/custom_vjp function (eagerly, under jit or vmap) runs the primal function,
as JAX does. Under first-order differentiation a custom_jvp rule is expressed with ordinary
primitives (stop_gradient and the rule's tangent output, which is linear in the tangents), and a
custom_vjp rule becomes an equation whose transpose replays the traced bwd rule (see each class),
so kiln's program transforms produce exactly the rules' derivatives. Second-order
differentiation through either raises NotImplementedError.

checkpoint/remat returns the same values and gradients as the function itself; kiln's reverse mode
does not yet trade memory for recomputation, so the policy is accepted and has no effect yet.
"""

import functools

import numpy as np

from kiln._src import core, dtypes, tree_util


def _float_leaf(x):
    return isinstance(x, core.Array) and (x.dtype.kind == "f" or x.dtype == dtypes.bfloat16)


def _check_first_order(kind, fun):
    if core._ad_depth[0] > 1:
        name = getattr(fun, "__name__", "function")
        raise NotImplementedError(
            f"higher-order differentiation through {kind} function {name!r} is not supported yet by "
            "kiln (first-order grad/jvp/vjp/jacrev/jacfwd are)")


def _split(args):
    """(stop_gradient(args), args - stop_gradient(args)) for float leaves: the second is zero
    in value and carries the derivative of args."""
    from kiln import lax
    arrs = tree_util.tree_map(lambda a: core.asarray(a) if isinstance(a, (int, float, np.ndarray, np.generic)) else a, args)
    primal = tree_util.tree_map(lambda a: lax.stop_gradient(a) if _float_leaf(a) else a, arrs)
    delta = tree_util.tree_map(lambda a, p: lax.sub(a, p) if _float_leaf(a) else None, arrs, primal)
    return primal, delta


class custom_jvp:
    """A function with a custom JVP rule (see jax.custom_jvp).

    Under differentiation the result is built as stop_gradient(primal_out) + tangent_out, where
    the rule is called with primals stop_gradient(x) and tangents x - stop_gradient(x): the value
    is the primal output (the tangents are zero), and since the rule's tangent output is linear in
    the tangents, its derivative is exactly the rule."""

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        self._in_rule = False
        functools.update_wrapper(self, fun)

    def defjvp(self, jvp, symbolic_zeros=False):
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps):
        def rule(primals, tangents):
            out = self.fun(*primals)
            tan = None
            for f, t in zip(jvps, tangents):
                if f is None or t is None:
                    continue
                c = f(t, out, *primals)
                tan = c if tan is None else tree_util.tree_map(lambda u, v: u + v, tan, c)
            return out, tan if tan is not None else tree_util.tree_map(lambda o: o * 0, out)
        self.jvp = rule

    def __call__(self, *args):
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {self.fun.__name__} using defjvp.")
        if not core.ad_tracing() or self._in_rule:  # (rules usually call the function itself)
            return self.fun(*args)
        _check_first_order("custom_jvp", self.fun)
        from kiln import lax
        nd = set(self.nondiff_argnums)
        diff = [a for i, a in enumerate(args) if i not in nd]
        primal, delta = _split(tuple(diff))
        delta = tuple(tree_util.tree_map(lambda d, p: d if d is not None else p * 0, delta, primal,
                                         is_leaf=lambda v: v is None))
        static = [a for i, a in enumerate(args) if i in nd]
        self._in_rule = True
        try:
            out, tan = self.jvp(*static, primal, delta) if nd else self.jvp(primal, delta)
        finally:
            self._in_rule = False
        return tree_util.tree_map(lambda o, t: lax.add(lax.stop_gradient(o), t) if _float_leaf(core.asarray(o)) else o,
                                  out, tan)


class custom_vjp:
    """A function with a custom VJP rule (see jax.custom_vjp).

    Evaluation runs the primal function. Under differentiation the forward rule runs in the
    traced program and a `custom_vjp_call` equation passes its outputs through; its JVP is an
    opaque linear equation whose transpose replays the bwd rule, traced once into a registered
    sub-program of (residuals, output cotangents). So reverse mode (grad, vjp, jacrev) applies the
    rule exactly, even when bwd is nonlinear (gradient clipping); forward mode raises, as in JAX."""

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = self.bwd = None
        self._in_rule = False
        functools.update_wrapper(self, fun)

    def defvjp(self, fwd, bwd, symbolic_zeros=False, optimize_remat=False):
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {self.fun.__name__} using defvjp.")
        if not core.ad_tracing() or self._in_rule:
            return self.fun(*args)
        _check_first_order("custom_vjp", self.fun)
        from kiln._src import api
        nd = set(self.nondiff_argnums)
        static = [a for i, a in enumerate(args) if i in nd]
        diff = tuple(core.asarray(a) if isinstance(a, (int, float, np.ndarray, np.generic)) else a
                     for i, a in enumerate(args) if i not in nd)
        self._in_rule = True
        try:
            out, res = self.fwd(*static, *diff) if nd else self.fwd(*diff)
        finally:
            self._in_rule = False
        out_leaves, out_tree = tree_util.tree_flatten(out)
        res_leaves, res_tree = tree_util.tree_flatten(res)
        x_leaves, x_tree = tree_util.tree_flatten(diff)
        out_leaves = [core.asarray(o) for o in out_leaves]
        res_leaves = [core.asarray(r) for r in res_leaves]
        x_leaves = [core.asarray(x) for x in x_leaves]
        n_res, n_out = len(res_leaves), len(out_leaves)
        bwd = self.bwd
        name = getattr(self.fun, "__name__", "function")

        def bwd_flat(*flat):
            r = tree_util.tree_unflatten(res_tree, list(flat[:n_res]))
            ct = tree_util.tree_unflatten(out_tree, list(flat[n_res:]))
            cts = bwd(*static, r, ct) if nd else bwd(r, ct)
            if not isinstance(cts, tuple) or len(cts) != len(diff):
                raise TypeError(f"custom_vjp bwd of {name} must return a tuple with one cotangent per "
                                f"differentiable argument ({len(diff)}), got {type(cts).__name__}")
            leaves = []
            for c_, p_ in zip(cts, diff):
                p_leaves = tree_util.tree_leaves(p_)
                if c_ is None:
                    leaves += [lax.full_like(q, 0) for q in p_leaves]
                    continue
                c_leaves = tree_util.tree_leaves(c_)
                if len(c_leaves) != len(p_leaves):
                    raise TypeError(f"custom_vjp bwd of {name}: a cotangent's structure does not match its argument")
                leaves += [lax.convert_element_type(core.asarray(cl), pl.dtype) if core.asarray(cl).dtype != pl.dtype
                           else core.asarray(cl) for cl, pl in zip(c_leaves, p_leaves)]
            return leaves

        from kiln import lax
        flat_in = res_leaves + out_leaves
        _, flat_tree = tree_util.tree_flatten((tuple(flat_in), {}))
        traced = api._trace(bwd_flat, None, None, flat_in, flat_tree)
        consts = list(traced.consts)
        bwd_id = traced.builder.register_subprogram()
        ys = core.bind("custom_vjp_call", out_leaves + res_leaves + consts + x_leaves,
                       {"counts": (n_out, n_res, len(consts), len(x_leaves)), "bwd": bwd_id})
        return tree_util.tree_unflatten(out_tree, list(ys))


class checkpoint_policies:
    """Names of JAX's rematerialization policies (accepted; kiln does not rematerialize yet)."""

    @staticmethod
    def nothing_saveable(*_, **__):
        return False

    @staticmethod
    def everything_saveable(*_, **__):
        return True

    dots_saveable = everything_saveable
    dots_with_no_batch_dims_saveable = everything_saveable


def checkpoint(fun=None, *, prevent_cse=True, policy=None, static_argnums=()):
    """Same values and gradients as `fun` (rematerialization itself is not implemented yet)."""
    if fun is None:
        return lambda f: checkpoint(f, prevent_cse=prevent_cse, policy=policy, static_argnums=static_argnums)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        return fun(*args, **kwargs)
    return wrapped


remat = checkpoint
