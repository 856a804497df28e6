"""jit, make_jaxpr, devices and transfers.

jit traces a function once per signature (tree structure, shapes, dtypes, weak types,
static values, x64 mode) into a Program, compiles it, and caches the executable. A call
with a seen signature does no tracing: flatten, look up, launch.
"""

import time
import contextlib
import functools
import inspect
import operator
import weakref

import numpy as np

from kiln import _kiln
from kiln._src import core, dtypes, refs, tree_util
from kiln._src.array import _shared_scalars
from kiln._src import tracing as tracing_state
from kiln._src.config import config
from kiln._src.core import Array, Tracer
from kiln import errors


class Device:
    """A kiln device: the GPU (CUDA device 0) when there is one, and the CPU."""

    def __init__(self, id, platform, kind, process_index=0):
        self.id = id  # global id: the local index until kiln.distributed.initialize numbers every process's
        self._ordinal = id  # the runtime's index of the device among its kind in its process
        self.platform = platform
        self.device_kind = kind
        self.process_index = process_index

    def __repr__(self):
        name = "CpuDevice" if self.platform == "cpu" else "CudaDevice"
        if _global_devices is None:
            return f"{name}(id={self.id})"
        return f"{name}(id={self.id}, process_index={self.process_index})"

    def __str__(self):
        return f"TFRT_CPU_{self.id}" if self.platform == "cpu" else f"cuda:{self.id}"

    def memory_stats(self):
        """This device's memory as kiln's allocator counts it, with JAX's keys: bytes_in_use
        (live buffers and temporaries), peak_bytes_in_use (since the process began; on the GPU
        the memory CUDA graphs hold for their temporaries is added at its own peak, so this is
        an upper bound), bytes_limit (the device's memory; the CPU's: physical memory),
        num_allocs, largest_alloc_size, and pool_bytes (freed memory kept for reuse: see
        kiln.empty_cache). JAX returns None on the CPU; kiln counts there too."""
        _check_local(self, "memory_stats")
        return _kiln.memory_stats(self._kind)

    def reset_peak_memory_stats(self):
        """Starts peak_bytes_in_use over from what is in use now (as PyTorch's
        torch.cuda.reset_peak_memory_stats; JAX has none): the peak of one step, measured."""
        _kiln.reset_peak_memory(self._kind)


def _num_cpu_devices():
    """KILN_NUM_CPU_DEVICES=N: N simulated CPU devices (like XLA's forced host platform device
    count), default 1. They share the host's memory and cores; each runs its own launches, and
    collectives between them run in process (runtime/collective.c). JAX's ways of asking for them
    count too: JAX_NUM_CPU_DEVICES, XLA_FLAGS=--xla_force_host_platform_device_count=N and
    config.update('jax_num_cpu_devices', N) (see _grow_cpus)."""
    import os
    v = os.environ.get("KILN_NUM_CPU_DEVICES", "").strip()
    if not v:
        return max(1, _jax_cpu_count())
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise RuntimeError(f"KILN_NUM_CPU_DEVICES={v!r}: expected a positive number of simulated CPU devices")
    return n


def _jax_cpu_count():
    """The CPU device count JAX would make: jax_num_cpu_devices, JAX_NUM_CPU_DEVICES, or XLA_FLAGS'
    --xla_force_host_platform_device_count (0: none asked)."""
    import os
    import re
    from kiln._src.config import config
    n = getattr(config, "jax_num_cpu_devices", -1)
    if n is not None and n > 0:
        return n
    m = re.search(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(m.group(1)) if m else 0


def _grow_cpus():
    """More simulated CPU devices when JAX's settings ask for more after import (chex sets XLA_FLAGS
    before the first operation): devices are added, never removed."""
    if _global_devices is None and len(_cpus) < _jax_cpu_count() and "KILN_NUM_CPU_DEVICES" not in __import__("os").environ:
        for i in range(len(_cpus), _jax_cpu_count()):
            d = Device(i, "cpu", "cpu")
            d._kind = 0
            _cpus.append(d)


_cpus = [Device(i, "cpu", "cpu") for i in range(_num_cpu_devices())]
for _d in _cpus:
    _d._kind = 0
_cpu = _cpus[0]
_gpu = None  # Device for CUDA device 0, when usable
_gpus = []  # every GPU: CudaDevice(id=k)


def _choose_platform():
    """GPU when one is usable, unless KILN_PLATFORM=cpu; otherwise the CPU after a one-line warning."""
    global _gpu
    import logging
    import os
    want = os.environ.get("KILN_PLATFORM", "").strip().lower()
    if want not in ("", "cpu", "gpu", "cuda"):
        raise RuntimeError(f"KILN_PLATFORM={want!r} is not a platform kiln knows; use 'cpu' or 'gpu'")
    if want == "cpu":
        return
    ok, why = _kiln.gpu_available()
    if ok:
        info = _kiln.gpu_info()
        _gpus.clear()
        for k in range(max(1, _kiln.gpu_count())):
            info = _kiln.gpu_info(k) if k else info
            d = Device(k, "gpu", info["name"])
            d._kind = 1
            d.compute_capability = f"{info['cc_major']}.{info['cc_minor']}"
            _gpus.append(d)
        _gpu = _gpus[0]
        _kiln.set_default_device(1)
    elif want:
        raise RuntimeError(f"KILN_PLATFORM={want} was requested but no GPU is usable: {why}")
    else:
        logging.getLogger("kiln").warning("No GPU found, falling back to CPU (%s)", why)


_choose_platform()


class SingleDeviceSharding:
    """The whole array on one device (jax.sharding.SingleDeviceSharding)."""

    def __init__(self, device, *, memory_kind=None):
        self.device = device
        self.device_set = {device}
        self.memory_kind = memory_kind

    @property
    def num_devices(self):
        return 1

    @property
    def is_fully_replicated(self):
        return True

    @property
    def is_fully_addressable(self):
        return True

    def devices_indices_map(self, global_shape):
        return {self.device: tuple(slice(None) for _ in global_shape)}

    addressable_devices_indices_map = devices_indices_map

    def shard_shape(self, global_shape):
        return tuple(global_shape)

    def __eq__(self, other):
        return isinstance(other, SingleDeviceSharding) and other.device is self.device

    def __hash__(self):
        return hash(("single", id(self.device)))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self.device!r})"


