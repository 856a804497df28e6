"""Data-parallel training over every device, written against JAX's API: the same code runs on kiln
(`import kiln as jax`) and, with --jax, on JAX, and prints JAX's numbers.

Without a GPU it asks for 8 simulated CPU devices (KILN_NUM_CPU_DEVICES for kiln, XLA's forced host
device count for JAX) before either library starts; on a machine with GPUs it uses them all.

A two-layer tanh network fits a synthetic regression (data drawn with jax.random from one key) by
SGD, its batch split over a 1-D mesh ('data') and its parameters replicated, three ways that must
agree step for step:

1. shard_map: each device takes the gradient of its piece's mean loss; shard_map's typing
   (check_vma, JAX's default) sums the gradient of the replicated parameters over the devices, so
   the step divides by the axis size; the loss is pmean'd.
2. jit with in_shardings/out_shardings over the mesh: the global step, partitioned by the compiler
   (kiln: sharding propagation with inserted collectives).
3. jit on one device, the whole batch: the reference.

    python3 examples/data_parallel.py [--steps 50] [--jax]

run(jax, jnp, lax, steps) does the whole program over the given modules and returns a Result;
tests/test_example_data_parallel.py uses it.
"""
import argparse
import os
import sys
import time
from typing import NamedTuple

import numpy as np

FEATURES, HIDDEN, OUTPUTS = 16, 32, 4
ROWS_PER_DEVICE = 32
LEARNING_RATE = 0.05


class Result(NamedTuple):
    devices: int
    losses: list          # per step, the shard_map road's
    losses_jit: list      # the partitioned jit's
    losses_single: list   # one device's
    params: dict          # the shard_map road's final parameters, as NumPy
    params_jit: dict
    params_single: dict
    seconds: dict         # per road, the time of the steps after the first


def make_data(jax, jnp, n_rows):
    key = jax.random.key(0)
    kx, kw1, kw2, kn = jax.random.split(key, 4)
    x = jax.random.normal(kx, (n_rows, FEATURES))
    w1 = jax.random.normal(kw1, (FEATURES, HIDDEN)) / np.sqrt(FEATURES)
    w2 = jax.random.normal(kw2, (HIDDEN, OUTPUTS)) / np.sqrt(HIDDEN)
    y = jnp.tanh(x @ w1) @ w2 + 0.05 * jax.random.normal(kn, (n_rows, OUTPUTS))
    return x, y


def init_params(jax, jnp):
    k1, k2 = jax.random.split(jax.random.key(1))
    init = jax.nn.initializers.glorot_normal()
    return {"hidden": {"w": init(k1, (FEATURES, HIDDEN)), "b": jnp.zeros(HIDDEN)},
            "out": {"w": init(k2, (HIDDEN, OUTPUTS)), "b": jnp.zeros(OUTPUTS)}}


def run(jax, jnp, lax, steps=50):
    from importlib import import_module
    sharding = import_module(jax.__name__ + ".sharding")
    P, NamedSharding = sharding.PartitionSpec, sharding.NamedSharding
    devices = jax.devices()
    n = len(devices)
    mesh = jax.make_mesh((n,), ("data",))
    x, y = make_data(jax, jnp, n * ROWS_PER_DEVICE)
    params0 = init_params(jax, jnp)

    def loss_fn(params, xb, yb):
        h = jnp.tanh(xb @ params["hidden"]["w"] + params["hidden"]["b"])
        pred = h @ params["out"]["w"] + params["out"]["b"]
        return jnp.mean((pred - yb) ** 2)

    def sgd(params, grads):
        return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)

    # 1. shard_map: the local gradients, summed over the devices by check_vma's typing
    def local_step(params, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        grads = jax.tree.map(lambda g: g / lax.axis_size("data"), grads)
        return sgd(params, grads), lax.pmean(loss, "data")
    step_smap = jax.jit(jax.shard_map(local_step, mesh=mesh, in_specs=(P(), P("data"), P("data")),
                                      out_specs=(P(), P())))

    # 2. the global step, partitioned over the mesh by jit
    def global_step(params, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        return sgd(params, grads), loss
    rep, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    step_jit = jax.jit(global_step, in_shardings=(rep, split, split), out_shardings=(rep, rep))

    # 3. one device, the whole batch
    step_single = jax.jit(global_step)

    out, seconds = {}, {}
    for name, step, placed in (
            ("smap", step_smap, (jax.device_put(params0, rep), jax.device_put(x, split), jax.device_put(y, split))),
            ("jit", step_jit, (jax.device_put(params0, rep), jax.device_put(x, split), jax.device_put(y, split))),
            ("single", step_single, (params0, x, y))):
        params, xb, yb = placed
        losses = []
        t0 = None
        for i in range(steps):
            params, loss = step(params, xb, yb)
            losses.append(float(loss))
            if i == 0:
                t0 = time.perf_counter()
        seconds[name] = time.perf_counter() - t0
        out[name] = (losses, jax.tree.map(np.asarray, params))
    return Result(n, out["smap"][0], out["jit"][0], out["single"][0], out["smap"][1], out["jit"][1],
                  out["single"][1], seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--jax", action="store_true", help="run on JAX instead of kiln")
    args = ap.parse_args()
    os.environ.setdefault("KILN_NUM_CPU_DEVICES", "8")
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    if args.jax:
        import jax
        import jax.numpy as jnp
        from jax import lax
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        import kiln as jax
        import kiln.numpy as jnp
        from kiln import lax
    r = run(jax, jnp, lax, args.steps)
    print(f"{jax.__name__}: {r.devices} devices, {jax.devices()[0].platform}")
    for i in list(range(0, args.steps, max(1, args.steps // 5))) + [args.steps - 1]:
        print(f"step {i:4d}  loss {r.losses[i]:.6f}  (partitioned jit {r.losses_jit[i]:.6f}, "
              f"one device {r.losses_single[i]:.6f})")
    worst = max(float(np.max(np.abs(a - b))) for part in ("hidden", "out") for k in ("w", "b")
                for a, b in ((r.params[part][k], r.params_single[part][k]),
                             (r.params_jit[part][k], r.params_single[part][k])))
    print(f"largest parameter difference from the one-device run: {worst:.2e}")
    print("seconds for the steps after the first: " + ", ".join(f"{k} {v:.3f}" for k, v in r.seconds.items()))


if __name__ == "__main__":
    main()
