"""Data-parallel MLP training step over 1, 2, ... GPUs: kiln against JAX in the same run.

The GPU MLP workload of bench/gpu.py (1024 -> 4096 -> 4096 -> 10, tanh/relu, mean squared error,
SGD) with a batch of 4096 rows per device (weak scaling): parameters replicated, the batch split
over a 1-D mesh, the step a jitted shard_map whose gradients are `pmean`'d over the mesh. Prints
per device count the median step time of each library (each step waited for) and its weak-scaling
efficiency (time on 1 device / time on k), then the same for a training loop's steps, each taking the
last one's parameters with nothing waited for in between ("pipelined"). Run on a machine with two or more GPUs:
    PYTHONPATH=python python3 bench/dp_mlp.py [--reps 20] [--rows 4096]
(--small: 64 -> 128 -> 128 -> 10 with 256 rows per device, for a CPU with KILN_NUM_CPU_DEVICES.)
"""
import argparse
import os
import time

import numpy as np

from timing import timed

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def make_step(lib, jnp, lax, shard_map, mesh, P):
    def loss(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jnp.tanh(h) if i % 2 == 0 else jnp.maximum(h, 0)
        return jnp.mean((h - y) ** 2)

    def local(params, x, y):
        g = lib.grad(loss)(params, x, y)
        g = lax.pmean(g, "d")
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, g)]

    return lib.jit(shard_map(local, mesh=mesh, in_specs=(P(), P("d"), P("d")), out_specs=P()))


def run(name, lib, devices, sizes, rows, reps, rng_seed=0):
    import importlib
    jnp = importlib.import_module(lib.__name__ + ".numpy")
    lax = lib.lax
    if name == "kiln":
        from kiln.sharding import Mesh, NamedSharding, PartitionSpec as P
        shard_map = lib.shard_map
    else:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        shard_map = getattr(lib, "shard_map", None)
        if shard_map is None:
            from jax.experimental.shard_map import shard_map as sm

            def shard_map(f, mesh, in_specs, out_specs):
                return sm(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)
    rng = np.random.default_rng(rng_seed)
    params = [(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    k = len(devices)
    x = rng.standard_normal((k * rows, sizes[0])).astype(np.float32)
    y = rng.standard_normal((k * rows, sizes[-1])).astype(np.float32)
    mesh = Mesh(np.array(devices), ("d",))
    rep, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("d"))
    p = lib.device_put(params, rep)
    xs, ys = lib.device_put(x, split), lib.device_put(y, split)
    f = make_step(lib, jnp, lax, shard_map, mesh, P)
    out = f(p, xs, ys)
    first = [np.asarray(w) for w, _ in out]
    t = timed(lambda: f(p, xs, ys), lib.block_until_ready, reps, warm=3)
    # a training loop: each step's parameters the last one's, nothing waited for in between
    q = f(p, xs, ys)
    lib.block_until_ready(q)
    t0 = time.perf_counter()
    for _ in range(reps):
        q = f(q, xs, ys)
    lib.block_until_ready(q)
    return t, (time.perf_counter() - t0) / reps, first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--no-jax", action="store_true")
    args = ap.parse_args()
    sizes = (64, 128, 128, 10) if args.small else (1024, 4096, 4096, 10)
    rows = args.rows or (256 if args.small else 4096)
    import kiln
    libs = {"kiln": kiln}
    if not args.no_jax:
        try:
            import jax
            libs["jax"] = jax
        except ImportError:
            pass
    kdev = kiln.devices()
    counts = [k for k in (1, 2, 4, 8) if k <= len(kdev)]
    print(f"device: {kdev[0]} x{len(kdev)}  sizes {sizes}  rows per device {rows}", flush=True)
    base = {}
    for k in counts:
        line, ref = [], None
        for name, lib in libs.items():
            devs = lib.devices()[:k]
            if len(devs) < k:
                continue
            t, tp, w = run(name, lib, devs, sizes, rows, args.reps)
            if ref is None:
                ref = w
            else:  # the same step from the same data: the same weights (float32, TF32 products)
                err = max(float(np.max(np.abs(a - b))) for a, b in zip(ref, w))
                line.append(f"max|w_kiln - w_{name}| {err:.1e}")
            base.setdefault(name, (t, tp))
            b, bp = base[name]
            line.insert(len(line) - (1 if len(line) and line[-1].startswith("max") else 0),
                        f"{name} {t * 1e3:7.3f} ms (eff {b / t * 100:5.1f}%), pipelined {tp * 1e3:7.3f} ms "
                        f"(eff {bp / tp * 100:5.1f}%)")
        print(f"{k} device(s): " + "  ".join(line), flush=True)


if __name__ == "__main__":
    main()
