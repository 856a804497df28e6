"""kiln GPU benchmarks against JAX, PyTorch and CuPy, in one process and one run.

    python3 bench/gpu.py [--only selu,sumsq,...] [--reps N]

kiln is imported from PYTHONPATH (the installed wheel). Workloads and targets: the GPU column of
the project's benchmark notes. Kernel times are medians over repeats of one synchronized call;
dispatch and eager time a loop of calls and synchronize once. Every kiln result is checked
against NumPy before it is timed. A library that is missing or fails prints its error in the row.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import transformer  # noqa: E402  (examples/transformer.py: the model both libraries run)

ALL = ["copy", "selu", "sumsq", "softmax", "matmul_highest", "matmul_default", "mlp_step", "dispatch", "eager",
       "eager_chain", "upload", "download",
       "vmap_matvec", "compile_selu", "compile_mlp", "transformer2", "transformer8", "compile_transformer2",
       "compile_transformer8", "attention_fwd", "attention_fwd_bwd", "transpose_add", "layernorm", "chain200",
       "chain1000"]


def median_time(fn, sync, reps, warm=3):
    for _ in range(warm):
        fn()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def loop_time(fn, sync, n):
    for _ in range(50):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(n):
        r = fn()
    sync(r)
    return (time.perf_counter() - t) / n


class Peers:
    def __init__(self):
        import kiln
        import kiln.numpy as knp
        self.kiln, self.knp = kiln, knp
        try:
            import jax
            import jax.numpy as jjnp
            jax.config.update("jax_enable_compilation_cache", False)
            self.jax, self.jjnp = jax, jjnp
        except Exception:  # noqa: BLE001
            self.jax = None
        try:
            import torch
            self.torch = torch if torch.cuda.is_available() else None
        except Exception:  # noqa: BLE001
            self.torch = None
        try:
            import cupy
            self.cupy = cupy
        except Exception:  # noqa: BLE001
            self.cupy = None


def ksync(r=None):
    if r is not None:
        r.block_until_ready()

def libs(P):
    """(label, lib, numpy module) for kiln and, when installed, JAX."""
    out = [("kiln", P.kiln, P.knp)]
    if P.jax:
        out.append(("jax", P.jax, P.jjnp))
    return out


def steps_of(jf):
    """Launches per call of a kiln jit (kernels + library calls) and its host steps."""
    (entry,) = jf._cache.values()
    return entry.exe.num_steps, entry.exe.host_steps


def run_extra(P, name, reps):
    """The workloads of the fusion-at-scale issue: transformer step, attention, a.T + a,
    layernorm, long elementwise chains (compile time and kernel count)."""
    rows = {}
    rng = np.random.default_rng(0)
    if name in ("transformer2", "transformer8"):
        layers = int(name[len("transformer"):])
        params, toks = transformer.init_params(layers), transformer.tokens()
        ref = None
        for label, lib, np_ in libs(P):
            step = transformer.make_step(lib, np_)
            kp, kt = lib.device_put(params), lib.device_put(toks)
            out = step(kp, kt)
            loss = float(out[1])
            if ref is None:
                ref = loss
            assert abs(loss - ref) < 2e-3 * abs(ref), f"{label} loss {loss} differs from {ref}"
            res = [None]
            t = median_time(lambda: res.__setitem__(0, step(kp, kt)), lambda: lib.block_until_ready(res[0]), reps)
            if label == "kiln":
                n, host = steps_of(step)
                label = f"kiln ({n} launches, {len(host)} host steps)"
            rows[label] = (t, None)
        return rows
    if name in ("compile_transformer2", "compile_transformer8"):  # fresh processes, empty kiln cache
        layers = name[len("compile_transformer"):]
        with tempfile.TemporaryDirectory() as d:
            for label in ["kiln"] + (["jax"] if P.jax else []):
                r = subprocess.run([sys.executable, __file__, "--only", f"first_transformer{layers}_{label}",
                                    "--rows-only"], env=dict(os.environ, KILN_CACHE_DIR=d), capture_output=True, text=True)
                if r.returncode:
                    raise RuntimeError(r.stderr[-500:])
                for line in r.stdout.splitlines():
                    lbl, t = line.split("=")
                    rows[lbl] = (float(t), None)
        return rows
    if name.startswith("first_transformer"):
        layers, which = name[len("first_transformer"):].split("_")
        lib, np_ = (P.kiln, P.knp) if which == "kiln" else (P.jax, P.jjnp)
        params, toks = transformer.init_params(int(layers)), transformer.tokens()
        kp, kt = lib.device_put(params), lib.device_put(toks)
        lib.block_until_ready(kp)
        t0 = time.perf_counter()
        lib.block_until_ready(transformer.make_step(lib, np_)(kp, kt))
        rows[which] = (time.perf_counter() - t0, None)
        return rows
    if name in ("attention_fwd", "attention_fwd_bwd"):
        b, h, t, d = 8, 16, 1024, 64
        q, k, v = (rng.standard_normal((b, h, t, d)).astype(np.float32) for _ in range(3))
        def make(lib, np_):
            def attn(q, k, v):
                s = np_.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
                s = np_.where(np_.tril(np_.ones((t, t), dtype=bool)), s, -1e9)
                return np_.einsum("bhqk,bhkd->bhqd", lib.nn.softmax(s, axis=-1), v)
            if name == "attention_fwd":
                return lib.jit(attn)
            return lib.jit(lib.grad(lambda q, k, v: np_.sum(attn(q, k, v) ** 2), argnums=(0, 1, 2)))
        for label, lib, np_ in libs(P):
            f = make(lib, np_)
            args = [lib.device_put(a) for a in (q, k, v)]
            res = [f(*args)]
            lib.block_until_ready(res[0])
            t_ = median_time(lambda: res.__setitem__(0, f(*args)), lambda: lib.block_until_ready(res[0]), reps)
            if label == "kiln":
                label = f"kiln ({steps_of(f)[0]} launches)"
            rows[label] = (t_, None)
        return rows
    if name in ("transpose_add", "layernorm"):
        if name == "transpose_add":
            a = rng.standard_normal((8192, 8192)).astype(np.float32)
            fn = lambda np_: (lambda a: a.T + a)  # noqa: E731
            nbytes = 3 * a.nbytes  # a read twice (transposed and in place), the result written
        else:
            a = rng.standard_normal((16384, 1024)).astype(np.float32)
            fn = lambda np_: (lambda a: (a - a.mean(-1, keepdims=True)) /  # noqa: E731
                              np_.sqrt(a.var(-1, keepdims=True) + 1e-5) * 1.5)
            nbytes = 2 * a.nbytes
        for label, lib, np_ in libs(P):
            f = lib.jit(fn(np_))
            ka = lib.device_put(a)
            res = [f(ka)]
            lib.block_until_ready(res[0])
            t_ = median_time(lambda: res.__setitem__(0, f(ka)), lambda: lib.block_until_ready(res[0]), reps)
            if label == "kiln":
                label = f"kiln ({steps_of(f)[0]} launches)"
            rows[label] = (t_, nbytes / t_ / 1e9)
        if P.torch:
            ta = P.torch.from_numpy(a).cuda()
            t_ = median_time(lambda: ta.clone(), P.torch.cuda.synchronize, reps)
            rows["torch copy (bandwidth)"] = (t_, 2 * a.nbytes / t_ / 1e9)
            if name == "transpose_add":  # the same bytes as a copy moves: a 1.5x longer copy
                rows["torch copy, scaled to a.T + a's bytes"] = (t_ * 1.5, 3 * a.nbytes / (t_ * 1.5) / 1e9)
        return rows
    if name in ("chain200", "chain1000"):  # compile + first call of an unrolled chain on 16 elements
        n = int(name[len("chain"):])
        x = np.linspace(-1, 1, 16).astype(np.float32)
        with tempfile.TemporaryDirectory() as d:
            for label in ["kiln"] + (["jax"] if P.jax else []):
                code = ("import time,numpy as np,{m} as j,{m}.numpy as n\n"
                        "def f(x):\n for _ in range({n}): x=n.tanh(x*1.01+0.5)-x*0.1\n return x\n"
                        "x=j.device_put(np.linspace(-1,1,16).astype(np.float32));g=j.jit(f)\n"
                        "t=time.perf_counter();g(x).block_until_ready();dt=time.perf_counter()-t\n"
                        "k=list(g._cache.values())[0].exe.num_steps if '{m}'=='kiln' else 0\n"
                        "print(dt,k)").format(m=label, n=n)
                r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, KILN_CACHE_DIR=d),
                                   capture_output=True, text=True)
                if r.returncode:
                    raise RuntimeError(r.stderr[-500:])
                dt, k = r.stdout.split()[-2:]
                rows[f"kiln ({k} kernels)" if label == "kiln" else label] = (float(dt), None)
        return rows
    raise KeyError(name)



def run(P, name, reps):
    kiln, knp = P.kiln, P.knp
    rows = {}
    rng = np.random.default_rng(0)
    if name in ("upload", "download"):  # 256 MiB between pageable NumPy memory and the GPU
        x = rng.standard_normal(1 << 26).astype(np.float32)
        up = name == "upload"
        kx = kiln.device_put(x)
        assert np.array_equal(np.asarray(kx), x), "kiln round trip differs"
        cpu = kiln.devices("cpu")[0]
        f = (lambda: kiln.device_put(x).block_until_ready()) if up else (lambda: kiln.device_put(kx, cpu).block_until_ready())
        rows["kiln"] = (median_time(f, lambda: None, reps), x.nbytes)
        if P.jax:
            jx = P.jax.device_put(x)
            f = (lambda: P.jax.device_put(x).block_until_ready()) if up else (lambda: np.asarray(P.jax.device_put(jx + 0)))
            rows["jax"] = (median_time(f, lambda: None, reps), x.nbytes)
        if P.torch:
            tx = P.torch.from_numpy(x).cuda()
            f = (lambda: P.torch.from_numpy(x).cuda()) if up else (lambda: tx.cpu())
            rows["torch"] = (median_time(f, P.torch.cuda.synchronize, reps), x.nbytes)
        if P.cupy:
            cx = P.cupy.asarray(x)
            f = (lambda: P.cupy.asarray(x)) if up else (lambda: P.cupy.asnumpy(cx))
            rows["cupy"] = (median_time(f, P.cupy.cuda.Device().synchronize, reps), x.nbytes)
        return {k: (t, b / t / 1e9) for k, (t, b) in rows.items()}
    if name in ("copy", "selu", "sumsq"):
        n = 1 << 26
        x = rng.standard_normal(n).astype(np.float32)
        kx = kiln.device_put(x)
        if name == "copy":
            if P.torch:
                tx = P.torch.from_numpy(x).cuda()
                t = median_time(lambda: tx.clone(), P.torch.cuda.synchronize, reps)
                rows["torch clone"] = (t, 2 * x.nbytes / t / 1e9)
            if P.cupy:
                cx = P.cupy.asarray(x)
                t = median_time(lambda: cx.copy(), P.cupy.cuda.Device().synchronize, reps)
                rows["cupy copy"] = (t, 2 * x.nbytes / t / 1e9)
            f = kiln.jit(lambda x: x + 0.5)
            out = [None]
            t = median_time(lambda: out.__setitem__(0, f(kx)), lambda: out[0].block_until_ready(), reps)
            rows["kiln x+0.5"] = (t, 2 * x.nbytes / t / 1e9)
            return rows
        if name == "selu":
            def sel(np_):
                def selu(x):
                    return 1.05 * np_.where(x > 0, x, 1.67 * np_.exp(x) - 1.67)
                return selu
            ref = sel(np)(x.astype(np.float64))
            bytes_ = 2 * x.nbytes
        else:
            def sel(np_):
                def sumsq(x):
                    return np_.sum(x * x)
                return sumsq
            ref = np.sum(x.astype(np.float64) ** 2)
            bytes_ = x.nbytes
        f = kiln.jit(sel(knp))
        got = np.asarray(f(kx))
        assert np.allclose(got, ref, rtol=1e-4, atol=1e-5), "kiln result differs from NumPy"
        out = [None]
        t = median_time(lambda: out.__setitem__(0, f(kx)), lambda: out[0].block_until_ready(), reps)
        rows["kiln"] = (t, bytes_ / t / 1e9)
        if P.jax:
            jf = P.jax.jit(sel(P.jjnp))
            jx = P.jax.device_put(x)
            t = median_time(lambda: out.__setitem__(0, jf(jx)), lambda: out[0].block_until_ready(), reps)
            rows["jax"] = (t, bytes_ / t / 1e9)
        if P.torch:
            tx = P.torch.from_numpy(x).cuda()
            tf = sel(P.torch)
            t = median_time(lambda: tf(tx), P.torch.cuda.synchronize, reps)
            rows["torch eager"] = (t, bytes_ / t / 1e9)
        if P.cupy:
            cx = P.cupy.asarray(x)
            cf = P.cupy.fuse(sel(P.cupy))
            t = median_time(lambda: cf(cx), P.cupy.cuda.Device().synchronize, reps)
            rows["cupy fuse"] = (t, bytes_ / t / 1e9)
        return rows
    if name == "softmax":
        a = rng.standard_normal((8192, 8192)).astype(np.float32)
        ka = kiln.device_put(a)
        f = kiln.jit(lambda a: kiln.nn.softmax(a, axis=-1))
        got = np.asarray(f(ka))[:4]
        e = np.exp(a[:4] - a[:4].max(-1, keepdims=True))
        assert np.allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-7)
        out = [None]
        bytes_ = 2 * a.nbytes
        t = median_time(lambda: out.__setitem__(0, f(ka)), lambda: out[0].block_until_ready(), reps)
        rows["kiln"] = (t, bytes_ / t / 1e9)
        if P.jax:
            jf = P.jax.jit(lambda a: P.jax.nn.softmax(a, axis=-1))
            ja = P.jax.device_put(a)
            t = median_time(lambda: out.__setitem__(0, jf(ja)), lambda: out[0].block_until_ready(), reps)
            rows["jax"] = (t, bytes_ / t / 1e9)
        if P.torch:
            ta = P.torch.from_numpy(a).cuda()
            t = median_time(lambda: P.torch.softmax(ta, -1), P.torch.cuda.synchronize, reps)
            rows["torch eager"] = (t, bytes_ / t / 1e9)
        return rows
    if name.startswith("matmul"):
        n = 4096
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        prec = "highest" if name.endswith("highest") else "default"
        f = kiln.jit(lambda a, b: knp.matmul(a, b, precision=prec))
        ka, kb = kiln.device_put(a), kiln.device_put(b)
        got = np.asarray(f(ka, kb))[:8]
        assert np.allclose(got, a[:8].astype(np.float64) @ b, rtol=2e-2 if prec == "default" else 1e-4, atol=0.5 if prec == "default" else 1e-2)
        out = [None]
        t = median_time(lambda: out.__setitem__(0, f(ka, kb)), lambda: out[0].block_until_ready(), reps)
        rows["kiln"] = (t, 2 * n ** 3 / t / 1e12)
        if P.jax:
            jf = P.jax.jit(lambda a, b: P.jjnp.matmul(a, b, precision=prec))
            ja, jb = P.jax.device_put(a), P.jax.device_put(b)
            t = median_time(lambda: out.__setitem__(0, jf(ja, jb)), lambda: out[0].block_until_ready(), reps)
            rows["jax"] = (t, 2 * n ** 3 / t / 1e12)
        if P.torch:
            ta, tb = P.torch.from_numpy(a).cuda(), P.torch.from_numpy(b).cuda()
            P.torch.backends.cuda.matmul.allow_tf32 = prec == "default"
            t = median_time(lambda: ta @ tb, P.torch.cuda.synchronize, reps)
            rows["torch (cuBLAS direct)"] = (t, 2 * n ** 3 / t / 1e12)
        return rows
    if name == "compile_mlp":  # a fresh process and an empty kiln cache: the cold first call
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, __file__, "--only", "mlp_first", "--rows-only"],
                               env=dict(os.environ, KILN_CACHE_DIR=d), capture_output=True, text=True)
        for line in r.stdout.splitlines():
            lbl, t = line.split("=")
            rows[lbl] = (float(t), None)
        if r.returncode:
            raise RuntimeError(r.stderr[-500:])
        return rows
    if name in ("mlp_step", "mlp_first"):
        sizes = (1024, 4096, 4096, 10)
        batch = 4096
        def make(lib, np_):
            def loss(params, x, y):
                h = x
                for i, (w, b) in enumerate(params):
                    h = h @ w + b
                    if i < len(params) - 1:
                        h = np_.tanh(h) if i % 2 == 0 else np_.maximum(h, 0)
                return np_.mean((h - y) ** 2)
            def step(params, x, y):
                g = lib.grad(loss)(params, x, y)
                return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, g)]
            return lib.jit(step)
        params = [(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m), np.zeros(n, np.float32))
                  for m, n in zip(sizes[:-1], sizes[1:])]
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        y = rng.standard_normal((batch, sizes[-1])).astype(np.float32)
        for label, lib, np_ in (("kiln", kiln, knp), ("jax", P.jax, P.jjnp if P.jax else None)):
            if lib is None:
                continue
            kp = lib.device_put(params)
            kx, ky = lib.device_put(x), lib.device_put(y)
            f = make(lib, np_)
            t0 = time.perf_counter()
            out = f(kp, kx, ky)
            lib.block_until_ready(out)
            first = time.perf_counter() - t0
            if name == "mlp_first":
                rows[label] = (first, None)
                continue
            res = [None]
            t = median_time(lambda: res.__setitem__(0, f(kp, kx, ky)), lambda: lib.block_until_ready(res[0]), reps)
            rows[label] = (t, None)
        return rows
    if name == "vmap_matvec":
        m = rng.standard_normal((150, 100)).astype(np.float32)
        vs = rng.standard_normal((10, 100)).astype(np.float32)
        for label, lib, np_ in (("kiln", kiln, knp), ("jax", P.jax, P.jjnp if P.jax else None)):
            if lib is None:
                continue
            km = lib.device_put(m)
            f = lib.jit(lib.vmap(lambda v: km @ v))
            kv = lib.device_put(vs)
            rows[label] = (loop_time(lambda: f(kv), ksync, 5000), None)
        return rows
    if name == "dispatch":
        x = np.arange(8, dtype=np.float32)
        f = kiln.jit(lambda x: x + 1)
        kx = kiln.device_put(x)
        rows["kiln"] = (loop_time(lambda: f(kx), ksync, 20000), None)
        if P.jax:
            jf = P.jax.jit(lambda x: x + 1)
            jx = P.jax.device_put(x)
            rows["jax"] = (loop_time(lambda: jf(jx), ksync, 20000), None)
        return rows
    if name == "eager":
        x = np.arange(8, dtype=np.float32)
        kx = kiln.device_put(x)
        rows["kiln"] = (loop_time(lambda: kx * 2 + 1, ksync, 5000), None)
        if P.jax:
            jx = P.jax.device_put(x)
            rows["jax"] = (loop_time(lambda: jx * 2 + 1, ksync, 2000), None)
        if P.torch:
            tx = P.torch.from_numpy(x).cuda()
            rows["torch eager"] = (loop_time(lambda: tx * 2 + 1, lambda r=None: P.torch.cuda.synchronize(), 5000), None)
        if P.cupy:
            cx = P.cupy.asarray(x)
            rows["cupy"] = (loop_time(lambda: cx * 2 + 1, lambda r=None: P.cupy.cuda.Device().synchronize(), 5000), None)
        return rows
    if name == "eager_chain":  # relu(tanh(x * 2 + 1) - 0.5) on 8 elements, unjitted
        x = np.arange(8, dtype=np.float32) / 8
        kx = kiln.device_put(x)
        got = np.asarray(knp.maximum(knp.tanh(kx * 2 + 1) - 0.5, 0))
        assert np.allclose(got, np.maximum(np.tanh(x * 2 + 1) - 0.5, 0), rtol=1e-5), "kiln result differs"
        rows["kiln"] = (loop_time(lambda: knp.maximum(knp.tanh(kx * 2 + 1) - 0.5, 0), ksync, 5000), None)
        if P.jax:
            jx = P.jax.device_put(x)
            rows["jax"] = (loop_time(lambda: P.jjnp.maximum(P.jjnp.tanh(jx * 2 + 1) - 0.5, 0), ksync, 1000), None)
        if P.torch:
            tx = P.torch.from_numpy(x).cuda()
            rows["torch eager"] = (loop_time(lambda: P.torch.relu(P.torch.tanh(tx * 2 + 1) - 0.5),
                                             lambda r=None: P.torch.cuda.synchronize(), 5000), None)
        if P.cupy:
            cx = P.cupy.asarray(x)
            rows["cupy"] = (loop_time(lambda: P.cupy.maximum(P.cupy.tanh(cx * 2 + 1) - 0.5, 0),
                                      lambda r=None: P.cupy.cuda.Device().synchronize(), 5000), None)
        return rows
    if name == "compile_selu":
        code = ("import time,numpy as np;t=time.perf_counter();import {m} as j;import {m}.numpy as n;"
                "x=j.device_put(np.ones(1<<26,np.float32));x.block_until_ready();t0=time.perf_counter();"
                "f=j.jit(lambda x:1.05*n.where(x>0,x,1.67*n.exp(x)-1.67));f(x).block_until_ready();"
                "print(time.perf_counter()-t0)")
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, KILN_CACHE_DIR=d)
            for label, m in (("kiln cold", "kiln"), ("kiln warm disk cache", "kiln"), ("jax", "jax")):
                if m == "jax" and not P.jax:
                    continue
                r = subprocess.run([sys.executable, "-c", code.format(m=m)], env=env, capture_output=True, text=True)
                rows[label] = (float(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else float("nan"), None)
        return rows
    return run_extra(P, name, reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(ALL))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rows-only", action="store_true")
    args = ap.parse_args()
    P = Peers()
    if args.rows_only:
        for name in args.only.split(","):
            for lbl, (t, _) in run(P, name, args.reps).items():
                print(f"{lbl}={t}")
        return
    info = P.kiln._kiln.gpu_info() if P.kiln.default_backend() == "gpu" else {"name": "no GPU"}
    print(f"# kiln GPU bench: {info['name']}, {time.strftime('%Y-%m-%d')}")
    print(f"# jax {getattr(P.jax, '__version__', '-')}, torch {getattr(P.torch, '__version__', '-')}, "
          f"cupy {getattr(P.cupy, '__version__', '-')}")
    print("| workload | library | time | GB/s | kiln/peer |")
    print("|---|---|---|---|---|")
    for name in args.only.split(","):
        try:
            rows = run(P, name, args.reps)
        except Exception as e:  # noqa: BLE001
            print(f"| {name} | error | {type(e).__name__}: {e} | | |")
            continue
        k = [v[0] for lbl, v in rows.items() if lbl.startswith("kiln")]
        for lbl, (t, gbs) in rows.items():
            ratio = "" if lbl.startswith("kiln") or not k else f"{k[0] / t:.2f}x"
            unit = f"{t * 1e3:.3f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} us"
            print(f"| {name} | {lbl} | {unit} | {'' if gbs is None else f'{gbs:.0f}'} | {ratio} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
