"""Sorting on the GPU (issue 13): kiln's radix sort kernels against JAX, CuPy and PyTorch, in one
process and one run, jitted where the library jits.

    python3 bench/sort_gpu.py [--reps N] [--small] [--libs kiln,jax,cupy,torch]

- sort: jnp.sort of 2^24 float32 (--small: 2^20);
- argsort: jnp.argsort of 2^24 float32 (stable);
- rows: jnp.sort of 4096 x 4096 float32 along the last axis (--small: 1024 x 1024);
- rows_arg: jnp.argsort of the same rows.

Inputs are normal floats (no NaN: the peers order NaN and -0 differently). Each result is checked
before it is timed: kiln's bit for bit against NumPy's stable sort, the peers' by being sorted
permutations of the input. Prints one line per workload: the median time in ms of each library
and its ratio to kiln's (above 1: kiln is faster).
"""
import argparse

import numpy as np

from timing import timed


def check(name, w, x, got, want_sorted, want_perm):
    if w in ("sort", "rows"):
        ok = np.array_equal(got, want_sorted)
    elif name == "kiln":  # stable: exactly NumPy's permutation
        ok = np.array_equal(got, want_perm)
    else:  # a permutation that sorts (peers need not be stable)
        ok = np.array_equal(np.sort(got, axis=-1), np.broadcast_to(np.arange(x.shape[-1]), x.shape)) and \
            np.array_equal(np.take_along_axis(x, got.astype(np.int64), axis=-1), want_sorted)
    assert ok, (name, w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--libs", default="kiln,jax,cupy,torch", help="the libraries to time (kiln always)")
    args = ap.parse_args()
    want = set(args.libs.split(","))
    rng = np.random.default_rng(0)
    n1 = 1 << (20 if args.small else 24)
    r = 1024 if args.small else 4096
    flat = rng.standard_normal(n1).astype(np.float32)
    rows = rng.standard_normal((r, r)).astype(np.float32)
    data = {"sort": flat, "argsort": flat, "rows": rows, "rows_arg": rows}
    ref = {}
    for w, x in data.items():
        p = np.argsort(x, axis=-1, kind="stable")
        ref[w] = (np.take_along_axis(x, p, axis=-1), p)

    libs = {}
    import kiln
    import kiln.numpy as kjnp
    libs["kiln"] = (kiln.device_put, kiln.jit, kjnp.sort, kjnp.argsort, lambda x: x.block_until_ready(), np.asarray)
    try:
        if "jax" not in want:
            raise ImportError
        import jax
        import jax.numpy as jjnp
        libs["jax"] = (jax.device_put, jax.jit, jjnp.sort, jjnp.argsort, lambda x: x.block_until_ready(), np.asarray)
    except ImportError:
        pass
    try:
        import cupy
        if "cupy" in want and cupy.cuda.runtime.getDeviceCount():
            libs["cupy"] = (cupy.asarray, lambda f: f, cupy.sort, cupy.argsort,
                            lambda x: cupy.cuda.Device().synchronize(), cupy.asnumpy)
    except Exception:
        pass
    try:
        import torch
        if "torch" in want and torch.cuda.is_available():
            libs["torch"] = (lambda x: torch.from_numpy(x).cuda(), lambda f: f,
                             lambda x, axis=-1: torch.sort(x, dim=axis, stable=True).values,
                             lambda x, axis=-1: torch.argsort(x, dim=axis, stable=True),
                             lambda x: torch.cuda.synchronize(), lambda x: x.cpu().numpy())
    except Exception:
        pass
    print(f"device: {kiln.devices()[0]}", flush=True)
    times = {}
    for name, (put, jit, sort, argsort, sync, host) in libs.items():
        dev = {w: put(x) for w, x in data.items()}
        fns = {"sort": jit(lambda x: sort(x, axis=-1)), "argsort": jit(lambda x: argsort(x, axis=-1)),
               "rows": jit(lambda x: sort(x, axis=-1)), "rows_arg": jit(lambda x: argsort(x, axis=-1))}
        for w, f in fns.items():
            got = host(f(dev[w]))
            check(name, w, data[w], got, *ref[w])
            times[name, w] = timed(lambda: f(dev[w]), sync, args.reps)
    for w in data:
        k = times["kiln", w]
        peers = "  ".join(f"{n} {times[n, w] * 1e3:8.3f} ms ({times[n, w] / k:4.2f}x kiln)" for n in libs if n != "kiln")
        print(f"{w:8s} kiln {k * 1e3:8.3f} ms  {peers}", flush=True)


if __name__ == "__main__":
    main()
