"""Automatic differentiation: grad, value_and_grad, jvp, vjp, linearize, jacfwd, jacrev,
hessian. The function is traced into a Program, the C passes (transforms/jvp.c,
transforms/transpose.c) build its JVP or VJP program, and that program is either compiled and
run (concrete arguments; executables cached by the program's structural hash) or, when called under another trace (jit, an
outer grad), replayed equation by equation into that trace, so transformations compose.
"""

import numpy as np

from kiln._src import core, dtypes, tracing, tree_util
from kiln._src.core import Array, Tracer
from kiln._src import api, jaxpr


def _is_float(dt):
    """Carries a tangent: real floating or complex."""
    return dt.kind in "fc" or dt == dtypes.bfloat16


def _is_real_float(dt):
    return dt.kind == "f" or dt == dtypes.bfloat16


def _check_holomorphic_inputs(name, arrs):
    for x in arrs:
        if x.dtype.kind != "c":
            raise TypeError(f"{name} with holomorphic=True requires inputs with complex dtype, but got "
                            f"{x.dtype.name}")


def literal(params):
    """The value of a `literal` equation (its params as Builder.equations() gives them)."""
    dt = core._np_dtype(params["dtype"])
    return core.scalar_constant(jaxpr.literal_value(params, dt), dt, bool(params["weak_type"]))


def _inline(builder, inputs, after=None):
    """Replays builder's equations on `inputs` (arrays or tracers) through core.bind; returns
    the output values. after(prim, results), if given, sees each equation's results."""
    env = dict(zip(builder.inputs(), inputs))
    for prim, ins, outs, params in builder.equations():
        if prim == "literal":
            res = (literal(params),)
        else:
            res = core.bind(prim, [env[i] for i in ins], params)
            if after is not None:
                after(prim, res)
        for o, r in zip(outs, res):
            env[o] = r
    return [env[o] for o in builder.outputs()]


# Compiled transformed programs, shared by every grad/jvp/vjp call: keyed by the program's
# structural hash (which covers its avals, literals and equations), so a retrace that gives
# the same program reuses the executable and a changed program never hits a stale one.
_compiled = {}
_COMPILED_MAX = 256


def _run(builder, inputs, cache=None, key=None, checked=True):
    """Runs the transformed program on `inputs`: inlined into the enclosing trace when any
    input is a tracer, else compiled once per distinct program and launched. (cache and key
    are accepted for older callers and unused: the structural hash is the key.) checked=False:
    a run for the primal results alone, on placeholder zero (co)tangents that jax_debug_nans
    must not look at (0 * inf)."""
    if any(isinstance(x, Tracer) for x in inputs):
        return _inline(builder, inputs)
    if checked and (api.config.jax_debug_nans or api.config.jax_debug_infs):
        # checked as JAX checks these passes outside jit: one primitive at a time, the first that makes
        # a NaN (inf) raising FloatingPointError (eager vmap's batch and grad's backward pass too)
        return _inline(builder, inputs)
    key = (builder.hash(), builder.counts())
    entry = _compiled.get(key)
    if entry is None:
        if len(_compiled) >= _COMPILED_MAX:
            _compiled.pop(next(iter(_compiled), None), None)  # (another thread may evict it first)
        entry = (builder.compile(-1, (), "transformed"), [builder.aval(o) for o in builder.outputs()])
        _compiled[key] = entry
    exe, out_avals = entry
    bufs = exe(*[x._buf for x in inputs])
    return [Array(b, tuple(s), core._np_dtype(d), w) for b, (_, s, d, w) in zip(bufs, out_avals)]


def _leaves_as_arrays(leaves, what):
    return [x if isinstance(x, Array) else api._leaf_to_array(x, what) for x in leaves]