# After kiln.distributed.initialize: {"cpu": [...], "gpu": [...]}, every process's devices of each
# platform, this process's being the Device objects of _cpus/_gpus renumbered; None otherwise.
_global_devices = None


def _local_device_table(local_device_ids=None):
    """What this process publishes to the others at start-up: its devices' kinds per platform."""
    return {"cpu": [d.device_kind for d in _selected(_cpus, local_device_ids)],
            "gpu": [d.device_kind for d in _selected(_gpus, local_device_ids)]}


def _selected(devs, local_device_ids):
    """The devices local_device_ids picks: of the default backend's platform (as in JAX: the GPUs
    where there are some); the other platform's devices all take part."""
    default = "gpu" if _gpu is not None else "cpu"
    if local_device_ids is None or (devs and devs[0].platform != default):
        return list(devs)
    ids = [local_device_ids] if isinstance(local_device_ids, int) else list(local_device_ids)
    bad = [i for i in ids if not 0 <= i < len(devs)]
    if bad and devs:
        raise ValueError(f"kiln.distributed.initialize: local_device_ids {bad} do not exist: this process has "
                         f"{len(devs)} {devs[0].platform.upper()} device(s), ids 0..{len(devs) - 1}")
    return [devs[i] for i in ids if 0 <= i < len(devs)]


def _set_global_devices(tables, process_id, local_device_ids):
    """Numbers every process's devices globally (process p's after those of processes < p) from the
    tables the processes published; tables None: back to this process's devices alone."""
    global _global_devices
    for d in _cpus + _gpus:
        d.id, d.process_index = d._ordinal, 0
    if tables is None:
        _global_devices = None
        return
    out = {}
    for plat, local in (("cpu", _cpus), ("gpu", _gpus)):
        mine = _selected(local, local_device_ids)
        devs, next_id = [], 0
        for p, table in enumerate(tables):
            if p == process_id:
                for d in mine:
                    d.id, d.process_index = next_id, p
                    devs.append(d)
                    next_id += 1
                continue
            for kind in table[plat]:
                d = Device(next_id, plat, kind, p)
                d._kind, d._ordinal = (1 if plat == "gpu" else 0), None
                devs.append(d)
                next_id += 1
        out[plat] = devs
    _global_devices = out


def _is_local(device):
    return device._ordinal is not None


def _check_local(device, what):
    """Raises when device belongs to another process (a process computes on its own devices; meshes
    that span processes go through spmd._mesh_span)."""
    if device._ordinal is None:
        from kiln._src import distributed
        raise distributed.remote_device_error(device, what)


def devices(backend=None):
    """The devices of a backend: by default the GPU when there is one, else the CPU. After
    kiln.distributed.initialize, every process's (see local_devices for this process's)."""
    if backend is not None and not isinstance(backend, str):
        backend = getattr(backend, "platform", backend)
    if backend in ("gpu", "cuda"):
        if _gpu is None:
            raise RuntimeError(f"Backend {backend!r} requested, but no GPU is usable on this machine "
                               "(or KILN_PLATFORM=cpu is set); available backends: ['cpu']")
        return list(_global_devices["gpu"] if _global_devices is not None else _gpus)
    if backend not in (None, "cpu"):
        raise RuntimeError(f"Unknown backend {backend!r}: kiln has the backends 'gpu' (CUDA) and 'cpu'")
    plat = "gpu" if backend is None and _gpu is not None else "cpu"
    if _global_devices is not None:
        return list(_global_devices[plat])
    if plat == "cpu":
        _grow_cpus()
    return list(_gpus if plat == "gpu" else _cpus)


def local_devices(process_index=None, backend=None, host_id=None):
    """The devices of process `process_index` (default: this process)."""
    from kiln._src import distributed
    st = distributed.global_state
    p = process_index if process_index is not None else (host_id if host_id is not None else st.process_id)
    if not 0 <= p < st.num_processes:
        raise ValueError(f"local_devices: process {p} does not exist: this run has {st.num_processes} process(es)"
                         + ("" if st.client is not None else " (kiln.distributed.initialize starts several)"))
    return [d for d in devices(backend) if d.process_index == p]


def device_count(backend=None):
    return len(devices(backend))


def local_device_count(backend=None):
    return len(local_devices(backend=backend))


def default_backend():
    return "gpu" if _gpu is not None else "cpu"


def _device_of_kind(kind):
    return _gpu if kind == 1 else _cpu


def _device_of_buf(buf):
    """The Device a buffer is on: its kind, and which device of that kind."""
    if buf.device == 1:
        return _gpus[buf.ordinal] if buf.ordinal < len(_gpus) else _gpu
    return _cpus[buf.ordinal] if buf.ordinal < len(_cpus) else _cpu


def _leaf_to_array(x, what="argument"):
    if isinstance(x, Array):
        return x
    if isinstance(x, (bool, int, float, complex, np.ndarray, np.generic)):
        return core.asarray(x)
    if hasattr(x, "__jax_array__"):
        return core.asarray(x.__jax_array__())
    raise TypeError(f"{what} of type {type(x).__name__} is not a valid kiln type: jit arguments must be "
                    "arrays, scalars or pytrees of them; pass other values with static_argnums / "
                    "static_argnames")


def device_put(x, device=None, *, src=None, donate=False, may_alias=None):
    """Copies the leaves of x to `device` (default: the default device): a Device (the array is
    then committed to it: computations on it run there), a SingleDeviceSharding, a NamedSharding
    (the array is split into one piece per device of its mesh), or a pytree of them matching x.
    Arrays already where they are asked to be are returned as they are."""
    if device is None or _is_placement(device):
        return tree_util.tree_map(lambda v: _put_leaf(v, device), x)
    leaves, tree = tree_util.tree_flatten(x)
    return tree.unflatten([_put_leaf(v, d) for v, d in zip(leaves, leaf_placements(x, device, "device_put"))])


def _is_placement(s):
    """Whether s says where one array goes (a device, a SingleDeviceSharding or a NamedSharding)."""
    from kiln._src import spmd
    return isinstance(s, (Device, SingleDeviceSharding)) or spmd.is_sharding(s)


