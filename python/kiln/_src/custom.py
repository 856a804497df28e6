"""custom_jvp, custom_vjp and checkpoint.

Evaluating a custom_jvp/custom_vjp function outside differentiation (eagerly, under jit or vmap)
runs the primal function, as JAX does. Under differentiation each becomes one call equation whose
sub-programs (transforms/jvp.c applies them) carry the rules:

- custom_jvp_call(x) holds the function and its JVP rule traced on (primals, tangents). The JVP pass
  replaces the call by the rule's equations, which are ordinary ones: an enclosing grad/jacfwd
  differentiates the rule itself, so grad(grad(f)), jacfwd(jacrev(f)) and hessian work, as in JAX.
- custom_vjp_call passes the forward rule's outputs through; its JVP is custom_vjp_lin, whose
  transpose replays the traced bwd rule. Enclosing differentiations see the fwd and bwd rules as
  ordinary equations (reverse-over-reverse differentiates through bwd, as JAX does).
- checkpoint(x) holds the function; reverse mode recomputes what its derivative needs from its
  inputs (behind optimization_barrier, so CSE cannot undo it) instead of keeping it.

vmap batches each call's sub-programs (transforms/vmap.c).
"""

import functools

import numpy as np

from kiln._src import core, dtypes, thread_state, tracing, tree_util


def _float_leaf(x):
    return isinstance(x, core.Array) and (x.dtype.kind == "f" or x.dtype == dtypes.bfloat16)


def _as_array(a):
    return core.asarray(a) if isinstance(a, (bool, int, float, complex, np.ndarray, np.generic)) else a


def _avals(leaves):
    return [(tuple(x.shape), x.dtype) for x in leaves]


class _Aval:
    __slots__ = ("shape", "dtype", "weak_type", "vma_src")

    def __init__(self, x):
        self.shape, self.dtype, self.weak_type = tuple(x.shape), x.dtype, x.weak_type
        self.vma_src = x  # the value it stands for (shard_map's check_vma typing, spmd.vma_nest)


def _has_value(x):
    return not isinstance(x, core.Tracer) or x._cval is not None


def _trace_sub(fun, in_leaves, concrete=False, consts_first=False, touched=None, carries=None, perturbed_in=None):
    """Traces fun(*flat inputs) -> flat outputs into a sub-program (a Builder to pass as a body
    param); returns (body, consts, output avals). concrete: in_leaves have values (arrays or concrete tracers), which the trace
    computes along, so Python control flow on values works in fun (grad outside jit, as in JAX).
    The body takes (inputs, consts), or (consts, inputs) with consts_first (a scan body).
    touched: a list, for a loop body or cond branch that threads Refs: the outer Refs the trace
    read or wrote are appended to it (the caller then traces again with them threaded, refs.py);
    without it, writing an outer Ref raises.
    carries (a control-flow body under differentiation): pairs (output, input) of a loop's carries,
    () for a cond branch; the body's inputs are then perturbed (custom_vjp's flags, tracing.perturbed)
    as their operands (perturbed_in, else in_leaves' own), and a loop is traced again until its
    carries' flags stop growing, as JAX's fixed point does (only when some custom_vjp asked)."""
    from kiln._src import api
    _, tree = tree_util.tree_flatten((tuple(in_leaves), {}))
    ins = list(in_leaves) if concrete else [_Aval(x) for x in in_leaves]
    threads = {} if touched is None else {"refs_in": ("a loop body or cond branch", True)}
    flags = None  # per input: what it stands for (resolved only if a custom_vjp asks), then bools
    if carries is not None and core.ad_tracing():
        flags = list(perturbed_in) if perturbed_in is not None else [getattr(x, "vma_src", x) for x in in_leaves]
    for _ in range(len(in_leaves) + 1):
        asked = tracing.perturbed_asked[0]
        tracing._next_origins[0] = flags
        try:
            traced = api._trace(fun, None, None, ins, tree, concrete=concrete, **threads)
        finally:
            tracing._next_origins[0] = None
        if flags is None or not carries or tracing.perturbed_asked[0] == asked:
            break
        now = [tracing._flag(f) for f in flags]
        out_flags = tracing.program_perturbed(traced.builder, now, traced.consts)
        grown = list(now)
        for o, i in carries:
            grown[i] = grown[i] or out_flags[o]
        if grown == now:
            break
        flags = grown
    if touched is not None:
        touched.extend(r for r in traced.ref_touched if r not in touched)
    return traced.builder.take_body(len(in_leaves) if consts_first else -1), list(traced.consts), traced.out_avals


