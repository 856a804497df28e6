"""Automatic differentiation: grad, value_and_grad, jvp, vjp, linearize, jacfwd, jacrev,
hessian. The function is traced into a Program, the C passes (transforms/jvp.c,
transforms/transpose.c) build its JVP or VJP program, and that program is either compiled and
run (concrete arguments, cached per signature) or, when called under another trace (jit, an
outer grad), replayed equation by equation into that trace, so transformations compose.
"""

import numpy as np

from kiln._src import core, dtypes, tree_util
from kiln._src.config import config
from kiln._src.core import Array, Tracer
from kiln._src import api


def _is_float(dt):
    return dt.kind == "f" or dt == dtypes.bfloat16


def _inline(builder, inputs):
    """Replays builder's equations on `inputs` (arrays or tracers) through core.bind; returns
    the output values."""
    env = dict(zip(builder.inputs(), inputs))
    for prim, ins, outs, params in builder.equations():
        if prim == "literal":
            dt = core._np_dtype(params["dtype"])
            val = params["int_value"] if dt.kind in "biu" else params["value"]
            res = (core.scalar_constant(val, dt, bool(params["weak_type"])),)
        else:
            res = core.bind(prim, [env[i] for i in ins], params)
        for o, r in zip(outs, res):
            env[o] = r
    return [env[o] for o in builder.outputs()]


class _Compiled:
    """A transformed program compiled once per signature (concrete calls)."""
    __slots__ = ("exe", "out_avals")


def _run(builder, inputs, cache, key):
    if any(isinstance(x, Tracer) for x in inputs):
        return _inline(builder, inputs)
    entry = cache.get(key) if key is not None else None
    if entry is None:
        entry = _Compiled()
        entry.out_avals = [builder.aval(o) for o in builder.outputs()]
        entry.exe = builder.compile()
        if key is not None:
            cache[key] = entry
    bufs = entry.exe(*[x._buf for x in inputs])
    return [Array(b, tuple(s), core._np_dtype(d), w) for b, (_, s, d, w) in zip(bufs, entry.out_avals)]


def _leaves_as_arrays(leaves, what):
    return [x if isinstance(x, Array) else api._leaf_to_array(x, what) for x in leaves]


def _trace_flat(fun, args, kwargs):
    leaves, tree = tree_util.tree_flatten((args, kwargs))
    arrs = _leaves_as_arrays(leaves, "argument")
    traced = api._trace(fun, None, None, arrs, tree)
    return arrs, tree, traced


def _argnums_tuple(argnums, nargs, name):
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    for a in nums:
        if not -nargs <= a < nargs:
            raise ValueError(f"{name}: argnums {argnums} out of range for a function called with {nargs} "
                             "positional arguments")
    return single, tuple(a % nargs for a in nums)


def _diff_mask(args, kwargs, nums):
    """Per leaf of (args, kwargs): whether it belongs to a differentiated argument."""
    mask = []
    for i, a in enumerate(args):
        mask += [i in nums] * len(tree_util.tree_leaves(a))
    mask += [False] * len(tree_util.tree_leaves(kwargs))
    return mask


def _check_inputs(name, arrs, mask, allow_int):
    for x, m in zip(arrs, mask):
        if m and not _is_float(x.dtype) and not allow_int:
            raise TypeError(f"{name} requires real- or complex-valued inputs (input dtype that is a "
                            f"sub-dtype of np.inexact), but got {x.dtype.name}. If you want to use "
                            "integer-valued inputs, use allow_int=True (their gradients are zero).")


def value_and_grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False, reduce_axes=()):
    """Returns f(x) and its gradient with respect to argument(s) `argnums`."""
    if holomorphic:
        raise NotImplementedError("value_and_grad(holomorphic=True): kiln has no complex dtypes yet")
    cache = {}
    name = "grad"

    def wrapped(*args, **kwargs):
        single, nums = _argnums_tuple(argnums, len(args), name)
        arrs, tree, traced = _trace_flat(fun, args, kwargs)
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
        if not _is_float(main_dtype):
            raise TypeError(f"{name} requires a real-valued (float) output, got {main_dtype.name}")
        mask = _diff_mask(args, kwargs, nums)
        _check_inputs(name, arrs, mask, allow_int)
        wants = mask + [False] * len(traced.consts)
        vb = traced.builder.vjp(wants)
        cts = [core.literal(1.0, main_dtype, False)]
        cts = [core.scalar_constant(1.0, main_dtype, False)]
        for shape, dt, weak in out_avals[n_main:]:
            cts.append(_zeros(shape, dt))
        inputs = arrs + list(traced.consts) + cts
        key = (api.tree_util.tree_structure(0), tuple((a.shape, a.dtype, a.weak_type) for a in arrs), tree,
               config.jax_enable_x64) if not traced.consts else None
        outs = _run(vb, inputs, cache, key)
        nout = len(out_avals)
        primal = tree_util.tree_unflatten(traced.out_tree, outs[:nout])
        grads = outs[nout:]
        # int inputs with allow_int get zero gradients of their own dtype (JAX uses float0)
        it = iter(grads)
        per_arg = []
        for i in nums:
            leaves = tree_util.tree_leaves(args[i])
            structure = tree_util.tree_structure(args[i])
            per_arg.append(tree_util.tree_unflatten(structure, [next(it) for _ in leaves]))
        g = per_arg[0] if single else tuple(per_arg)
        if has_aux:
            value, aux = primal
            return (value, aux), g
        return primal, g

    wrapped.__name__ = getattr(fun, "__name__", "fun")
    return wrapped


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

    wrapped.__name__ = getattr(fun, "__name__", "fun")
    return wrapped