def leaf_placements(x, placements, what):
    """Per leaf of x (tree_leaves order), its placement: `placements` is one placement or a tree of
    them that is a prefix of x's, a None in it leaving its subtree where it is (as JAX; jit's
    out_shardings=(None, ...), as flax nnx passes them)."""
    if placements is None or _is_placement(placements):
        return [placements] * len(tree_util.tree_leaves(x))
    places, place_tree = tree_util.tree_flatten(placements, is_leaf=lambda d: d is None)
    try:
        subtrees = place_tree.flatten_up_to(x)
    except ValueError as e:
        raise ValueError(f"{what}: the tree of devices/shardings is not a prefix of the values' tree: {e}") from None
    return [d for d, sub in zip(places, subtrees) for _ in tree_util.tree_leaves(sub)]


def _put_leaf(v, device):
    from kiln._src import spmd
    if isinstance(device, SingleDeviceSharding):
        device = device.device
    if spmd.is_sharding(device):
        return spmd.shard_array(_leaf_to_array(v, "device_put value"), device)
    if device is not None and not isinstance(device, Device):
        raise TypeError(f"device_put: {device!r} is not a kiln device or sharding (use kiln.devices()[0], "
                        "kiln.devices('cpu')[0] or a NamedSharding)")
    if device is not None:
        _check_local(device, "device_put")
    a = _leaf_to_array(v, "device_put value")
    if device is None or isinstance(a, Tracer):
        return a
    buf = spmd.global_buf(a)
    if len(_gpus if device._kind == 1 else _cpus) == 1:  # one device of the kind: committing changes nothing
        if buf.device == device._kind and buf is a._buf:
            return a
        return Array(_kiln.transfer(buf, device._kind), a.shape, a.dtype, a.weak_type)
    out = _kiln.transfer(buf, device._kind, device._ordinal)
    return a if out is a._buf else Array(out, a.shape, a.dtype, a.weak_type)


def device_get(x):
    """x's arrays as NumPy arrays on the host; a traced value comes back as it is (JAX's rule: chex
    applies device_get to arguments inside loop bodies), a concrete one (grad outside jit) as its
    value."""
    def get(v):
        if isinstance(v, Tracer):
            return v.__array__() if v._cval is not None else v
        if isinstance(v, Array):
            return np.asarray(v)
        return v
    return tree_util.tree_map(get, x)


def block_until_ready(x):
    for leaf in tree_util.tree_leaves(x):
        if isinstance(leaf, Array):
            leaf.block_until_ready()
    return x


# ---------------------------------------------------------------------------
# Tracing a function into a program

class _Traced:
    """The result of tracing: builder, output tree and hidden constant inputs."""
    __slots__ = ("builder", "out_tree", "consts", "out_avals", "in_avals", "out_literal", "ref_touched", "ref_written",
                 "out_shardings")

    def text(self):
        return self.builder.text()


def _trace(fun, args, kwargs, in_leaves, in_tree, concrete=False, refs_in=("a transformation (grad, vmap, a custom "
                                                                              "rule, checkpoint)", False)):
    """Traces fun on abstract inputs; with concrete=True every value is also computed (the inputs'
    values are in_leaves, arrays or concrete tracers). refs_in: (what the trace is, whether its
    caller threads the outer Refs it touches through it: then `ref_touched`/`ref_written` of the
    result list them, see refs.py; otherwise writing one raises)."""
    from kiln._src import spmd
    outer = core.current_trace() if spmd._vma_scopes else None
    tracing_state.note_inputs(in_leaves)  # (custom_vjp's perturbed flags, under differentiation)
    trace = core.push_trace(concrete)
    typed = outer is not None and spmd.vma_nest(outer, trace, in_leaves)  # inside a check_vma shard_map body
    ref_scope = refs.scope(*refs_in)
    try:
        with ref_scope:
            out = _trace_body(fun, trace, in_leaves, in_tree, concrete)
    finally:
        if typed:
            spmd._vma_unregister(trace)
        core.pop_trace(trace)
    out_tree, avals, out_shardings = out
    t = _Traced()
    t.ref_touched, t.ref_written = ref_scope.touched, ref_scope.written
    t.builder = trace.take_builder()
    t.out_shardings = out_shardings  # (per output, its with_sharding_constraint's placement or None)
    t.out_tree = out_tree
    t.consts = trace.consts
    t.out_avals = avals
    t.in_avals = [(a.shape, a.dtype, a.weak_type) for a in in_leaves]
    return t


def _trace_body(fun, trace, in_leaves, in_tree, concrete):
    """fun applied to trace's new inputs, its outputs set: (output tree, output avals, per output the
    placement a with_sharding_constraint on it asks, or None when no output has one)."""
    tracers = [trace.new_input(a.shape, a.dtype, a.weak_type,
                               (a._cval if isinstance(a, Tracer) else a) if concrete else None)
               for a in in_leaves]
    targs, tkwargs = tree_util.tree_unflatten(in_tree, tracers)
    constraints = tracing_state.sharding_constraints
    constraints.append({})  # with_sharding_constraint's, on this trace's values: id -> (value, sharding)
    try:
        out = fun(*targs, **tkwargs)
    finally:
        placed = constraints.pop()
    out_leaves, out_tree = tree_util.tree_flatten(out)
    out_shardings = [placed.get(id(o), (None, None))[1] for o in out_leaves] if placed else None
    if out_shardings is not None and all(p is None for p in out_shardings):
        out_shardings = None
    vids, avals = [], []
    for o in out_leaves:
        if not isinstance(o, Array):
            if isinstance(o, (bool, int, float, complex, np.ndarray, np.generic)):
                o = core.asarray(o)
            else:
                raise TypeError(f"jit: the function returned a value of type {type(o).__name__}; "
                                "outputs must be arrays, scalars or pytrees of them")
        vids.append(trace.vid_of(o))
        avals.append((o.shape, o.dtype, o.weak_type))
    trace.set_outputs(vids)
    return out_tree, avals, out_shardings


def _normalize_static(fun, static_argnums, static_argnames):
    if static_argnums is None:
        static_argnums = ()
    elif isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    if static_argnames is None:
        static_argnames = ()
    elif isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    static_argnums = tuple(operator.index(i) for i in static_argnums)
    static_argnames = tuple(static_argnames)
    try:
        sig = inspect.signature(fun)
        params = list(sig.parameters.values())
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        positional = []
    nums, names = set(static_argnums), set(static_argnames)
    for i in static_argnums:
        if 0 <= i < len(positional):
            names.add(positional[i])
    for n in static_argnames:
        if n in positional:
            nums.add(positional.index(n))
    return tuple(sorted(nums)), frozenset(names)


