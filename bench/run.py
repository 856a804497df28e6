"""kiln CPU benchmarks against JAX's CPU backend and NumPy, in one process and one run.

    PYTHONPATH=python python3 bench/run.py [--quick] [--json out.json] [--only selu,sumsq,...]

The workloads and targets are those of the project's benchmark notes (CPU column). Every time is a
median over repeats after warmup calls; each timed kernel call is followed by block_until_ready.
dispatch and eager time a loop of N calls and block on the last result only (asynchronous dispatch).
compile runs each measurement in a fresh subprocess (kiln: empty KILN_CACHE_DIR for the cold figure,
then the same, now populated, directory for the warm-disk-cache figure; JAX: persistent cache off).
Each kiln result is checked against a float64 NumPy reference; a workload that fails for one library
prints the error in its row and the run goes on.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
KILN_PYTHON = os.path.join(os.path.dirname(HERE), "python")
if KILN_PYTHON not in sys.path:
    sys.path.insert(0, KILN_PYTHON)
sys.path.insert(0, HERE)
from timing import timed  # noqa: E402  (bench/timing.py: the timing loop the standalone scripts share)

ALL = ["selu", "sumsq", "softmax", "matmul_highest", "matmul_default", "dispatch", "dispatch_tree", "eager", "compile",
       "mlp_step", "vmap_matvec", "vmap_dispatch", "chain", "transformer"]


# ----------------------------------------------------------------------------------------------
# libraries

class Libs:
    def __init__(self):
        self.errors = {}
        try:
            import kiln
            import kiln.numpy as knp
            self.kiln, self.knp = kiln, knp
        except Exception as e:  # noqa: BLE001 - reported in every row
            self.kiln = self.knp = None
            self.errors["kiln"] = f"import failed: {type(e).__name__}: {e}"
        try:
            import jax
            import jax.numpy as jjnp
            jax.config.update("jax_enable_compilation_cache", False)
            self.jax, self.jjnp = jax, jjnp
        except Exception as e:  # noqa: BLE001
            self.jax = self.jjnp = None
            self.errors["jax"] = f"import failed: {type(e).__name__}: {e}"


def machine_info(libs):
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    os_name = platform.platform()
    try:
        with open("/etc/os-release") as f:
            kv = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
        os_name = kv.get("PRETTY_NAME", os_name).strip('"')
    except OSError:
        pass
    return {
        "cpu": cpu, "cores": os.cpu_count(), "os": os_name, "python": platform.python_version(),
        "numpy": np.__version__,
        "jax": getattr(libs.jax, "__version__", None),
        "kiln": getattr(libs.kiln, "__version__", None),
        "kiln_devices": str(libs.kiln.devices()) if libs.kiln is not None else None,
    }


# ----------------------------------------------------------------------------------------------
# timing

def block(x):
    """Waits for every array in x (a pytree of arrays, or a NumPy result)."""
    if isinstance(x, (tuple, list)):
        for v in x:
            block(v)
    elif isinstance(x, dict):
        for v in x.values():
            block(v)
    elif hasattr(x, "block_until_ready"):
        x.block_until_ready()
    return x


def time_calls(fn, warmup, repeats):
    """Median wall time of one blocked call of fn(), after `warmup` untimed calls. A short pause
    first lets the previous library's worker threads (which spin for a while after work) go idle,
    so libraries measured one after the other in this process do not slow each other down."""
    time.sleep(0.3)
    return timed(fn, block, repeats, warm=warmup)


def time_loop(fn, n, warmup, repeats):
    """Median over repeats of (time of n back-to-back calls, blocking only on the last) / n."""
    for _ in range(warmup):
        block(fn())
    times = []
    for _ in range(repeats):
        out = None
        t0 = time.perf_counter()
        for _ in range(n):
            out = fn()
        block(out)
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def rel_err(got, ref):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise AssertionError(f"shape {got.shape} != reference shape {ref.shape}")
    scale = max(np.max(np.abs(ref)), 1e-30)
    return float(np.max(np.abs(got - ref)) / scale)


# ----------------------------------------------------------------------------------------------
# workload definitions shared by kiln and JAX (jnp is kiln.numpy or jax.numpy)

def selu_fn(jnp):
    def selu(x):
        return 1.05 * jnp.where(x > 0, x, 1.67 * jnp.exp(x) - 1.67)
    return selu


def selu_np(x):
    return 1.05 * np.where(x > 0, x, 1.67 * np.exp(x) - 1.67)  # float32 throughout (NEP 50)


def softmax_np(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ----------------------------------------------------------------------------------------------
# rows

class Row:
    def __init__(self, name, target=None, target_ratio=None, numpy_factor=None):
        self.name = name
        self.target = target or "-"
        self.target_ratio = target_ratio    # kiln/jax must be <= this
        self.numpy_factor = numpy_factor    # kiln must be >= this many times faster than numpy
        self.times = {"kiln": None, "jax": None, "numpy": None}
        self.errors = {}
        self.check = None
        self.extra = {}

    def ratio(self, peer):
        k, p = self.times["kiln"], self.times[peer]
        return k / p if k and p else None

    def met(self):
        if self.target_ratio is None and self.numpy_factor is None:
            return None
        ok = True
        if self.target_ratio is not None:
            r = self.ratio("jax")
            if r is None:
                return None
            ok = ok and r <= self.target_ratio
        if self.numpy_factor is not None:
            r = self.ratio("numpy")
            if r is None:
                return None
            ok = ok and r <= 1.0 / self.numpy_factor
        if self.check is not None and not self.check.startswith("ok"):
            ok = False
        return ok

    def to_json(self):
        return {"name": self.name, "times_s": self.times, "kiln/jax": self.ratio("jax"),
                "kiln/numpy": self.ratio("numpy"), "target": self.target, "met": self.met(),
                "check": self.check, "errors": self.errors, "extra": self.extra}


def attempt(row, lib, thunk):
    """Runs thunk() -> seconds for `lib`; on failure records the error in the row."""
    try:
        row.times[lib] = thunk()
    except Exception as e:  # noqa: BLE001 - a failing workload must not stop the run
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:160]
        row.errors[lib] = msg
        if os.environ.get("KILN_BENCH_TRACEBACK"):
            traceback.print_exc()


def checked(row, got, ref, tol):
    """Records the kiln-vs-reference agreement (max abs error relative to max |ref|)."""
    err = rel_err(got, ref)
    row.check = f"ok ({err:.1e})" if err <= tol else f"MISMATCH rel err {err:.2e} > {tol:.0e}"
    return err


def kernel_row(row, libs, cfg, make_kiln, make_jax, np_call, ref, tol, reps, kiln_missing=None):
    """Common path: kiln and jax jitted callables, a numpy callable, a float64 reference."""
    warm, rep = cfg.warmup, reps
    if kiln_missing is not None:
        row.errors["kiln"] = kiln_missing
    elif libs.kiln is None:
        row.errors["kiln"] = libs.errors["kiln"]
    else:
        def run_kiln():
            f = make_kiln()
            out = block(f())
            checked(row, np.asarray(out), ref, tol)
            return time_calls(f, warm, rep)
        attempt(row, "kiln", run_kiln)
    if libs.jax is None:
        row.errors["jax"] = libs.errors["jax"]
    else:
        def run_jax():
            f = make_jax()
            err = rel_err(np.asarray(block(f())), ref)
            row.extra["jax_rel_err"] = err
            return time_calls(f, warm, rep)
        attempt(row, "jax", run_jax)
    if np_call is not None:
        attempt(row, "numpy", lambda: time_calls(np_call, warm, rep))


def bench_selu(libs, cfg):
    row = Row("selu 2^22", "<=1.0x jax, >=3x numpy", 1.0, 3.0)
    x = np.random.default_rng(1).standard_normal(1 << 22, dtype=np.float32)
    ref = 1.05 * np.where(x > 0, x.astype(np.float64), 1.67 * np.exp(x.astype(np.float64)) - 1.67)

    def mk(mod, jnp):
        def make():
            f = mod.jit(selu_fn(jnp))
            xa = block(jnp.asarray(x))
            return lambda: f(xa)
        return make
    kernel_row(row, libs, cfg, mk(libs.kiln, libs.knp), mk(libs.jax, libs.jjnp),
               lambda: selu_np(x), ref, 1e-5, cfg.repeats)
    return row


def bench_sumsq(libs, cfg):
    row = Row("sumsq 2^22", "<=1.0x jax, >=3x numpy", 1.0, 3.0)
    x = np.random.default_rng(2).standard_normal(1 << 22, dtype=np.float32)
    x64 = x.astype(np.float64)
    ref = np.sum(x64 * x64)

    def mk(mod, jnp):
        def make():
            f = mod.jit(lambda v: jnp.sum(v * v))
            xa = block(jnp.asarray(x))
            return lambda: f(xa)
        return make
    kernel_row(row, libs, cfg, mk(libs.kiln, libs.knp), mk(libs.jax, libs.jjnp),
               lambda: np.sum(x * x), ref, 1e-4, cfg.repeats)
    return row


def bench_softmax(libs, cfg):
    row = Row("softmax 1024x4096", "<=1.5x jax (stretch 1.0x)", 1.5)
    a = np.random.default_rng(3).standard_normal((1024, 4096), dtype=np.float32) * 4
    ref = softmax_np(a.astype(np.float64))

    def mk(mod, jnp):
        def make():
            f = mod.jit(lambda v: mod.nn.softmax(v, axis=-1))
            aa = block(jnp.asarray(a))
            return lambda: f(aa)
        return make
    kernel_row(row, libs, cfg, mk(libs.kiln, libs.knp), mk(libs.jax, libs.jjnp),
               lambda: softmax_np(a), ref, 1e-5, cfg.repeats)
    return row


_MATMUL = {}


def matmul_inputs():
    if not _MATMUL:
        rng = np.random.default_rng(4)
        a = rng.standard_normal((4096, 4096), dtype=np.float32)
        b = rng.standard_normal((4096, 4096), dtype=np.float32)
        _MATMUL.update(a=a, b=b, ref=a.astype(np.float64) @ b.astype(np.float64))
    return _MATMUL


def bench_matmul(libs, cfg, which):
    row = Row(f"matmul 4096 {which}")
    m = matmul_inputs()
    reps, warm = cfg.matmul_repeats, 1

    def mk(mod, jnp):
        def make():
            prec = getattr(mod.lax.Precision, which)
            f = mod.jit(lambda p, q: jnp.matmul(p, q, precision=prec))
            pa, qa = block(jnp.asarray(m["a"])), block(jnp.asarray(m["b"]))
            return lambda: f(pa, qa)
        return make
    # float32 with K=4096: max error relative to max|ref| stays well under 1e-5 at full precision.
    sub = argparse.Namespace(warmup=warm)
    np_call = None
    if "numpy" not in m:
        np_call = lambda: m["a"] @ m["b"]  # noqa: E731
    kernel_row(row, libs, sub, mk(libs.kiln, libs.knp), mk(libs.jax, libs.jjnp), np_call, m["ref"],
               1e-5, reps)
    if np_call is not None:
        m["numpy"] = row.times["numpy"]
    else:
        row.times["numpy"] = m["numpy"]
        row.extra["numpy_note"] = "numpy has no precision setting: same measurement as HIGHEST"
    if "jax_rel_err" in row.extra:
        row.extra["jax_full_precision"] = row.extra["jax_rel_err"] <= 1e-5
    return row


def bench_dispatch(libs, cfg):
    row = Row("dispatch jit(x+1) 8", "<=0.5x jax", 0.5)
    x = np.arange(8, dtype=np.float32)
    n = cfg.loop_n

    def run(mod, jnp, check):
        f = mod.jit(lambda v: v + 1)
        xa = block(jnp.asarray(x))
        if check:
            checked(row, np.asarray(block(f(xa))), x.astype(np.float64) + 1, 0)
        return time_loop(lambda: f(xa), n, 1, cfg.loop_repeats)
    if libs.kiln is not None:
        attempt(row, "kiln", lambda: run(libs.kiln, libs.knp, True))
    if libs.jax is not None:
        attempt(row, "jax", lambda: run(libs.jax, libs.jjnp, False))
    attempt(row, "numpy", lambda: time_loop(lambda: x + 1, n, 1, cfg.loop_repeats))
    return row


def bench_dispatch_tree(libs, cfg):
    """jit of a function of a parameter dict (two layers of weight and bias) and two arrays, called
    back to back: the dispatch of a training step's usual arguments."""
    row = Row("dispatch jit(params dict, x, y)", "<=0.5x jax", 0.5)
    rng = np.random.default_rng(3)
    shapes = {"hidden": {"w": (16, 32), "b": (32,)}, "out": {"w": (32, 4), "b": (4,)}}
    host = {k: {n: rng.standard_normal(s).astype(np.float32) for n, s in v.items()} for k, v in shapes.items()}
    x, y = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
    n = cfg.loop_n

    def run(mod, jnp, check):
        f = mod.jit(lambda p, xb, yb: (p["out"]["b"] * 0.5 + yb[0], p["hidden"]["w"][0] + xb[0, :1]))
        p = {k: {m: block(jnp.asarray(a)) for m, a in v.items()} for k, v in host.items()}
        xa, ya = block(jnp.asarray(x)), block(jnp.asarray(y))
        if check:
            out = f(p, xa, ya)
            checked(row, np.asarray(block(out[0])), host["out"]["b"].astype(np.float64) * 0.5 + y[0], 1e-6)
        return time_loop(lambda: f(p, xa, ya)[0], n, 1, cfg.loop_repeats)
    if libs.kiln is not None:
        attempt(row, "kiln", lambda: run(libs.kiln, libs.knp, True))
    if libs.jax is not None:
        attempt(row, "jax", lambda: run(libs.jax, libs.jjnp, False))
    return row