def _trace_flat(fun, args, kwargs):
    leaves, tree = tree_util.tree_flatten((args, kwargs))
    arrs = _leaves_as_arrays(leaves, "argument")
    from kiln._src import spmd
    vmas = spmd.vma_inputs(arrs)  # inside a check_vma=True shard_map body: the inputs' mesh-axis types
    core._ad_depth[0] += 1  # lets custom_jvp/custom_vjp refuse to be differentiated silently
    try:
        # Outside jit (every input has a value) the trace is concrete: Python control flow on
        # values, float(x) and printing work inside the function, as in JAX.
        # Inside an abstract trace (jit, eval_shape) it is abstract too, whatever the inputs hold:
        # a debug print in a linearize under eval_shape must not run.
        outer = core.current_trace()
        concrete = (outer is None or outer.concrete) and \
            all(not isinstance(a, Tracer) or a._cval is not None for a in arrs)
        tracing._next_is_ad[0] = len(arrs)  # (custom_vjp's perturbed flags: these inputs are)
        try:
            traced = api._trace(fun, None, None, arrs, tree, concrete=concrete)  # typed too (spmd.vma_nest)
        finally:
            tracing._next_is_ad[0] = 0
        if vmas is not None:
            traced = spmd.insert_pvary(traced, arrs, vmas)
    finally:
        core._ad_depth[0] -= 1
    return arrs, tree, traced


def _argnums_tuple(argnums, nargs, name):
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    for a in nums:
        if not -nargs <= a < nargs:
            raise ValueError(f"{name}: argnums {argnums} out of range for a function called with {nargs} "
                             "positional arguments")
    return single, tuple(a % nargs for a in nums)


def _check_inputs(name, arrs, mask, allow_int, tree=None):
    for i, (x, m) in enumerate(zip(arrs, mask)):
        if m and not _is_float(x.dtype) and not allow_int:
            key = tree is not None and tree_util._boundary_kinds and tree_util.boundary_leaves(tree)[i]
            raise TypeError(f"{name} requires real- or complex-valued inputs (input dtype that is a "
                            f"sub-dtype of np.inexact), but got {'key<fry>' if key else x.dtype.name}. If you "
                            "want to use integer-valued inputs, use allow_int=True (their gradients are zero).")


def value_and_grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False, reduce_axes=()):
    """Returns f(x) and its gradient with respect to argument(s) `argnums`."""
    name = "grad"

    def wrapped(*args, **kwargs):
        single, nums = _argnums_tuple(argnums, len(args), name)
        # as JAX: only the differentiated arguments are traced; the others (and kwargs) reach fun
        # as they are, so a Python int stays one (range(n), shapes) and arrays become constants
        dyn = tuple(args[i] for i in nums)
        f, restore = _aux_apart(fun, name) if has_aux else (fun, None)

        def fun_d(*dargs):
            full = list(args)
            for i, a in zip(nums, dargs):
                full[i] = a
            return f(*full, **kwargs)

        arrs, tree, traced = _trace_flat(fun_d, dyn, {})
        out_avals = traced.out_avals
        if has_aux:
            if not (isinstance(traced.out_tree, tree_util.PyTreeDef) and traced.out_tree.num_leaves >= 1):
                raise TypeError("value_and_grad(has_aux=True): the function must return a pair (output, aux)")
        n_main = 1
        main_shape, main_dtype, _ = out_avals[0] if out_avals else ((None,), None, None)
        if has_aux:
            try:
                main_tree, aux_tree = _split_pair(traced.out_tree)
            except ValueError as e:
                raise TypeError(f"{name}(has_aux=True): {e}") from None
            if main_tree.num_leaves != 1:
                raise TypeError(f"{name} requires a scalar output, got a pytree with {main_tree.num_leaves} leaves")
        elif len(out_avals) != 1:
            raise TypeError(f"{name} requires a scalar array output, got a pytree with {len(out_avals)} leaves; "
                            "use jacrev/jacobian for non-scalar outputs or has_aux=True for extra results")
        if main_shape != ():
            raise TypeError(f"{name} requires real-valued scalar outputs (shape ()), got shape {main_shape}; "
                            "reduce the output (e.g. .sum()) or use jacrev/vjp")
        if holomorphic:
            if main_dtype.kind != "c":
                raise TypeError(f"{name} with holomorphic=True requires outputs with complex dtype, but got "
                                f"{main_dtype.name}")
        elif main_dtype.kind == "c":
            raise TypeError(f"{name} requires real-valued outputs (output dtype that is a sub-dtype of "
                            f"np.floating), but got {main_dtype.name}. For holomorphic differentiation, pass "
                            "holomorphic=True. For differentiation of non-holomorphic functions involving "
                            "complex outputs, use kiln.vjp directly.")
        elif not _is_float(main_dtype):
            raise TypeError(f"{name} requires a real-valued (float) output, got {main_dtype.name}")
        mask = [True] * len(arrs)
        if holomorphic:
            _check_holomorphic_inputs(name, arrs)
        _check_inputs(name, arrs, mask, allow_int, tree)
        wants = mask + [False] * len(traced.consts)
        vb = traced.builder.vjp(wants)
        vb.simplify([(len(arrs) + len(traced.consts), 1.0)])  # the output cotangent is 1
        cts = [core.scalar_constant(1.0, main_dtype, False)]
        for shape, dt, weak in out_avals[n_main:]:
            cts.append(_zeros(shape, dt))
        outs = _run(vb, arrs + list(traced.consts) + cts)
        nout = len(out_avals)
        primal = tree_util.tree_unflatten(traced.out_tree, outs[:nout])
        grads = outs[nout:]
        # int inputs with allow_int get zero gradients of their own dtype (JAX uses float0)
        it = iter(grads)
        per_arg = []
        for i in nums:
            structure = tree_util.tree_structure(args[i])
            arg_grads = [next(it) for _ in range(structure.num_leaves)]
            if tree_util._boundary_kinds:  # a typed key's gradient is float0 (as JAX), not zero key data
                from kiln._src.toplevel import float0
                arg_grads = [np.zeros(x.shape, float0) if key else x
                             for x, key in zip(arg_grads, tree_util.boundary_leaves(structure))]
            per_arg.append(tree_util.tree_unflatten(structure, arg_grads))
        g = per_arg[0] if single else tuple(per_arg)
        if has_aux:
            value, aux = primal
            return (value, restore(aux)), g
        return primal, g

    return _wraps(wrapped, fun)


