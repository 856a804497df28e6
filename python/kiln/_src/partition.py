"""Sharding propagation for jit: a function called on arrays split over a mesh (ShardedArrays, or
in_shardings naming NamedShardings) is traced on the global shapes, each value is given a layout
(per array axis, the mesh axes it is split over), and the program is replayed per device inside
shard_map with local shapes, the collectives inserted where a rule needs them.

Depends on api (tracing, the jit wrapper's signature), spmd (shard_map, the collectives) and core
(bind); nothing in them depends on it but the two call sites (ShardedJit, JitWrapped._call).
Switch it off with KILN_DISABLE_PARTITION=1 (jit then computes on the gathered values on one
device, the conservative rule). The rules are listed in the README (Several devices).
"""

import math
import os
import weakref

from kiln._src import api, core, spmd, tree_util
from kiln._src.config import config

FALLBACK = object()  # what call() returns when the conservative path must run instead

# Counters a test (or a user) can read to see which road calls took: "partitioned" calls ran per
# device, "fallback" calls were handed back to the gathered path.
stats = {"partitioned": 0, "fallback": 0}
last_plan = None  # the Plan of the latest partitioned call

_plans = weakref.WeakKeyDictionary()  # jit wrapper -> {signature and layouts: Plan, or None (fallback)}

# Primitives computed element by element from operands of the output's shape (or rank-0 ones).
_ELEMENTWISE = frozenset("""
neg sign floor ceil round is_finite exp exp2 log log1p expm1 tanh logistic sin cos tan asin acos atan sinh cosh
asinh acosh atanh sqrt rsqrt cbrt abs erf erfc erf_inv lgamma digamma not real imag conj square integer_pow
stop_gradient optimization_barrier add sub mul div rem pow max min atan2 complex and or xor shift_left
shift_right_logical shift_right_arithmetic eq ne lt le gt ge select_n convert_element_type bitcast_convert_type
""".split())

# Programs holding these run whole on the gathered values: control flow and host callbacks (a
# callback replayed per device would run once per device).
_WHOLE_FALLBACK = frozenset("while scan cond while_lin while_bwd callback".split())

# A reduction over a split axis: the local reduction, then this collective over the axis's mesh axes.
_REDUCE_COLLECTIVE = {"reduce_sum": spmd.psum, "reduce_max": spmd.pmax, "reduce_min": spmd.pmin}


class Plan:
    """What partitioning one jit signature decided; `collectives` and `replicated` record, in program
    order, each collective inserted (kind, primitive it serves, mesh axes) and each primitive run on
    gathered operands, so tests can check the structure and not only the values.
    smap: the ShardMapped running the per-device replay; mesh; builder: the program traced on global
    shapes; in_layouts: per input (arguments, then the trace's constants) its layout; consts: those
    constants; out_tree: the results' tree; out_want: per result the layout out_shardings asks for
    (None: as the rules give); out_after: per result the spec it is assembled with (None: from
    its layout); out_put: per result a sharding to device_put it on afterwards (another mesh, one
    device), else None; out_layouts / out_specs: the results' layouts and specs, known once the
    replay has been traced."""
    __slots__ = ("smap", "mesh", "builder", "in_layouts", "consts", "out_tree", "out_want", "out_after", "out_put",
                 "out_layouts", "out_specs", "collectives", "replicated")

    def __repr__(self):
        return (f"Plan(in={self.in_layouts}, out={self.out_layouts}, collectives={self.collectives}, "
                f"replicated={self.replicated})")


# ---------------------------------------------------------------------------------------------------------
# Layouts: per array axis, the tuple of mesh axis names it is split over (first name major)

def layout_of(sharding, ndim):
    from kiln.sharding import _spec_axes
    return tuple(_spec_axes(sharding.spec, ndim, sharding.mesh))


def spec_of(layout):
    """The PartitionSpec of a layout, trailing unsplit axes left out (P('x') rather than P('x', None))."""
    from kiln.sharding import PartitionSpec
    parts = [None if not n else n[0] if len(n) == 1 else tuple(n) for n in layout]
    while parts and parts[-1] is None:
        parts.pop()
    return PartitionSpec(*parts)


