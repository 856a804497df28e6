"""Several devices: sharded Arrays, shard_map, pmap, the collectives, and jit's in/out_shardings.

shard_map traces its body once with per-shard shapes (the mesh's axis names bound, so the
collectives resolve them to mesh axes), compiles it once, and launches that one executable once
per device of the mesh (runtime: kl_exec_launch_group; on simulated CPU devices each launch on a
thread of its own, meeting at the collectives in process). The results are assembled per out_specs
into sharded Arrays: a ShardedArray holds one single-device Array per device (its shards) and,
for everything that reads it as an ordinary array (eager ops, jit, printing, NumPy), the gathered
global value, built from the shards when the array is made (the replicated pieces taken from the
copy whose coordinates on the unnamed mesh axes are 0, as JAX's replica 0).

pmap is shard_map over a 1-D mesh of the first n devices (the mapped axis squeezed inside).

Meshes of CPU devices may span processes (after kiln.distributed.initialize): each process runs
the body on its own devices of the mesh, as ranks of one group of every device (runtime: a
kl_span), and the collectives exchange the other processes' data over TCP
(runtime/collective_net.c). Arrays over such a mesh hold this process's shards only (JAX's not
fully addressable arrays): made by make_array_from_callback / make_array_from_single_device_arrays
/ device_put(global value, NamedSharding) in every process; a fully replicated one reads as a
whole (its local replica), others raise when read whole. pmap over every process's devices maps
each process's own slices (its local device count). GPU meshes may span processes too: each
collective's group gets one NCCL communicator (ncclCommInitRank), its id made by the group's first
member and passed to the others through the same inter-process exchange, the first time it meets.

Differentiation inside a body follows JAX's two modes. With check_vma=True (shard_map's default)
every value has a type of the mesh axes it varies over (its vma: inputs vary over the axes their
in_specs name, collectives add or remove axes, other operations take the union of their
operands'); where an operation mixes a value with one that varies over more axes, a `pvary` is
inserted before differentiation (the identity on values, its transpose a psum), and psum is the
invariant psum (its transpose a pvary). So the gradient of a loss with respect to a replicated
parameter is summed over the devices, as in JAX. With check_vma=False, and in pmap (as in JAX),
the "unmapped" rules hold: psum's transpose is psum and nothing is inserted.
"""

import functools
import math
import operator

import numpy as np

from kiln import _kiln
from kiln._src import api, core, tree_util
from kiln._src.core import Array, Tracer, bind1
from kiln._src.thread_state import Cell, Stack

_context_meshes = Stack()  # this thread's `with mesh:` blocks, innermost last
_axis_stack = Stack()      # meshes whose shard_map bodies this thread traces, innermost last


def is_sharding(s):
    from kiln.sharding import NamedSharding
    return isinstance(s, NamedSharding)


# ---------------------------------------------------------------------------------------------------------
# Sharded arrays

_base_buf = _kiln.ArrayBase.__dict__["_buf"]


class ShardedArray(Array):
    """An Array split over the devices of a mesh (a NamedSharding). Reads as an ordinary array (its
    gathered value); its shards are its pieces on each device. The gathered value is made on first
    use (_gather), so shard_map and pmap results that only feed the next shard_map never leave
    their devices; a fully replicated array's is its replica-0 shard itself. Over a mesh that
    spans processes it holds this process's shards only (not fully addressable, as in JAX): it
    reads as a whole only when fully replicated (its local replica); otherwise reading it raises."""
    __slots__ = ("_shards", "_sharding", "_gather")
    _lazy = True  # python/ext/array.c: C asks for _buf before reading it

    @property
    def _buf(self):
        b = _base_buf.__get__(self)
        if b is None:
            g = getattr(self, "_gather", None)
            if g is not None:
                b = g()
                _base_buf.__set__(self, b)
                self._gather = None
        return b

    @_buf.setter
    def _buf(self, v):
        _base_buf.__set__(self, v)

    def block_until_ready(self):
        for a in self._shards.values():
            a.block_until_ready()
        return self

    def is_ready(self):
        return all(a.is_ready() for a in self._shards.values())

    @property
    def sharding(self):
        return self._sharding

    def devices(self):
        return set(self._sharding.device_set)

    @property
    def device(self):
        devs = self.devices()
        if len(devs) == 1:
            return next(iter(devs))
        raise ValueError("Length of devices is greater than 1. Please use `.devices()`.")

    @property
    def committed(self):
        return True

    @property
    def addressable_shards(self):
        """This process's shards (every shard unless the mesh spans processes)."""
        return [s for s in self.global_shards if s.data is not None]

    @property
    def global_shards(self):
        """Every device's shard; those of other processes' devices have data None."""
        from kiln.sharding import Shard
        s = self._sharding
        idx, rid = s.devices_indices_map(self.shape), s._replica_ids(self.ndim)
        return [Shard(d, idx[d], rid[d], self._shards.get(d)) for d in s.mesh.devices.flat]

    @property
    def is_fully_replicated(self):
        return self._sharding.is_fully_replicated

    @property
    def is_fully_addressable(self):
        return self._sharding.mesh._all_local


def global_buf(a):
    """The buffer holding a's whole value (a sharded Array's gathered one)."""
    return a._buf


def _put_host(piece, device):
    """A NumPy array as an Array committed to `device`."""
    from kiln._src.array import from_numpy
    a = from_numpy(np.ascontiguousarray(piece))
    return api._put_leaf(a, device) if device._kind == 1 or len(api._cpus) == 1 else \
        Array(_kiln.transfer(a._buf, 0, device._ordinal), a.shape, a.dtype, a.weak_type)


def _not_addressable(shape, sharding):
    return RuntimeError(
        f"Fetching the value of an Array of shape {tuple(shape)} that spans non-addressable devices (devices of other "
        f"processes: {sharding!r}) is not possible: this process holds only its own pieces. Read them through "
        ".addressable_shards, or make the value fully replicated first (a shard_map with out_specs P() after a psum "
        "or all_gather)")


def _make_sharded(shards, sharding, shape, dtype, weak=False, whole=None):
    """A ShardedArray from {device: Array} (each of the sharding's shard shape; over a mesh that
    spans processes, this process's devices only); whole: an Array already holding the global
    value, else it is gathered from the replica-0 shards (over several processes: a fully
    replicated array's local replica; others cannot be read whole)."""
    gather = None
    local = sharding.mesh._all_local
    if whole is not None and local:
        buf = whole._buf
    elif sharding.is_fully_replicated:  # replica 0 (or this process's first) is the whole value
        buf = shards[next(iter(sharding.mesh.devices.flat)) if local else next(iter(shards))]._buf
    elif not local:
        buf = None

        def gather():
            raise _not_addressable(shape, sharding)
    else:
        buf = None

        def gather():
            host = np.empty(shape, dtype)
            idx, rid = sharding.devices_indices_map(shape), sharding._replica_ids(len(shape))
            for d, a in shards.items():
                if rid[d] == 0:
                    host[idx[d]] = np.asarray(a)
            from kiln._src.array import from_numpy
            return from_numpy(host, weak)._buf
    out = ShardedArray(buf, tuple(shape), np.dtype(dtype), weak)
    out._shards = shards
    out._sharding = sharding
    out._gather = gather
    return out


def _same_layout(s1, s2, ndim):
    """Whether two NamedShardings place an ndim array's pieces alike (P() and P(None) are one)."""
    from kiln.sharding import _spec_axes
    return s1.mesh == s2.mesh and _spec_axes(s1.spec, ndim, s1.mesh) == _spec_axes(s2.spec, ndim, s2.mesh)


