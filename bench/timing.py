"""What bench/'s standalone scripts share: the median of synchronized calls, and runs of one
program as several kiln processes over loopback."""
import json
import socket
import statistics
import subprocess
import sys
import time


def timed(fn, sync, reps, warm=2):
    """Median seconds of sync(fn()) over reps calls, after `warm` untimed ones."""
    for _ in range(warm):
        sync(fn())
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        sync(fn())
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def loopback_processes(child, n, extra=None, timeout=600):
    """Runs the Python source `child` as n processes, process p's argv[1] the JSON of its
    kiln.distributed.initialize arguments (one GPU each: local_device_ids [p]) with `extra`'s
    entries added; returns the last JSON list process 0 printed (NCCL may print too)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-c", child, json.dumps(
        {"coordinator_address": f"127.0.0.1:{port}", "num_processes": n, "process_id": p, "local_device_ids": [p],
         **(extra or {})})], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in range(n)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode:
            raise RuntimeError(f"a process failed:\n{err[-2000:]}")
    return json.loads([ln for ln in outs[0][0].strip().splitlines() if ln.startswith("[")][-1])
