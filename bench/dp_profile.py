"""Where a data-parallel step's GPU time goes: bench/dp_mlp.py's step on k GPUs, timed (synchronized
and with 30 steps queued) and profiled with PyTorch's profiler (CUDA activity of every GPU, 10
steps queued): per GPU the kernels' busy time, the span from first to last kernel, and each NCCL
call's duration in a step. Needs PyTorch; run on a machine with several GPUs:

    PYTHONPATH=python python3 bench/dp_profile.py [--gpus 1 2 4] [--processes] [--timeline]

--processes runs each k as k processes of one GPU (kiln.distributed over loopback, NCCL across
processes) instead of one process driving k GPUs; then only the timing is printed (process 0's).
"""
import argparse
import collections
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
HERE = os.path.dirname(os.path.abspath(__file__))
SIZES, ROWS = (1024, 4096, 4096, 10), 4096


def step_for(devs):
    import kiln
    import kiln.numpy as jnp
    from kiln.sharding import Mesh, NamedSharding, PartitionSpec as P
    sys.path.insert(0, HERE)
    import dp_mlp
    k = len(devs)
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m), np.zeros(n, np.float32))
              for m, n in zip(SIZES[:-1], SIZES[1:])]
    x = rng.standard_normal((k * ROWS, SIZES[0])).astype(np.float32)
    y = rng.standard_normal((k * ROWS, SIZES[-1])).astype(np.float32)
    mesh = Mesh(np.array(devs), ("d",))
    args = (kiln.device_put(params, NamedSharding(mesh, P())), kiln.device_put(x, NamedSharding(mesh, P("d"))),
            kiln.device_put(y, NamedSharding(mesh, P("d"))))
    return dp_mlp.make_step(kiln, jnp, kiln.lax, kiln.shard_map, mesh, P), args


def timing(f, args):
    import kiln
    for _ in range(5):
        kiln.block_until_ready(f(*args))
    ts = []
    for _ in range(20):
        t = time.perf_counter()
        kiln.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(30):
        out = f(*args)
    kiln.block_until_ready(out)
    return statistics.median(ts), (time.perf_counter() - t) / 30


def profile(f, args, steps=10, timeline=False):
    import kiln
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile as torch_profile
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            out = f(*args)
        kiln.block_until_ready(out)
    per = collections.defaultdict(list)
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            per[e.device_index].append((e.time_range.start, e.time_range.end, e.name))
    for d, ev in sorted(per.items()):
        ev.sort()
        nccl = [b - a for a, b, n in ev if "nccl" in n.lower()]
        last = sorted(round(v) for v in nccl[-len(nccl) // steps:]) if nccl else []
        print(f"  gpu{d}: busy {sum(b - a for a, b, _ in ev) / steps:.0f} us/step, span "
              f"{(ev[-1][1] - ev[0][0]) / steps:.0f} us/step, NCCL calls of the last step (us) {last}", flush=True)
        if timeline:  # the last step's kernels and copies: start (us after its first), duration, name
            step = ev[-(len(ev) // steps):]
            t0 = step[0][0]
            for a, b, n in step:
                print(f"    {a - t0:8.1f} {b - a:7.1f}  {n[:70]}")


CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import dp_profile, kiln
from kiln import distributed
a = json.loads(sys.argv[1])
distributed.initialize(**a, initialization_timeout=60)
f, args = dp_profile.step_for(kiln.devices())
synced, queued = dp_profile.timing(f, args)
if kiln.process_index() == 0:
    print(json.dumps([synced, queued]), flush=True)
distributed.shutdown()
"""


def processes(k):
    from timing import loopback_processes
    return loopback_processes(CHILD.format(here=HERE), k, timeout=300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--processes", action="store_true")
    ap.add_argument("--timeline", action="store_true", help="print the last profiled step's GPU activity")
    args = ap.parse_args()
    import kiln
    for k in args.gpus:
        if args.processes and k > 1:
            synced, queued = processes(k)
            print(f"{k} processes x 1 GPU: synced {synced * 1e3:.3f} ms, queued {queued * 1e3:.3f} ms/step", flush=True)
            continue
        f, a = step_for(kiln.devices("gpu")[:k])
        synced, queued = timing(f, a)
        print(f"1 process x {k} GPU(s): synced {synced * 1e3:.3f} ms, queued {queued * 1e3:.3f} ms/step", flush=True)
        if not args.processes:
            profile(f, a, timeline=args.timeline)


if __name__ == "__main__":
    main()