def _hashable_static(v, where):
    try:
        hash(v)
    except TypeError:
        raise ValueError(f"Non-hashable static argument {where} of type {type(v).__name__}: "
                         "static arguments must be hashable (use a tuple instead of a list, "
                         "or pass arrays as regular arguments)") from None
    return v


class _CacheEntry:
    __slots__ = ("exe", "out_tree", "consts", "out_avals", "text", "const_bufs", "single", "fast", "donated", "marked",
                 "user_marked", "refs", "ref_written", "placed")

    def run_donating(self, arrs, donated):
        """run, with the arrays at the flat positions `donated` handed over: an output may be
        written into one's buffer, and each is deleted afterwards."""
        d = set(donated)
        bufs = tuple([None if i in d else a._buf for i, a in enumerate(arrs)] + list(self.const_bufs))
        return self._results(_kiln.donate_call(self.exe, bufs, tuple((i, arrs[i]) for i in donated)))

    def run(self, bufs):
        if self.const_bufs:
            bufs += self.const_bufs
        return self._results(self.exe(*bufs))

    def _results(self, outs):
        if self.single and not self.placed:
            s, d, w = self.out_avals[0]
            return Array(outs[0], s, d, w)
        res = [Array(b, s, d, w) for b, (s, d, w) in zip(outs, self.out_avals)]
        if self.placed:  # outputs under with_sharding_constraint: placed as it says
            res = [r if p is None else device_put(r, p) for r, p in zip(res, self.placed)]
        return tree_util.tree_unflatten(self.out_tree, res)


def _split_args(static_argnums, static_argnames, args, kwargs):
    statics = []
    dyn_args = []
    nargs = len(args)
    for i, a in enumerate(args):
        if i in static_argnums or (i - nargs) in static_argnums:
            statics.append((i, _hashable_static(a, f"at position {i}")))
        else:
            dyn_args.append(a)
    dyn_kwargs = {}
    for k, v in kwargs.items():
        if k in static_argnames:
            statics.append((k, _hashable_static(v, f"'{k}'")))
        else:
            dyn_kwargs[k] = v
    return tuple(statics), tuple(dyn_args), dyn_kwargs


def _rebuild_call(fun, statics, static_argnums, nargs):
    """A function of the dynamic args that re-inserts the static ones."""
    pos_statics = {i: v for i, v in statics if isinstance(i, int)}
    kw_statics = {k: v for k, v in statics if isinstance(k, str)}

    def call(*dyn, **dyn_kw):
        it = iter(dyn)
        full = [pos_statics[i] if i in pos_statics else next(it) for i in range(nargs)]
        return fun(*full, **dyn_kw, **kw_statics)
    return call


def _aval_key(x):
    if isinstance(x, Array):
        return (x.shape, x.dtype, x.weak_type)
    return None


_kiln.jit_setup(tree_util.tree_unflatten)


_jitted = weakref.WeakSet()  # every live jit-wrapped function, for clear_caches


def clear_caches():
    """Drops every compiled program kiln keeps for reuse, as JAX's clear_caches: the caches of
    all jit-wrapped functions, eager mode's one-operation programs, and grad/vmap's programs for
    concrete arguments. The next call compiles again (from the disk cache, where it has it)."""
    from kiln._src import ad
    for w in list(_jitted):
        w.clear_cache()
    ad._compiled.clear()
    _kiln.config_changed()


def _platform_kind(name, what, arg="platform"):
    """None for None, else the device kind of platform name 'cpu' (0) or 'gpu'/'cuda' (1)."""
    if name is None:
        return None
    kind = {"cpu": 0, "gpu": 1, "cuda": 1}.get(str(name).lower())
    if kind is None:
        raise ValueError(f"{what}: unknown {arg} {name!r}; use 'cpu' or 'gpu'")
    return kind


def live_arrays(platform=None):
    """The kiln Arrays alive now (computed or pending, not deleted), optionally only those on
    `platform` ('cpu' or 'gpu'), as JAX's live_arrays."""
    import gc
    want = _platform_kind(platform, "live_arrays")
    out = []
    for o in gc.get_objects():
        if type(o) is not Array or _kiln.array_is_deleted(o):
            continue
        if want is not None and o.device._kind != want:
            continue
        out.append(o)
    return out


def empty_cache(backend=None):
    """Gives the memory kiln keeps for reuse after arrays die back to the system: on the GPU,
    kiln's cached small blocks, the CUDA memory pool and CUDA graphs' reserved memory (after
    waiting for queued work), as PyTorch's torch.cuda.empty_cache (JAX has none); on the CPU,
    kiln's cache of large blocks. backend: 'cpu', 'gpu', or None for every device."""
    kind = _platform_kind(backend, "empty_cache", "backend")
    if kind in (None, 0):
        _kiln.empty_cache(0)
    if kind in (None, 1) and _gpu is not None:
        _kiln.empty_cache(1)


