"""The conv primitives on the CPU against JAX and kiln's composed path (issue 13): a ResNet-50
stage layer, NHWC float32, 3x3 64->64 on 56x56 (batch from argv, 8 by default), forward and the
two gradients, each jitted; best of several runs. KILN_CONV_PRIM=0 in the environment is the
composed path; this script runs both by toggling the module switch."""
import sys
import time

import numpy as np


def best(f, *args, reps=7):
    f(*args)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        r = f(*args)
        (r[0] if isinstance(r, tuple) else r).block_until_ready()
        ts.append(time.perf_counter() - t)
    return min(ts) * 1e3


def cases(lax, jit, grad, shape):
    dn = ("NHWC", "HWIO", "NHWC")
    stride = shape.get("stride", 1)

    def f(x, w):
        return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=dn)

    loss = lambda x, w: (f(x, w) ** 2).sum()
    return {"fwd": jit(f), "grad_x": jit(grad(loss, 0)), "grad_w": jit(grad(loss, 1))}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    shapes = [dict(name="resnet 3x3 64->64 56x56", hw=56, c=64, o=64, k=3),
              dict(name="1x1 64->256 56x56", hw=56, c=64, o=256, k=1),
              dict(name="3x3 s2 128->128 56x56", hw=56, c=128, o=128, k=3, stride=2),
              dict(name="3x3 3->16 32x32", hw=32, c=3, o=16, k=3)]
    if len(sys.argv) > 2:
        shapes = shapes[:int(sys.argv[2])]
    import jax
    import kiln
    mod = sys.modules["kiln.lax.conv"]
    rng = np.random.default_rng(0)
    for s in shapes:
        x = rng.standard_normal((n, s["hw"], s["hw"], s["c"]), np.float32)
        w = rng.standard_normal((s["k"], s["k"], s["c"], s["o"]), np.float32) * 0.1
        res = {}
        jc = cases(jax.lax, jax.jit, jax.grad, s)
        xj, wj = jax.numpy.asarray(x), jax.numpy.asarray(w)
        for k, fn in jc.items():
            res.setdefault(k, {})["jax"] = best(fn, xj, wj)
        for label, on in (("kiln prim", True), ("kiln composed", False)):
            mod._PRIM = on
            kc = cases(kiln.lax, kiln.jit, kiln.grad, s)
            xk, wk = kiln.numpy.asarray(x), kiln.numpy.asarray(w)
            for k, fn in kc.items():
                res[k][label] = best(fn, xk, wk)
        mod._PRIM = True
        print(f"{s['name']}, batch {n}:")
        for k, r in res.items():
            print(f"  {k:7s} " + "  ".join(f"{lab} {ms:8.2f} ms" for lab, ms in r.items())
                  + f"   prim/jax {r['kiln prim'] / r['jax']:.2f}x")


if __name__ == "__main__":
    main()