class custom_jvp:
    """A function with a custom JVP rule (see jax.custom_jvp).

    Under differentiation a call records the function and its rule as sub-programs (see the
    module's docstring). The rule is traced once per differentiation level still to come: inside
    it, calls of the function itself record the function with the rule again for the enclosing
    levels, and call the plain function at the last one."""

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)  # first: fun's attributes never replace ours
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        self._levels = None  # while tracing the rule: differentiation levels left above it

    def defjvp(self, jvp, symbolic_zeros=False):
        """jvp(primals, tangents) -> (out, tangent_out); with symbolic_zeros, an argument no
        derivative reaches gets a SymbolicZero tangent (as in JAX), else zeros."""
        self.jvp = jvp
        self.symbolic_zeros = bool(symbolic_zeros)
        return jvp

    def defjvps(self, *jvps):
        def rule(primals, tangents):
            from kiln import lax
            out = self.fun(*primals)
            tan = None
            for f, t in zip(jvps, tangents):
                if f is None or t is None:
                    continue
                c = f(t, out, *primals)
                tan = c if tan is None else tree_util.tree_map(lambda u, v: u + v, tan, c)
            return out, tan if tan is not None else tree_util.tree_map(lambda o: lax.full_like(o, 0), out)
        self.jvp = rule

    def __call__(self, *args):
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {self.fun.__name__} using defjvp.")
        levels = self._levels if self._levels is not None else core._ad_depth[0]
        if not core.ad_tracing() or levels <= 0:
            return self.fun(*args)
        from kiln import lax
        name = getattr(self.fun, "__name__", "function")
        nd = set(self.nondiff_argnums)
        static = [a for i, a in enumerate(args) if i in nd]
        diff = tuple(_as_array(a) for i, a in enumerate(args) if i not in nd)
        x_leaves, x_tree = tree_util.tree_flatten(diff)
        x_leaves = [core.asarray(x) for x in x_leaves]
        perturbed = [tracing._is_perturbed(x) for x in x_leaves]
        if not any(perturbed):
            # nothing here carries a derivative (constants, stop_gradient's results): as JAX, the
            # rule is never called (equinox's nondifferentiable raises in its rule)
            return self.fun(*args)
        symbolic = getattr(self, "symbolic_zeros", False)
        n_x = len(x_leaves)

        def full_args(dyn):
            it = iter(dyn)
            return [args[i] if i in nd else next(it) for i in range(len(args))]

        out_info = {}

        def fun_flat(*xs):
            out = self.fun(*full_args(tree_util.tree_unflatten(x_tree, list(xs))))
            leaves, out_info["tree"] = tree_util.tree_flatten(out)
            return [core.asarray(o) for o in leaves]

        def rule_flat(*flat):
            from kiln.custom_derivatives import SymbolicZero
            primals = tree_util.tree_unflatten(x_tree, list(flat[:n_x]))
            t_flat = list(flat[n_x:])
            if symbolic:
                from kiln._src.primitive import aval_of
                t_flat = [t if p else SymbolicZero(aval_of(x).to_tangent_aval())
                          for x, t, p in zip(flat[:n_x], t_flat, perturbed)]
            tangents = tree_util.tree_unflatten(x_tree, t_flat)
            res = self.jvp(*static, primals, tangents) if nd else self.jvp(primals, tangents)
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise TypeError(f"custom_jvp rule of {name} must return a pair (primal_out, tangent_out), "
                                f"got {type(res).__name__}")
            out, tan = res
            o_leaves, o_tree = tree_util.tree_flatten(out)
            if o_tree != out_info["tree"]:
                raise TypeError(f"custom_jvp rule of {name} must produce a primal output with the function's "
                                f"structure {out_info['tree']}, got {o_tree}")
            o_leaves = [core.asarray(o) for o in o_leaves]
            if tan is None:
                t_leaves = [lax.full_like(o, 0) for o in o_leaves]  # (of o's dtype: bool, strict promotion)
            else:
                t_leaves, t_tree = tree_util.tree_flatten(tan, is_leaf=lambda v: isinstance(v, SymbolicZero))
                if t_tree != o_tree:  # a None where the output has an array: a zero tangent (kiln)
                    t_leaves, t_tree = tree_util.tree_flatten(
                        tan, is_leaf=lambda v: v is None or isinstance(v, SymbolicZero))
                if t_tree != o_tree:
                    raise TypeError(f"custom_jvp rule of {name} must produce primal and tangent outputs with equal "
                                    f"container (pytree) structures, got {o_tree} and {t_tree}")
            ts = []
            for o, t in zip(o_leaves, t_leaves):
                t = lax.full_like(o, 0) if t is None or isinstance(t, SymbolicZero) else core.asarray(t)
                if tuple(t.shape) != tuple(o.shape):
                    raise TypeError(f"custom_jvp rule of {name} must produce primal and tangent outputs with equal "
                                    f"shapes, got {tuple(o.shape)} and {tuple(t.shape)}")
                ts.append(t if t.dtype == o.dtype else t.astype(o.dtype))
            return o_leaves + ts

        # Under a concrete trace (grad outside jit) the function and the rule see values, as in JAX;
        # the rule's tangents are given zeros for values.
        concrete = all(_has_value(x) for x in x_leaves) and any(
            isinstance(x, core.Tracer) and x._trace.concrete for x in x_leaves)
        fun_id, fun_consts, out_avals = _trace_sub(fun_flat, x_leaves, concrete)
        zeros = [lax.full_like(x, 0) if concrete else x for x in x_leaves]
        saved = self._levels
        self._levels = levels - 1
        try:
            rule_id, rule_consts, rule_avals = _trace_sub(rule_flat, x_leaves + zeros, concrete)
        finally:
            self._levels = saved
        n_out = len(out_avals)
        for (s1, d1, _), (s2, d2, _) in zip(out_avals, rule_avals[:n_out]):
            if tuple(s1) != tuple(s2) or d1 != d2:
                raise TypeError(f"custom_jvp rule of {name} must produce a primal output of the function's "
                                f"shapes and dtypes: got {d2.name}{list(s2)} where the function gives {d1.name}{list(s1)}")
        ys = core.bind("custom_jvp_call", x_leaves + fun_consts + rule_consts,
                       {"counts": (n_x, len(fun_consts), len(rule_consts)), "fun": fun_id, "jvp": rule_id})
        return tree_util.tree_unflatten(out_info["tree"], list(ys))