class JitWrapped(_kiln.JitBase):
    """The callable returned by kiln.jit."""

    def __init__(self, fun, static_argnums=None, static_argnames=None, donate_argnums=None, keep_unused=False,
                 donate_argnames=None):
        if not callable(fun):
            raise TypeError(f"jit: expected a callable, got {type(fun).__name__}")
        functools.update_wrapper(self, fun)  # first: fun's attributes (another jit's among them) never replace ours
        self.__dict__.pop("_spmd_eager", None)
        self._fun = fun
        self._static_argnums, self._static_argnames = _normalize_static(fun, static_argnums, static_argnames)
        self._donate_argnums, self._donate_argnames = _normalize_static(fun, donate_argnums, donate_argnames)
        both = set(self._donate_argnums) & set(self._static_argnums)
        if both:
            raise ValueError(f"jit: argument {min(both)} is both static and donated; a static argument is not an "
                             "array and cannot be donated")
        self._cache = {}
        self._nested_cache = {}  # the programs of calls under another trace (_nested)
        # calls of positional arrays (or containers of them), run by JitBase: _kiln.jit_key(args) -> entry.fast;
        # calls that donate run here (their arrays are deleted after the call)
        donating = self._donate_argnums or self._donate_argnames
        self._fast = None if (self._static_argnums or self._static_argnames or donating) else {}
        _jitted.add(self)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    @property
    def __signature__(self):
        """The wrapped function's signature (inspect.signature sees a jitted function as JAX's)."""
        return inspect.signature(self._fun)

    def _signature(self, args, kwargs, abstract=False):
        """(cache key, statics, flat argument arrays, tree, number of positional arguments). With
        `abstract` (lower()), ShapeDtypeStructs stand for arrays of their type, nothing allocated."""
        if self._static_argnums or self._static_argnames:
            statics, dyn_args, dyn_kwargs = _split_args(self._static_argnums, self._static_argnames, args, kwargs)
        else:
            statics, dyn_args, dyn_kwargs = (), args, kwargs
        leaves, tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        arrs = []
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, Tracer) and not core.tracing():
                raise errors.UnexpectedTracerError.for_tracer(leaf, "It was passed to a jit-compiled function.")
            if abstract and isinstance(leaf, ShapeDtypeStruct) and not isinstance(leaf.dtype, dtypes.ExtendedDType):
                arrs.append(_abstract_leaf(leaf))
                continue
            arrs.append(leaf if isinstance(leaf, Array) else _leaf_to_array(leaf, f"jit argument leaf {i}"))
        key = (tree, statics, tuple((a.shape, a.dtype, a.weak_type) for a in arrs), core.config_state())
        return key, statics, arrs, tree, len(args)

    # Calling: JitBase (C) runs calls of positional arrays whose signature is in self._fast and
    # calls _call for everything else.
    def _nested(self, args, kwargs):
        """A call under another trace (grad(jit(f)), vmap(jit(f)), jit(jit(f))): as JAX, every dynamic
        argument (arrays, NumPy values, Python scalars; not static_argnums/argnames) reaches f as an
        abstract value, so a boolean mask indexes only when it is static, and Python control flow
        on an argument's value raises (bug, issue 32: f was called on the arguments as they were,
        so an unbatched or non-differentiated mask indexed by value). f is traced into its own
        program, whose equations are then replayed into the enclosing trace, the arguments' values
        (or tracers) as its inputs; nothing compiles here, so no value is specialized on."""
        key, statics, arrs, tree, nargs = self._signature(args, kwargs)
        from kiln._src import ad, spmd
        # The program is kept for the next call like this one, as JAX keeps a jit's jaxpr (f's Python
        # side effects, a custom_vjp's bwd tracing, happen once: equinox counts them), when nothing in
        # it depends on the enclosing trace: no tracer of it among the constants (its inputs' perturbed
        # flags are then its own: tracing._is_perturbed), no named axes or Refs in scope.
        from kiln._src import batching
        # (a library primitive binds its batching rule only under vmap: a program traced outside
        # one is not the one to replay inside)
        nkey = (key, core.ad_tracing(), batching.vmap_depth[0] > 0)
        cached = None if tracing_state.trace_reporters[0] else self._nested_cache.get(nkey)
        if cached is not None:
            outs = ad._inline(cached.builder, list(arrs) + list(cached.consts))
            return tree_util.tree_unflatten(cached.out_tree, outs)
        fun = _rebuild_call(self._fun, statics, self._static_argnums, nargs) if statics else self._fun
        traced = _trace(fun, None, None, arrs, tree, refs_in=("a jit-compiled function", True))
        if traced.ref_touched:  # it reads or writes an outer Ref: f called on the values (the Refs act in place)
            dyn_args, dyn_kwargs = tree_util.tree_unflatten(tree, list(arrs))
            return fun(*dyn_args, **dyn_kwargs)
        if (not spmd._axis_stack and not spmd._vma_scopes and not tracing_state.trace_reporters[0]
                and not tracing_state.compile_time_eval[0] and not any(isinstance(c, Tracer) for c in traced.consts)):
            if len(self._nested_cache) >= 64:
                self._nested_cache.pop(next(iter(self._nested_cache)), None)
            self._nested_cache[nkey] = traced
        outs = ad._inline(traced.builder, list(arrs) + list(traced.consts))
        return tree_util.tree_unflatten(traced.out_tree, outs)

    def _call(self, *args, **kwargs):
        if config.jax_disable_jit:
            return self._fun(*args, **kwargs)
        if core.tracing():
            return self._nested(args, kwargs)
        if self.__dict__.get("_spmd_eager"):
            return self._fun(*args, **kwargs)
        key, statics, arrs, tree, nargs = self._signature(args, kwargs)
        from kiln._src import spmd
        spmd._jit_compiling[0] += 1
        as_written = False
        try:
            if any(type(a) is not Array for a in arrs):
                from kiln._src import partition
                if partition.wants(arrs):  # split over a mesh: partitioned, one piece per device
                    out = partition.call(self, None, None, args, kwargs)
                    if out is not partition.FALLBACK:
                        return out
            entry = self._cache.get(key)
            if entry is None:
                t0 = time.perf_counter()
                entry = self._compile(statics, arrs, tree, nargs)
                self._cache[key] = entry
                from kiln import monitoring
                monitoring._compiled(time.perf_counter() - t0)
        except spmd.ShardMapInTrace:
            as_written = True
        finally:
            spmd._jit_compiling[0] -= 1
        if as_written:
            # f calls shard_map/pmap among other work: f runs as written, each shard_map compiled and
            # launched on its own across the devices (the same values, more launches); no longer
            # compiling, so a trace f makes itself (checkify's) emulates the shard_map in it
            self._spmd_eager = True
            return self._fun(*args, **kwargs)
        if entry.refs:  # the Refs' values go in, the written ones come back
            arrs = list(arrs) + refs.values(entry.refs)
            out, finals = entry.run_donating(arrs, self._donated_leaves(args, kwargs, arrs, entry))
            refs.store(entry.ref_written, finals)
            return out
        checking = config.jax_debug_nans or config.jax_debug_infs
        if self._fast is not None and not kwargs and not checking and self._fast_state == key[-1]:
            # (only entries of the state the fast path keeps to: another thread's state may have
            # taken it over while this call compiled)
            fast_key = _kiln.jit_key(args)  # positional arrays, or tuples/lists/str-keyed dicts of them
            if fast_key is not None and entry.fast is not None:
                self._fast[fast_key] = entry.fast
        if self._donate_argnums or self._donate_argnames:
            donated = self._donated_leaves(args, kwargs, arrs, entry)
            if donated:
                return entry.run_donating(arrs, donated)
        if checking:  # before the call: its arguments may be needed again to find the culprit
            return self._checked(entry, statics, arrs, tree, nargs)
        return entry.run([a._buf for a in arrs])

    def _checked(self, entry, statics, arrs, tree, nargs):
        """jax_debug_nans/infs: the results checked; on a NaN (inf), the program replayed one
        primitive at a time on the same arguments to name the first that makes one."""
        out = entry.run([a._buf for a in arrs])
        if _bad_values(tree_util.tree_leaves(out)) is None:
            return out
        fun = _rebuild_call(self._fun, statics, self._static_argnums, nargs) if statics else self._fun
        traced = _trace(fun, None, None, arrs, tree)
        from kiln._src import ad

        def check(prim, res):
            bad = _bad_values(res)
            if bad is not None:
                raise FloatingPointError(f"invalid value ({bad}) encountered in {prim} (in the jit-compiled function "
                                         f"{getattr(self._fun, '__name__', 'fun')})")
        ad._inline(traced.builder, list(arrs) + list(traced.consts), after=check)
        what = _bad_values(tree_util.tree_leaves(out))
        raise FloatingPointError(f"invalid value ({what}) encountered in the results of the jit-compiled function "
                                 f"{getattr(self._fun, '__name__', 'fun')} (its primitives, replayed one by one, "
                                 "made none: the compiled program's rounding did)")

    def _donated_leaves(self, args, kwargs, arrs, entry):
        """The flat argument leaves that donate_argnums/argnames name and the program can write an
        output into (JAX's rule: same shape and dtype; kiln's: also read only before or where
        that output is computed, at its own index), found at the first call of a signature; the
        others stay alive, and that call warns about them, as JAX does."""
        if entry.donated is None:
            # an input handed back unchanged is usable too: its output is its buffer (JAX aliases them)
            usable = frozenset(d for d in entry.exe.donors + entry.exe.passthrough if d >= 0)
            bad = [arrs[i] for i in entry.user_marked if i not in usable]
            if bad:
                import warnings
                names = ", ".join(f"{a.dtype.name}[{','.join(str(d) for d in a.shape)}]" for a in bad)
                warnings.warn(f"Some donated buffers were not usable: {names}.\nkiln writes an output into a donated "
                              "buffer when the output has the same shape and dtype and is computed elementwise from "
                              "it by the program's last use of it (see the README, Memory).", UserWarning, stacklevel=3)
            entry.donated = [i for i in entry.marked if i in usable]
        # a cached scalar (array._shared_scalars) is one object shared by every request for its value:
        # never deleted by a donation (donating a 0-d array saves nothing)
        return [i for i in entry.donated if type(arrs[i]) is Array and id(arrs[i]) not in _shared_scalars]

    def _marked_leaves(self, tree, nleaves, nargs):
        """The flat positions of the leaves that donate_argnums/argnames name."""
        dn, dnames = self._donate_argnums, self._donate_argnames
        if not (dn or dnames):
            return []
        dyn_args, dyn_kwargs = tree_util.tree_unflatten(tree, list(range(nleaves)))
        positions = [i for i in range(nargs) if i not in self._static_argnums and (i - nargs) not in self._static_argnums]
        marked = []
        for i, a in zip(positions, dyn_args):
            if i in dn or (i - nargs) in dn:
                marked.extend(tree_util.tree_leaves(a))
        for k, a in dyn_kwargs.items():
            if k in dnames:
                marked.extend(tree_util.tree_leaves(a))
        return sorted(marked)

    def _compile(self, statics, arrs, tree, nargs):
        fun = _rebuild_call(self._fun, statics, self._static_argnums, nargs) if statics else self._fun
        what = ("a jit-compiled function", True)
        name = f"jit({getattr(self._fun, '__name__', 'fun')})"
        t0 = _kiln.trace_begin()  # (kiln.profiler: 0 unless a profile records)
        traced = _trace(fun, None, None, arrs, tree, refs_in=what)
        entry = _CacheEntry()
        entry.marked = entry.user_marked = self._marked_leaves(tree, len(arrs), nargs)  # flat leaves a call donates
        entry.refs, entry.ref_written = traced.ref_touched, traced.ref_written
        if entry.refs:  # Refs from outside: their values in as trailing arguments, the written ones out
            rs, written = entry.refs, set(traced.ref_written)

            def threaded(*a, **k):
                with refs.bound(rs, a[-1]) as b:
                    out = fun(*a[:-1], **k)
                    return out, [v for r, v in zip(rs, b.values()) if r in written]

            dyn_args, dyn_kwargs = tree_util.tree_unflatten(tree, list(arrs))
            leaves, tree2 = tree_util.tree_flatten((tuple(dyn_args) + (refs.values(rs),), dyn_kwargs))
            traced = _trace(threaded, None, None, leaves, tree2, refs_in=what)
            entry.marked = sorted(set(entry.marked) | {len(arrs) + i for i, r in enumerate(rs) if r in written})
            entry.ref_written = [r for r in rs if r in written]  # in the order their results come
        if t0:
            _kiln.trace_add("trace", name, t0, f'"arguments": {len(arrs)}, "equations": {traced.builder.counts()[1]}')
        entry.exe = traced.builder.compile(-1, entry.marked, name)
        entry.out_tree = traced.out_tree
        entry.consts = traced.consts
        entry.const_bufs = [c._buf for c in traced.consts]
        entry.out_avals = traced.out_avals
        entry.single = not entry.refs and traced.out_tree == tree_util.tree_structure(0)
        entry.placed = None if entry.refs else traced.out_shardings
        # (an entry whose outputs are placed has no C fast path: the placing is Python's)
        entry.fast = None if entry.placed else \
            (entry.exe, tuple(entry.const_bufs), tuple(entry.out_avals), entry.single, entry.out_tree)
        entry.donated = None  # the donated leaves an output can take, found at the first donating call
        return entry

    def trace_text(self, *args, **kwargs):
        key, statics, arrs, tree, nargs = self._signature(args, kwargs)
        fun = _rebuild_call(self._fun, statics, self._static_argnums, nargs) if statics else self._fun
        return _trace(fun, None, None, arrs, tree).text()

    def lower(self, *args, **kwargs):
        """Ahead of time, as JAX's: jit(f).lower(*args).compile() compiles for these arguments'
        types without running (arrays, or ShapeDtypeStructs: nothing allocated); the Compiled object
        is called with arrays of those types."""
        key, statics, arrs, tree, nargs = self._signature(args, kwargs, abstract=True)
        return Lowered(self, key, statics, arrs, tree, nargs)

    def _cache_size(self):
        return len(self._cache)

    def clear_cache(self):
        self._cache.clear()
        self._nested_cache.clear()
        if self._fast is not None:
            self._fast.clear()


