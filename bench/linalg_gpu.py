"""GPU linear algebra (issue 13, item 4: cuSOLVER) against JAX (and CuPy when present), in one
process and one run, float32, on the default backend of each library.

    python3 bench/linalg_gpu.py [--reps N] [--small] [--numpy]

- eigh_b, svd_b, chol_b: a batch of 512 matrices 32 x 32 (kiln: syevjBatched, gesvdjBatched,
  potrfBatched);
- eigh_1, svd_1, chol_1: one 4096 x 4096 matrix (--small: 1024; kiln: syevd, gesvd, potrf).

eigh with eigenvectors, svd with u and vh (full_matrices=False), under jit. The inputs are
symmetric positive definite (a a^T / n + I), so every workload takes the same one. Each result is
checked against NumPy in float64 before it is timed (eigenvalues, singular values, the factor).
Prints one line per workload: kiln's median time in ms, and each peer's with its ratio to kiln's
(--numpy adds NumPy on the CPU as a peer; slow at 4096).
"""
import argparse

import numpy as np

from timing import timed


def spd(rng, shape):
    a = rng.standard_normal(shape)
    n = shape[-1]
    return (a @ np.swapaxes(a, -1, -2) / n + np.eye(n)).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--numpy", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    big = 1024 if args.small else 4096
    inputs = {"b": spd(rng, (512, 32, 32)), "1": spd(rng, (big, big))}
    wide = {k: v.astype(np.float64) for k, v in inputs.items()}
    # what each workload's result is checked by: NumPy float64, and the result's part it compares
    ref = {}
    for k in inputs:
        ref["eigh_" + k] = np.linalg.eigvalsh(wide[k])
        ref["svd_" + k] = np.linalg.svd(wide[k], compute_uv=False)
        ref["chol_" + k] = np.linalg.cholesky(wide[k])
    pick = {"eigh": lambda out: out[0], "svd": lambda out: out[1], "chol": lambda out: out}
    libs = {}
    import kiln
    import kiln.numpy as kjnp
    libs["kiln"] = (kiln, kjnp, kiln.block_until_ready)
    try:
        import jax
        import jax.numpy as jjnp
        libs["jax"] = (jax, jjnp, jax.block_until_ready)
    except ImportError:
        pass
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount():
            libs["cupy"] = (None, cupy, lambda x: cupy.cuda.Device().synchronize())
    except Exception:
        pass
    if args.numpy:
        libs["numpy"] = (None, np, lambda x: x)
    times = {}
    for name, (top, jnp, sync) in libs.items():
        dev = (lambda x: top.device_put(x)) if top is not None else (
            (lambda x: jnp.asarray(x)) if name == "cupy" else (lambda x: x))
        jit = top.jit if top is not None else (lambda f: f)
        ops = {"eigh": jit(lambda x: jnp.linalg.eigh(x)),
               "svd": jit(lambda x: jnp.linalg.svd(x, full_matrices=False)),
               "chol": jit(lambda x: jnp.linalg.cholesky(x))}
        for k, x in inputs.items():
            xd = dev(x)
            for op, f in ops.items():
                w = f"{op}_{k}"
                got = pick[op](f(xd))
                got = np.asarray(got.get() if name == "cupy" else got, np.float64)
                scale = np.abs(ref[w]).max()
                err = np.abs(got - ref[w]).max() / scale
                assert err < (2e-3 if k == "1" else 1e-4), (name, w, err)
                times[name, w] = timed(lambda: f(xd), sync, args.reps)
    for w in ("eigh_b", "svd_b", "chol_b", "eigh_1", "svd_1", "chol_1"):
        k = times["kiln", w]
        peers = "  ".join(f"{n} {times[n, w] * 1e3:9.2f} ms ({times[n, w] / k:5.2f}x kiln)"
                          for n in libs if n != "kiln")
        print(f"{w:7s} kiln {k * 1e3:9.2f} ms  {peers}", flush=True)


if __name__ == "__main__":
    main()
