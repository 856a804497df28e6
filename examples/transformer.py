"""A small causal transformer trained with SGD, written against JAX's API: the same code runs on
kiln (`import kiln as jax`) and on JAX. bench/ times its training step against JAX's, and the
GPU tests check that kiln runs the whole step on the device.

The model: token embedding (tied with the output layer), L pre-norm layers of causal multi-head
attention (einsum scores, a `tril` mask, softmax) and a GELU MLP of 4x the width, a final
layernorm and a log-softmax cross-entropy loss.

    python3 examples/transformer.py [--layers 2] [--steps 20]
"""
import argparse
import time

import numpy as np

VOCAB, WIDTH, HEADS, BATCH, SEQ = 256, 128, 4, 8, 64


def init_params(layers, seed=0, width=WIDTH, vocab=VOCAB):
    """float32 NumPy parameters (a list of dicts: the embedding, then one dict per layer)."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    params = [{"embed": (0.02 * rng.standard_normal((vocab, width))).astype(np.float32),
               "ln_g": np.ones(width, np.float32), "ln_b": np.zeros(width, np.float32)}]
    for _ in range(layers):
        params.append({"ln1_g": np.ones(width, np.float32), "ln1_b": np.zeros(width, np.float32),
                       "wqkv": w(width, 3 * width), "wo": w(width, width),
                       "ln2_g": np.ones(width, np.float32), "ln2_b": np.zeros(width, np.float32),
                       "w1": w(width, 4 * width), "b1": np.zeros(4 * width, np.float32),
                       "w2": w(4 * width, width), "b2": np.zeros(width, np.float32)})
    return params


def tokens(seed=1, batch=BATCH, seq=SEQ, vocab=VOCAB):
    """int32 (batch, seq + 1) token ids: inputs are [:, :-1], targets [:, 1:]."""
    return np.random.default_rng(seed).integers(0, vocab, (batch, seq + 1)).astype(np.int32)


def make_step(jax, jnp, lr=0.05, heads=HEADS, jit=True, remat=False):
    """The SGD step (params, tokens) -> (new params, loss) over the given JAX-like modules,
    jitted unless jit=False; remat=True checkpoints every layer (jax.checkpoint: its activations
    are recomputed in the backward pass instead of kept)."""

    def layernorm(x, g, b):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b

    def attention(p, x):
        b, t, d = x.shape
        qkv = x @ p["wqkv"]
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads).astype(np.float32)
        mask = jnp.tril(jnp.ones((t, t), dtype=bool))
        s = jnp.where(mask, s, -1e9)
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, d)
        return o @ p["wo"]

    def mlp(p, x):
        return jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]

    def loss(params, toks):
        x_in, target = toks[:, :-1], toks[:, 1:]
        emb = params[0]["embed"]
        x = emb[x_in]
        def block(p, x):
            x = x + attention(p, layernorm(x, p["ln1_g"], p["ln1_b"]))
            return x + mlp(p, layernorm(x, p["ln2_g"], p["ln2_b"]))

        for p in params[1:]:
            x = (jax.checkpoint(block) if remat else block)(p, x)
        x = layernorm(x, params[0]["ln_g"], params[0]["ln_b"])
        logits = x @ emb.T
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, target[..., None], axis=-1))

    def step(params, toks):
        value, grads = jax.value_and_grad(loss)(params, toks)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), value

    return jax.jit(step) if jit else step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--jax", action="store_true", help="run with JAX instead of kiln")
    args = ap.parse_args()
    if args.jax:
        import jax
        import jax.numpy as jnp
    else:
        import kiln as jax
        import kiln.numpy as jnp
    step = make_step(jax, jnp)
    params, toks = init_params(args.layers), tokens()
    t0 = time.perf_counter()
    params, loss = step(params, toks)
    print(f"step 0: loss {float(loss):.4f} (compile + first call {time.perf_counter() - t0:.2f} s)")
    t0 = time.perf_counter()
    for i in range(1, args.steps):
        params, loss = step(params, toks)
    jax.block_until_ready(params)
    dt = (time.perf_counter() - t0) / max(args.steps - 1, 1)
    print(f"step {args.steps - 1}: loss {float(loss):.4f} ({dt * 1e3:.2f} ms per step)")


if __name__ == "__main__":
    main()