def bench_vmap_dispatch(libs, cfg):
    """jit(vmap(matvec)) called asynchronously back to back (blocking on the last call): the cost
    per call once calls overlap, beside the vmap_matvec row's blocked small-call latency (the
    workload the benchmark notes define and issue 3's target is about)."""
    row = Row("vmap matvec async throughput")
    rng = np.random.default_rng(7)
    mat = rng.standard_normal((150, 100), dtype=np.float32)
    vs = rng.standard_normal((10, 100), dtype=np.float32)
    n = cfg.loop_n

    def run(mod, jnp, check):
        ma = block(jnp.asarray(mat))
        f = mod.jit(mod.vmap(lambda v: ma @ v))
        va = block(jnp.asarray(vs))
        if check:
            checked(row, np.asarray(block(f(va))), vs.astype(np.float64) @ mat.astype(np.float64).T, 1e-5)
        return time_loop(lambda: f(va), n, 1, cfg.loop_repeats)
    if libs.kiln is not None:
        attempt(row, "kiln", lambda: run(libs.kiln, libs.knp, True))
    if libs.jax is not None:
        attempt(row, "jax", lambda: run(libs.jax, libs.jjnp, False))
    attempt(row, "numpy", lambda: time_loop(lambda: vs @ mat.T, n, 1, cfg.loop_repeats))
    return row