def _mesh_span(mesh, what):
    """None when every device of the mesh is this process's; else (ranks, procs) of an SPMD launch
    over it (runtime.h's kl_span): the mesh positions of this process's devices, and per position
    the process that runs it (GPUs of several processes meet through NCCL, CPU devices over TCP)."""
    if mesh._all_local:
        return None
    if mesh._span is None:
        flat = list(mesh.devices.flat)
        ranks = [i for i, d in enumerate(flat) if api._is_local(d)]
        if not ranks:
            from kiln._src import distributed
            raise ValueError(f"{what}: no device of the mesh belongs to this process (process "
                             f"{distributed.global_state.process_id}); every process of a multi-process computation "
                             "runs it on its own devices of the mesh")
        mesh._span = (ranks, [d.process_index for d in flat])
    return mesh._span


def shard_array(a, sharding, what="device_put"):
    """a split over sharding's mesh (device_put(x, NamedSharding(...))); over a mesh that spans
    processes, a holds the global value and this process keeps its own devices' pieces."""
    if getattr(sharding, "mesh", None) is not None:
        _mesh_span(sharding.mesh, what)
    if isinstance(a, Tracer):
        raise NotImplementedError(f"{what}: placing a traced value on a NamedSharding inside jit/grad/vmap is not "
                                  "supported yet by kiln (with_sharding_constraint is the traced form: a no-op)")
    if isinstance(a, ShardedArray) and _same_layout(a._sharding, sharding, a.ndim):
        return a
    shape = tuple(a.shape)
    idx = sharding.devices_indices_map(shape)  # raises when the spec does not fit the shape
    host = np.asarray(a)
    shards = {d: _put_host(host[i], d) for d, i in idx.items() if api._is_local(d)}
    return _make_sharded(shards, sharding, shape, a.dtype, a.weak_type, whole=a)


def make_array_from_callback(shape, sharding, data_callback, dtype=None):
    """An Array of global `shape` whose piece on each device of `sharding` is
    data_callback(index) (index: a tuple of slices into the global array); over a mesh that spans
    processes, called for this process's devices only."""
    shape = tuple(shape)
    if isinstance(sharding, api.SingleDeviceSharding):
        full = tuple(slice(None) for _ in shape)
        return _put_host(np.asarray(data_callback(full), dtype=dtype), sharding.device)
    shard_shape = sharding.shard_shape(shape)
    _mesh_span(sharding.mesh, "make_array_from_callback")
    shards = {}
    for d, i in sharding.addressable_devices_indices_map(shape).items():
        piece = np.asarray(data_callback(i), dtype=dtype)
        if piece.shape != shard_shape:
            raise ValueError(f"make_array_from_callback: the callback returned shape {piece.shape} for device {d} at "
                             f"index {i}; the sharding's pieces of a {shape} array are {shard_shape}")
        shards[d] = _put_host(piece, d)
    dt = next(iter(shards.values())).dtype
    return _make_sharded(shards, sharding, shape, dt)


def make_array_from_single_device_arrays(shape, sharding, arrays, *, dtype=None):
    """An Array of global `shape` from one single-device Array per device of `sharding` (each on
    its device, of the sharding's shard shape); over a mesh that spans processes, one per device
    of this process."""
    shape = tuple(shape)
    arrays = list(arrays)
    if isinstance(sharding, api.SingleDeviceSharding):
        if len(arrays) != 1:
            raise ValueError(f"make_array_from_single_device_arrays: a SingleDeviceSharding takes one array, got "
                             f"{len(arrays)}")
        return arrays[0]
    shard_shape = sharding.shard_shape(shape)
    _mesh_span(sharding.mesh, "make_array_from_single_device_arrays")
    devs = [d for d in sharding.mesh.devices.flat if api._is_local(d)]
    if len(arrays) != len(devs):
        mine = "" if sharding.mesh._all_local else " of this process"
        raise ValueError(f"make_array_from_single_device_arrays: the sharding has {len(devs)} devices{mine} but "
                         f"{len(arrays)} arrays were given; give one per device{mine}")
    shards = {}
    for a in arrays:
        d = a.device
        if d not in sharding.device_set:
            raise ValueError(f"make_array_from_single_device_arrays: an array is on {d!r}, which is not a device of "
                             "the sharding's mesh; device_put each piece on its device first")
        if tuple(a.shape) != shard_shape:
            raise ValueError(f"make_array_from_single_device_arrays: an array has shape {tuple(a.shape)}; the "
                             f"sharding's pieces of a {shape} array are {shard_shape}")
        shards[d] = a
    if len(shards) != len(devs):
        raise ValueError("make_array_from_single_device_arrays: two arrays are on the same device; give one per device")
    return _make_sharded(shards, sharding, shape, arrays[0].dtype)


# ---------------------------------------------------------------------------------------------------------
# Specs

def _is_spec_leaf(s):
    from kiln.sharding import PartitionSpec
    return s is None or isinstance(s, PartitionSpec)


def _same_arity(p, t):
    return len(list(tree_util.flatten_one_level(p)[0])) == len(list(tree_util.flatten_one_level(t)[0]))


def _broadcast_prefix(prefix, tree, is_leaf, what):
    """Per leaf of `tree`, the entry of `prefix` (a tree prefix of it) that covers it."""
    out = []

    def walk(p, t, path):
        if is_leaf(p):
            out.extend([p] * len(tree_util.tree_leaves(t)))
        elif isinstance(p, (tuple, list)) and isinstance(t, (tuple, list)) and len(p) == len(t):
            for k, (pp, tt) in enumerate(zip(p, t)):
                walk(pp, tt, f"{path}[{k}]")
        elif isinstance(p, dict) and isinstance(t, dict) and set(p) == set(t):
            for k in t:
                walk(p[k], t[k], f"{path}[{k!r}]")
        elif type(p) is type(t) and tree_util.is_tree_node(type(p)) and _same_arity(p, t):
            # another registered node (a dataclass, flax nnx's NodeStates): child by child
            for k, (pp, tt) in enumerate(zip(tree_util.flatten_one_level(p)[0], tree_util.flatten_one_level(t)[0])):
                walk(pp, tt, f"{path}[{k}]")
        else:
            raise ValueError(f"{what} must be a tree prefix of the arguments: at {path or 'the top'} it has "
                             f"{type(p).__name__} {p!r}, the arguments {type(t).__name__}; give one entry per "
                             "argument (a PartitionSpec applies to a whole subtree)")
    walk(prefix, tree, "")
    return out


def _leaf_paths(args):
    """Per leaf of args (every registered node looked into), its path for messages: args[0]['w']."""
    return ["args" + tree_util.keystr(path) for path, _ in tree_util.tree_flatten_with_path(args)[0]]


def _spec_parts(spec, ndim, mesh, what):
    from kiln.sharding import _spec_axes
    return [math.prod(mesh.shape[n] for n in names) for names in _spec_axes(spec, ndim, mesh, what)]


# ---------------------------------------------------------------------------------------------------------
# shard_map

_jit_compiling = Cell(0)  # this thread's jit is tracing a function to compile it (a shard_map inside makes it run as written)


class ShardMapInTrace(NotImplementedError):
    """shard_map (or pmap) called while a function is traced; a jit whose function does this runs
    the function as written instead (JitWrapped._call)."""


class _Entry:
    __slots__ = ("exe", "builder", "consts", "dev_consts", "out_tree", "out_avals", "out_specs", "out_shardings",
                 "span")


