"""shard_map inside a traced function (grad, vmap, make_jaxpr around it): the body's per-device
program, replayed on *stacked* values in the enclosing trace.

Every value of the body that differs per device is held as one array of shape (N, *local), N the
mesh's devices in row-major order of their coordinates; values the same everywhere stay as they
are. Ordinary primitives run on the stacked values through vmap (one equation at a time); each
collective becomes the operations on the stacked array that give every device its result (psum:
a sum over the group's devices and a broadcast back; all_gather: the group's pieces joined; ...).
The enclosing trace thus records the whole mesh's computation as one global program, exactly the
function shard_map computes, which grad differentiates and vmap batches like any other (and which
jit's partitioner can split over a mesh again). The body is the one shard_map traces for a launch
(check_vma's typing included), so its values are JAX's.
"""
import math

import numpy as np

from kiln._src import core, tree_util
from kiln._src.core import Tracer


class _Stacked:
    """A body value that differs per device: arr holds every device's, shape (N, *local)."""
    __slots__ = ("arr",)

    def __init__(self, arr):
        self.arr = arr


def _jnp():
    import kiln.numpy as jnp
    return jnp


def _mesh_axes_of(spec, ndim, mesh):
    from kiln.sharding import _spec_axes
    return _spec_axes(spec, ndim, mesh)