class custom_vjp:
    """A function with a custom VJP rule (see jax.custom_vjp).

    Evaluation runs the primal function. Under differentiation the forward rule runs in the
    traced program and a `custom_vjp_call` equation passes its outputs through; its JVP is an
    opaque linear equation whose transpose replays the bwd rule, traced once into a registered
    sub-program of (residuals, output cotangents). So reverse mode (grad, vjp, jacrev) applies the
    rule exactly, even when bwd is nonlinear (gradient clipping); forward mode raises, as in JAX.
    Differentiating again (grad(grad(f)), jacfwd(jacrev(f))) differentiates the fwd and bwd rules'
    equations, as JAX does; one difference: where fwd calls the function itself, kiln's enclosing
    levels differentiate the plain function there, JAX's would apply the custom rule again."""

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)  # first: fun's attributes never replace ours
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = self.bwd = None
        self._in_rule = False

    def defvjp(self, fwd, bwd, symbolic_zeros=False, optimize_remat=False):
        """fwd(*args) -> (out, residuals), bwd(residuals, out_cotangent) -> argument cotangents. With
        symbolic_zeros, fwd sees each differentiable leaf as a CustomVJPPrimal(value, perturbed):
        perturbed when it depends on the inputs being differentiated (a value of a loop body or jit
        inside the differentiated function counts as perturbed); bwd may answer None or a
        SymbolicZero for a zero cotangent; kiln hands bwd materialized zero cotangents."""
        self.fwd, self.bwd = fwd, bwd
        self.symbolic_zeros = bool(symbolic_zeros)

    def __call__(self, *args):
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {self.fun.__name__} using defvjp.")
        if not core.ad_tracing() or self._in_rule:
            return self.fun(*args)
        from kiln._src import api
        nd = set(self.nondiff_argnums)
        static = [a for i, a in enumerate(args) if i in nd]
        diff = tuple(core.asarray(a) if isinstance(a, (int, float, complex, np.ndarray, np.generic)) else a
                     for i, a in enumerate(args) if i not in nd)
        fwd_args = diff
        if getattr(self, "symbolic_zeros", False):
            from kiln.custom_derivatives import CustomVJPPrimal
            fwd_args = tuple(tree_util.tree_map(lambda v: CustomVJPPrimal(v, tracing.perturbed(v)), d)
                             for d in diff)
        self._in_rule = True
        try:
            if nd:  # fwd takes the arguments where the function does (bwd takes the nondiff ones first)
                it = iter(fwd_args)
                out, res = self.fwd(*[args[i] if i in nd else next(it) for i in range(len(args))])
            else:
                out, res = self.fwd(*fwd_args)
        finally:
            self._in_rule = False
        out_leaves, out_tree = tree_util.tree_flatten(out)
        res_leaves, res_tree = tree_util.tree_flatten(res)
        x_leaves, x_tree = tree_util.tree_flatten(diff)
        out_leaves = [core.asarray(o) for o in out_leaves]
        # residuals that are not arrays (Python bools, numbers, NumPy values: equinox hands bwd its
        # `perturbed` flags this way) reach bwd as they are, as JAX's known values do
        all_res = res_leaves
        res_at = [i for i, r in enumerate(all_res) if isinstance(r, core.Array)]
        res_leaves = [all_res[i] for i in res_at]
        x_leaves = [core.asarray(x) for x in x_leaves]
        n_res, n_out = len(res_leaves), len(out_leaves)
        bwd = self.bwd
        name = getattr(self.fun, "__name__", "function")

        def bwd_flat(*flat):
            full = list(all_res)
            for i, v in zip(res_at, flat[:n_res]):
                full[i] = v
            r = tree_util.tree_unflatten(res_tree, full)
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
                from kiln.custom_derivatives import SymbolicZero
                c_leaves = tree_util.tree_leaves(c_, is_leaf=lambda v: isinstance(v, SymbolicZero))
                if len(c_leaves) != len(p_leaves):  # a None where the argument has an array: a zero (kiln)
                    c_leaves = tree_util.tree_leaves(c_, is_leaf=lambda v: v is None or isinstance(v, SymbolicZero))
                c_leaves = [lax.full_like(q, 0) if cl is None or isinstance(cl, SymbolicZero) else cl
                            for cl, q in zip(c_leaves, p_leaves)] if len(c_leaves) == len(p_leaves) else c_leaves
                if len(c_leaves) != len(p_leaves):
                    raise TypeError(f"custom_vjp bwd of {name}: a cotangent's structure does not match its argument")
                leaves += [lax.convert_element_type(core.asarray(cl), pl.dtype) if core.asarray(cl).dtype != pl.dtype
                           else core.asarray(cl) for cl, pl in zip(c_leaves, p_leaves)]
            return leaves

        from kiln import lax
        flat_in = res_leaves + out_leaves
        _, flat_tree = tree_util.tree_flatten((tuple(flat_in), {}))
        self._in_rule = True  # bwd may call the function itself (a fixed point's rule): plainly there
        try:
            traced = api._trace(bwd_flat, None, None, flat_in, flat_tree)
        finally:
            self._in_rule = False
        consts = list(traced.consts)
        bwd_body = traced.builder.take_body()
        ys = core.bind("custom_vjp_call", out_leaves + res_leaves + consts + x_leaves,
                       {"counts": (n_out, n_res, len(consts), len(x_leaves)), "bwd": bwd_body})
        return tree_util.tree_unflatten(out_tree, list(ys))