class Lowered:
    """jit(f).lower(*args): the program traced for those argument types (as_text()), compiled by
    compile()."""

    def __init__(self, wrapped, key, statics, arrs, tree, nargs):
        self._wrapped, self._key, self._statics, self._arrs, self._tree, self._nargs = wrapped, key, statics, arrs, tree, nargs

    def as_text(self):
        fun = self._wrapped._fun
        if self._statics:
            fun = _rebuild_call(fun, self._statics, self._wrapped._static_argnums, self._nargs)
        return _trace(fun, None, None, self._arrs, self._tree).text()

    def compile(self, compiler_options=None):
        """The compiled program. compiler_options (XLA's flags in JAX) are accepted and recorded:
        kiln's compiler takes none. A name that is neither an XLA flag (xla_*) nor one of XLA's
        build options raises JaxRuntimeError, as JAX."""
        self.compiler_options = dict(compiler_options or {})
        for name in self.compiler_options:
            if not (isinstance(name, str) and (name.startswith("xla_") or name in _BUILD_OPTIONS)):
                from kiln.errors import JaxRuntimeError
                raise JaxRuntimeError(f"INVALID_ARGUMENT: No such compile option: {name!r} (compile(compiler_options=)"
                                      f" takes XLA's xla_* flags and build options {sorted(_BUILD_OPTIONS)})")
        w = self._wrapped
        if self._key not in w._cache:
            w._cache[self._key] = w._compile(self._statics, self._arrs, self._tree, self._nargs)
        return Compiled(w, self._key, self._statics, self._nargs)


