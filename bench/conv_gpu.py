"""Issue 13's convolution target on the GPU: a ResNet-50 stage layer (batch 64, 56x56, 64->64
channels, 3x3, stride 1, SAME, NHWC, float32), forward and the two gradients, kiln against JAX and
PyTorch (cuDNN, channels_last, cudnn.benchmark) in one process.

    python3 bench/conv_gpu.py [--reps N] [--batch B] [--precision default|highest]

The gradients are those of sum(conv(x, w) * g) for a fixed cotangent g, so each is one backward
convolution (the forward is dead code in all three). Every result is checked against PyTorch's in
float32 (at `highest`) or to TF32's tolerance before it is timed. Prints one line per workload: the
median time in ms and each peer's ratio to kiln's.
"""
import argparse

import numpy as np

from timing import timed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--precision", default="default")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, hw, c, o = args.batch, 56, 64, 64
    x = rng.standard_normal((n, hw, hw, c)).astype(np.float32)
    w = (rng.standard_normal((3, 3, c, o)) * 0.1).astype(np.float32)
    g = rng.standard_normal((n, hw, hw, o)).astype(np.float32)
    dn = ("NHWC", "HWIO", "NHWC")
    times, outs = {}, {}

    import kiln
    import kiln.numpy as kjnp  # noqa: F401
    libs = {"kiln": kiln}
    try:
        import jax
        libs["jax"] = jax
    except ImportError:
        pass
    for name, top in libs.items():
        top.config.update("jax_default_matmul_precision", args.precision)
        lax = top.lax
        f = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)  # noqa: E731
        lin = lambda x, w, g: (f(x, w) * g).sum()  # noqa: E731
        fns = {"fwd": (top.jit(f), ()), "grad_x": (top.jit(top.grad(lin, 0)), ()),
               "grad_w": (top.jit(top.grad(lin, 1)), ())}
        xd, wd, gd = top.device_put(x), top.device_put(w), top.device_put(g)
        sync = lambda r: r.block_until_ready()  # noqa: E731
        for wl, (fn, _) in fns.items():
            a = (xd, wd) if wl == "fwd" else (xd, wd, gd)
            outs[name, wl] = np.asarray(fn(*a))
            times[name, wl] = timed(lambda: fn(*a), sync, args.reps, warm=3)
    try:
        import torch
        if torch.cuda.is_available():
            torch.backends.cudnn.benchmark = True
            torch.backends.cudnn.allow_tf32 = args.precision != "highest"
            dev = torch.device("cuda")
            cl = torch.channels_last
            xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=cl).to(dev)
            wt = torch.from_numpy(w).permute(3, 2, 0, 1).contiguous(memory_format=cl).to(dev)
            gt = torch.from_numpy(g).permute(0, 3, 1, 2).contiguous(memory_format=cl).to(dev)
            conv = torch.nn.functional.conv2d
            bwd = torch.ops.aten.convolution_backward

            def t_bwd(mask):
                return bwd(gt, xt, wt, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)

            tf = {"fwd": lambda: conv(xt, wt, padding=1),
                  "grad_x": lambda: t_bwd([True, False, False])[0],
                  "grad_w": lambda: t_bwd([False, True, False])[1]}
            back = {"fwd": lambda r: r.permute(0, 2, 3, 1), "grad_x": lambda r: r.permute(0, 2, 3, 1),
                    "grad_w": lambda r: r.permute(2, 3, 1, 0)}
            sync = lambda r: torch.cuda.synchronize()  # noqa: E731
            with torch.no_grad():
                for wl, fn in tf.items():
                    outs["torch", wl] = back[wl](fn()).cpu().numpy()
                    times["torch", wl] = timed(fn, sync, args.reps, warm=3)
            libs["torch"] = torch
    except ImportError:
        pass
    tol = 1e-4 if args.precision == "highest" else 2e-2
    ref = "torch" if "torch" in libs else "jax"
    for wl in ("fwd", "grad_x", "grad_w"):
        for name in libs:
            r, got = outs[ref, wl], outs[name, wl]
            err = np.abs(got - r).max() / np.abs(r).max()
            assert err < tol, (name, wl, err)
    print(f"device: {kiln.devices()[0]}  batch {n}  precision {args.precision}", flush=True)
    for wl in ("fwd", "grad_x", "grad_w"):
        k = times["kiln", wl]
        peers = "  ".join(f"{m} {times[m, wl] * 1e3:7.3f} ms ({times[m, wl] / k:4.2f}x kiln)" for m in libs if m != "kiln")
        print(f"{wl:7s} kiln {k * 1e3:7.3f} ms  {peers}", flush=True)


if __name__ == "__main__":
    main()
