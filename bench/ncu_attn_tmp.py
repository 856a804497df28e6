import sys, numpy as np, kiln, kiln.numpy as jnp
b, h, t, d = 8, 16, 1024, 64
rng = np.random.default_rng(0)
q, k, v = (kiln.device_put(rng.standard_normal((b, h, t, d)).astype(np.float32)) for _ in range(3))
def attn(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
    s = jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), s, -1e9)
    return jnp.einsum("bhqk,bhkd->bhqd", kiln.nn.softmax(s, axis=-1), v)
f = kiln.jit(kiln.grad(lambda q, k, v: jnp.sum(attn(q, k, v) ** 2), argnums=(0, 1, 2))) if sys.argv[1] == "bwd" else kiln.jit(attn)
out = f(q, k, v); kiln.block_until_ready(out)
kiln._kiln.synchronize()
out = f(q, k, v); kiln.block_until_ready(out)
print("steps", list(f._cache.values())[0].exe.num_steps)