class Compiled:
    """jit(f).lower(*args).compile(): called with the dynamic arguments alone, of the lowered types
    (as JAX's: the static arguments were fixed by lower())."""

    def __init__(self, wrapped, key, statics=(), nargs=0):
        self._wrapped, self._key, self._statics, self._nargs = wrapped, key, statics, nargs

    def __call__(self, *args, **kwargs):
        if self._statics:
            pos = {i: v for i, v in self._statics if isinstance(i, int)}
            kw = {k: v for k, v in self._statics if isinstance(k, str)}
            if len(args) + len(pos) != self._nargs or set(kwargs) & set(kw):
                raise TypeError(f"a Compiled function takes the {self._nargs - len(pos)} dynamic positional "
                                f"argument(s) it was lowered with, without the static ones (positions {sorted(pos)}, "
                                f"names {sorted(kw)}: fixed by lower()); got {len(args)} positional and keywords "
                                f"{sorted(kwargs)}")
            it = iter(args)
            args = tuple(pos[i] if i in pos else next(it) for i in range(self._nargs))
            kwargs = {**kwargs, **kw}
        key = self._wrapped._signature(args, kwargs)[0]
        if key != self._key:
            raise TypeError("a Compiled function was called with arguments of other types than it was lowered for")
        return self._wrapped._call(*args, **kwargs)


def _bad_values(values):
    """'nan' or 'inf' when a floating value holds one that the debug options look for, else None."""
    for v in values:
        if not isinstance(v, Array) or v.dtype.kind not in "fc":
            continue
        a = np.asarray(v)
        if config.jax_debug_nans and np.isnan(a).any():
            return "nan"
        if config.jax_debug_infs and np.isinf(a).any():
            return "inf"
    return None


def _eager_check(prim, results):
    """jax_debug_nans/infs for eager operations: the first that makes a NaN (inf) raises (installed
    while any thread has either on; a thread with both off passes)."""
    if not (config.jax_debug_nans or config.jax_debug_infs):
        return
    bad = _bad_values(results if isinstance(results, tuple) else (results,))
    if bad is not None:
        raise FloatingPointError(f"invalid value ({bad}) encountered in {prim}")


def _eager_check_wanted():
    return any(config._global[n] or config.overridden_true(n) for n in ("jax_debug_nans", "jax_debug_infs"))


def _on_debug_change(name, value, thread_only):
    # (jitted calls check in _call: the C fast path keeps to the configuration state its entries
    # were made in, and entries are not made while checking)
    if name in ("jax_debug_nans", "jax_debug_infs"):
        _kiln.set_eager_check(_eager_check if _eager_check_wanted() else None)


config._on_change(_on_debug_change)
if _eager_check_wanted():  # set from the environment at start-up
    _kiln.set_eager_check(_eager_check)


@contextlib.contextmanager
def disable_jit(disable=True):
    """Within the block, jit-compiled functions run as plain Python (op by op), as jax.disable_jit."""
    with config._context("jax_disable_jit", bool(disable)):
        yield


def jit(fun=None, *, in_shardings=None, out_shardings=None, static_argnums=None, static_argnames=None,
        donate_argnums=None, donate_argnames=None, keep_unused=False, device=None, backend=None, inline=False):
    """Compiles `fun` with kiln (traced once per signature, cached).

    in_shardings / out_shardings, or arguments split over a mesh: the program is partitioned over
    the mesh (partition.py; the rules are in the README), or, for what it cannot partition, run on
    the gathered values on one device and its results placed by out_shardings (device_put).
    jit of a shard_map or pmap function is that function (already compiled once per signature)."""
    if fun is None:
        return lambda f: jit(f, in_shardings=in_shardings, out_shardings=out_shardings, static_argnums=static_argnums,
                             static_argnames=static_argnames, donate_argnums=donate_argnums,
                             donate_argnames=donate_argnames, device=device)
    from kiln._src import spmd
    if isinstance(fun, spmd.ShardMapped):
        return fun
    wrapped = JitWrapped(fun, static_argnums, static_argnames, donate_argnums, keep_unused, donate_argnames)
    if device is None and not tree_util.tree_leaves((in_shardings, out_shardings)):
        return wrapped  # (no sharding asked: trees of None, as flax nnx passes, are none)
    return spmd.ShardedJit(wrapped, in_shardings, out_shardings, device)


def _abstract_leaf(leaf):
    """The abstract value (nothing allocated) of an argument leaf with a shape and a dtype: an
    array, a ShapeDtypeStruct, anything that has both."""
    from kiln._src.batching import _Aval
    return _Aval(tuple(int(d) for d in leaf.shape), np.dtype(dtypes.canonicalize_dtype(leaf.dtype)),
                 bool(getattr(leaf, "weak_type", False)))


