"""Dispatch time of JAX libraries' jit wrappers, kiln against JAX (issue 33's target: <= 0.5x JAX).

Needs the ecosystem harness's libraries (`make ecosystem` installs them in build/ecosystem/site).
Each side runs in its own process: JAX as installed, kiln through the import hook
(tests/ecosystem/hook). Every call is timed back to back with the result blocked on at the end
(pipelined), after 50 warm-up calls; the best of 5 rounds. Then the pytree walks themselves (tree_flatten, unflatten,
tree_map of a 38-leaf model tree), which every jit call and every library wrapper makes.

    python3 bench/ecosystem_dispatch.py
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = os.path.join(ROOT, "build", "ecosystem", "site")


def _bench(jax, f, *a, n=2000):
    """Microseconds per call: the best of 5 rounds of n/5 pipelined calls (this machine's noise
    is a VM's: single rounds of the same build differ by 1.5x)."""
    for _ in range(50):
        jax.block_until_ready(f(*a))
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n // 5):
            r = f(*a)
        jax.block_until_ready(r)
        best = min(best, (time.perf_counter() - t) / (n // 5) * 1e6)
    return best


def _side():
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    from flax import nnx

    x = jnp.ones((8, 16))
    mlp = eqx.nn.MLP(16, 16, 32, 2, key=jax.random.PRNGKey(0))

    class M(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(16, 32, rngs=rngs)
            self.l2 = nnx.Linear(32, 16, rngs=rngs)

        def __call__(self, v):
            return self.l2(jax.nn.relu(self.l1(v)))
    rows = {
        "jax.jit(x * 2 + 1), 8x16": (jax.jit(lambda v: v * 2.0 + 1.0), (x,), 2000),
        "eqx.filter_jit(vmap(MLP))": (eqx.filter_jit(lambda m, v: jax.vmap(m)(v)), (mlp, x), 2000),
        "eqx.filter_jit(filter_grad(MLP loss))": (
            eqx.filter_jit(eqx.filter_grad(lambda m, v: jnp.sum(jax.vmap(m)(v)))), (mlp, x), 500),
        "nnx.jit(2-layer module)": (nnx.jit(lambda m, v: m(v)), (M(nnx.Rngs(0)), x), 2000),
    }
    for name, (f, args, n) in rows.items():
        print(f"{name}\t{_bench(jax, f, *args, n=n):.1f}", flush=True)
    # the pytree walks every call makes (a 12-layer model's parameters: 38 leaves)
    import collections
    P = collections.namedtuple("P", "w b")
    tree = {"layers": [{"w": x, "b": x, "ln": (x, None)} for _ in range(12)], "emb": P(x, 3.0)}
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    for name, f in (("tree_flatten(38-leaf model tree)", lambda: jax.tree_util.tree_flatten(tree)),
                    ("treedef.unflatten(38 leaves)", lambda: treedef.unflatten(leaves)),
                    ("tree_map(identity, 38-leaf tree)", lambda: jax.tree_util.tree_map(lambda v: v, tree))):
        for _ in range(200):
            f()
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(4000):
                f()
            best = min(best, (time.perf_counter() - t) / 4000 * 1e6)
        print(f"{name}\t{best:.1f}", flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--side":
        return _side()
    results = {}
    for side, path in (("jax", SITE), ("kiln", os.pathsep.join([os.path.join(ROOT, "tests", "ecosystem", "hook"),
                                                                 os.path.join(ROOT, "python"), SITE]))):
        env = dict(os.environ, PYTHONPATH=path, JAX_PLATFORMS="cpu")
        out = subprocess.run([sys.executable, __file__, "--side"], env=env, capture_output=True, text=True,
                             check=True).stdout
        results[side] = dict(line.split("\t") for line in out.strip().splitlines())
    print(f"| call | kiln | JAX | kiln/JAX |\n|---|---|---|---|")
    for name, j in results["jax"].items():
        k = results["kiln"][name]
        print(f"| {name} | {float(k):.1f} us | {float(j):.1f} us | {float(k) / float(j):.2f}x |")


if __name__ == "__main__":
    main()
