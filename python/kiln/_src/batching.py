"""vmap: vectorizing map. The function is traced once per call on inputs of the per-example
(unbatched) shapes, the C pass (transforms/vmap.c) rewrites that program to compute the whole
batch, and the batched program is compiled and run (cached by its structural hash) or, when
called under another trace (jit, grad, an outer vmap), replayed into that trace, so
transformations compose: jit(vmap(f)), vmap(vmap(f)), vmap(grad(f)).

The C pass puts the batch axis of every batched output at axis 0; out_axes are applied here.
"""

import functools
import inspect
import operator

import numpy as np

from kiln._src import api, core, tree_util
from kiln._src.ad import _run
from kiln._src.thread_state import Cell

vmap_depth = Cell(0)  # > 0 while this thread traces a function to batch it (library primitives read it)


class _Aval:
    """A per-example input as the tracer needs it (shape, dtype, weak type), and the batched value
    it stands for (shard_map's check_vma typing, spmd.vma_nest)."""
    __slots__ = ("shape", "dtype", "weak_type", "vma_src")

    def __init__(self, shape, dtype, weak_type, vma_src=None):
        self.shape = shape
        self.dtype = dtype
        self.weak_type = weak_type
        self.vma_src = vma_src


def _is_none(x):
    return x is None


def _check_axis_leaves(what, spec):
    leaves = tree_util.tree_leaves(spec, is_leaf=_is_none)
    for a in leaves:
        if a is not None and (not isinstance(a, int) or isinstance(a, bool)):
            raise TypeError(f"vmap {what} must be an int, None, or (nested) container with those types as "
                            f"leaves, but got {what}={spec!r}")


def _broadcast_prefix(what, spec, value, value_text):
    """One axis per leaf of `value`, spreading each leaf of `spec` (a tree prefix of `value`)
    over the leaves of the subtree it covers."""
    spec_leaves, spec_tree = tree_util.tree_flatten(spec, is_leaf=_is_none)
    try:
        subtrees = spec_tree.flatten_up_to(value)
    except ValueError as e:
        raise ValueError(f"vmap {what} specification must be a tree prefix of the corresponding value, got "
                         f"specification {what}={spec!r} for {value_text} of structure "
                         f"{tree_util.tree_structure(value)}: {e}") from None
    axes = []
    for a, sub in zip(spec_leaves, subtrees):
        axes += [a] * len(tree_util.tree_leaves(sub))
    return axes


def _arg_names(fun, nargs):
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(nargs):
        p = params[i] if i < len(params) else None
        if p is not None and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(f"argument {p.name}")
        else:
            names.append(f"positional argument {i}")
    return names


def _leaf_names(fun, args, kwargs):
    """A description of every leaf of (args, kwargs), for error messages."""
    names = []
    for name, a in zip(_arg_names(fun, len(args)), args):
        n = len(tree_util.tree_leaves(a))
        names += [name] if n == 1 else [f"{name} (leaf {j})" for j in range(n)]
    for k in sorted(kwargs) if all(isinstance(k, str) for k in kwargs) else kwargs:
        n = len(tree_util.tree_leaves(kwargs[k]))
        names += [f"keyword argument {k}"] if n == 1 else [f"keyword argument {k} (leaf {j})" for j in range(n)]
    return names


def _type_text(x):
    return f"{x.dtype.name}[{','.join(map(str, x.shape))}]"


def _in_axes_per_leaf(in_axes, args, kwargs):
    if isinstance(in_axes, list):  # a list cannot be a prefix of the positional-args tuple
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple):
        if len(in_axes) != len(args):
            raise ValueError(f"vmap in_axes must be an int, None, or a tuple of entries corresponding to the "
                             f"positional arguments passed to the function, but got len(in_axes)={len(in_axes)}, "
                             f"len(args)={len(args)}")
        axes = _broadcast_prefix("in_axes", in_axes, args, "the positional arguments")
    else:
        axes = [in_axes] * len(tree_util.tree_leaves(args))
    return axes + [0] * len(tree_util.tree_leaves(kwargs))