def make_jaxpr(fun, static_argnums=(), axis_env=None, return_shape=False, abstracted_axes=None):
    """make_jaxpr(f)(*args) -> the traced program (prints as text)."""
    if axis_env:
        raise NotImplementedError(f"make_jaxpr(axis_env={axis_env!r}): kiln traces collectives over named axes only "
                                  f"inside vmap, pmap or shard_map; make the jaxpr of the mapped function instead")
    if abstracted_axes is not None:
        raise NotImplementedError("make_jaxpr(abstracted_axes=...): kiln traces programs at static shapes only")
    static_nums, static_names = _normalize_static(fun, static_argnums, None)

    def wrapped(*args, **kwargs):
        statics, dyn_args, dyn_kwargs = _split_args(static_nums, static_names, args, kwargs)
        leaves, tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        # ShapeDtypeStructs (as JAX takes them) are abstract values: nothing is allocated
        arrs = [a if isinstance(a, Array) else _abstract_leaf(a)
                if isinstance(a, ShapeDtypeStruct) and not isinstance(a.dtype, dtypes.ExtendedDType) else
                _leaf_to_array(a, f"argument leaf {i}") for i, a in enumerate(leaves)]
        f = _rebuild_call(fun, statics, static_nums, len(args)) if statics else fun
        tracing_state.replayable_next(len(arrs))  # (a jaxpr may be evaluated again elsewhere)
        traced = _trace(f, None, None, arrs, tree)
        traced.builder.simplify()  # show the program as it is compiled: simplified, no dead or repeated work
        from kiln._src import jaxpr as jaxpr_view
        jaxpr = jaxpr_view.view(traced.builder, list(traced.consts), len(arrs), text=traced.text())
        jaxpr._traced = traced
        if return_shape:
            shapes = [ShapeDtypeStruct(s, d, weak_type=w) for s, d, w in traced.out_avals]
            return jaxpr, tree_util.tree_unflatten(traced.out_tree, shapes)
        return jaxpr
    return wrapped


# XLA's ExecutableBuildOptions that compile(compiler_options=) takes besides xla_* flags
_BUILD_OPTIONS = frozenset({"exec_time_optimization_effort", "memory_fitting_effort", "optimization_level",
                            "memory_optimization_level", "num_replicas", "num_partitions", "device_ordinal"})


class ShapeDtypeStruct:
    """An array's shape, dtype, weak type and (optionally) sharding, with no data
    (jax.ShapeDtypeStruct)."""
    __slots__ = ("shape", "dtype", "weak_type", "sharding")

    def __init__(self, shape, dtype, weak_type=False, *, sharding=None, manual_axis_type=None, is_ref=False):
        del manual_axis_type
        if is_ref:
            raise NotImplementedError("ShapeDtypeStruct(is_ref=True): kiln describes Refs by their values' "
                                      "ShapeDtypeStruct")
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype if isinstance(dtype, dtypes.ExtendedDType) else np.dtype(dtype)  # (key<fry>)
        self.weak_type = bool(weak_type)
        self.sharding = sharding

    @classmethod
    def like(cls, x):
        """The ShapeDtypeStruct of x (an array, tracer, scalar or anything with .shape and .dtype),
        with x's sharding where x has one."""
        if isinstance(x, (core.Array, core.Tracer)) or not (hasattr(x, "shape") and hasattr(x, "dtype")):
            a = x if isinstance(x, (core.Array, core.Tracer)) else core.asarray(x)
            # (as JAX: only an array placed on purpose, by device_put or a sharded computation,
            # hands its sharding on)
            sharding = a.sharding if isinstance(a, core.Array) and getattr(a, "committed", False) else None
            return cls(a.shape, a.dtype, bool(getattr(a, "weak_type", False)), sharding=sharding)
        return cls(x.shape, x.dtype, bool(getattr(x, "weak_type", False)), sharding=getattr(x, "sharding", None))

    def update(self, **kwargs):
        """A copy with the given fields (shape, dtype, weak_type, sharding) replaced."""
        fields = {"shape": self.shape, "dtype": self.dtype, "weak_type": self.weak_type, "sharding": self.sharding}
        unknown = set(kwargs) - set(fields)
        if unknown:
            raise TypeError(f"ShapeDtypeStruct.update: unknown fields {sorted(unknown)}")
        fields.update(kwargs)
        return type(self)(fields["shape"], fields["dtype"], fields["weak_type"], sharding=fields["sharding"])

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape))

    def __repr__(self):
        extra = f", sharding={self.sharding!r}" if self.sharding is not None else ""
        extra += ", weak_type=True" if self.weak_type else ""
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{extra})"

    def __eq__(self, other):
        # JAX compares the weak type and sharding too
        return isinstance(other, ShapeDtypeStruct) and (self.shape, self.dtype, self.weak_type) == \
            (other.shape, other.dtype, other.weak_type) and self.sharding == other.sharding

    def __hash__(self):
        return hash((self.shape, self.dtype, self.weak_type))


def eval_shape(fun, *args, **kwargs):
    """The ShapeDtypeStructs of fun's results, traced on abstract values of the arguments (arrays,
    ShapeDtypeStructs or anything with shape and dtype); a typed key array, or a ShapeDtypeStruct
    of dtype key<fry>, in or out, is described as a key (kiln's own callers use _eval_shape,
    which sees the key's data, as the transformations do)."""
    from kiln import random
    args, kwargs = random._keys_of_specs((args, kwargs))
    return random._specs_of_keys(_eval_shape(fun, *args, **kwargs))


def _eval_shape(fun, *args, **kwargs):
    leaves, tree = tree_util.tree_flatten((args, kwargs))
    arrs = []
    for leaf in leaves:
        if isinstance(leaf, (Array, ShapeDtypeStruct)) or (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            arrs.append(_abstract_leaf(leaf))  # whatever the size (a model's parameter shapes)
        else:
            arrs.append(_leaf_to_array(leaf))
    def described(*a, **k):  # a result that is already a description stays one (lineax passes them)
        from kiln import lax
        return tree_util.tree_map(lambda x: lax._full(x.shape, 0, x.dtype, x.weak_type)
                                  if isinstance(x, ShapeDtypeStruct) and not isinstance(x.dtype, dtypes.ExtendedDType)
                                  else x, fun(*a, **k))
    traced = _trace(described, None, None, arrs, tree)
    return tree_util.tree_unflatten(traced.out_tree, [ShapeDtypeStruct(s, d, w) for s, d, w in traced.out_avals])