class ShardMapped:
    """What shard_map returns."""

    def __init__(self, f, mesh, in_specs, out_specs, check_vma=True, axis_names=None, name="shard_map"):
        if not callable(f):
            raise TypeError(f"shard_map: expected a callable, got {type(f).__name__}")
        functools.update_wrapper(self, f)  # first: f's attributes never replace ours
        self._fun, self._mesh, self._in_specs, self._out_specs = f, mesh, in_specs, out_specs
        self._check_vma, self._axis_names, self._name = check_vma, axis_names, name
        self._cache = {}
        self._fast = {}  # argument tree -> (mesh, config generation, entry, per leaf (sharding, shape, dtype, weak), devices)

    def _the_mesh(self):
        mesh = self._mesh if self._mesh is not None else (_context_meshes[-1] if _context_meshes else None)
        if mesh is None:
            raise ValueError(f"{self._name}: no mesh: pass mesh= or call it inside a `with mesh:` block")
        return mesh

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(f"{self._name}: pass the arguments positionally (in_specs describes them in order); got "
                            f"keyword arguments {sorted(kwargs)}")
        mesh = self._the_mesh()
        leaves, tree = tree_util.tree_flatten(args)
        fast = self._fast.get(tree)
        if fast is not None and fast[0] is mesh and fast[1] == core.config_state() and not core.tracing():
            # the arguments are sharded Arrays laid out as last time: their shards go straight in
            entry, want, devs = fast[2], fast[3], fast[4]
            if len(leaves) == len(want) and all(
                    type(x) is ShardedArray and (x._sharding is s or x._sharding == s) and x.shape == sh and
                    x.dtype == dt and x.weak_type == w for x, (s, sh, dt, w) in zip(leaves, want)):
                per = [[x._shards[d]._buf for x in leaves] + consts for d, consts in zip(devs, entry.dev_consts)]
                return self._launch(entry, devs, per)
        span = _mesh_span(mesh, self._name)
        if (any(isinstance(x, Tracer) for x in leaves) or core.tracing()) and not _jit_compiling[0]:
            from kiln._src import spmd_emulate  # grad, vmap, make_jaxpr around it: the mesh's program, traced
            return spmd_emulate.call(self, mesh, args)
        if any(isinstance(x, Tracer) for x in leaves) or core.tracing():
            raise ShardMapInTrace(
                f"{self._name} inside a traced function (grad, vmap, make_jaxpr, a loop body) is not supported yet by "
                f"kiln: call it on concrete arrays and put grad or vmap inside its body (a jit-compiled function "
                f"that calls {self._name} runs as written, its {self._name} calls compiled on their own)")
        paths = _leaf_paths(args)
        specs = _broadcast_prefix(self._in_specs, args, _is_spec_leaf, f"{self._name}: in_specs") if leaves else []
        arrs = [api._leaf_to_array(x, f"{self._name} argument {p}") for x, p in zip(leaves, paths)]
        from kiln.sharding import PartitionSpec
        specs = [PartitionSpec() if s is None else s for s in specs]
        shard_shapes = []
        for a, s, p in zip(arrs, specs, paths):
            parts = _spec_parts(s, a.ndim, mesh, f"{self._name}: in_specs for argument {p} (shape {tuple(a.shape)})")
            for i, (d, k) in enumerate(zip(a.shape, parts)):
                if d % k:
                    raise ValueError(f"{self._name}: argument {p} of shape {tuple(a.shape)} is split along axis {i} "
                                     f"by in_specs {s!r} over {k} devices, which does not divide {d}; make that axis "
                                     f"a multiple of {k} (pad it) or change in_specs")
            shard_shapes.append(tuple(d // k for d, k in zip(a.shape, parts)))
        key = (tree, tuple((sh, a.dtype, a.weak_type) for sh, a in zip(shard_shapes, arrs)), tuple(specs), mesh,
               core.config_state())
        entry = self._cache.get(key)
        if entry is None:
            self._leaf_specs = specs
            entry = self._compile(mesh, tree, arrs, shard_shapes)
            self._cache[key] = entry
        # this process's devices of the mesh (all of them unless it spans processes)
        devs = list(mesh.devices.flat) if span is None else [d for d in mesh.devices.flat if api._is_local(d)]
        per = [[] for _ in devs]
        from kiln.sharding import NamedSharding
        gpus = len(devs) > 1 and devs[0]._kind == 1
        direct = True  # every argument a sharded Array already laid out as in_specs say
        for a, s in zip(arrs, specs):
            want = NamedSharding(mesh, s)
            if all(p is None or p == () for p in s) and not (
                    isinstance(a, ShardedArray) and _same_layout(a._sharding, want, a.ndim)):
                direct = False
                if gpus:  # a copy on each GPU, made here: a participant must not wait on another GPU's queue
                    for row, d in zip(per, devs):
                        row.append(api._put_leaf(a, d)._buf)
                    continue
                if a._buf.device != devs[0]._kind:  # (a NumPy argument went to the default backend)
                    a = api._put_leaf(a, devs[0])
                for row in per:  # replicated: every device reads the one value
                    row.append(a._buf)
                continue
            sa = shard_array(a, want, self._name)
            direct = direct and sa is a
            for row, d in zip(per, devs):
                row.append(sa._shards[d]._buf)
        entry.span = span
        if entry.dev_consts is None:  # the body's constants, on each GPU once (see above); else shared
            entry.dev_consts = [[api._put_leaf(c, d)._buf for c in entry.consts] for d in devs] if gpus else \
                [[c._buf if c._buf.device == devs[0]._kind else api._put_leaf(c, devs[0])._buf
                  for c in entry.consts]] * len(devs)
            entry.out_shardings = []
            for (shape, _, _), s in zip(entry.out_avals, entry.out_specs):
                parts = _spec_parts(s, len(shape), mesh, f"{self._name}: out_specs")
                entry.out_shardings.append((NamedSharding(mesh, s), tuple(d * k for d, k in zip(shape, parts))))
        for row, consts in zip(per, entry.dev_consts):
            row.extend(consts)
        if direct and all(type(a) is ShardedArray for a in arrs):
            self._fast[tree] = (mesh, core.config_state(), entry,
                                [(a._sharding, a.shape, a.dtype, a.weak_type) for a in arrs], devs)
        return self._launch(entry, devs, per)

    def _launch(self, entry, devs, per):
        ords = [d._ordinal for d in devs]
        outs = entry.exe.launch_group(ords, per) if entry.span is None else \
            entry.exe.launch_group(ords, per, entry.span[0], entry.span[1])
        results = []
        for j, ((shape, dtype, weak), (sharding, gshape)) in enumerate(zip(entry.out_avals, entry.out_shardings)):
            shards = {d: Array(outs[p][j], shape, dtype, weak) for p, d in enumerate(devs)}
            results.append(_make_sharded(shards, sharding, gshape, dtype, weak))
        return tree_util.tree_unflatten(entry.out_tree, results)

    def _compile(self, mesh, tree, arrs, shard_shapes, build=True):
        from kiln.sharding import PartitionSpec
        avals = [api.ShapeDtypeStruct(sh, a.dtype, a.weak_type) for sh, a in zip(shard_shapes, arrs)]
        fun = self._fun

        vma = self._check_vma and not callable(self._out_specs)
        name = getattr(fun, "__name__", "f")
        out_specs = self._out_specs

        def body(*a, **k):
            if not vma:
                return fun(*a, **k)
            in_vmas = [_spec_names(s) for s in self._leaf_specs]
            trace = core.current_trace()
            _vma_register(trace, mesh, in_vmas)
            try:
                out = fun(*a, **k)
                _check_out_vma(out, out_specs, name)
            finally:
                _vma_unregister(trace)
            return out
        _axis_stack.append(mesh)
        try:
            traced = api._trace(body, None, None, avals, tree_util.tree_structure((tree_util.tree_unflatten(
                tree, list(range(len(avals)))), {})))
        finally:
            _axis_stack.pop()
        if build:
            from kiln._src import spmd_emulate
            for f in _axis_stack:
                if isinstance(f, VmapFrame) and spmd_emulate.runs_collectives(traced.builder, f.id):
                    raise NotImplementedError(
                        f"{self._name}: a collective over the vmap axis {f.axis_names[0]!r} inside a body that runs "
                        "compiled on the devices (its arguments concrete) is not supported yet by kiln: pass the "
                        "values through the vmapped function's arguments")
        e = _Entry()
        e.builder = traced.builder
        e.exe = traced.builder.compile(next(iter(mesh.devices.flat))._kind, (),  # for the mesh's kind
                                       f"{self._name}({getattr(self._fun, '__name__', 'fun')})") if build else None
        e.consts = traced.consts
        e.dev_consts = None
        e.span = None
        e.out_tree = traced.out_tree
        e.out_avals = traced.out_avals
        outs = tree_util.tree_unflatten(traced.out_tree, list(range(len(traced.out_avals))))
        if callable(self._out_specs):  # (pmap: per result leaf, from out_axes)
            specs = list(self._out_specs())
        else:
            specs = _broadcast_prefix(self._out_specs, outs, _is_spec_leaf, f"{self._name}: out_specs")
        e.out_specs = [PartitionSpec() if s is None else s for s in specs]
        for (shape, _, _), s in zip(e.out_avals, e.out_specs):
            _spec_parts(s, len(shape), mesh, f"{self._name}: out_specs {s!r} for a result of per-device shape "
                        f"{tuple(shape)}")
        return e


def shard_map(f=None, /, *, out_specs, in_specs=None, mesh=None, axis_names=None, check_vma=True, check_rep=None,
              auto=None):
    """Runs f once per device of `mesh` on that device's pieces of the arguments (jax.shard_map):
    in_specs (a tree prefix of the arguments) says how each argument is split over the mesh axes,
    out_specs how the results' per-device pieces make global arrays (an axis not named there is
    replicated: kiln takes the copy of the devices at coordinate 0 on it, without checking).
    Inside f, the collectives (kiln.lax.psum, all_gather, ppermute, ...) name mesh axes.
    check_vma / check_rep are accepted; kiln checks no replication (see the module's docstring for
    the differentiation semantics)."""
    if f is None:
        return lambda g: shard_map(g, out_specs=out_specs, in_specs=in_specs, mesh=mesh, axis_names=axis_names,
                                   check_vma=check_vma, check_rep=check_rep, auto=auto)
    if in_specs is None:
        raise NotImplementedError("shard_map: in_specs=None (inferred from the arguments' shardings) is not supported "
                                  "yet by kiln; give in_specs, one PartitionSpec per argument")
    return ShardMapped(f, mesh, in_specs, out_specs, check_vma if check_rep is None else check_rep, axis_names)


class _Infer:
    def __repr__(self):
        return "Infer"


Infer = _Infer()  # smap's default in_axes: inferred from the arguments' shardings (JAX's Explicit mode)


def _axis_spec(axis, ndim, axis_name, what):
    """The PartitionSpec mapping axis `axis` of an ndim array over mesh axis axis_name (None: P())."""
    from kiln.sharding import PartitionSpec as P
    if axis is None:
        return P()
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"smap: {what} entries must be int or None, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"smap: {what} {axis} is out of range for an array of {ndim} dimension(s)")
    return P(*([None] * (int(axis) % ndim)), axis_name)


def smap(f=None, /, *, in_axes=Infer, out_axes, axis_name):
    """jax.smap: shard_map of f over the one mesh axis axis_name of the context mesh (jax.set_mesh /
    use_mesh / `with mesh:`), each argument split along its in_axes entry (None: every instance
    reads it whole), each result joined along its out_axes entry (None: one instance's copy). The
    mesh's other axes are not split (kiln computes the same instance on each of their devices,
    where JAX leaves them to its partitioner; the values are the same)."""
    if f is None:
        return lambda g: smap(g, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name)
    if not callable(f):
        raise TypeError(f"smap: expected a callable, got {type(f).__name__}")

    @functools.wraps(f)
    def mapped(*args, **kwargs):
        if kwargs:
            raise TypeError(f"smap: pass the arguments positionally (in_axes describes them in order); got keyword "
                            f"arguments {sorted(kwargs)}")
        if in_axes is Infer:
            raise NotImplementedError("smap: in_axes inferred from the arguments' shardings (JAX's Explicit mode) is not "
                                      "supported by kiln; give in_axes (an int, None, or one entry per argument)")
        axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if len(axes) != len(args):
            raise ValueError(f"smap: in_axes has {len(axes)} entries for {len(args)} positional arguments")
        none_leaf = lambda x: x is None  # noqa: E731  (None maps no axis: a leaf here)
        per_leaf = tree_util.tree_leaves(tree_util.tree_broadcast(list(axes), list(args), is_leaf=none_leaf),
                                         is_leaf=none_leaf)
        leaves, treedef = tree_util.tree_flatten(list(args))
        specs = [_axis_spec(a, np.ndim(x), axis_name, "in_axes") for a, x in zip(per_leaf, leaves)]
        in_specs = tuple(treedef.unflatten(specs))
        def out_spec(a):  # the results' ranks are not known before tracing: axes counted from the front
            if isinstance(a, (int, np.integer)) and not isinstance(a, bool) and a < 0:
                raise NotImplementedError("smap: negative out_axes are not supported yet by kiln; give the axis "
                                          "counted from the front")
            return _axis_spec(a, (a + 1) if isinstance(a, (int, np.integer)) else 0, axis_name, "out_axes")
        out_specs = tree_util.tree_map(out_spec, out_axes, is_leaf=none_leaf)
        return shard_map(f, mesh=None, in_specs=in_specs, out_specs=out_specs, axis_names={axis_name})(*args)

    return mapped


# ---------------------------------------------------------------------------------------------------------
# pmap

class PmapWrapped:
    """What pmap returns: shard_map over a 1-D mesh of the first n devices, the mapped axis squeezed."""

    def __init__(self, fun, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices, axis_size):
        functools.update_wrapper(self, fun)  # first: fun's attributes never replace ours
        self._fun, self._axis_name, self._in_axes, self._out_axes = fun, axis_name, in_axes, out_axes
        sb = static_broadcasted_argnums
        self._static = (sb,) if isinstance(sb, int) else tuple(sb)
        self._devices, self._axis_size = devices, axis_size
        self._cache = {}

    def __call__(self, *args, **kwargs):
        if kwargs:  # mapped along their axis 0, as JAX's pmap maps keyword arguments
            return self._with_kwargs(tuple(sorted(kwargs)))(*args, *[kwargs[k] for k in sorted(kwargs)])
        out, n = self._run(args)
        if n == 1:  # one device: its results are plain arrays (JAX's are one Array type, whatever the sharding)
            out = tree_util.tree_map(lambda r: Array(r._buf, r.shape, r.dtype, r.weak_type)
                                     if isinstance(r, ShardedArray) else r, out)
        return out

    def lower(self, *args, **kwargs):
        """pmap(f).lower(*args): the program for these arguments (as_text()), compiled by compile()
        into a function of the same arguments (as JAX's ahead-of-time pmap)."""
        if kwargs:
            names = tuple(sorted(kwargs))
            return self._with_kwargs(names).lower(*args, *[kwargs[k] for k in names])
        return _PmapLowered(self, args)

    def _run(self, args):
        """(results, mapped size) of a call on positional args."""
        nargs = len(args)
        static = {i % nargs if nargs else i for i in self._static}
        for i in static:
            api._hashable_static(args[i], f"at position {i}")
        dyn = [a for i, a in enumerate(args) if i not in static]
        statics = tuple((i, args[i]) for i in sorted(static))
        in_axes = self._in_axes
        if isinstance(in_axes, list):
            in_axes = tuple(in_axes)
        if isinstance(in_axes, tuple) and len(in_axes) == nargs and static:
            in_axes = tuple(a for i, a in enumerate(in_axes) if i not in static)
        dyn = tuple(dyn)
        axes = _broadcast_prefix(in_axes, dyn, lambda v: v is None or isinstance(v, int), "pmap: in_axes")
        leaves = tree_util.tree_leaves(dyn)
        for x, ax in zip(leaves, axes):
            if ax is not None and not -np.ndim(x) <= ax < max(np.ndim(x), 1) or (ax is not None and np.ndim(x) == 0):
                raise ValueError(f"pmap was requested to map its argument along axis {ax}, which implies that its rank "
                                 f"should be at least {(ax if ax >= 0 else -ax - 1) + 1}, but is only {np.ndim(x)} "
                                 f"(its shape is {np.shape(x)})")
        sizes = {np.shape(x)[ax] for x, ax in zip(leaves, axes) if ax is not None}
        if len(sizes) > 1:
            raise ValueError(f"pmap got inconsistent sizes for array axes to be mapped: {sorted(sizes)}; every mapped "
                             "argument needs the same extent on its in_axes axis")
        if not sizes:
            if self._axis_size is None:
                raise ValueError("pmap: no argument is mapped (every in_axes is None); give axis_size")
            sizes = {self._axis_size}
        n = sizes.pop()
        devs = list(self._devices) if self._devices is not None else api.devices()
        local = [d for d in devs if api._is_local(d)]
        if len(local) < len(devs):
            return self._call_multiprocess(statics, n, axes, devs, local, dyn, leaves), n
        if n > len(devs):
            raise ValueError(f"compiling computation that requires {n} logical devices, but only {len(devs)} devices "
                             f"are available (num_replicas={n}); with simulated CPU devices set "
                             f"KILN_NUM_CPU_DEVICES={n} or more before importing kiln")
        key = (statics, n, tuple(axes), tuple(id(d) for d in devs[:n]))
        sm = self._cache.get(key)
        if sm is None:
            sm = self._shard_map(statics, n, axes, devs[:n], dyn)
            self._cache[key] = sm
        return sm(*[api._leaf_to_array(x) for x in leaves]), n

    def _with_kwargs(self, names):
        """This pmap of fun(*args, **dict(zip(names, rest))), the keyword arguments appended as mapped
        positional ones (one wrapper per set of names)."""
        cache = self.__dict__.setdefault("_kw_wrappers", {})
        w = cache.get(names)
        if w is None:
            fun, k = self._fun, len(names)

            def positional(*args):
                return fun(*args[:len(args) - k], **dict(zip(names, args[len(args) - k:])))
            in_axes = self._in_axes
            if isinstance(in_axes, (tuple, list)):
                in_axes = tuple(in_axes) + (0,) * k
            w = cache[names] = PmapWrapped(positional, self._axis_name, in_axes, self._out_axes, self._static,
                                           self._devices, self._axis_size)
        return w

    def _call_multiprocess(self, statics, n, axes, devs, local, dyn, leaves):
        """pmap over the devices of several processes (as JAX's multi-process pmap): each process
        gives the slices for its own devices (mapped axes of its local device count), the body
        runs on every device, the collectives span the processes; a mapped result is this
        process's slices (an Array on the host), an unmapped one (out_axes None) the replicated
        value."""
        if n != len(local):
            raise ValueError(f"pmap over the devices of {len({d.process_index for d in devs})} processes: each process "
                             f"maps over its own {len(local)} device(s), so the mapped axes must have extent "
                             f"{len(local)} (this process's slices), not {n}")
        key = (statics, "multiprocess", tuple(axes), tuple(id(d) for d in devs))
        sm = self._cache.get(key)
        if sm is None:
            sm = self._shard_map(statics, len(devs), axes, devs, dyn)
            self._cache[key] = sm
        from kiln.sharding import NamedSharding, PartitionSpec
        mesh, name = sm._mesh, sm._mesh.axis_names[0]
        args = []
        for x, ax in zip(leaves, axes):
            x = api._leaf_to_array(x)
            if ax is None:
                args.append(x)
                continue
            host = np.asarray(x)
            gshape = host.shape[:ax] + (len(devs),) + host.shape[ax + 1:]
            shards = {d: _put_host(np.take(host, [k], axis=ax), d) for k, d in enumerate(local)}
            sh = NamedSharding(mesh, PartitionSpec(*([None] * ax + [name])))
            args.append(_make_sharded(shards, sh, gshape, host.dtype, x.weak_type))
        out = sm(*args)

        def mine(r):
            spec = tuple(r._sharding.spec)
            if name not in spec:
                return r  # replicated: readable whole
            ax = spec.index(name)
            from kiln._src.array import from_numpy
            return from_numpy(np.concatenate([np.asarray(r._shards[d]) for d in local], axis=ax), r.weak_type)
        return tree_util.tree_map(mine, out)

    def _shard_map(self, statics, n, axes, devs, dyn):
        from kiln.sharding import Mesh, PartitionSpec
        name = self._axis_name if self._axis_name is not None else "_pmap_axis"
        mesh = Mesh(np.array(devs, dtype=object), (name,))
        tree = tree_util.tree_structure(dyn)
        fun, out_axes, nargs = self._fun, self._out_axes, len(dyn) + len(statics)
        in_specs = tuple(PartitionSpec() if ax is None else PartitionSpec(*([None] * ax + [name])) for ax in axes)
        from kiln import numpy as jnp

        def body(*leaves):
            leaves = [x if ax is None else jnp.squeeze(x, ax) for x, ax in zip(leaves, axes)]
            d = list(tree_util.tree_unflatten(tree, leaves))
            full, it = [], iter(d)
            st = dict(statics)
            for i in range(nargs):
                full.append(st[i] if i in st else next(it))
            out = fun(*full)
            oaxes = _broadcast_prefix(out_axes, out, lambda v: v is None or isinstance(v, int), "pmap: out_axes")
            ol, otree = tree_util.tree_flatten(out)
            ol = [o if ax is None else jnp.expand_dims(o, ax if ax >= 0 else ax + np.ndim(o) + 1) for o, ax in zip(ol, oaxes)]
            body.out_specs = [PartitionSpec() if ax is None else
                              PartitionSpec(*([None] * (ax if ax >= 0 else ax + np.ndim(o)) + [name]))
                              for o, ax in zip(ol, oaxes)]
            return tree_util.tree_unflatten(otree, ol)

        # out_specs: per result leaf, known from out_axes once the body has been traced
        return ShardMapped(body, mesh, in_specs, lambda: body.out_specs, name="pmap")


class _PmapLowered(api.Lowered):
    """pmap(f).lower(*args): as_text() shows the per-device program; compile() gives the call (a
    jax.stages.Lowered / Compiled, as libraries' type hints ask)."""

    def __init__(self, wrapped, args):  # (not Lowered's: no jit behind it)
        self._wrapped, self._args = wrapped, args

    def as_text(self):
        w, args = self._wrapped, self._args
        static = {i % len(args) if args else i for i in w._static}
        in_axes = w._in_axes
        if isinstance(in_axes, (list, tuple)) and len(in_axes) == len(args) and static:
            in_axes = tuple(a for i, a in enumerate(in_axes) if i not in static)
        dyn = tuple(a for i, a in enumerate(args) if i not in static)
        axes = _broadcast_prefix(tuple(in_axes) if isinstance(in_axes, list) else in_axes, dyn,
                                 lambda v: v is None or isinstance(v, int), "pmap: in_axes")
        leaves, tree = tree_util.tree_flatten(dyn)
        from kiln import numpy as jnp
        one = tree_util.tree_unflatten(tree, [x if ax is None else jnp.take(api._leaf_to_array(x), 0, axis=ax)
                                              for x, ax in zip(leaves, axes)])
        it = iter(one)
        full = [args[i] if i in static else next(it) for i in range(len(args))]
        return str(api.make_jaxpr(w._fun, static_argnums=tuple(sorted(static)))(*full))

    def compile(self, compiler_options=None):
        """The pmapped function (it compiles at its first call of a signature)."""
        del compiler_options  # (XLA's flags: kiln's compiler takes none)
        return _PmapCompiled(self._wrapped)


class _PmapCompiled(api.Compiled):
    def __init__(self, wrapped):  # (not Compiled's: no jit behind it)
        self._pmap = wrapped

    def __call__(self, *args, **kwargs):
        return self._pmap(*args, **kwargs)


def pmap(fun=None, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(), devices=None,
         backend=None, axis_size=None, donate_argnums=(), global_arg_shapes=None):
    """Maps fun over the leading (in_axes) axis of its arguments, one slice per device
    (jax.pmap): jit of shard_map over a 1-D mesh of the first n devices (as JAX >= 0.8), the
    collectives naming axis_name."""
    if fun is None:
        return lambda f: pmap(f, axis_name, in_axes=in_axes, out_axes=out_axes,
                              static_broadcasted_argnums=static_broadcasted_argnums, devices=devices,
                              backend=backend, axis_size=axis_size, donate_argnums=donate_argnums)
    return PmapWrapped(fun, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices, axis_size)


# ---------------------------------------------------------------------------------------------------------
# jit with shardings (kiln's conservative rule)

class ShardedJit:
    """jit(f, in_shardings=..., out_shardings=..., device=...): with NamedShardings over one mesh
    (asked or the arguments'), f is partitioned over it (partition.py: sharding propagation, one
    piece per device, collectives where needed); otherwise (or with device=, or for programs with
    control flow or callbacks) f runs on the arguments' gathered values on one device and its
    results are placed by out_shardings."""

    def __init__(self, wrapped, in_shardings, out_shardings, device):
        self._wrapped, self._in, self._out, self._device = wrapped, in_shardings, out_shardings, device
        for s in tree_util.tree_leaves(in_shardings) + tree_util.tree_leaves(out_shardings):
            if not (is_sharding(s) or isinstance(s, (api.SingleDeviceSharding, api.Device))):
                raise TypeError(f"jit: in_shardings/out_shardings entries must be shardings (NamedSharding, "
                                f"SingleDeviceSharding) or devices, got {type(s).__name__}")
        functools.update_wrapper(self, wrapped._fun)

    def __call__(self, *args, **kwargs):
        if self._device is None:
            from kiln._src import partition
            out = partition.call(self._wrapped, self._in, self._out, args, kwargs)
            if out is not partition.FALLBACK:
                return out
        if self._device is not None:
            args, kwargs = api.device_put((args, kwargs), self._device)
        out = self._wrapped(*args, **kwargs)
        if self._out is None or core.tracing():
            return out
        return api.device_put(out, self._out)

    def lower(self, *args, **kwargs):
        return self._wrapped.lower(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# Collectives

def _names(axis_name):
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


class VmapFrame:
    """The axis of a vmap with an axis_name while its function is traced (batching.py): a mesh of
    one axis, its size the batch's, whose collectives carry `frame` (the vmap replays them on the
    batch)."""
    def __init__(self, name, size):
        # numbered by depth (1 + the vmap frames around it): a program traced again gets the same
        self.id = 1 + sum(isinstance(f, VmapFrame) for f in _axis_stack)
        self.axis_names = (name,)
        self.axis_sizes = (size,)


def _visible_frames():
    """The frames whose axes collectives may name, innermost first: every vmap's and the innermost
    mesh's (a mesh hides the meshes outside it: its body is a program of its own; not the vmaps:
    a body traced inside a vmap is replayed there)."""
    out, mesh_seen = [], False
    for f in reversed(_axis_stack):
        if not isinstance(f, VmapFrame):
            if mesh_seen:
                continue
            mesh_seen = True
        out.append(f)
    return out


def _resolve(axis_name, what):
    """(mesh, params naming the mesh axes) for a collective over axis_name: the innermost visible
    frame (vmap axis or mesh) naming its first axis."""
    names = _names(axis_name)
    frames = _visible_frames()
    visible = [n for f in frames for n in f.axis_names]
    mesh = next((f for f in frames if names and names[0] in f.axis_names), None)
    if isinstance(mesh, VmapFrame):
        for n in names:
            if n not in mesh.axis_names:
                if n in visible:
                    raise NotImplementedError(f"{what}: a collective over the axes {names!r} of different vmaps or of "
                                              "a vmap and a mesh is not supported yet by kiln: reduce over one at a "
                                              "time")
                raise NameError(f"unbound axis name: {n}. The following axis names (e.g. defined by pmap, shard_map "
                                f"or vmap) are available to collective operations: {visible}")
        return mesh, {"mesh_shape": tuple(mesh.axis_sizes), "axes": (0,), "frame": mesh.id}
    known = list(mesh.axis_names) if mesh is not None else []
    for n in names:
        if n in visible and n not in known:
            raise NotImplementedError(f"{what}: a collective over the axes {names!r} of different vmaps or of a "
                                      "vmap and a mesh is not supported yet by kiln: reduce over one at a time")
        if n not in known:
            raise NameError(f"unbound axis name: {n}. The following axis names (e.g. defined by pmap, shard_map or "
                            f"vmap) are available to collective operations: {visible} ({what} runs only inside a "
                            "shard_map or pmap body over a mesh with that axis, or a vmap with that axis_name)")
    axes = sorted(known.index(n) for n in names)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{what}: axis_name {axis_name!r} names a mesh axis twice")
    return mesh, {"mesh_shape": tuple(mesh.axis_sizes), "axes": tuple(axes)}


def _group_size(mesh, params):
    return params.get("group_size") or math.prod(mesh.axis_sizes[i] for i in params["axes"])


def _traced(x, params):
    """x as a value of the body's trace (a constant made per-device by adding 0 * axis_index)."""
    x = core.asarray(x) if not isinstance(x, Array) else x
    if isinstance(x, Tracer):
        return x
    idx = bind1("axis_index", [], {k: v for k, v in params.items() if k not in ("groups", "group_size")})
    from kiln import lax
    return lax.add(x, lax.convert_element_type(lax.mul(idx, 0), x.dtype)) if x.ndim == 0 else \
        lax.add(x, lax.broadcast(lax.convert_element_type(lax.mul(idx, 0), x.dtype), x.shape))


def _with_groups(axis_index_groups, axis_name, mesh, params, what):
    """params with JAX's axis_index_groups: lists of positions along axis_name that each run the
    collective apart (e.g. [[0, 1], [2, 3]] over an axis of 4); None: params themselves."""
    if axis_index_groups is None:
        return params
    try:
        groups = [[operator.index(i) for i in g] for g in axis_index_groups]
    except TypeError:
        raise TypeError(f"{what}: axis_index_groups must be a list of lists of int positions, got "
                        f"{axis_index_groups!r}") from None
    n = _group_size(mesh, params)
    flat = [i for g in groups for i in g]
    if sorted(flat) != list(range(n)):
        raise ValueError(f"{what}: axis_index_groups must cover all indices exactly once: the {n} positions 0..{n - 1} "
                         f"along {axis_name!r}, got {axis_index_groups!r}")
    sizes = sorted({len(g) for g in groups})
    if len(sizes) != 1:
        raise NotImplementedError(f"{what}: axis_index_groups of different sizes {sizes} are not supported by kiln "
                                  "(JAX needs one size on TPUs and for all_gather too); split into groups of one size")
    return {**params, "groups": tuple(flat), "group_size": sizes[0]}


def _frame_parts(axis_name):
    """axis_name's names split by the frame naming each, innermost first, when they span more
    than one frame; else None."""
    names = _names(axis_name)
    parts = [p for p in (tuple(n for n in names if n in f.axis_names) for f in _visible_frames()) if p]
    return parts if len(parts) > 1 and sum(map(len, parts)) == len(names) else None


def _reduce(prim, what):
    def fn(x, axis_name, *, axis_index_groups=None):
        parts = _frame_parts(axis_name)
        if parts is not None:  # over a vmap's axis and a mesh's (or two vmaps'): one after the other
            if axis_index_groups is not None:
                raise NotImplementedError(f"{what}: axis_index_groups over the axes of both a vmap and a mesh (or "
                                          "two vmaps) is not supported yet by kiln")
            for names in parts:
                x = fn(x, names)
            return x
        mesh, params = _resolve(axis_name, what)
        params = _with_groups(axis_index_groups, axis_name, mesh, params, what)

        def one(v):
            if prim == "psum" and not isinstance(v, Tracer) and isinstance(v, (int, float)):
                return v * _group_size(mesh, params)  # psum(1, 'i') is the axis size, as in JAX
            typed = _vma_active() and not isinstance(mesh, VmapFrame)
            if typed:
                have = _vma_of(v)
                if have is not None and not (have & _axes_names(mesh, params)):
                    # the same on every device of the group (typed invariant): no communication
                    return v * _group_size(mesh, params) if prim == "psum" else v
            p = {**params, "invariant": 1} if prim == "psum" and typed else params
            return bind1(prim, [_traced(v, p)], p)
        return tree_util.tree_map(one, x)
    fn.__name__ = what
    return fn


psum = _reduce("psum", "psum")
pmax = _reduce("pmax", "pmax")
pmin = _reduce("pmin", "pmin")


def pmean(x, axis_name, *, axis_index_groups=None):
    """psum(x) / the number of devices along axis_name."""
    parts = _frame_parts(axis_name)
    if parts is not None:
        return tree_util.tree_map(lambda v: psum(v, axis_name, axis_index_groups=axis_index_groups) /
                                  axis_size(axis_name), x)
    mesh, params = _resolve(axis_name, "pmean")
    n = _group_size(mesh, _with_groups(axis_index_groups, axis_name, mesh, params, "pmean"))
    return tree_util.tree_map(lambda v: psum(v, axis_name, axis_index_groups=axis_index_groups) / n, x)


def axis_index(axis_name):
    """This device's index along axis_name (several names: row-major over them), int32."""
    _, params = _resolve(axis_name, "axis_index")
    return bind1("axis_index", [], params)


def axis_size(axis_name):
    """The number of devices along axis_name (a Python int)."""
    parts = _frame_parts(axis_name)
    if parts is not None:
        return math.prod(axis_size(names) for names in parts)
    mesh, params = _resolve(axis_name, "axis_size")
    return _group_size(mesh, params)


def _norm_axis(a, ndim, what):
    if not -ndim <= a < ndim:
        raise ValueError(f"{what}: axis {a} is out of range for rank {ndim}")
    return a % ndim


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False, to="varying"):
    """Every device's x along `axis` (tiled: concatenated; else stacked on a new axis). to:
    "varying" (JAX's default: the result typed varying over axis_name under check_vma) or
    "invarying" (typed the same on every device, its transpose each device's slice)."""
    if to not in ("varying", "invarying", "reduced"):
        raise ValueError(f"all_gather: got unexpected `to` value {to!r}; allowed values are 'varying', 'invarying' "
                         "and 'reduced'")
    if to == "reduced" or (to == "invarying" and axis_index_groups is not None):
        raise NotImplementedError(f"all_gather(to={to!r}"
                                  f"{', axis_index_groups=...' if to == 'invarying' else ''}) is not supported "
                                  "(by kiln, as by JAX for the groups)")
    mesh, params = _resolve(axis_name, "all_gather")
    params = _with_groups(axis_index_groups, axis_name, mesh, params, "all_gather")
    if to == "invarying":
        params = {**params, "invariant": 1}

    def one(v):
        v = _traced(v, params)
        a = _norm_axis(axis, v.ndim if tiled else v.ndim + 1, "all_gather")
        return bind1("all_gather", [v], {**params, "axis": a, "tiled": int(bool(tiled))})
    return tree_util.tree_map(one, x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    """psum, each device keeping its piece along scatter_dimension (tiled: a 1/n slice; else the
    axis of extent n is removed)."""
    mesh, params = _resolve(axis_name, "psum_scatter")
    params = _with_groups(axis_index_groups, axis_name, mesh, params, "psum_scatter")

    def one(v):
        v = _traced(v, params)
        a = _norm_axis(scatter_dimension, v.ndim, "psum_scatter")
        return bind1("reduce_scatter", [v], {**params, "axis": a, "tiled": int(bool(tiled))})
    return tree_util.tree_map(one, x)


def ppermute(x, axis_name, perm):
    """Sends each device's x along the (source, destination) pairs of perm (positions along
    axis_name); a device no pair sends to gets zeros."""
    mesh, params = _resolve(axis_name, "ppermute")
    n = _group_size(mesh, params)
    flat = []
    for pair in perm:
        s, d = (int(v) for v in pair)
        if not (0 <= s < n and 0 <= d < n):
            raise ValueError(f"ppermute: the pair ({s}, {d}) of perm is out of range for the {n} devices along "
                             f"{axis_name!r}")
        flat.extend((s, d))
    return tree_util.tree_map(lambda v: bind1("ppermute", [_traced(v, params)], {**params, "perm": tuple(flat)}), x)


def pshuffle(x, axis_name, perm):
    """ppermute with the permutation as sources: the result at position i along axis_name is x
    of position perm[i] (every position once)."""
    perm = [operator.index(p) for p in perm]
    if sorted(perm) != list(range(len(perm))):
        raise ValueError(f"pshuffle: `perm` does not represent a permutation: {perm}")
    return ppermute(x, axis_name, list(zip(perm, range(len(perm)))))


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
    """Swaps the mapped axis axis_name with x's axis `axis` (whose extent must be the group
    size): all_to_all(x, axis_name, axis, axis)."""
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    """Splits x along split_axis into one chunk per device, sends chunk j to device j, and joins
    what arrives along concat_axis (tiled=False: split_axis must be n long; it is removed and a
    new axis of n inserted at concat_axis)."""
    mesh, params = _resolve(axis_name, "all_to_all")
    params = _with_groups(axis_index_groups, axis_name, mesh, params, "all_to_all")
    n = _group_size(mesh, params)

    def one(v):
        v = _traced(v, params)
        s = _norm_axis(split_axis, v.ndim, "all_to_all")
        if tiled:
            c = _norm_axis(concat_axis, v.ndim, "all_to_all")
            return bind1("all_to_all", [v], {**params, "axis": s, "concat_axis": c})
        if v.shape[s] != n:
            raise ValueError(f"all_to_all: with tiled=False, split_axis {split_axis} must have the group size {n}, "
                             f"but the operand's shape is {tuple(v.shape)}")
        c = _norm_axis(concat_axis, v.ndim, "all_to_all")
        y = bind1("all_to_all", [v], {**params, "axis": s, "concat_axis": s})
        from kiln import numpy as jnp
        return jnp.moveaxis(y, s, c)
    return tree_util.tree_map(one, x)


def pbroadcast(x, axis_name, source):
    """Every device along axis_name gets the x of device `source`."""
    mesh, params = _resolve(axis_name, "pbroadcast")
    g = all_gather(x, axis_name)
    return tree_util.tree_map(lambda v: v[source], g)


def pvary(x, axis_name):
    """x, marked as varying over axis_name (check_vma's typing: the identity on values, its
    transpose a psum). Outside a check_vma=True body: x itself."""
    if not _vma_active():
        return x
    mesh, params = _resolve(axis_name, "pvary")
    if isinstance(mesh, VmapFrame):  # (vma typing follows meshes' axes only)
        return x
    names = frozenset(_names(axis_name))

    def one(v):
        if not isinstance(v, Tracer):
            v = _traced(v, params)
        have = _vma_of(v) or frozenset()
        add = names - have
        return _bind_pvary(v, add, mesh) if add else v
    return tree_util.tree_map(one, x)


def pcast(x, axis_name, *, to=None):
    """jax.lax.pcast: to='varying' is pvary; other targets leave x as it is (kiln tracks no
    other manual axis types)."""
    return pvary(x, axis_name) if to in (None, "varying") else x


# ---------------------------------------------------------------------------------------------------------
# check_vma typing: which mesh axes each value of a shard_map body (or of a trace inside one) varies over

class _VmaScope:
    __slots__ = ("trace", "mesh", "in_vmas", "vma", "ninputs", "neqns")


_vma_scopes = {}  # id(Trace) -> _VmaScope, for the live traces of check_vma=True bodies and of grads inside


def _vma_register(trace, mesh, in_vmas):
    sc = _VmaScope()
    sc.trace, sc.mesh, sc.in_vmas = trace, mesh, [frozenset(v) for v in in_vmas]
    sc.vma, sc.ninputs, sc.neqns = {}, 0, 0
    _vma_scopes[id(trace)] = sc


def _vma_unregister(trace):
    _vma_scopes.pop(id(trace), None)


def _vma_active():
    t = core.current_trace()
    return t is not None and id(t) in _vma_scopes


def _spec_names(spec):
    return frozenset(n for p in spec if p is not None for n in ((p,) if isinstance(p, str) else p))


def _axes_names(mesh, params):
    return frozenset(mesh.axis_names[i] for i in params["axes"])


_VMA_REMOVE = ("psum", "pmax", "pmin")
_VMA_ADD = ("all_gather", "reduce_scatter", "ppermute", "all_to_all", "pvary")


def _vma_rule(prim, in_vmas, params, mesh):
    """The vma of an equation's results from its operands' (JAX's rules; control flow and calls:
    the union, which may call a value varying that JAX's typed bodies would find invariant)."""
    if prim in _VMA_REMOVE or (prim == "all_gather" and params.get("invariant")):
        return in_vmas[0] - _axes_names(mesh, params)
    if prim in _VMA_ADD:
        return in_vmas[0] | _axes_names(mesh, params)
    if prim == "axis_index":
        return _axes_names(mesh, params)
    return frozenset().union(*in_vmas) if in_vmas else frozenset()


def _scope_update(sc):
    """Brings sc.vma up to the equations traced so far."""
    ids = sc.trace.input_ids()
    if len(ids) > sc.ninputs:
        consts = sc.trace.consts
        nreg = len(sc.in_vmas)
        for i in range(sc.ninputs, len(ids)):
            if i < nreg:
                sc.vma[ids[i]] = sc.in_vmas[i]
            else:  # a value lifted from an enclosing trace, or a constant
                sc.vma[ids[i]] = _vma_of(consts[i - nreg]) or frozenset()
        sc.ninputs = len(ids)
    eqs = sc.trace.equations(sc.neqns)
    for prim, ins, outs, params in eqs:
        v = _vma_rule(prim, [sc.vma.get(i, frozenset()) for i in ins], params, sc.mesh)
        for o in outs:
            sc.vma[o] = v
    sc.neqns += len(eqs)


def _vma_of(x):
    """The mesh axes x varies over; frozenset() for a constant; None when x belongs to a trace
    with no check_vma typing."""
    if not isinstance(x, Tracer):
        return frozenset()
    sc = _vma_scopes.get(id(x._trace))
    if sc is None:
        return None
    _scope_update(sc)
    return sc.vma.get(x._vid, frozenset())


def _pvary_params(mesh, names):
    return {"mesh_shape": tuple(mesh.axis_sizes), "axes": tuple(sorted(mesh.axis_names.index(n) for n in names))}


def _bind_pvary(v, names, mesh):
    return bind1("pvary", [v], _pvary_params(mesh, names))


def _check_out_vma(out, out_specs, name):
    """JAX's check: a result whose out_spec leaves a mesh axis unnamed (replicated over it) must not
    vary over that axis."""
    leaves = tree_util.tree_leaves(out)
    specs = _broadcast_prefix(out_specs, out, _is_spec_leaf, "shard_map: out_specs") if leaves else []
    for i, (o, s) in enumerate(zip(leaves, specs)):
        v = _vma_of(o)
        if not v:
            continue
        from kiln.sharding import PartitionSpec
        extra = v - _spec_names(PartitionSpec() if s is None else s)
        if extra:
            raise ValueError(
                f"shard_map applied to the function {name!r} was given out_specs which require replication which "
                f"can't be statically inferred given the mesh axis names: result {i} (out_spec {s!r}) varies over "
                f"the mesh axes {sorted(extra)}. Name them in its out_spec, reduce over them first (psum, pmean, "
                "all_gather), or pass check_vma=False.")


def vma_nest(outer, trace, in_leaves):
    """A trace started inside a typed one (vmap, jit, grad, checkpoint... inside a check_vma=True
    body) is typed too, its inputs by the values they come from. Returns whether it was."""
    sc = _vma_scopes.get(id(outer))
    if sc is None:
        return False
    _vma_register(trace, sc.mesh, _vmas_of(in_leaves))
    return True


def _vmas_of(values):
    """Each value's vma (a batching aval's: that of the value it stands for; untyped: none)."""
    out = []
    for a in values:
        v = _vma_of(getattr(a, "vma_src", a))
        out.append(frozenset() if v is None else v)
    return out


def vma_inputs(arrs):
    """Per input of a differentiation inside a check_vma=True body: the axes it varies over; None
    when no such body is being traced (nothing to do)."""
    return _vmas_of(arrs) if _vma_active() else None


def insert_pvary(traced, arrs, in_vmas):
    """traced (a program of inputs arrs, in_vmas their vma) with a pvary before every operand an
    equation reads that varies over fewer mesh axes than the equation's result (and before a
    collective's operand that does not vary over its axes), as JAX's check_vma typing inserts them;
    the program itself when none is needed."""
    mesh = _vma_scopes[id(core.current_trace())].mesh
    b = traced.builder
    ids = b.inputs()
    nreg = len(in_vmas)
    base = {vid: (in_vmas[i] if i < nreg else (_vma_of(traced.consts[i - nreg]) or frozenset()))
            for i, vid in enumerate(ids)}
    eqs = b.equations()

    def plan(vma):
        """Per equation, the axes to add to each operand (None: nothing)."""
        adds, any_ = [], False
        for prim, ins, outs, params in eqs:
            iv = [vma.get(i, frozenset()) for i in ins]
            if prim in _VMA_REMOVE or prim in _VMA_ADD[:-1]:
                want = iv[0] | _axes_names(mesh, params)
            else:
                want = frozenset().union(*iv) if iv else frozenset()
            add = [want - v for v in iv]
            if any(add):
                any_ = True
                adds.append(add)
            else:
                adds.append(None)
            r = _vma_rule(prim, [want] * len(iv) if iv else [], params, mesh)
            for o in outs:
                vma[o] = r
        return adds, any_

    adds, needed = plan(dict(base))
    if not needed:
        return traced

    # an operand that is a broadcast gets its pvary before the broadcast (the identity either way):
    # pvary's transpose, a psum, then moves the broadcast's reduced cotangent (a bias's gradient:
    # its features, not the batch's rows times them)
    bcast = {outs[0]: (ins[0], params) for prim, ins, outs, params in eqs if prim == "broadcast_in_dim" and len(ins) == 1}

    def pvaried(i, env, a):
        if i in bcast:
            src, params = bcast[i]
            return core.bind("broadcast_in_dim", [pvaried(src, env, a)], params)[0]
        return _bind_pvary(_traced(env[i], _pvary_params(mesh, a)), a, mesh)

    def replay(*inputs):
        env = dict(zip(ids, list(inputs) + list(traced.consts)))
        for (prim, ins, outs, params), add in zip(eqs, adds):
            if prim == "literal":
                from kiln._src import ad
                res = (ad.literal(params),)
            else:
                xs = [env[i] for i in ins]
                if add is not None:
                    xs = [pvaried(i, env, a) if a else x for i, x, a in zip(ins, xs, add)]
                res = core.bind(prim, xs, params)
            for o, r in zip(outs, res):
                env[o] = r
        return [env[o] for o in b.outputs()]

    from kiln._src import api
    flat = tree_util.tree_flatten((tuple(arrs), {}))[1]
    new = api._trace(replay, None, None, list(arrs), flat)
    if len(new.consts) != len(traced.consts):
        raise NotImplementedError("differentiation inside a shard_map body with check_vma=True: kiln could not "
                                  "type this program's values by mesh axis; pass check_vma=False")
    new.out_tree = traced.out_tree
    new.out_avals = traced.out_avals
    new.out_literal = getattr(traced, "out_literal", None)
    return new