def _dots_saveable(prim, *_, **__):
    return getattr(prim, "name", prim) == "dot_general"


def _dots_no_batch_saveable(prim, *_, **params):
    return _dots_saveable(prim) and not params.get("dimension_numbers", ((), ((), ())))[1][0]


def _everything_saveable(*_, **__):
    return True


def _nothing_saveable(*_, **__):
    return False


# checkpoint_name's names, numbered for the `name` equations and the checkpoint's `names` param
_NAME_IDS = {}


def _name_id(name):
    if not isinstance(name, str):
        raise TypeError(f"checkpoint_name: the name must be a str, got {type(name).__name__}")
    return _NAME_IDS.setdefault(name, len(_NAME_IDS) + 1)


def checkpoint_name(x, name):
    """jax.ad_checkpoint.checkpoint_name: x itself, named so that a checkpoint policy
    (save_only_these_names, save_any_names_but_these, ...) can keep it from the forward pass."""
    name_id = _name_id(name)
    leaves, tree = tree_util.tree_flatten(x)
    out = [core.bind("name", [core.asarray(v)], {"id": name_id})[0]
           if isinstance(v, core.Tracer) else v for v in leaves]
    return tree_util.tree_unflatten(tree, out)


class _Policy:
    """A checkpoint policy kiln runs in C: `bits` (KL_REMAT_*: 1 dot products, 2 dot products without
    batch dimensions, 4 values named one of `names`, 8 named values not named one of them) and the
    names. Called as JAX's policies are (prim, *avals, **params) it answers for dot_general and
    name (JAX's name primitive)."""

    def __init__(self, bits, names=(), what=""):
        self.bits, self.names, self.what = bits, tuple(names), what

    def __call__(self, prim, *_, **params):
        if (self.bits & 1 and _dots_saveable(prim)) or (self.bits & 2 and _dots_no_batch_saveable(prim, **params)):
            return True
        if getattr(prim, "name", prim) == "name" and "name" in params:
            listed = params["name"] in self.names
            return bool(self.bits & 4) if listed else bool(self.bits & 8)
        return False

    def __repr__(self):
        return f"checkpoint_policies.{self.what}"