def bench_eager(libs, cfg):
    row = Row("eager x*2+1 8")
    x = np.arange(8, dtype=np.float32)
    n = cfg.loop_n

    def run(jnp, check):
        xa = block(jnp.asarray(x))
        if check:
            checked(row, np.asarray(block(xa * 2 + 1)), x.astype(np.float64) * 2 + 1, 0)
        return time_loop(lambda: xa * 2 + 1, n, 1, cfg.loop_repeats)
    if libs.kiln is not None:
        attempt(row, "kiln", lambda: run(libs.knp, True))
    if libs.jax is not None:
        attempt(row, "jax", lambda: run(libs.jjnp, False))
    attempt(row, "numpy", lambda: time_loop(lambda: x * 2 + 1, n, 1, cfg.loop_repeats))
    return row


# ---- compile: fresh subprocesses ----

_COMPILE_SRC = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    lib, work = sys.argv[1], sys.argv[2]
    if lib == "kiln":
        import kiln as mod
        import kiln.numpy as jnp
    else:
        import jax as mod
        mod.config.update("jax_enable_compilation_cache", False)
        import jax.numpy as jnp
    if work == "selu":
        x = jnp.asarray(np.random.default_rng(5).standard_normal(1 << 22, dtype=np.float32))
        x.block_until_ready()
        def selu(x):
            return 1.05 * jnp.where(x > 0, x, 1.67 * jnp.exp(x) - 1.67)
        args = (x,)
        fn = selu
    elif work.startswith("transformer"):  # examples/transformer.py, L layers
        sys.path.insert(0, sys.argv[3])
        import transformer
        fn = transformer.make_step(mod, jnp, jit=False)
        args = (mod.device_put(transformer.init_params(int(work[len("transformer"):]))),
                mod.device_put(transformer.tokens()))
        mod.block_until_ready(args)
    elif work.startswith("chain"):  # x = tanh(x * 1.01 + 0.5) - x * 0.1, unrolled, on 16 elements
        n = int(work[len("chain"):])
        def fn(x):
            for _ in range(n):
                x = jnp.tanh(x * 1.01 + 0.5) - x * 0.1
            return x
        args = (jnp.asarray(np.linspace(-1, 1, 16).astype(np.float32)),)
    else:  # the mlp step: 256x256 -> 512 (tanh) -> 10, log_softmax cross-entropy, SGD through grad
        rng = np.random.default_rng(6)
        x = jnp.asarray(rng.standard_normal((256, 256), dtype=np.float32))
        y = jnp.asarray(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 256)])
        params = [(jnp.asarray(rng.standard_normal((256, 512), dtype=np.float32) / 16), jnp.zeros(512)),
                  (jnp.asarray(rng.standard_normal((512, 10), dtype=np.float32) / 23), jnp.zeros(10))]
        def loss(params, x, y):
            (w1, b1), (w2, b2) = params
            h = jnp.tanh(x @ w1 + b1)
            return -jnp.mean(jnp.sum(y * mod.nn.log_softmax(h @ w2 + b2, axis=-1), axis=-1))
        def fn(params, x, y):
            g = mod.grad(loss)(params, x, y)
            return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, g)]
        args = (params, x, y)
        mod.block_until_ready(args)
    t0 = time.perf_counter()
    f = mod.jit(fn)
    out = f(*args)
    mod.block_until_ready(out)
    first = time.perf_counter() - t0
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        mod.block_until_ready(f(*args))
        runs.append(time.perf_counter() - t0)
    runs.sort()
    print(json.dumps({"first": first, "steady": runs[2]}))
