"""All-reduce of 1 GiB of float32 over every GPU: kiln (psum inside a jitted shard_map: NCCL, or the
copy engines on two GPUs of one process; KILN_PEER_ALLREDUCE_MIB=0 for NCCL there too) against
PyTorch's torch.distributed.all_reduce (NCCL, one process per GPU). Prints the bus bandwidth,
2 (n - 1) / n * bytes / time, of each. Run on a machine with two or more GPUs:
    PYTHONPATH=python python3 bench/allreduce.py [--mib 1024] [--iters 20] [--gpus N] [--processes]
--processes runs kiln as N processes of one GPU (kiln.distributed over loopback), as PyTorch runs."""

import argparse
import os
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def busbw(n, nbytes, seconds):
    return 2 * (n - 1) / n * nbytes / seconds / 1e9


def bench_kiln(mib, iters, ngpus=None, platform="gpu"):
    import numpy as np
    import kiln
    from kiln import lax
    from kiln.sharding import Mesh, NamedSharding, PartitionSpec as P
    gpus = kiln.devices(platform)[:ngpus]
    n = len(gpus)
    per = mib * (1 << 20) // 4
    mesh = Mesh(np.array(gpus), ("x",))
    x = kiln.device_put(np.ones((n * per,), np.float32), NamedSharding(mesh, P("x")))
    f = kiln.jit(kiln.shard_map(lambda v: lax.psum(v, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    kiln.block_until_ready(f(x))
    kiln.block_until_ready(f(x))
    t0 = time.perf_counter()
    for _ in range(iters):
        out = f(x)
    kiln.block_until_ready(out)
    dt = (time.perf_counter() - t0) / iters
    return n, dt, busbw(n, per * 4, dt)


CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import allreduce, kiln
from kiln import distributed
a = json.loads(sys.argv[1])
mib, iters, platform = a.pop("mib"), a.pop("iters"), a.pop("platform")
distributed.initialize(**a, initialization_timeout=60)
n, dt, bw = allreduce.bench_kiln(mib, iters, platform=platform)
if kiln.process_index() == 0:
    print(json.dumps([n, dt, bw]), flush=True)
distributed.shutdown()
"""


def bench_kiln_processes(n, mib, iters, platform="gpu"):
    """kiln's psum over n processes of one device each (process 0's timing)."""
    from timing import loopback_processes
    here = os.path.dirname(os.path.abspath(__file__))
    return loopback_processes(CHILD.format(here=here), n, {"mib": mib, "iters": iters, "platform": platform})


def _torch_worker(rank, n, mib, iters, port, q):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    t = torch.ones(mib * (1 << 20) // 4, dtype=torch.float32, device="cuda")
    for _ in range(2):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    if rank == 0:
        q.put(dt)
    dist.destroy_process_group()


def bench_torch(n, mib, iters):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(_torch_worker, args=(n, mib, iters, 29517, q), nprocs=n, join=True)
    dt = q.get()
    return dt, busbw(n, mib * (1 << 20), dt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--gpus", type=int, default=None, help="the first N GPUs (default: all)")
    ap.add_argument("--processes", action="store_true", help="kiln as one process per GPU")
    args = ap.parse_args()
    if args.processes:
        import kiln
        n, dt, bw = bench_kiln_processes(args.gpus or len(kiln.devices("gpu")), args.mib, args.iters)
        how = "processes"
    else:
        n, dt, bw = bench_kiln(args.mib, args.iters, args.gpus)
        how = "GPUs, one process"
    print(f"kiln  psum (shard_map, jit) {args.mib} MiB f32 over {n} {how}: {dt * 1e3:.2f} ms, bus bandwidth {bw:.1f} GB/s")
    try:
        tdt, tbw = bench_torch(n, args.mib, args.iters)
        print(f"torch dist.all_reduce        {args.mib} MiB f32 over {n} GPUs: {tdt * 1e3:.2f} ms, bus bandwidth {tbw:.1f} GB/s")
    except ImportError as e:
        print(f"torch: not installed ({e})")


if __name__ == "__main__":
    main()