def _save_only_these_names(*names):
    return _Policy(4, names, f"save_only_these_names{names}")


def _save_any_names_but_these(*names):
    return _Policy(8, names, f"save_any_names_but_these{names}")


def _save_and_offload_only_these_names(*, names_which_can_be_saved, names_which_can_be_offloaded,
                                       offload_src="device", offload_dst="pinned_host"):
    """Saves both lists on the device: kiln has no host offload (the memory use differs from JAX's,
    never the values)."""
    names = tuple(names_which_can_be_saved) + tuple(names_which_can_be_offloaded)
    return _Policy(4, names, "save_and_offload_only_these_names")


def _offload_dot_with_no_batch_dims(offload_src="device", offload_dst="pinned_host"):
    """dots_with_no_batch_dims_saveable, kept on the device (kiln has no host offload)."""
    return _Policy(2, (), "offload_dot_with_no_batch_dims")


def _policy_bits(policy):
    """(bits, name ids) of a policy kiln runs in C, or None for one it does not know."""
    if policy is None or policy is _nothing_saveable:
        return 0, ()
    if policy is _dots_saveable:
        return 1, ()
    if policy is _dots_no_batch_saveable:
        return 2, ()
    if isinstance(policy, _Policy):
        return policy.bits, tuple(_name_id(n) for n in policy.names)
    return None


def _save_from_both_policies(policy_1, policy_2):
    """Saves what either policy saves."""
    if policy_1 is _everything_saveable or policy_2 is _everything_saveable:
        return _everything_saveable
    parts = []
    for p in (policy_1, policy_2):
        if not isinstance(p, _Policy):
            p = _Policy((_policy_bits(p) or (0, ()))[0])
        parts.append(p)
    (a, b), dots = parts, (parts[0].bits | parts[1].bits) & 3
    only = [set(p.names) if p.bits & 4 else None for p in parts]
    but = [set(p.names) if p.bits & 8 else None for p in parts]
    if but[0] is not None and but[1] is not None:
        bits, names = 8, but[0] & but[1]  # all but what both leave out
    elif but[0] is not None or but[1] is not None:  # all but what one leaves out and the other does not name
        left = but[0] if but[0] is not None else but[1]
        kept = (only[1] if but[0] is not None else only[0]) or set()
        bits, names = 8, left - kept
    elif only[0] is not None or only[1] is not None:
        bits, names = 4, (only[0] or set()) | (only[1] or set())
    else:
        bits, names = 0, set()
    return _Policy(dots | bits, tuple(sorted(names)), f"save_from_both_policies({a!r}, {b!r})")


