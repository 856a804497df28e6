"""An ordinary JAX program (random data, an MLP, Adam written with tree_map, value_and_grad under
jit, per-example gradients with vmap, lax.scan, hessian) that runs unchanged on kiln:

    PYTHONPATH=python python3 examples/jax_program.py        # kiln
    python3 examples/jax_program.py jax                       # the same file on JAX

Both print the same numbers (tests/test_programs.py pins JAX's)."""
import sys, numpy as np
if len(sys.argv) < 2 or sys.argv[1] != "jax":
    import kiln as jax, kiln.numpy as jnp
else:
    import jax, jax.numpy as jnp

key = jax.random.PRNGKey(0)
k1, k2, k3 = jax.random.split(key, 3)
X = jax.random.normal(k1, (128, 8))
w_true = jax.random.normal(k2, (8,))
y = X @ w_true + 0.1 * jax.random.normal(k3, (128,))

def init(key):
    ka, kb = jax.random.split(key)
    return {"w1": jax.random.normal(ka, (8, 16)) * 0.3, "b1": jnp.zeros(16),
            "w2": jax.random.normal(kb, (16,)) * 0.3, "b2": jnp.zeros(())}

def model(p, x):
    h = jax.nn.gelu(x @ p["w1"] + p["b1"])
    return h @ p["w2"] + p["b2"]

def loss(p, x, y):
    return jnp.mean((model(p, x) - y) ** 2) + 1e-4 * sum(jnp.sum(v ** 2) for v in jax.tree_util.tree_leaves(p))

@jax.jit
def adam_step(p, m, v, t, x, y):
    l, g = jax.value_and_grad(loss)(p, x, y)
    m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
    v = jax.tree_util.tree_map(lambda a, b: 0.999 * a + 0.001 * b * b, v, g)
    mh = jax.tree_util.tree_map(lambda a: a / (1 - 0.9 ** t), m)
    vh = jax.tree_util.tree_map(lambda a: a / (1 - 0.999 ** t), v)
    p = jax.tree_util.tree_map(lambda a, b, c: a - 0.01 * b / (jnp.sqrt(c) + 1e-8), p, mh, vh)
    return p, m, v, l

p = init(jax.random.PRNGKey(1))
m = jax.tree_util.tree_map(jnp.zeros_like, p)
v = jax.tree_util.tree_map(jnp.zeros_like, p)
for t in range(1, 201):
    p, m, v, l = adam_step(p, m, v, float(t), X, y)
print("final loss %.6f" % float(l))
per_ex = jax.vmap(jax.grad(lambda p, x, y: jnp.mean((model(p, x[None]) - y) ** 2)), in_axes=(None, 0, 0))(p, X[:4], y[:4])
print("per-example grad norms", np.round(np.asarray(jnp.sqrt(jnp.sum(per_ex["w1"] ** 2, axis=(1, 2)))), 5))
def body(c, x):
    c = c * 0.5 + jnp.tanh(x)
    return c, c.sum()
c, ys = jax.lax.scan(body, jnp.zeros(8), X[:10])
print("scan", np.round(float(c.sum()), 5), np.round(np.asarray(ys[:3]), 5))
H = jax.hessian(lambda w: jnp.sum(jnp.sin(X[:3] @ w)))(w_true)
print("hessian trace %.5f" % float(jnp.trace(H)))
print("logsumexp", np.round(float(jax.nn.logsumexp(X[0])), 5), "argsort", np.asarray(jnp.argsort(X[0]))[:4])
print("take", np.round(np.asarray(X[jnp.array([3, 1, 7]), 2]), 5), "where", float(jnp.where(X > 0, X, 0).sum()))