""")


def compile_once(lib, cache_dir=None, work="selu"):
    env = dict(os.environ)
    env["PYTHONPATH"] = KILN_PYTHON + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    if cache_dir is not None:
        env["KILN_CACHE_DIR"] = cache_dir
    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    p = subprocess.run([sys.executable, "-c", _COMPILE_SRC, lib, work, examples], env=env, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise RuntimeError(f"subprocess exit {p.returncode}: {tail}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def bench_compile(libs, cfg):
    rows = []
    for work, label, target in (("selu", "jit(selu)", "<=0.5x jax"), ("mlp", "jit(mlp step)", "<=0.5x jax")):
        rows += compile_rows(cfg, work, label, target)
    return rows


def bench_chain(libs, cfg):
    """Compile + first call of the unrolled elementwise chain (one kernel), 200 and 1,000 steps."""
    rows = []
    for n in (200, 1000):
        rows += compile_rows(cfg, f"chain{n}", f"chain of {n}", "<=0.5x jax", warm=False)
    return rows


def bench_transformer(libs, cfg):
    """examples/transformer.py at L = 2 and 8: compile + first call (fresh processes, empty
    caches) and the steady step time in the same processes."""
    rows = []
    for layers in (2, 8):
        cold, = compile_rows(cfg, f"transformer{layers}", f"transformer step L={layers}", "<=0.4x jax", warm=False,
                             ratio=0.4)
        step = Row(f"transformer step L={layers}", "<=0.8x jax", 0.8)
        step.times["kiln"] = cold.extra.get("kiln_steady_call_s")
        step.times["jax"] = cold.extra.get("jax_steady_call_s")
        step.errors.update(cold.errors)
        rows += [cold, step]
    return rows


def compile_rows(cfg, work, label, target, warm=True, ratio=0.5):
    row = Row(f"compile {label} cold", target, ratio)
    warm_row = Row(f"compile {label} warm disk cache") if warm else None
    reps = cfg.compile_repeats

    def kiln_cold_and_warm():
        cold, warm, steady = [], [], []
        for _ in range(reps):
            with tempfile.TemporaryDirectory(prefix="kiln-bench-cache-") as d:
                r = compile_once("kiln", d, work)
                cold.append(r["first"])
                steady.append(r["steady"])
                files = sum(len(fs) for _, _, fs in os.walk(d))
                if warm_row is not None:
                    warm.append(compile_once("kiln", d, work)["first"])
        row.extra["kiln_steady_call_s"] = statistics.median(steady)
        row.extra["kiln_cache_files_after_cold_run"] = files
        if warm_row is not None:
            warm_row.times["kiln"] = statistics.median(warm)
            warm_row.extra["kiln_cache_files"] = files
        return statistics.median(cold)

    def jax_cold():
        runs = [compile_once("jax", None, work) for _ in range(reps)]
        row.extra["jax_steady_call_s"] = statistics.median(r["steady"] for r in runs)
        return statistics.median(r["first"] for r in runs)
    attempt(row, "kiln", kiln_cold_and_warm)
    attempt(row, "jax", jax_cold)
    if warm_row is None:
        return [row]
    if "kiln" in row.errors:
        warm_row.errors["kiln"] = row.errors["kiln"]
    warm_row.times["jax"] = row.times.get("jax")
    warm_row.extra["note"] = "jax column: JAX cold (its persistent cache is off)"
    return [row, warm_row]


# ---- optional transforms ----

def mlp_setup():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((256, 256), dtype=np.float32)
    labels = rng.integers(0, 10, 256)
    y = np.eye(10, dtype=np.float32)[labels]
    params = [(rng.standard_normal((256, 512), dtype=np.float32) / 16, np.zeros(512, np.float32)),
              (rng.standard_normal((512, 10), dtype=np.float32) / np.float32(np.sqrt(512)),
               np.zeros(10, np.float32))]
    return x, y, params


def mlp_step_fn(mod, jnp, lr=0.1):
    def loss(params, x, y):
        (w1, b1), (w2, b2) = params
        h = jnp.tanh(x @ w1 + b1)
        logits = h @ w2 + b2
        return -jnp.mean(jnp.sum(y * mod.nn.log_softmax(logits, axis=-1), axis=-1))

    def step(params, x, y):
        g = mod.grad(loss)(params, x, y)
        return [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(params, g)]
    return step


def mlp_step_np(params, x, y, lr=0.1):
    (w1, b1), (w2, b2) = params
    h = np.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    n = x.shape[0]
    dlogits = (p - y) / n
    gw2 = h.T @ dlogits
    gb2 = dlogits.sum(0)
    dh = (dlogits @ w2.T) * (1 - h * h)
    gw1 = x.T @ dh
    gb1 = dh.sum(0)
    return [(w1 - lr * gw1, b1 - lr * gb1), (w2 - lr * gw2, b2 - lr * gb2)]


def bench_mlp(libs, cfg):
    row = Row("mlp step 256x256->512->10", "<=1.0x jax", 1.0)
    missing = None
    if libs.kiln is not None and not hasattr(libs.kiln, "grad"):
        missing = "n/a (not implemented yet)"
    x, y, params = mlp_setup()
    p64 = [(w.astype(np.float64), b.astype(np.float64)) for w, b in params]
    ref = mlp_step_np(p64, x.astype(np.float64), y.astype(np.float64))
    ref_flat = np.concatenate([a.ravel() for wb in ref for a in wb])

    def flat(out):
        return np.concatenate([np.asarray(a, np.float64).ravel() for wb in out for a in wb])

    def mk(mod, jnp):
        def make():
            f = mod.jit(mlp_step_fn(mod, jnp))
            pa = [(block(jnp.asarray(w)), block(jnp.asarray(b))) for w, b in params]
            xa, ya = block(jnp.asarray(x)), block(jnp.asarray(y))
            g = lambda: f(pa, xa, ya)  # noqa: E731
            return _FlatCall(g, flat)
        return make
    kernel_row(row, libs, cfg, mk(libs.kiln, libs.knp), mk(libs.jax, libs.jjnp),
               lambda: mlp_step_np(params, x, y), ref_flat, 1e-5, cfg.repeats, missing)
    return row


class _FlatCall:
    """A callable whose first blocked result is flattened for checking; later calls return raw outputs."""

    def __init__(self, g, flat):
        self.g, self.flat, self.first = g, flat, True

    def __call__(self):
        out = self.g()
        if self.first:
            self.first = False
            block(out)
            return self.flat(out)
        return out


def bench_vmap(libs, cfg):
    row = Row("vmap matvec 150x100, 10", "<=0.5x jax", 0.5)
    missing = None
    if libs.kiln is not None and not hasattr(libs.kiln, "vmap"):
        missing = "n/a (not implemented yet)"
    rng = np.random.default_rng(7)
    mat = rng.standard_normal((150, 100), dtype=np.float32)
    vs = rng.standard_normal((10, 100), dtype=np.float32)
    ref = vs.astype(np.float64) @ mat.astype(np.float64).T

    def mk(mod, jnp):
        def make():
            ma = block(jnp.asarray(mat))
            f = mod.jit(mod.vmap(lambda v: ma @ v))
            va = block(jnp.asarray(vs))
            return lambda: f(va)
        return make
    kernel_row(row, libs, cfg, mk(libs.kiln, libs.knp), mk(libs.jax, libs.jjnp),
               lambda: vs @ mat.T, ref, 1e-5, cfg.loop_repeats * 20, missing)
    return row


# ----------------------------------------------------------------------------------------------
# output

def fmt_time(t):
    if t is None:
        return "-"
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} us"


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}x"


def render(rows):
    head = ["workload", "kiln", "jax", "numpy", "kiln/jax", "kiln/numpy", "target", "met?", "check"]
    body = []
    for r in rows:
        cells = [r.name]
        for lib in ("kiln", "jax", "numpy"):
            err = r.errors.get(lib) if r.times[lib] is None else None
            cells.append(fmt_time(r.times[lib]) if err is None
                         else err if err.startswith("n/a") else f"ERROR: {err}")
        met = r.met()
        cells += [fmt_ratio(r.ratio("jax")), fmt_ratio(r.ratio("numpy")), r.target,
                  "-" if met is None else ("yes" if met else "NO"), r.check or "-"]
        body.append(cells)
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    line = lambda cs: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cs, widths)) + " |"  # noqa: E731
    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(b) for b in body]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (rougher numbers)")
    ap.add_argument("--json", metavar="PATH", help="also save the results as JSON")
    ap.add_argument("--only", metavar="NAMES", help="comma-separated subset of: " + ",".join(ALL)
                    + " (matmul selects both precisions)")
    args = ap.parse_args(argv)

    names = ALL
    if args.only:
        want = [w.strip() for w in args.only.split(",") if w.strip()]
        expanded = []
        for w in want:
            if w == "matmul":
                expanded += ["matmul_highest", "matmul_default"]
            elif w in ALL:
                expanded.append(w)
            else:
                ap.error(f"--only: unknown workload {w!r}; choose from {', '.join(ALL)} or matmul")
        names = [n for n in ALL if n in expanded]

    cfg = argparse.Namespace(
        warmup=2 if args.quick else 3,
        repeats=5 if args.quick else 21,
        matmul_repeats=2 if args.quick else 5,
        loop_n=300 if args.quick else 2000,
        loop_repeats=3 if args.quick else 7,
        compile_repeats=1 if args.quick else 3,
    )
    libs = Libs()
    info = machine_info(libs)
    print(f"# kiln bench ({'quick' if args.quick else 'full'}) on {info['cpu']} ({info['cores']} cores), "
          f"{info['os']}, Python {info['python']}")
    print(f"# kiln {info['kiln']} {info['kiln_devices']}, jax {info['jax']}, numpy {info['numpy']}")
    for lib, e in libs.errors.items():
        print(f"# {lib}: {e}")

    table = {
        "selu": bench_selu, "sumsq": bench_sumsq, "softmax": bench_softmax,
        "matmul_highest": lambda l, c: bench_matmul(l, c, "HIGHEST"),
        "matmul_default": lambda l, c: bench_matmul(l, c, "DEFAULT"),
        "dispatch": bench_dispatch, "dispatch_tree": bench_dispatch_tree, "eager": bench_eager, "compile": bench_compile,
        "mlp_step": bench_mlp, "vmap_matvec": bench_vmap, "vmap_dispatch": bench_vmap_dispatch,
        "chain": bench_chain, "transformer": bench_transformer,
    }
    rows = []
    for n in names:
        t0 = time.perf_counter()
        print(f"# running {n} ...", file=sys.stderr, flush=True)
        try:
            got = table[n](libs, cfg)
        except Exception as e:  # noqa: BLE001 - a broken workload still gets a row
            got = Row(n)
            got.errors["kiln"] = f"{type(e).__name__}: {e}".splitlines()[0][:160]
        rows += got if isinstance(got, list) else [got]
        print(f"#   {n} took {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    print(render(rows))
    print()
    for r in rows:
        met = r.met()
        if met is not None:
            print(f"target {r.name}: {r.target}: {'met' if met else 'NOT met'}"
                  f" (kiln/jax {fmt_ratio(r.ratio('jax'))}"
                  + (f", kiln/numpy {fmt_ratio(r.ratio('numpy'))}" if r.numpy_factor else "") + ")")
        for lib, e in r.errors.items():
            if r.times[lib] is None:
                print(f"{r.name}: {lib}: {e}")
        for k, v in r.extra.items():
            print(f"{r.name}: {k} = {fmt_time(v) if isinstance(v, float) and k.endswith('_s') else v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "config": vars(cfg), "rows": [r.to_json() for r in rows]}, f, indent=1)
        print(f"# saved {args.json}")


if __name__ == "__main__":
    main()
