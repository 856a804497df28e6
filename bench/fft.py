"""FFT workloads (issue 13) against JAX and NumPy (and CuPy on a GPU), in one process and one run,
on the default backend of each library.

    python3 bench/fft.py [--reps N] [--small]

- c2c: complex64 FFT of 2^24 points (--small: 2^20);
- rfft2: a batched 2-D rfft of 64 x 512 x 512 float32 (--small: 16 x 256 x 256);
- ifft: complex64 inverse FFT of 2^24 points;
- conv: an FFT convolution, irfft(rfft(a) * rfft(b)) of 2^22 float32 points, under jit.

Each result is checked against NumPy's before it is timed. Prints one line per workload and peer:
the median time in ms and the ratio to kiln's.
"""
import argparse

import numpy as np

from timing import timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n1 = 1 << (20 if args.small else 24)
    b, h = (16, 256) if args.small else (64, 512)
    z = (rng.standard_normal(n1) + 1j * rng.standard_normal(n1)).astype(np.complex64)
    r = rng.standard_normal((b, h, h)).astype(np.float32)
    nc = 1 << (20 if args.small else 22)
    ca, cb = rng.standard_normal(nc).astype(np.float32), rng.standard_normal(nc).astype(np.float32)
    ref = {"c2c": np.fft.fft(z), "rfft2": np.fft.rfft2(r), "ifft": np.fft.ifft(z),
           "conv": np.fft.irfft(np.fft.rfft(ca) * np.fft.rfft(cb), nc)}
    libs = {}
    import kiln
    import kiln.numpy as kjnp
    libs["kiln"] = (kiln, kjnp, lambda x: x.block_until_ready())
    try:
        import jax
        import jax.numpy as jjnp
        libs["jax"] = (jax, jjnp, lambda x: x.block_until_ready())
    except ImportError:
        pass
    libs["numpy"] = (None, np, lambda x: x)
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount():
            libs["cupy"] = (None, cupy, lambda x: cupy.cuda.Device().synchronize())
    except Exception:
        pass
    times = {}
    for name, (top, jnp, sync) in libs.items():
        dev = (lambda x: top.device_put(x)) if top is not None else (
            (lambda x: jnp.asarray(x)) if name == "cupy" else (lambda x: x))
        zd, rd, ad, bd = dev(z), dev(r), dev(ca), dev(cb)
        jit = top.jit if top is not None else (lambda f: f)
        fns = {
            "c2c": jit(lambda x: jnp.fft.fft(x)),
            "rfft2": jit(lambda x: jnp.fft.rfft2(x)),
            "ifft": jit(lambda x: jnp.fft.ifft(x)),
            "conv": jit(lambda x, y: jnp.fft.irfft(jnp.fft.rfft(x) * jnp.fft.rfft(y), nc)),
        }
        operands = {"c2c": (zd,), "rfft2": (rd,), "ifft": (zd,), "conv": (ad, bd)}
        for w, f in fns.items():
            out = f(*operands[w])
            got = np.asarray(out.get() if name == "cupy" else out)
            scale = np.abs(ref[w]).max()
            err = np.abs(got - ref[w]).max() / scale
            assert err < 1e-4, (name, w, err)
            times[name, w] = timed(lambda: f(*operands[w]), sync, args.reps)
    for w in ("c2c", "rfft2", "ifft", "conv"):
        k = times["kiln", w]
        peers = "  ".join(f"{n} {times[n, w] * 1e3:8.2f} ms ({times[n, w] / k:4.2f}x kiln)"
                          for n in libs if n != "kiln")
        print(f"{w:6s} kiln {k * 1e3:8.2f} ms  {peers}", flush=True)


if __name__ == "__main__":
    main()