def _batch_size(leaves, axes, names, axis_size):
    sizes = [(x.shape[a], a, x, n) for x, a, n in zip(leaves, axes, names) if a is not None]
    distinct = sorted({s for s, _, _, _ in sizes})
    if len(distinct) > 1 or (distinct and axis_size is not None and distinct[0] != axis_size):
        lines = [f"  * axis {a} of {n} of type {_type_text(x)} has size {s}" for s, a, x, n in sizes]
        if axis_size is not None:
            lines.append(f"  * axis_size is {axis_size}")
        raise ValueError("vmap got inconsistent sizes for array axes to be mapped:\n" + "\n".join(lines) +
                         "\nAll mapped axes must have the same size; fix in_axes or the argument shapes.")
    if distinct:
        return distinct[0]
    if axis_size is None:
        raise ValueError("vmap must have at least one non-None value in in_axes (or be given axis_size "
                         "when every input is unmapped)")
    return int(axis_size)


def _normalize_in_axis(x, a, name):
    if a is None:
        return None
    if not -x.ndim <= a < x.ndim:
        need = a + 1 if a >= 0 else -a
        raise ValueError(f"vmap was requested to map {name} along axis {a}, which implies that its rank "
                         f"should be at least {need}, but is only {x.ndim} (its type is {_type_text(x)}); "
                         "fix in_axes or pass None for arguments that are not mapped")
    return a % x.ndim


def _apply_out_axis(y, batched, axis, size, where):
    from kiln import lax
    if axis is None:
        if batched:
            raise ValueError(f"vmap has mapped output but out_axes is None (at {where}): the output depends on "
                             "the mapped inputs; give it an out_axes entry, or return an unmapped value there")
        return y
    if not batched:
        y = lax.broadcast_in_dim(y, (size,) + tuple(y.shape), tuple(range(1, y.ndim + 1)))
    rank = y.ndim
    if not -rank <= axis < rank:
        raise ValueError(f"vmap out_axes entry {axis} is out of range for output {where} of rank {rank} "
                         f"(type {_type_text(y)})")
    axis %= rank
    if axis == 0:
        return y
    perm = list(range(1, rank))
    perm.insert(axis, 0)
    return lax.transpose(y, perm)


def _replay_on_batch(traced, frame, arrs, axes, cache):
    """The per-example program replayed on the batch's stacked values, its collectives over the
    vmap's axis_name computed across the batch (as shard_map's program is across a mesh's devices
    in spmd_emulate): (outputs, whether each is batched at axis 0). Called eagerly, the replay is
    one jitted program, cached by the traced program and the inputs' types."""
    from kiln._src import spmd_emulate
    from kiln import numpy as jnp
    builder, flags = traced.builder, []

    def replay(xs, consts):
        ins = [x if a is None else spmd_emulate._Stacked(jnp.moveaxis(x, a, 0)) for x, a in zip(xs, axes)]
        outs = spmd_emulate.run_body(builder, frame, ins, consts, frame=frame.id)
        flags[:] = [isinstance(o, spmd_emulate._Stacked) for o in outs]
        return [o.arr if isinstance(o, spmd_emulate._Stacked) else o for o in outs]
    if core.tracing() or any(isinstance(c, core.Tracer) for c in traced.consts):
        outs = replay(arrs, traced.consts)
        return outs, flags
    key = ("replay", builder.hash(), tuple((x.shape, x.dtype, x.weak_type) for x in arrs), tuple(axes),
           tuple((c.shape, c.dtype) for c in traced.consts))
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = (api.jit(replay), flags)
    return hit[0](list(arrs), list(traced.consts)), hit[1]


def _key_data_axes(axes, tree):
    """Per-leaf axes with a negative axis of a typed key array's data counted from the key's last
    axis (the data's last one holds the two key words)."""
    return [a - 1 if k and a is not None and a < 0 else a for a, k in zip(axes, tree_util.boundary_leaves(tree))]