def jvp(fun, primals, tangents, has_aux=False):
    """(fun(*primals), the directional derivative along `tangents`)."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp: primals and tangents must be tuples or lists of arguments")
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: got {len(primals)} primals and {len(tangents)} tangents; they must match")
    arrs, tree, traced = _trace_flat(fun, tuple(primals), {})
    t_leaves, t_tree = tree_util.tree_flatten((tuple(tangents), {}))
    if t_tree != tree:
        raise ValueError(f"jvp: primal and tangent arguments have different structures: {tree} and {t_tree}")
    t_arrs = _leaves_as_arrays(t_leaves, "tangent")
    for p, t in zip(arrs, t_arrs):
        if p.shape != t.shape:
            raise ValueError(f"jvp: tangent shape {t.shape} does not match primal shape {p.shape}")
    has_t = [_is_float(a.dtype) for a in arrs] + [False] * len(traced.consts)
    jb = traced.builder.jvp(has_t)
    from kiln import lax
    t_in = [lax.convert_element_type(t, p.dtype) if t.dtype != p.dtype else t
            for p, t in zip(arrs, t_arrs) if _is_float(p.dtype)]
    outs = _run(jb, arrs + list(traced.consts) + t_in, {}, None)
    n = len(traced.out_avals)
    primal_out = tree_util.tree_unflatten(traced.out_tree, outs[:n])
    tangent_out = tree_util.tree_unflatten(traced.out_tree, outs[n:])
    if has_aux:
        return primal_out[0], tangent_out[0], primal_out[1]
    return primal_out, tangent_out


def linearize(fun, *primals):
    """(fun(*primals), f_jvp) where f_jvp(*tangents) evaluates the JVP at `primals`."""
    out, _ = jvp(fun, primals, tuple(tree_util.tree_map(lambda x: core.asarray(x) * 0, p) for p in primals))

    def f_jvp(*tangents):
        return jvp(fun, primals, tangents)[1]
    return out, f_jvp


def vjp(fun, *primals, has_aux=False):
    """(fun(*primals), f_vjp) where f_vjp(cotangent) gives the cotangents of the primals."""
    arrs, tree, traced = _trace_flat(fun, primals, {})
    n = len(traced.out_avals)
    wants = [True] * len(arrs) + [False] * len(traced.consts)
    for a in arrs:
        if not _is_float(a.dtype):
            pass
    vb = traced.builder.vjp(wants)
    cache = {}
    zeros = [_zeros(s, d) for s, d, _ in traced.out_avals]
    outs = _run(vb, arrs + list(traced.consts) + zeros, cache, None)
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
        res = _run(vb, arrs + list(traced.consts) + cts, cache, ("vjp",) if not traced.consts else None)
        grads = res[n:]
        return tree_util.tree_unflatten(tree, grads)[0]

    if has_aux:
        return primal_out[0], f_vjp, primal_out[1]
    return primal_out, f_vjp


def _std_basis(x):
    from kiln import numpy as jnp
    n = int(np.prod(x.shape)) if x.shape else 1
    return jnp.eye(n, dtype=x.dtype).reshape((n,) + tuple(x.shape))


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """Jacobian by reverse mode: one VJP per output element (rows stacked)."""
    from kiln import numpy as jnp

    def wrapped(*args):
        single, nums = _argnums_tuple(argnums, len(args), "jacrev")
        def f_sel(*dyn):
            full = list(args)
            for i, v in zip(nums, dyn):
                full[i] = v
            return fun(*full)
        dyn = tuple(args[i] for i in nums)
        if has_aux:
            y, f_vjp, aux = vjp(f_sel, *dyn, has_aux=True)
        else:
            y, f_vjp = vjp(f_sel, *dyn)
        y_leaves, y_tree = tree_util.tree_flatten(y)
        if len(y_leaves) != 1:
            raise NotImplementedError("jacrev of a function with a pytree output is not supported yet by kiln")
        yv = y_leaves[0]
        rows = [f_vjp(e.reshape(yv.shape)) for e in _std_basis(yv)]
        jac = []
        for k in range(len(nums)):
            parts = [r[k] for r in rows]
            x = dyn[k]
            stacked = jnp.stack(parts) if parts else jnp.zeros((0,) + tuple(x.shape), x.dtype)
            jac.append(stacked.reshape(tuple(yv.shape) + tuple(jnp.shape(x))))
        out = jac[0] if single else tuple(jac)
        return (out, aux) if has_aux else out
    return wrapped


jacobian = jacrev


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """Jacobian by forward mode: one JVP per input element (columns stacked)."""
    from kiln import numpy as jnp

    def wrapped(*args):
        single, nums = _argnums_tuple(argnums, len(args), "jacfwd")
        jac = []
        aux = None
        for k in nums:
            x = core.asarray(args[k])
            cols = []
            for e in _std_basis(x):
                tangents = tuple(e.reshape(x.shape) if i == k else jnp.zeros_like(core.asarray(a))
                                 for i, a in enumerate(args))
                res = jvp(fun, tuple(core.asarray(a) for a in args), tangents, has_aux=has_aux)
                if has_aux:
                    y, t, aux = res
                else:
                    y, t = res
                cols.append(t)
            y = core.asarray(y)
            stacked = jnp.stack(cols, axis=-1) if cols else jnp.zeros(tuple(y.shape) + (0,), y.dtype)
            jac.append(stacked.reshape(tuple(y.shape) + tuple(x.shape)))
        out = jac[0] if single else tuple(jac)
        return (out, aux) if has_aux else out
    return wrapped


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux), argnums, has_aux=has_aux)