def to_stacked(x, spec, mesh):
    """A global array as every device's piece under spec: (N, *local)."""
    jnp = _jnp()
    names = list(mesh.axis_names)
    sizes = dict(zip(names, mesh.axis_sizes))
    axes = _mesh_axes_of(spec, x.ndim, mesh)
    # split every array dimension d into (its mesh axes' sizes..., local_d)
    shape, order_mesh, order_local = [], {}, []
    for d, (n, ax) in enumerate(zip(x.shape, axes)):
        k = math.prod(sizes[a] for a in ax)
        for a in ax:
            order_mesh[a] = len(shape)
            shape.append(sizes[a])
        order_local.append(len(shape))
        shape.append(n // k)
    y = jnp.reshape(x, shape)
    # mesh axes first, in the mesh's order; those the spec does not name are broadcast
    present = [a for a in names if a in order_mesh]
    y = jnp.transpose(y, [order_mesh[a] for a in present] + order_local)
    full = []
    for a in names:
        full.append(sizes[a] if a in order_mesh else 1)
    y = jnp.reshape(y, tuple(full) + tuple(y.shape[len(present):]))
    y = jnp.broadcast_to(y, tuple(mesh.axis_sizes) + tuple(y.shape[len(names):]))
    return jnp.reshape(y, (math.prod(mesh.axis_sizes),) + tuple(y.shape[len(names):]))


def _first_spread(y, idx, unnamed):
    """y[idx] (coordinate 0 along the mesh axes the out_spec leaves unnamed), whose cotangent goes
    to every device divided by their count, as JAX's shard_map transpose does without check_vma
    (a custom_vjp's bwd rule inside then sees the cotangents JAX's would)."""
    import kiln
    jnp = _jnp()
    n = math.prod(y.shape[i] for i in unnamed)
    pick = kiln.custom_vjp(lambda v: v[idx])
    pick.defvjp(lambda v: (v[idx], None),
                lambda _, ct: (jnp.broadcast_to(jnp.expand_dims(ct / n, tuple(unnamed)), y.shape),))
    return pick(y)


def from_stacked(s, spec, mesh, spread=False):
    """Every device's piece (N, *local) as the global array out_spec describes (the pieces over
    mesh axes the spec does not name: those of coordinate 0; spread: their cotangent spread over
    those devices, _first_spread)."""
    jnp = _jnp()
    names = list(mesh.axis_names)
    local = tuple(s.shape[1:])
    y = jnp.reshape(s, tuple(mesh.axis_sizes) + local)
    axes = _mesh_axes_of(spec, len(local), mesh)
    used = [a for ax in axes for a in ax]
    idx = tuple(slice(None) if a in used else 0 for a in names)
    unnamed = [i for i, a in enumerate(names) if a not in used]
    y = _first_spread(y, idx, unnamed) if spread and unnamed and jnp.issubdtype(y.dtype, jnp.inexact) else y[idx]
    kept = [a for a in names if a in used]  # the remaining leading axes, in mesh order
    # bring each array dimension's mesh axes in front of it (in the spec's order) and merge them
    perm, out_shape = [], []
    for d, ax in enumerate(axes):
        for a in ax:
            perm.append(kept.index(a))
        perm.append(len(kept) + d)
        out_shape.append(local[d] * math.prod(mesh.shape[a] for a in ax))
    return jnp.reshape(jnp.transpose(y, perm), out_shape)


# ---- the collectives on stacked values ----

def _group_view(arr, mesh, axes):
    """arr (N, *local) as (rest, g, *local): the devices grouped by their coordinates off `axes`
    (rest, row-major) and on them (g, row-major), with the permutation to undo it."""
    jnp = _jnp()
    ms = tuple(mesh.axis_sizes)
    local = tuple(arr.shape[1:])
    y = jnp.reshape(arr, ms + local)
    rest = [i for i in range(len(ms)) if i not in axes]
    perm = rest + list(axes) + list(range(len(ms), len(ms) + len(local)))
    y = jnp.transpose(y, perm)
    r = math.prod(ms[i] for i in rest)
    g = math.prod(ms[i] for i in axes)
    return jnp.reshape(y, (r, g) + local), perm


def _ungroup(y, mesh, axes, perm):
    """The inverse of _group_view for a result (rest, g, *local')."""
    jnp = _jnp()
    ms = tuple(mesh.axis_sizes)
    rest = [i for i in range(len(ms)) if i not in axes]
    local = tuple(y.shape[2:])
    y = jnp.reshape(y, tuple(ms[i] for i in rest) + tuple(ms[i] for i in axes) + local)
    inv = list(np.argsort(perm[:len(ms)])) + list(range(len(ms), len(ms) + len(local)))
    y = jnp.transpose(y, inv)
    return jnp.reshape(y, (math.prod(ms),) + local)


def _stack_const(v, n):
    jnp = _jnp()
    return jnp.broadcast_to(v, (n,) + tuple(np.shape(v)))


def _collective(prim, x, params, mesh):
    """prim's result for every device, from x (a _Stacked, or a value the same on every device)."""
    jnp = _jnp()
    n = math.prod(mesh.axis_sizes)
    axes = list(params["axes"])
    if prim == "axis_index":
        coords = np.indices(tuple(mesh.axis_sizes)).reshape(len(mesh.axis_sizes), -1)
        pos = np.zeros(n, np.int64)
        for a in axes:
            pos = pos * mesh.axis_sizes[a] + coords[a]
        return _Stacked(jnp.asarray(pos.astype(np.int32)))
    if prim == "pvary":
        return x
    arr = x.arr if isinstance(x, _Stacked) else _stack_const(x, n)
    grouped, perm = _group_view(arr, mesh, axes)  # (rest, g, *local)
    index_groups, r = tuple(params.get("groups") or ()), grouped.shape[0]
    if index_groups:  # axis_index_groups: (rest * groups, group size, *local), members in the groups' order
        grouped = jnp.take(grouped, jnp.asarray(np.asarray(index_groups, np.int32)), axis=1)
        grouped = jnp.reshape(grouped, (r * (len(index_groups) // params["group_size"]), params["group_size"]) +
                              tuple(grouped.shape[2:]))
    g = grouped.shape[1]
    whole = r == 1 and not index_groups  # one group of every device: its result is the same on all
    if prim in ("psum", "pmax", "pmin"):
        red = {"psum": jnp.sum, "pmax": jnp.max, "pmin": jnp.min}[prim](grouped, axis=1, keepdims=True)
        if whole:  # (as JAX's batching rule: unmapped over a vmap's axis)
            return red[0, 0]
        out = jnp.broadcast_to(red, grouped.shape)
    elif prim == "all_gather":
        a, tiled = params["axis"], params["tiled"]
        moved = jnp.moveaxis(grouped, 1, 1 + a)  # (rest, *local[:a], g, *local[a:]): the members' pieces
        if tiled:  # joined along a
            shp = list(moved.shape)
            moved = jnp.reshape(moved, shp[:1 + a] + [shp[1 + a] * shp[2 + a]] + shp[3 + a:])
        if whole:
            return moved[0]
        out = jnp.broadcast_to(moved[:, None], (moved.shape[0], g) + tuple(moved.shape[1:]))
    elif prim == "reduce_scatter":
        a, tiled = params["axis"], params["tiled"]
        total = jnp.sum(grouped, axis=1)  # (rest, *local)
        if tiled:
            shp = list(total.shape)
            split = jnp.reshape(total, shp[:1 + a] + [g, shp[1 + a] // g] + shp[2 + a:])
            out = jnp.moveaxis(split, 1 + a, 1)  # (rest, g, *chunk)
        else:
            out = jnp.moveaxis(total, 1 + a, 1)  # axis a of extent g becomes the member axis
    elif prim == "ppermute":
        flat = list(params["perm"])
        src = np.zeros(g, np.int64)
        recv = np.zeros(g, bool)
        for k in range(0, len(flat), 2):
            src[flat[k + 1]] = flat[k]
            recv[flat[k + 1]] = True
        moved = jnp.take(grouped, jnp.asarray(src.astype(np.int32)), axis=1)
        mask = jnp.asarray(recv).reshape((1, g) + (1,) * (grouped.ndim - 2))
        out = jnp.where(mask, moved, jnp.zeros_like(moved))
    elif prim == "all_to_all":
        s, c = params["axis"], params["concat_axis"]
        shp = list(grouped.shape)  # (rest, g_src, *local)
        split = jnp.reshape(grouped, shp[:2 + s] + [g, shp[2 + s] // g] + shp[3 + s:])  # chunk number at 2+s
        # member j receives chunk j of every source i: swap the source axis and the chunk number
        sw = jnp.swapaxes(split, 1, 2 + s)  # (rest, j, *local[:s], i, chunk, *local[s+1:])
        # the sources joined, in order, along the concat axis c: i put just before dim c, then merged
        moved = jnp.moveaxis(sw, 2 + s, 2 + c)
        ms = list(moved.shape)
        out = jnp.reshape(moved, ms[:2 + c] + [ms[2 + c] * ms[3 + c]] + ms[4 + c:])
    else:
        raise NotImplementedError(f"shard_map inside a traced function: the collective {prim} is not supported "
                                  "there yet by kiln")
    if index_groups:
        out = jnp.reshape(out, (r, len(index_groups)) + tuple(out.shape[2:]))
        out = jnp.take(out, jnp.asarray(np.argsort(index_groups).astype(np.int32)), axis=1)
    return _Stacked(_ungroup(out, mesh, axes, perm))


_COLLECTIVES = ("psum", "pmax", "pmin", "all_gather", "reduce_scatter", "ppermute", "all_to_all", "axis_index",
                "pvary")


def _ours(frame):
    """Whether an equation (prim, params) is a collective the replay computes: any of a shard_map
    body's (frame 0), or those over the axis of vmap frame `frame`."""
    return lambda prim, params: prim in _COLLECTIVES and params.get("frame", 0) == frame


def _has_collective(params, ours=_ours(0)):
    """Whether a body held in params (a loop's, a call's, a cond's branches) runs collectives."""
    def body_has(v):
        if isinstance(v, (tuple, list)):
            return any(body_has(b) for b in v)
        if hasattr(v, "equations") and hasattr(v, "inputs"):
            return any(ours(prim, p) or _has_collective(p, ours) for prim, _, _, p in v.equations())
        return False
    return any(body_has(v) for v in params.values())


def runs_collectives(builder, frame):
    """Whether a traced program (or a body in it) runs a collective over vmap frame `frame`."""
    return _has_collective({"program": builder}, _ours(frame))


_CONTROL = ("scan", "while", "cond", "checkpoint")


def _lift(v, n):
    """v as a stacked array (N, *local) (a value the same everywhere broadcast)."""
    return v.arr if isinstance(v, _Stacked) else _stack_const(v, n)


def _where_devices(pred, a, b):
    """Per device: a where its pred holds, else b (pred a _Stacked bool (N,))."""
    jnp = _jnp()
    return jnp.where(jnp.reshape(pred.arr, (pred.arr.shape[0],) + (1,) * (a.ndim - 1)), a, b)


def _control(prim, xs, params, mesh, frame, custom_ok=False):
    """A loop, cond or checkpoint whose body runs collectives, replayed in the enclosing trace as
    the same construct over stacked values: every carry stacked; a condition that differs per
    device runs the loop while any device's holds, the others keeping their carries (as vmap's
    batched while), and a cond computes both branches, each device taking its own."""
    import kiln
    jnp = _jnp()
    n = math.prod(mesh.axis_sizes)

    def replay(body, vals):
        return run_body(body, mesh, list(vals), [], frame, custom_ok)

    if prim == "checkpoint":  # (the recomputation policy does not change values)
        return tuple(replay(params["body"], xs))
    if prim == "scan":
        nc, nk, _ = params["counts"]
        consts, init, seqs = xs[:nc], xs[nc:nc + nk], xs[nc + nk:]
        stacked_x = [isinstance(v, _Stacked) for v in seqs]
        stacked_y = []

        def step(carry, x):
            x = () if x is None else x
            outs = replay(params["body"], list(consts) + [_Stacked(c) for c in carry] +
                          [_Stacked(v) if s else v for v, s in zip(x, stacked_x)])
            stacked_y[:] = [isinstance(y, _Stacked) for y in outs[nk:]]
            return tuple(_lift(o, n) for o in outs[:nk]), tuple(y.arr if isinstance(y, _Stacked) else y
                                                                 for y in outs[nk:])
        carry, ys = kiln.lax.scan(step, tuple(_lift(v, n) for v in init),
                                  tuple(jnp.moveaxis(v.arr, 1, 0) if s else v for v, s in zip(seqs, stacked_x)),
                                  length=params["length"], reverse=bool(params["reverse"]))
        return tuple(_Stacked(c) for c in carry) + tuple(_Stacked(jnp.moveaxis(y, 0, 1)) if s else y
                                                         for y, s in zip(ys, stacked_y))
    if prim == "while":
        nc, nb, _ = params["counts"]
        cconsts, bconsts, init = xs[:nc], xs[nc:nc + nb], xs[nc + nb:]

        def pred_of(carry):
            return replay(params["cond"], [_Stacked(c) for c in carry] + list(cconsts))[0]

        def cond_fun(carry):
            p = pred_of(carry)
            return jnp.any(p.arr) if isinstance(p, _Stacked) else p

        def body_fun(carry):
            p = pred_of(carry)
            new = tuple(_lift(o, n) for o in replay(params["body"], [_Stacked(c) for c in carry] + list(bconsts)))
            return tuple(_where_devices(p, a, c) for a, c in zip(new, carry)) if isinstance(p, _Stacked) else new
        return tuple(_Stacked(c) for c in kiln.lax.while_loop(cond_fun, body_fun, tuple(_lift(v, n) for v in init)))
    nf, nt, _ = params["counts"]  # cond
    pred, fconsts, tconsts, ops = xs[0], xs[1:1 + nf], xs[1 + nf:1 + nf + nt], xs[1 + nf + nt:]

    def branch(body, consts):
        return tuple(_lift(o, n) for o in replay(body, list(ops) + list(consts)))
    if isinstance(pred, _Stacked):
        t, f = branch(params["true_branch"], tconsts), branch(params["false_branch"], fconsts)
        return tuple(_Stacked(_where_devices(pred, a, b)) for a, b in zip(t, f))
    return tuple(_Stacked(o) for o in kiln.lax.cond(pred, lambda: branch(params["true_branch"], tconsts),
                                                    lambda: branch(params["false_branch"], fconsts)))


def _custom_vjp(xs, params, mesh, frame):
    """A custom_vjp call whose bwd rule runs collectives, on stacked values: the forward rule's
    outputs (already replayed) pass through a custom_vjp of the stacked arrays whose bwd replays the
    per-device bwd rule on the stacked residuals and cotangents. Values the same on every device
    enter broadcast, so their cotangents sum over the devices."""
    import kiln
    n = math.prod(mesh.axis_sizes)
    n_out, n_res, n_c, _ = params["counts"]
    outs = tuple(_lift(o, n) for o in xs[:n_out])
    res = tuple(_lift(r, n) for r in xs[n_out:n_out + n_res])
    consts, x = xs[n_out + n_res:n_out + n_res + n_c], xs[n_out + n_res + n_c:]

    def bwd(r, ct):
        cts = run_body(params["bwd"], mesh, [_Stacked(v) for v in r] + [_Stacked(c) for c in ct], consts, frame, True)
        return tuple(_lift(c, n) for c in cts)
    stacked = kiln.custom_vjp(lambda *_: outs)
    stacked.defvjp(lambda *_: (outs, res), bwd)
    return tuple(_Stacked(y) for y in stacked(*[_lift(v, n) for v in x]))


def _custom_jvp(xs, params, mesh, custom_ok):
    """A custom_jvp call whose function or rule runs collectives, on stacked values: a custom_jvp of
    the stacked arrays whose function and rule replay the per-device ones. Tangents are per-device
    values under either convention of cotangents, so this holds with check_vma too."""
    import kiln
    n = math.prod(mesh.axis_sizes)
    n_x, n_f, _ = params["counts"]
    x, fconsts, rconsts = xs[:n_x], xs[n_x:n_x + n_f], xs[n_x + n_f:]

    def replay(body, vals, consts):
        return [_lift(o, n) for o in run_body(body, mesh, [_Stacked(v) for v in vals], consts, 0, custom_ok)]
    stacked = kiln.custom_jvp(lambda *a: tuple(replay(params["fun"], a, fconsts)))

    def rule(primals, tangents):
        outs = replay(params["jvp"], list(primals) + list(tangents), rconsts)
        return tuple(outs[:len(outs) // 2]), tuple(outs[len(outs) // 2:])
    stacked.defjvp(rule)
    return tuple(_Stacked(y) for y in stacked(*[_lift(v, n) for v in x]))


def run_body(builder, mesh, inputs, consts, frame=0, custom_ok=False):
    """The body's outputs (each a _Stacked or a value the same on every device) from its inputs
    (_Stacked) and constants (plain), replayed in the enclosing trace. frame > 0: the program of a
    vmap with an axis_name (mesh its VmapFrame; the "devices" the batch's elements), whose other
    collectives (a mesh's) run as they are on the stacked values. custom_ok: custom_vjp calls whose
    bwd rules run collectives are replayed (a shard_map without check_vma: JAX's bwd rules there
    see per-device cotangents as the replay gives them; with check_vma JAX's typed cotangents of
    values the same on every device would need converting)."""
    import kiln
    ours = _ours(frame)
    env = dict(zip(builder.inputs(), list(inputs) + list(consts)))
    for prim, ins, outs, params in builder.equations():
        if prim == "literal":
            from kiln._src import ad
            res = (ad.literal(params),)
        elif ours(prim, params):
            res = (_collective(prim, env[ins[0]] if ins else None, params, mesh),)
        elif _has_collective(params, ours):
            if prim in _CONTROL:
                res = _control(prim, [env[i] for i in ins], params, mesh, frame, custom_ok)
            elif prim == "custom_vjp_call" and custom_ok:
                res = _custom_vjp([env[i] for i in ins], params, mesh, frame)
            elif prim == "custom_jvp_call" and not frame:
                res = _custom_jvp([env[i] for i in ins], params, mesh, custom_ok)
            else:
                where = "vmap with an axis_name" if frame else "shard_map inside a traced function"
                hint = (" (a custom_vjp's is, in a shard_map with check_vma=False)" if prim == "custom_vjp_call" and
                        not frame else "")
                raise NotImplementedError(f"{where}: a {prim} whose body runs collectives is not supported there yet "
                                          f"by kiln{hint}: call its function outside the custom rule, or the "
                                          "shard_map on concrete arrays")
        else:
            xs = [env[i] for i in ins]
            if not any(isinstance(x, _Stacked) for x in xs):
                res = core.bind(prim, xs, params)
            else:
                axes = [0 if isinstance(x, _Stacked) else None for x in xs]
                vals = [x.arr if isinstance(x, _Stacked) else x for x in xs]
                out = kiln.vmap(lambda *a: tuple(core.bind(prim, list(a), params)), in_axes=axes)(*vals)
                res = tuple(_Stacked(o) for o in out)
        for o, r in zip(outs, res):
            env[o] = r
    return [env[o] for o in builder.outputs()]


def call(smapped, mesh, args):
    """smapped(*args) (a ShardMapped) inside a trace: its global results."""
    from kiln._src import api, spmd
    from kiln.sharding import PartitionSpec
    if getattr(mesh, "is_multi_process", False):
        raise NotImplementedError(f"{smapped._name} inside a traced function over a mesh spanning processes is not "
                                  "supported yet by kiln: call it on concrete arrays")
    leaves, tree = tree_util.tree_flatten(args)
    paths = spmd._leaf_paths(args)
    specs = spmd._broadcast_prefix(smapped._in_specs, args, spmd._is_spec_leaf,
                                   f"{smapped._name}: in_specs") if leaves else []
    specs = [PartitionSpec() if s is None else s for s in specs]
    arrs = [x if isinstance(x, (Tracer, core.Array)) else api._leaf_to_array(x, f"{smapped._name} argument {p}")
            for x, p in zip(leaves, paths)]
    shard_shapes = []
    for a, s, p in zip(arrs, specs, paths):
        parts = spmd._spec_parts(s, a.ndim, mesh, f"{smapped._name}: in_specs for argument {p}")
        for i, (d, k) in enumerate(zip(a.shape, parts)):
            if d % k:
                raise ValueError(f"{smapped._name}: argument {p} of shape {tuple(a.shape)} is split along axis {i} "
                                 f"by in_specs {s!r} over {k} devices, which does not divide {d}")
        shard_shapes.append(tuple(d // k for d, k in zip(a.shape, parts)))
    key = (tree, tuple((sh, a.dtype, a.weak_type) for sh, a in zip(shard_shapes, arrs)), tuple(specs), mesh,
           core.config_state(), "traced")
    entry = smapped._cache.get(key)
    if entry is None:
        smapped._leaf_specs = specs
        entry = smapped._compile(mesh, tree, arrs, shard_shapes, build=False)
        if not any(isinstance(c, Tracer) for c in entry.consts):  # (values of this trace: not for the next)
            smapped._cache[key] = entry
    stacked = [_Stacked(to_stacked(a, s, mesh)) for a, s in zip(arrs, specs)]
    loose = not smapped._check_vma
    outs = run_body(entry.builder, mesh, stacked, entry.consts, custom_ok=loose)
    n = math.prod(mesh.axis_sizes)
    results = []
    for o, s, (shape, dtype, weak) in zip(outs, entry.out_specs, entry.out_avals):
        arr = o.arr if isinstance(o, _Stacked) else _stack_const(o, n)
        results.append(from_stacked(arr, s, mesh, spread=loose))
    return tree_util.tree_unflatten(entry.out_tree, results)