def _ways(mesh, names):
    return math.prod(mesh.shape[n] for n in names)


def _devices_used(mesh, layout):
    return math.prod(_ways(mesh, n) for n in layout)


def _local_shape(mesh, shape, layout):
    return tuple(d // _ways(mesh, n) for d, n in zip(shape, layout))


def _replicated(ndim):
    return ((),) * ndim


# ---------------------------------------------------------------------------------------------------------
# Lowering one equation at a time inside the shard_map body

class _Lowering:
    """The per-device replay: resharding and the collectives, recorded in the plan."""

    def __init__(self, mesh, plan):
        self.mesh, self.plan = mesh, plan
        self._memo = {}  # (id of a piece, its new layout) -> (the piece, kept alive; the resharded piece)

    def reshard(self, x, shape, src, dst):
        """x (a local piece of layout src of a global `shape` array) as its piece of layout dst: every
        axis whose split changes is gathered whole first (one mesh axis at a time, the minor first,
        so pieces concatenate in order), then cut to this device's piece of dst. A value read in one
        layout by several equations is resharded once."""
        src, dst = tuple(src), tuple(dst)
        if src == dst:
            return x
        hit = self._memo.get((id(x), dst))
        if hit is not None:
            return hit[1]
        y = self._reshard(x, src, dst)
        self._memo[(id(x), dst)] = (x, y)
        return y

    def _reshard(self, x, src, dst):
        for d, (a, b) in enumerate(zip(src, dst)):
            if a != b and a:
                for name in reversed(a):
                    x = spmd.all_gather(x, name, axis=d, tiled=True)
                self.plan.collectives.append(("all_gather", self._prim, a))
        for d, (a, b) in enumerate(zip(src, dst)):
            if a != b and b:
                x = self._cut(x, d, b)
        return x

    def _cut(self, x, d, names):
        from kiln import lax
        idx = 0
        for n in names:
            idx = idx * self.mesh.shape[n] + spmd.axis_index(n)
        size = x.shape[d] // _ways(self.mesh, names)
        return lax.dynamic_slice_in_dim(x, idx * size, size, axis=d)

    def collective(self, fn, x, names, kind):
        self.plan.collectives.append((kind, self._prim, tuple(names)))
        return fn(x, tuple(names))

    def gather_all(self, ins):
        return [self.reshard(v, s, l, _replicated(len(s))) for v, l, s in ins]


def _bind(prim, args, params):
    res = core.bind(prim, args, params)
    return list(res) if isinstance(res, (list, tuple)) else [res]


def _rule_replicated(lw, prim, ins, params, outs):
    """Anything without a rule: every operand gathered whole, the primitive run on each device on
    the global values (its params unchanged), the results replicated. Always correct."""
    lw.plan.replicated.append(prim)
    res = _bind(prim, lw.gather_all(ins), params)
    return [(r, _replicated(len(s))) for r, s in zip(res, outs)]


def _winner(lw, ins, candidates):
    """The layout operands at positions `candidates` meet in: that of the one split over the most
    devices (the leftmost on a tie), then, axis by axis, the split of another operand (left to
    right) on an axis it leaves whole, where that split's mesh axes are still free, so operands
    split on different axes ((x, -) and (-, y)) meet in (x, y) by cutting, without communication."""
    best, score = None, -1
    for i in candidates:
        sc = _devices_used(lw.mesh, ins[i][1])
        if sc > score:
            best, score = ins[i][1], sc
    merged = list(best)
    used = {n for names in merged for n in names}
    for i in candidates:
        for d, names in enumerate(ins[i][1]):
            if names and not merged[d] and not set(names) & used:
                merged[d] = names
                used |= set(names)
    return tuple(merged)


def _rule_elementwise(lw, prim, ins, params, outs):
    shape = outs[0]
    if any(s != shape and len(s) for _, _, s in ins) or len(outs) != 1:
        return _rule_replicated(lw, prim, ins, params, outs)
    full = [i for i, (_, _, s) in enumerate(ins) if len(s) and s == shape]
    layout = _winner(lw, ins, full) if full else _replicated(len(shape))
    args = [lw.reshard(v, s, l, layout) if i in full else v for i, (v, l, s) in enumerate(ins)]
    return [(_bind(prim, args, params)[0], layout)]


def _rule_broadcast_in_dim(lw, prim, ins, params, outs):
    if len(ins) != 1:
        return _rule_replicated(lw, prim, ins, params, outs)
    (v, l, s), shape, bd = ins[0], tuple(params["shape"]), params["broadcast_dimensions"]
    out, want = [()] * len(shape), list(l)
    for i, d in enumerate(bd):  # a split axis stays split where it is not stretched
        if l[i] and s[i] == shape[d]:
            out[d] = l[i]
        else:
            want[i] = ()
    v = lw.reshard(v, s, l, want)
    p = dict(params, shape=_local_shape(lw.mesh, shape, out))
    return [(_bind(prim, [v], p)[0], tuple(out))]


def _prefix_products(shape):
    out, p = [], 1
    for d in shape:
        out.append(p)
        p *= d
    return out


def _rule_reshape(lw, prim, ins, params, outs):
    """A split input axis keeps its split on the output axis that starts at the same flat offset
    (equal products of the axes before) when that axis's size is a multiple of the pieces: each
    device's block of rows is then a block of the output's rows. Otherwise it is gathered."""
    if len(ins) != 1:
        return _rule_replicated(lw, prim, ins, params, outs)
    (v, l, s), new = ins[0], tuple(params["new_sizes"])
    pin, pout = _prefix_products(s), _prefix_products(new)
    out, want = [()] * len(new), list(l)
    for i, names in enumerate(l):
        if not names:
            continue
        k = _ways(lw.mesh, names)
        j = next((j for j in range(len(new)) if pout[j] == pin[i] and new[j] % k == 0 and not out[j]), None)
        if j is None:
            want[i] = ()
        else:
            out[j] = names
    v = lw.reshard(v, s, l, want)
    p = dict(params, new_sizes=_local_shape(lw.mesh, new, out))
    return [(_bind(prim, [v], p)[0], tuple(out))]


def _rule_transpose(lw, prim, ins, params, outs):
    v, l, _ = ins[0]
    return [(_bind(prim, [v], params)[0], tuple(l[p] for p in params["permutation"]))]


def _keep_but(layout, dims):
    return tuple(() if d in dims else n for d, n in enumerate(layout))


def _rule_reduce(lw, prim, ins, params, outs):
    """Reducing a split axis: the local reduction, then psum/pmax/pmin over its mesh axes (the result
    is replicated on them); reductions without a collective (prod, and, or) gather it first."""
    v, l, s = ins[0]
    axes = set(params["axes"])
    names = tuple(n for d in sorted(axes) for n in l[d])
    fn = _REDUCE_COLLECTIVE.get(prim)
    if names and fn is None:
        v, l, names = lw.reshard(v, s, l, _keep_but(l, axes)), _keep_but(l, axes), ()
    r = _bind(prim, [v], params)[0]
    if names:
        r = lw.collective(fn, r, names, prim.replace("reduce_", "p"))
    return [(r, tuple(n for d, n in enumerate(l) if d not in axes))]


def _rule_along_axes(key, drop):
    """argmax/argmin (drop: the axes go away), cumulative ops and rev: the axes they work along are
    gathered whole; the others keep their split."""
    def rule(lw, prim, ins, params, outs):
        v, l, s = ins[0]
        ax = params[key]
        axes = {ax} if isinstance(ax, int) else set(ax)
        keep = _keep_but(l, axes)
        r = _bind(prim, [lw.reshard(v, s, l, keep)] + [x[0] for x in ins[1:]], params)[0]
        return [(r, tuple(n for d, n in enumerate(keep) if d not in axes) if drop else keep)]
    return rule


def _rule_slice(lw, prim, ins, params, outs):
    """An axis sliced whole (start 0, its full size, stride 1) keeps its split; others are gathered."""
    v, l, s = ins[0]
    st, lim, strides = params["start_indices"], params["limit_indices"], params["strides"]
    whole = {d for d in range(len(s)) if st[d] == 0 and lim[d] == s[d] and (strides is None or strides[d] == 1)}
    keep = tuple(n if d in whole else () for d, n in enumerate(l))
    v = lw.reshard(v, s, l, keep)
    local = _local_shape(lw.mesh, s, keep)
    p = dict(params, limit_indices=tuple(local[d] if d in whole else lim[d] for d in range(len(s))))
    return [(_bind(prim, [v], p)[0], keep)]


def _rule_pad(lw, prim, ins, params, outs):
    (v, l, s), pad_value = ins[0], ins[1]
    if len(pad_value[2]):
        return _rule_replicated(lw, prim, ins, params, outs)
    unpadded = {d for d in range(len(s)) if params["low"][d] == params["high"][d] == params["interior"][d] == 0}
    keep = tuple(n if d in unpadded else () for d, n in enumerate(l))
    return [(_bind(prim, [lw.reshard(v, s, l, keep), pad_value[0]], params)[0], keep)]


def _rule_concatenate(lw, prim, ins, params, outs):
    """As elementwise on the other axes; the joined axis gathered whole."""
    dim = params["dimension"]
    layout = _keep_but(_winner(lw, ins, range(len(ins))), {dim})
    args = [lw.reshard(v, s, l, layout) for v, l, s in ins]
    return [(_bind(prim, args, params)[0], layout)]


def _rule_dot_general(lw, prim, ins, params, outs):
    """Batch axes: split alike on both sides (the lhs's split if it has one, else the rhs's).
    Contracting axes: split alike on both sides (the lhs's split if it has one, else the rhs's: a
    replicated side is cut locally, a differently split one gathered and cut), the local product
    then psum over their mesh axes; but where the side to be cut already uses those mesh axes on
    another axis, the split side is gathered instead (x split by rows @ w split by rows over the
    same mesh axis gathers w, as FSDP does, not x). Free axes keep their splits, unless their mesh axes are taken
    already (by the batch or contracting axes, or the lhs's free axes): then gathered."""
    (a, la, sa), (b, lb, sb) = ins
    lc, rc, lbt, rbt = params["lhs_contracting"], params["rhs_contracting"], params["lhs_batch"], params["rhs_batch"]
    wa, wb = [()] * len(sa), [()] * len(sb)
    used, summed = set(), []
    for i, j in zip(lbt, rbt):
        n = la[i] or lb[j]
        if set(n) & used:
            n = ()
        wa[i] = wb[j] = n
        used |= set(n)
    for i, j in zip(lc, rc):
        n = la[i] or lb[j]
        other, od = (lb, j) if la[i] else (la, i)  # the side cut (or resharded) to n
        elsewhere = {m for d, names in enumerate(other) if d != od for m in names}
        if n and not set(n) & used and (la[i] == lb[j] or not set(n) & elsewhere):
            wa[i] = wb[j] = n
            summed.extend(n)
            used |= set(n)
    free_a = [d for d in range(len(sa)) if d not in lc and d not in lbt]
    free_b = [d for d in range(len(sb)) if d not in rc and d not in rbt]
    for w, lay, free in ((wa, la, free_a), (wb, lb, free_b)):
        for d in free:
            if lay[d] and not set(lay[d]) & used:
                w[d] = lay[d]
                used |= set(lay[d])
    a, b = lw.reshard(a, sa, la, wa), lw.reshard(b, sb, lb, wb)
    r = _bind(prim, [a, b], params)[0]
    if summed:
        r = lw.collective(spmd.psum, r, summed, "psum")
    out = tuple(wa[i] for i in lbt) + tuple(wa[d] for d in free_a) + tuple(wb[d] for d in free_b)
    return [(r, out)]


def _rule_source(lw, prim, ins, params, outs):
    """iota: made whole on every device (no operand to take a layout from; a consumer cuts it)."""
    return [(_bind(prim, [], params)[0], _replicated(len(outs[0])))]


_RULES = {
    "iota": _rule_source,
    "broadcast_in_dim": _rule_broadcast_in_dim,
    "reshape": _rule_reshape,
    "transpose": _rule_transpose,
    "slice": _rule_slice,
    "pad": _rule_pad,
    "concatenate": _rule_concatenate,
    "dot_general": _rule_dot_general,
    "argmax": _rule_along_axes("axes", True),
    "argmin": _rule_along_axes("axes", True),
    "rev": _rule_along_axes("dimensions", False),
    **{p: _rule_along_axes("axis", False) for p in ("cumsum", "cumprod", "cummax", "cummin")},
    **{p: _rule_reduce for p in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or")},
}


def _rule_of(prim):
    if prim in _RULES:
        return _RULES[prim]
    return _rule_elementwise if prim in _ELEMENTWISE else _rule_replicated


def _literal(params):
    from kiln._src import ad
    return ad.literal(params)


def _body(plan):
    """The shard_map body: the traced program replayed on local pieces."""
    builder, mesh = plan.builder, plan.mesh

    def body(*local):
        plan.collectives, plan.replicated = [], []
        lw = _Lowering(mesh, plan)
        env = {vid: (v, l) for vid, v, l in zip(builder.inputs(), local, plan.in_layouts)}
        for prim, ins, outs, params in builder.equations():
            lw._prim = prim
            if prim == "literal":
                env[outs[0]] = (_literal(params), ())
                continue
            operands = [(env[i][0], env[i][1], tuple(builder.aval(i)[1])) for i in ins]
            gouts = [tuple(builder.aval(o)[1]) for o in outs]
            res = _rule_of(prim)(lw, prim, operands, params, gouts)
            for o, (r, l), g in zip(outs, res, gouts):
                if tuple(r.shape) != _local_shape(mesh, g, l):  # a rule's bug, never the user's
                    raise AssertionError(f"partition: {prim} gave a piece of shape {tuple(r.shape)} for a {g} value "
                                         f"of layout {l}")
                env[o] = (r, tuple(l))
        lw._prim = "output"
        results, layouts = [], []
        for vid, want in zip(builder.outputs(), plan.out_want):
            v, l = env[vid]
            shape = tuple(builder.aval(vid)[1])
            if want is not None and tuple(want) != l:
                v, l = lw.reshard(v, shape, l, want), tuple(want)
            results.append(v)
            layouts.append(l)
        plan.out_layouts = layouts
        plan.out_specs = [s if s is not None else spec_of(l) for s, l in zip(plan.out_after, layouts)]
        return results
    return body


# ---------------------------------------------------------------------------------------------------------
# Entry: deciding whether to partition, planning, running

def _is_sharding_leaf(s):
    return s is None or spmd.is_sharding(s) or isinstance(s, (api.SingleDeviceSharding, api.Device))


def enabled():
    return not os.environ.get("KILN_DISABLE_PARTITION") and not core.tracing() and not config.jax_disable_jit


def wants(arrs):
    """Whether plain jit should try partitioning: an argument is split over a mesh of several devices."""
    return any(isinstance(a, spmd.ShardedArray) and a._sharding.mesh.size > 1 for a in arrs)


def call(wrapped, in_shardings, out_shardings, args, kwargs):
    """jit(f)(*args, **kwargs) partitioned over the arguments' mesh, or FALLBACK when this call is
    not one kiln partitions (no multi-device mesh, several meshes, single-device shardings asked,
    control flow or callbacks in the program, Refs)."""
    global last_plan
    if not enabled():
        return FALLBACK
    key, statics, arrs, tree, nargs = wrapped._signature(args, kwargs)
    if tree_util.tree_leaves(in_shardings):
        dyn_args = tree_util.tree_unflatten(tree, list(arrs))[0]
        asked = spmd._broadcast_prefix(in_shardings, tuple(dyn_args), _is_sharding_leaf, "jit: in_shardings")
        asked += [None] * (len(arrs) - len(asked))
    else:
        asked = [None] * len(arrs)
    if any(s is not None and not spmd.is_sharding(s) for s in asked):
        return FALLBACK
    meshes = {s.mesh for s in asked if s is not None}
    meshes |= {a._sharding.mesh for a, s in zip(arrs, asked) if s is None and isinstance(a, spmd.ShardedArray)}
    if len(meshes) != 1:
        return FALLBACK
    mesh = meshes.pop()
    if mesh.size < 2:
        return FALLBACK
    layouts = []
    for a, s in zip(arrs, asked):
        if s is not None:
            s.shard_shape(tuple(a.shape))  # raises when the split does not divide the shape, as JAX
            layouts.append(layout_of(s, a.ndim))
        elif isinstance(a, spmd.ShardedArray):
            layouts.append(layout_of(a._sharding, a.ndim))
        else:
            layouts.append(_replicated(a.ndim))
    cache = _plans.setdefault(wrapped, {})
    pkey = (key, tuple(layouts), mesh, out_shardings is not None)
    fresh = pkey not in cache
    if fresh:
        cache[pkey] = _plan(wrapped, statics, arrs, tree, nargs, mesh, layouts, out_shardings)
    plan = cache[pkey]
    if plan is None:
        stats["fallback"] += 1
        return FALLBACK
    try:
        leaves = plan.smap(*(list(arrs) + plan.consts))
    except Exception as e:  # the function traced whole, so this is the partitioner's failure: say so, stay correct
        if not fresh:
            raise
        import warnings
        warnings.warn(f"jit: partitioning {getattr(wrapped._fun, '__name__', 'the function')} over the mesh failed "
                      f"({type(e).__name__}: {e}); it runs on the gathered values instead (please report this)",
                      RuntimeWarning, stacklevel=3)
        cache[pkey] = None
        stats["fallback"] += 1
        return FALLBACK
    stats["partitioned"] += 1
    last_plan = plan
    leaves = [x if s is None else api.device_put(x, s) for x, s in zip(leaves, plan.out_put)]
    return tree_util.tree_unflatten(plan.out_tree, leaves)


def _plan(wrapped, statics, arrs, tree, nargs, mesh, layouts, out_shardings):
    """The Plan for one signature, or None when the program must run whole (FALLBACK)."""
    fun = api._rebuild_call(wrapped._fun, statics, wrapped._static_argnums, nargs) if statics else wrapped._fun
    traced = api._trace(fun, None, None, arrs, tree, refs_in=("a jit-compiled function", True))
    if traced.ref_touched or any(e[0] in _WHOLE_FALLBACK for e in traced.builder.equations()):
        return None
    plan = Plan()
    plan.builder, plan.mesh, plan.out_tree = traced.builder, mesh, traced.out_tree
    consts = list(traced.consts)
    const_layouts = [layout_of(c._sharding, c.ndim) if isinstance(c, spmd.ShardedArray) and c._sharding.mesh == mesh
                     else _replicated(c.ndim) for c in consts]
    plan.in_layouts = list(layouts) + const_layouts
    nout = len(traced.out_avals)
    if out_shardings is None or not tree_util.tree_leaves(out_shardings):
        wanted = [None] * nout
    else:
        skeleton = tree_util.tree_unflatten(traced.out_tree, list(range(nout)))
        wanted = spmd._broadcast_prefix(out_shardings, skeleton, _is_sharding_leaf, "jit: out_shardings")
    plan.out_want, plan.out_after, put = [], [], []
    for s, (shape, _, _) in zip(wanted, traced.out_avals):
        if spmd.is_sharding(s) and s.mesh == mesh:
            s.shard_shape(tuple(shape))
            plan.out_want.append(layout_of(s, len(shape)))
            plan.out_after.append(s.spec)
            put.append(None)
        else:  # placed afterwards (another mesh, one device), or as the rules say
            plan.out_want.append(None)
            plan.out_after.append(None)
            put.append(s)
    plan.out_put, plan.consts = put, consts
    in_specs = tuple(spec_of(l) for l in plan.in_layouts)
    plan.smap = spmd.ShardMapped(_body(plan), mesh, in_specs, lambda: plan.out_specs, name="jit")
    return plan