def _aux_apart(fun, name):
    """fun returning (out, aux) as a function returning (out, the traced leaves of aux), and
    restore(those leaves' values) -> aux: as JAX, aux's other leaves (strings, objects, NumPy
    arrays, Python numbers, concrete arrays) come back as they were, never traced."""
    box = {}

    def apart(*args, **kwargs):
        res = fun(*args, **kwargs)
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise TypeError(f"{name}(has_aux=True): the function must return a pair (output, aux), got "
                            f"{type(res).__name__}")
        out, aux = res
        leaves, tree = tree_util.tree_flatten(aux)
        traced = [isinstance(x, core.Tracer) for x in leaves]
        box["tree"], box["leaves"], box["traced"] = tree, [None if t else x for x, t in zip(leaves, traced)], traced
        return out, [x for x, t in zip(leaves, traced) if t]

    def restore(values):
        it = iter(values)
        return tree_util.tree_unflatten(box["tree"], [next(it) if t else x for x, t in zip(box["leaves"], box["traced"])])
    return apart, restore


def _wraps(wrapper, fun):
    """wrapper dressed as fun, as JAX's transformations do (api_util.wraps): fun's name, doc,
    module and attributes (an equinox Module's fields: vmap(bn).batch_state_index), and
    __wrapped__ = fun (equinox looks through it)."""
    try:
        wrapper.__dict__.update(getattr(fun, "__dict__", {}))
    except TypeError:
        pass
    for name in ("__module__", "__qualname__", "__doc__"):
        try:
            setattr(wrapper, name, getattr(fun, name))
        except (AttributeError, TypeError):
            pass
    wrapper.__name__ = getattr(fun, "__name__", "fun") if isinstance(getattr(fun, "__name__", None), str) else "fun"
    wrapper.__wrapped__ = fun
    return wrapper


def _split_pair(treedef):
    children = treedef.children()
    if len(children) != 2:
        raise ValueError("the function must return a pair (output, aux)")
    return children[0], children[1]


def _zeros(shape, dt):
    from kiln import lax
    return lax.full(shape, 0, dt)


def grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False, reduce_axes=()):
    """The gradient of scalar-valued `fun` with respect to argument(s) `argnums`."""
    vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int, reduce_axes)

    def wrapped(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        if has_aux:
            return g, value[1]
        return g

    return _wraps(wrapped, fun)


def _jvp_program(fun, primals, name="jvp"):
    """Traces fun at primals once and builds its JVP program; returns run(tangents) ->
    (primal outputs, output tangents) as pytrees, which may be called many times."""
    if not isinstance(primals, (tuple, list)):
        raise TypeError(f"{name}: primals must be a tuple or list of arguments, got {type(primals).__name__}")
    arrs, tree, traced = _trace_flat(fun, tuple(primals), {})
    has_t = [_is_float(a.dtype) for a in arrs] + [False] * len(traced.consts)
    jb = traced.builder.jvp(has_t)
    jb.simplify()
    n = len(traced.out_avals)

    quiet = {}

    def run(tangents, checked=True, again=False):
        """again: the primal values were computed before (linearize's f_jvp): debug prints do not run again."""
        from kiln import lax
        if not isinstance(tangents, (tuple, list)):
            raise TypeError(f"{name}: tangents must be a tuple or list of arguments, got {type(tangents).__name__}")
        if len(primals) != len(tangents):
            raise ValueError(f"{name}: got {len(primals)} primals and {len(tangents)} tangents; they must match")
        t_leaves, t_tree = tree_util.tree_flatten((tuple(tangents), {}))
        if t_tree != tree and tree_util._boundary_kinds:  # a key's float0 tangent (as JAX) stands for its data's
            from kiln import random
            t_leaves, t_tree = tree_util.tree_flatten((random._key_tangents(primals, tangents), {}))
        if t_tree != tree:
            raise ValueError(f"{name}: primal and tangent arguments have different structures: {tree} and {t_tree}")
        t_arrs = _leaves_as_arrays(t_leaves, "tangent")
        for p, t in zip(arrs, t_arrs):
            if p.shape != t.shape:
                raise ValueError(f"{name}: tangent shape {t.shape} does not match primal shape {p.shape}")
        t_in = [lax.convert_element_type(t, p.dtype) if t.dtype != p.dtype else t
                for p, t in zip(arrs, t_arrs) if _is_float(p.dtype)]
        prog = jb
        if again:
            prog = quiet.get("jb") or quiet.setdefault("jb", jb.without_effects())
        outs = _run(prog, arrs + list(traced.consts) + t_in, checked=checked)
        return (tree_util.tree_unflatten(traced.out_tree, outs[:n]),
                tree_util.tree_unflatten(traced.out_tree, outs[n:]))

    def primal():
        return tree_util.tree_unflatten(traced.out_tree, _run(traced.builder, arrs + list(traced.consts), checked=False))
    run.primal = primal
    run.forward_only = _holds(jb, "custom_vjp_lin")
    return run


def _holds(builder, prim):
    """Whether builder's program, or a body in it, has an equation of primitive `prim`."""
    for p, _, _, params in builder.equations():
        if p == prim:
            return True
        for v in params.values():
            if type(v).__name__ == "Builder" and _holds(v, prim):
                return True
    return False


def jvp(fun, primals, tangents, has_aux=False):
    """(fun(*primals), the directional derivative along `tangents`)."""
    if not isinstance(tangents, (tuple, list)):
        raise TypeError(f"jvp: tangents must be a tuple or list of arguments, got {type(tangents).__name__}")
    f, restore = _aux_apart(fun, "jvp") if has_aux else (fun, None)
    primal_out, tangent_out = _jvp_program(f, primals)(tangents)
    if has_aux:
        return primal_out[0], tangent_out[0], restore(primal_out[1])
    return primal_out, tangent_out


def linearize(fun, *primals, has_aux=False):
    """(fun(*primals), f_jvp) where f_jvp(*tangents) evaluates the JVP at `primals` (the
    function is traced and transformed once); with has_aux, fun returns (out, aux) and
    linearize (out, f_jvp, aux)."""
    f, restore = _aux_apart(fun, "linearize") if has_aux else (fun, None)
    run = _jvp_program(f, primals, "linearize")
    if run.forward_only:  # a custom_vjp inside: its JVP fails when run (as JAX's), so the values come
        out = run.primal()  # from the function's own program; f_jvp raises when called
    else:
        out, _ = run(tuple(tree_util.tree_map(lambda x: core.asarray(x) * 0, p) for p in primals), checked=False)
    if not has_aux:
        return out, lambda *tangents: run(tangents, again=True)[1]
    return out[0], lambda *tangents: run(tangents, again=True)[1][0], restore(out[1])


def vjp(fun, *primals, has_aux=False):
    """(fun(*primals), f_vjp) where f_vjp(cotangent) gives the cotangents of the primals."""
    fun, restore = _aux_apart(fun, "vjp") if has_aux else (fun, None)
    arrs, tree, traced = _trace_flat(fun, primals, {})
    n = len(traced.out_avals)
    wants = [True] * len(arrs) + [False] * len(traced.consts)
    vb = traced.builder.vjp(wants)
    vb.simplify()
    zeros = [_zeros(s, d) for s, d, _ in traced.out_avals]
    outs = _run(vb, arrs + list(traced.consts) + zeros, checked=False)  # (the primal results alone)
    backward = {}
    primal_out = tree_util.tree_unflatten(traced.out_tree, outs[:n])
    if has_aux:
        main_tree, _ = _split_pair(traced.out_tree)
        n_main = main_tree.num_leaves
    else:
        n_main = n

    def f_vjp(ct):
        ct_leaves, ct_tree = tree_util.tree_flatten(ct)
        expect = traced.out_tree if not has_aux else _split_pair(traced.out_tree)[0]
        if ct_tree != expect:
            raise ValueError(f"vjp: cotangent structure {ct_tree} does not match the output structure {expect}")
        cts = []
        for c, (s, d, _) in zip(ct_leaves, traced.out_avals[:n_main]):
            c = c if isinstance(c, Array) else core.asarray(c, d)
            if c.shape != tuple(s):
                raise ValueError(f"vjp: cotangent shape {c.shape} does not match the output shape {tuple(s)}")
            cts.append(c if c.dtype == d else core.asarray(c, d))
        cts += zeros[n_main:]
        if "quiet" not in backward:  # its debug prints ran with the primal results: not again
            backward["quiet"] = vb.without_effects()
        res = _run(backward["quiet"], arrs + list(traced.consts) + cts)
        grads = res[n:]
        return tree_util.tree_unflatten(tree, grads)[0]

    if has_aux:
        return primal_out[0], f_vjp, restore(primal_out[1])
    return primal_out, f_vjp


def _std_basis(leaves):
    """One-hot rows over the concatenated elements of `leaves`: per leaf an array of shape
    (m,) + leaf.shape (m = total size), row i holding 1 at element i (of that leaf, if it is
    there) and 0 elsewhere. Returns (m, per-leaf bases, per-leaf offsets)."""
    from kiln import numpy as jnp
    sizes = [int(np.prod(x.shape)) if x.shape else 1 for x in leaves]
    offsets = [int(o) for o in np.cumsum([0] + sizes)]
    m = offsets[-1]
    bases = []
    for x, off, n in zip(leaves, offsets, sizes):
        eye = jnp.eye(m, n, k=-off, dtype=x.dtype)  # eye[i, c] = 1 where i == off + c
        bases.append(eye.reshape((m,) + tuple(x.shape)))
    return m, bases, offsets


def _select_args(fun, args, nums):
    """fun as a function of the arguments at positions nums only."""
    def f_sel(*dyn):
        full = list(args)
        for i, v in zip(nums, dyn):
            full[i] = v
        return fun(*full)
    return f_sel


def _check_jac_inputs(name, dyn, allow_int=False, holomorphic=False):
    if holomorphic:
        return _check_holomorphic_inputs(name, [core.asarray(x) for x in tree_util.tree_leaves(dyn)])
    for x in tree_util.tree_leaves(dyn):
        dt = core.asarray(x).dtype
        if dt.kind == "c":
            raise TypeError(f"{name} requires real-valued inputs (input dtype that is a sub-dtype of "
                            f"np.floating), but got {dt.name}. For holomorphic differentiation, pass "
                            "holomorphic=True. For differentiation of non-holomorphic functions involving "
                            "complex inputs, use kiln.vjp directly.")
        if not _is_float(dt) and not allow_int:
            raise TypeError(f"{name} requires real-valued inputs (input dtype that is a sub-dtype of "
                            f"np.floating), but got {dt.name}. If you want to use integer-valued inputs, "
                            "use vjp or set allow_int to True.")


def _assemble(out_leaves, out_tree, dyn, single, block):
    """The Jacobian pytree: the output structure, each output leaf holding the structure of
    the differentiated arguments; block(j, k, l) gives d out_leaf[j] / d leaf l of argument k."""
    per_out = []
    for j in range(len(out_leaves)):
        per_arg = []
        for k, arg in enumerate(dyn):
            leaves, treedef = tree_util.tree_flatten(arg)
            per_arg.append(tree_util.tree_unflatten(treedef, [block(j, k, l) for l in range(len(leaves))]))
        per_out.append(per_arg[0] if single else tuple(per_arg))
    return tree_util.tree_unflatten(out_tree, per_out)


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """Jacobian by reverse mode, as JAX computes it: one VJP, vmapped over the one-hot cotangents
    of the outputs' elements (rows stacked). Pytree arguments and outputs give a pytree of
    Jacobian blocks, as in JAX."""
    from kiln import numpy as jnp
    from kiln._src.batching import vmap

    def wrapped(*args):
        single, nums = _argnums_tuple(argnums, len(args), "jacrev")
        dyn = tuple(tree_util.tree_map(core.asarray, args[i]) for i in nums)
        _check_jac_inputs("jacrev", dyn, allow_int, holomorphic)
        res = vjp(_select_args(fun, args, nums), *dyn, has_aux=has_aux)
        y, f_vjp = res[0], res[1]
        y_leaves, y_tree = tree_util.tree_flatten(y)
        y_leaves = [core.asarray(v) for v in y_leaves]
        for v in y_leaves:
            if holomorphic and v.dtype.kind != "c":
                raise TypeError(f"jacrev with holomorphic=True requires outputs with complex dtype, but got "
                                f"{v.dtype.name}")
            if not holomorphic and v.dtype.kind == "c":
                raise TypeError(f"jacrev requires real-valued outputs (output dtype that is a sub-dtype of "
                                f"np.floating), but got {v.dtype.name}. For holomorphic differentiation, pass "
                                "holomorphic=True. For differentiation of non-holomorphic functions involving "
                                "complex outputs, use kiln.vjp directly.")
        x_leaves = tree_util.tree_leaves(dyn)
        m, basis, y_off = _std_basis(y_leaves)
        if m:  # rows[l]: (m,) + shape of input leaf l
            rows = vmap(lambda *ct: tree_util.tree_leaves(f_vjp(tree_util.tree_unflatten(y_tree, list(ct)))))(*basis)
        else:
            rows = [jnp.zeros((0,) + tuple(x.shape), x.dtype) for x in x_leaves]
        x_off = np.cumsum([0] + [len(tree_util.tree_leaves(a)) for a in dyn])

        def block(j, k, l):
            x, yv = x_leaves[x_off[k] + l], y_leaves[j]
            part = rows[x_off[k] + l][y_off[j]:y_off[j + 1]]
            return part.reshape(tuple(yv.shape) + tuple(x.shape))
        jac = _assemble(y_leaves, y_tree, dyn, single, block)
        return (jac, res[2]) if has_aux else jac
    return _wraps(wrapped, fun)


jacobian = jacrev


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """Jacobian by forward mode, as JAX computes it: one JVP program, vmapped over the one-hot
    tangents of the inputs' elements (columns stacked)."""
    from kiln import numpy as jnp
    from kiln._src.batching import vmap

    def wrapped(*args):
        single, nums = _argnums_tuple(argnums, len(args), "jacfwd")
        dyn = tuple(tree_util.tree_map(core.asarray, args[i]) for i in nums)
        _check_jac_inputs("jacfwd", dyn, holomorphic=holomorphic)
        f_sel = _select_args(fun, args, nums)
        f_sel, restore = _aux_apart(f_sel, "jacfwd") if has_aux else (f_sel, None)
        flat, in_tree = tree_util.tree_flatten(dyn)
        run = _jvp_program(f_sel, dyn, "jacfwd")
        y, _ = run(tree_util.tree_unflatten(in_tree, [jnp.zeros_like(x) for x in flat]))
        if has_aux:
            y, aux = y
            aux = restore(aux)
        y_leaves, y_tree = tree_util.tree_flatten(y)
        y_leaves = [core.asarray(v) for v in y_leaves]
        n, basis, x_off_el = _std_basis(flat)

        def push(*ts):
            t = run(tree_util.tree_unflatten(in_tree, list(ts)))[1]
            return tree_util.tree_leaves(t[0] if has_aux else t)
        cols = vmap(push)(*basis) if n else [jnp.zeros((0,) + tuple(v.shape), v.dtype) for v in y_leaves]
        x_off = np.cumsum([0] + [len(tree_util.tree_leaves(a)) for a in dyn])

        def block(j, k, l):
            m = x_off[k] + l
            x, yv = flat[m], y_leaves[j]
            part = jnp.moveaxis(cols[j][x_off_el[m]:x_off_el[m + 1]], 0, -1)
            return part.reshape(tuple(yv.shape) + tuple(x.shape))
        jac = _assemble(y_leaves, y_tree, dyn, single, block)
        return (jac, aux) if has_aux else jac
    return _wraps(wrapped, fun)


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    """jacfwd(jacrev(fun)): the matrix of second derivatives."""
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic), argnums, has_aux=has_aux,
                  holomorphic=holomorphic)