def vmap(fun, in_axes=0, out_axes=0, axis_name=None, axis_size=None, spmd_axis_name=None):
    """Vectorizes `fun` over the axes `in_axes` of its arguments; results carry the mapped axis
    at `out_axes`. in_axes/out_axes: int, None, or pytree prefixes of the (positional) arguments
    / outputs. Keyword arguments are always mapped over axis 0."""
    if not callable(fun):
        raise TypeError(f"vmap: expected a callable as its first argument, got {type(fun).__name__}")
    _check_axis_leaves("in_axes", in_axes)
    _check_axis_leaves("out_axes", out_axes)
    if axis_size is not None:
        given = axis_size
        try:
            axis_size = operator.index(axis_size)
        except TypeError:
            axis_size = -1
        if axis_size < 0:
            raise ValueError(f"vmap axis_size must be a non-negative int, got {given!r}")
    cache = {}

    def wrapped(*args, **kwargs):
        axes = _in_axes_per_leaf(in_axes, args, kwargs)
        leaves, tree = tree_util.tree_flatten((args, kwargs))
        if any(a is not None and a < 0 for a in axes) and tree_util._boundary_kinds:
            axes = _key_data_axes(axes, tree)
        names = _leaf_names(fun, args, kwargs)
        if len(names) != len(leaves):
            names = [f"leaf {i}" for i in range(len(leaves))]
        # as JAX: an unmapped (in_axes None) leaf reaches fun as it is (a Python int stays an int, usable
        # as a static argument inside; a concrete array stays concrete, so it can be a boolean index:
        # bug, issue 32, it became a tracer and x[mask] raised NonConcreteBooleanIndexError). NumPy
        # arrays become (concrete) Arrays; a tracer of an enclosing trace stays an input.
        static = [a is None and not core.is_tracer(x) for x, a in zip(leaves, axes)]
        if any(static):
            leaves = [core.asarray(x) if st and isinstance(x, (np.ndarray, np.generic)) else x
                      for x, st in zip(leaves, static)]
            keep = [i for i in range(len(leaves)) if not static[i]]

            def with_statics(*dyn):
                vals = list(leaves)
                for i, v in zip(keep, dyn):
                    vals[i] = v
                a, k = tree_util.tree_unflatten(tree, vals)
                return fun(*a, **k)
            return vmap(with_statics, in_axes=tuple(axes[i] for i in keep), out_axes=out_axes, axis_name=axis_name,
                        axis_size=axis_size)(*[leaves[i] for i in keep])
        arrs = [x if isinstance(x, core.Array) else api._leaf_to_array(x, f"vmap {n}") for x, n in zip(leaves, names)]
        axes = [_normalize_in_axis(x, a, n) for x, a, n in zip(arrs, axes, names)]
        size = _batch_size(arrs, axes, names, axis_size)
        per_example = []
        for x, a in zip(arrs, axes):
            shape = tuple(x.shape) if a is None else tuple(x.shape[:a]) + tuple(x.shape[a + 1:])
            per_example.append(_Aval(shape, x.dtype, x.weak_type, x))
        frame = None
        if axis_name is not None:  # collectives may name the batch axis
            from kiln._src import spmd
            frame = spmd.VmapFrame(axis_name, size)
            spmd._axis_stack.append(frame)
        vmap_depth[0] += 1
        try:
            traced = api._trace(fun, None, None, per_example, tree)
        finally:
            vmap_depth[0] -= 1
            if frame is not None:
                spmd._axis_stack.pop()
        from kiln._src import spmd_emulate
        if frame is not None and spmd_emulate.runs_collectives(traced.builder, frame.id):
            outs, out_batched = _replay_on_batch(traced, frame, arrs, axes, cache)
        else:
            prog_axes = [-1 if a is None else a for a in axes] + [-1] * len(traced.consts)
            from kiln._src import primitive
            outer_name, primitive.vmap_axis_name[0] = primitive.vmap_axis_name[0], axis_name
            try:  # (library primitives' batching rules see the axis name)
                batched_builder, out_batched = traced.builder.vmap(prog_axes, size)
            finally:
                primitive.vmap_axis_name[0] = outer_name
            inputs = arrs + list(traced.consts)
            key = (batched_builder.hash(), tuple((x.shape, x.dtype, x.weak_type) for x in inputs))
            outs = _run(batched_builder, inputs, cache, key)
        out = tree_util.tree_unflatten(traced.out_tree, outs)
        if isinstance(out_axes, (int, type(None))):
            out_ax = [out_axes] * len(outs)
        else:
            out_ax = _broadcast_prefix("out_axes", out_axes, out, "the function's output")
        if any(a is not None and a < 0 for a in out_ax) and tree_util._boundary_kinds:
            out_ax = _key_data_axes(out_ax, traced.out_tree)
        res = [_apply_out_axis(y, b, a, size, f"output leaf {i}")
               for i, (y, b, a) in enumerate(zip(outs, out_batched, out_ax))]
        return tree_util.tree_unflatten(traced.out_tree, res)

    functools.update_wrapper(wrapped, fun)  # (fun's attributes too, as JAX's: a Module's fields)
    return wrapped
