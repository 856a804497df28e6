"""Peak device memory of training steps, kiln against JAX, each library in a fresh process
(issue 12): memory_stats()['peak_bytes_in_use'] after the first step (compile included) and
after ten more, beside what the parameters and inputs take.

    python3 bench/memory.py [--only mlp,transformer2,transformer8]

- mlp: the SGD step of a 1024-2048-2048-2048-10 MLP on a batch of 512 (float32);
- transformer2/8: examples/transformer.py's SGD step (2 or 8 layers); transformer8_remat: the
  same with jax.checkpoint on every layer;
- donate1g: `params = step(params, grads)` on 1 GiB of float32 parameters with donate_argnums=0
  (issue 12's target: the peak at most 1.1 GiB above the inputs).
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import transformer
name, work = sys.argv[1], sys.argv[2]
if name == "kiln":
    import kiln as lib, kiln.numpy as jnp, kiln.nn as nn
else:
    import jax as lib, jax.numpy as jnp, jax.nn as nn
dev = lib.devices()[0]
if work == "mlp":
    rng = np.random.default_rng(0)
    sizes = [1024, 2048, 2048, 2048, 10]
    params = [(rng.standard_normal((a, b)).astype(np.float32) / 40, np.zeros(b, np.float32)) for a, b in zip(sizes, sizes[1:])]
    x = rng.standard_normal((512, 1024)).astype(np.float32)
    y = rng.integers(0, 10, 512).astype(np.int32)

    def loss(p, x, y):
        h = x
        for w, b in p[:-1]:
            h = nn.relu(h @ w + b)
        w, b = p[-1]
        return -jnp.mean(jnp.take_along_axis(nn.log_softmax(h @ w + b), y[:, None], axis=1))

    step = lib.jit(lambda p, x, y: lib.tree_util.tree_map(lambda a, g: a - 0.01 * g, p, lib.grad(loss)(p, x, y)))
    args = lib.device_put((params, x, y))
    run = lambda a: step(*a)
elif work == "donate1g":
    n = 1 << 28  # 1 GiB of float32 parameters, updated in place by a donated step
    step = lib.jit(lambda p, g: p - 0.1 * g, donate_argnums=0)
    args = [jnp.ones(n, jnp.float32), jnp.full(n, 1e-3, jnp.float32)]

    def run(a):
        a[0] = step(a[0], a[1])
        return a[0]
else:
    layers = int(work[len("transformer"):].split("_")[0])
    params, toks = transformer.init_params(layers), transformer.tokens()
    step = transformer.make_step(lib, jnp, remat=work.endswith("_remat"))
    args = lib.device_put((params, toks))
    run = lambda a: step(*a)
lib.block_until_ready(args)
inputs = dev.memory_stats()["bytes_in_use"]
lib.block_until_ready(run(args))
first = dev.memory_stats()["peak_bytes_in_use"]
for _ in range(10):
    out = run(args)
lib.block_until_ready(out)
print(json.dumps({"inputs": inputs, "first": first, "peak": dev.memory_stats()["peak_bytes_in_use"]}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="mlp,transformer2,transformer8,transformer8_remat,donate1g")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    examples = os.path.join(here, "..", "examples")
    print("| workload | library | inputs MiB | peak after 1 step MiB | peak after 11 MiB | kiln/jax peak |")
    print("|---|---|---|---|---|---|")
    for work in args.only.split(","):
        res = {}
        for name in ("kiln", "jax"):
            env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
            out = subprocess.run([sys.executable, "-c", CHILD, name, work, examples], env=env, capture_output=True,
                                 text=True, timeout=600)
            if out.returncode:
                print(f"| {work} | {name} | failed: {out.stderr.strip().splitlines()[-1][:200]} | | | |")
                continue
            res[name] = json.loads(out.stdout.strip().splitlines()[-1])
        for name, r in res.items():
            ratio = f"{r['peak'] / res['jax']['peak']:.2f}x" if name == "kiln" and "jax" in res else ""
            print(f"| {work} | {name} | {r['inputs'] / 2**20:.1f} | {r['first'] / 2**20:.1f} | {r['peak'] / 2**20:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