class checkpoint_policies:
    """JAX's rematerialization policies: which intermediate values of a checkpointed function the
    backward pass keeps instead of recomputing. The offload policies keep their values on the
    device (kiln has no host offload)."""
    everything_saveable = staticmethod(_everything_saveable)
    nothing_saveable = staticmethod(_nothing_saveable)
    dots_saveable = staticmethod(_dots_saveable)
    checkpoint_dots = dots_saveable
    dots_with_no_batch_dims_saveable = staticmethod(_dots_no_batch_saveable)
    checkpoint_dots_with_no_batch_dims = dots_with_no_batch_dims_saveable
    save_only_these_names = staticmethod(_save_only_these_names)
    save_any_names_but_these = staticmethod(_save_any_names_but_these)
    save_anything_except_these_names = staticmethod(_save_any_names_but_these)
    save_and_offload_only_these_names = staticmethod(_save_and_offload_only_these_names)
    offload_dot_with_no_batch_dims = staticmethod(_offload_dot_with_no_batch_dims)
    save_from_both_policies = staticmethod(_save_from_both_policies)


def checkpoint(fun=None, *, prevent_cse=True, policy=None, static_argnums=()):
    """jax.checkpoint / jax.remat: the same values and derivatives as `fun`, but reverse mode
    recomputes the intermediate values of `fun` that the backward pass needs from its inputs
    instead of keeping them from the forward pass (policy: which ones it may keep:
    checkpoint_policies.nothing_saveable (the default), dots_saveable, everything_saveable).
    prevent_cse=True puts the recomputation behind optimization_barrier, so that common-
    subexpression elimination does not merge it back into the forward pass. static_argnums:
    arguments passed to `fun` as Python values (not traced). The policies of checkpoint_policies run
    as JAX's (the names ones with checkpoint_name); another callable is taken as nothing_saveable (a
    policy changes memory use, never values)."""
    if fun is None:
        return lambda f: checkpoint(f, prevent_cse=prevent_cse, policy=policy, static_argnums=static_argnums)
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    static_argnums = tuple(static_argnums)
    bits = _policy_bits(policy)
    code, names = (-1, ()) if policy is _everything_saveable else bits if bits is not None else (0, ())

    @functools.wraps(fun)
    @thread_state.control_flow_body  # (JAX traces the function: its body is a trace of its own)
    def wrapped(*args, **kwargs):
        if not core.ad_tracing() or code < 0:  # nothing to recompute outside differentiation
            return fun(*args, **kwargs)
        nargs = len(args)
        statics = {i % nargs for i in static_argnums if -nargs <= i < nargs}
        dyn = (tuple(_as_array(a) for i, a in enumerate(args) if i not in statics),
               tree_util.tree_map(_as_array, kwargs))
        leaves, tree = tree_util.tree_flatten(dyn)
        leaves = [core.asarray(x) for x in leaves]
        if not leaves:
            return fun(*args, **kwargs)
        out_tree = {}

        def body(*xs):
            d_args, d_kwargs = tree_util.tree_unflatten(tree, list(xs))
            it = iter(d_args)
            full = [args[i] if i in statics else next(it) for i in range(nargs)]
            out = fun(*full, **d_kwargs)
            out_leaves, out_tree["tree"] = tree_util.tree_flatten(out)
            return [core.asarray(o) for o in out_leaves]

        body_id, consts, _ = _trace_sub(body, leaves)
        ys = core.bind("checkpoint", leaves + consts,
                       {"body": body_id, "policy": code, "names": names, "prevent_cse": int(bool(prevent_cse))})
        return tree_util.tree_unflatten(out_tree["tree"], list(ys))
    return wrapped


remat = checkpoint
