"""kiln.experimental.multihost_utils: host-level data exchange between the processes of a run
(jax.experimental.multihost_utils), through kiln.distributed's coordination service. With one
process each is the identity on its data (gathers add the process axis of size 1)."""
import itertools
import pickle

import numpy as np

from kiln._src import tree_util

_seq = itertools.count()


def _state():
    from kiln._src.distributed import global_state
    return global_state


def _exchange(name, value):
    """Every process's `value` (picklable), in process order."""
    st = _state()
    if st.num_processes == 1:
        return [value]
    client = st.client
    if client is None:
        raise RuntimeError(f"multihost_utils.{name}: kiln.distributed.initialize has not been called")
    tag = f"kiln/multihost/{name}/{next(_seq)}"
    client.key_value_set(f"{tag}/{st.process_id}", pickle.dumps(value).hex())
    out = [pickle.loads(bytes.fromhex(client.blocking_key_value_get(f"{tag}/{p}", 300_000)))
           for p in range(st.num_processes)]
    client.wait_at_barrier(f"{tag}/done", 300_000)
    if st.process_id == 0:
        for p in range(st.num_processes):
            try:
                client.delete(f"{tag}/{p}")
            except Exception:  # the key store keeps it: harmless
                pass
    return out


def _global(x):
    """For an array split over several processes: its replica-0 pieces here, with their indices."""
    from kiln._src.spmd import ShardedArray
    if isinstance(x, ShardedArray) and not getattr(x, "is_fully_addressable", True):
        pieces = [(tuple((s.start, s.stop) for s in sh.index), np.asarray(sh.data))
                  for sh in x.addressable_shards if sh.replica_id == 0]
        return ("global", tuple(x.shape), np.dtype(x.dtype).str, pieces)
    return ("local", np.asarray(x))


def process_allgather(in_tree, tiled=False):
    """Every process's values of in_tree's leaves, as NumPy arrays: stacked on a new leading axis
    of size process_count() (tiled: concatenated along axis 0). An array split over several
    processes comes back whole (its global value), as in JAX."""
    leaves, tree = tree_util.tree_flatten(in_tree)
    every = _exchange("process_allgather", [_global(x) for x in leaves])
    out = []
    for i in range(len(leaves)):
        if every[0][i][0] == "global":
            _, shape, dt, _ = every[0][i]
            whole = np.empty(shape, np.dtype(dt))
            for e in every:
                for idx, data in e[i][3]:
                    whole[tuple(slice(a, b) for a, b in idx)] = data
            out.append(whole)
            continue
        parts = [np.asarray(e[i][1]) for e in every]
        out.append(np.concatenate([np.atleast_1d(p) for p in parts], axis=0) if tiled else np.stack(parts))
    return tree_util.tree_unflatten(tree, out)


def broadcast_one_to_all(in_tree, is_source=None):
    """Process 0's values of in_tree (or those of the process with is_source=True) on every
    process, as NumPy arrays."""
    st = _state()
    if is_source is None:
        is_source = st.process_id == 0
    leaves, tree = tree_util.tree_flatten(in_tree)
    mine = [np.asarray(x) for x in leaves] if is_source else None
    every = _exchange("broadcast_one_to_all", mine)
    sources = [e for e in every if e is not None]
    if len(sources) != 1:
        raise ValueError(f"broadcast_one_to_all: exactly one process must be the source, got {len(sources)}")
    return tree_util.tree_unflatten(tree, sources[0])


def sync_global_devices(name):
    """Waits until every process has called it with the same name."""
    st = _state()
    if st.num_processes == 1:
        return
    if st.client is None:
        raise RuntimeError("multihost_utils.sync_global_devices: kiln.distributed.initialize has not been called")
    names = _exchange("sync_global_devices", str(name))
    if len(set(names)) != 1:
        raise AssertionError(f"sync_global_devices: the processes passed different names: {names}")


def assert_equal(in_tree, fail_message=""):
    """Raises AssertionError unless every process holds the same values of in_tree."""
    every = _exchange("assert_equal", [np.asarray(x) for x in tree_util.tree_leaves(in_tree)])
    for other in every[1:]:
        if len(other) != len(every[0]) or any(not np.array_equal(a, b) for a, b in zip(every[0], other)):
            raise AssertionError(f"assert_equal: the processes' values differ. {fail_message}")


__all__ = ["process_allgather", "broadcast_one_to_all", "sync_global_devices", "assert_equal"]
