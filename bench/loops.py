"""Loop workloads (issue 11) against JAX, in one process and one run, on the default backend of
each library (the GPU where there is one, else the CPU).

    python3 bench/loops.py [--only rnn,while,fori,compile] [--reps N]

- rnn: a 2,000-step scan, h = tanh(h @ W + x_t), batch 64, hidden 256 (forward, under jit);
- rnn_grad: its gradient with respect to W;
- while: per-iteration cost of a while_loop over an 8-element carry with a data-dependent stop
  (10,000 iterations);
- fori: 1,000 steps of z.at[i].set(2.0 * i) on 2^20 float32 elements;
- scan_small, cond_scan, nested: per trip of a 100,000-trip scan over 4-float xs with a scalar
  y, of a 100,000-trip scan whose body is a cond, of a 10,000-trip scan whose body is a 10-trip
  scan (the loops' own overhead); cond_scan2k: cond_scan of 2,000 trips (on a GPU, a scan that
  fits one CUDA graph: its conds become conditional nodes);
- compile: jit(f).lower(x).compile() of a scan of 10 and of 100,000 steps of a small body.

Each result is checked against the other library's before it is timed.
"""
import argparse
import os
import tempfile
import time

import numpy as np

from timing import timed


def workloads(lib, jnp, lax):
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
    X = rng.standard_normal((2000, 64, 256)).astype(np.float32)
    W_, X_ = jnp.asarray(W), jnp.asarray(X)

    def rnn(w, xs):
        def cell(h, x):
            h = jnp.tanh(h @ w + x)
            return h, None
        return lax.scan(cell, jnp.zeros((64, 256), jnp.float32), xs)[0]

    rnn_j = lib.jit(rnn)
    rnn_g = lib.jit(lib.grad(lambda w, xs: jnp.sum(rnn(w, xs) ** 2)))

    def wl(x):
        return lax.while_loop(lambda v: v[0] < 10000.0, lambda v: v + 1.0, x)

    wl_j = lib.jit(wl)
    x8 = jnp.zeros(8, jnp.float32)
    fori_j = lib.jit(lambda z: lax.fori_loop(0, 1000, lambda i, z: z.at[i].set(2.0 * i), z))
    z = jnp.zeros(1 << 20, jnp.float32)
    # small bodies, where the loop's own overhead shows: a scan over xs with a scalar y, a scan
    # whose body is a cond, a scan nested in a scan (per trip of the outer one)
    xs_small = jnp.asarray(rng.standard_normal((100000, 4)).astype(np.float32))
    scan_small = lib.jit(lambda xs: lax.scan(lambda c, x: (c * 0.9 + x, c.sum()), jnp.zeros(4, jnp.float32), xs))
    cond_scan = lib.jit(lambda c: lax.scan(
        lambda c, _: (lax.cond(c[0] > 0.5, lambda v: v * 0.5, lambda v: v + 0.3, c), None), c, None, length=100000)[0])
    cond_scan2k = lib.jit(lambda c: lax.scan(
        lambda c, _: (lax.cond(c[0] > 0.5, lambda v: v * 0.5, lambda v: v + 0.3, c), None), c, None, length=2000)[0])
    nested = lib.jit(lambda c: lax.scan(
        lambda c, _: (lax.scan(lambda d, _: (d * 0.99 + 0.01, None), c, None, length=10)[0], None), c, None,
        length=10000)[0])
    c4 = jnp.ones(4, jnp.float32)
    return {"rnn": (lambda: rnn_j(W_, X_), 1), "rnn_grad": (lambda: rnn_g(W_, X_), 1), "while": (lambda: wl_j(x8), 10000),
            "fori": (lambda: fori_j(z), 1), "scan_small": (lambda: scan_small(xs_small), 100000),
            "cond_scan": (lambda: cond_scan(c4), 100000), "cond_scan2k": (lambda: cond_scan2k(c4), 2000), "nested": (lambda: nested(c4), 10000)}


def compile_time(lib, jnp, lax, n):
    """jit(f).lower(x).compile() of a scan of n steps (each library's ahead-of-time compile: no
    run), a body of its own per n so that no compile cache serves one scan from the other."""
    k = 0.1 + 1e-7 * n

    def f(c):
        return lax.scan(lambda c, _: (jnp.sin(c) * 0.5 + k, None), c, None, length=n)[0]
    x = jnp.ones(16, jnp.float32)
    t = time.perf_counter()
    lib.jit(f).lower(x).compile()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="rnn,rnn_grad,while,fori,scan_small,cond_scan,cond_scan2k,nested,compile")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    only = args.only.split(",")
    os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp())  # compiles are compiles, not disk cache hits
    import jax
    import jax.numpy as jjnp
    import kiln
    import kiln.numpy as knp
    libs = {"kiln": (kiln, knp, kiln.lax), "jax": (jax, jjnp, jax.lax)}
    print(f"kiln backend {kiln.default_backend()}, jax backend {jax.default_backend()}")
    sync = lambda r: [np.asarray(a) for a in jax.tree_util.tree_leaves(r)]  # noqa: E731
    made = {name: workloads(*l) for name, l in libs.items()}
    for w in only:
        if w == "compile":
            for name, l in libs.items():  # each library's compiler warmed up on another scan
                np.asarray(l[0].jit(lambda v: l[2].scan(lambda c, _: (l[1].cos(c) * 2.0, None), v, None, length=3)[0])(
                    l[1].ones(3, l[1].float32)))
            for n in (10, 100_000):
                k, j = compile_time(*libs["kiln"], n), compile_time(*libs["jax"], n)
                print(f"compile scan {n:>6} steps: kiln {k * 1e3:8.1f} ms  jax {j * 1e3:8.1f} ms  ratio {k / j:.2f}")
            continue
        (fk, per), (fj, _) = made["kiln"][w], made["jax"][w]
        a, b = sync(fk()), sync(fj())
        for u, v in zip(a, b):  # TF32 products (both libraries' default) over 2,000 steps drift
            assert np.abs(u - v).max() <= 2e-2 * max(np.abs(v).max(), 1e-3), (w, np.abs(u - v).max())
        tk, tj = timed(fk, sync, args.reps), timed(fj, sync, args.reps)
        unit = "us/iter" if per > 1 else "ms"
        scale = 1e6 / per if per > 1 else 1e3
        print(f"{w:10s} kiln {tk * scale:10.3f} {unit}  jax {tj * scale:10.3f} {unit}  ratio {tk / tj:.2f}")


if __name__ == "__main__":
    main()
